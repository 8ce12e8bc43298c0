r"""Flexible-joint drives (Spong (1987); Ider et al. (2019) Section 2, eqs. (3)-(4)): a rotor
behind each driven joint, coupled to it through a torsional spring (and optionally a damper)
at the reducer's output.

For each driven coordinate ``a`` the drive adds the actuator variable ``phi_a``, the rotor
angle divided by the gear ratio ``r_a`` (so ``phi_a = q_a`` when the spring is relaxed), and

    M(q) qdd + h(q, qd) + S^T tau_s + B^T lambda = Q_e           eq. (3), F^s = S^T tau_s
    I^r phidd - tau_s = T                                        eq. (4)
    tau_s = K (q_a - phi) + D (qd_a - phid)

with ``S`` selecting the driven coordinates, ``I^r = r^2 I_rotor`` the rotor inertia reduced
to the link side (the rotor turns ``r`` times faster than ``phi``), ``K`` and ``D`` the
spring and damper (N m/rad, N m s/rad; N/m, N s/m for a prismatic coordinate) and ``T`` the
drive torque at the reducer's output. As in the paper the gear ratio is taken large enough
that the rotor's kinetic energy is its own spin alone (no inertia coupling between ``q`` and
``phi``), and the rotors' masses belong to the links that carry them.

The mechanics is any jaxmb system: a `Model` in minimal coordinates (open tree, or a closed
chain through a coordinate map) or a `ConstrainedSystem` in dependent coordinates, where
``B^T lambda`` is eliminated by Aghili's projection (`jaxmb.constraints.projection.forward_dynamics`).
As ``K`` grows the link motion tends to that of the rigid system whose driven joints carry the
reduced rotor inertias (`rigid_limit`); `tests/test_flexible.py` measures the convergence.
"""

from __future__ import annotations

from collections.abc import Mapping

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxmb.actuators.plant import AbstractPlant, finite_state
from jaxmb.algorithms.dynamics import (
    bias_forces,
    forward_dynamics,
    kinetic_energy,
    mass_matrix,
    potential_energy,
)
from jaxmb.constraints.projection import ConstrainedSystem, constraint_bias, constraint_jacobian
from jaxmb.constraints.projection import forward_dynamics as projected_forward_dynamics
from jaxmb.multibody.checks import checked, not_nonnegative, not_positive
from jaxmb.multibody.model import Model

__all__ = ["FlexibleJointPlant", "RotorLoaded", "rigid_limit"]


def _positive(name, x, shape, allow_zero=False):
    x = jnp.broadcast_to(jnp.asarray(x, dtype=float), shape)
    bad = not_nonnegative if allow_zero else not_positive
    what = ">= 0" if allow_zero else "> 0"
    return checked(x, bad, f"FlexibleJointPlant: {name} must be {what} and finite", shape)


