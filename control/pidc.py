r"""Projected inverse-dynamics control of constrained systems (Aghili (2005) Section 7): motion
control with minimum-(weighted-)norm input, passive joints, and hybrid motion/force control.

The motion is prescribed in k independent coordinates ``theta(q)`` (a "task": actuated joints,
an end-effector pose, ...). Their velocity map ``qd = Lambda thetad`` (eq. (40)) comes from
stacking the constraint and task Jacobians, ``[A; X] Lambda = [0; I]``, which is eq. (43)
(``R(Lambda) = N(A)``) together with ``X Lambda = I``; so no parameterisation ``q = psi(theta)``
is needed in closed form.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxmb.constraints.projection import (
    ConstrainedSystem,
    ProjectedTerms,
    constraint_bias,
    constraint_inertia,
    constraint_jacobian,
    projected_terms,
)
from jaxmb.constraints.pseudo_inverse import pinv
from jaxmb.multibody.checks import checked, not_nonnegative
from jaxmb.simulation import AbstractStatefulController

__all__ = [
    "independent_velocity_map",
    "metric_weights",
    "passive_joint_map",
    "pidc_force",
    "hybrid_motion_force",
    "force_auxiliary",
    "ProjectedInverseDynamics",
    "HybridForceControl",
]


def independent_velocity_map(
    system: ConstrainedSystem, task: Callable, q: Float[Array, " n"], qd: Float[Array, " n"]
) -> tuple[Float[Array, "n k"], Float[Array, " n"]]:
    r"""``(Lambda, Lambdadot thetad)`` of Aghili (2005) eqs. (40)-(41) for ``theta = task(q)``.

    With $S = [A; X]$, $X = \partial\theta/\partial q$: $\Lambda = S^+ [0; I]$ and
    $\dot\Lambda\dot\theta = -S^+ [\dot A\dot q; \dot X\dot q]$, because every admissible
    acceleration obeys $A\ddot q = -\dot A\dot q$ and $X\ddot q = \ddot\theta - \dot X\dot q$.
    Exact when S has full column rank, i.e. theta really is a set of independent coordinates
    at q (Appendix E)."""
    A = constraint_jacobian(system, q)
    X = jax.jacfwd(task)(q)
    S = jnp.concatenate([A, X])
    S_pinv = pinv(S, system.atol, system.rtol)
    m = A.shape[0]
    Xdot_qd = jax.jvp(lambda x: jax.jvp(task, (x,), (qd,))[1], (q,), (qd,))[1]
    bias = jnp.concatenate([constraint_bias(system, q, qd), Xdot_qd])
    return S_pinv[:, m:], -S_pinv @ bias


def metric_weights(
    names: tuple[str, ...], translational: tuple[str, ...], kappa: float
) -> Float[Array, " n"]:
    r"""Diagonal of the metric $W$ of Aghili (2005) eq. (50): $\kappa^{-2}$ for translational
    coordinates, 1 for rotational ones; $\kappa$ (m) is a characteristic length, so that
    $\|f\|_W^2 = f^\top W^{-1} f = \kappa^2\|f_f\|^2 + \|f_t\|^2$ adds like units (eq. (49))."""
    unknown = sorted(set(translational) - set(names))
    if unknown:
        raise ValueError(f"metric_weights: {unknown} are not among the coordinates {names}")
    if not kappa > 0:
        raise ValueError(f"metric_weights: kappa must be a length > 0, got {kappa}")
    return jnp.asarray([kappa**-2 if n in translational else 1.0 for n in names])


def passive_joint_map(
    P: Float[Array, "n n"], actuated: Float[Array, " n"], atol: float = 1e-9
) -> tuple[Float[Array, "n n"], Float[Array, ""]]:
    r"""``(H, residual)`` for constrained systems with passive joints (Aghili (2005) Section 7.4).

    ``actuated`` is the diagonal of $B$ (eq. (55)): 1 for actuated, 0 for passive coordinates.
    $Q = (I - B)(I - P) = I - B - P + BP$ (eq. (57)), $H = -(I-P)Q^+(I-B)$ (eq. (61)), and
    $f = (I + H) f_\parallel$ (eq. (62)) has no passive components and the same motion.

    ``residual`` $= \|(I - QQ^+)(I-B)P\|_2$ measures the controllability condition, eq. (58)
    $R((I-B)P) \subseteq R((I-B)(I-P))$, equivalently eq. (64): zero (to round-off) iff
    every $f_\parallel$ can be realised with the actuated joints alone."""
    n = P.shape[0]
    eye = jnp.eye(n, dtype=P.dtype)
    notB = jnp.diag(1.0 - actuated)
    Q = notB @ (eye - P)  # eq. (57)
    Q_pinv = pinv(Q, atol)
    H = -(eye - P) @ Q_pinv @ notB  # eq. (61)
    gap = (eye - Q @ Q_pinv) @ notB @ P
    return H, jnp.linalg.norm(gap, 2)


def pidc_force(
    terms: ProjectedTerms,
    u_p: Float[Array, " n"],
    weights: Float[Array, " n"] | None = None,
    actuated: Float[Array, " n"] | None = None,
    atol: float = 1e-9,
    rtol: float | None = None,
) -> tuple[Float[Array, " n"], Float[Array, ""]]:
    r"""Projected inverse dynamics $f_\parallel = h_\parallel + PMu_p$ (Aghili (2005) eq. (45)),
    in the metric $W = \mathrm{diag}(w)$ (eqs. (49)-(50)) and, with ``actuated``, made passive-
    joint admissible by eq. (62). Returns ``(f, controllability residual)`` (zero residual
    without ``actuated``).

    In the weighted coordinates $f_W = W^{-1/2}f$, $A_W = AW^{-1/2}$ (Section 7.2),
    $f_\parallel = W^{1/2}P_W W^{-1/2}(h + Mu_p)$ with $P_W = I - A_W^+A_W$: the input of least
    $\|f\|_W$ (eq. (48)) among all that give the same motion; with $w = 1$ this is eq. (45)."""
    g = terms.h + terms.M @ u_p
    if weights is None:
        P = terms.P
        f_par = P @ g  # eq. (45)
        sw = jnp.ones_like(g)
    else:
        sw = jnp.sqrt(weights)
        A_W = terms.A / sw[None, :]
        P = jnp.eye(g.shape[0], dtype=g.dtype) - pinv(A_W, atol, rtol) @ A_W  # P_W
        f_par = P @ (g / sw)  # f_W, parallel part, eq. (45) in the metric of eq. (49)
    if actuated is None:
        return sw * f_par, jnp.zeros((), g.dtype)
    H, residual = passive_joint_map(P, actuated, atol)  # B commutes with the diagonal W
    return sw * (f_par + H @ f_par), residual  # eq. (62)


def hybrid_motion_force(
    terms: ProjectedTerms, u_p: Float[Array, " n"], u_F: Float[Array, " n"]
) -> Float[Array, " n"]:
    r"""Hybrid motion/force control (Aghili (2005) eqs. (51) and (54)):

    $f = h + \mu C_c\dot q + (I + \mu)PMu_p + u_{\mathcal F}$, $\mu = (I-P)MM_c^{-1}$,

    after which the acceleration obeys $PM\ddot q = PMu_p$ (eq. (44)) and the constraint force
    equals $u_{\mathcal F}$ (eq. (32)), independently. ``u_F`` must lie in $N(A)^\perp$
    (e.g. $A^\top\lambda_d$). Departure: eqs. (51) and (54) print $\mu C\dot q$; eq. (32)
    and the units (force, not acceleration) require $\mu C_c\dot q = \mu MC\dot q$, used here."""
    M, P = terms.M, terms.P
    Mc, Ccqd = constraint_inertia(terms, "nonsymmetric")
    eye = jnp.eye(M.shape[0], dtype=M.dtype)
    PMu = P @ M @ u_p

    def mu(x):  # mu x = (I - P) M Mc^-1 x
        return (eye - P) @ (M @ jnp.linalg.solve(Mc, x))

    return terms.h + mu(Ccqd + PMu) + PMu + u_F


def force_auxiliary(
    F_d: Float[Array, " n"],
    F: Float[Array, " n"],
    integral: Float[Array, " n"],
    G_F: float | Float[Array, ""],
    G_I: float | Float[Array, ""],
) -> Float[Array, " n"]:
    r"""$u_{\mathcal F} = \mathcal F_d + G_F e_f + G_I\int_0^t e_f\,d\tau$, $e_f = \mathcal F_d - \mathcal F$
    (Aghili (2005) eq. (52)); ``integral`` is the running $\int e_f$. Closed with eq. (51) the
    force error obeys $(G_F + 1)\dot e_f + G_I e_f = 0$."""
    return F_d + G_F * (F_d - F) + G_I * integral


class ProjectedInverseDynamics(eqx.Module):
    r"""The PIDC law (Aghili (2005) eqs. (45)-(46)) as a controller for `jaxmb.simulation.integrate`:

    $u_p = \dot\Lambda\dot\theta + \Lambda(\ddot\theta_d + G_D\dot e_p + G_P e_p)$,
    $e_p = \theta_d - \theta$, and $f = h_\parallel + PMu_p$, so that
    $\ddot e_p + G_D\dot e_p + G_P e_p = 0$ exactly with an exact model (Theorem 4).

    Attributes:
        system: the controller's model of the plant.
        task: ``theta(q)``, k independent coordinates; the reference gives their desired values.
        G_P, G_D: (k, k) gain matrices (vectors are taken as diagonals), positive definite.
        weights: diagonal of the metric W (eqs. (49)-(50), e.g. `metric_weights`); None: W = I.
        actuated: names of the actuated coordinates (eq. (55)); None: all are actuated.
            With passive joints the input is made admissible by eq. (62).
    """

    system: ConstrainedSystem
    task: Callable
    G_P: Float[Array, "k k"]
    G_D: Float[Array, "k k"]
    weights: Float[Array, " n"] | None
    actuated: tuple[str, ...] | None = eqx.field(static=True)

    def __init__(self, system, task, G_P, G_D, *, weights=None, actuated=None):
        self.system, self.task = system, task
        k = jax.eval_shape(task, jax.ShapeDtypeStruct((system.n,), float)).shape
        if len(k) != 1:
            raise ValueError(
                f"ProjectedInverseDynamics: task must return a 1-D array, got shape {k}"
            )
        gains = []
        for name, G in (("G_P", G_P), ("G_D", G_D)):
            G = jnp.asarray(G, dtype=float)
            G = jnp.diag(G) if G.ndim == 1 else G
            if G.shape != (k[0], k[0]):
                raise ValueError(
                    f"ProjectedInverseDynamics: {name} must be ({k[0]},) or {k * 2}, got {G.shape}"
                )
            gains.append(G)
        self.G_P, self.G_D = gains
        if weights is not None:
            weights = jnp.asarray(weights, dtype=float)
            if weights.shape != (system.n,):
                raise ValueError(
                    f"ProjectedInverseDynamics: weights must have shape ({system.n},), got {weights.shape}"
                )
        self.weights = weights
        if actuated is not None:
            unknown = sorted(set(actuated) - set(system.coordinate_names))
            if unknown:
                raise ValueError(
                    f"ProjectedInverseDynamics: actuated {unknown} are not coordinates of {system.coordinate_names}"
                )
            actuated = tuple(actuated)
        self.actuated = actuated

    @property
    def reference_size(self) -> int:
        """The reference gives the k task coordinates ``theta_d`` (read by `simulate`)."""
        return jax.eval_shape(self.task, jax.ShapeDtypeStruct((self.system.n,), float)).shape[0]

    def _mask(self):
        if self.actuated is None:
            return None
        return jnp.asarray([float(n in self.actuated) for n in self.system.coordinate_names])

    def acceleration(self, q, qd, desired) -> Float[Array, " n"]:
        """``u_p`` of eq. (46)."""
        theta_d, thetad_d, thetadd_d = desired
        Lam, Lamdot_thetad = independent_velocity_map(self.system, self.task, q, qd)
        X = jax.jacfwd(self.task)(q)
        e = theta_d - self.task(q)
        ed = thetad_d - X @ qd
        return Lamdot_thetad + Lam @ (thetadd_d + self.G_D @ ed + self.G_P @ e)  # eq. (46)

    def control(self, t, q, qd, desired) -> tuple[Float[Array, " n"], Float[Array, ""]]:
        """``(f, controllability residual of eq. (64))``; the residual is zero without passive joints."""
        del t
        terms = projected_terms(self.system, q, qd)
        u_p = self.acceleration(q, qd, desired)
        return pidc_force(
            terms, u_p, self.weights, self._mask(), self.system.atol, self.system.rtol
        )

    def __call__(self, t, q, qd, desired) -> Float[Array, " n"]:
        return self.control(t, q, qd, desired)[0]


class HybridForceControl(AbstractStatefulController):
    r"""Hybrid motion/force control with an integral force loop (Aghili (2005) eqs. (51)-(52)):

    $u_{\mathcal F} = \mathcal F_d + G_F e_f + G_I\int e_f$, $e_f = \mathcal F_d - \mathcal F_m$,
    $f = h + \mu C_c\dot q + (I + \mu)PMu_p + u_{\mathcal F}$,

    with the motion auxiliary ``u_p`` of the PIDC law (eq. (46)) and ``F_m`` the measured
    constraint force (`jaxmb.actuators.plant.ForceSensedPlant`). The integral ``int e_f`` is this
    controller's own state, integrated by `jaxmb.simulation.integrate`. With an exact model eq. (51) alone
    gives ``F = u_F``; with model error the integral removes the steady force error.

    Attributes:
        pidc: the motion part (its ``system`` is the controller's model).
        force_d: ``F_d(t, q)`` (n,), the desired constraint force; it must lie in R(A^T).
        G_F, G_I: force gains (dimensionless, 1/s)."""

    pidc: ProjectedInverseDynamics
    force_d: Callable
    G_F: Float[Array, ""]
    G_I: Float[Array, ""]

    def __init__(self, pidc, force_d, G_F, G_I):
        self.pidc, self.force_d = pidc, force_d
        self.G_F = checked(
            G_F, not_nonnegative, "HybridForceControl: G_F must be >= 0 and finite", ()
        )
        self.G_I = checked(
            G_I, not_nonnegative, "HybridForceControl: G_I must be >= 0 and finite", ()
        )

    def init(self, t0, y0, desired0):
        del t0, desired0
        return jnp.zeros_like(y0["q"])

    @property
    def reference_size(self) -> int:
        return self.pidc.reference_size

    def __call__(self, t, y, desired, c):
        q, qd = y["q"], y["qd"]
        F_m = y["actuators"]["force_sensor"]["F"]
        F_d = self.force_d(t, q)
        terms = projected_terms(self.pidc.system, q, qd)
        u_p = self.pidc.acceleration(q, qd, desired)  # eq. (46)
        u_F = force_auxiliary(F_d, F_m, c, self.G_F, self.G_I)  # eq. (52)
        return hybrid_motion_force(terms, u_p, u_F), F_d - F_m  # eq. (51); d/dt int e_f
