r"""A plant's vector field with a derivative rule that forms the state Jacobian once and shares
it among every tangent: forward sensitivities by the staggered direct method.

Output-error identification differentiates a simulation with respect to P parameters in
forward mode (`jax.jacfwd` through the RK4 steps): each of the P sensitivity columns ``S_j =
dy/dtheta_j`` obeys ``dS_j/dt = (df/dy) S_j + df/dtheta_j``. Plain forward mode carries every
column through the whole vector field (kinematics, coordinate map, CRBA, RNEA, hydraulics), P
times. The staggered direct method (Caracotsios & Stewart (1985), "Sensitivity analysis of
initial value problems with mixed ODEs and algebraic equations", Comput. Chem. Eng. 9(4)) forms
``df/dy`` once per evaluation and applies it to all columns by one small matrix product;
``df/dtheta_j`` then needs only the part of the vector field that the parameter enters (a
valve coefficient: the valve; a mass: the dynamics, not the kinematics).

``df/dy`` is formed by groups of the state, one `jax.jacfwd` per top-level entry of the state
(``q``, ``qd``, ``actuators``), so that a velocity or a pressure tangent skips the kinematics
that only ``q`` enters. Measured on 32 half-second segments (`scripts/bench_identify.py`
measures the whole route): the crane's residual and 12-column Jacobian 2.97 -> 1.30 s, the
knuckle's 18-column one 8.53 -> 2.10 s, the same numbers to 1e-13.

The rule is exact (the same derivative as plain forward mode), linear in the tangents, and so
also serves reverse mode (JAX transposes it) and `jax.vmap`."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

__all__ = ["shared_state_jacobian"]


def shared_state_jacobian(field: Callable) -> Callable:
    """``field(plant, y, command, wrenches, forces) -> dy/dt`` (``y`` a dict of state
    groups) with the derivative rule of the module docstring."""
    rule = eqx.filter_custom_jvp(field)

    @rule.def_jvp
    def _jvp(primals, tangents):
        plant, y, command, wrenches, forces = primals
        t_plant, t_y, t_command, t_wrenches, t_forces = tangents

        def flat(y_, rest=(plant, command, wrenches, forces)):
            return ravel_pytree(field(rest[0], y_, *rest[1:]))[0]

        out = field(plant, y, command, wrenches, forces)
        out_flat, unravel = ravel_pytree(out)
        d_out = jnp.zeros_like(out_flat)
        # df/dy S: one Jacobian per state group with a tangent, applied to every column
        for key in y:
            tangent = None if t_y is None else _filled(t_y[key], y[key])
            if tangent is None:
                continue
            x, unflatten = ravel_pytree(y[key])
            J = jax.jacfwd(lambda v, k=key, u=unflatten: flat({**y, k: u(v)}))(x)
            d_out = d_out + J @ ravel_pytree(tangent)[0]
        # df/dtheta: through the inputs with a tangent only (plant leaves, commands, loads)
        rest, t_rest = (
            (plant, command, wrenches, forces),
            (t_plant, t_command, t_wrenches, t_forces),
        )
        mask = jax.tree.map(lambda t: t is not None, t_rest, is_leaf=_is_none)
        if any(jax.tree.leaves(mask)):
            dynamic, static = eqx.partition(rest, mask)
            t_dynamic, _ = eqx.partition(t_rest, mask, is_leaf=_is_none)
            _, d = jax.jvp(lambda d_: flat(y, eqx.combine(d_, static)), (dynamic,), (t_dynamic,))
            d_out = d_out + d
        return out, unravel(d_out)

    return rule


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
