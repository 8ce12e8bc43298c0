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

``df/dy`` is formed by groups of the state, one `jax.jacfwd` per top-level entry of the state
dict (``q``, ``qd``, ``actuators``), so that a velocity or a pressure tangent skips the
kinematics that only ``q`` enters. Measured on the crane's residual and 12-column Jacobian,
half-second segments, one device: 32 segments 4.33 -> 1.59 s and the knuckle's 18 columns
11.2 -> 2.22 s (equal to 1e-13), 8 segments 1.05 -> 0.62 s. At batches of a few lanes a step
is bound by its count of XLA kernels, which the three Jacobians raise, more than by its
arithmetic: 4 half-second crane segments 0.40 -> 0.49 s, three 10 s ones 6.47 -> 9.32 s on one
device, while on two devices (the CLI's) the 10 s segments came out even or faster (two
knuckle segments a device 11-17 s -> 11-14 s, run-to-run spread). So it is asked for, by
`SharedJacobianForwardMode` (output-error identification does); reverse mode would form the
Jacobian on every forward step and gains nothing from it.

One `jax.jacfwd` over the state and the tangent-carrying inputs together (one copy of the
derivative code instead of four) was tried and dropped (2026-12-02). It is smaller (the
crane's 8-segment program 46 783 -> 33 808 HLO instructions) and faster where a step is
kernel-bound (8 segments), but at the identification's batches every one of its lanes runs
through the kinematics, where a parameter's lane with the state tangents zero skips them. Per
state, the crane's field over 80 vmapped states on one core: the joint Jacobian over the state
and 16 parameters 162 us; by groups ``q`` 12.4, ``qd`` 5.8, actuators 2.7 and the 16
parameters' pass 11.7 us, 33 us in all (the field itself 3.9 us). The residual and 16-column
Jacobian of 80 half-second segments, one core: 27.6 s joint, 7.9 s by groups; the crane's whole
`jaxmb identify` (payload unknown, the choices made by cross-validation, alone on this
2-core machine) 806 s joint, 481 s by groups, the same estimates to 1e-9.

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
    the module docstring (``y`` a dict of state groups, or any pytree as one group)."""
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
        d_out = jnp.zeros_like(out_flat)
        # df/dy S: one Jacobian per state group with a tangent, applied to every column
        groups = y if isinstance(y, dict) else {None: y}
        t_groups = t_y if isinstance(y, dict) or t_y is None else {None: t_y}
        for key, value in groups.items():
            tangent = None if t_groups is None else _filled(t_groups[key], value)
            if tangent is None:
                continue
            x, unflatten = ravel_pytree(value)

            def of_group(v, k=key, u=unflatten):
                return flat(u(v) if k is None else {**y, k: u(v)})

            d_out = d_out + jax.jacfwd(of_group)(x) @ ravel_pytree(tangent)[0]
        # df/dtheta: through the inputs with a tangent only (plant leaves, time, commands, loads)
        mask = jax.tree.map(lambda t_: t_ is not None, t_rest, is_leaf=_is_none)
        if any(jax.tree.leaves(mask)):
            dynamic, static = eqx.partition(rest, mask)
            t_dynamic, _ = eqx.partition(t_rest, mask, is_leaf=_is_none)
            _, d = jax.jvp(lambda d_: flat(y, eqx.combine(d_, static)), (dynamic,), (t_dynamic,))
            d_out = d_out + d
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
