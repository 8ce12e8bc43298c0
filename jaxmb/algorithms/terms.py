r"""Every dynamics term of one state from one pass, and the choice of recursion by model size.

A state's augmented kinematics (``qhat = Xi(q)``, ``E``, ``Edot qd``, every frame's pose, joint
column and twist) are computed once (`jaxmb.algorithms.tree_dynamics.augmented_state`,
`jaxmb.algorithms.tree_dynamics.tree_kinematics`) and shared by the mass matrix, the bias forces, gravity,
the external wrenches and forward and inverse dynamics, in the spirit of Pinocchio's
``computeAllTerms``: `dynamics_terms` returns them all. The minimal-coordinate terms are
Dastranj & Mattila (2026) eq. (13) through the map (DESIGN.md fast path):

    Gamma = E^T Gamma_hat E,   h = E^T (h_hat + Gamma_hat Edot qd),   Q_e = E^T Q_e_hat.

Two implementations of the tree recursions exist and give the same numbers to round-off:
Python loops over the frames (`jaxmb.algorithms.recursive`, unrolled at trace time: fastest to run for
small trees, but compile time grows faster than n) and `jax.lax.scan` sweeps in S coordinates
(`jaxmb.algorithms.tree_dynamics`, `jaxmb.algorithms.aba`: compile time flat in n). `recursion` picks by the number of
frames, ``UNROLL_MAX_FRAMES`` and below unrolled; ``forward_dynamics`` solves by ABA from
``ABA_MIN_COORDINATES`` augmented coordinates up, by a Cholesky factor of Gamma below
(thresholds measured by ``scripts/bench_scaling.py``).
"""

from collections.abc import Mapping

import equinox as eqx
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jaxtyping import Array, ArrayLike, Float

from jaxmb.algorithms.aba import aba
from jaxmb.algorithms.recursive import crba_augmented, frame_wrenches, rnea_augmented
from jaxmb.algorithms.tree_dynamics import (
    AugmentedState,
    augmented_state,
    crba_world,
    gravity_world,
    joint_forces,
    rnea_world,
    tree_forces,
    tree_kinematics,
)
from jaxmb.multibody.checks import check_coordinates, check_finite, runtime_check
from jaxmb.multibody.model import Model
from jaxmb.multibody.tree import tree_of

__all__ = [
    "UNROLL_MAX_FRAMES",
    "ABA_MIN_COORDINATES",
    "recursion",
    "solver",
    "DynamicsTerms",
    "unchecked_terms",
    "unchecked_crba",
    "unchecked_rnea",
    "unchecked_forward",
    "forward_from_state",
    "gamma_and_rest",
    "crba",
    "rnea",
    "cholesky_solve",
]

UNROLL_MAX_FRAMES = 16
ABA_MIN_COORDINATES = 20
_RECURSIONS = ("auto", "unrolled", "scan")
_SOLVERS = ("auto", "cholesky", "aba")


def recursion(model: Model, choice: str = "auto") -> str:
    """``"unrolled"`` or ``"scan"``: the tree recursions ``choice`` names, or by size for auto."""
    if choice not in _RECURSIONS:
        raise ValueError(f"recursion: expected one of {_RECURSIONS}, got {choice!r}")
    if choice != "auto":
        return choice
    return "unrolled" if len(model.frames) <= UNROLL_MAX_FRAMES else "scan"


def solver(model: Model, choice: str = "auto") -> str:
    """``"cholesky"`` or ``"aba"`` for forward dynamics: as named, or by size for auto. ABA needs
    every augmented coordinate to drive exactly one joint."""
    if choice not in _SOLVERS:
        raise ValueError(f"solver: expected one of {_SOLVERS}, got {choice!r}")
    if choice != "auto":
        return choice
    big = model.n_augmented >= ABA_MIN_COORDINATES
    return "aba" if big and tree_of(model).coordinate_frames is not None else "cholesky"


