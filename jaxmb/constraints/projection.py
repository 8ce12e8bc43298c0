r"""Constrained multibody dynamics in dependent coordinates by projection matrices (Aghili (2005),
"Control and Simulation of Motion of Constrained Multibody Systems Based on Projection Matrix
Formulation", shared/seeds/001).

A `ConstrainedSystem` is an open-tree `Model` over dependent coordinates ``q`` (n of them) plus
constraints ``Phi(q) = 0`` (m equations, possibly redundant, possibly losing rank at singular
configurations). With ``A = dPhi/dq`` (autodiff) the admissible velocities span ``N(A)`` and

    P = I - A^+ A                                   (eq. 15, the projector onto N(A))
    C qd = -A^+ Adot qd                              (eq. 16, the normal acceleration)
    M qdd + h = f - F,   F = A^T lambda              (eqs. 18-19)
    Mc qdd = P (f - h) + Cc qd                       (eq. 22, three choices of Mc: eqs. 23, 28, 29)

Here ``h`` is Aghili's: Coriolis, centrifugal *and* gravity (and external wrenches), i.e.
``h - Q_e`` in jaxmb's convention ``Gamma qdd + h = Q_e + Q_a`` (Dastranj & Mattila (2026)
eq. (13)); ``f`` is the generalized input force ``Q_a``.

Every pseudo-inverse is `jaxmb.constraints.pseudo_inverse.pinv` with the system's singular-value tolerance
(``atol``, ``rtol``), so rank loss (redundant rows, singular configurations) changes ``P``
without NaN, and gradients stay finite there too.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from jaxmb.algorithms.dynamics import inverse_dynamics, mass_matrix
from jaxmb.constraints.pseudo_inverse import ATOL, pinv
from jaxmb.multibody.checks import check_all_finite, check_finite, finite_inputs, runtime_check
from jaxmb.multibody.kinematics import frame_pose
from jaxmb.multibody.model import Model

__all__ = [
    "AbstractConstraint",
    "PointCoincidence",
    "StackedConstraints",
    "ConstrainedSystem",
    "ProjectedTerms",
    "INERTIA_FORMS",
    "constraint_residual",
    "unchecked_residual",
    "constraint_jacobian",
    "constraint_bias",
    "projector",
    "projected_terms",
    "constraint_inertia",
    "forward_dynamics",
    "constraint_force",
    "lagrange_multipliers",
    "newton_projection",
    "correct",
    "assemble",
]


class AbstractConstraint(eqx.Module):
    """Constraints that read the model (so that its lengths are differentiable leaves):
    ``Phi = constraint(model, q)``, shape (m,). Plain callables ``Phi(q)`` work as well."""

    @abc.abstractmethod
    def __call__(self, model: Model, q: Float[Array, " n"]) -> Float[Array, " m"]: ...


class PointCoincidence(AbstractConstraint):
    r"""A loop closed at a point: ``point_a`` fixed in ``frame_a`` coincides with ``point_b`` fixed
    in ``frame_b``. ``Phi = R_SE^T (p_a - p_b)`` in the axes of frame ``express_in`` (default S),
    restricted to the rows ``axes``.

    All three rows are kept by default even for a planar loop, where one of them is identically
    zero: the projection formulation takes redundant constraints as they come (Aghili (2005)
    Section 1), and the pseudo-inverse's relative tolerance drops the round-off row."""

    frame_a: str = eqx.field(static=True)
    point_a: Float[Array, 3]
    frame_b: str = eqx.field(static=True)
    point_b: Float[Array, 3]
    express_in: str | None = eqx.field(static=True, default=None)
    axes: tuple[int, ...] = eqx.field(static=True, default=(0, 1, 2))

    def __check_init__(self):
        for name, p in (("point_a", self.point_a), ("point_b", self.point_b)):
            if np.shape(p) != (3,):
                raise ValueError(
                    f"PointCoincidence: {name} must have shape (3,), got {np.shape(p)}"
                )
        if not self.axes or not set(self.axes) <= {0, 1, 2}:
            raise ValueError(
                f"PointCoincidence: axes must be a non-empty subset of (0, 1, 2), got {self.axes}"
            )

    def __call__(self, model: Model, q: Float[Array, " n"]) -> Float[Array, " m"]:
        Ta = frame_pose(model, q, self.frame_a)
        Tb = frame_pose(model, q, self.frame_b)
        d = (Ta[:3, :3] @ self.point_a + Ta[:3, 3]) - (Tb[:3, :3] @ self.point_b + Tb[:3, 3])
        if self.express_in is not None:
            d = frame_pose(model, q, self.express_in)[:3, :3].T @ d
        return d[jnp.asarray(self.axes)]


