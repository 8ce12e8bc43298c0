r"""Fast path: the recursive Newton-Euler algorithm (RNEA) on the augmented tree, mapped to
minimal coordinates through the coordinate map.

With ``qhat = Xi(q)``, ``qhatd = E qd`` and ``qhatdd = E qdd + Edot qd``, the virtual power of the
augmented tree gives the minimal-coordinate inverse dynamics

    Q_a = E^T tau_hat(qhat, qhatd, qhatdd) ,

the form DESIGN.md names for fast paths (``Gamma = E^T Gamma_hat E``,
``h = E^T (h_hat + Gamma_hat Edot qd)``). The recursion is Featherstone's RNEA in body-fixed
coordinates with twists [omega; v] (Lynch & Park, the kinematics reference [12] of Dastranj &
Mattila (2026)); it is O(n) where autodiff of the kinetic energy (eqs. (12)-(13)) is O(n^3).
`jaxmb.algorithms.dynamics` keeps the definition, and the tests check that both agree.

The loops run over the frames in Python, so they unroll at trace time: the fastest code for small
trees, and a program (and compile time) that grows with n. `jaxmb.algorithms.terms` chooses between them and
the `jax.lax.scan` sweeps of `jaxmb.algorithms.tree_dynamics` by size; `jaxmb.algorithms.terms.crba` and
`jaxmb.algorithms.terms.rnea` are the minimal-coordinate entry points.
"""

from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxmb.multibody.checks import check_finite
from jaxmb.multibody.kinematics import (
    local_transforms,
    motion_subspace,
    resolve_frame,
)
from jaxmb.multibody.model import Model
from jaxmb.multibody.spatial import (
    adjoint_apply,
    adjoint_transpose_apply,
    inverse,
    skew,
    spatial_cross_force,
    spatial_cross_motion,
    spatial_inertia,
)

__all__ = [
    "body_spatial_inertias",
    "frame_wrenches",
    "rnea_augmented",
    "crba_augmented",
    "inertia_to_parent",
]


def body_spatial_inertias(model: Model) -> Float[Array, "nb 6 6"]:
    """Every body's spatial inertia ``M_i`` about its body frame (after Dastranj & Mattila eq. (8))."""
    if not model.bodies:
        return jnp.zeros((0, 6, 6), dtype=model.gravity.dtype)
    return jnp.stack([spatial_inertia(b.mass, b.com, b.inertia) for b in model.bodies])


def frame_wrenches(model: Model, wrenches: Mapping[str, Array] | None) -> dict[int, Array]:
    """External wrenches moved to their kinematic frame's coordinates, summed per frame."""
    out: dict[int, Array] = {}
    for name, W in (wrenches or {}).items():
        if np.shape(W) != (6,):
            raise ValueError(f"wrench on frame {name!r}: expected shape (6,), got {np.shape(W)}")
        W = check_finite(W, f"wrench on frame {name!r}")
        k, com = resolve_frame(model, name)
        if com is not None:  # W_B = Ad_{T_CB}^T W_C with T_CB = (I, -com)
            W = adjoint_transpose_apply(jnp.eye(3, dtype=com.dtype), -com, W)
        out[k] = out[k] + W if k in out else W
    return out


def _frame_inertias(model: Model, M_body) -> list:
    """Sum of the spatial inertias of the bodies on each kinematic frame (None: massless)."""
    M_frame: list[Array | None] = [None] * len(model.frames)
    for i, k in enumerate(model.body_frame_index):
        M_frame[k] = M_body[i] if M_frame[k] is None else M_frame[k] + M_body[i]
    return M_frame


