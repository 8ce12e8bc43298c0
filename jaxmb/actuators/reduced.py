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

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxmb.actuators.flexible import FlexibleJointPlant
from jaxmb.algorithms.dynamics import bias_forces, mass_matrix
from jaxmb.constraints.projection import ConstrainedSystem, unchecked_residual

__all__ = [
    "time_derivative",
    "complete_jet",
    "selection",
    "reduced_terms",
    "task_jet",
    "task_jacobian",
    "drive_torque",
    "task_inverse_dynamics",
    "generalized_force_along_jet",
]


def time_derivative(fun: Callable, k: int):
    """The k-th derivative at ``t = 0`` of ``fun(t)`` (nested forward mode)."""
    for _ in range(k):
        fun = (lambda f: lambda t: jax.jvp(f, (t,), (jnp.ones_like(t),))[1])(fun)
    return fun(jnp.zeros(()))


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


def complete_jet(
    system, actuated: tuple[int, ...], eta0: Float[Array, " m"], a: list[Array]
) -> list[Array]:
    """The jet ``[eta_0, eta_1, ...]`` of all coordinates from ``eta_0`` (on the constraint
    manifold) and the actuated coordinates' coefficients ``a = [a_1, a_2, ...]``: eq. (2) at
    order 1, eq. (5) at order 2, and their higher derivatives (module docstring)."""
    ia, iu, _, Bu = _split_jacobian(system, actuated, eta0)
    coeffs = [eta0]
    for j, aj in enumerate(a, start=1):
        trial = coeffs + [jnp.zeros_like(eta0).at[ia].set(aj)]
        if Bu is None:  # no loop constraints: every coordinate is actuated
            coeffs = trial
            continue
        r = time_derivative(
            lambda t, c=trial: unchecked_residual(system, _poly(c, t)), j
        )  # B_a a_j + lower
        coeffs = coeffs + [trial[-1].at[iu].set(-jnp.linalg.solve(Bu, r))]
    return coeffs


def _W(system, actuated, eta) -> Array:
    """``d eta / d eta^a`` (m, n): identity rows for the actuated coordinates, ``-B^u^{-1} B^a``
    for the others (eq. (2))."""
    ia, iu, Ba, Bu = _split_jacobian(system, actuated, eta)
    W = jnp.zeros((system.n, len(actuated)), dtype=eta.dtype).at[ia].set(jnp.eye(len(actuated)))
    if Bu is None:
        return W
    return W.at[iu].set(-jnp.linalg.solve(Bu, Ba))


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
        return W.T @ (mass_matrix(model, eta) @ etadd + bias_forces(model, eta, etad))

    return G


def reduced_terms(
    system, actuated: tuple[int, ...], eta: Float[Array, " m"], etad_a: Float[Array, " n"]
) -> tuple[Array, Array]:
    """``(M*, Q*)`` of eq. (6) at a state (eqs. (7)-(8)): ``M* = W^T M W`` and ``Q*`` the rest of
    ``W^T (M eta'' + h)`` at ``eta''^a = 0``."""
    jet = complete_jet(system, actuated, eta, [etad_a, jnp.zeros_like(etad_a)])
    Q = generalized_force_along_jet(system, actuated, jet)(jnp.zeros(()))
    W = _W(system, actuated, eta)
    return W.T @ mass_matrix(_model(system), eta) @ W, Q


def task_jet(task: Callable, coeffs: list[Array], order: int) -> list[Array]:
    """``[x, x', ..., x^(order)]`` of ``x = task(eta)`` along the jet (eq. (9) and its
    derivatives)."""
    return [time_derivative(lambda t: task(_poly(coeffs, t)), k) for k in range(order + 1)]


def task_jacobian(system, actuated, task: Callable, eta: Float[Array, " m"]) -> Array:
    """``J = Gamma^a - Gamma^u B^u^{-1} B^a = (d task / d eta) W`` (eq. (10))."""
    return jax.jacfwd(task)(eta) @ _W(system, actuated, eta)


def drive_torque(plant: FlexibleJointPlant, task: Callable, coeffs: list[Array]):
    """``(T, x-jet)`` for a complete jet ``eta_0 .. eta_4`` (module docstring): the drive torques
    (eq. (4), at the reducer output) that give the actuated coordinates this motion, and the
    task-space jet ``[x, ..., x'''']``. The drives are taken undamped (the paper's model)."""
    system, actuated = plant.system, plant.driven
    ia, _ = selection(system, actuated)
    G = generalized_force_along_jet(system, actuated, coeffs)
    G0 = G(jnp.zeros(()))
    phidd = coeffs[2][ia] + time_derivative(G, 2) / plant.stiffness  # eq. (6), twice
    T = plant.reduced_rotor_inertia * phidd + G0  # eq. (4) with K (eta^a - phi) = -G
    return T, task_jet(task, coeffs, 4)


def task_inverse_dynamics(
    plant: FlexibleJointPlant, task: Callable, coeffs: list[Array]
) -> tuple[Array, Array, Array]:
    """``(A, B, c)`` of eq. (11) at the jet's first four coefficients: ``T = A x'''' + B`` for any
    snap, with ``c`` the snap of the jet's lower part (``x'''' = J a_4 + c``). ``A`` should be
    ``K^{-1} I^r M* J^{-1}`` (eq. (12))."""
    system, actuated = plant.system, plant.driven
    ia, _ = selection(system, actuated)
    eta = coeffs[0]
    J = task_jacobian(system, actuated, task, eta)

    def torque(a4):
        jet = complete_jet(system, actuated, eta, [c[ia] for c in coeffs[1:4]] + [a4])
        T, x = drive_torque(plant, task, jet)
        return T, x[4]

    zero = jnp.zeros(len(actuated), dtype=eta.dtype)
    T0, c = torque(zero)
    dT = jax.jacfwd(lambda a4: torque(a4)[0])(zero)
    A = dT @ jnp.linalg.inv(J)
    return A, T0 - A @ c, c