class StackedConstraints(AbstractConstraint):
    """Several constraints as one: their residuals concatenated in order."""

    parts: tuple[AbstractConstraint, ...]

    def __call__(self, model: Model, q: Float[Array, " n"]) -> Float[Array, " m"]:
        return jnp.concatenate([c(model, q) for c in self.parts])


class ConstrainedSystem(eqx.Module):
    """An open-tree `Model` over dependent coordinates plus constraints ``Phi(q) = 0``.

    Attributes:
        model: the open tree (cut the loops); its ``coordinate_names`` are the dependent
            coordinates ``q`` (a coordinate map on it is fine, e.g. for absolute angles).
        constraint: ``Phi(q)`` (any JAX function) or an `AbstractConstraint` ``Phi(model, q)``.
        m: number of constraint equations (static, from tracing ``Phi`` once).
        atol, rtol: singular-value tolerance of every pseudo-inverse (`jaxmb.constraints.pseudo_inverse.pinv`):
            singular values of ``A`` at or below ``max(atol, rtol * s_max)`` count as zero. The
            band ``s <= atol`` is where the constraint is "virtually removed" near a singular
            configuration (Aghili (2005) eq. (70)); ``rtol`` (default ``max(m, n) * eps``) drops
            round-off rows of redundant constraints.
    """

    model: Model
    constraint: Callable
    m: int = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    rtol: float | None = eqx.field(static=True)

    def __init__(self, model, constraint, *, atol: float = ATOL, rtol=None):
        if not isinstance(model, Model):
            raise ValueError(
                f"ConstrainedSystem: model must be a jaxmb Model, got {type(model).__name__}"
            )
        if not callable(constraint):
            raise ValueError(
                "ConstrainedSystem: constraint must be callable, Phi(q) or Phi(model, q)"
            )
        if not atol >= 0 or (rtol is not None and not rtol >= 0):
            raise ValueError(f"ConstrainedSystem: atol, rtol must be >= 0, got {atol}, {rtol}")
        self.model, self.constraint = model, constraint
        self.atol, self.rtol = float(atol), None if rtol is None else float(rtol)
        n = model.n
        out = jax.eval_shape(
            lambda q: unchecked_residual(self, q), jax.ShapeDtypeStruct((n,), model.gravity.dtype)
        )
        if out.ndim != 1 or out.shape[0] < 1:
            raise ValueError(
                f"ConstrainedSystem: constraint must return a 1-D array of m >= 1 equations for "
                f"q of shape ({n},), got shape {out.shape}"
            )
        self.m = out.shape[0]

    @property
    def n(self) -> int:
        """Number of dependent coordinates."""
        return self.model.n

    @property
    def coordinate_names(self) -> tuple[str, ...]:
        return self.model.coordinate_names


def unchecked_residual(system: ConstrainedSystem, q):
    """``Phi(q)`` without `constraint_residual`'s input check: for callers whose ``q`` is
    checked already, or traced inside a solve."""
    c = system.constraint
    return c(system.model, q) if isinstance(c, AbstractConstraint) else c(q)