def inertia_to_parent(R, p, inertia):
    r"""A rigid-body inertia ``(m, h, I)`` about frame k's origin in k coordinates (``h = m c``,
    ``I`` about the origin), expressed about the parent's origin in parent coordinates, for
    ``T_parent,k = (R, p)``. This is $X^\top M X$ with $X = Ad_{T_{k,parent}}$ in 3-vector form:
    $h' = R h + m p$, $I' = R I R^\top - [Rh][p] - [p][Rh] - m [p][p]$ (linear in m, h, I, so it
    moves composite inertias too)."""
    m, h, I = inertia
    hr = R @ h
    # [a][b] = b a^T - (a.b) I3 turns the skew products into outer products (elementwise: fuses)
    eye = jnp.eye(3, dtype=hr.dtype)
    outer = p[:, None] * hr[None, :]
    I_new = (
        R @ I @ R.T
        - (outer + outer.T)
        + 2.0 * (hr @ p) * eye
        - m * (p[:, None] * p[None, :] - (p @ p) * eye)
    )
    return m, hr + m * p, I_new


def _wrench_to_parent(R, p, F):
    """A wrench [n; f] at frame k's origin in k coordinates, at the parent's origin in parent
    coordinates, for T_parent,k = (R, p): [R n + p x R f; R f] (the dual of eq. (6))."""
    RF = R @ jnp.stack([F[:3], F[3:]], axis=1)  # one 3 x 2 product for moment and force
    f = RF[:, 1]
    return jnp.concatenate([RF[:, 0] + jnp.cross(p, f), f])


def _inertia_times_motion(inertia, joint: str, axis):
    """M S for S = [axis; 0] (revolute) or [0; axis] (prismatic), with M = [[I, [h]], [[h]^T, m]]."""
    m, h, I = inertia
    if joint == "revolute":
        return jnp.concatenate([I @ axis, jnp.cross(axis, h)])
    return jnp.concatenate([jnp.cross(h, axis), m * axis])


def _project(frame, F):
    """S^T F for the joint column S = [axis; 0] (revolute) or [0; axis] (prismatic): an
    elementwise product and sum, which fuses under vmap where a 6-vector dot would not."""
    part = F[:3] if frame.joint == "revolute" else F[3:]
    return jnp.sum(frame.axis * part)


def crba_augmented(model: Model, qhat: Float[ArrayLike, " nhat"]) -> Float[Array, "nhat nhat"]:
    r"""$\hat\Gamma(\hat q)$ of the open augmented tree by the composite-rigid-body algorithm
    (Featherstone 2008, the reference [7] of Dastranj & Mattila (2026)).

    Composite inertias $I^c_k = M_k + \sum_{children} X^\top I^c_{child} X$ with
    $X = Ad_{T_{child,k}}$; then $\hat\Gamma_{c(j) c(k)} = S_j^\top X^\top \cdots I^c_k S_k$ for
    every ancestor j of k. Equals $\sum_i \hat J_i^\top M_i \hat J_i$ (eq. (9)) in O(n d).
    Inertias are kept as ``(m, h = m c, I_origin)`` and moved with 3 x 3 algebra."""
    qhat = jnp.asarray(qhat)
    dtype = jnp.result_type(qhat, model.gravity)
    nf, nhat = len(model.frames), model.n_augmented
    T = local_transforms(model, qhat)  # T_parent,k
    Ic: list = [None] * nf
    for b, k in zip(model.bodies, model.body_frame_index, strict=True):
        C = skew(b.com)
        own = (b.mass, b.mass * b.com, b.inertia + b.mass * (C.T @ C))  # parallel axes
        Ic[k] = own if Ic[k] is None else tuple(x + y for x, y in zip(Ic[k], own, strict=True))
    for k in reversed(range(nf)):
        parent = model.parent_index[k]
        if parent >= 0 and Ic[k] is not None:
            moved = inertia_to_parent(*T[k], Ic[k])
            Ic[parent] = (
                moved
                if Ic[parent] is None
                else tuple(x + y for x, y in zip(Ic[parent], moved, strict=True))
            )
    entries: dict[tuple[int, int], Array] = {}  # static (row, col) -> value; no scatters

    def add(i, j, x):
        entries[i, j] = entries[i, j] + x if (i, j) in entries else x

    for k in range(nf):
        c = model.coordinate_index[k]
        if c < 0 or Ic[k] is None:
            continue
        F = _inertia_times_motion(Ic[k], model.frames[k].joint, model.frames[k].axis)
        add(c, c, _project(model.frames[k], F))
        j = k
        while model.parent_index[j] >= 0:  # static walk to the root
            F = _wrench_to_parent(*T[j], F)
            j = model.parent_index[j]
            cj = model.coordinate_index[j]
            if cj >= 0:
                Hjk = _project(model.frames[j], F)
                add(cj, c, Hjk)
                add(c, cj, Hjk)
    return _assemble(entries, (nhat, nhat), dtype)


