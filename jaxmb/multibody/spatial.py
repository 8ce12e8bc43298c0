r"""Spatial algebra on SE(3): rotations, transforms, adjoints, twists, wrenches, spatial inertia.

Conventions (Dastranj & Mattila (2026) eqs. (1)-(8)):

- ``T_AB = [[R_AB, p_AB], [0, 1]]`` maps coordinates in frame B to frame A; ``p_AB`` is the
  origin of B in A coordinates.
- Twists are ``[omega; v]`` and wrenches ``[moment; force]``, both 6-vectors in body-fixed
  coordinates (eq. (3)). Power is ``W^T V``.
- ``Ad_T_AB`` maps a twist of one rigid body from B coordinates to A coordinates (eq. (6)); the
  same body's wrench maps the other way with its transpose, ``W_B = Ad_T_AB^T W_A``, so that power
  is invariant.

Transforms are kept as ``(R, p)`` pairs inside the algorithms (no 4x4 products in the hot loops);
``homogeneous`` builds the 4x4 matrix for users.
"""

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

__all__ = [
    "skew",
    "vee",
    "rot_x",
    "rot_y",
    "rot_z",
    "rot_axis_angle",
    "homogeneous",
    "small_matmul",
    "compose",
    "inverse",
    "adjoint",
    "adjoint_apply",
    "adjoint_transpose_apply",
    "twist_from_transform",
    "wrench_transform",
    "spatial_cross_motion",
    "spatial_cross_force",
    "spatial_inertia",
]


# the Levi-Civita symbol: [w]_ij = -eps_ijk w_k
_LEVI_CIVITA = np.zeros((3, 3, 3))
for _i, _j, _k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
    _LEVI_CIVITA[_i, _j, _k], _LEVI_CIVITA[_j, _i, _k] = 1.0, -1.0


def skew(w: Float[ArrayLike, "*b 3"]) -> Float[Array, "*b 3 3"]:
    r"""$[w]$ with $[w] x = w \times x$ (the bracket of Dastranj & Mattila (2026) eq. (1)).

    As a product with the Levi-Civita symbol, which is three elementwise operations; entry by
    entry it took twenty, and every revolute frame's transform forms one per kinematic pass."""
    w = jnp.asarray(w)
    eps = _LEVI_CIVITA.astype(w.dtype).reshape((1,) * (w.ndim - 1) + (3, 3, 3))
    return -jnp.sum(eps * w[..., None, None, :], axis=-1)


def vee(S: Float[ArrayLike, "*b 3 3"]) -> Float[Array, "*b 3"]:
    """Inverse of `skew`: the vector of a skew-symmetric matrix (its skew part if it is not)."""
    S = jnp.asarray(S)
    return 0.5 * jnp.stack(
        [S[..., 2, 1] - S[..., 1, 2], S[..., 0, 2] - S[..., 2, 0], S[..., 1, 0] - S[..., 0, 1]],
        axis=-1,
    )


def _elementary(angle, i: int, j: int):
    angle = jnp.asarray(angle)
    c, s = jnp.cos(angle), jnp.sin(angle)
    one, zero = jnp.ones_like(c), jnp.zeros_like(c)
    R = [[one, zero, zero], [zero, one, zero], [zero, zero, one]]
    k = 3 - i - j  # the fixed axis
    R[k][k] = one
    R[i][i], R[i][j], R[j][i], R[j][j] = c, -s, s, c
    return jnp.stack([jnp.stack(row, axis=-1) for row in R], axis=-2)


def rot_x(angle: Float[ArrayLike, "*b"]) -> Float[Array, "*b 3 3"]:
    """Elementary rotation ``Rx(angle)`` about x (right hand, rad)."""
    return _elementary(angle, 1, 2)


def rot_y(angle: Float[ArrayLike, "*b"]) -> Float[Array, "*b 3 3"]:
    """Elementary rotation ``Ry(angle)`` about y (right hand, rad)."""
    return _elementary(angle, 2, 0)


def rot_z(angle: Float[ArrayLike, "*b"]) -> Float[Array, "*b 3 3"]:
    """Elementary rotation ``Rz(angle)`` about z (right hand, rad)."""
    return _elementary(angle, 0, 1)


