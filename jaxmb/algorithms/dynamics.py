r"""Equations of motion in minimal coordinates by inertia partitioning (Dastranj & Mattila (2026)
eqs. (8)-(13)):

    Gamma(q) qdd + h(q, qd) = Q_e(q, qd) + Q_a ,   Gamma = sum_i Gamma_i ,   Gamma_i = J_i^T M_i J_i

with ``h`` Coriolis/centrifugal only and ``Q_e`` gravity plus external wrenches (eq. (11)).

Every function here is the definition in the paper. The mass matrix, bias forces and inverse and
forward dynamics default to the recursive fast paths of `jaxmb.algorithms.terms` (one kinematic pass per
state; unrolled loops or `jax.lax.scan` sweeps by size; ABA or a Cholesky solve by size);
``method="lagrangian"`` / ``"jacobian"`` evaluate the definitions instead, and the tests check
that both agree to round-off. `dynamics_terms` returns every term of one state from one pass.
"""

from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxmb.algorithms.recursive import body_spatial_inertias
from jaxmb.algorithms.terms import (
    DynamicsTerms,
    cholesky_solve,
    unchecked_crba,
    unchecked_forward,
    unchecked_rnea,
    unchecked_terms,
)
from jaxmb.algorithms.udut import udut_forward_dynamics
from jaxmb.multibody.checks import check_all_finite, check_coordinates, check_finite, finite_inputs
from jaxmb.multibody.kinematics import (
    augmented_coordinates,
    body_jacobians,
    frame_jacobian,
    frame_transforms,
)
from jaxmb.multibody.model import Model
from jaxmb.multibody.spatial import skew

__all__ = [
    "spatial_inertias",
    "body_mass_matrices",
    "mass_matrix",
    "kinetic_energy",
    "potential_energy",
    "bias_forces",
    "coriolis_matrix",
    "gravity_forces",
    "wrench_forces",
    "external_forces",
    "inverse_dynamics",
    "forward_dynamics",
    "dynamics_terms",
    "inertial_parameters",
    "spatial_inertias_from_parameters",
    "regressor",
]

spatial_inertias = body_spatial_inertias

_METHODS = ("rnea", "lagrangian")


def _check_method(method: str) -> None:
    if method not in _METHODS:
        raise ValueError(f"method: expected one of {_METHODS}, got {method!r}")


@finite_inputs
@eqx.filter_jit
def body_mass_matrices(model: Model, q: Float[ArrayLike, " n"]) -> Float[Array, "nb n n"]:
    r"""Per-body generalized inertia $\Gamma_i = J_i^\top M_i J_i$ (Dastranj & Mattila (2026) eq. (9)).

    ``J_i`` is body i's body-fixed Jacobian in minimal coordinates (eq. (7), then ``J = Jhat E``).
    Each is symmetric positive semidefinite; their sum is Gamma (eq. (10))."""
    J = body_jacobians(model, q)  # (nb, 6, n)
    return jnp.einsum("bki,bkl,blj->bij", J, spatial_inertias(model), J)


@finite_inputs
@eqx.filter_jit
def mass_matrix(
    model: Model, q: Float[ArrayLike, " n"], *, method: str = "crba"
) -> Float[Array, "n n"]:
    r"""$\Gamma(q) = \sum_i \Gamma_i(q)$ (Dastranj & Mattila (2026) eq. (10)).

    ``method="crba"`` (default) is the fast path $E^\top \hat\Gamma E$ with $\hat\Gamma$ by the
    composite-rigid-body algorithm (`jaxmb.algorithms.terms.crba`); ``method="jacobian"`` sums the
    per-body terms of `body_mass_matrices` (eq. (9)) literally. Tests check they agree."""
    if method not in ("crba", "jacobian"):
        raise ValueError(f"method: expected one of ('crba', 'jacobian'), got {method!r}")
    if method == "crba":
        return unchecked_crba(model, check_coordinates(model, q))
    J = body_jacobians(model, q)  # (nb, 6, n)
    MJ = jnp.einsum("bkl,blj->bkj", spatial_inertias(model), J)
    # sum_i J_i^T (M_i J_i) as one (6 nb) x n contraction
    return J.reshape(-1, J.shape[-1]).T @ MJ.reshape(-1, J.shape[-1])


@finite_inputs
@eqx.filter_jit
def kinetic_energy(
    model: Model, q: Float[ArrayLike, " n"], qd: Float[ArrayLike, " n"]
) -> Float[Array, ""]:
    r"""$T = \tfrac12 \dot q^\top \Gamma(q) \dot q$ (eq. (10)), J."""
    qd = check_coordinates(model, qd, "qd")
    return 0.5 * qd @ mass_matrix(model, q) @ qd


