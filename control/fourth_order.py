r"""Inverse dynamics control of flexible-joint parallel manipulators (Ider et al. (2019) Section 3,
eqs. (14)-(15), (20)-(21)) and its stability analysis as code (Section 4, eqs. (17)-(19),
(25)-(31)).

The controller measures the actuated joints and the rotors (``eta^a``, ``eta'^a``, ``phi``,
``phi'``; the unactuated joints follow from the loop closure, eq. (50) for the 3-RPR, and are
read from the plant's state, which satisfies it). On its model (`FlexibleJointPlant`, with
modelling error), it estimates ``eta''^a`` from eq. (6) (eq. (20)) and ``eta'''^a`` from its
derivative (eq. (21)), forms the task-space jet ``x .. x'''`` (eq. (9) and derivatives),
commands the snap

    u = x_d'''' + C1 (x_d''' - x''') + C2 (x_d'' - x'') + C3 (x_d' - x') + C4 (x_d - x)   eq. (15)

and the torques ``T = A_est u + B_est`` (eq. (14)) by `jaxmb.actuators.reduced.drive_torque` on the jet
whose snap is ``u``. With a perfect model the error obeys eq. (22), a fourth-order linear
system whose poles the ITAE gains place (`itae_gains`); with modelling error it obeys the
time-varying eq. (18).

Stability (`stability_analysis`): along a run, ``E = A^{-1} A_est`` (eq. (17)), the frozen-time
eigenvalues of ``Upsilon(t)`` (eq. (25)), the stability margin ``sigma_0`` (eq. (26)),
``Delta_M = sup |Upsilon'|`` (eqs. (28), (30), ``E'`` exact by forward mode along the measured
velocities), the constant ``m`` of eq. (29) (the largest ``|exp(Upsilon tau)| exp(sigma_0 tau /
2)`` over the run and over tau) and Desoer's condition ``Delta_M <= sigma_0^2 / (3 m^4)`` (eq.
(27)); and the steady-state error estimate ``e* = C4^{-1} E^{-1} delta`` (eq. (31)) with the
effective disturbance ``delta`` of eq. (19).
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxmb.actuators.flexible import FlexibleJointPlant
from jaxmb.actuators.reduced import (
    drive_torque_only,
    generalized_force_along_jet,
    jet_basis,
    next_coefficient,
    reduced_mass_matrix,
    reduced_terms_on_jet,
    shift_top,
    snap_terms,
    task_jacobian,
    time_derivative,
    time_derivatives,
)

__all__ = [
    "itae_gains",
    "FourthOrderController",
    "estimated_jet",
    "task_inertia",
    "stability_analysis",
    "StabilityReport",
]


def itae_gains(omega) -> tuple[Array, Array, Array, Array]:
    """``(C1, C2, C3, C4) = (2.1 w, 3.4 w^2, 2.7 w^3, w^4)``: the fourth-order ITAE pole pattern
    at bandwidth ``w`` (rad/s) per task coordinate (Section 4, after eq. (22))."""
    w = jnp.asarray(omega, dtype=float)
    return 2.1 * w, 3.4 * w**2, 2.7 * w**3, w**4


def estimated_jet(plant: FlexibleJointPlant, y: dict) -> list[Array]:
    """The jet ``[eta, eta', eta'', eta''']`` of all coordinates at the measured state ``y`` on
    ``plant``'s model: ``eta''^a`` by eq. (20), ``eta'''^a`` by eq. (21). Each order's
    coefficient is completed once, at a zero actuated part, and then moved by ``W a_j`` (it is
    affine in ``a_j``, `jaxmb.actuators.reduced.next_coefficient`)."""
    system, act = plant.system, plant.driven
    eta = y["q"]
    basis = jet_basis(system, act, eta)
    ia, W = basis.ia, basis.W
    etad_a = y["qd"][ia]
    phi, phid = plant.drive_states(y)
    K = plant.stiffness
    jet = [eta]
    jet = jet + [next_coefficient(system, basis, jet) + W @ etad_a]
    jet = jet + [next_coefficient(system, basis, jet)]  # eta'' at eta''^a = 0
    M_star, Q_star = reduced_terms_on_jet(system, act, basis, jet)
    a2 = -jnp.linalg.solve(M_star, Q_star + K * (eta[ia] - phi))  # eq. (20)
    jet = shift_top(basis, jet, a2)
    jet = jet + [next_coefficient(system, basis, jet)]  # eta''' at eta'''^a = 0
    Gd = time_derivative(generalized_force_along_jet(system, act, jet), 1)  # G' at eta'''^a = 0
    a3 = -jnp.linalg.solve(M_star, Gd + K * (etad_a - phid))  # eq. (21)
    return shift_top(basis, jet, a3)


def task_inertia(plant: FlexibleJointPlant, task: Callable, eta) -> Array:
    """``A = K^{-1} I^r M* J^{-1}`` (eq. (12)) at a configuration."""
    system, act = plant.system, plant.driven
    basis = jet_basis(system, act, eta)
    M_star = reduced_mass_matrix(basis, system, eta)
    J = task_jacobian(system, act, lambda e: task(system, e), eta, basis.W)
    scale = plant.reduced_rotor_inertia / plant.stiffness
    return scale[:, None] * jnp.linalg.solve(J.T, M_star.T).T


def _snap_terms(plant, task, jet):
    """`jaxmb.actuators.reduced.snap_terms` of the complete jet ``eta .. eta'''`` (as
    `estimated_jet` gives it) on ``plant``'s model, for ``x = task(system, eta)``."""
    return snap_terms(plant.system, plant.driven, lambda e: task(plant.system, e), jet)


def _torque_for_snap(plant, task, jet, snap, terms=None):
    """``T`` (eq. (14)) on ``plant``'s model for the complete jet ``eta .. eta'''`` and task snap
    ``snap``, with the jet's task-space derivatives; ``terms``: `_snap_terms` where the caller
    has them."""
    basis, full, x, J = _snap_terms(plant, task, jet) if terms is None else terms
    a4 = jnp.linalg.solve(J, snap - x[4])  # x'''' = J a4 + (its value at a4 = 0)
    return drive_torque_only(plant, shift_top(basis, full, a4)), x


class FourthOrderController(eqx.Module):
    r"""Eqs. (14)-(15) with the estimates of eqs. (20)-(21), for `jaxmb.simulation.sampled.simulate_sampled`
    (or `jaxmb.simulation.simulate`) on a `FlexibleJointPlant`.

    Attributes:
        model: the controller's plant model (its parameters may be in error).
        task: ``x = task(system, eta)``, the task coordinates (eq. (9); e.g.
            `jaxmb.models.planar_rpr.end_effector`).
        reference: ``x_d(t)``; its derivatives to the snap by forward mode.
        C1, C2, C3, C4: the diagonal gains of eq. (15) (`itae_gains`).
    """

    model: FlexibleJointPlant
    reference: Callable
    C1: Float[Array, " n"]
    C2: Float[Array, " n"]
    C3: Float[Array, " n"]
    C4: Float[Array, " n"]
    task: Callable = eqx.field(static=True)

    def __init__(self, model, task, reference, gains):
        if not isinstance(model, FlexibleJointPlant):
            raise ValueError(
                "FourthOrderController: model must be a FlexibleJointPlant, got "
                f"{type(model).__name__}"
            )
        self.model, self.task, self.reference = model, task, reference
        n = len(model.joints)
        Cs = [jnp.broadcast_to(jnp.asarray(c, dtype=float), (n,)) for c in gains]
        if len(Cs) != 4:
            raise ValueError("FourthOrderController: gains must be (C1, C2, C3, C4)")
        self.C1, self.C2, self.C3, self.C4 = Cs

    def desired(self, t) -> list[Array]:
        """``[x_d, x_d', x_d'', x_d''', x_d'''']`` at ``t``."""
        t = jnp.asarray(t, dtype=float)
        return time_derivatives(lambda s: self.reference(t + s), 4)

    def terms(self, t, y):
        """``(T, u, x-jet, desired jet)`` at the measured state ``y``."""
        jet = estimated_jet(self.model, y)
        xd = self.desired(t)
        snap_terms = _snap_terms(self.model, self.task, jet)
        x = snap_terms[2][:4]
        u = (
            xd[4]
            + self.C1 * (xd[3] - x[3])
            + self.C2 * (xd[2] - x[2])
            + self.C3 * (xd[1] - x[1])
            + self.C4 * (xd[0] - x[0])
        )  # eq. (15)
        T, _ = _torque_for_snap(self.model, self.task, jet, u, snap_terms)  # eq. (14)
        return T, u, x, xd

    def __call__(self, t, y, desired=None):
        del desired  # the law differentiates its own task-space reference to the snap
        return self.terms(t, y)[0]


class StabilityReport(eqx.Module):
    """`stability_analysis`'s figures (arrays over the analysed samples)."""

    t: Array
    eigenvalues: Array  # (T, 4n) frozen-time eigenvalues of Upsilon (eq. (25))
    sigma0: Array  # stability margin: min over t of -max Re(lambda) (eq. (26))
    delta_M: Array  # sup |Upsilon'| (eq. (28)), in the scaled coordinates (see the code)
    m: Array  # eq. (29)
    desoer_bound: Array  # sigma0^2 / (3 m^4)
    desoer_holds: Array  # eq. (27)
    E: Array  # (T, n, n) eq. (17)
    delta: Array  # (T, n) effective disturbance (eq. (19))
    e_star: Array  # (T, n) steady-state error estimate (eq. (31))


def _upsilon(E, C1, C2, C3, C4):
    n = E.shape[0]
    Z, I = jnp.zeros((n, n)), jnp.eye(n)
    return jnp.block(
        [
            [Z, I, Z, Z],
            [Z, Z, I, Z],
            [Z, Z, Z, I],
            [-E * C4[None], -E * C3[None], -E * C2[None], -E * C1[None]],
        ]
    )  # eq. (25): E C_i with C_i diagonal


def _on_both(f, plant, est):
    """``(f(plant), f(est))``, as one `jax.vmap` over the two parameter sets when the models
    share their structure (they differ in parameters only): one copy of ``f`` to compile
    instead of two."""
    (dyn_p, static_p), (dyn_e, static_e) = (
        eqx.partition(plant, eqx.is_array),
        eqx.partition(est, eqx.is_array),
    )
    same = jax.tree.structure(dyn_p) == jax.tree.structure(dyn_e) and eqx.tree_equal(
        static_p, static_e
    )
    if not same or any(
        a.shape != b.shape
        for a, b in zip(jax.tree.leaves(dyn_p), jax.tree.leaves(dyn_e), strict=True)
    ):
        return f(plant), f(est)
    both = jax.tree.map(lambda a, b: jnp.stack([a, b]), dyn_p, dyn_e)
    out = jax.vmap(lambda d: f(eqx.combine(d, static_p)))(both)
    return out[0], out[1]


def stability_analysis(
    controller: FourthOrderController,
    plant: FlexibleJointPlant,
    ts: Float[Array, " T"],
    ys: dict,
    *,
    taus: int = 200,
    steady_state: bool = True,
) -> StabilityReport:
    """Section 4's analysis along a run of ``plant`` (the true system) under ``controller``
    (module docstring). ``ys`` are the plant states at ``ts``. ``m`` is the maximum over the
    samples and over ``taus`` values of tau, log-spaced up to 40 / sigma0 (by then the bound's
    exponent has decayed). ``steady_state=False`` skips eq. (31) (``delta`` and ``e_star`` are
    then empty): the rest needs the configurations alone and compiles far faster."""
    task = controller.task
    C = (controller.C1, controller.C2, controller.C3, controller.C4)
    est = controller.model

    def at(t, y):
        eta, etad = y["q"], y["qd"]
        A = task_inertia(plant, task, eta)
        A_est = task_inertia(est, task, eta)
        E = jnp.linalg.solve(A, A_est)  # eq. (17)
        # E' along the motion: E depends on the configuration alone
        Ed = jax.jvp(
            lambda e: jnp.linalg.solve(task_inertia(plant, task, e), task_inertia(est, task, e)),
            (eta,),
            (etad,),
        )[1]
        Ups = _upsilon(E, *C)
        Upsd = _upsilon(Ed, *C) - _upsilon(jnp.zeros_like(Ed), *C)  # eq. (30)
        if not steady_state:
            return E, Ups, Upsd, jnp.zeros(0), jnp.zeros(0)
        # eq. (19): delta = A^{-1} (B - B_est) + (I - E) x_d'''' (no external disturbance D);
        # B is the torque at zero snap on the true jet, B_est on the controller's estimate
        xd = controller.desired(t)
        zero = jnp.zeros_like(xd[0])
        B_true, B_est = _on_both(
            lambda p: _torque_for_snap(p, task, estimated_jet(p, y), zero)[0], plant, est
        )
        delta = jnp.linalg.solve(A, B_true - B_est) + (jnp.eye(len(zero)) - E) @ xd[4]
        e_star = jnp.linalg.solve(E, delta) / C[3]  # eq. (31): C4^{-1} E^{-1} delta
        return E, Ups, Upsd, delta, e_star

    E, Ups, Upsd, delta, e_star = jax.vmap(at)(ts, ys)
    # Desoer's result holds in any induced norm, and a constant change of state coordinates
    # keeps stability: measure Upsilon in mu~ = S mu, S = diag(1, 1/w, 1/w^2, 1/w^3) per task
    # coordinate (w = C4^(1/4), the ITAE bandwidth), where the error and its three derivatives
    # are commensurate. In the raw coordinates |exp(Upsilon tau)| carries factors up to w^3
    # (3e4 at 50 rad/s), m is needlessly large and scipy-style expm overflows.
    w = C[3] ** 0.25
    s = jnp.concatenate([w**-k for k in range(4)])
    Ups = Ups * s[None, :, None] / s[None, None, :]
    Upsd = Upsd * s[None, :, None] / s[None, None, :]
    # the eigenvalues too: in the raw coordinates (entries up to w^4) they lose digits
    lam = jax.vmap(jnp.linalg.eigvals)(Ups)
    sigma0 = jnp.min(-jnp.max(lam.real, axis=1))
    tau = jnp.concatenate([jnp.zeros(1), jnp.logspace(-4, 0, taus - 1) * 40.0 / sigma0])

    def m_of(U):
        norms = jax.vmap(lambda r: jnp.linalg.norm(jax.scipy.linalg.expm(U * r), 2))(tau)
        return jnp.max(norms * jnp.exp(sigma0 * tau / 2))

    m = jnp.max(jax.lax.map(m_of, Ups))
    delta_M = jnp.max(jax.vmap(lambda U: jnp.linalg.norm(U, 2))(Upsd))
    bound = sigma0**2 / (3 * m**4)
    return StabilityReport(
        t=ts,
        eigenvalues=lam,
        sigma0=sigma0,
        delta_M=delta_M,
        m=m,
        desoer_bound=bound,
        desoer_holds=delta_M <= bound,
        E=E,
        delta=delta,
        e_star=e_star,
    )
