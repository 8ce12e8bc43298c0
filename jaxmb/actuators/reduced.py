r"""A closed chain's dynamics reduced to its actuated coordinates (Ider et al. (2019) eqs.
(5)-(10)) and the flexible-joint drive torque as a function of the task-space snap (eqs.
(11)-(13)), by Taylor jets and autodiff instead of the printed hand derivations.

A motion of the actuated coordinates is given by its Taylor coefficients at one instant,
``eta^a(t) = sum_j a_j t^j / j!`` (``a_0`` the position, ``a_1`` the velocity, ...). The loop
closure ``g(eta) = 0`` fixes the unactuated coordinates' coefficients order by order
(`complete_jet`): the j-th time derivative of ``g(eta(t))`` is ``B_a a_j + B^u u_j +`` terms of
the lower orders, so ``u_j = -B^u^{-1}(...)`` (eq. (5) is the case j = 2). With the whole jet
``eta(t)`` every quantity along the motion, and its time derivatives, comes from `jax.jvp`:

- eq. (6): ``M* eta''^a + Q* = W^T (M eta'' + h)`` with ``W = d eta / d eta^a`` (the columns
  ``[I; -B^u^{-1} B^a]``), which is eqs. (7)-(8) (`reduced_terms`; a test compares the printed
  block formulas);
- eqs. (9)-(10): ``x = f(eta)``, ``J = (df/d eta) W`` (`task_jacobian`), and the task-space
  jet up to the snap (`task_jet`);
- eq. (11): with the drives of `jaxmb.actuators.flexible` (undamped, as in the paper),
  ``K (phi - eta^a) = G := M* eta''^a + Q*`` (eq. (6)) gives ``phi`` and, differentiated twice,
  ``phi''``; eq. (4) then gives ``T = I^r phi'' + G``. The torque is affine in the snap of
  ``x``: ``T = A x'''' + B`` with ``A = K^{-1} I^r M* J^{-1}`` (eq. (12)) and ``B`` the rest
  (eq. (13)); `drive_torque` evaluates it for any jet, `task_inverse_dynamics` returns A and B.
"""

from __future__ import annotations

from collections.abc import Callable
from math import factorial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxmb.actuators.flexible import FlexibleJointPlant
from jaxmb.algorithms.terms import unchecked_crba, unchecked_rnea
from jaxmb.constraints.projection import ConstrainedSystem, unchecked_residual

__all__ = [
    "time_derivative",
    "time_derivatives",
    "JetBasis",
    "jet_basis",
    "next_coefficient",
    "shift_top",
    "snap_terms",
    "complete_jet",
    "selection",
    "reduced_terms",
    "reduced_terms_on_jet",
    "reduced_mass_matrix",
    "task_jet",
    "task_jacobian",
    "drive_torque",
    "drive_torque_only",
    "task_inverse_dynamics",
    "generalized_force_along_jet",
]


def time_derivative(fun: Callable, k: int):
    """The k-th derivative at ``t = 0`` of ``fun(t)`` (nested forward mode)."""
    return time_derivatives(fun, k)[k]


def time_derivatives(fun: Callable, k: int) -> list:
    """``[fun(0), fun'(0), ..., fun^(k)(0)]`` from one nest of ``k`` forward-mode passes: the
    j-th pass's primal output is the first j derivatives, its tangent the next j, so every order
    comes out of the nest that the highest needs (evaluating each order by a nest of its own
    traces 2^(k+1) - 1 copies of ``fun``'s derivative work instead of 2^k)."""

    def deeper(g):
        def h(t):
            primal, tangent = jax.jvp(g, (t,), (jnp.ones_like(t),))
            return (primal[0], *tangent)

        return h

    g = lambda t: (fun(t),)  # noqa: E731
    for _ in range(k):
        g = deeper(g)
    return list(g(jnp.zeros(())))


def _poly(coeffs, t):
    """``sum_j coeffs[j] t^j / j!``."""
    return sum(c * t**j / factorial(j) for j, c in enumerate(coeffs))


def selection(system, actuated: tuple[int, ...]) -> tuple[Array, Array]:
    """Indices of the actuated and of the unactuated coordinates (eq. (1))."""
    n = system.n
    a = list(actuated)
    return jnp.asarray(a), jnp.asarray([i for i in range(n) if i not in a], dtype=int)


def _split_jacobian(system, actuated, eta):
    ia, iu = selection(system, actuated)
    if not isinstance(system, ConstrainedSystem):
        return ia, iu, None, None
    B = jax.jacfwd(lambda q: unchecked_residual(system, q))(eta)  # eq. (2)
    return ia, iu, B[:, ia], B[:, iu]


