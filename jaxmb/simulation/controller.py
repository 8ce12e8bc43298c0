"""The interface of a controller with its own integrated state (integral actions, filters,
observers), which `simulate` integrates with the plant, and the one call through which the
simulations ask any controller for its command (`command`)."""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp

from jaxmb.actuators.plant import HydraulicPlant, finite_state

__all__ = ["AbstractStatefulController", "command", "one_pass_field", "shares_pass"]


class AbstractStatefulController(eqx.Module):
    r"""A controller with its own integrated state ``c`` (integral actions, filters,
    observers), integrated by `simulate` together with the plant.

    ``init(t0, y0, desired0) -> c0`` gives the initial state and
    ``__call__(t, y, desired, c) -> (command, dc/dt)`` the command and the state's rate, with
    ``y`` the plant state as a dict (``{"q", "qd"}`` for a mechanical plant, plus
    ``"actuators"`` for an `AbstractPlant`) and ``desired = (q_d, qd_d, qdd_d)``."""

    @abc.abstractmethod
    def init(self, t0, y0: dict, desired0): ...

    @abc.abstractmethod
    def __call__(self, t, y: dict, desired, c): ...


def command(controller, kind: str, t, y, desired, c):
    """``(command, dc/dt)`` of ``controller`` at ``t``: ``kind`` is ``"stateful"`` (``y`` the
    state dict, ``c`` the controller's state), ``"actuated"`` (``y`` an `AbstractPlant`'s state
    dict; ``c`` passed back) or ``"mechanical"`` (``y = (q, qd)``; ``c`` passed back).

    A traced function of its own: a simulation traces its controller several times (diffrax's
    shape checks, its loop's state, the step, the commands at the saves), and JAX traces a
    jitted call once for all calls of equal argument types (the crane's VDC closed loop traced
    and lowered in 2.8-3.1 s instead of 6.8-7.1 s; docs/performance.md). ``t`` is made a float
    array before the call: a Python float is weakly typed, another signature. So a controller is a
    pure function of its arguments: JAX keeps its first trace for a controller of the same
    static parts, and what varies between runs must be an array leaf (an equinox module's
    field), not a global or a closure's Python value."""
    return _traced_command(controller, kind, jnp.asarray(t, dtype=float), y, desired, c)


@eqx.filter_jit
def _traced_command(controller, kind: str, t, y, desired, c):
    if kind == "stateful":
        return controller(t, y, desired, c)
    if kind == "actuated":
        return controller(t, y, desired), c
    return controller(t, y[0], y[1], desired), c


def shares_pass(plant, controller, dist) -> bool:
    """Whether a closed loop of ``plant`` under ``controller`` can make one kinematic pass a
    state for both (`one_pass_field`): the controller's model *is* the plant (the same object:
    a controller that believes other values, a sampled plant's, makes its own pass), it can
    take the plant's pass (``command_from(t, y, mech)``, as `control.vdc_control`'s), and
    nothing but the cylinders drives the plant (no direct commands, no disturbance), so that
    the plant's acceleration is the one the controller's model predicts."""
    return (
        isinstance(plant, HydraulicPlant)
        and getattr(controller, "plant", None) is plant
        and callable(getattr(controller, "command_from", None))
        and not plant.direct
        and not dist.wrenches
        and dist.forces is None
    )


@eqx.filter_jit
def one_pass_field(plant: HydraulicPlant, controller, t, y) -> tuple[dict, object]:
    """``(dy/dt, command)`` of a closed loop that `shares_pass`: the plant's kinematic pass
    and acceleration (`HydraulicPlant.mechanics_pass`) serve the controller's law and the
    plant's vector field, where each made its own (the crane's VDC loop: XLA:CPU launches a
    kernel per operation, and the second pass cost as many as the plant's whole field). The
    state and command are checked as the plant's `vector_field` checks them (`finite_state`).
    A traced function of its own, as `command` (the same reasons)."""
    mech = plant.mechanics_pass(y)
    u = jnp.asarray(controller.command_from(jnp.asarray(t, dtype=float), y, mech))
    y, u_checked = finite_state(y, u)
    return plant.field_from(y, mech, u_checked), u
