r"""Forward dynamics by the articulated-body algorithm (ABA) on the augmented tree, with the
closed-chain map applied where a model has one.

Tree (Featherstone 2008, Table 7.1, the reference [7] of Dastranj & Mattila (2026)), here in S
coordinates after one `jaxmb.algorithms.tree_dynamics.tree_kinematics` pass, so no frame changes occur
inside the sweeps:

    backward:  U_k = I^A_k s_k,  D_k = s_k^T U_k,  u_k = tau_k - s_k^T p^A_k
               I^A_parent += I^A_k - U_k U_k^T / D_k
               p^A_parent += p^A_k + I^a_k c_k + U_k u_k / D_k
    forward:   a'_k = a_parent + c_k,  qdd_k = (u_k - U_k^T a'_k) / D_k,  a_k = a'_k + s_k qdd_k

with ``I^A_k = I_k`` and ``p^A_k = v_k x* I_k v_k - W_k`` before the sweep, ``c_k = v_k x s_k
qd_k`` and ``a_0 = [0; -g]``. O(n) where a dense solve of Gamma is O(n^3).

Closed chains. The augmented tree obeys ``Gamma_hat qhatdd + b = tau* + A^T lambda`` with the rows
of ``A`` spanning the complement of range(E), since ``qhatdd - Edot qd = E qdd`` must lie in
range(E). With ``x_0`` the tree's ABA acceleration under ``tau* = E (E^T E)^{-1} Q_a`` (any
``tau*`` with ``E^T tau* = Q_a``) and ``Y = Gamma_hat^{-1} A^T`` (ABA with zero velocity and
gravity, one column per constraint),

    lambda = -(A Y)^{-1} A (x_0 - Edot qd),   qhatdd = x_0 + Y lambda,
    qdd = (E^T E)^{-1} E^T (qhatdd - Edot qd),

which is ``Gamma^{-1}(Q_e + Q_a - h)`` for ``Gamma = E^T Gamma_hat E`` (eq. (13)); the
articulated inertias are computed once and shared by all right-hand sides.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxmb.algorithms.tree_dynamics import (
    AugmentedState,
    TreeKinematics,
    force_cross,
    gravity_acceleration,
    motion_cross,
    per_frame,
    world_wrenches,
)
from jaxmb.multibody.checks import runtime_check
from jaxmb.multibody.model import Model
from jaxmb.multibody.spatial import skew
from jaxmb.multibody.tree import scan_down, sweep_up, tree_of

__all__ = ["ArticulatedInertias", "articulated_inertias", "aba_accelerations", "aba"]


def _spatial_matrix(inertia) -> Float[Array, "6 6"]:
    """``[[I, [h]], [[h]^T, m I3]]`` from ``(m, h, I)`` (Dastranj & Mattila (2026) after eq. (8))."""
    m, h, I = inertia
    H = skew(h)
    top = jnp.concatenate([I, H], 1)
    bottom = jnp.concatenate([H.T, m * jnp.eye(3, dtype=h.dtype)], 1)
    return jnp.concatenate([top, bottom], 0)


class ArticulatedInertias(eqx.Module):
    """What the backward sweep computes from the configuration alone (any right-hand side).

    Attributes:
        U: ``(nf, 6)`` ``I^A_k s_k``.
        D: ``(nf,)`` ``s_k^T I^A_k s_k`` (one at fixed frames, which carry no coordinate).
        Ia: ``(nf, 6, 6)`` ``I^A_k - U_k U_k^T / D_k``, what frame k passes to its parent.
    """

    U: Float[Array, "nf 6"]
    D: Float[Array, " nf"]
    Ia: Float[Array, "nf 6 6"]


def _moving(model: Model, dtype) -> Float[Array, " nf"]:
    return jnp.asarray([c >= 0 for c in model.coordinate_index], dtype)


def articulated_inertias(
    model: Model,
    kin: TreeKinematics,
    tau: Float[Array, " nf"],
    pA: Float[Array, "nf 6"],
    c: Float[Array, "nf 6"],
) -> tuple[ArticulatedInertias, Float[Array, " nf"]]:
    """The backward sweep (Featherstone 2008, Table 7.1): articulated inertias and, in the same
    pass, the bias wrenches of one right-hand side; returns them and ``u``."""
    moving = _moving(model, kin.s.dtype)
    I0 = jax.vmap(_spatial_matrix)(kin.inertia)

    def step(acc, x):
        IA, p = acc
        s, mv, t, ck = x
        U = IA @ s
        D = jnp.where(mv > 0, s @ U, 1.0)  # fixed frames: s = 0, U = 0, pass IA on unchanged
        Ia = IA - jnp.outer(U, U) / D
        u = t - s @ p
        return (Ia, p + Ia @ ck + U * (u / D)), (U, D, Ia, u)

    U, D, Ia, u = sweep_up(tree_of(model), step, (I0, pA), (kin.s, moving, tau, c))
    return ArticulatedInertias(U, D, Ia), u


def _bias_sweep(model, kin, art: ArticulatedInertias, tau, pA, c) -> Float[Array, " nf"]:
    """The backward sweep's bias part alone, for a further right-hand side."""

    def up(p, x):
        U, D, Ia, s, t, ck = x
        u = t - s @ p
        return p + Ia @ ck + U * (u / D), u

    return sweep_up(tree_of(model), up, pA, (art.U, art.D, art.Ia, kin.s, tau, c))


