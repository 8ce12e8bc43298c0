r"""Practical stability of the robust controller (Dastranj & Mattila (2026) Section III-B) as code.

With the lumped uncertainty ``d`` of eq. (19) bounded componentwise by ``dbar`` and the Lyapunov
function ``V = 1/2 s^T Gamma s`` (eq. (22)), eq. (24) and ``s_i sat(s_i/eps_i) >= |s_i| - eps_i``
give

    Vdot <= -lambda_min(K) |s|^2 - sum_i (kappa_i - dbar_i) |s_i| + sum_i kappa_i eps_i .

Where every ``kappa_i > dbar_i`` (eq. (25)) the middle term is non-positive and Vdot < 0 outside
the ball ``|s| <= mu``, ``mu = sqrt(sum kappa_i eps_i / lambda_min(K))``. Where some
``kappa_i <= dbar_i`` the analysis still closes through K (this project's extension, stated so):
with ``a = |(dbar - kappa)^+|``, Vdot < 0 for ``|s| > mu = (a + sqrt(a^2 + 4 lambda_min(K) b)) /
(2 lambda_min(K))``, ``b = sum kappa_i eps_i``. With eq. (23) the ultimate bound on ``s`` is
``sqrt(gamma_max / gamma_min) mu`` (Khalil, Thm. 4.18), and since ``edot_i = -Lambda_i e_i + s_i``
is a stable first-order filter, ``|e_i| <= sbar / Lambda_i`` ultimately.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from jaxmb.algorithms.dynamics import forward_dynamics, inverse_dynamics, mass_matrix
from jaxmb.multibody.model import Model

__all__ = ["UltimateBounds", "ultimate_bounds", "inertia_eigenvalue_bounds", "lumped_uncertainty"]


class UltimateBounds(eqx.Module):
    """Result of `ultimate_bounds` (SI units per coordinate).

    Attributes:
        s: ultimate bound on |s| (Euclidean norm).
        e: ultimate bound on each |e_i|, shape (n,).
        kappa_exceeds_dbar: eq. (25) per coordinate, shape (n,).
        mu: radius outside which Vdot < 0.
    """

    s: Float[Array, ""]
    e: Float[Array, " n"]
    kappa_exceeds_dbar: Bool[Array, " n"]
    mu: Float[Array, ""]


def ultimate_bounds(K, kappa, eps, Lambda, dbar, gamma_min, gamma_max) -> UltimateBounds:
    """Ultimate bounds on s and e from eqs. (22)-(25); see the module docstring.

    Args:
        K, kappa, eps, Lambda: the controller's diagonal gains as (n,) vectors.
        dbar: componentwise bound on the lumped uncertainty d of eq. (19), (n,).
        gamma_min, gamma_max: bounds of Gamma's eigenvalues over the workspace (eq. (23)),
            e.g. from `inertia_eigenvalue_bounds`."""
    K, kappa, eps, Lambda, dbar = (
        jnp.asarray(x, dtype=float) for x in (K, kappa, eps, Lambda, dbar)
    )
    lam = jnp.min(K)
    b = jnp.sum(kappa * eps)
    excess = jnp.sum(jnp.maximum(dbar - kappa, 0.0) ** 2)
    # |(dbar - kappa)^+| with a finite gradient where every kappa_i > dbar_i (the norm's is NaN
    # at 0, and that is where tuned gains end up)
    a = jnp.where(excess > 0, jnp.sqrt(jnp.where(excess > 0, excess, 1.0)), 0.0)
    mu = (a + jnp.sqrt(a**2 + 4 * lam * b)) / (2 * lam)  # reduces to sqrt(b / lam) when a = 0
    s_bound = jnp.sqrt(gamma_max / gamma_min) * mu  # eq. (23)
    return UltimateBounds(s=s_bound, e=s_bound / Lambda, kappa_exceeds_dbar=kappa > dbar, mu=mu)


def inertia_eigenvalue_bounds(
    model: Model, lower, upper, *, grid: int = 9, refine_steps: int = 100, seed: int = 0
) -> tuple[Array, Array]:
    r"""$(\underline\gamma, \overline\gamma)$: min and max eigenvalue of Gamma(q) over the box
    ``lower <= q <= upper`` (eq. (23)).

    A grid of ``grid`` points per coordinate (plus random points) locates the extremes; the best
    candidates are then refined by projected gradient steps on the eigenvalue, so the result is
    computed, not guessed. Coordinates with ``lower == upper`` are held fixed."""
    lo, hi = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    if lo.shape != (model.n,) or hi.shape != (model.n,) or np.any(hi < lo):
        raise ValueError(
            f"inertia_eigenvalue_bounds: need lower <= upper, shapes ({model.n},); got {lo}, {hi}"
        )
    axes = [
        np.linspace(a, b, grid) if b > a else np.array([a]) for a, b in zip(lo, hi, strict=True)
    ]
    pts = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, model.n)
    rng = np.random.default_rng(seed)
    pts = np.concatenate([pts, lo + (hi - lo) * rng.random((256, model.n))])
    eig = jax.jit(jax.vmap(lambda q: jnp.linalg.eigvalsh(mass_matrix(model, q))))(jnp.asarray(pts))
    span = jnp.asarray(hi - lo)

    def refine(q, sign, index):
        def value(x):
            return sign * jnp.linalg.eigvalsh(mass_matrix(model, x))[index]

        def step(x, _):
            g = jax.grad(value)(x)
            x = jnp.clip(x - 0.02 * span * jnp.sign(g), lo, hi)
            return x, value(x)

        x, vals = jax.lax.scan(step, q, None, length=refine_steps)
        return jnp.minimum(jnp.min(vals), value(q))

    n = model.n
    best_min = jnp.asarray(pts)[jnp.argsort(eig[:, 0])[:4]]
    best_max = jnp.asarray(pts)[jnp.argsort(-eig[:, n - 1])[:4]]
    gmin = jnp.minimum(eig[:, 0].min(), jax.vmap(lambda q: refine(q, 1.0, 0))(best_min).min())
    gmax = jnp.maximum(
        eig[:, n - 1].max(), -jax.vmap(lambda q: refine(q, -1.0, n - 1))(best_max).min()
    )
    return gmin, gmax


def lumped_uncertainty(
    nominal: Model,
    plant: Model,
    t,
    q,
    qd,
    Q_a,
    *,
    wrenches: Callable | None = None,
    forces: Callable | None = None,
) -> Float[Array, " n"]:
    r"""The lumped uncertainty $d$ of eq. (19) at one state: the plant's acceleration under
    $Q_a$ and the disturbance, put into the nominal model's equation,
    $d = \Gamma_n \ddot q + h_n - Q_{e,n} - Q_a$ (nominal Q_e: gravity only).

    ``wrenches(t)`` and ``forces(t)`` are the disturbance (e.g. a `jaxmb.simulation.Disturbance`'s
    ``wrenches_at`` and ``forces_at``). Maximising |d_i| over a trajectory estimates dbar."""
    tau = Q_a if forces is None else Q_a + forces(t)
    qdd = forward_dynamics(plant, q, qd, tau, None if wrenches is None else wrenches(t))
    return inverse_dynamics(nominal, q, qd, qdd) - Q_a
