r"""Virtual decomposition control of valve-driven hydraulic manipulators (Petrovic & Mattila
(2022) Sections 4-6, eqs. (36), (8), (76), (90)-(91)), and its virtual-stability check
(eqs. (95)-(99)).

Per cylinder j, with the required joint velocities ``qd_r = qd_d + lambda (q_d - q)``
(eq. (36)):

- the required actuator force ``f_cjr`` by the VDC recursion (`jaxmb.vdc.required_forces`:
  required velocities eqs. (38)-(45), required net forces eq. (8) with ``K_A``, eq. (76)), plus
  the cylinder friction the controller's model predicts at the *required* piston velocity,
  gives the required piston force ``f_pjr = f_cjr + f_f(xdot_r)`` (eq. (78) for required
  quantities, the ``f_fjr`` of Appendix C's eqs. (C.12)-(C.13));
- the required voltage-related term (eq. (90), written for chambers with dead volumes):

      u_fr = fdot_pr / beta + (A_a^2 / V_a + A_b^2 / V_b) xdot + k_x (xdot_r - xdot) + k_f (f_pr - f_p)

  where ``f_p = A_a p_a - A_b p_b`` (eq. (79)) is measured through the chamber pressures;
- the valve voltage inverts the flow model (eq. (91)):

      u = u_fr / (A_a c_pa v(p_s - p_a) / V_a + A_b c_bn v(p_b - p_r) / V_b)   if u_fr > 0
      u = u_fr / (A_a c_an v(p_a - p_r) / V_a + A_b c_pb v(p_s - p_b) / V_b)   otherwise,

  and a valve with spool overlap ``u_db`` gets ``u + u_db sign(u)``, the command whose
  effective opening is ``u`` (`jaxmb.actuators.hydraulics.Valve.step_over`).

Departure from the paper, stated: its eqs. (80)-(81), (86)-(91) take chamber volumes
``V_a = A_a x`` and ``V_b = A_b (s - x)``. The spec's chambers have dead volumes ``V0``, so
``u_f = A_a Q_a / V_a - A_b Q_b / V_b``, which is eq. (86) when ``V0 = 0`` (``A_a / V_a =
1 / x``); with it ``fdot_p = beta (u_f - (A_a^2/V_a + A_b^2/V_b) xdot)`` is eq. (87) exactly.

``fdot_pr``, the time derivative of the required piston force, is a forward-mode derivative
(`jax.jvp`) of the whole required-force computation along ``(t, q, qd)`` with the measured
``qd`` and the acceleration the controller's model predicts under the measured pressures
(full-state feedback makes it available; with a perfect model it is the plant's acceleration,
which is what Appendix C's proof of eq. (99) needs).

Why the friction is taken at the required velocity, as the paper's proof does, and not at the
measured one: the smooth Coulomb/Stribeck law is steep at rest (slope ``F_s / v_eps``), and
through ``fdot_pr`` its slope at the measured velocity becomes a high-gain feedback of the
piston's acceleration. Near rest the valve command then chatters. Measured on the shipped
crane Monte Carlo study over the first 0.5 s from rest, with a 174 kg payload the controller
does not know: at the measured velocity, the tilt command's rms rate was 3400 V/s and the
solve took 3408 steps; at the required velocity it is 9 V/s and 262 steps, with the same
tracking error (1e-2 and 5e-3 rad rms). For an increasing friction law
``-(f_f(xdot_r) - f_f(xdot)) (xdot_r - xdot) <= 0`` (eq. (C.13)): the friction mismatch only
dissipates, and eq. (99) holds as an inequality (`virtual_stability`). The spec's Stribeck law
dips between ``F_s`` and ``F_c`` and so is not increasing everywhere, as the paper assumes:
there the term can be slightly positive (`tests/test_crane.py` measures how much).
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxmb.actuators.hydraulics import signed_sqrt
from jaxmb.actuators.plant import HydraulicPlant, MechanicsPass
from jaxmb.algorithms.tree_dynamics import augmented_state
from jaxmb.multibody.checks import checked, not_positive
from jaxmb.simulation import desired_state
from jaxmb.vdc import M_A, VDCChain, chain_bodies, required_forces
from jaxmb.vdc.bodies import body_gains, body_required_forces

__all__ = ["GAINS", "VDCController", "VDCTerms", "virtual_stability"]

# VDC gains every machine starts from (a machine file's [vdc] table sets its own; the paper
# gives none): lambda_q = 10 1/s (eq. (36)), K_A = 50 M_A + I (eq. (8)),
# k_x = 3e-2 m and k_f = 1e-7 m^2/(s N) (eq. (90): the force error decays at beta k_f = 100 1/s).
# Chosen by a sweep (scripts/bench_crane.py --sweep) on three runs: the A-B-C-D task at 4 s
# per segment with booms 20 % (lift) and 50 % (tilt) heavier than the controller believes, and
# the spec's 2 s task on the nominal and on that heavy plant. Max joint errors (rad), in order:
#   lambda 5,  k_v 10, k_x 1e-3: 0.031, 0.149, 0.204   (the first guess)
#   lambda 10, k_v 50, k_x 1e-3: 0.0068, 0.311, 0.352  (stiffer K_A alone fights saturation)
#   lambda 10, k_v 50, k_x 3e-2: 0.0034, 0.150, 0.172  (chosen)
#   lambda 10, k_v 50, k_x 1e-1: 0.0024, 0.150, 0.171  (35 % more solver steps)
# On the 2 s task the nominal error, 0.15 rad, is set by the lift valve's saturation, not by
# the gains (see tests/test_crane.py).
GAINS = {"lam": 10.0, "k_v": 50.0, "k_0": 1.0, "k_x": 3e-2, "k_f": 1e-7}


def _gain(name: str, x, shape):
    x = jnp.asarray(x, dtype=float)
    x = jnp.broadcast_to(x, shape) if x.ndim == 0 else x
    return checked(x, not_positive, f"VDCController.{name}: must be > 0 and finite", shape)


class VDCTerms(eqx.Module):
    """Intermediate quantities of one evaluation of `VDCController` (all (m,) per cylinder
    unless noted), for reports and for the stability check."""

    u: Array  # valve voltages before saturation, V
    f_pr: Array  # required piston forces, N
    fdot_pr: Array  # their time derivatives, N/s
    f_p: Array  # measured piston forces A_a p_a - A_b p_b, N
    xd: Array  # piston velocities, m/s
    xd_r: Array  # required piston velocities, m/s
    u_fr: Array  # required voltage-related terms (eq. (90)), m^2/s
    v: Array  # (k,) accompanying functions v_A of the rigid bodies (eq. (96)), J
    dV: Array  # (k, 6) V_r - V of the eq. (94) frames


class VDCController(eqx.Module):
    r"""The VDC valve-voltage law (see the module docstring) as a controller for
    `jaxmb.simulation.integrate` on a `jaxmb.actuators.plant.HydraulicPlant`.

    Attributes:
        plant: the controller's model of the plant (mechanics, cylinders, valves, friction):
            what it believes, not necessarily what is simulated.
        chain: the VDC decomposition of ``plant.model`` into segments (e.g.
            `jaxmb.models.crane.crane_chain`), segment j driven by ``plant.actuators[j]``; or None: the
            decomposition into the model's bodies (`jaxmb.vdc.bodies`), which any machine
            file's plant has, whatever its geometry. Both give the same required forces when
            ``k_0 = 0``.
        reference: ``q_d(t)``, differentiated three times by autodiff (eq. (90) needs the
            derivative of the required force, which holds ``qdd_d``).
        lam: ``lambda_qj`` of eq. (36), 1/s, one per joint.
        k_v: velocity-error gain of the rigid bodies, 1/s: ``K_A = k_v M_A + k_0 I`` (eq. (8)),
            positive definite also for the massless virtual links.
        k_0: the small isotropic part of ``K_A`` (N s/m and N m s units).
        k_x: eq. (90)'s velocity-error gain, m, one per cylinder.
        k_f: eq. (90)'s force-error gain, m^2 s^-1 N^-1, one per cylinder; the force error
            decays at the rate ``beta k_f``.
    """

    plant: HydraulicPlant
    chain: VDCChain | None
    reference: Callable
    lam: Float[Array, " n"]
    k_v: Float[Array, ""]
    k_0: Float[Array, ""]
    k_x: Float[Array, " m"]
    k_f: Float[Array, " m"]

    def __init__(self, plant, chain, reference, *, lam=5.0, k_v=10.0, k_0=1.0, k_x=1e-3, k_f=1e-7):
        if not isinstance(plant, HydraulicPlant):
            raise ValueError(
                f"VDCController: plant must be a HydraulicPlant, got {type(plant).__name__}"
            )
        if len(plant.actuators) != plant.n or (chain is not None and chain.n != plant.n):
            raise ValueError(
                f"VDCController: the plant has {len(plant.actuators)} cylinders and {plant.n} "
                "coordinates"
                + ("" if chain is None else f", the chain {chain.n} segments")
                + " (one cylinder per coordinate expected)"
            )
        stateful = [
            a.name for a in plant.actuators if a.friction is not None and a.friction.n_states
        ]
        if stateful:
            raise ValueError(
                f"VDCController: the controller's friction model must be static (it does not "
                f"measure bristle states); actuators {stateful} have LuGre friction. Give the "
                "controller a plant model with friction='stribeck' (the plant may keep LuGre)"
            )
        self.plant, self.chain, self.reference = plant, chain, reference
        n, m = plant.n, len(plant.actuators)
        self.lam = _gain("lam", lam, (n,))
        self.k_v = _gain("k_v", k_v, ())
        self.k_0 = _gain("k_0", k_0, ())
        self.k_x = _gain("k_x", k_x, (m,))
        self.k_f = _gain("k_f", k_f, (m,))

    def body_gains(self) -> Array:
        """``K_A = k_v M_A + k_0 I`` for the frames of eq. (94), (k, 6, 6): the chain's, or the
        model's bodies when there is no chain."""
        if self.chain is None:
            return body_gains(self.plant.model, self.k_v, self.k_0)
        Ms = jnp.stack([M_A(b) for _, b in chain_bodies(self.chain)])
        return self.k_v * Ms + self.k_0 * jnp.eye(6)[None]

    def _required(self, t, q, qd):
        """``((f_pr, xd_r), (v, dV))`` at time t for the measured (q, qd): the required piston
        forces and velocities, and the bodies' velocity errors."""
        q_d, qd_d, qdd_d = desired_state(self.reference, t)
        qd_r = qd_d + self.lam * (q_d - q)  # eq. (36)
        qdd_r = qdd_d + self.lam * (qd_d - qd)  # its time derivative
        _, _, J = self.plant.pistons_at(augmented_state(self.plant.model, q, qd))
        if self.chain is None:  # the same forces by virtual power over the bodies
            req = body_required_forces(self.plant.model, q, qd, qd_r, qdd_r, self.body_gains())
            f_cr = jnp.linalg.solve(J.T, req.tau_r)  # tau = J_x^T f
        else:
            req = required_forces(self.chain, q, qd, qd_r, qdd_r, self.body_gains())  # eq. (76)
            f_cr = req.f_cr
        xd_r = J @ qd_r
        f_fric = jnp.stack(
            [a.friction_force(xd_r[i], {}) for i, a in enumerate(self.plant.actuators)]
        )
        return (f_cr + f_fric, xd_r), (req.v, req.dV)  # eq. (78)

    def terms(self, t, y) -> VDCTerms:
        """Evaluate the law at time t for the measured state dict ``y``."""
        # one kinematic pass at (q, qd) serves the pistons and the model's acceleration
        return self.terms_from(t, y, self.plant.mechanics_pass(y))

    def terms_from(self, t, y, mech: MechanicsPass) -> VDCTerms:
        """`terms` from the kinematic pass and acceleration of the controller's model at the
        measured state: its own (`terms`), or the simulated plant's where that plant is the
        controller's model (the closed loop then makes one pass a state, not two)."""
        act, acts = y["actuators"], self.plant.actuators
        t = jnp.asarray(t, float)
        q, qd = mech.state.q, mech.state.qd
        x, xd, qdd_hat = mech.x, mech.xd, mech.qdd
        p_a = jnp.stack([act[a.name]["p_a"] for a in acts])
        p_b = jnp.stack([act[a.name]["p_b"] for a in acts])
        f_p = jnp.stack([a.cylinder.force(p_a[i], p_b[i]) for i, a in enumerate(acts)])
        # the required forces and their rate from one forward-mode pass along
        # (1, qd, qdd_hat), whose primal repeats the kinematics (XLA computes it once)
        (f_pr, xd_r), (fdot_pr, _), (v, dV) = jax.jvp(
            self._required, (t, q, qd), (jnp.ones_like(t), qd, qdd_hat), has_aux=True
        )  # xd_r's rate is unused: XLA drops it
        u_fr, u = [], []
        for i, a in enumerate(acts):
            c, val = a.cylinder, a.valve
            V_a, V_b = c.volumes(x[i])
            stiff = c.area_a**2 / V_a + c.area_b**2 / V_b
            ufr = (
                fdot_pr[i] / c.beta
                + stiff * xd[i]
                + self.k_x[i] * (xd_r[i] - xd[i])
                + self.k_f[i] * (f_pr[i] - f_p[i])
            )  # eq. (90), dead volumes
            w = val.dp_width
            g_pos = (
                c.area_a * val.c_pa * signed_sqrt(val.p_s - p_a[i], w) / V_a
                + c.area_b * val.c_bn * signed_sqrt(p_b[i] - val.p_r, w) / V_b
            )
            g_neg = (
                c.area_a * val.c_an * signed_sqrt(p_a[i] - val.p_r, w) / V_a
                + c.area_b * val.c_pb * signed_sqrt(val.p_s - p_b[i], w) / V_b
            )
            # eq. (91) gives the opening; a known spool overlap is stepped over, as
            # controllers of mobile valves do (`Valve.step_over`)
            u.append(val.step_over(jnp.where(ufr > 0, ufr / g_pos, ufr / g_neg)))
            u_fr.append(ufr)
        return VDCTerms(
            u=jnp.stack(u),
            f_pr=f_pr,
            fdot_pr=fdot_pr,
            f_p=f_p,
            xd=xd,
            xd_r=xd_r,
            u_fr=jnp.stack(u_fr),
            v=v,
            dV=dV,
        )

    def __call__(self, t, y, desired=None):
        del desired  # the law differentiates its own reference (it needs the third derivative)
        return self.terms(t, y).u

    def command_from(self, t, y, mech: MechanicsPass):
        """`__call__` from ``mech``, the `MechanicsPass` of the controller's model at ``y``:
        what a closed loop on that very plant shares with its vector field."""
        return self.terms_from(t, y, mech).u