def _com_positions(model: Model, q) -> list:
    world = frame_transforms(model, augmented_coordinates(model, q))
    out = []
    for b, k in zip(model.bodies, model.body_frame_index, strict=True):
        R, p = world[k]
        out.append(p + R @ b.com)
    return out


@finite_inputs
@eqx.filter_jit
def potential_energy(model: Model, q: Float[ArrayLike, " n"]) -> Float[Array, ""]:
    r"""Gravitational potential $V = -\sum_i m_i\, g^\top p_{S C_i}(q)$, J (zero at S's origin)."""
    V = jnp.zeros((), dtype=jnp.result_type(q, model.gravity))
    for b, p in zip(model.bodies, _com_positions(model, q), strict=True):
        V = V - b.mass * (model.gravity @ p)
    return V


@finite_inputs
@eqx.filter_jit
def bias_forces(
    model: Model,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    *,
    method: str = "rnea",
) -> Float[Array, " n"]:
    r"""Coriolis/centrifugal forces $h = \dot\Gamma \dot q - \tfrac12 \nabla_q(\dot q^\top \Gamma \dot q)$
    (Dastranj & Mattila (2026) eqs. (12)-(13)); no gravity.

    ``method="rnea"`` (default) takes the recursive fast path (`jaxmb.algorithms.terms.rnea` with
    qdd = 0 and no gravity); ``method="lagrangian"`` differentiates the kinetic energy, exactly
    eq. (13) (O(n^3) work and a compile time that grows with n: for checking)."""
    _check_method(method)
    qd = check_coordinates(model, qd, "qd")
    if method == "rnea":
        q = check_coordinates(model, q)
        return unchecked_rnea(model, q, qd, jnp.zeros_like(qd), gravity=False)

    def Gamma(q_):
        return mass_matrix(model, q_)

    Gamma_dot = jax.jvp(Gamma, (q,), (qd,))[1]  # sum_j dGamma/dq_j qd_j
    return Gamma_dot @ qd - 0.5 * jax.grad(lambda q_: qd @ Gamma(q_) @ qd)(q)


@finite_inputs
@eqx.filter_jit
def coriolis_matrix(
    model: Model, q: Float[ArrayLike, " n"], qd: Float[ArrayLike, " n"]
) -> Float[Array, "n n"]:
    r"""$C_{kj} = \sum_i \Gamma_{ijk} \dot q_i$ with the Christoffel symbols of the first kind
    $\Gamma_{ijk} = \tfrac12(\partial_i \Gamma_{kj} + \partial_j \Gamma_{ki} - \partial_k \Gamma_{ij})$.

    Then $C \dot q = h$ (eq. (13)) and $\dot\Gamma - 2C$ is skew-symmetric."""
    qd = check_coordinates(model, qd, "qd")
    dG = jax.jacfwd(lambda q_: mass_matrix(model, q_))(q)  # dG[k, j, i] = dGamma_kj / dq_i
    term1 = jnp.einsum("kji,i->kj", dG, qd)
    term2 = jnp.einsum("kij,i->kj", dG, qd)
    term3 = jnp.einsum("ijk,i->kj", dG, qd)
    return 0.5 * (term1 + term2 - term3)


@finite_inputs
@eqx.filter_jit
def gravity_forces(
    model: Model, q: Float[ArrayLike, " n"], *, method: str = "jacobian"
) -> Float[Array, " n"]:
    r"""Generalized force of gravity, $Q_g = \sum_i J_{C_i}^\top [0;\, m_i R_{C_i S}\, g]$
    (Dastranj & Mattila (2026), the formula after Table II, i.e. eq. (11) with the weights).

    Evaluated at the body frames: the weight at the COM is the wrench $[c \times f; f]$ in $B_i$.
    ``method="rnea"`` takes the recursive fast path, $-$RNEA at rest with gravity only."""
    if method not in ("jacobian", "rnea"):
        raise ValueError(f"method: expected one of ('jacobian', 'rnea'), got {method!r}")
    if method == "rnea":
        zero = jnp.zeros(model.n, dtype=jnp.result_type(q, model.gravity))
        return -unchecked_rnea(model, check_coordinates(model, q), zero, zero, gravity=True)
    J = body_jacobians(model, q)
    world = frame_transforms(model, augmented_coordinates(model, q))
    Q = jnp.zeros(model.n, dtype=J.dtype)
    for i, (b, k) in enumerate(zip(model.bodies, model.body_frame_index, strict=True)):
        R_SB = world[k][0]
        f = b.mass * (R_SB.T @ model.gravity)
        W = jnp.concatenate([jnp.cross(b.com, f), f])
        Q = Q + J[i].T @ W
    return Q


