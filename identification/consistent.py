r"""Physically consistent inertial parameters: the pseudo-inertia, its log-Cholesky
parameterisation, the log-det (Bregman) divergence to a prior, and a least-squares fit that can
only return physical bodies.

**Pseudo-inertia** (Wensing, Kim & Slotine (2017) "Linear matrix inequalities for physically
consistent inertial parameter identification: a statistical perspective on the mass
distribution", eq. (9)). A body with density rho has the second moment ``Sigma = int x x^T rho
dV`` about its frame origin, first moment ``h = m c`` and mass ``m``. The 4x4 matrix

    J = [[Sigma, h], [h^T, m]] = int [x; 1][x; 1]^T rho dV

is linear in the 10 standard parameters ``pi = [m, m c_x, m c_y, m c_z, I_xx, I_xy, I_yy, I_xz,
I_yz, I_zz]`` (Pinocchio's order, inertia ``I`` about the frame origin, `jaxmb.inertial_parameters`)
because ``I = tr(Sigma) 1 - Sigma``, i.e. ``Sigma = tr(I)/2 1 - I``. A parameter vector belongs to
some (nondegenerate) mass distribution exactly when ``J`` is positive definite. Its Schur
complement ``Sigma - h h^T / m = Sigma_C`` is the second moment about the COM, whose positivity is
the triangle inequality of the COM inertia (``I_1 + I_2 - I_3 = 2 Sigma_C,33 > 0`` in principal
axes) — so ``J > 0`` is equivalent to ``m > 0`` plus the strict triangle inequalities.

**Log-Cholesky parameters** (Rucker & Wensing (2022) "Smooth parameterization of rigid-body
inertia", IEEE RA-L 7(2), eqs. (9)-(11)). Every positive definite ``J`` has a unique factor
``J = U U^T`` with ``U`` upper triangular and a positive diagonal (a Cholesky factor taken from
the bottom-right corner). Writing its diagonal as exponentials gives a smooth bijection between
all of ``R^10`` and the physically consistent bodies:

    theta = (alpha, d1, d2, d3, s12, s23, s13, t1, t2, t3)

    U = e^alpha [[e^d1, s12,  s13,  t1],
                 [0,    e^d2, s23,  t2],
                 [0,    0,    e^d3, t3],
                 [0,    0,    0,    1 ]]

This is the paper's vector order and triangular convention. It reads physically: ``m = e^{2
alpha}``, ``c = t`` (the COM in metres) and the upper-left block ``e^alpha [[e^d1, s12, s13], ...]``
is a Cholesky factor of ``Sigma_C``, scaled by ``sqrt(m)``.

**Divergence to a prior.** For two pseudo-inertias the log-det divergence, the Bregman divergence
of ``-log det`` (Lee & Park (2018) "Geometric robot dynamic identification: a convex programming
approach"; Rucker & Wensing (2022) Sec. IV),

    d(J || J0) = -log det(J0^{-1} J) + tr(J0^{-1} J) - 4 ,

is zero only at ``J = J0``, positive elsewhere, invariant to the choice of body frame and units,
and infinite at the boundary of physical consistency: a natural regulariser toward CAD values.
In log-Cholesky coordinates with ``J0 = U0 U0^T`` it is explicit: ``B = U0^{-1} U`` is upper
triangular, ``J0^{-1} J`` is similar to ``B B^T``, and

    d = sum_{i<j} B_ij^2 + sum_i (B_ii^2 - 1 - 2 log B_ii) ,   log B_ii = log U_ii - log U0_ii ,

a sum of squares that `fit_consistent` feeds to Levenberg-Marquardt as residuals.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Bool, Float, Int

from jaxmb.multibody.checks import runtime_check

__all__ = [
    "pseudo_inertia",
    "parameters_from_pseudo_inertia",
    "log_cholesky_to_parameters",
    "parameters_to_log_cholesky",
    "is_physically_consistent",
    "bregman_divergence",
    "ConsistentFit",
    "fit_consistent",
]

# Index pairs of U's strictly upper entries in theta's order (s12, s23, s13, t1, t2, t3).
_OFF_ROWS = np.array([0, 1, 0, 0, 1, 2])
_OFF_COLS = np.array([1, 2, 2, 3, 3, 3])


def _eye(batch: tuple[int, ...], n: int, dtype) -> Array:
    # explicit batch axes: the tests run with jax_numpy_rank_promotion="raise"
    return jnp.broadcast_to(jnp.eye(n, dtype=dtype), (*batch, n, n))


def _inertia_matrix(pi: Array) -> Array:
    Ixx, Ixy, Iyy, Ixz, Iyz, Izz = (pi[..., k] for k in range(4, 10))
    return jnp.stack(
        [
            jnp.stack([Ixx, Ixy, Ixz], -1),
            jnp.stack([Ixy, Iyy, Iyz], -1),
            jnp.stack([Ixz, Iyz, Izz], -1),
        ],
        axis=-2,
    )


@jax.jit
def pseudo_inertia(pi: Float[ArrayLike, "*b 10"]) -> Float[Array, "*b 4 4"]:
    r"""$J = [[\Sigma, h], [h^\top, m]]$, $\Sigma = \tfrac12 \mathrm{tr}(I) 1 - I$, $h = m c$
    (Wensing, Kim & Slotine (2017) eq. (9)); linear in ``pi`` (Pinocchio order, inertia about the
    body frame origin, kg, kg m, kg m^2). Batches over leading axes."""
    pi = jnp.asarray(pi, dtype=float)
    I = _inertia_matrix(pi)
    eye = _eye(I.shape[:-2], 3, pi.dtype)
    Sigma = 0.5 * jnp.trace(I, axis1=-2, axis2=-1)[..., None, None] * eye - I
    h = pi[..., 1:4]
    top = jnp.concatenate([Sigma, h[..., :, None]], axis=-1)
    bottom = jnp.concatenate([h, pi[..., :1]], axis=-1)[..., None, :]
    return jnp.concatenate([top, bottom], axis=-2)


@jax.jit
def parameters_from_pseudo_inertia(J: Float[ArrayLike, "*b 4 4"]) -> Float[Array, "*b 10"]:
    r"""The inverse of `pseudo_inertia`: $m = J_{44}$, $h = J_{1:3,4}$, $I = \mathrm{tr}(\Sigma) 1 -
    \Sigma$ (from $\mathrm{tr}\,\Sigma = \tfrac12 \mathrm{tr}\, I$). ``J`` is symmetrised first."""
    J = jnp.asarray(J, dtype=float)
    J = 0.5 * (J + jnp.swapaxes(J, -1, -2))
    Sigma = J[..., :3, :3]
    eye = _eye(Sigma.shape[:-2], 3, J.dtype)
    I = jnp.trace(Sigma, axis1=-2, axis2=-1)[..., None, None] * eye - Sigma
    return jnp.stack(
        [
            J[..., 3, 3],
            J[..., 0, 3],
            J[..., 1, 3],
            J[..., 2, 3],
            I[..., 0, 0],
            I[..., 0, 1],
            I[..., 1, 1],
            I[..., 0, 2],
            I[..., 1, 2],
            I[..., 2, 2],
        ],
        axis=-1,
    )


def _upper_factor(theta: Array) -> Array:
    """U of the module docstring (Rucker & Wensing (2022) eq. (9)), batched."""
    alpha, d = theta[..., 0], theta[..., 1:4]
    diag = jnp.concatenate([jnp.exp(d), jnp.ones_like(alpha)[..., None]], axis=-1)
    U = diag[..., :, None] * _eye(diag.shape[:-1], 4, theta.dtype)
    U = U.at[..., _OFF_ROWS, _OFF_COLS].set(theta[..., 4:10])
    return jnp.exp(alpha)[..., None, None] * U


@jax.jit
def log_cholesky_to_parameters(theta: Float[ArrayLike, "*b 10"]) -> Float[Array, "*b 10"]:
    r"""$\pi(\theta)$ through $J = U U^\top$ (Rucker & Wensing (2022) eqs. (9)-(10)), ``theta =
    (alpha, d1, d2, d3, s12, s23, s13, t1, t2, t3)`` per body (module docstring). Every finite
    ``theta`` gives a physically consistent body; the map is smooth (polynomial in the entries of
    U) and batches over leading axes."""
    theta = jnp.asarray(theta, dtype=float)
    U = _upper_factor(theta)
    return parameters_from_pseudo_inertia(U @ jnp.swapaxes(U, -1, -2))


def _reverse_cholesky(J: Array) -> Array:
    """Upper-triangular U with positive diagonal and J = U U^T: with the exchange matrix P,
    P J P = L L^T (ordinary Cholesky) and U = P L P. NaN where J is not positive definite."""
    flip = lambda A: A[..., ::-1, ::-1]  # noqa: E731 - P A P
    return flip(jnp.linalg.cholesky(flip(J)))


def _body_check(pi: Array, what: str) -> None:
    """Concrete input: raise naming the first body whose pseudo-inertia is not positive definite."""
    J = np.asarray(pseudo_inertia(pi)).reshape(-1, 4, 4)
    flat = np.asarray(pi).reshape(-1, 10)
    for i, Ji in enumerate(J):
        if not np.isfinite(Ji).all() or np.linalg.eigvalsh(Ji)[0] <= 0:
            raise ValueError(
                f"{what}: body {i} is not physically consistent (pseudo-inertia not positive "
                f"definite: needs m > 0 and the COM inertia to satisfy the strict triangle "
                f"inequalities); got pi = {flat[i]}"
            )


def parameters_to_log_cholesky(pi: Float[ArrayLike, "*b 10"]) -> Float[Array, "*b 10"]:
    r"""The inverse of `log_cholesky_to_parameters`: factor $J(\pi) = U U^\top$ (upper, positive
    diagonal, unique), then $\alpha = \log U_{44}$, $d_i = \log(U_{ii}/U_{44})$ and the
    off-diagonal entries of $U / U_{44}$.

    Raises ValueError naming the body (its index along the flattened leading axes) when ``J`` is
    not positive definite, for concrete input; traced input fails through `runtime_check` (NaN
    inside `failures_as_nan`, as the commands run)."""
    pi = jnp.asarray(pi, dtype=float)
    if not isinstance(pi, jax.core.Tracer):
        _body_check(pi, "pi")
    return _to_log_cholesky(pi)


@jax.jit
def _to_log_cholesky(pi: Array) -> Array:
    U = _reverse_cholesky(pseudo_inertia(pi))
    U = runtime_check(
        U, ~jnp.isfinite(U).all(), "pi: a body is not physically consistent (J not PD)"
    )
    scale = U[..., 3, 3]
    V = U / scale[..., None, None]
    d = jnp.log(jnp.diagonal(V, axis1=-2, axis2=-1)[..., :3])
    return jnp.concatenate([jnp.log(scale)[..., None], d, V[..., _OFF_ROWS, _OFF_COLS]], axis=-1)


@jax.jit
def is_physically_consistent(
    pi: Float[ArrayLike, "*b 10"], tol: float | Float[Array, ""] = 0.0
) -> Bool[Array, "*b"]:
    r"""Whether each body's pseudo-inertia is positive definite, $\lambda_{min}(J) > tol\,
    \lambda_{max}(J)$ (Wensing, Kim & Slotine (2017) Thm. 1): equivalently ``m > 0`` and the COM
    inertia satisfies the strict triangle inequalities. ``tol`` is relative, so the answer does
    not depend on the mass unit; ``tol = 0`` is the exact condition, a small positive value
    (e.g. 1e-9) refuses bodies that are physical only within round-off. Non-finite input is
    reported as inconsistent."""
    pi = jnp.asarray(pi, dtype=float)
    lam = jnp.linalg.eigvalsh(pseudo_inertia(pi))
    finite = jnp.isfinite(pi).all(axis=-1)
    return finite & (lam[..., 0] > tol * jnp.abs(lam[..., -1]))


@jax.jit
def bregman_divergence(
    pi: Float[ArrayLike, "*b 10"], pi_prior: Float[ArrayLike, "*b 10"]
) -> Float[Array, "*b"]:
    r"""$d(J \| J_0) = -\log\det(J_0^{-1} J) + \mathrm{tr}(J_0^{-1} J) - 4$ per body (Lee & Park
    (2018); Rucker & Wensing (2022) Sec. IV), ``J = pseudo_inertia(pi)``, ``J0`` that of the prior.

    Zero at the prior, positive elsewhere; NaN where ``J`` or ``J0`` is not positive definite
    (both determinants are taken through Cholesky factors, which fail there)."""
    J = pseudo_inertia(pi)
    L0 = jnp.linalg.cholesky(pseudo_inertia(pi_prior))
    L = jnp.linalg.cholesky(J)
    # tr(J0^{-1} J) = ||L0^{-1} L||_F^2 ; log det J = 2 sum log diag(L)
    X = jax.scipy.linalg.solve_triangular(L0, L, lower=True)
    logdet = lambda F: 2.0 * jnp.sum(jnp.log(jnp.diagonal(F, axis1=-2, axis2=-1)), -1)  # noqa: E731
    return -(logdet(L) - logdet(L0)) + jnp.sum(X**2, axis=(-2, -1)) - 4.0


def _log_ratio_residual(x: Array) -> Array:
    r"""$\rho(x) = \mathrm{sign}(x) \sqrt{e^{2x} - 1 - 2x}$, so that $\rho^2$ is the diagonal term
    $B_{ii}^2 - 1 - 2 \log B_{ii}$ of the divergence with $x = \log B_{ii}$. Analytic at 0 (where
    it is $\sqrt2 x$), but the closed form divides 0 by 0 in its derivative there, hence the series
    $e^{2x} - 1 - 2x = 2x^2 (1 + u/3 + u^2/12 + u^3/60 + u^4/360 + ...)$, $u = 2x$, behind a
    double ``where`` (truncation error below 1e-16 for |x| < 1e-3)."""
    small = jnp.abs(x) < 1e-3
    xs = jnp.where(small, 1.0, x)
    exact = jnp.sign(xs) * jnp.sqrt(jnp.expm1(2 * xs) - 2 * xs)
    u = 2 * x
    series = jnp.sqrt(2.0) * x * jnp.sqrt(1 + u / 3 + u**2 / 12 + u**3 / 60 + u**4 / 360)
    return jnp.where(small, series, exact)


def _divergence_residuals(theta: Array, theta_prior: Array) -> Array:
    """Residuals r_b (10 per body) with ||r_b||^2 = d(J(theta_b) || J(theta_prior_b)), from
    B = U0^{-1} U (module docstring): its 6 off-diagonal entries, then rho(log B_ii)."""
    U = _upper_factor(theta)
    U0 = _upper_factor(theta_prior)
    B = jax.scipy.linalg.solve_triangular(U0, U, lower=False)

    # log B_ii = log U_ii - log U0_ii, read off theta without taking a log of a computed number
    def logdiag(t):
        return t[..., :1] + jnp.concatenate([t[..., 1:4], jnp.zeros_like(t[..., :1])], axis=-1)

    x = logdiag(theta) - logdiag(theta_prior)
    return jnp.concatenate([B[..., _OFF_ROWS, _OFF_COLS], _log_ratio_residual(x)], axis=-1)


class ConsistentFit(eqx.Module):
    """Result of `fit_consistent`.

    Attributes:
        pi: (nb, 10) fitted standard parameters, physically consistent by construction.
        theta: (nb, 10) their log-Cholesky coordinates.
        extra: (ne,) fitted extra linear parameters (friction, armature, ... in Y_extra's order).
        cost: the objective 0.5 ||W (Y pi + Y_extra extra - tau)||^2 + prior_weight sum d_b.
        steps: Levenberg-Marquardt iterations taken.
        converged: whether the solver met its tolerance within the step budget.
    """

    pi: Float[Array, "nb 10"]
    theta: Float[Array, "nb 10"]
    extra: Float[Array, " ne"]
    cost: Float[Array, ""]
    steps: Int[Array, ""]
    converged: Bool[Array, ""]


def _softplus_inverse(y: Array) -> Array:
    return y + jnp.log(-jnp.expm1(-y))  # log(e^y - 1), stable for large and small y > 0


@eqx.filter_jit
def _fit(Y, tau, w, Ye, theta0, extra0, positive, prior, prior_weight, steps, tol):
    nb, ne = theta0.shape[0], Ye.shape[1]
    A = w[:, None] * jnp.concatenate([Y, Ye], axis=1)
    b = w * tau
    b_norm = jnp.linalg.norm(b)
    b_norm = jnp.where(b_norm > 0, b_norm, 1.0)
    # Jacobi scaling of the extra columns: the optimiser sees u = s * beta, the share of ||W tau||
    # that column explains, so friction in N and armature in kg m^2 are equally well scaled.
    s = jnp.linalg.norm(A[:, 10 * nb :], axis=0) / b_norm
    s = jnp.where(s > 0, s, 1.0)
    # Data compression: with A = Q R (reduced QR, m >= p), ||A z - b||^2 = ||R z - Q^T b||^2 +
    # const, so the solver works on p residuals however long the log is.
    if A.shape[0] > A.shape[1]:
        Qm, R = jnp.linalg.qr(A)
        c = Qm.T @ b
    else:
        R, c = A, b

    def extras(u):
        return jnp.where(positive, jax.nn.softplus(u), u) / s

    if extra0 is None and ne == 0:
        extra0 = jnp.zeros((0,), dtype=A.dtype)
    elif extra0 is None:  # best linear fit of the extras to what pi(theta0) leaves unexplained
        pi0 = log_cholesky_to_parameters(theta0).reshape(-1)
        extra0 = jnp.linalg.lstsq(A[:, 10 * nb :], b - A[:, : 10 * nb] @ pi0)[0]
    u_lin = s * extra0
    # a positive parameter starts at least at 0.1 % of the data norm: softplus is flat near 0
    u0 = jnp.where(positive, _softplus_inverse(jnp.maximum(u_lin, 1e-3)), u_lin)

    def residuals(y, args):
        del args
        theta, u = y
        z = jnp.concatenate([log_cholesky_to_parameters(theta).reshape(-1), extras(u)])
        r = R @ z - c
        if prior is not None:
            # 0.5 * 2 w d = w d
            w_body = jnp.broadcast_to(prior_weight, theta.shape[:1])[:, None]
            r_prior = jnp.sqrt(2.0 * w_body) * _divergence_residuals(theta, prior)
            r = jnp.concatenate([r, r_prior.reshape(-1)])
        return r

    solver = optx.LevenbergMarquardt(rtol=tol, atol=tol)
    sol = optx.least_squares(residuals, solver, (theta0, u0), max_steps=steps, throw=False)
    theta, u = sol.value
    pi = log_cholesky_to_parameters(theta)
    beta = extras(u)
    cost = 0.5 * jnp.sum((A @ jnp.concatenate([pi.reshape(-1), beta]) - b) ** 2)
    if prior is not None:
        w_body = jnp.broadcast_to(prior_weight, theta.shape[:1])[:, None]
        cost = cost + jnp.sum(w_body * _divergence_residuals(theta, prior) ** 2)
    return ConsistentFit(
        pi=pi,
        theta=theta,
        extra=beta if ne else jnp.zeros((0,), dtype=pi.dtype),
        cost=cost,
        steps=jnp.asarray(sol.stats["num_steps"]),
        converged=sol.result == optx.RESULTS.successful,
    )


def fit_consistent(
    Y: Float[ArrayLike, "m p"],
    tau: Float[ArrayLike, " m"],
    *,
    theta0: Float[ArrayLike, "nb 10"],
    extra0: Float[ArrayLike, " ne"] | None = None,
    Y_extra: Float[ArrayLike, "m ne"] | None = None,
    extra_positive: Bool[ArrayLike, " ne"] | None = None,
    weights: Float[ArrayLike, " m"] | None = None,
    prior: Float[ArrayLike, "nb 10"] | None = None,
    prior_weight: float | Float[ArrayLike, ""] | Float[ArrayLike, " nb"] = 0.0,
    steps: int = 256,
    tol: float = 1e-10,
) -> ConsistentFit:
    r"""Physically consistent least squares over log-Cholesky coordinates:

        min_{theta, beta}  0.5 ||W (Y pi(theta) + Y_extra beta - tau)||^2
                           + prior_weight sum_b d(J(theta_b) || J(prior_b))

    with ``pi(theta)`` = `log_cholesky_to_parameters` (Rucker & Wensing (2022)), so every iterate
    is a physical body and no constraint is needed, and ``d`` the log-det divergence
    (`bregman_divergence`) toward prior parameters (CAD values).

    Solver: optimistix Levenberg-Marquardt. The objective is a sum of squares — data residuals,
    and the divergence written exactly as 10 squares per body (module docstring, with a smooth
    signed square root for the diagonal terms) — so Gauss-Newton uses the structure that a
    quasi-Newton method would have to learn, and the damping keeps steps bounded along the
    directions the data leave undetermined (a stacked regressor is rank deficient: only base
    parameters are identifiable; without a prior the fit picks one physical member of the set of
    equally good solutions, near ``theta0``). When the data alone favour a non-physical body
    (OLS outside the consistent set), the constrained optimum lies on the boundary, at infinite
    log-Cholesky coordinates: the fit stays physical and approaches the best cost, but reports
    ``converged=False`` after ``steps`` iterations; a small ``prior_weight`` makes the optimum
    interior again.

    Scaling: ``weights`` are per-row ``1/sigma`` (e.g. the per-joint noise levels of an OLS fit,
    Gautier & Poignet (2001)); then the data term is half a chi-square and ``prior_weight`` reads
    as the strength of a Wishart-like prior. Without weights every row is divided by
    ``rms(tau)``, making the residual dimensionless. Extra columns are rescaled internally by
    their norms. The data enter through the R factor of a QR of ``W [Y Y_extra]``, so the cost
    per iteration does not grow with the log length.

    Args:
        Y: stacked inertial regressor (m = N n rows, p = 10 nb columns, `jaxmb.regressor` order).
        tau: stacked measured generalized actuator forces (N m or N), m.
        theta0: starting log-Cholesky coordinates, e.g. `parameters_to_log_cholesky` of a prior.
        extra0: starting extra parameters; default: their linear least-squares fit at theta0.
        Y_extra: columns of further linear parameters (friction, armature, offsets), m x ne.
        extra_positive: which extra parameters must stay positive (softplus parameterised).
        weights: per-row weights, positive, m.
        prior: prior standard parameters (nb, 10), physically consistent; needs prior_weight.
        prior_weight: weight of the divergence, >= 0: one for all bodies, or one per body (a
            body known well, like a CAD boom, beside one barely known, like a payload).
        steps: maximum Levenberg-Marquardt iterations (static).
        tol: relative and absolute tolerance on the change of the iterate and of the cost.

    Returns:
        `ConsistentFit`."""
    Y = jnp.asarray(Y, dtype=float)
    tau = jnp.asarray(tau, dtype=float)
    theta0 = jnp.asarray(theta0, dtype=float)
    if Y.ndim != 2 or Y.shape[1] % 10:
        raise ValueError(f"Y: expected shape (m, 10 nb), got {Y.shape}")
    m, nb = Y.shape[0], Y.shape[1] // 10
    if tau.shape != (m,):
        raise ValueError(f"tau: expected shape ({m},) to match Y's rows, got {tau.shape}")
    if theta0.shape != (nb, 10):
        raise ValueError(
            f"theta0: expected shape ({nb}, 10) for Y's {nb} bodies, got {theta0.shape}"
        )
    if not isinstance(theta0, jax.core.Tracer) and not np.isfinite(np.asarray(theta0)).all():
        raise ValueError("theta0: expected finite log-Cholesky coordinates")
    Ye = jnp.zeros((m, 0), dtype=Y.dtype) if Y_extra is None else jnp.asarray(Y_extra, dtype=float)
    if Ye.ndim != 2 or Ye.shape[0] != m:
        raise ValueError(f"Y_extra: expected shape ({m}, ne), got {Ye.shape}")
    ne = Ye.shape[1]
    if extra0 is not None:
        extra0 = jnp.asarray(extra0, dtype=float)
        if extra0.shape != (ne,):
            raise ValueError(f"extra0: expected shape ({ne},) to match Y_extra, got {extra0.shape}")
    positive = (
        jnp.zeros((ne,), dtype=bool) if extra_positive is None else jnp.asarray(extra_positive)
    )
    if positive.shape != (ne,) or positive.dtype != jnp.bool_:
        raise ValueError(
            f"extra_positive: expected a boolean mask of shape ({ne},), got {positive.dtype} "
            f"{positive.shape}"
        )
    if weights is None:
        rms = jnp.sqrt(jnp.mean(tau**2))
        w = jnp.full((m,), 1.0, dtype=Y.dtype) / jnp.where(rms > 0, rms, 1.0)
    else:
        w = jnp.asarray(weights, dtype=float)
        if w.shape != (m,):
            raise ValueError(f"weights: expected shape ({m},), got {w.shape}")
        if not isinstance(w, jax.core.Tracer) and not (np.asarray(w) > 0).all():
            raise ValueError("weights: expected positive per-row weights (1 / sigma)")
    if prior is not None:
        prior = jnp.asarray(prior, dtype=float)
        if prior.shape != (nb, 10):
            raise ValueError(f"prior: expected shape ({nb}, 10), got {prior.shape}")
        if not isinstance(prior, jax.core.Tracer):
            _body_check(prior, "prior")  # names the non-physical prior body
        prior = parameters_to_log_cholesky(prior)
    if not isinstance(prior_weight, jax.core.Tracer):
        pw_np = np.asarray(prior_weight, dtype=float)
        if pw_np.shape not in ((), (nb,)):
            raise ValueError(
                f"prior_weight: expected a number or one per body ({nb},), got {pw_np.shape}"
            )
        if prior is None and (pw_np != 0.0).any():
            raise ValueError("prior_weight: is nonzero but no prior was given")
        if not (pw_np >= 0).all():
            raise ValueError(f"prior_weight: expected >= 0, got {prior_weight}")
    if not (isinstance(steps, int) and steps > 0):
        raise ValueError(f"steps: expected a positive int, got {steps!r}")
    pw = jnp.asarray(prior_weight, dtype=float)
    return _fit(Y, tau, w, Ye, theta0, extra0, positive, prior, pw, steps, tol)