def virtual_stability(
    controller: VDCController, plant: HydraulicPlant, t, y
) -> tuple[Array, Array, Array, Array]:
    r"""``(v, vdot, bound, friction)`` of Petrovic & Mattila (2022) Theorem 5 for the whole
    manipulator.

    ``v = sum_A v_A + sum_j v_pj`` (eqs. (95)-(98): ``v_A = 1/2 (V_r - V)^T M_A (V_r - V)``,
    ``v_pj = (f_pjr - f_pj)^2 / (2 beta k_xj)``); ``vdot`` is its exact time derivative along the
    simulated plant's vector field under the controller's command (`jax.jvp`); ``bound`` is the
    right side of eq. (99) summed over the segments,
    ``-sum_A (V_r - V)^T K_A (V_r - V) - sum_j (k_fj / k_xj)(f_pjr - f_pj)^2``: the virtual power
    flows of neighbouring segments cancel, the fixed base has none, and the tool is free.
    ``friction = sum_j (f_f(xdot_rj) - f_f(xdot_j)) (xdot_rj - xdot_j)`` is the term eq. (C.13)
    drops (the controller's friction law at the required and the measured velocity), >= 0 for
    an increasing law. Eq. (99) holds when ``vdot <= bound``; with a perfect model and
    unsaturated valves ``vdot = bound - friction`` exactly (eq. (C.12))."""
    acts = controller.plant.actuators
    u = controller(t, y)
    ydot = plant.vector_field(t, y, u)

    def value(t_, y_):
        T = controller.terms(t_, y_)
        beta = jnp.stack([a.cylinder.beta for a in acts])
        v_p = (T.f_pr - T.f_p) ** 2 / (2 * beta * controller.k_x)  # eq. (97)
        return jnp.sum(T.v) + jnp.sum(v_p)  # eq. (95)

    t = jnp.asarray(t, float)
    v, vdot = jax.jvp(value, (t, y), (jnp.ones_like(t), ydot))
    T = controller.terms(t, y)
    K = controller.body_gains()
    mech = jnp.einsum("ki,kij,kj->", T.dV, K, T.dV)
    hyd = jnp.sum(controller.k_f / controller.k_x * (T.f_pr - T.f_p) ** 2)
    df = jnp.stack(
        [
            a.friction_force(T.xd_r[i], {}) - a.friction_force(T.xd[i], {})
            for i, a in enumerate(acts)
        ]
    )
    return v, vdot, -mech - hyd, jnp.sum(df * (T.xd_r - T.xd))  # eqs. (99), (C.12)-(C.13)