class DynamicsTerms(eqx.Module):
    r"""The terms of eq. (13) at one state, ``Gamma qdd + h = Q_g + Q_w + Q_a``.

    Attributes:
        Gamma: ``(n, n)`` generalized inertia (eq. (10)).
        h: ``(n,)`` Coriolis and centrifugal forces (eq. (13)), no gravity.
        Q_g: ``(n,)`` generalized gravity force.
        Q_w: ``(n,)`` generalized force of the external wrenches (eq. (11)), zero without any.
    """

    Gamma: Float[Array, "n n"]
    h: Float[Array, " n"]
    Q_g: Float[Array, " n"]
    Q_w: Float[Array, " n"]

    def forward(self, tau: Float[Array, " n"]) -> Float[Array, " n"]:
        r"""$\ddot q = \Gamma^{-1}(Q_g + Q_w + Q_a - h)$ by a Cholesky solve, ``tau`` $= Q_a$."""
        return cholesky_solve(self.Gamma, tau + self.Q_g + self.Q_w - self.h)

    def inverse(self, qdd: Float[Array, " n"]) -> Float[Array, " n"]:
        r"""$Q_a = \Gamma \ddot q + h - Q_g - Q_w$."""
        return self.Gamma @ qdd + self.h - self.Q_g - self.Q_w


def cholesky_solve(Gamma, rhs):
    L = jnp.linalg.cholesky(Gamma)  # NaN entries if Gamma is not SPD
    L = runtime_check(L, ~jnp.isfinite(L).all(), "Gamma(q) is not positive definite at this q")
    return jsl.cho_solve((L, True), rhs)


def _gamma(state: AugmentedState, Gamma_hat):
    """``E^T Gamma_hat E``."""
    return state.pull(state.pull(Gamma_hat).T)


def unchecked_terms(
    model: Model,
    q: Float[Array, " n"],
    qd: Float[Array, " n"],
    wrenches: Mapping[str, Array] | None = None,
    *,
    choice: str = "auto",
) -> DynamicsTerms:
    """`DynamicsTerms` at ``(q, qd)`` already checked by the caller (wrenches are checked here)."""
    state = augmented_state(model, q, qd)
    W = frame_wrenches(model, wrenches)
    if recursion(model, choice) == "unrolled":
        qhat, zero = state.qhat, jnp.zeros_like(state.qhat)
        Gamma_hat = crba_augmented(model, qhat)
        h_hat = rnea_augmented(model, qhat, state.qhatd, state.Edot_qd, gravity=False)
        g_hat = -rnea_augmented(model, qhat, zero, zero, gravity=True)
        w_hat = -rnea_augmented(model, qhat, zero, zero, gravity=False, wrenches=wrenches)
    else:
        kin = tree_kinematics(model, state.qhat, state.qhatd, state.Edot_qd, gravity=False)
        forces = tree_forces(model, kin, W)
        Gamma_hat = crba_world(model, kin, forces)
        h_hat = joint_forces(model, kin, forces.F)
        g_hat = gravity_world(model, kin, forces)
        w_hat = joint_forces(model, kin, forces.W)
    return DynamicsTerms(
        _gamma(state, Gamma_hat), state.pull(h_hat), state.pull(g_hat), state.pull(w_hat)
    )


def unchecked_crba(
    model: Model, q: Float[Array, " n"], *, choice: str = "auto"
) -> Float[Array, "n n"]:
    r"""$\Gamma = E^\top \hat\Gamma(\Xi(q)) E$ for a ``q`` already checked by the caller."""
    state = augmented_state(model, q, jnp.zeros_like(q))
    if recursion(model, choice) == "unrolled":
        return _gamma(state, crba_augmented(model, state.qhat))
    kin = tree_kinematics(model, state.qhat, jnp.zeros_like(state.qhat), gravity=False)
    return _gamma(state, crba_world(model, kin, tree_forces(model, kin)))


def unchecked_rnea(
    model: Model,
    q: Float[Array, " n"],
    qd: Float[Array, " n"],
    qdd: Float[Array, " n"],
    *,
    gravity: bool = True,
    wrenches: Mapping[str, Array] | None = None,
    inertias: Float[Array, "nb 6 6"] | None = None,
    choice: str = "auto",
) -> Float[Array, " n"]:
    r"""$Q_a = E^\top \hat\tau(\Xi(q), E\dot q, E\ddot q + \dot E \dot q)$ for inputs already
    checked by the caller (wrenches are checked here)."""
    state = augmented_state(model, q, qd)
    qhatdd = state.push(jnp.asarray(qdd, state.qd.dtype))
    if recursion(model, choice) == "unrolled":
        tau_hat = rnea_augmented(
            model,
            state.qhat,
            state.qhatd,
            qhatdd,
            gravity=gravity,
            wrenches=wrenches,
            inertias=inertias,
        )
    else:
        W = frame_wrenches(model, wrenches)
        tau_hat = rnea_world(
            model,
            state.qhat,
            state.qhatd,
            qhatdd,
            gravity=gravity,
            wrenches=W,
            inertias=inertias,
        )
    return state.pull(tau_hat)