class JetBasis(NamedTuple):
    """What completing a jet at one configuration needs: the index sets of eq. (1), ``B^u`` of
    eq. (2) (None without loop constraints) and ``W = d eta / d eta^a`` (`_W`)."""

    ia: Array
    iu: Array
    Bu: Array | None
    W: Array


def jet_basis(system, actuated: tuple[int, ...], eta: Float[Array, " m"]) -> JetBasis:
    """`JetBasis` at ``eta``: one constraint Jacobian for every order of the jet."""
    ia, iu, Ba, Bu = _split_jacobian(system, actuated, eta)
    W = jnp.zeros((system.n, len(actuated)), dtype=eta.dtype).at[ia].set(jnp.eye(len(actuated)))
    if Bu is not None:
        W = W.at[iu].set(-jnp.linalg.solve(Bu, Ba))
    return JetBasis(ia, iu, Bu, W)


def next_coefficient(system, basis: JetBasis, coeffs: list[Array]) -> Array:
    """The jet's next coefficient ``eta_j`` (j = len(coeffs)) for a zero actuated part. The
    j-th time derivative of ``g(eta(t))`` is ``B^a a_j + B^u u_j`` plus terms of the lower
    orders, ``r_j``: with ``eta_j = 0`` it is ``r_j``, and ``u_j = -B^u^{-1} r_j``. So
    ``eta_j`` is affine in ``a_j``: the coefficient for any ``a_j`` is this one plus
    ``W a_j``, and a jet's top coefficient changes without another derivative."""
    z = jnp.zeros_like(coeffs[0])
    if basis.Bu is None:  # no loop constraints: every coordinate is actuated
        return z
    trial = coeffs + [z]
    r = time_derivative(lambda t: unchecked_residual(system, _poly(trial, t)), len(coeffs))
    return z.at[basis.iu].set(-jnp.linalg.solve(basis.Bu, r))


def shift_top(basis: JetBasis, coeffs: list[Array], a: Array) -> list[Array]:
    """The jet with its top coefficient's actuated part moved by ``a`` (`next_coefficient`)."""
    return coeffs[:-1] + [coeffs[-1] + basis.W @ a]


def complete_jet(
    system,
    actuated: tuple[int, ...],
    eta0: Float[Array, " m"],
    a: list[Array],
    basis: JetBasis | None = None,
) -> list[Array]:
    """The jet ``[eta_0, eta_1, ...]`` of all coordinates from ``eta_0`` (on the constraint
    manifold) and the actuated coordinates' coefficients ``a = [a_1, a_2, ...]``: eq. (2) at
    order 1, eq. (5) at order 2, and their higher derivatives (module docstring); ``basis``:
    ``eta0``'s `JetBasis` where the caller has it."""
    basis = jet_basis(system, actuated, eta0) if basis is None else basis
    coeffs = [eta0]
    for aj in a:
        coeffs = coeffs + [next_coefficient(system, basis, coeffs) + basis.W @ aj]
    return coeffs


def _W(system, actuated, eta) -> Array:
    """``d eta / d eta^a`` (m, n): identity rows for the actuated coordinates, ``-B^u^{-1} B^a``
    for the others (eq. (2))."""
    return jet_basis(system, actuated, eta).W


def _model(system):
    return system.model if isinstance(system, ConstrainedSystem) else system


def generalized_force_along_jet(system, actuated, coeffs):
    """``G(t) = W^T (M eta'' + h)`` along the jet: the left side of eq. (6) without the
    spring."""
    model = _model(system)

    def G(t):
        eta = _poly(coeffs, t)
        etad = _poly(coeffs[1:], t)
        etadd = _poly(coeffs[2:], t)
        W = _W(system, actuated, eta)
        # M eta'' + h by one inverse-dynamics pass (no gravity, as h), not CRBA and RNEA
        return W.T @ unchecked_rnea(model, eta, etad, etadd, gravity=False)

    return G


def reduced_mass_matrix(basis: JetBasis, system, eta: Float[Array, " m"]) -> Array:
    """``M* = W^T M W`` (eq. (7)) at ``eta`` with its `JetBasis`."""
    return basis.W.T @ unchecked_crba(_model(system), eta) @ basis.W