class FlexibleJointPlant(AbstractPlant):
    r"""A system whose coordinates ``joints`` are driven through flexible transmissions
    (module docstring; Ider et al. (2019) eqs. (3)-(4)).

    Attributes:
        system: the rigid mechanics, a `Model` or a `ConstrainedSystem`.
        joints: the driven coordinates, in command order (static).
        rotor_inertia: each rotor's own inertia about its axis, kg m^2 (motor side).
        gear_ratio: ``r``, rotor turns per joint turn.
        stiffness: ``K`` of the transmission, N m/rad (N/m for a prismatic coordinate).
        damping: ``D`` of the transmission (default 0: the paper's undamped spring).

    State: ``{"q", "qd", "actuators": {joint: {"phi": (), "phid": ()}}}``; commands
    ``tau_<joint>`` (``T`` of eq. (4), at the reducer's output). Every parameter is an array
    leaf: differentiable, and perturbed by Monte Carlo studies and identification alike."""

    system: Model | ConstrainedSystem
    rotor_inertia: Float[Array, " a"]
    gear_ratio: Float[Array, " a"]
    stiffness: Float[Array, " a"]
    damping: Float[Array, " a"]
    joints: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, system, joints, *, rotor_inertia, gear_ratio, stiffness, damping=0.0):
        if not isinstance(system, Model | ConstrainedSystem):
            raise ValueError(
                "FlexibleJointPlant: system must be a Model or a ConstrainedSystem, got "
                f"{type(system).__name__}"
            )
        self.system = system
        joints = tuple(joints)
        if not joints:
            raise ValueError("FlexibleJointPlant: joints must name at least one coordinate")
        if len(set(joints)) != len(joints):
            raise ValueError(f"FlexibleJointPlant: joints {joints} repeat a coordinate")
        names = self.model.coordinate_names
        unknown = [j for j in joints if j not in names]
        if unknown:
            raise ValueError(
                f"FlexibleJointPlant: joints {unknown} are not coordinates of the system; "
                f"coordinates are {names}"
            )
        self.joints = joints
        shape = (len(joints),)
        self.rotor_inertia = _positive("rotor_inertia", rotor_inertia, shape)
        self.gear_ratio = _positive("gear_ratio", gear_ratio, shape)
        self.stiffness = _positive("stiffness", stiffness, shape)
        self.damping = _positive("damping", damping, shape, allow_zero=True)

    @property
    def model(self) -> Model:
        return self.system.model if isinstance(self.system, ConstrainedSystem) else self.system

    @property
    def constrained(self) -> bool:
        return isinstance(self.system, ConstrainedSystem)

    @property
    def driven(self) -> tuple[int, ...]:
        """Indices of ``joints`` among the coordinates."""
        names = self.model.coordinate_names
        return tuple(names.index(j) for j in self.joints)

    @property
    def command_names(self) -> tuple[str, ...]:
        return tuple(f"tau_{j}" for j in self.joints)

    @property
    def reduced_rotor_inertia(self) -> Float[Array, " a"]:
        """``I^r`` of eq. (4): ``r^2 I_rotor``, the rotor seen from the joint side."""
        return self.gear_ratio**2 * self.rotor_inertia

    def initial_state(self, q0, qd0, actuators: Mapping | None = None) -> dict:
        """The state at ``(q0, qd0)``; by default every spring relaxed (``phi = q_a``) and every
        rotor moving with its joint (``phid = qd_a``). ``actuators`` gives ``{joint: {"phi",
        "phid"}}`` instead, e.g. springs preloaded against gravity."""
        q0, qd0 = jnp.asarray(q0, float), jnp.asarray(qd0, float)
        idx = list(self.driven)
        if actuators is None:
            actuators = {
                j: {"phi": q0[i], "phid": qd0[i]} for j, i in zip(self.joints, idx, strict=True)
            }
        else:
            missing = sorted(set(self.joints) - set(actuators))
            if missing:
                raise ValueError(f"FlexibleJointPlant.initial_state: no state for {missing}")
            actuators = {
                j: {k: jnp.asarray(actuators[j][k], float) for k in ("phi", "phid")}
                for j in self.joints
            }
        return {"q": q0, "qd": qd0, "actuators": actuators}

    def drive_states(self, y: dict) -> tuple[Array, Array]:
        """``(phi, phid)`` stacked in ``joints`` order."""
        act = y["actuators"]
        return (
            jnp.stack([act[j]["phi"] for j in self.joints]),
            jnp.stack([act[j]["phid"] for j in self.joints]),
        )

    def spring_torque(self, q, qd, phi, phid) -> Float[Array, " a"]:
        """``tau_s = K (q_a - phi) + D (qd_a - phid)``: what the transmission exerts on the
        rotor, and minus what it exerts on the link (``F^s`` of eq. (3))."""
        idx = jnp.asarray(self.driven)
        return self.stiffness * (q[idx] - phi) + self.damping * (qd[idx] - phid)

    def link_accelerations(self, q, qd, tau_s, wrenches=None, forces=None) -> Array:
        """``qdd`` of eq. (3) with the transmission torques ``tau_s`` (projected through the
        constraints of a `ConstrainedSystem`)."""
        Q = jnp.zeros(self.n, dtype=jnp.result_type(q, float))
        Q = Q.at[jnp.asarray(self.driven)].add(-tau_s)
        if forces is not None:
            Q = Q + forces
        if self.constrained:
            return projected_forward_dynamics(self.system, q, qd, Q, wrenches)
        return forward_dynamics(self.system, q, qd, Q, wrenches)

    def vector_field(self, t, y, command, wrenches=None, forces=None) -> dict:
        del t
        y, command = finite_state(y, command)
        q, qd = y["q"], y["qd"]
        phi, phid = self.drive_states(y)
        tau_s = self.spring_torque(q, qd, phi, phid)
        qdd = self.link_accelerations(q, qd, tau_s, wrenches, forces)
        phidd = (command + tau_s) / self.reduced_rotor_inertia  # eq. (4)
        act = {j: {"phi": phid[i], "phid": phidd[i]} for i, j in enumerate(self.joints)}
        return {"q": qd, "qd": qdd, "actuators": act}

    def signals(self, y, command) -> dict[str, Array]:
        """``phi_<j>``, ``deflection_<j>`` (``q_a - phi``), ``spring_torque_<j>``,
        ``motor_torque_<j>`` (``T / r``: the ``T*`` of Ider et al. Fig. 4) and the commands."""
        q, qd = y["q"], y["qd"]
        phi, phid = self.drive_states(y)
        tau_s = self.spring_torque(q, qd, phi, phid)
        idx = jnp.asarray(self.driven)
        out = {}
        for i, j in enumerate(self.joints):
            out[f"phi_{j}"] = phi[i]
            out[f"phid_{j}"] = phid[i]
            out[f"deflection_{j}"] = q[idx[i]] - phi[i]
            out[f"spring_torque_{j}"] = tau_s[i]
            out[f"motor_torque_{j}"] = command[i] / self.gear_ratio[i]
        for name, value in zip(self.command_names, command, strict=True):
            out[name] = value
        return out

    def energy(self, y) -> Float[Array, ""]:
        """Kinetic plus potential energy of links, rotors and springs (J): constant along an
        undamped, unforced motion (`tests/test_flexible.py` checks it)."""
        q, qd = y["q"], y["qd"]
        phi, phid = self.drive_states(y)
        idx = jnp.asarray(self.driven)
        rotor = 0.5 * jnp.sum(self.reduced_rotor_inertia * phid**2)
        spring = 0.5 * jnp.sum(self.stiffness * (q[idx] - phi) ** 2)
        return kinetic_energy(self.model, q, qd) + potential_energy(self.model, q) + rotor + spring