def aba_accelerations(
    model: Model,
    kin: TreeKinematics,
    art: ArticulatedInertias,
    u: Float[Array, " nf"],
    c: Float[Array, "nf 6"],
    a0: Float[Array, "6"],
) -> Float[Array, " nf"]:
    """Joint accelerations of every frame: the forward sweep (Featherstone 2008, Table 7.1)."""

    def down(a_parent, x):
        U, D, s, ck, uk = x
        a = a_parent + ck
        qdd = (uk - U @ a) / D
        return a + s * qdd, qdd

    return scan_down(tree_of(model), down, a0, (art.U, art.D, kin.s, c, u))


def _tree_rhs(model: Model, kin: TreeKinematics, qhatd, wrenches):
    """``(p^A, c)`` before the sweep: velocity-product wrenches less external ones, and
    velocity-product accelerations."""
    dtype = kin.s.dtype
    s_qd = kin.s * per_frame(model, qhatd, dtype)[:, None]
    c = jax.vmap(motion_cross)(kin.v, s_qd)
    I0 = jax.vmap(_spatial_matrix)(kin.inertia)
    pA = jax.vmap(force_cross)(kin.v, jnp.einsum("kij,kj->ki", I0, kin.v))
    if wrenches:
        pA = pA - world_wrenches(kin, wrenches)
    return pA, c


def _null_complement(E: Float[Array, "nhat n"]) -> Float[Array, "nhat m"]:
    """An orthonormal basis of the complement of range(E): the projector ``I - Q Q^T`` (Q from
    a reduced QR of E, whose derivative JAX provides) applied to a fixed generic matrix, then
    orthonormalised. Smooth in E, unlike a pivoted or full decomposition."""
    nhat, n = E.shape
    Q = jnp.linalg.qr(E)[0]
    generic = jnp.asarray(np.random.default_rng(0).normal(size=(nhat, nhat - n)), E.dtype)
    P = generic - Q @ (Q.T @ generic)
    return jnp.linalg.qr(P)[0]


def aba(
    model: Model,
    state: AugmentedState,
    kin: TreeKinematics,
    tau: Float[Array, " n"],
    wrenches: dict[int, Array] | None = None,
) -> Float[Array, " n"]:
    r"""$\ddot q$ by ABA on the augmented tree, through the closed-chain map where the model has
    one (module docstring). ``kin`` is the state's kinematic pass (its accelerations unused)."""
    tree = tree_of(model)
    if tree.coordinate_frames is None:
        raise ValueError(
            "forward_dynamics(method='aba'): every augmented coordinate must drive exactly one "
            "joint of the tree; use method='crba'"
        )
    dtype = kin.s.dtype
    pA, c = _tree_rhs(model, kin, state.qhatd, wrenches)
    a0 = gravity_acceleration(model, dtype)
    frames = tree.coordinate_frames
    E = state.E
    # the tree's right-hand side: Q_a itself, or a tau* with E^T tau* = Q_a through the map
    tau_hat = tau if E is None else E @ jnp.linalg.solve(E.T @ E, tau)
    art, u = articulated_inertias(model, kin, per_frame(model, tau_hat, dtype), pA, c)
    x0 = aba_accelerations(model, kin, art, u, c, a0)[frames]
    if E is None:
        return _checked(x0, art)
    if E.shape[0] == E.shape[1]:  # a square map (a change of coordinates): no constraint
        return _checked(jnp.linalg.solve(E, x0 - state.Edot_qd), art)
    A_T = _null_complement(E)
    zero_c, zero_a = jnp.zeros_like(c), jnp.zeros_like(a0)

    def inverse_column(col):  # Gamma_hat^{-1} col: ABA at rest, without gravity
        u = _bias_sweep(model, kin, art, per_frame(model, col, dtype), jnp.zeros_like(pA), zero_c)
        return aba_accelerations(model, kin, art, u, zero_c, zero_a)[frames]

    Y = jax.vmap(inverse_column, in_axes=1, out_axes=1)(A_T)
    lam = -jnp.linalg.solve(A_T.T @ Y, A_T.T @ (x0 - state.Edot_qd))
    qhatdd = x0 + Y @ lam
    return _checked(jnp.linalg.solve(E.T @ E, E.T @ (qhatdd - state.Edot_qd)), art)


def _checked(qdd: Float[Array, " n"], art: ArticulatedInertias) -> Float[Array, " n"]:
    """Gamma_hat is positive definite exactly when every articulated joint inertia D_k is
    positive; a joint that moves no mass (D_k = 0) or a singular map is an error, never NaN."""
    bad = ~(jnp.all(art.D > 0) & jnp.all(jnp.isfinite(qdd)))
    return runtime_check(qdd, bad, "Gamma(q) is not positive definite at this q")