def _vec(system: ConstrainedSystem, x, name: str, finite: bool = True) -> Array:
    x = jnp.asarray(x, dtype=system.model.gravity.dtype)
    if x.shape != (system.n,):
        raise ValueError(
            f"{name}: expected shape ({system.n},) for coordinates {system.coordinate_names}, got {x.shape}"
        )
    return check_finite(x, name) if finite else x


def _vecs(system: ConstrainedSystem, **xs) -> tuple:
    """`_vec` of several fields with one run-time finiteness check (`check_all_finite`)."""
    return check_all_finite({n: _vec(system, x, n, finite=False) for n, x in xs.items()})


def _pinv(system: ConstrainedSystem, a):
    return pinv(a, system.atol, system.rtol)


@finite_inputs
@eqx.filter_jit
def constraint_residual(system: ConstrainedSystem, q: Float[ArrayLike, " n"]) -> Float[Array, " m"]:
    """``Phi(q)``: zero on the constraint manifold."""
    return unchecked_residual(system, _vec(system, q, "q"))


@finite_inputs
@eqx.filter_jit
def constraint_jacobian(
    system: ConstrainedSystem, q: Float[ArrayLike, " n"]
) -> Float[Array, "m n"]:
    r"""$A = \partial\Phi/\partial q$ (Aghili (2005) eq. (11)), by forward-mode autodiff."""
    return jax.jacfwd(lambda q_: unchecked_residual(system, q_))(_vec(system, q, "q"))


@finite_inputs
@eqx.filter_jit
def constraint_bias(
    system: ConstrainedSystem, q: Float[ArrayLike, " n"], qd: Float[ArrayLike, " n"]
) -> Float[Array, " m"]:
    r"""$\dot A \dot q = \frac{d^2}{d\epsilon^2}\Phi(q + \epsilon\dot q)|_0$, the velocity term of the
    acceleration constraint $A\ddot q + \dot A\dot q = 0$ (after Aghili (2005) eq. (15)).

    Two nested JVPs: no Jacobian tensor is formed."""
    q, qd = _vecs(system, q=q, qd=qd)

    def velocity(q_):
        return jax.jvp(lambda x: unchecked_residual(system, x), (q_,), (qd,))[1]  # A(q) qd

    return jax.jvp(velocity, (q,), (qd,))[1]


@finite_inputs
@eqx.filter_jit
def projector(system: ConstrainedSystem, q: Float[ArrayLike, " n"]) -> Float[Array, "n n"]:
    r"""$P = I - A^+ A$ (Aghili (2005) eq. (15)): the orthogonal projector onto $N(A)$."""
    A = constraint_jacobian(system, q)
    return jnp.eye(system.n, dtype=A.dtype) - _pinv(system, A) @ A


class ProjectedTerms(eqx.Module):
    """The quantities of Aghili (2005) at one state ``(q, qd)``; n coordinates, m constraints.

    Attributes:
        M: (n, n) inertia matrix of the open tree (eq. 19).
        h: (n,) Coriolis, centrifugal, gravity and external-wrench terms, ``h - Q_e`` in jaxmb's
            convention (eq. 19's h).
        A: (m, n) constraint Jacobian (eq. 11).
        A_pinv: (n, m) its pseudo-inverse at the system's tolerance.
        P: (n, n) projector onto N(A) (eq. 15).
        Cqd: (n,) normal acceleration ``C qd = -A^+ Adot qd`` (eq. 16).
    """

    M: Float[Array, "n n"]
    h: Float[Array, " n"]
    A: Float[Array, "m n"]
    A_pinv: Float[Array, "n m"]
    P: Float[Array, "n n"]
    Cqd: Float[Array, " n"]


