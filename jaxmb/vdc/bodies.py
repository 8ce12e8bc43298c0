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

Computed as one pass over the augmented tree, O(n) (`body_required_forces`), in the
inertial frame S as `jaxmb.algorithms.tree_dynamics` does: the required twists of the frames
are path sums ``v_r,k = sum_{j in path(k)} s_j qhatd_r,j`` of the joint columns, and their
rates, along the measured motion (the columns turn at the measured rates, ``sdot = v x s``),

    a_r,k = sum_{j in path(k)} (s_j qhatdd_r,j + v_j x s_j qhatd_r,j),

with ``qhatd_r = E qd_r`` and ``qhatdd_r = E qdd_r + D^2 Xi[qd, qd_r]`` through the cylinder
loops' coordinate map. Each body's frame reads ``V_r = Ad^{-1} v_r`` and
``d/dt V_r = Ad^{-1} (a_r - v x v_r)`` (the frame moves with the measured twist), gives eq. (8),
and the wrenches, moved back to S, are summed tip to base onto the joints:
``tau_hat_k = s_k^T sum_{d in subtree(k)} F_d``, ``tau_r = E^T tau_hat``. It is the
recursive Newton-Euler form of a reference-velocity law, as Niemeyer & Slotine (1991) write the
Slotine-Li controller; the Jacobian form of the sum, its definition, is kept as
`body_required_forces_by_jacobians` (`tests/test_machine_vdc.py` checks the two agree)."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxmb.algorithms.terms import recursion
from jaxmb.algorithms.tree_dynamics import (
    AugmentedState,
    augmented_state,
    column_forces,
    motion_cross,
    per_frame,
    tree_kinematics,
)
from jaxmb.multibody.kinematics import augmented_jacobians, frame_transforms, map_jacobian, xi
from jaxmb.multibody.model import Model
from jaxmb.multibody.tree import scan_down, subtree_sums, tree_of
from jaxmb.vdc.rigid_body import (
    M_A,
    accompanying_function,
    required_net_force,
    rigid_body_unchecked,
)

__all__ = [
    "BodyRequiredForces",
    "vdc_bodies",
    "body_gains",
    "body_required_forces",
    "body_required_forces_by_jacobians",
]

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


def _required_rates(model: Model, state: AugmentedState, qd_r, qdd_r):
    """``qhatd_r = E qd_r`` and its rate along the measured motion,
    ``qhatdd_r = E qdd_r + D^2 Xi(q)[qd, qd_r]`` (a jvp of a jvp, two tangents)."""
    if state.E is None:
        return qd_r, qdd_r
    Xi = model.coordinate_map
    curv = jax.jvp(lambda q_: jax.jvp(Xi, (q_,), (qd_r,))[1], (state.q,), (state.qd,))[1]
    return state.E @ qd_r, state.E @ qdd_r + curv


def _frames_in_world(model: Model, state: AugmentedState, dtype):
    """``(R, p, s, v)`` of every frame in S: poses, joint columns ``[omega; v]`` and measured
    twists. A small tree composes its transforms unrolled and sums its paths as one product
    with the ancestor table (the recursions' choice by size, `jaxmb.algorithms.terms.recursion`);
    a large one is one `tree_kinematics` scan."""
    if recursion(model) == "scan":
        kin = tree_kinematics(model, state.qhat, state.qhatd, gravity=False)
        return kin.R, kin.p, kin.s, kin.v
    world = frame_transforms(model, state.qhat, fused=True)
    R = jnp.stack([T[0] for T in world]).astype(dtype)
    p = jnp.stack([T[1] for T in world]).astype(dtype)
    axis = jnp.stack([f.axis for f in model.frames]).astype(dtype)
    rev = np.array([f.joint == "revolute" for f in model.frames], float)[:, None]
    pri = np.array([f.joint == "prismatic" for f in model.frames], float)[:, None]
    a = jnp.einsum("kij,kj->ki", R, axis)  # the axis is invariant under its own motion
    s = jnp.concatenate([a * rev, jnp.cross(p, a * rev) + a * pri], -1)
    return R, p, s, _path_sums(model, s * per_frame(model, state.qhatd, dtype)[:, None])


def _path_sums(model: Model, x: Float[Array, "nf 6"]) -> Float[Array, "nf 6"]:
    """``y_k = sum_{j in path(k)} x_j``: one product with the ancestor table for a small tree,
    a `scan_down` for a large one."""
    tree = tree_of(model)
    if recursion(model) == "scan":
        return scan_down(tree, lambda up, x_k: (up + x_k,) * 2, jnp.zeros_like(x[0]), x)
    return jnp.asarray(tree.frame_ancestor.T, x.dtype) @ x


