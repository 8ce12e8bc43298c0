r"""Frame poses and body-fixed Jacobians (Dastranj & Mattila (2026) eqs. (1)-(7), (26)).

The tree is walked once, parents first (a Python loop over static structure that unrolls at
trace time). Each frame's body-fixed Jacobian in augmented coordinates follows eq. (7):

    Jhat_k = Ad_{T_k,parent} Jhat_parent + S_k e_{c(k)}

with ``S_k = [axis; 0]`` (revolute) or ``[0; axis]`` (prismatic) in frame k's coordinates (the
joint axis is invariant under its own motion). In minimal coordinates ``J_k = Jhat_k E`` with
``E = dXi/dq`` by `jax.jacfwd` (eq. (26)).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxmb.multibody.checks import check_coordinates, finite_inputs
from jaxmb.multibody.model import Model
from jaxmb.multibody.spatial import adjoint_apply, compose, homogeneous, inverse, skew

__all__ = [
    "augmented_coordinates",
    "coordinate_map_jacobian",
    "local_transforms",
    "motion_subspace",
    "frame_transforms",
    "world_transforms",
    "augmented_jacobians",
    "frame_pose",
    "frame_jacobian",
    "body_jacobians",
    "resolve_frame",
]


@finite_inputs
@eqx.filter_jit
def augmented_coordinates(model: Model, q: Float[ArrayLike, " n"]) -> Float[Array, " nhat"]:
    r"""$\hat q = \Xi(q)$ (identity when the model has no coordinate map)."""
    return xi(model, check_coordinates(model, q))


@finite_inputs
@eqx.filter_jit
def coordinate_map_jacobian(model: Model, q: Float[ArrayLike, " n"]) -> Float[Array, "nhat n"]:
    r"""$E = \partial \Xi / \partial q$ by forward-mode autodiff (Dastranj & Mattila (2026) eq. (26))."""
    return map_jacobian(model, check_coordinates(model, q))


def xi(model: Model, q: Float[Array, " n"]) -> Float[Array, " nhat"]:
    """`augmented_coordinates` without the input check, for the recursions that have checked
    ``q`` at their own entry (one check per public call, not one per inner call)."""
    return q if model.coordinate_map is None else model.coordinate_map(q)


def map_jacobian(model: Model, q: Float[Array, " n"]) -> Float[Array, "nhat n"]:
    """`coordinate_map_jacobian` without the input check (see `xi`)."""
    if model.coordinate_map is None:
        return jnp.eye(model.n, dtype=jnp.result_type(q))
    return jax.jacfwd(model.coordinate_map)(q)


def motion_subspace(model: Model, k: int) -> Float[Array, "6"]:
    """Frame k's joint column ``S_k`` in its own coordinates (twists [omega; v]); zeros if fixed."""
    f = model.frames[k]
    zero = jnp.zeros_like(f.axis)
    if f.joint == "revolute":
        return jnp.concatenate([f.axis, zero])
    if f.joint == "prismatic":
        return jnp.concatenate([zero, f.axis])
    return jnp.concatenate([zero, zero])


def local_transforms(model: Model, qhat: Float[ArrayLike, " nhat"]):
    """``T_parent,k`` for every frame k as a list of ``(R, p)``: placement, then joint motion."""
    qhat = jnp.asarray(qhat)
    out = []
    for f, c in zip(model.frames, model.coordinate_index, strict=True):
        if f.joint == "revolute":
            # Rodrigues, premultiplied: R0 exp([a] t) = R0 + sin t (R0 [a]) + (1 - cos t) (R0 [a]^2).
            # R0 [a] and R0 [a]^2 do not depend on the state, so under vmap over states they are
            # computed once and the per-state work is elementwise (fuses; no batched matmul).
            K = skew(f.axis)
            R0K = f.rotation @ K
            t = qhat[c]
            T = (f.rotation + jnp.sin(t) * R0K + (1.0 - jnp.cos(t)) * (R0K @ K), f.translation)
        elif f.joint == "prismatic":
            T = (f.rotation, f.translation + (f.rotation @ f.axis) * qhat[c])
        else:
            T = (f.rotation, f.translation)
        out.append(T)
    return out


def frame_transforms(model: Model, qhat: Float[ArrayLike, " nhat"], *, fused: bool = False):
    """``T_S,k`` for every kinematic frame k, as a list of ``(R, p)`` (chain rule of transforms);
    ``fused`` composes by `jaxmb.multibody.spatial.small_matmul`."""
    world = []
    for T, parent in zip(local_transforms(model, qhat), model.parent_index, strict=True):
        world.append(T if parent < 0 else compose(world[parent], T, fused=fused))
    return world