@finite_inputs
@eqx.filter_jit
def projected_terms(
    system: ConstrainedSystem,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    wrenches: Mapping[str, Array] | None = None,
) -> ProjectedTerms:
    """Everything eqs. (15)-(32) need at ``(q, qd)``, computed once."""
    q, qd = _vecs(system, q=q, qd=qd)
    model = system.model
    A = constraint_jacobian(system, q)
    A_pinv = _pinv(system, A)
    P = jnp.eye(system.n, dtype=A.dtype) - A_pinv @ A  # eq. (15)
    Cqd = -A_pinv @ constraint_bias(system, q, qd)  # eq. (16)
    M = mass_matrix(model, q)
    h = inverse_dynamics(model, q, qd, jnp.zeros_like(qd), wrenches)  # h - Q_e, eq. (19)'s h
    return ProjectedTerms(M=M, h=h, A=A, A_pinv=A_pinv, P=P, Cqd=Cqd)


INERTIA_FORMS = ("nonsymmetric", "symmetric", "gamma")


def constraint_inertia(
    terms: ProjectedTerms, inertia: str = "nonsymmetric", gamma=None
) -> tuple[Float[Array, "n n"], Float[Array, " n"]]:
    r"""The constraint inertia matrix and its velocity term, ``(Mc, Cc qd)`` of
    ``Mc qdd = P (f - h) + Cc qd``:

    - ``"nonsymmetric"``: $M_c = M + PM - (PM)^\top$, $C_c = MC$ (Aghili (2005) eqs. (22)-(24));
      positive definite but not symmetric (Theorem 2).
    - ``"symmetric"``: $M'_c = PMP + (I-P)M(I-P)$, $C'_c = (I-2P)MC$ (eqs. (27)-(28));
      symmetric positive definite (Proposition 1), solved by Cholesky.
    - ``"gamma"``: $M''_c = PM + \gamma(I-P)$, $C''_c = \gamma C$ (eq. (29)); invertible for
      any $\gamma > 0$ (Proposition 2). Default $\gamma = \|M\|_F$ (the paper suggests
      $\gamma = \|M\|$; the Frobenius norm needs no eigenvalues); it changes only conditioning,
      not the solution, so it carries no gradient.
    """
    M, P = terms.M, terms.P
    Q = jnp.eye(M.shape[0], dtype=M.dtype) - P
    if inertia == "nonsymmetric":
        PM = P @ M
        return M + PM - PM.T, M @ terms.Cqd  # eqs. (23)-(24)
    if inertia == "symmetric":
        return P @ M @ P + Q @ M @ Q, (Q - P) @ (M @ terms.Cqd)  # eq. (28), I - 2P = Q - P
    if inertia == "gamma":
        if gamma is None:
            gamma = jax.lax.stop_gradient(jnp.sqrt(jnp.sum(M * M)))
        return P @ M + gamma * Q, gamma * terms.Cqd  # eq. (29)
    raise ValueError(f"inertia: expected one of {INERTIA_FORMS}, got {inertia!r}")


def _solve(terms: ProjectedTerms, rhs_force, inertia: str, gamma):
    Mc, Ccqd = constraint_inertia(terms, inertia, gamma)
    rhs = terms.P @ rhs_force + Ccqd
    if inertia == "symmetric":
        return jsl.cho_solve((jnp.linalg.cholesky(Mc), True), rhs)
    return jnp.linalg.solve(Mc, rhs)


@finite_inputs
@eqx.filter_jit
def forward_dynamics(
    system: ConstrainedSystem,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    f: Float[ArrayLike, " n"] | None = None,
    wrenches: Mapping[str, Array] | None = None,
    *,
    inertia: str = "nonsymmetric",
    gamma=None,
) -> Float[Array, " n"]:
    r"""Constrained accelerations $\ddot q = M_c^{-1}\big(P(f - h) + C_c\dot q\big)$
    (Aghili (2005) eqs. (22), (25), (27)); only $f_\parallel = Pf$ moves the system.

    Valid with redundant constraints and at singular configurations (rank-deficient A), where
    the Lagrangian route of Appendix B fails. ``qd`` should be admissible (``A qd = 0``):
    eq. (13), on which all three forms rest, assumes it.

    Args:
        f: generalized input force (n,), default zero.
        wrenches: external wrenches ``{frame: [moment; force]}`` (part of ``h``).
        inertia: ``"nonsymmetric"`` (eq. 23), ``"symmetric"`` (eq. 28) or ``"gamma"`` (eq. 29).
        gamma: the scalar of eq. (29), in the units of M (default ``||M||_F``).
    """
    if inertia not in INERTIA_FORMS:
        raise ValueError(f"inertia: expected one of {INERTIA_FORMS}, got {inertia!r}")
    terms = projected_terms(system, q, qd, wrenches)
    f = jnp.zeros(system.n) if f is None else _vec(system, f, "f")
    return _solve(terms, f - terms.h, inertia, gamma)