def _subtree_sums(model: Model, x: Float[Array, "nf 6"]) -> Float[Array, "nf 6"]:
    """``y_k = sum_{d in subtree(k)} x_d`` (as `_path_sums`, the other way)."""
    tree = tree_of(model)
    if recursion(model) == "scan":
        return subtree_sums(tree, x)
    return jnp.asarray(tree.frame_ancestor, x.dtype) @ x


def _to_body(R, p, x):
    """``Ad_{T_S,k}^{-1} x``: an S twist ``[omega; v]`` at S's origin in frame k, ``[v; omega]``
    (VDC's order)."""
    w = R.T @ x[:3]
    return jnp.concatenate([R.T @ (x[3:] + jnp.cross(x[:3], p)), w])


def _to_world(R, p, F):
    """``Ad_{T_S,k}^{-T} F``: a wrench ``[f; m]`` at frame k's origin in S, ``[m; f]`` at S's."""
    f = R @ F[:3]
    return jnp.concatenate([R @ F[3:] + jnp.cross(p, f), f])


def body_required_forces(
    model: Model,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qd_r: Float[ArrayLike, " n"],
    qdd_r: Float[ArrayLike, " n"],
    K: Float[ArrayLike, "nb 6 6"],
) -> BodyRequiredForces:
    r"""Required generalized forces of VDC (see the module docstring) at the measured ``(q, qd)``
    for the required rates ``qd_r`` (eq. (36)) and their derivatives ``qdd_r``, by one pass over
    the augmented tree. Inputs are traced values checked by the caller (this runs inside a
    controller's step)."""
    dtype = jnp.result_type(q, qd, qd_r, qdd_r, model.gravity)
    state = augmented_state(model, jnp.asarray(q, dtype), jnp.asarray(qd, dtype))
    qhatd_r, qhatdd_r = _required_rates(
        model, state, jnp.asarray(qd_r, dtype), jnp.asarray(qdd_r, dtype)
    )
    R, p, s, v = _frames_in_world(model, state, dtype)
    sr = s * per_frame(model, qhatd_r, dtype)[:, None]
    v_r = _path_sums(model, sr)  # eqs. (38)-(48) in S
    a_r = _path_sums(  # their rates: the columns turn with the measured twists
        model, s * per_frame(model, qhatdd_r, dtype)[:, None] + jax.vmap(motion_cross)(v, sr)
    )
    idx = np.asarray(model.body_frame_index)
    Rb, pb = R[idx], p[idx]
    to_body = jax.vmap(_to_body)
    V, V_r = to_body(Rb, pb, v[idx]), to_body(Rb, pb, v_r[idx])
    Vd_r = to_body(Rb, pb, a_r[idx] - jax.vmap(motion_cross)(v[idx], v_r[idx]))
    bodies = vdc_bodies(model)
    F_r = jax.vmap(required_net_force, in_axes=(0, 0, 0, 0, 0, None, 0))(
        bodies, V_r, Vd_r, V, Rb, model.gravity, jnp.asarray(K, dtype)
    )  # eq. (8)
    F = jnp.zeros((len(model.frames), 6), dtype).at[idx].add(jax.vmap(_to_world)(Rb, pb, F_r))
    tau_hat = column_forces(model, s, _subtree_sums(model, F))  # tip to base, eq. (76)
    v_A = jax.vmap(accompanying_function)(bodies, V_r, V)  # eq. (96)
    return BodyRequiredForces(state.pull(tau_hat), V_r - V, v_A)


def _twist_map(model: Model, q) -> Array:
    """Body-fixed Jacobians ``(nb, 6, n)``, rows ``[v; omega]``."""
    Jhat = augmented_jacobians(model, xi(model, q))
    J = Jhat[jnp.asarray(model.body_frame_index, dtype=int)] @ map_jacobian(model, q)
    return J[:, _TO_VDC, :]


def body_required_forces_by_jacobians(
    model: Model,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qd_r: Float[ArrayLike, " n"],
    qdd_r: Float[ArrayLike, " n"],
    K: Float[ArrayLike, "nb 6 6"],
) -> BodyRequiredForces:
    r"""`body_required_forces` by its definition, ``tau_r = sum_A J_A^T F*_Ar`` with every
    body's Jacobian ``J_A`` formed: O(n^2) and a larger program; the reference the recursion is
    tested against.

    ``d/dt V_Ar = J_A qdd_r + (d/dt J_A) qd_r`` is a forward-mode derivative along ``qd``."""
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