class RotorLoaded(eqx.Module):
    """A rigid system with extra diagonal inertia on some coordinates (the rotors of
    `rigid_limit`): ``(M + S^T I^r S) qdd + h = Q``."""

    system: Model | ConstrainedSystem
    inertia: Float[Array, " a"]
    driven: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, system, driven, inertia):
        self.system, self.driven, self.inertia = system, tuple(driven), jnp.asarray(inertia)

    def accelerations(self, q, qd, Q) -> Array:
        """``qdd`` under generalized force ``Q``, with the rotor inertias added to the driven
        coordinates' diagonal of M. A `ConstrainedSystem` is solved in the Lagrangian form
        ``[M A^T; A 0] [qdd; lambda] = [Q - h; -Adot qd]`` (Aghili (2005) Appendix B): a route
        independent of the projection the flexible plant integrates."""
        idx = jnp.asarray(self.driven)
        model = self.system.model if isinstance(self.system, ConstrainedSystem) else self.system
        M = mass_matrix(model, q).at[idx, idx].add(self.inertia)
        rhs = Q - bias_forces(model, q, qd)
        if not isinstance(self.system, ConstrainedSystem):
            return jnp.linalg.solve(M, rhs)
        A = constraint_jacobian(self.system, q)
        k = A.shape[0]
        K = jnp.block([[M, A.T], [A, jnp.zeros((k, k), dtype=M.dtype)]])
        b = jnp.concatenate([rhs, -constraint_bias(self.system, q, qd)])
        return jnp.linalg.solve(K, b)[: M.shape[0]]


def rigid_limit(plant: FlexibleJointPlant) -> RotorLoaded:
    """The infinite-stiffness limit of ``plant``: its rigid system with each driven coordinate
    carrying the reduced rotor inertia ``r^2 I_rotor`` (a `RotorLoaded` system; drive it
    with the same ``T`` as generalized force on the driven coordinates)."""
    return RotorLoaded(plant.system, plant.driven, plant.reduced_rotor_inertia)