def rot_axis_angle(axis: Float[ArrayLike, "3"], angle: Float[ArrayLike, ""]) -> Float[Array, "3 3"]:
    r"""Rodrigues' formula $R = I + \sin\theta [a] + (1 - \cos\theta) [a]^2$ for a unit axis $a$.

    The axis must already be unit length (model construction normalises joint axes); no
    division happens here, so gradients are finite at every angle."""
    K = skew(axis)
    angle = jnp.asarray(angle)
    return jnp.eye(3, dtype=K.dtype) + jnp.sin(angle) * K + (1.0 - jnp.cos(angle)) * (K @ K)


def homogeneous(R: Float[ArrayLike, "3 3"], p: Float[ArrayLike, "3"]) -> Float[Array, "4 4"]:
    """The 4x4 matrix ``[[R, p], [0, 1]]`` of Dastranj & Mattila (2026), SE(3) definition."""
    R, p = jnp.asarray(R), jnp.asarray(p)
    top = jnp.concatenate([R, p[:, None]], axis=1)
    bottom = jnp.zeros((1, 4), dtype=top.dtype).at[0, 3].set(1.0)
    return jnp.concatenate([top, bottom], axis=0)


def small_matmul(A: Float[Array, "r k"], B: Float[Array, " k *c"]) -> Float[Array, " r *c"]:
    """``A @ B`` (matrix times matrix or vector) as a broadcast product and a sum.

    XLA on CPU emits each ``dot`` as its own kernel call; this form is elementwise work that
    fuses with its neighbours, which halves the hydraulic plant's kinematic pass (3 x 3
    products by the dozen, see dev/performance-history.md). It is used only there: in the rigid
    recursions the same swap made XLA's fusions worse (2-4x slower against Pinocchio in
    ``scripts/bench_scaling.py``), so they keep ``@``."""
    if A.ndim != 2 or B.ndim not in (1, 2) or A.shape[1] != B.shape[0]:
        raise ValueError(
            f"small_matmul: expected a matrix (r, k) and a matrix or vector (k, ...), "
            f"got shapes {A.shape} and {B.shape}"
        )
    if B.ndim == 1:
        return jnp.sum(A * B[None, :], axis=1)
    return jnp.sum(A[:, :, None] * B[None, :, :], axis=1)


def compose(T_AB, T_BC, *, fused: bool = False):
    """``T_AC = T_AB T_BC`` on ``(R, p)`` pairs (the chain rule of transforms, eq. before (1));
    ``fused`` forms the products by `small_matmul`."""
    R_AB, p_AB = T_AB
    R_BC, p_BC = T_BC
    if fused:
        return small_matmul(R_AB, R_BC), p_AB + small_matmul(R_AB, p_BC)
    return R_AB @ R_BC, p_AB + R_AB @ p_BC


def inverse(T_AB):
    """``T_BA = T_AB^{-1} = (R^T, -R^T p)`` on an ``(R, p)`` pair."""
    R, p = T_AB
    return R.T, -(R.T @ p)


def adjoint(R: Float[ArrayLike, "3 3"], p: Float[ArrayLike, "3"]) -> Float[Array, "6 6"]:
    r"""$Ad_{T} = [[R, 0], [[p] R, R]]$, exactly as defined after Dastranj & Mattila (2026) eq. (6)."""
    R, p = jnp.asarray(R), jnp.asarray(p)
    zero = jnp.zeros_like(R)
    return jnp.block([[R, zero], [skew(p) @ R, R]])


def adjoint_apply(R, p, X: Float[Array, "6 ..."]) -> Float[Array, "6 ..."]:
    r"""$Ad_T X$ for a twist or a 6 x k Jacobian without forming the 6 x 6 matrix (eqs. (6)-(7)).

    With $X = [X_\omega; X_v]$: $Ad_T X = [R X_\omega;\; p \times (R X_\omega) + R X_v]$."""
    Rw = R @ X[:3]
    Rv = R @ X[3:]
    return jnp.concatenate([Rw, _cross_cols(p, Rw) + Rv], axis=0)


