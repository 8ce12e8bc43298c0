r"""The composite-rigid-body and recursive Newton-Euler algorithms over the whole tree at once,
in world (inertial-frame) coordinates, built on the parallel tree sums of `jaxmb.multibody.tree`.

Featherstone (2008, sec. 5.3 and 6.2, the reference [7] of Dastranj & Mattila (2026)) notes that
the recursions may run in any one coordinate frame. In the inertial frame S every joint column
``s_k = Ad_{T_S,k} S_k`` and every body inertia ``I_k = Ad_{T_S,k}^{-T} M_k Ad_{T_S,k}^{-1}`` is
expressed once, after which the recursions are plain sums over the tree:

    v_k = sum_{j in path(k)} s_j qd_j                        (velocity, eq. (7) summed)
    a_k = a_0 + sum_{j in path(k)} (s_j qdd_j + v_j x s_j qd_j)   (a_0 = [0; -g]: gravity)
    f_k = I_k a_k + v_k x* I_k v_k - W_k                      (Newton-Euler, eq. (8))
    tau_k = s_k^T sum_{d in subtree(k)} f_d
    Gamma_hat_ij = s_i^T I^c_j s_j   for frame i an ancestor of (or) frame j,  I^c = subtree sums

so each is one sweep over the tree (`jaxmb.multibody.tree.scan_down` for the path sums,
`jaxmb.multibody.tree.subtree_sums` for the subtree sums) and per-frame algebra vectorised over the
frames, in a program of bounded size whatever n is. The minimal-coordinate terms follow as in
`jaxmb.algorithms.recursive` (DESIGN.md fast path): ``Gamma = E^T Gamma_hat E``,
``h = E^T (h_hat + Gamma_hat Edot qd)``.

`TreeKinematics` is the one kinematic pass of a state; every quantity here is computed from it.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxmb.algorithms.recursive import inertia_to_parent
from jaxmb.multibody.model import Model
from jaxmb.multibody.spatial import skew
from jaxmb.multibody.tree import Tree, scan_down, subtree_sums, tree_of

__all__ = [
    "AugmentedState",
    "augmented_state",
    "map_and_jacobian",
    "TreeKinematics",
    "tree_kinematics",
    "TreeForces",
    "tree_forces",
    "joint_forces",
    "column_forces",
    "crba_world",
    "rnea_world",
    "gravity_world",
    "gravity_acceleration",
    "per_frame",
]


class AugmentedState(eqx.Module):
    r"""The augmented-tree state of a minimal state ``(q, qd)``, computed once (Dastranj &
    Mattila (2026) eq. (26)): ``qhat = Xi(q)``, ``E = dXi/dq``, ``qhatd = E qd`` and
    ``Edot qd``. Without a coordinate map ``E`` is None (the identity) and ``Edot qd`` zero."""

    q: Float[Array, " n"]
    qd: Float[Array, " n"]
    qhat: Float[Array, " nhat"]
    qhatd: Float[Array, " nhat"]
    Edot_qd: Float[Array, " nhat"]
    E: Float[Array, "nhat n"] | None

    def pull(self, tau_hat: Float[Array, "... nhat"]) -> Float[Array, "... n"]:
        """``E^T tau_hat`` (virtual power of the augmented tree)."""
        return tau_hat if self.E is None else tau_hat @ self.E

    def push(self, qdd: Float[Array, " n"]) -> Float[Array, " nhat"]:
        """``qhatdd = E qdd + Edot qd``."""
        return qdd if self.E is None else self.E @ qdd + self.Edot_qd


def map_and_jacobian(model: Model, q: Float[Array, " n"]) -> tuple[Array, Array | None]:
    """``qhat = Xi(q)`` and ``E = dXi/dq`` (Dastranj & Mattila (2026) eq. (26)) from one
    forward-mode pass (n tangents; the primal rides along once); ``(q, None)`` without a
    coordinate map."""
    if model.coordinate_map is None:
        return q, None
    E, qhat = jax.jacfwd(lambda q_: (model.coordinate_map(q_),) * 2, has_aux=True)(q)
    return qhat, E


def augmented_state(model: Model, q: Float[Array, " n"], qd: Float[Array, " n"]) -> AugmentedState:
    """Evaluate the coordinate map and its first two derivatives once, for every consumer."""
    dtype = jnp.result_type(q, qd, model.gravity)
    q, qd = jnp.asarray(q, dtype), jnp.asarray(qd, dtype)
    if model.coordinate_map is None:
        return AugmentedState(q, qd, q, qd, jnp.zeros_like(qd), None)
    Xi = model.coordinate_map
    qhat, E = map_and_jacobian(model, q)
    # qhat_ddot = E qdd + Edot qd (the time derivative of qhat_dot = E qd), with
    # Edot qd = D^2 Xi(q)[qd, qd]: a jvp of a jvp, two tangents (not the jvp of the whole
    # Jacobian, n of them, then a product with qd)
    Edot_qd = jax.jvp(lambda q_: jax.jvp(Xi, (q_,), (qd,))[1], (q,), (qd,))[1]
    return AugmentedState(q, qd, qhat, E @ qd, Edot_qd, E)


def _frame_coordinates(model: Model) -> np.ndarray:
    """The augmented coordinate of each frame, ``nhat`` (a zero slot) for fixed frames."""
    return np.array([c if c >= 0 else model.n_augmented for c in model.coordinate_index])


def per_frame(model: Model, x: Float[Array, " nhat"], dtype) -> Float[Array, " nf"]:
    """A per-coordinate quantity read at every frame (zero at fixed frames)."""
    return jnp.concatenate([jnp.asarray(x, dtype), jnp.zeros(1, dtype)])[_frame_coordinates(model)]


def frame_inertias(model: Model, dtype, inertias: Float[Array, "nb 6 6"] | None = None):
    """``(m, h = m c, I_O)`` of the bodies on each frame, summed, about the frame's origin:
    ``(nf,), (nf, 3), (nf, 3, 3)``; from ``inertias`` (spatial, about the body frames) if given."""
    nf = len(model.frames)
    m, h, I = jnp.zeros(nf, dtype), jnp.zeros((nf, 3), dtype), jnp.zeros((nf, 3, 3), dtype)
    if not model.bodies:
        return m, h, I
    idx = np.asarray(model.body_frame_index)
    if inertias is not None:  # M = [[I_O, [h]], [[h]^T, m I3]]
        M = jnp.asarray(inertias, dtype)
        hb = jnp.stack([M[:, 2, 4], M[:, 0, 5], M[:, 1, 3]], -1)  # [h] is the top right
        return m.at[idx].add(M[:, 3, 3]), h.at[idx].add(hb), I.at[idx].add(M[:, :3, :3])
    mb = jnp.stack([b.mass for b in model.bodies]).astype(dtype)
    c = jnp.stack([b.com for b in model.bodies]).astype(dtype)
    Ic = jnp.stack([b.inertia for b in model.bodies]).astype(dtype)
    # parallel axes: I_O = I_C + m ((c.c) I - c c^T)
    I_O = Ic + mb[:, None, None] * (
        jnp.sum(c * c, -1)[:, None, None] * jnp.eye(3, dtype=dtype)[None]
        - c[:, :, None] * c[:, None, :]
    )
    return m.at[idx].add(mb), h.at[idx].add(mb[:, None] * c), I.at[idx].add(I_O)


def motion_cross(v: Float[Array, "6"], x: Float[Array, "6"]) -> Float[Array, "6"]:
    """``v x x`` (Featherstone's motion cross product) for twists ``[omega; v]``."""
    w, u = v[:3], v[3:]
    return jnp.concatenate([jnp.cross(w, x[:3]), jnp.cross(u, x[:3]) + jnp.cross(w, x[3:])])


def force_cross(v: Float[Array, "6"], f: Float[Array, "6"]) -> Float[Array, "6"]:
    """``v x* f`` for a twist ``[omega; v]`` and a wrench ``[n; f]``."""
    w, u = v[:3], v[3:]
    return jnp.concatenate([jnp.cross(w, f[:3]) + jnp.cross(u, f[3:]), jnp.cross(w, f[3:])])


def inertia_apply(inertia, x: Float[Array, "6"]) -> Float[Array, "6"]:
    """``M x`` for ``M = [[I, [h]], [[h]^T, m]]`` given as ``(m, h, I)``."""
    m, h, I = inertia
    w, u = x[:3], x[3:]
    return jnp.concatenate([I @ w + jnp.cross(h, u), m * u - jnp.cross(h, w)])


# (m, h, I) about frame k's origin -> about S's origin in S coordinates, for T_S,k = (R, p): the
# same algebra as moving a composite inertia to a parent (h' = R h + m p, I' = R I R^T - ...)
inertia_to_world = inertia_to_parent


class TreeKinematics(eqx.Module):
    """One pass down the augmented tree at ``(qhat, qhatd, qhatdd)``, in S coordinates, frames
    on the leading axis.

    Attributes:
        R, p: ``T_S,k`` of every frame, ``(nf, 3, 3)`` and ``(nf, 3)``.
        s: ``(nf, 6)`` joint columns ``Ad_{T_S,k} S_k`` (zero for fixed frames).
        v: ``(nf, 6)`` twists of the frames, S coordinates at S's origin.
        a: ``(nf, 6)`` their accelerations (with ``a_0 = [0; -g]`` when gravity is on).
        f: ``(nf, 6)`` the wrenches the frames' bodies need, ``I a + v x* I v``.
        inertia: ``(m, h, I)`` of each frame's bodies about S's origin in S coordinates.
    """

    R: Float[Array, "nf 3 3"]
    p: Float[Array, "nf 3"]
    s: Float[Array, "nf 6"]
    v: Float[Array, "nf 6"]
    a: Float[Array, "nf 6"]
    f: Float[Array, "nf 6"]
    inertia: tuple


def tree_kinematics(
    model: Model,
    qhat: Float[Array, " nhat"],
    qhatd: Float[Array, " nhat"],
    qhatdd: Float[Array, " nhat"] | None = None,
    *,
    gravity: bool = True,
    inertias: Float[Array, "nb 6 6"] | None = None,
) -> TreeKinematics:
    """Poses, joint columns, twists, accelerations and Newton-Euler wrenches of every frame in
    one `scan_down` (the module docstring's sums, accumulated from the parent)."""
    tree = tree_of(model)
    dtype = jnp.result_type(qhat, qhatd, model.gravity)
    t = per_frame(model, qhat, dtype)
    td = per_frame(model, qhatd, dtype)
    tdd = jnp.zeros_like(td) if qhatdd is None else per_frame(model, qhatdd, dtype)
    R0 = jnp.stack([f.rotation for f in model.frames]).astype(dtype)
    p0 = jnp.stack([f.translation for f in model.frames]).astype(dtype)
    axis = jnp.stack([f.axis for f in model.frames]).astype(dtype)
    rev = jnp.asarray([f.joint == "revolute" for f in model.frames], dtype)
    pri = jnp.asarray([f.joint == "prismatic" for f in model.frames], dtype)
    # local T_parent,k: placement, then joint motion (Rodrigues for revolute, as kinematics.py);
    # R0 [a] and R0 [a]^2 do not depend on the state (computed once under vmap)
    K = skew(axis)
    R0K = R0 @ K
    ang = (t * rev)[:, None, None]
    R_loc = R0 + jnp.sin(ang) * R0K + (1.0 - jnp.cos(ang)) * (R0K @ K)
    p_loc = p0 + (R0 @ axis[:, :, None])[:, :, 0] * (t * pri)[:, None]
    local = frame_inertias(model, dtype, inertias)

    def step(parent, x):  # the recurrence alone; per-frame algebra is vectorised below
        R_p, p_p, v_p, a_p = parent
        Rl, pl, ax, r, pr, qd_k, qdd_k = x
        R, p = R_p @ Rl, p_p + R_p @ pl
        ax_w = R @ ax  # the axis is invariant under its own motion
        w = ax_w * r
        s = jnp.concatenate([w, jnp.cross(p, w) + ax_w * pr])
        v = v_p + s * qd_k
        a = a_p + s * qdd_k + motion_cross(v, s * qd_k)  # sdot qd = v x s qd
        return (R, p, v, a), (R, p, s, v, a)

    zero6 = jnp.zeros(6, dtype)
    a0 = gravity_acceleration(model, dtype) if gravity else zero6
    root = (jnp.eye(3, dtype=dtype), jnp.zeros(3, dtype), zero6, a0)
    R, p, s, v, a = scan_down(tree, step, root, (R_loc, p_loc, axis, rev, pri, td, tdd))
    inertia = jax.vmap(inertia_to_world)(R, p, local)

    def newton_euler(inertia, v, a):
        return inertia_apply(inertia, a) + force_cross(v, inertia_apply(inertia, v))

    f = jax.vmap(newton_euler)(inertia, v, a)
    return TreeKinematics(R, p, s, v, a, f, inertia)


def _to_coordinates(tree: Tree, x: Float[Array, " nf"]) -> Float[Array, " nhat"]:
    """Per-frame joint forces summed onto the augmented coordinates driving them."""
    if tree.coordinate_frames is not None:
        return x[tree.coordinate_frames]
    return x @ tree.selection.astype(x.dtype)


def gravity_acceleration(model: Model, dtype) -> Float[Array, "6"]:
    return jnp.concatenate([jnp.zeros(3, dtype), -model.gravity.astype(dtype)])


def _pack(inertia) -> Float[Array, "nf 13"]:
    m, h, I = inertia
    return jnp.concatenate([m[:, None], h, I.reshape(-1, 9)], -1)


def _unpack(packed: Float[Array, "nf 13"]):
    return packed[:, 0], packed[:, 1:4], packed[:, 4:].reshape(-1, 3, 3)


class TreeForces(eqx.Module):
    """The backward pass: what each joint transmits, summed over its subtree.

    Attributes:
        F: ``(nf, 6)`` the subtree's Newton-Euler wrenches (less external wrenches).
        W: ``(nf, 6)`` the subtree's external wrenches alone (zero without any).
        composite: ``(m, h, I)`` composite inertias ``I^c_k`` in S coordinates.
    """

    F: Float[Array, "nf 6"]
    W: Float[Array, "nf 6"]
    composite: tuple | None


def tree_forces(
    model: Model,
    kin: TreeKinematics,
    wrenches: dict[int, Array] | None = None,
    *,
    composite: bool = True,
) -> TreeForces:
    """One `subtree_sums` sweep of the wrenches (and, with ``composite``, the inertias) of
    `tree_kinematics`; external wrenches are summed apart from the Newton-Euler ones."""
    tree = tree_of(model)
    parts = {"F": kin.f}
    if wrenches:
        parts["W"] = world_wrenches(kin, wrenches)
    if composite:
        parts["Ic"] = _pack(kin.inertia)
    sums = subtree_sums(tree, parts)
    W = sums["W"] if wrenches else jnp.zeros_like(kin.f)
    Ic = _unpack(sums["Ic"]) if composite else None
    return TreeForces(sums["F"], W, Ic)


def joint_forces(
    model: Model, kin: TreeKinematics, F: Float[Array, "nf 6"]
) -> Float[Array, " nhat"]:
    """``tau_k = s_k^T F_k`` on the augmented coordinates."""
    return column_forces(model, kin.s, F)


def column_forces(
    model: Model, s: Float[Array, "nf 6"], F: Float[Array, "nf 6"]
) -> Float[Array, " nhat"]:
    """`joint_forces` for joint columns ``s`` however they were computed."""
    return _to_coordinates(tree_of(model), jnp.sum(s * F, -1))


def crba_world(model: Model, kin: TreeKinematics, forces: TreeForces) -> Float[Array, "nhat nhat"]:
    r"""$\hat\Gamma_{ij} = s_i^\top I^c_j s_j$ for frame i an ancestor of frame j, mirrored
    (Featherstone 2008 eq. (6.22) in S coordinates): one (nhat x 6) (6 x nhat) product."""
    tree = tree_of(model)
    F = jax.vmap(inertia_apply)(forces.composite, kin.s)  # I^c_k s_k
    if tree.coordinate_frames is not None:
        s, F, anc = kin.s[tree.coordinate_frames], F[tree.coordinate_frames], tree.ancestor
    else:
        s, anc = kin.s, tree.frame_ancestor
    G = jnp.where(anc, s @ F.T, 0.0)
    G = G + G.T - jnp.diag(jnp.diag(G))
    if tree.coordinate_frames is not None:
        return G
    P = tree.selection.astype(G.dtype)
    return P.T @ G @ P


def gravity_world(model: Model, kin: TreeKinematics, forces: TreeForces) -> Float[Array, " nhat"]:
    r"""$\hat Q_g$: at rest under gravity alone each joint carries its subtree's weight,
    $-s_k^\top I^c_k a_0$ (RNEA with $v = 0$, $a = a_0$, summed in closed form)."""
    a0 = gravity_acceleration(model, kin.s.dtype)
    f = jax.vmap(inertia_apply, in_axes=(0, None))(forces.composite, a0)
    return -joint_forces(model, kin, f)


def rnea_world(
    model: Model,
    qhat: Float[Array, " nhat"],
    qhatd: Float[Array, " nhat"],
    qhatdd: Float[Array, " nhat"],
    *,
    gravity: bool = True,
    wrenches: dict[int, Array] | None = None,
    inertias: Float[Array, "nb 6 6"] | None = None,
) -> Float[Array, " nhat"]:
    r"""$\hat\Gamma \ddot{\hat q} + \hat h - \hat Q_e$ by RNEA in S coordinates (module docstring).

    Args:
        wrenches: ``{frame index: [n; f]}`` in that frame's coordinates at its origin.
        inertias: spatial inertias to use instead of the bodies' (see `jaxmb.algorithms.recursive`)."""
    kin = tree_kinematics(model, qhat, qhatd, qhatdd, gravity=gravity, inertias=inertias)
    forces = tree_forces(model, kin, wrenches, composite=False)
    return joint_forces(model, kin, forces.F - forces.W)


def world_wrenches(kin: TreeKinematics, wrenches: dict[int, Array]) -> Float[Array, "nf 6"]:
    """Frame-coordinate wrenches at frame origins, in S coordinates at S's origin:
    ``[R n + p x R f; R f]`` (the dual of eq. (6)), zero for frames without one."""
    idx = np.array(sorted(wrenches))
    W = jnp.stack([wrenches[k] for k in idx]).astype(kin.s.dtype)
    R, p = kin.R[idx], kin.p[idx]
    n = jnp.einsum("kij,kj->ki", R, W[:, :3])
    f = jnp.einsum("kij,kj->ki", R, W[:, 3:])
    rows = jnp.concatenate([n + jnp.cross(p, f), f], -1)
    return jnp.zeros(kin.f.shape, kin.f.dtype).at[idx].add(rows)