@finite_inputs
@eqx.filter_jit
def wrench_forces(
    model: Model, q: Float[ArrayLike, " n"], frame: str, wrench: Float[ArrayLike, "6"]
) -> Float[Array, " n"]:
    r"""Generalized force of a wrench $[m; f]$ given in ``frame`` and acting at its origin,
    $Q = J_P^\top W$ (Dastranj & Mattila (2026) eq. (11))."""
    if np.shape(wrench) != (6,):
        raise ValueError(f"wrench on frame {frame!r}: expected shape (6,), got {np.shape(wrench)}")
    return frame_jacobian(model, q, frame).T @ check_finite(wrench, f"wrench on frame {frame!r}")


@finite_inputs
@eqx.filter_jit
def external_forces(
    model: Model, q: Float[ArrayLike, " n"], wrenches: Mapping[str, Array] | None = None
) -> Float[Array, " n"]:
    r"""$Q_e$: gravity plus the wrenches ``{frame: [moment; force]}`` (eq. (11))."""
    Q = gravity_forces(model, q)
    for name, W in (wrenches or {}).items():
        Q = Q + wrench_forces(model, q, name, W)
    return Q


@finite_inputs
@eqx.filter_jit
def inverse_dynamics(
    model: Model,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qdd: Float[ArrayLike, " n"],
    wrenches: Mapping[str, Array] | None = None,
    *,
    method: str = "rnea",
) -> Float[Array, " n"]:
    r"""Actuator forces $Q_a = \Gamma \ddot q + h - Q_e$ (Dastranj & Mattila (2026) eq. (13)).

    Args:
        wrenches: external wrenches ``{frame name: [moment; force]}`` in that frame, N m and N.
        method: ``"rnea"`` (recursive fast path) or ``"lagrangian"`` (eqs. (9)-(13) literally)."""
    _check_method(method)
    if method == "rnea":  # one run-time check for the three inputs
        q, qd, qdd = check_all_finite(
            {
                "q": check_coordinates(model, q, finite=False),
                "qd": check_coordinates(model, qd, "qd", finite=False),
                "qdd": check_coordinates(model, qdd, "qdd", finite=False),
            }
        )
        return unchecked_rnea(model, q, qd, qdd, gravity=True, wrenches=wrenches)
    qd, qdd = check_coordinates(model, qd, "qd"), check_coordinates(model, qdd, "qdd")
    return (
        mass_matrix(model, q) @ qdd
        + bias_forces(model, q, qd, method="lagrangian")
        - external_forces(model, q, wrenches)
    )


_FORWARD_METHODS = ("auto", "rnea", "cholesky", "aba", "udut", "lagrangian")


@finite_inputs
@eqx.filter_jit
def forward_dynamics(
    model: Model,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    tau: Float[ArrayLike, " n"],
    wrenches: Mapping[str, Array] | None = None,
    *,
    method: str = "auto",
) -> Float[Array, " n"]:
    r"""$\ddot q = \Gamma^{-1}(Q_e + Q_a - h)$ (eq. (13)); ``tau`` is $Q_a$.

    Args:
        method: ``"auto"`` (default; ``"rnea"`` is the same) takes one kinematic pass and solves
            by the articulated-body algorithm for large trees, by a Cholesky factor of Gamma
            otherwise (`jaxmb.algorithms.terms.solver`); ``"cholesky"`` and ``"aba"`` force one of them;
            ``"udut"`` solves by the module-level factorisation of `jaxmb.algorithms.udut` (tree models);
            ``"lagrangian"`` evaluates eqs. (9)-(13) literally.

    Raises (through `equinox.error_if`) if Gamma(q) is not positive definite, e.g. at a
    singularity of the coordinate map."""
    if method not in _FORWARD_METHODS:
        raise ValueError(f"method: expected one of {_FORWARD_METHODS}, got {method!r}")
    if method == "lagrangian":
        tau = check_coordinates(model, tau, "tau")
        rest = inverse_dynamics(model, q, qd, jnp.zeros_like(qd), wrenches, method=method)
        return cholesky_solve(mass_matrix(model, q, method="jacobian"), tau - rest)
    q, qd, tau = check_all_finite(  # the recursions on inputs checked once, in one check
        {
            "q": check_coordinates(model, q, finite=False),
            "qd": check_coordinates(model, qd, "qd", finite=False),
            "tau": check_coordinates(model, tau, "tau", finite=False),
        }
    )
    if method == "udut":
        return udut_forward_dynamics(model, q, qd, tau, wrenches)
    solve = {"auto": "auto", "rnea": "auto", "cholesky": "cholesky", "aba": "aba"}[method]
    return unchecked_forward(model, q, qd, tau, wrenches, solve=solve)


