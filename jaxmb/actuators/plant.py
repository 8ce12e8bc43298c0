r"""Plants with actuator states: mechanics plus actuators (shared/DESIGN.md, "Plants, actuators
and workflows").

A mechanical `Model` (or `ConstrainedSystem`) is a plant whose input is the generalized force.
An `AbstractPlant` adds actuators with their own states: its state is a pytree

    y = {"q": (n,), "qd": (n,), "actuators": {name: {"p_a": (), "p_b": (), ...}}}

its input is a vector of named commands (``command_names``: valve voltages ``u_<name>``, and
``tau_<coordinate>`` for coordinates driven directly, e.g. an arm's electric joints), and
``signals`` names what a log or a plot addresses (``p_a_lift``, ``x_tilt``, ...).

`HydraulicPlant` is a model with valve-controlled cylinders (`jaxmb.actuators.hydraulics`): the third-order
system of Petrovic & Mattila (2022) (mechanics, eq. (13) of Dastranj & Mattila, plus chamber
pressures, eqs. (80)-(81), and optionally spools and LuGre states).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxmb.actuators.hydraulics import BAR, HydraulicActuator
from jaxmb.algorithms.dynamics import external_forces, gravity_forces
from jaxmb.algorithms.terms import forward_from_state
from jaxmb.algorithms.tree_dynamics import AugmentedState, augmented_state, map_and_jacobian
from jaxmb.constraints.projection import ConstrainedSystem, constraint_force
from jaxmb.constraints.projection import forward_dynamics as projected_forward_dynamics
from jaxmb.multibody.checks import (
    check_all_finite,
    check_coordinates,
    checked,
    not_finite,
    not_nonnegative,
    not_positive,
)
from jaxmb.multibody.kinematics import frame_transforms
from jaxmb.multibody.model import Model

__all__ = [
    "AbstractPlant",
    "HydraulicPlant",
    "MechanicsPass",
    "ForceSensedPlant",
    "limit_events",
    "events_summary",
    "finite_state",
]


def finite_state(y: dict, command):
    """The plant state and the command, refused (`check_finite`) where NaN or inf: a NaN
    pressure or command would otherwise flow through the vector field into the solution."""
    fields = {"q": y["q"], "qd": y["qd"], "command": command}
    for a, s in y["actuators"].items():
        fields.update({f"actuator {a!r} state {k!r}": v for k, v in s.items()})
    finite = dict(zip(fields, check_all_finite(fields), strict=True))  # one run-time check
    actuators = {
        a: {k: finite[f"actuator {a!r} state {k!r}"] for k in s} for a, s in y["actuators"].items()
    }
    return {"q": finite["q"], "qd": finite["qd"], "actuators": actuators}, finite["command"]


class AbstractPlant(eqx.Module):
    """Mechanics plus actuators with their own states (see the module docstring)."""

    model: eqx.AbstractVar[Model]

    @property
    def coordinate_names(self) -> tuple[str, ...]:
        return self.model.coordinate_names

    @property
    def n(self) -> int:
        return self.model.n

    @property
    @abc.abstractmethod
    def command_names(self) -> tuple[str, ...]:
        """Names of the command vector's entries (e.g. ``u_lift``)."""

    @abc.abstractmethod
    def initial_state(self, q0, qd0, actuators=None) -> dict:
        """The state pytree at ``(q0, qd0)``; ``actuators`` overrides the actuator states."""

    @abc.abstractmethod
    def vector_field(self, t, y: dict, command, wrenches=None, forces=None) -> dict:
        """``dy/dt`` for the command vector, external wrenches ``{frame: [m; f]}`` and
        generalized forces ``forces`` (n,)."""

    @abc.abstractmethod
    def signals(self, y: dict, command) -> dict[str, Array]:
        """Named scalar signals of the state and command (SI units)."""

    def state_scale(self, y: dict) -> dict:
        """Typical magnitude of each state entry (same structure as ``y``). `simulate`
        integrates ``y / scale`` so that one pair of tolerances fits angles (rad) and
        pressures (Pa) alike; the default is 1 everywhere."""
        return jax.tree.map(jnp.ones_like, y)