def unchecked_forward(
    model: Model,
    q: Float[Array, " n"],
    qd: Float[Array, " n"],
    tau: Float[Array, " n"],
    wrenches: Mapping[str, Array] | None = None,
    *,
    choice: str = "auto",
    solve: str = "auto",
) -> Float[Array, " n"]:
    r"""$\ddot q = \Gamma^{-1}(Q_e + Q_a - h)$ (eq. (13)) from one kinematic pass: ABA on the
    augmented tree (`jaxmb.algorithms.aba`), or Gamma and $h - Q_e$ from the pass and a Cholesky solve."""
    return forward_from_state(
        model, augmented_state(model, q, qd), tau, wrenches, choice=choice, solve=solve
    )


@eqx.filter_jit
def forward_from_state(
    model: Model,
    state: AugmentedState,
    tau: Float[Array, " n"],
    wrenches: Mapping[str, Array] | None = None,
    *,
    choice: str = "auto",
    solve: str = "auto",
) -> Float[Array, " n"]:
    """`unchecked_forward` at an augmented state the caller has computed and shares with
    other readers (a hydraulic plant's piston kinematics)."""
    tau = jnp.asarray(tau, state.qd.dtype)
    if solver(model, solve) == "aba":
        kin = tree_kinematics(model, state.qhat, state.qhatd, gravity=False)
        return aba(model, state, kin, tau, frame_wrenches(model, wrenches))
    Gamma, rest = gamma_and_rest(model, state, wrenches, choice=choice)
    return cholesky_solve(Gamma, tau - rest)


def gamma_and_rest(
    model: Model,
    state: AugmentedState,
    wrenches: Mapping[str, Array] | None = None,
    *,
    choice: str = "auto",
) -> tuple[Float[Array, "n n"], Float[Array, " n"]]:
    r"""Gamma and $h - Q_e$ (gravity and wrenches) from one pass, for a dense solve."""
    if recursion(model, choice) == "unrolled":
        Gamma_hat = crba_augmented(model, state.qhat)
        rest = rnea_augmented(
            model, state.qhat, state.qhatd, state.Edot_qd, gravity=True, wrenches=wrenches
        )
    else:
        kin = tree_kinematics(model, state.qhat, state.qhatd, state.Edot_qd, gravity=True)
        forces = tree_forces(model, kin, frame_wrenches(model, wrenches))
        Gamma_hat = crba_world(model, kin, forces)
        rest = joint_forces(model, kin, forces.F - forces.W)  # h - Q_e on the tree
    return _gamma(state, Gamma_hat), state.pull(rest)


def crba(model: Model, q: Float[ArrayLike, " n"], *, choice: str = "auto") -> Float[Array, "n n"]:
    r"""$\Gamma = E^\top \hat\Gamma(\Xi(q)) E$ by the composite-rigid-body algorithm (DESIGN.md
    fast path for eq. (10)); ``choice`` picks the recursion (`recursion`)."""
    return unchecked_crba(model, check_coordinates(model, q), choice=choice)


def rnea(
    model: Model,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qdd: Float[ArrayLike, " n"],
    *,
    gravity: bool = True,
    wrenches: Mapping[str, Array] | None = None,
    inertias: Float[Array, "nb 6 6"] | None = None,
    choice: str = "auto",
) -> Float[Array, " n"]:
    r"""$Q_a = \Gamma \ddot q + h - Q_e$ in minimal coordinates by RNEA on the augmented tree:
    $E^\top \hat\tau(\Xi(q), E\dot q, E\ddot q + \dot E \dot q)$."""
    q = check_coordinates(model, q)
    qd, qdd = check_finite(qd, "qd"), check_finite(qdd, "qdd")
    return unchecked_rnea(
        model, q, qd, qdd, gravity=gravity, wrenches=wrenches, inertias=inertias, choice=choice
    )
