r"""A plant's vector field whose forward-mode derivative forms the state Jacobian once and
shares it among every tangent: forward sensitivities by the staggered direct method.

`simulate` differentiated in forward mode (``adjoint=diffrax.ForwardMode()`` under
`jax.jacfwd`, as output-error identification does through its RK4 steps) carries P tangent
columns ``S_j = dy/dtheta_j``, each obeying ``dS_j/dt = (df/dy) S_j + df/dtheta_j``. Plain
forward mode pushes every column through the whole vector field (kinematics, coordinate map,
CRBA, RNEA, hydraulics), P times. The staggered direct method (Caracotsios & Stewart (1985),
"Sensitivity analysis of initial value problems with mixed ODEs and algebraic equations",
Comput. Chem. Eng. 9(4)) forms ``df/dy`` once per evaluation and applies it to all columns by
one small matrix product; ``df/dtheta_j`` then needs only the inputs that carry a tangent.

``df/dy`` and ``df/dtheta`` (the plant leaves, time, commands and loads that carry a tangent)
are one `jax.jacfwd` over the flattened inputs together: every column shares one copy of the
field's derivative code, as a lane of one vmapped pass, and ``dS/dt`` is one matrix product
with ``[S; dtheta]``. Measured on the crane's residual and 12-column Jacobian, half-second
segments, one device: against plain forward mode, 32 segments 4.33 -> 1.59 s and the
knuckle's 18 columns 11.2 -> 2.22 s (equal to 1e-13), 8 segments 1.05 -> 0.62 s. An earlier
form took one Jacobian per top-level entry of the state (``q``, ``qd``, ``actuators``), so that
a velocity or a pressure tangent skipped the kinematics that only ``q`` enters, and pushed the
parameters' tangents through a pass of their own; but at batches of a few lanes a step is
bound by its count of XLA kernels more than by its arithmetic, and each of those four passes
was a copy of the field's derivative in every program. One Jacobian instead (2026-12-02, the
crane's 8-segment residual and Jacobian program, XLA's CPU flags as the commands set them, a
machine loaded by a test run): 46 783 -> 33 808 HLO instructions, 29 017 -> 17 561 lines of
StableHLO, XLA compile 91 -> 61 s, a run 10.2 -> 5.8 s; the same residuals, the Jacobian to
1e-15. Reverse mode would form the Jacobian on every forward step and gains nothing from it;
forward mode asks for the rule by `SharedJacobianForwardMode` (output-error identification
does).

The rule is exact (the same derivative as plain forward mode) and linear in the tangents;
`jax.jacfwd` batches it over the columns (tests/test_machine.py checks both against plain
forward mode)."""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

__all__ = ["SharedJacobianForwardMode", "shared_state_jacobian", "plant_field"]


class SharedJacobianForwardMode(diffrax.ForwardMode):
    """`diffrax.ForwardMode` for `simulate` with the plant's field under `plant_field`: its
    forward-mode derivative shares one state Jacobian among the tangents (module docstring)."""


def shared_state_jacobian(field: Callable) -> Callable:
    """``field(plant, t, y, command, wrenches, forces) -> dy/dt`` with the derivative rule of
    the module docstring (``y`` any pytree of arrays)."""
    rule = eqx.filter_custom_jvp(field)

    @rule.def_jvp
    def _jvp(primals, tangents):
        plant, t, y, command, wrenches, forces = primals
        t_y = tangents[2]
        rest, t_rest = (plant, t, command, wrenches, forces), tangents[:2] + tangents[3:]

        def flat(y_, rest_=rest):
            return ravel_pytree(field(rest_[0], rest_[1], y_, *rest_[2:]))[0]

        out = field(plant, t, y, command, wrenches, forces)
        out_flat, unravel = ravel_pytree(out)
        # the inputs with a tangent: the state, and the plant leaves, time, commands and loads
        # that carry one (a fit's parameters); their Jacobian does not depend on the tangents,
        # so under `jax.jacfwd`'s vmap over the columns it is formed once
        primal_in, tangent_in = {}, {}
        t_state = _filled(t_y, y)
        if t_state is not None:
            primal_in["y"], tangent_in["y"] = y, t_state
        mask = jax.tree.map(lambda t_: t_ is not None, t_rest, is_leaf=_is_none)
        dynamic, static = eqx.partition(rest, mask)
        if any(jax.tree.leaves(mask)):
            primal_in["rest"] = dynamic
            tangent_in["rest"] = eqx.partition(t_rest, mask, is_leaf=_is_none)[0]
        if not primal_in:
            return out, unravel(jnp.zeros_like(out_flat))
        x, unflatten = ravel_pytree(primal_in)

        def of_inputs(v):
            given = unflatten(v)
            rest_ = eqx.combine(given["rest"], static) if "rest" in given else rest
            return flat(given.get("y", y), rest_)

        # d out = [df/dy, df/dtheta] [S; dtheta]: one Jacobian, one copy of the derivative code
        d_out = jax.jacfwd(of_inputs)(x) @ ravel_pytree(tangent_in)[0]
        return out, unravel(d_out)

    return rule


def _vector_field(plant, t, y, command, wrenches, forces):
    return plant.vector_field(t, y, command, wrenches, forces)


# any `jaxmb.actuators.plant.AbstractPlant`'s ``vector_field`` under the rule
plant_field = shared_state_jacobian(_vector_field)


def _is_none(x) -> bool:
    return x is None


def _filled(tangent, primal):
    """``tangent`` with its symbolic zeros (None) as zero arrays, or None if all are."""
    if tangent is None:
        return None
    leaves = jax.tree.leaves(tangent, is_leaf=_is_none)
    if all(t is None for t in leaves):
        return None
    return jax.tree.map(
        lambda t, p: jnp.zeros_like(p) if t is None else t, tangent, primal, is_leaf=_is_none
    )