class MechanicsPass(eqx.Module):
    """One kinematic pass of a `HydraulicPlant` at a state and what it gives: the augmented
    state, the pistons and the acceleration under the actuators' forces. The plant's vector
    field and a controller whose model is that plant (`control.vdc_control`) both need it, and
    a closed loop computes it once a state for the two (`jaxmb.simulation.integrate`)."""

    state: AugmentedState
    x: Float[Array, " m"]  # piston positions, m
    xd: Float[Array, " m"]  # piston velocities, m/s
    J: Float[Array, "m n"]  # J_x = dx/dq
    qdd: Float[Array, " n"]  # the acceleration under the actuators' forces (and the extras)


# the supply pressures a log may give a replay (`HydraulicPlant.logged`)
SUPPLY = ("p_s", "p_r")


class HydraulicPlant(AbstractPlant):
    r"""A model driven by valve-controlled hydraulic cylinders, and optionally by direct
    generalized forces on some coordinates.

    Attributes:
        model: the mechanics (minimal coordinates).
        actuators: the cylinders (`jaxmb.actuators.hydraulics.HydraulicActuator`), each between two
            frames of ``model``.
        direct: coordinates whose generalized force is commanded directly (``tau_<name>``).
        p_cavitation: pressure floor, Pa: a chamber below it is a reported event (the model
            has no cavitation physics, so such a run is outside its validity).
        p_margin: a chamber above ``p_s + p_margin`` is a reported event (relief valves are
            not modelled).
        logged: the supply pressures that replays of a log take from it instead of the valves'
            constants: ``"p_s"`` (a load-sensing pump's moving supply) and/or ``"p_r"``
            (`input_names`; `jaxmb.simulation.CommandTable.supplied`). A feedback loop keeps
            the constants.
        encoders: what each coordinate's position sensor reads beyond the coordinate, one
            constant offset per coordinate (rad or m; default 0): an encoder's zero is off by
            a fraction of a degree. Like the pressure transducers' offsets
            (`jaxmb.actuators.hydraulics.PressureTransducers`) they never enter the dynamics,
            only what identification compares with a log (``encoder.<coordinate>.offset``);
            an offset the user knows is subtracted from the log instead (``[log] offsets``).

    Commands: ``u_<actuator>`` (V) for each actuator, then ``tau_<coordinate>`` (N m or N).
    Equation of motion: ``Gamma qdd + h = Q_e + sum_i J_x_i^T f_i + tau_direct`` with
    ``f_i = A_a p_a - A_b p_b - f_friction(xdot_i) + f_end_stop(x_i, xdot_i)``."""

    model: Model
    actuators: tuple[HydraulicActuator, ...]
    p_cavitation: Float[Array, ""]
    p_margin: Float[Array, ""]
    encoders: tuple[Float[Array, ""], ...]
    direct: tuple[str, ...] = eqx.field(static=True)
    logged: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        model: Model,
        actuators,
        direct=(),
        *,
        p_cavitation=0.5 * BAR,
        p_margin=10 * BAR,
        logged=(),
        encoders=None,
    ):
        if not isinstance(model, Model):
            raise ValueError(f"HydraulicPlant: model must be a Model, got {type(model).__name__}")
        self.model = model
        self.actuators = tuple(actuators)
        names = [a.name for a in self.actuators]
        if len(set(names)) != len(names):
            raise ValueError(f"HydraulicPlant: duplicate actuator names {names}")
        frames = set(model.frame_names) | {"S"}
        for a in self.actuators:
            if not isinstance(a, HydraulicActuator):
                raise ValueError(
                    f"HydraulicPlant: actuators must be HydraulicActuator, got {type(a).__name__}"
                )
            for which in ("base_frame", "rod_frame"):
                f = getattr(a.mount, which)
                if f not in frames:
                    raise ValueError(
                        f"HydraulicPlant: actuator {a.name!r}: {which} {f!r} is not a frame of "
                        f"the model; frames are {sorted(frames)}"
                    )
        self.logged = tuple(logged)
        if not set(self.logged) <= set(SUPPLY) or len(set(self.logged)) != len(self.logged):
            raise ValueError(f"HydraulicPlant: logged must hold some of {SUPPLY}, got {logged!r}")
        self.direct = tuple(direct)
        for c in self.direct:
            model.coordinate(c)  # raises for an unknown name
        self.p_cavitation = checked(p_cavitation, not_finite, "HydraulicPlant: p_cavitation", ())
        self.p_margin = checked(
            p_margin, not_nonnegative, "HydraulicPlant: p_margin must be >= 0 and finite", ()
        )
        encoders = (0.0,) * model.n if encoders is None else tuple(encoders)
        if len(encoders) != model.n:
            raise ValueError(
                f"HydraulicPlant: encoders must hold one offset per coordinate "
                f"{model.coordinate_names}, got {len(encoders)}"
            )
        msg = "HydraulicPlant: encoders[{}] (offset of {!r}) must be finite"
        self.encoders = tuple(
            checked(e, not_finite, msg.format(i, c), ())
            for i, (e, c) in enumerate(zip(encoders, model.coordinate_names, strict=True))
        )

    @property
    def actuator_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.actuators)

    @property
    def command_names(self) -> tuple[str, ...]:
        return tuple(f"u_{a.name}" for a in self.actuators) + tuple(f"tau_{c}" for c in self.direct)

    @property
    def input_names(self) -> tuple[str, ...]:
        """What a replay reads from a log to drive the plant: the `command_names`, then the
        ``logged`` supply pressures."""
        return self.command_names + self.logged

    def with_supply(self, pressures: Mapping[str, Array]) -> HydraulicPlant:
        """The plant with every valve's supply ``"p_s"`` and/or return ``"p_r"`` pressure (Pa)
        set to the values given (a load-sensing pump supplies every valve alike)."""
        out = self
        for name, value in pressures.items():
            if name not in SUPPLY:
                raise ValueError(f"with_supply: expected some of {SUPPLY}, got {name!r}")
            out = eqx.tree_at(
                lambda p, name=name: [getattr(a.valve, name) for a in p.actuators],
                out,
                [jnp.asarray(value, dtype=float) for _ in self.actuators],
            )
        return out

    def constant_supply(self) -> HydraulicPlant:
        """The plant with no ``logged`` supply: its valves' own supply and return pressures."""
        return HydraulicPlant(self.model, self.actuators, self.direct,
                              p_cavitation=self.p_cavitation, p_margin=self.p_margin,
                              encoders=self.encoders)  # fmt: skip

    @property
    def command_delays(self) -> Float[Array, " m"]:
        """Each command's transport delay, s, in ``command_names`` order: a valve's ``delay``
        (its command reaches the spool that much later), 0 for a direct force."""
        zero = [jnp.zeros(()) for _ in self.direct]
        return jnp.stack([a.valve.delay for a in self.actuators] + zero)

    def actuator(self, name: str) -> HydraulicActuator:
        for a in self.actuators:
            if a.name == name:
                return a
        raise ValueError(f"HydraulicPlant: unknown actuator {name!r}; have {self.actuator_names}")

    def _direct_forces(self, command) -> Array:
        tau = jnp.zeros(self.n, dtype=jnp.result_type(command, float))
        m = len(self.actuators)
        for j, c in enumerate(self.direct):
            tau = tau.at[self.model.coordinate(c)].add(command[m + j])
        return tau

    def piston_kinematics(self, q, qd) -> tuple[Array, Array, Array]:
        """``(x, xdot, J_x)``: piston positions (m,), velocities (m,) and ``J_x`` (m, n).

        One kinematic pass for all mounts, and ``J_x`` by forward mode over the n coordinates
        (one linearized pass carrying n tangents; the primal is not repeated per tangent).
        ``q`` and ``qd`` are checked (shape, finite); the vector field, which has checked its
        state already, calls `_pistons`."""
        q, qd = check_all_finite(
            {
                "q": check_coordinates(self.model, q, finite=False),
                "qd": check_coordinates(self.model, qd, "qd", finite=False),
            }
        )
        return self._pistons(q, qd)

    def _pistons(self, q, qd) -> tuple[Array, Array, Array]:
        """`piston_kinematics` without the input checks."""
        qhat, E = map_and_jacobian(self.model, q)
        return self._pistons_at(qhat, E, qd)

    def pistons_at(self, state: AugmentedState) -> tuple[Array, Array, Array]:
        """`piston_kinematics` at an augmented state the caller shares with other readers (the
        forward dynamics, a controller's required forces); unchecked."""
        return self._pistons_at(state.qhat, state.E, state.qd)

    def _pistons_at(self, qhat, E, qd) -> tuple[Array, Array, Array]:
        """`_pistons` at the augmented coordinates ``qhat = Xi(q)`` and ``E = dXi/dq`` (None:
        ``qhat = q``) that the vector field shares with the forward dynamics: the mounts'
        lengths are functions of ``qhat``, so ``J_x = (dx/dqhat) E``, E's n columns carried
        through one kinematic pass as tangents (the primal once)."""
        if not self.actuators:
            z = jnp.zeros((0,), dtype=qhat.dtype)
            return z, z, jnp.zeros((0, self.n), dtype=qhat.dtype)

        def positions(qhat_):
            T = frame_transforms(self.model, qhat_, fused=True)
            return jnp.stack(
                [a.mount.length_at(self.model, T) - a.mount.l_min for a in self.actuators]
            )

        E = jnp.eye(self.n, dtype=qhat.dtype) if E is None else E

        def along(e):
            return jax.jvp(positions, (qhat,), (e,))

        x, J = jax.vmap(along, in_axes=1, out_axes=(None, 1))(E)
        return x, J @ qd, J

    def initial_state(self, q0, qd0, actuators: Mapping | None = None, *, p_b=40 * BAR) -> dict:
        """State at ``(q0, qd0)``. Without ``actuators``: the pressures that hold the model
        still at ``q0`` against gravity (`static_pressures`) with rod sides at ``p_b``."""
        q0, qd0 = jnp.asarray(q0, float), jnp.asarray(qd0, float)
        if actuators is None:
            p_a, p_b_, _ = self.static_pressures(q0, p_b=p_b)
            actuators = {
                a.name: a.initial_state(p_a[i], p_b_[i]) for i, a in enumerate(self.actuators)
            }
        else:
            missing = set(self.actuator_names) - set(actuators)
            if missing:
                raise ValueError(f"HydraulicPlant.initial_state: no state for {sorted(missing)}")
            actuators = {
                k: {kk: jnp.asarray(v, float) for kk, v in s.items()} for k, s in actuators.items()
            }
        return {"q": q0, "qd": qd0, "actuators": dict(actuators)}

    def input_matrix(self, q) -> Array:
        """``B(q)`` (n, m + d): generalized force per unit piston force and per direct torque."""
        _, _, J = self.piston_kinematics(q, jnp.zeros_like(q))
        cols = [J.T] + [jnp.eye(self.n)[:, [self.model.coordinate(c)]] for c in self.direct]
        return jnp.concatenate(cols, axis=1)

    def static_pressures(self, q, *, p_b=40 * BAR, wrenches=None) -> tuple[Array, Array, Array]:
        r"""Chamber pressures that hold the model at rest at ``q``: piston forces ``f`` (and
        direct torques) solve ``B(q) [f; tau] = -Q_e(q)`` (least squares if ``B`` is not square),
        then ``p_a = (f + A_b p_b) / A_a`` with the rod sides at ``p_b`` (Pa). Friction is zero
        at rest. Returns ``(p_a, p_b, [f; tau])``."""
        Q_e = (
            gravity_forces(self.model, q)
            if wrenches is None
            else external_forces(self.model, q, wrenches)
        )
        B = self.input_matrix(q)
        sol = jnp.linalg.lstsq(B, -Q_e)[0]
        m = len(self.actuators)
        p_b = jnp.broadcast_to(jnp.asarray(p_b, float), (m,))
        p_a = (
            jnp.stack(
                [
                    (sol[i] + a.cylinder.area_b * p_b[i]) / a.cylinder.area_a
                    for i, a in enumerate(self.actuators)
                ]
            )
            if m
            else jnp.zeros(0)
        )
        return p_a, p_b, sol

    def vector_field(self, t, y, command, wrenches=None, forces=None) -> dict:
        del t
        return self._field(*finite_state(y, command), wrenches, forces)

    @eqx.filter_jit
    def _field(self, y, command, wrenches, forces) -> dict:
        """`vector_field` of a checked state, compiled as a function of its own: an integrator
        calls the field at every stage, and the transformations around it (forward-mode
        sensitivities, vmaps over segments and parameters) then trace it once and reuse it,
        where they traced every call (the output error's residual and Jacobian trace in about
        two thirds of the time, a second program in about 40 %; dev/performance-history.md)."""
        mech = self.mechanics_pass(y, self.extra_forces(command, forces), wrenches)
        return self.field_from(y, mech, command)

    def extra_forces(self, command, forces=None) -> Array:
        """The generalized forces besides the cylinders': the direct commands' and
        ``forces`` (a disturbance's; default none)."""
        Q = self._direct_forces(command)
        return Q if forces is None else Q + forces

    def mechanics_pass(
        self, y: dict, extra=None, wrenches=None, *, kinematics: MechanicsPass | None = None
    ) -> MechanicsPass:
        """`MechanicsPass` at the state ``y`` (unchecked): one kinematic pass, whose coordinate
        map and derivatives serve the pistons and the forward dynamics alike, and the
        acceleration under the actuators' net forces plus the generalized forces ``extra``
        (direct commands, disturbances; default none) and ``wrenches``: the class's equation
        of motion (Dastranj & Mattila (2026) eq. (13) with the cylinders' ``J_x^T f``, the
        force of Petrovic & Mattila (2022) eq. (79) less friction). ``kinematics``: the
        pass of a plant with this one's `kinematic_nodes`, whose augmented state and pistons
        are taken instead of computed (its acceleration is not)."""
        q, qd, act = y["q"], y["qd"], y["actuators"]
        if kinematics is None:
            state = augmented_state(self.model, q, qd)
            x, xd, J = self.pistons_at(state)
        else:
            state, x, xd, J = kinematics.state, kinematics.x, kinematics.xd, kinematics.J
        Q = jnp.zeros(self.n, dtype=jnp.result_type(qd, float)) if extra is None else extra
        for i, a in enumerate(self.actuators):
            Q = Q + J[i] * a.force(xd[i], act[a.name], x[i])
        qdd = forward_from_state(self.model, state, Q, wrenches)
        return MechanicsPass(state, x, xd, J, qdd)

    def kinematic_nodes(self) -> list:
        """What the kinematic pass reads (`mechanics_pass` without its acceleration): the
        frames' placements and axes, the coordinate map and the cylinders' mounts; not the
        bodies' inertia, gravity, the cylinders' areas and volumes, valves or friction."""
        nodes = [self.model.frames, *(a.mount for a in self.actuators)]
        return nodes + ([] if self.model.coordinate_map is None else [self.model.coordinate_map])

    def field_from(self, y: dict, mech: MechanicsPass, command) -> dict:
        """The vector field at ``y`` from its `MechanicsPass` ``mech`` (the actuators' state
        rates under ``command``; the acceleration is ``mech``'s)."""
        act = y["actuators"]
        rates = {
            a.name: a.state_rates(mech.x[i], mech.xd[i], command[i], act[a.name])
            for i, a in enumerate(self.actuators)
        }
        return {"q": y["qd"], "qd": mech.qdd, "actuators": rates}

    def state_scale(self, y) -> dict:
        """Pressures in units of 1 bar, everything else (rad, m, m/s, V, bristle m) in 1:
        with the default tolerances of `simulate` (rtol 1e-8, atol 1e-10) a chamber pressure
        is then resolved to about 1e-8 relative, i.e. well below 1 Pa."""

        def scale(name, x):
            return jnp.full_like(x, BAR) if name in ("p_a", "p_b") else jnp.ones_like(x)

        acts = {k: {kk: scale(kk, v) for kk, v in s.items()} for k, s in y["actuators"].items()}
        return {"q": jnp.ones_like(y["q"]), "qd": jnp.ones_like(y["qd"]), "actuators": acts}

    def signals(self, y, command) -> dict[str, Array]:
        """``x_<a>``, ``xd_<a>`` (m, m/s), ``p_a_<a>``, ``p_b_<a>`` (Pa), ``f_<a>`` (net piston
        force on the mechanism, end stops included, N), ``f_friction_<a>`` (N), the commands ``u_<a>`` (V, as
        commanded, before saturation) and ``tau_<c>``."""
        q, qd, act = y["q"], y["qd"], y["actuators"]
        x, xd, _ = self.piston_kinematics(q, qd)
        out = {}
        for i, a in enumerate(self.actuators):
            s = act[a.name]
            out[f"x_{a.name}"] = x[i]
            out[f"xd_{a.name}"] = xd[i]
            out[f"p_a_{a.name}"] = s["p_a"]
            out[f"p_b_{a.name}"] = s["p_b"]
            out[f"f_{a.name}"] = a.force(xd[i], s, x[i])
            out[f"f_friction_{a.name}"] = a.friction_force(xd[i], s)
            if "spool" in s:
                out[f"spool_{a.name}"] = s["spool"][0]
        for name, value in zip(self.command_names, command, strict=True):
            out[name] = value
        return out