def _assemble(entries: dict, shape: tuple[int, int], dtype) -> Array:
    """A dense matrix from statically indexed entries (zeros elsewhere) by one stack, which
    batches far better under vmap than one scatter per entry."""
    zero = jnp.zeros((), dtype=dtype)
    if 0 in shape:  # a model without coordinates (every joint fixed)
        return jnp.zeros(shape, dtype=dtype)
    rows = [
        jnp.stack([entries.get((i, j), zero).astype(dtype) for j in range(shape[1])])
        for i in range(shape[0])
    ]
    return jnp.stack(rows)


def rnea_augmented(
    model: Model,
    qhat: Float[ArrayLike, " nhat"],
    qhatd: Float[ArrayLike, " nhat"],
    qhatdd: Float[ArrayLike, " nhat"],
    *,
    gravity: bool = True,
    wrenches: Mapping[str, Array] | None = None,
    inertias: Float[Array, "nb 6 6"] | None = None,
) -> Float[Array, " nhat"]:
    r"""Generalized forces of the open augmented tree: $\hat\Gamma \ddot{\hat q} + \hat h - \hat Q_e$.

    Args:
        gravity: include the model's gravity (as a fictitious base acceleration $-g$).
        wrenches: external wrenches ``{frame name: [moment; force]}`` in that frame's coordinates.
        inertias: spatial inertias to use instead of the bodies' (the regressor differentiates
            with respect to them; the result is linear in them)."""
    qhat, qhatd, qhatdd = jnp.asarray(qhat), jnp.asarray(qhatd), jnp.asarray(qhatdd)
    M_body = body_spatial_inertias(model) if inertias is None else inertias
    W_ext = frame_wrenches(model, wrenches)
    dtype = jnp.result_type(qhat, qhatd, qhatdd, M_body, model.gravity, *W_ext.values())
    nf = len(model.frames)
    M_frame = _frame_inertias(model, M_body)

    zero6 = jnp.zeros(6, dtype=dtype)
    g = model.gravity.astype(dtype)
    a_world = jnp.concatenate([jnp.zeros(3, dtype=dtype), -g]) if gravity else zero6
    T_local = local_transforms(model, qhat)
    T_inv = [inverse(T) for T in T_local]  # T_k,parent
    V, A, F = [], [], []
    for k in range(nf):  # forward pass: twists and their rates
        parent, c = model.parent_index[k], model.coordinate_index[k]
        R, p = T_inv[k]
        v_p = zero6 if parent < 0 else V[parent]
        a_p = a_world if parent < 0 else A[parent]
        v = adjoint_apply(R, p, v_p)
        a = adjoint_apply(R, p, a_p)
        if c >= 0:
            S = motion_subspace(model, k)
            v = v + S * qhatd[c]
            a = a + S * qhatdd[c] + spatial_cross_motion(v, S * qhatd[c])
        f = zero6
        if M_frame[k] is not None:
            Mk = M_frame[k]
            f = Mk @ a + spatial_cross_force(v, Mk @ v)
        if k in W_ext:
            f = f - W_ext[k]
        V.append(v)
        A.append(a)
        F.append(f)
    tau: dict[tuple[int, int], Array] = {}
    for k in reversed(range(nf)):  # backward pass: wrenches to parents, projection on joints
        parent, c = model.parent_index[k], model.coordinate_index[k]
        if c >= 0:
            t = motion_subspace(model, k) @ F[k]
            tau[c, 0] = tau[c, 0] + t if (c, 0) in tau else t
        if parent >= 0:
            R, p = T_inv[k]
            F[parent] = F[parent] + adjoint_transpose_apply(R, p, F[k])
    return _assemble(tau, (model.n_augmented, 1), dtype)[:, 0]
