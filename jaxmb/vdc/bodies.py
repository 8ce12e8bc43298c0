r"""The VDC required forces of any machine, by virtual power over its bodies' Jacobians.

Petrovic & Mattila (2022) cut a manipulator into rigid bodies and give each a required net
force (eq. (8)),

    F*_Ar = M_A d/dt(V_Ar) + C_A(omega_A) V_Ar + G_A + K_A (V_Ar - V_A),

at the required velocity ``V_Ar = J_A qd_r`` of its frame (eqs. (38)-(48)). Their recursion
(`jaxmb.vdc.chain`, eqs. (68)-(77)) then sums these forces tip to base through the cuts, where the
virtual power flows of neighbours cancel (Definition 2, eq. (94)). What it delivers at the
actuators is the generalized force whose virtual power equals that of all the required net
forces together:

    tau_r = sum_A J_A^T F*_Ar,   f_r = (dx/dq)^{-T} tau_r,

with ``J_A`` the body-fixed Jacobian of body A's frame in the machine's coordinates
(Dastranj & Mattila (2026) eqs. (5)-(7), (26): the cylinder loops' coordinate map is inside it)
and ``dx/dq`` the pistons' Jacobian (one cylinder per coordinate). This is the same sum, taken
in one step instead of segment by segment, so it needs no segment frames: joint axes, cylinder
mounts and gravity may point anywhere the machine files say. With ``K_A = k_v M_A`` it gives
the recursion's actuator forces exactly (`tests/test_machine_vdc.py` checks it on the crane);
an isotropic part ``k_0 I`` acts in each body's own frame, where the recursion puts it in its
segment frames and on its massless virtual links, so the two differ there by a term of order
``k_0``.

Velocities and forces are ``[v; omega]`` and ``[f; m]`` here as in `jaxmb.vdc`; the rest of
jaxmb's ``[omega; v]`` Jacobians are reordered at the boundary.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxmb.multibody.kinematics import augmented_jacobians, frame_transforms, map_jacobian, xi
from jaxmb.multibody.model import Model
from jaxmb.vdc.rigid_body import (
    M_A,
    accompanying_function,
    required_net_force,
    rigid_body_unchecked,
)

__all__ = ["BodyRequiredForces", "vdc_bodies", "body_gains", "body_required_forces"]

# [omega; v] rows -> [v; omega]; a NumPy constant: creating a JAX array at import would start
# JAX's backend before `jaxmb --cpu-devices` can split the CPU (tests/test_layers.py)
_TO_VDC = np.array([3, 4, 5, 0, 1, 2])


class BodyRequiredForces(NamedTuple):
    """Result of `body_required_forces`.

    Fields:
        tau_r: (n,) required generalized forces, ``sum_A J_A^T F*_Ar``, N m or N.
        dV: (nb, 6) ``V_r - V`` of every body frame, in the model's body order.
        v: (nb,) the accompanying functions ``v_A`` (eq. (96)), J."""

    tau_r: Array
    dV: Array
    v: Array


def vdc_bodies(model: Model):
    """The model's bodies as one stacked `jaxmb.vdc.RigidBody`, each in its own frame
    (``(nb,)`` masses, ``(nb, 3)`` centres, ``(nb, 3, 3)`` inertias): leaves of the model."""
    b = model.bodies
    return rigid_body_unchecked(
        jnp.stack([x.mass for x in b]),
        jnp.stack([x.com for x in b]),
        jnp.stack([x.inertia for x in b]),
    )


def body_gains(model: Model, k_v, k_0) -> Float[Array, "nb 6 6"]:
    """``K_A = k_v M_A + k_0 I`` for every body (eq. (8)), in its own frame."""
    return k_v * jax.vmap(M_A)(vdc_bodies(model)) + k_0 * jnp.eye(6)[None]


def _twist_map(model: Model, q) -> Array:
    """Body-fixed Jacobians ``(nb, 6, n)``, rows ``[v; omega]``."""
    Jhat = augmented_jacobians(model, xi(model, q))
    J = Jhat[jnp.asarray(model.body_frame_index, dtype=int)] @ map_jacobian(model, q)
    return J[:, _TO_VDC, :]


def body_required_forces(
    model: Model,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qd_r: Float[ArrayLike, " n"],
    qdd_r: Float[ArrayLike, " n"],
    K: Float[ArrayLike, "nb 6 6"],
) -> BodyRequiredForces:
    r"""Required generalized forces of VDC (see the module docstring) at the measured ``(q, qd)``
    for the required rates ``qd_r`` (eq. (36)) and their derivatives ``qdd_r``.

    ``d/dt V_Ar = J_A qdd_r + (d/dt J_A) qd_r`` is a forward-mode derivative along ``qd``.
    Inputs are traced values checked by the caller (this runs inside a controller's step)."""
    q, qd, qd_r, qdd_r = (jnp.asarray(x) for x in (q, qd, qd_r, qdd_r))
    J, Jd_qdr = jax.jvp(lambda x: _twist_map(model, x), (q,), (qd,))
    V = J @ qd
    V_r = J @ qd_r  # eqs. (38)-(48) in one product
    Vd_r = J @ qdd_r + Jd_qdr @ qd_r
    world = frame_transforms(model, xi(model, q))
    R = jnp.stack([world[k][0] for k in model.body_frame_index])
    bodies = vdc_bodies(model)
    F_r = jax.vmap(required_net_force, in_axes=(0, 0, 0, 0, 0, None, 0))(
        bodies, V_r, Vd_r, V, R, model.gravity, jnp.asarray(K)
    )  # eq. (8)
    tau_r = jnp.einsum("bkn,bk->n", J, F_r)  # the virtual power of every required net force
    v = jax.vmap(accompanying_function)(bodies, V_r, V)  # eq. (96)
    return BodyRequiredForces(tau_r, V_r - V, v)