class ForceSensedPlant(AbstractPlant):
    r"""A constrained system in dependent coordinates (Aghili (2005)) whose constraint force is
    measured through a first-order sensor, ``tau dF_m/dt = F - F_m``, with ``F`` the constraint
    force of eq. (32) under the applied input. The sensor's state is the plant's actuator state
    ``y["actuators"]["force_sensor"]["F"]`` (n,), so a controller that feeds the measured force
    back (Aghili eq. (52)) meets no algebraic loop: the reading lags the force as a real sensor
    and its filter do.

    Commands: the generalized input ``f`` (``tau_<coordinate>``). Without drift correction
    (`simulate` corrects only bare `ConstrainedSystem` plants): for short runs at tight
    tolerances the constraint residual stays at the solver's tolerance."""

    system: object  # a jaxmb.constraints.projection.ConstrainedSystem
    tau: Float[Array, ""]

    def __init__(self, system, tau=0.01):
        if not isinstance(system, ConstrainedSystem):
            raise ValueError(
                f"ForceSensedPlant: system must be a ConstrainedSystem, got {type(system).__name__}"
            )
        self.system = system
        self.tau = checked(tau, not_positive, "ForceSensedPlant: tau must be > 0 s and finite", ())

    @property
    def model(self) -> Model:
        return self.system.model

    @property
    def command_names(self) -> tuple[str, ...]:
        return tuple(f"tau_{c}" for c in self.coordinate_names)

    def initial_state(self, q0, qd0, actuators=None) -> dict:
        """The sensor starts at ``actuators["force_sensor"]["F"]``, by default zero."""
        q0, qd0 = jnp.asarray(q0, float), jnp.asarray(qd0, float)
        F = (
            jnp.zeros_like(q0)
            if actuators is None
            else jnp.asarray(actuators["force_sensor"]["F"], float)
        )
        return {"q": q0, "qd": qd0, "actuators": {"force_sensor": {"F": F}}}

    def vector_field(self, t, y, command, wrenches=None, forces=None) -> dict:
        del t
        y, command = finite_state(y, command)
        q, qd = y["q"], y["qd"]
        f = command if forces is None else command + forces
        qdd = projected_forward_dynamics(self.system, q, qd, f, wrenches)
        F = constraint_force(self.system, q, qd, f, wrenches)  # Aghili (2005) eq. (32)
        dF = (F - y["actuators"]["force_sensor"]["F"]) / self.tau
        return {"q": qd, "qd": qdd, "actuators": {"force_sensor": {"F": dF}}}

    def signals(self, y, command) -> dict[str, Array]:
        """``F_<coordinate>`` (the measured constraint force) and the commands."""
        F = y["actuators"]["force_sensor"]["F"]
        out = {f"F_{c}": F[i] for i, c in enumerate(self.coordinate_names)}
        out.update({name: command[i] for i, name in enumerate(self.command_names)})
        return out