def world_transforms(model: Model, q: Float[Array, " n"]):
    """`frame_transforms` at minimal coordinates ``q`` (unchecked, see `xi`), composed by fused
    small products: one kinematic pass that several readers share, e.g. every cylinder mount
    of a hydraulic plant."""
    return frame_transforms(model, xi(model, q), fused=True)


def augmented_jacobians(model: Model, qhat: Float[ArrayLike, " nhat"]) -> Float[Array, "nf 6 nhat"]:
    r"""Body-fixed Jacobians $\hat J_k$ of every kinematic frame in augmented coordinates, by the
    propagation of Dastranj & Mattila (2026) eq. (7) (see the module docstring)."""
    nhat = model.n_augmented
    dtype = jnp.result_type(qhat, model.gravity)
    # Only the columns of a frame's ancestor joints are non-zero: propagate those alone (static
    # column lists), then scatter into 6 x nhat. Same result, about half the arithmetic.
    cols: list[list[int]] = []
    compact = []
    for k, (T, parent, c) in enumerate(
        zip(local_transforms(model, qhat), model.parent_index, model.coordinate_index, strict=True)
    ):
        if parent < 0 or not cols[parent]:
            cols_k, J = [], jnp.zeros((6, 0), dtype=dtype)
        else:
            R_kp, p_kp = inverse(T)  # T_k,parent
            cols_k, J = list(cols[parent]), adjoint_apply(R_kp, p_kp, compact[parent])  # eq. (7)
        if c >= 0:
            cols_k.append(c)
            J = jnp.concatenate([J, motion_subspace(model, k)[:, None].astype(dtype)], axis=1)
        cols.append(cols_k)
        compact.append(J)
    full = [
        jnp.zeros((6, nhat), dtype=dtype).at[:, jnp.asarray(ck, dtype=int)].add(Jk)
        if ck
        else jnp.zeros((6, nhat), dtype=dtype)
        for ck, Jk in zip(cols, compact, strict=True)
    ]
    return jnp.stack(full)


def resolve_frame(model: Model, frame: str):
    """(kinematic frame index, COM offset or None) for a frame name."""
    names = [f.name for f in model.frames]
    if frame in names:
        return names.index(frame), None
    for b, k in zip(model.bodies, model.body_frame_index, strict=True):
        if b.com_frame == frame:
            return k, b.com
    raise ValueError(f"unknown frame {frame!r}; frames are {list(model.frame_names)}")


@finite_inputs
@eqx.filter_jit
def frame_pose(model: Model, q: Float[ArrayLike, " n"], frame: str) -> Float[Array, "4 4"]:
    """``T_S,frame(q)``, the 4x4 pose of a named frame in the inertial frame S."""
    k, com = resolve_frame(model, frame)
    R, p = frame_transforms(model, augmented_coordinates(model, q))[k]
    if com is not None:  # COM frames are parallel to their body frame
        p = p + R @ com
    return homogeneous(R, p)


@finite_inputs
@eqx.filter_jit
def frame_jacobian(model: Model, q: Float[ArrayLike, " n"], frame: str) -> Float[Array, "6 n"]:
    r"""Body-fixed 6 x n Jacobian of a named frame in minimal coordinates, $J = \hat J E$
    (Dastranj & Mattila (2026) eqs. (5)-(7), (26)). Rows are [omega; v] in frame coordinates."""
    k, com = resolve_frame(model, frame)
    q = check_coordinates(model, q)
    qhat = xi(model, q)
    J = augmented_jacobians(model, qhat)[k]
    if com is not None:  # T_C,B = (I, -com): eq. (7) to the COM frame
        J = adjoint_apply(jnp.eye(3, dtype=J.dtype), -com, J)
    return J @ map_jacobian(model, q)


@finite_inputs
@eqx.filter_jit
def body_jacobians(model: Model, q: Float[ArrayLike, " n"]) -> Float[Array, "nb 6 n"]:
    r"""Body-fixed Jacobians $J_{B_i}$ of every body's frame in minimal coordinates."""
    q = check_coordinates(model, q)
    qhat = xi(model, q)
    Jhat = augmented_jacobians(model, qhat)[jnp.asarray(model.body_frame_index, dtype=int)]
    return Jhat @ map_jacobian(model, q)