def reduced_terms_on_jet(
    system, actuated: tuple[int, ...], basis: JetBasis, coeffs: list[Array]
) -> tuple[Array, Array]:
    """`reduced_terms` from the jet ``[eta, eta', eta''(a_2 = 0), ...]`` and its `JetBasis`."""
    Q = generalized_force_along_jet(system, actuated, coeffs[:3])(jnp.zeros(()))
    return reduced_mass_matrix(basis, system, coeffs[0]), Q


def reduced_terms(
    system, actuated: tuple[int, ...], eta: Float[Array, " m"], etad_a: Float[Array, " n"]
) -> tuple[Array, Array]:
    """``(M*, Q*)`` of eq. (6) at a state (eqs. (7)-(8)): ``M* = W^T M W`` and ``Q*`` the rest of
    ``W^T (M eta'' + h)`` at ``eta''^a = 0``."""
    basis = jet_basis(system, actuated, eta)
    jet = complete_jet(system, actuated, eta, [etad_a, jnp.zeros_like(etad_a)], basis)
    return reduced_terms_on_jet(system, actuated, basis, jet)


def task_jet(task: Callable, coeffs: list[Array], order: int) -> list[Array]:
    """``[x, x', ..., x^(order)]`` of ``x = task(eta)`` along the jet (eq. (9) and its
    derivatives), from one nest of forward-mode passes (`time_derivatives`)."""
    return time_derivatives(lambda t: task(_poly(coeffs, t)), order)


def task_jacobian(
    system, actuated, task: Callable, eta: Float[Array, " m"], W: Array | None = None
) -> Array:
    """``J = Gamma^a - Gamma^u B^u^{-1} B^a = (d task / d eta) W`` (eq. (10)); ``W`` from the
    configuration's `JetBasis` where the caller has it."""
    W = _W(system, actuated, eta) if W is None else W
    return jax.jacfwd(task)(eta) @ W


def drive_torque_only(plant: FlexibleJointPlant, coeffs: list[Array]) -> Array:
    """`drive_torque`'s ``T`` without the task-space jet."""
    system, actuated = plant.system, plant.driven
    ia, _ = selection(system, actuated)
    G0, _, Gdd = time_derivatives(generalized_force_along_jet(system, actuated, coeffs), 2)
    phidd = coeffs[2][ia] + Gdd / plant.stiffness  # eq. (6), twice
    return plant.reduced_rotor_inertia * phidd + G0  # eq. (4) with K (eta^a - phi) = -G


def drive_torque(plant: FlexibleJointPlant, task: Callable, coeffs: list[Array]):
    """``(T, x-jet)`` for a complete jet ``eta_0 .. eta_4`` (module docstring): the drive torques
    (eq. (4), at the reducer output) that give the actuated coordinates this motion, and the
    task-space jet ``[x, ..., x'''']``. The drives are taken undamped (the paper's model)."""
    return drive_torque_only(plant, coeffs), task_jet(task, coeffs, 4)


def snap_terms(system, actuated: tuple[int, ...], task: Callable, coeffs: list[Array]):
    """What eq. (11) needs of a complete jet ``eta .. eta'''``: its `JetBasis`, the jet to
    ``eta''''`` at a zero actuated snap, that jet's task-space jet ``x .. x''''`` and ``J``
    (eq. (10)); ``x'''' = J a_4 + x[4]`` for any actuated snap ``a_4``."""
    basis = jet_basis(system, actuated, coeffs[0])
    full = coeffs[:4] + [next_coefficient(system, basis, coeffs[:4])]
    J = task_jacobian(system, actuated, task, coeffs[0], basis.W)
    return basis, full, task_jet(task, full, 4), J


def task_inverse_dynamics(
    plant: FlexibleJointPlant, task: Callable, coeffs: list[Array]
) -> tuple[Array, Array, Array]:
    """``(A, B, c)`` of eq. (11) at a complete jet's first four coefficients: ``T = A x'''' + B``
    for any snap, with ``c`` the snap of the jet's lower part (``x'''' = J a_4 + c``). ``A`` is
    the torque's derivative with respect to the actuated snap times ``J^{-1}``, and should be
    ``K^{-1} I^r M* J^{-1}`` (eq. (12))."""
    basis, full, x, J = snap_terms(plant.system, plant.driven, task, coeffs)

    def torque(a4):  # eta'''' is affine in a4 (`next_coefficient`)
        return drive_torque_only(plant, shift_top(basis, full, a4))

    zero = jnp.zeros(len(plant.driven), dtype=coeffs[0].dtype)
    T0, dT, c = torque(zero), jax.jacfwd(torque)(zero), x[4]
    A = dT @ jnp.linalg.inv(J)
    return A, T0 - A @ c, c