@finite_inputs
@eqx.filter_jit
def constraint_force(
    system: ConstrainedSystem,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    f: Float[ArrayLike, " n"] | None = None,
    wrenches: Mapping[str, Array] | None = None,
) -> Float[Array, " n"]:
    r"""Generalized constraint force (Aghili (2005) eq. (32)):

    $\mathcal F = (f_\perp - h_\perp) - \mu (f_\parallel - h_\parallel) - \mu C_c \dot q$,
    $\mu = (I - P) M M_c^{-1}$, with $M_c$ of eq. (23). It always exists and is unique, and lies
    in $R(A^\top)$, so $P\mathcal F = 0$."""
    terms = projected_terms(system, q, qd, wrenches)
    f = jnp.zeros(system.n) if f is None else _vec(system, f, "f")
    return _constraint_force(terms, f)


def _constraint_force(terms: ProjectedTerms, f: Array) -> Array:
    g = f - terms.h
    Q = jnp.eye(g.shape[0], dtype=g.dtype) - terms.P
    Mc, Ccqd = constraint_inertia(terms, "nonsymmetric")
    alpha_rhs = terms.M @ jnp.linalg.solve(Mc, terms.P @ g + Ccqd)  # alpha (f_par - h_par + Cc qd)
    return Q @ g - Q @ alpha_rhs  # eq. (32)


@finite_inputs
@eqx.filter_jit
def lagrange_multipliers(
    system: ConstrainedSystem,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    f: Float[ArrayLike, " n"] | None = None,
    wrenches: Mapping[str, Array] | None = None,
) -> tuple[Float[Array, " m"], Float[Array, "m m"]]:
    r"""Lagrange multipliers $\lambda = A^{+\top}\mathcal F + \lambda_n$ (Aghili (2005) eq. (18) and
    Section 5.2), returned as ``(lambda_p, N)``:

    - ``lambda_p = A^{+T} F``: the minimum-norm multipliers, with $A^\top\lambda_p = \mathcal F$.
    - ``N = I - A A^+``: the projector onto $N(A^\top) = R(A)^\perp$, where the homogeneous part
      $\lambda_n$ lives. Every $\lambda = \lambda_p + N z$ gives the same force. ``N`` is zero
      iff A has full row rank: then, and only then, $\lambda$ is unique (Remark 4)."""
    terms = projected_terms(system, q, qd, wrenches)
    f = jnp.zeros(system.n) if f is None else _vec(system, f, "f")
    F = _constraint_force(terms, f)
    A, A_pinv = terms.A, terms.A_pinv
    return A_pinv.T @ F, jnp.eye(system.m, dtype=A.dtype) - A @ A_pinv