@finite_inputs
@eqx.filter_jit
def dynamics_terms(
    model: Model,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    wrenches: Mapping[str, Array] | None = None,
) -> DynamicsTerms:
    r"""Every term of eq. (13) at one state from one kinematic pass: Gamma, h, $Q_g$ and the
    wrenches' $Q_w$ (`jaxmb.algorithms.terms.DynamicsTerms`; its ``forward`` and ``inverse`` methods solve
    and evaluate eq. (13) without another pass). The counterpart of Pinocchio's
    ``computeAllTerms`` for a controller or an analysis that needs several terms at once."""
    q, qd = check_all_finite(
        {
            "q": check_coordinates(model, q, finite=False),
            "qd": check_coordinates(model, qd, "qd", finite=False),
        }
    )
    return unchecked_terms(model, q, qd, wrenches)


def inertial_parameters(model: Model) -> Float[Array, "nb 10"]:
    r"""The 10 standard inertial parameters of every body, in Pinocchio's order

    ``[m, m c_x, m c_y, m c_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]``

    with ``c`` the COM in the body frame and ``I = I_C + m([c]^T [c])`` the inertia about the
    body frame's origin (parallel axes). The spatial inertia M_i is linear in these."""
    rows = []
    for b in model.bodies:
        m, c = b.mass, b.com
        C = skew(c)
        I = b.inertia + m * (C.T @ C)
        rows.append(
            jnp.stack(
                [
                    m,
                    m * c[0],
                    m * c[1],
                    m * c[2],
                    I[0, 0],
                    I[0, 1],
                    I[1, 1],
                    I[0, 2],
                    I[1, 2],
                    I[2, 2],
                ]
            )
        )
    if not rows:
        return jnp.zeros((0, 10), dtype=model.gravity.dtype)
    return jnp.stack(rows)


def spatial_inertias_from_parameters(pi: Float[Array, "nb 10"]) -> Float[Array, "nb 6 6"]:
    r"""$M_i = [[I_O, [m c]], [[m c]^\top, m I_3]]$ from `inertial_parameters` (linear map)."""
    m, mc = pi[:, 0], pi[:, 1:4]
    Ixx, Ixy, Iyy, Ixz, Iyz, Izz = (pi[:, k] for k in range(4, 10))
    I = jnp.stack(
        [
            jnp.stack([Ixx, Ixy, Ixz], -1),
            jnp.stack([Ixy, Iyy, Iyz], -1),
            jnp.stack([Ixz, Iyz, Izz], -1),
        ],
        axis=-2,
    )
    C = skew(mc)
    eye = jnp.eye(3, dtype=pi.dtype)
    top = jnp.concatenate([I, C], axis=-1)
    bottom = jnp.concatenate([jnp.swapaxes(C, -1, -2), m[:, None, None] * eye[None]], axis=-1)
    return jnp.concatenate([top, bottom], axis=-2)


@finite_inputs
@eqx.filter_jit
def regressor(
    model: Model, q: Float[ArrayLike, " n"], qd: Float[ArrayLike, " n"], qdd: Float[ArrayLike, " n"]
) -> Float[Array, "n nb10"]:
    r"""Inverse-dynamics regressor $Y$ with $Y \pi = Q_a = \Gamma \ddot q + h - Q_g$ (gravity
    included), ``pi = inertial_parameters(model).ravel()`` (10 per body, bodies in model order).

    Inverse dynamics is linear in the spatial inertias, so Y is the exact Jacobian of the
    recursive inverse dynamics with respect to pi (evaluated at pi = 0)."""
    qd = check_coordinates(model, qd, "qd")
    qdd = check_coordinates(model, qdd, "qdd")
    nb = len(model.bodies)
    pi0 = jnp.zeros((nb, 10), dtype=jnp.result_type(q, qd, qdd, model.gravity))

    q = check_coordinates(model, q)

    def tau(pi):
        return unchecked_rnea(model, q, qd, qdd, inertias=spatial_inertias_from_parameters(pi))

    return jax.jacfwd(tau)(pi0).reshape(model.n, nb * 10)
