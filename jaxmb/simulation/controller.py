"""The interface of a controller with its own integrated state (integral actions, filters,
observers), which `simulate` integrates with the plant; the call through which the
simulations ask any controller for its command (`command`); and the closed-loop field of a
controller that shares its model's kinematic pass with the plant (`pass_sharing`,
`one_pass_field`)."""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp

from jaxmb.actuators.plant import HydraulicPlant, finite_state

__all__ = ["AbstractStatefulController", "command", "one_pass_field", "pass_sharing"]


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
    and lowered in 2.8-3.1 s instead of 6.8-7.1 s; dev/performance-history.md). ``t`` is made a
    float array before the call: a Python float is weakly typed, another signature. So a
    controller is a pure function of its arguments: JAX keeps its first trace for a controller
    of the same static parts, and what varies between runs must be an array leaf (an equinox
    module's field), not a global or a closure's Python value."""
    return _traced_command(controller, kind, jnp.asarray(t, dtype=float), y, desired, c)


@eqx.filter_jit
def _traced_command(controller, kind: str, t, y, desired, c):
    if kind == "stateful":
        return controller(t, y, desired, c)
    if kind == "actuated":
        return controller(t, y, desired), c
    return controller(t, y[0], y[1], desired), c


def pass_sharing(plant, controller, dist) -> str | None:
    """How a closed loop of ``plant`` under ``controller`` shares one kinematic pass a state
    (`one_pass_field`), for a controller that can take a pass of its model
    (``command_from(t, y, mech)``, as `control.vdc_control`'s):

    - ``"whole"``: the controller's model *is* the plant (the same object) and nothing but
      the cylinders drives it (no direct commands, no disturbance): the plant's acceleration
      is the one the controller's model predicts, and one pass serves both;
    - ``"kinematics"``: the controller's model reads the very same geometry
      (`HydraulicPlant.kinematic_nodes`, the same arrays), as a Monte Carlo sample's plant
      whose masses or valves were sampled: the augmented state and pistons are computed once,
      each model's acceleration from them;
    - None: each makes its own pass (equal values in other arrays are not recognised)."""
    model = getattr(controller, "plant", None)
    if not (
        isinstance(plant, HydraulicPlant)
        and isinstance(model, HydraulicPlant)
        and callable(getattr(controller, "command_from", None))
    ):
        return None
    if model is plant and not plant.direct and not dist.wrenches and dist.forces is None:
        return "whole"
    mine, theirs = (jax.tree.flatten(p.kinematic_nodes()) for p in (plant, model))
    if mine[1] == theirs[1] and all(a is b for a, b in zip(mine[0], theirs[0], strict=True)):
        return "kinematics"
    return None


@eqx.filter_jit
def one_pass_field(
    plant: HydraulicPlant, controller, t, y, forces, wrenches, sharing: str
) -> tuple[dict, object]:
    """``(dy/dt, command)`` of a closed loop that shares its kinematic pass
    (`pass_sharing`): the controller's model makes the pass (`HydraulicPlant.mechanics_pass`)
    and its acceleration, the controller's law takes them, and the plant its acceleration
    from the same pass (``"kinematics"``) or the whole of it (``"whole"``), where each made
    its own (the crane's VDC loop: XLA:CPU launches a kernel per operation, and the second
    pass cost as many as the plant's whole field). ``forces`` and ``wrenches``: a
    disturbance's, on the plant. The state and command are checked as the plant's
    `vector_field` checks them (`finite_state`). A traced function of its own, as `command`
    (the same reasons); the commands at the saves still come through `command`, so a loop
    that shares traces its law twice.

    Under `jaxmb.multibody.checks.failures_as_nan` a non-finite command makes every rate but
    ``dq/dt`` and (``"whole"``) ``dqd/dt`` NaN, which fails the step as before."""
    if sharing not in ("whole", "kinematics"):
        raise ValueError(
            f"one_pass_field: sharing must be 'whole' or 'kinematics', got {sharing!r}"
        )
    if sharing == "whole" and (plant.direct or wrenches):
        raise ValueError("one_pass_field: 'whole' is for a plant driven by its cylinders alone")
    mech = controller.plant.mechanics_pass(y)
    u = jnp.asarray(controller.command_from(jnp.asarray(t, dtype=float), y, mech))
    if sharing == "kinematics":
        mech = plant.mechanics_pass(y, plant.extra_forces(u, forces), wrenches, kinematics=mech)
    y, u_checked = finite_state(y, u)
    return plant.field_from(y, mech, u_checked), u