def adjoint_transpose_apply(R, p, W: Float[Array, "6 ..."]) -> Float[Array, "6 ..."]:
    r"""$Ad_T^\top W$: moves a wrench from frame A to frame B for ``T = T_AB`` (power invariance).

    $Ad_T^\top [m; f] = [R^\top (m - p \times f);\; R^\top f]$ since $[p]^\top = -[p]$."""
    m, f = W[:3], W[3:]
    return jnp.concatenate([R.T @ (m - _cross_cols(p, f)), R.T @ f], axis=0)


def _cross_cols(p, X):
    """p x X for a 3-vector X or column-wise for a 3 x k matrix X."""
    if X.ndim == 1:
        return jnp.cross(p, X)
    return jnp.cross(p[:, None], X, axis=0)


def twist_from_transform(
    T: Float[ArrayLike, "4 4"], T_dot: Float[ArrayLike, "4 4"]
) -> Float[Array, "6"]:
    r"""Body twist $[\omega; v]$ from $T^{-1}\dot T = [[[\omega], v], [0, 0]]$ (Dastranj & Mattila (2026) eq. (1))."""
    T, T_dot = jnp.asarray(T), jnp.asarray(T_dot)
    R = T[:3, :3]
    # top rows of T^{-1} Tdot = [R^T Rdot, R^T pdot]; R^T Rdot is skew for a proper motion
    W = R.T @ T_dot[:3, :3]
    v = R.T @ T_dot[:3, 3]
    return jnp.concatenate([vee(W), v])


def wrench_transform(
    R_AB: Float[ArrayLike, "3 3"], p_AB: Float[ArrayLike, "3"], W_A: Float[ArrayLike, "6"]
) -> Float[Array, "6"]:
    r"""A wrench given in frame A, expressed in frame B: $W_B = Ad_{T_{AB}}^\top W_A$.

    This is the dual of eq. (6); it underlies eq. (11), $Q = \sum_k J_{P_k}^\top W_k$."""
    return adjoint_transpose_apply(jnp.asarray(R_AB), jnp.asarray(p_AB), jnp.asarray(W_A))


def spatial_cross_motion(V: Float[Array, "6"], X: Float[Array, "6 ..."]) -> Float[Array, "6 ..."]:
    r"""$ad_V X$ (Featherstone's $V\times$) for twists $[\omega; v]$:
    $[\omega \times X_\omega;\; v \times X_\omega + \omega \times X_v]$."""
    w, v = V[:3], V[3:]
    return jnp.concatenate(
        [_cross_cols(w, X[:3]), _cross_cols(v, X[:3]) + _cross_cols(w, X[3:])], axis=0
    )


def spatial_cross_force(V: Float[Array, "6"], F: Float[Array, "6"]) -> Float[Array, "6"]:
    r"""$-ad_V^\top F$ (Featherstone's $V\times^*$) for a wrench $[m; f]$:
    $[\omega \times m + v \times f;\; \omega \times f]$."""
    w, v = V[:3], V[3:]
    m, f = F[:3], F[3:]
    return jnp.concatenate([jnp.cross(w, m) + jnp.cross(v, f), jnp.cross(w, f)])


def spatial_inertia(
    mass: Float[ArrayLike, ""], com: Float[ArrayLike, "3"], inertia_com: Float[ArrayLike, "3 3"]
) -> Float[Array, "6 6"]:
    r"""Spatial inertia $M_i$ about the body frame origin (after Dastranj & Mattila (2026) eq. (8)):

    $M_i = [[I_C + m [c][c]^\top,\; m [c]],\; [m [c]^\top,\; m I_3]]$ for twists $[\omega; v]$,
    with $c = p_{B_i C_i}$ the COM in body coordinates and $I_C$ the inertia about the COM.
    ($[c]^\top = -[c]$; the kinetic energy is $\tfrac12 V^\top M_i V$, eq. (8).)"""
    m = jnp.asarray(mass)
    C = skew(jnp.asarray(com))
    I = jnp.asarray(inertia_com) + m * (C @ C.T)
    eye = jnp.eye(3, dtype=C.dtype)
    return jnp.block([[I, m * C], [m * C.T, m * eye]])