def newton_projection(
    residual: Callable,
    x: Array,
    *,
    tol: float,
    max_iter: int,
    atol: float = ATOL,
    rtol=None,
    line_search: bool = False,
) -> tuple[Array, Array]:
    r"""$x_{k+1} = x_k - J^+ r(x_k)$ until $\|r\|_\infty \le$ ``tol`` (Aghili (2005) eq. (39)):
    each step is the minimum-norm correction of the linearised constraint.

    A fixed count of ``max_iter`` iterations, each skipped (`lax.cond`) once converged, so that
    reverse-mode differentiation works (a ``while_loop`` would not). With ``line_search`` each
    step is the best of the Newton step and the steepest-descent step of ``|r|^2/2``, each halved
    up to 23 times, that decreases ``|r|``: this converges from far-away guesses and past points
    where the Jacobian loses rank (assembly); drift correction starts next to the solution and
    uses the plain iteration.
    Returns ``(x, r(x))``."""
    fractions = 0.5 ** jnp.arange(24.0)

    def body(_, x):
        r = residual(x)

        def step(x):
            J = jax.jacfwd(residual)(x)
            dx = pinv(J, atol, rtol) @ r  # eq. (39)
            if not line_search:
                return x - dx
            # Backtracking on |r|, over the Newton step and, where the Jacobian has lost rank and
            # the Newton step no longer descends, the steepest-descent (Cauchy) step of |r|^2/2.
            g = J.T @ r
            Jg = J @ g
            cauchy = g * (g @ g) / jnp.maximum(Jg @ Jg, jnp.finfo(r.dtype).tiny)
            steps = jnp.concatenate([jnp.outer(fractions, dx), jnp.outer(fractions, cauchy)])
            norms = jax.vmap(lambda d: jnp.linalg.norm(residual(x - d)))(steps)
            k = jnp.argmin(norms)
            return jnp.where(norms[k] < jnp.linalg.norm(r), x - steps[k], x)

        return jax.lax.cond(jnp.max(jnp.abs(r)) > tol, step, lambda x: x, x)

    x = jax.lax.fori_loop(0, max_iter, body, x)
    return x, residual(x)


def _free_residual(system: ConstrainedSystem, q0, idx_free):
    """``Phi`` as a function of the free coordinates, the others held at ``q0``'s values."""
    return lambda x: unchecked_residual(system, q0.at[idx_free].set(x))


@eqx.filter_jit
def _assemble_newton(system: ConstrainedSystem, q0, free: tuple[int, ...], tol, max_iter):
    """`assemble`'s iteration, compiled once per system and set of free coordinates (the fixed
    values and the guess are traced): called eagerly, an un-jitted `fori_loop` would be traced
    and compiled again at every call, about a second each."""
    idx_free = jnp.asarray(free)
    return newton_projection(
        _free_residual(system, q0, idx_free),
        q0[idx_free],
        tol=tol,
        max_iter=max_iter,
        atol=system.atol,
        rtol=system.rtol,
        line_search=True,
    )


@finite_inputs
@eqx.filter_jit
def correct(
    system: ConstrainedSystem,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    *,
    tol: float = 1e-12,
    max_iter: int = 8,
) -> tuple[Float[Array, " n"], Float[Array, " n"], Bool[Array, ""]]:
    r"""Constraint drift correction (Aghili (2005) Section 6): if ``|Phi(q)|`` or ``|A qd|``
    exceeds ``tol``, iterate eq. (39) on ``q`` and project the velocity, ``qd <- P qd`` (eq. (12)).

    Returns ``(q, qd, moved)``; ``moved`` says whether anything was corrected. Within tolerance
    the state is returned unchanged (so a simulation that does not drift is not perturbed)."""
    q, qd = _vecs(system, q=q, qd=qd)

    def needs(q, qd):
        A = constraint_jacobian(system, q)
        return (jnp.max(jnp.abs(unchecked_residual(system, q))) > tol) | (
            jnp.max(jnp.abs(A @ qd)) > tol
        )

    def fix(q, qd):
        q, _ = newton_projection(
            lambda x: unchecked_residual(system, x),
            q,
            tol=tol,
            max_iter=max_iter,
            atol=system.atol,
            rtol=system.rtol,
        )
        return q, projector(system, q) @ qd

    moved = needs(q, qd)
    q, qd = jax.lax.cond(moved, fix, lambda q, qd: (q, qd), q, qd)
    return q, qd, moved