def _excursions(t, bad) -> dict[str, Array]:
    """Count of entries into ``bad`` (rising edges, a run that starts bad counts once), the
    first time it holds (NaN if never) and the time spent there (trapezoid on the save grid)."""
    bad = bad.astype(bool)
    entries = jnp.sum(bad[1:] & ~bad[:-1]) + bad[0].astype(int)
    first = jnp.where(bad.any(), t[jnp.argmax(bad)], jnp.nan)
    dt = jnp.diff(t)
    frac = 0.5 * (bad[1:].astype(t.dtype) + bad[:-1].astype(t.dtype))
    return {"count": entries, "first_time": first, "duration": jnp.sum(frac * dt)}


def limit_events(plant: HydraulicPlant, t, signals: Mapping[str, Array]) -> dict[str, dict]:
    """Pressure-range and stroke-end events per actuator, from the saved samples.

    For each actuator ``a`` and chamber: ``cavitation_<a>`` (a chamber below
    ``plant.p_cavitation``), ``overpressure_<a>`` (above ``p_s + p_margin``), and
    ``stroke_end_<a>`` (``x <= 0`` or ``x >= stroke``: the piston reached an end, where the
    model has no end stop). Each holds ``count`` (excursions), ``first_time`` (s, NaN if
    never) and ``duration`` (s). Resolution: the save grid ``t``; pass a fine grid (the CLI
    saves at 1 kHz) to see short excursions."""
    out = {}
    for a in plant.actuators:
        p_a, p_b, x = signals[f"p_a_{a.name}"], signals[f"p_b_{a.name}"], signals[f"x_{a.name}"]
        low = (p_a < plant.p_cavitation) | (p_b < plant.p_cavitation)
        high_lim = signals.get("p_s", a.valve.p_s) + plant.p_margin  # a logged supply moves
        high = (p_a > high_lim) | (p_b > high_lim)
        end = (x <= 0) | (x >= a.cylinder.stroke)
        out[f"cavitation_{a.name}"] = _excursions(t, low)
        out[f"overpressure_{a.name}"] = _excursions(t, high)
        out[f"stroke_end_{a.name}"] = _excursions(t, end)
    return out


def events_summary(events: Mapping[str, Mapping[str, Array]]) -> dict[str, dict[str, float]]:
    """Events as plain floats (for JSON)."""
    return {
        k: {kk: (None if not np.isfinite(float(v)) else float(v)) for kk, v in e.items()}
        for k, e in events.items()
    }