def assemble(
    system: ConstrainedSystem,
    fixed: Mapping[str, float],
    guess: Float[ArrayLike, " n"] | Mapping[str, float] | None = None,
    *,
    tol: float = 1e-12,
    max_iter: int = 50,
) -> Float[Array, " n"]:
    r"""Solve ``Phi(q) = 0`` for the coordinates not in ``fixed`` (e.g. given the actuated ones):
    the pseudo-inverse Newton iteration of Aghili (2005) eq. (39) over the free coordinates.

    Args:
        fixed: ``{coordinate name: value}``, held fixed.
        guess: start for the free coordinates, an (n,) array or ``{name: value}`` (missing
            names start at 0). Closed chains have several assembly modes: the guess picks one.
        tol: convergence tolerance on ``max |Phi|``, in the constraint's units.

    Raises:
        ValueError: unknown names; no convergence in ``max_iter`` iterations; or a converged
            least-squares solution with ``|Phi| > tol``, i.e. the fixed values admit no assembly.
            (Under jit the same checks go through `runtime_check`: they raise, or give NaN
            inside `failures_as_nan`.)
    """
    names = system.coordinate_names
    unknown = sorted(set(fixed) - set(names))
    if unknown:
        raise ValueError(
            f"assemble: fixed names {unknown} are not coordinates; coordinates are {names}"
        )
    for n, v in fixed.items():
        check_finite(v, f"assemble: fixed {n!r}")
    free = [i for i, n in enumerate(names) if n not in fixed]
    if not free:
        raise ValueError("assemble: every coordinate is fixed; nothing to solve for")
    if guess is None:
        q0 = jnp.zeros(system.n)
    elif isinstance(guess, Mapping):
        bad = sorted(set(guess) - set(names))
        if bad:
            raise ValueError(
                f"assemble: guess names {bad} are not coordinates; coordinates are {names}"
            )
        q0 = check_finite(jnp.asarray([float(guess.get(n, 0.0)) for n in names]), "assemble: guess")
    else:
        q0 = _vec(system, guess, "assemble: guess")
    idx_fixed = jnp.asarray([names.index(n) for n in fixed], dtype=int)
    q0 = q0.at[idx_fixed].set(jnp.asarray([fixed[n] for n in fixed], dtype=q0.dtype))
    x, r = _assemble_newton(system, q0, tuple(free), tol, max_iter)
    idx_free = jnp.asarray(free)
    residual = _free_residual(system, q0, idx_free)
    err = jnp.max(jnp.abs(r))
    q = q0.at[idx_free].set(x)
    if isinstance(err, jax.core.Tracer):
        msg = f"assemble: no assembly within tol={tol} for fixed {list(fixed)}"
        return runtime_check(q, ~(err <= tol), msg)
    if not np.isfinite(float(err)) or float(err) > tol:
        fixed_desc = ", ".join(f"{k}={float(v):.6g}" for k, v in fixed.items())
        free_names = [names[i] for i in free]
        # a stationary point of |Phi|^2 / 2 with Phi != 0: the least-squares best, not an assembly
        J = jax.jacfwd(residual)(x)
        stalled = jnp.linalg.norm(J.T @ r) <= 1e-6 * (jnp.linalg.norm(J) + 1.0) * jnp.linalg.norm(r)
        if bool(stalled) and np.isfinite(float(err)):
            raise ValueError(
                f"assemble: the fixed values ({fixed_desc}) admit no assembly: the iteration "
                f"settled at a least-squares point with max |Phi| = {float(err):.3g} > tol={tol} "
                f"(free coordinates {free_names} = {np.asarray(x).round(6).tolist()})"
            )
        raise ValueError(
            f"assemble: no convergence in {max_iter} iterations for ({fixed_desc}): max |Phi| = "
            f"{float(err):.3g} > tol={tol}; start from a guess closer to an assembly "
            f"(free coordinates {free_names})"
        )
    return q
