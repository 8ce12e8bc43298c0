r"""Excitation design: an optimal periodic trajectory for identification experiments.

The trajectory is a finite Fourier series per coordinate (Swevers, Ganseman, Tukel, De Schutter &
Van Brussel (1997) "Optimal robot excitation and identification", IEEE T-RA 13(5)):

    q_i(t) = q0_i + sum_{l=1..L} [ a_il / (w_f l) sin(w_f l t) - b_il / (w_f l) cos(w_f l t) ]

with fundamental pulsation ``w_f`` (period ``T = 2 pi / w_f``). Its velocity and acceleration are
analytic, it is periodic (so a measurement can be averaged over periods, as Swevers
et al. do), and its spectrum holds only the chosen harmonics.

The coefficients are chosen to minimise the condition number of the base regressor stacked over
one period of samples (Gautier & Khalil (1992) "Exciting trajectories for the identification of
base inertial parameters of robots", IJRR; Swevers et al. (1997)): a well-conditioned ``W``
makes the least-squares estimate insensitive to noise and model error. Columns are scaled to
unit norm first, so the criterion does not depend on the units of the parameters (kg vs kg m^2
vs N s), and the optimiser works on its logarithm, whose gradient is well scaled over the many
orders of magnitude a condition number covers.

Limits (joint position, velocity, acceleration, and any differentiable ``g(q) <= 0`` such as
hydraulic cylinder strokes) are constraints, enforced by an exterior quadratic penalty with a
weight that grows geometrically over the run and a small safety margin, so the sampled
constraints hold between the samples too; the result is checked on a fine time grid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float, PRNGKeyArray

from jaxmb.identification.regressor import (
    base_parameters,
    check_terms,
    parameter_names,
    stacked_regressor,
)
from jaxmb.multibody.model import Model

__all__ = [
    "FourierTrajectory",
    "ExcitationLimits",
    "ExcitationResult",
    "base_columns",
    "excitation_cost",
    "constraint_values",
    "cylinder_stroke_constraints",
    "restore_feasibility",
    "optimise_excitation",
]

Constraints = Callable[[Float[Array, " n"]], Float[Array, " m"]]


class FourierTrajectory(eqx.Module):
    r"""A periodic trajectory, the finite Fourier series of Swevers et al. (1997):

    ``q_i(t) = q0_i + sum_l a_il/(w_f l) sin(w_f l t) - b_il/(w_f l) cos(w_f l t)``,
    ``qd_i(t) = sum_l a_il cos(w_f l t) + b_il sin(w_f l t)``,
    ``qdd_i(t) = sum_l w_f l (b_il cos(w_f l t) - a_il sin(w_f l t))``.

    Attributes:
        q0: offset, ``(n,)`` (rad or m); the mean of q over a period.
        a, b: ``(n, L)`` velocity amplitudes of harmonic l (rad/s or m/s).
        w_f: fundamental pulsation, rad/s (static: it fixes the sampling of a period).
    """

    q0: Float[Array, " n"]
    a: Float[Array, "n L"]
    b: Float[Array, "n L"]
    w_f: float = eqx.field(static=True)

    def __init__(self, q0, a, b, w_f: float):
        self.q0 = jnp.asarray(q0, dtype=float)
        self.a = jnp.asarray(a, dtype=float)
        self.b = jnp.asarray(b, dtype=float)
        self.w_f = float(w_f)

    def __check_init__(self):
        if not (np.isfinite(self.w_f) and self.w_f > 0):
            raise ValueError(f"FourierTrajectory: w_f must be > 0 rad/s, got {self.w_f}")
        if self.q0.ndim != 1:
            raise ValueError(f"FourierTrajectory: q0 must have shape (n,), got {self.q0.shape}")
        n = self.q0.shape[0]
        for name in ("a", "b"):
            x = getattr(self, name)
            if x.ndim != 2 or x.shape[0] != n or x.shape[1] < 1:
                raise ValueError(
                    f"FourierTrajectory: {name} must have shape ({n}, L) with L >= 1, got {x.shape}"
                )
        if self.a.shape != self.b.shape:
            raise ValueError(
                f"FourierTrajectory: a and b must have the same shape, got {self.a.shape} and "
                f"{self.b.shape}"
            )

    @property
    def n(self) -> int:
        return self.q0.shape[0]

    @property
    def harmonics(self) -> int:
        return self.a.shape[1]

    @property
    def period(self) -> float:
        """``T = 2 pi / w_f``, s."""
        return 2 * np.pi / self.w_f

    def __call__(
        self, t: float | Float[Array, ""]
    ) -> tuple[Float[Array, " n"], Float[Array, " n"], Float[Array, " n"]]:
        """``(q, qd, qdd)`` at time ``t`` (s), analytic."""
        w = self.w_f * jnp.arange(1, self.harmonics + 1, dtype=self.a.dtype)  # (L,) w_f l
        s, c = jnp.sin(w * t), jnp.cos(w * t)
        q = self.q0 + (self.a * s[None, :] - self.b * c[None, :]) @ (1 / w)
        qd = self.a @ c + self.b @ s
        qdd = (self.b * c[None, :] - self.a * s[None, :]) @ w
        return q, qd, qdd

    def sample(
        self, ts: Float[ArrayLike, " N"]
    ) -> tuple[Float[Array, "N n"], Float[Array, "N n"], Float[Array, "N n"]]:
        """``(Q, Qd, Qdd)`` at every time of ``ts``, each ``(N, n)``."""
        return jax.vmap(self)(jnp.asarray(ts, dtype=float))

    def at_rest(self) -> FourierTrajectory:
        r"""The nearest trajectory (least change of ``a``, ``b``) that starts and ends at rest:
        ``qd(0) = sum_l a_il = 0`` and ``qdd(0) = w_f sum_l l b_il = 0``, and by periodicity
        the same at ``t = T``. It is an orthogonal projection of each row of ``a`` onto
        ``1^T a = 0`` and of ``b`` onto ``l^T b = 0``; the start is then
        ``q(0) = q0 - sum_l b_il / (w_f l)``. Needs L >= 2 (with L = 1 it would be constant)."""
        if self.harmonics < 2:
            raise ValueError(
                f"FourierTrajectory.at_rest: needs harmonics >= 2, got {self.harmonics}"
            )
        ell = jnp.arange(1, self.harmonics + 1, dtype=self.b.dtype)
        a = self.a - jnp.mean(self.a, axis=1, keepdims=True)
        b = self.b - jnp.outer(self.b @ ell, ell) / (ell @ ell)
        return FourierTrajectory(self.q0, a, b, self.w_f)


class ExcitationLimits(eqx.Module):
    """Box limits of an excitation experiment, per coordinate (SI: rad or m, per s, per s^2).

    The constraints are ``q_min <= q <= q_max``, ``|qd| <= qd_max``, ``|qdd| <= qdd_max``."""

    q_min: Float[Array, " n"]
    q_max: Float[Array, " n"]
    qd_max: Float[Array, " n"]
    qdd_max: Float[Array, " n"]

    def __init__(self, q_min, q_max, qd_max, qdd_max):
        vals = {"q_min": q_min, "q_max": q_max, "qd_max": qd_max, "qdd_max": qdd_max}
        arrs = {k: np.asarray(v, dtype=float) for k, v in vals.items()}
        n = arrs["q_min"].shape
        for k, v in arrs.items():
            if v.ndim != 1 or v.shape != n:
                raise ValueError(f"ExcitationLimits: {k} must have shape {n}, got {v.shape}")
            if not np.isfinite(v).all():
                raise ValueError(f"ExcitationLimits: {k} must be finite, got {v}")
        if not (arrs["q_max"] > arrs["q_min"]).all():
            raise ValueError(
                f"ExcitationLimits: q_max must exceed q_min, got {arrs['q_min']}, {arrs['q_max']}"
            )
        for k in ("qd_max", "qdd_max"):
            if not (arrs[k] > 0).all():
                raise ValueError(f"ExcitationLimits: {k} must be > 0, got {arrs[k]}")
        for k, v in arrs.items():
            setattr(self, k, jnp.asarray(v))

    @property
    def n(self) -> int:
        return self.q_min.shape[0]

    @property
    def mid(self) -> Float[Array, " n"]:
        """The range's middle, ``(q_max + q_min) / 2``."""
        return 0.5 * (self.q_max + self.q_min)

    @property
    def half(self) -> Float[Array, " n"]:
        """The half range, ``(q_max - q_min) / 2``."""
        return 0.5 * (self.q_max - self.q_min)

    def values(
        self, q: Float[Array, " n"], qd: Float[Array, " n"], qdd: Float[Array, " n"]
    ) -> Float[Array, " m"]:
        """Normalised constraint values, ``<= 0`` feasible: ``(q - q_max)/h``, ``(q_min - q)/h``
        (``h`` the half range), ``|qd|/qd_max - 1``, ``|qdd|/qdd_max - 1``."""
        h = self.half
        return jnp.concatenate(
            [
                (q - self.q_max) / h,
                (self.q_min - q) / h,
                jnp.abs(qd) / self.qd_max - 1,
                jnp.abs(qdd) / self.qdd_max - 1,
            ]
        )


def constraint_values(
    traj: FourierTrajectory,
    limits: ExcitationLimits,
    ts: Float[ArrayLike, " N"],
    extra_constraints: Constraints | None = None,
) -> Float[Array, "N m"]:
    """All constraint values at every time of ``ts``, ``<= 0`` feasible: the normalised box
    limits (`ExcitationLimits.values`) followed by ``extra_constraints(q)``."""

    def one(t):
        q, qd, qdd = traj(t)
        g = limits.values(q, qd, qdd)
        if extra_constraints is not None:
            g = jnp.concatenate([g, jnp.atleast_1d(extra_constraints(q))])
        return g

    return jax.vmap(one)(jnp.asarray(ts, dtype=float))


def cylinder_stroke_constraints(plant, margin: float = 0.0) -> Constraints:
    """``g(q) <= 0`` for every cylinder of a `jaxmb.actuators.plant.HydraulicPlant` inside
    ``[margin, stroke - margin]``: ``[(margin - x) / stroke, (x - stroke + margin) / stroke]``
    per actuator (dimensionless), ``x`` the piston position (`CylinderMount.position`, m)."""
    actuators = tuple(plant.actuators)
    if not actuators:
        raise ValueError("cylinder_stroke_constraints: the plant has no actuators")
    for a in actuators:
        if not 0 <= margin < 0.5 * float(a.cylinder.stroke):
            raise ValueError(
                f"cylinder_stroke_constraints: margin must be in [0, stroke/2) for actuator "
                f"{a.name!r} (stroke {float(a.cylinder.stroke)} m), got {margin}"
            )
    model = plant.model

    def g(q: Float[Array, " n"]) -> Float[Array, " m"]:
        lo, hi = [], []
        for a in actuators:
            x, stroke = a.mount.position(model, q), a.cylinder.stroke
            lo.append((margin - x) / stroke)
            hi.append((x - stroke + margin) / stroke)
        return jnp.stack(lo + hi)

    return g


def restore_feasibility(
    traj: FourierTrajectory,
    limits: ExcitationLimits,
    ts: Float[ArrayLike, " N"],
    extra_constraints: Constraints | None = None,
    *,
    iterations: int = 40,
) -> tuple[FourierTrajectory, float, float]:
    """``(trajectory, scale, max_violation)``: if a constraint fails at a time of ``ts``, the
    largest ``scale`` in [0, 1] (bisection, ``iterations`` halvings) for which ``q0 + scale *
    (q(t) - q0)`` satisfies all of them; velocities and accelerations shrink by the same factor.
    Needs the constant trajectory ``q0`` to be feasible; else returns the input unchanged with
    its (positive) violation. ``max_violation`` is that of the returned trajectory."""
    ts = jnp.asarray(ts, dtype=float)

    def worst(s):
        tr = FourierTrajectory(traj.q0, s * traj.a, s * traj.b, traj.w_f)
        return float(jnp.max(constraint_values(tr, limits, ts, extra_constraints))), tr

    v, _ = worst(1.0)
    if v <= 0 or worst(0.0)[0] > 0:
        return traj, 1.0, v
    lo, hi = 0.0, 1.0  # feasible at lo, not at hi
    for _ in range(iterations):
        m = 0.5 * (lo + hi)
        lo, hi = (m, hi) if worst(m)[0] <= 0 else (lo, m)
    v, tr = worst(lo)
    return tr, lo, v


def base_columns(
    model: Model,
    limits: ExcitationLimits,
    key: PRNGKeyArray,
    terms: Sequence[str] = (),
    *,
    n_states: int = 200,
) -> tuple[int, ...]:
    """Columns of `full_regressor` that carry the base parameters (`base_parameters`, Gautier
    (1990)), found once from ``n_states`` random states inside ``limits`` and then held fixed:
    which columns are independent is structural, not a property of one trajectory."""
    terms = check_terms(terms)
    kq, kv, ka = jax.random.split(key, 3)
    n = model.n
    u = lambda k: jax.random.uniform(k, (n_states, n), minval=-1.0, maxval=1.0)  # noqa: E731
    mid, half = limits.mid, limits.half
    Q = mid[None, :] + half[None, :] * u(kq)
    Qd = limits.qd_max[None, :] * u(kv)
    Qdd = limits.qdd_max[None, :] * u(ka)
    W = np.asarray(stacked_regressor(model, Q, Qd, Qdd, terms))
    bp = base_parameters(W.reshape(-1, W.shape[-1]), parameter_names(model, terms))
    return tuple(sorted(bp.independent))


def excitation_cost(
    traj: FourierTrajectory,
    model: Model,
    columns: Sequence[int],
    ts: Float[ArrayLike, " N"],
    terms: Sequence[str] = (),
    *,
    coulomb_width: float | Float[Array, ""] = 1e-2,
    stribeck_velocity: float | Float[Array, ""] = 0.1,
) -> Float[Array, ""]:
    r"""``log cond(W_b D^{-1}) = log(sigma_max / sigma_min)``: the criterion of Gautier & Khalil
    (1992) and Swevers et al. (1997), in logarithm (well-scaled gradients).

    ``W_b`` is the base regressor (columns ``columns`` of `full_regressor` with ``terms``)
    stacked over the times ``ts`` of ``traj``, and ``D`` its column norms: scaling removes the
    dependence on parameter units. Differentiable in ``traj`` (singular values of a matrix with
    distinct singular values are smooth)."""
    terms = check_terms(terms)
    columns = list(columns)
    ts = jnp.asarray(ts, dtype=float)
    if ts.shape[0] * traj.n < len(columns):
        raise ValueError(
            f"ts: {ts.shape[0]} samples give {ts.shape[0] * traj.n} rows, fewer than the "
            f"{len(columns)} base columns"
        )
    Q, Qd, Qdd = traj.sample(ts)
    W = stacked_regressor(model, Q, Qd, Qdd, terms, coulomb_width=coulomb_width,
                          stribeck_velocity=stribeck_velocity)  # fmt: skip
    W = W.reshape(-1, W.shape[-1])[:, columns]
    W = W / jnp.linalg.norm(W, axis=0, keepdims=True)
    s = jnp.linalg.svd(W, compute_uv=False)  # descending
    return jnp.log(s[0]) - jnp.log(s[-1])


class ExcitationResult(eqx.Module):
    """Output of `optimise_excitation`.

    Attributes:
        trajectory: the optimised `FourierTrajectory`.
        initial: the random feasible trajectory the optimisation started from.
        cost_history: ``(steps,)`` log condition number at each optimiser step (before the
            update; penalty not included).
        condition: cond of the column-scaled base regressor of ``trajectory`` on the
            optimisation samples.
        condition_initial: the same for ``initial``.
        feasible: every constraint holds (``<= 0``, no margin) on the fine check grid.
        max_violation: the largest constraint value on that grid (normalised units of
            `constraint_values`; ``<= 0`` feasible).
        amplitude_scale: 1, or the factor in (0, 1) by which ``a`` and ``b`` were shrunk
            towards ``q0`` to restore feasibility after the optimisation.
        columns: the base columns of `full_regressor` the criterion used.
    """

    trajectory: FourierTrajectory
    initial: FourierTrajectory
    cost_history: Float[np.ndarray, " steps"]
    condition: float = eqx.field(static=True)
    condition_initial: float = eqx.field(static=True)
    feasible: bool = eqx.field(static=True)
    max_violation: float = eqx.field(static=True)
    amplitude_scale: float = eqx.field(static=True)
    columns: tuple[int, ...] = eqx.field(static=True)

    def to_table(self, dt: float, *, periods: int = 1) -> dict[str, np.ndarray]:
        """``{"t": (N,), "q": (N, n), "qd": (N, n), "qdd": (N, n)}`` sampled every ``dt`` s from
        0 to ``periods * T`` inclusive (the end equals the start: the series is periodic)."""
        if not dt > 0:
            raise ValueError(f"to_table: dt must be > 0 s, got {dt}")
        if not (isinstance(periods, int) and periods >= 1):
            raise ValueError(f"to_table: periods must be an integer >= 1, got {periods}")
        T = periods * self.trajectory.period
        t = np.arange(int(np.floor(T / dt + 1e-9)) + 1) * dt
        Q, Qd, Qdd = self.trajectory.sample(t)
        return {"t": t, "q": np.asarray(Q), "qd": np.asarray(Qd), "qdd": np.asarray(Qdd)}


def _trajectory(theta, mid, half, qd_max, w_f, rest):
    """Unit-scaled optimisation variables -> trajectory: ``q0 = mid + half u``,
    ``a = qd_max alpha``, ``b = qd_max beta`` (so Adam's step is comparable in every entry)."""
    traj = FourierTrajectory(
        mid + half * theta["u"],
        qd_max[:, None] * theta["alpha"],
        qd_max[:, None] * theta["beta"],
        w_f,
    )
    return traj.at_rest() if rest else traj


@eqx.filter_jit
def _optimise(theta0, model, ts, *, fixed, schedule):
    (mid, half, qd_max, limits, columns, terms, cw, sv, extra, w_f, rest, margin) = fixed
    lr, steps, rho0, rho1 = schedule
    opt = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adam(optax.cosine_decay_schedule(lr, steps, alpha=0.05)),
    )

    def loss(theta, rho):
        traj = _trajectory(theta, mid, half, qd_max, w_f, rest)
        cost = excitation_cost(
            traj, model, columns, ts, terms, coulomb_width=cw, stribeck_velocity=sv
        )
        g = constraint_values(traj, limits, ts, extra) + margin
        # exterior quadratic penalty: zero inside the (tightened) feasible set, C^1 at its border
        return cost + rho * jnp.sum(jax.nn.relu(g) ** 2), cost

    def step(carry, k):
        theta, state = carry
        rho = rho0 * (rho1 / rho0) ** (k / max(steps - 1, 1))  # geometric continuation
        (_, cost), grad = jax.value_and_grad(loss, has_aux=True)(theta, rho)
        updates, state = opt.update(grad, state, theta)
        return (optax.apply_updates(theta, updates), state), cost

    (theta, _), costs = jax.lax.scan(
        step, (theta0, opt.init(theta0)), jnp.arange(steps, dtype=float)
    )
    return theta, costs


def optimise_excitation(
    model: Model,
    *,
    period: float | int,
    harmonics: int,
    limits: ExcitationLimits,
    key: PRNGKeyArray,
    terms: Sequence[str] = ("viscous", "coulomb"),
    steps: int = 300,
    extra_constraints: Constraints | None = None,
    n_samples: int | None = None,
    n_check: int | None = None,
    q0: Float[ArrayLike, " n"] | Sequence[float] | None = None,
    rest: bool = False,
    learning_rate: float = 0.03,
    margin: float = 0.02,
    init_fraction: float = 0.3,
    penalty: tuple[float, float] = (10.0, 1e4),
    coulomb_width: float = 1e-2,
    stribeck_velocity: float = 0.1,
    throw: bool = True,
) -> ExcitationResult:
    r"""An optimal periodic excitation trajectory: minimise ``log cond`` of the column-scaled
    base regressor (`excitation_cost`; Gautier & Khalil (1992), Swevers et al. (1997)) over the
    Fourier coefficients and offset of a `FourierTrajectory`, subject to ``limits`` and
    ``extra_constraints(q) <= 0`` (e.g. `cylinder_stroke_constraints`).

    Method: the base columns come from random states (`base_columns`). The start is random
    (``a``, ``b`` Gaussian, offset ``q0`` or the middle of the joint range) and scaled so its
    peak use of every limit is ``init_fraction``, then halved until ``extra_constraints`` hold.
    Adam (cosine-decayed ``learning_rate``, gradient clipped) runs ``steps`` jitted steps on
    unit-scaled variables, with an exterior penalty ``rho sum relu(g + margin)^2`` on the
    constraints at ``n_samples`` times of one period, ``rho`` rising geometrically through
    ``penalty``. The constraints are then checked without margin on ``n_check`` times; if one
    fails, the amplitudes are shrunk towards ``q0`` by bisection until all hold (reported as
    ``amplitude_scale``), and if that fails too, ``throw`` raises (else ``feasible`` is False).

    Args:
        model: the mechanics; ``terms`` add drive/friction columns (`full_regressor`).
        period: T, s (``w_f = 2 pi / T``).
        harmonics: L, the number of harmonics (highest frequency L / T).
        limits: position, velocity and acceleration bounds.
        key: PRNG key for the base columns and the random start.
        rest: start and end at rest (`FourierTrajectory.at_rest`), needs L >= 2.
        margin: safety margin on every normalised constraint during the optimisation.
    """
    terms = check_terms(terms)
    _check_design(model, period, harmonics, limits, steps, init_fraction, rest)
    n, L = model.n, harmonics
    n_samples, n_check = _sample_counts(L, n_samples, n_check)
    w_f = 2 * np.pi / period
    ts = jnp.arange(n_samples) * (period / n_samples)
    ts_check = jnp.arange(n_check) * (period / n_check)

    mid, half = limits.mid, limits.half
    q0 = _checked_offset(mid if q0 is None else q0, limits, extra_constraints, n)

    k_cols, k_init = jax.random.split(key)
    columns = base_columns(model, limits, k_cols, terms)
    theta, initial = _feasible_start(k_init, q0, mid, half, limits, w_f, rest, n, L, ts_check,
                                     init_fraction, extra_constraints)  # fmt: skip

    cw, sv = jnp.asarray(coulomb_width, float), jnp.asarray(stribeck_velocity, float)
    fixed = (mid, half, limits.qd_max, limits, columns, terms, cw, sv, extra_constraints,
             w_f, rest, margin)  # fmt: skip
    theta, costs = _optimise(
        theta, model, ts, fixed=fixed, schedule=(learning_rate, steps, *penalty)
    )
    traj, scale, v = _feasible_result(_trajectory(theta, mid, half, limits.qd_max, w_f, rest),
                                      limits, ts_check, extra_constraints, throw)  # fmt: skip
    return ExcitationResult(
        trajectory=traj,
        initial=initial,
        cost_history=np.asarray(costs),
        condition=_condition(traj, model, columns, ts, terms, cw, sv),
        condition_initial=_condition(initial, model, columns, ts, terms, cw, sv),
        feasible=bool(v <= 0),
        max_violation=v,
        amplitude_scale=scale,
        columns=columns,
    )


def _check_design(model, period, harmonics, limits, steps, init_fraction, rest) -> None:
    """Refuse `optimise_excitation`'s options that are not what it takes, by name."""
    if not (np.isfinite(period) and period > 0):
        raise ValueError(f"period: expected > 0 s, got {period}")
    if not (isinstance(harmonics, int) and harmonics >= 1):
        raise ValueError(f"harmonics: expected an integer >= 1, got {harmonics}")
    if rest and harmonics < 2:
        raise ValueError(f"harmonics: rest=True needs >= 2, got {harmonics}")
    if limits.n != model.n:
        raise ValueError(f"limits: expected {model.n} coordinates, got {limits.n}")
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"steps: expected an integer >= 1, got {steps}")
    if not 0 < init_fraction < 1:
        raise ValueError(f"init_fraction: expected in (0, 1), got {init_fraction}")


def _sample_counts(L: int, n_samples: int | None, n_check: int | None) -> tuple[int, int]:
    """``(n_samples, n_check)``: the optimisation's samples of a period (default
    ``max(100, 20 L)``; at least ``2 L + 1`` to resolve L harmonics) and the check grid's
    (default 20 times as many)."""
    n_samples = max(100, 20 * L) if n_samples is None else int(n_samples)
    n_check = 20 * n_samples if n_check is None else int(n_check)
    if n_samples < 2 * L + 1:
        raise ValueError(f"n_samples: expected >= 2 L + 1 = {2 * L + 1}, got {n_samples}")
    return n_samples, n_check


def _checked_offset(q0, limits: ExcitationLimits, extra_constraints, n: int) -> Float[Array, " n"]:
    """The offset ``q0`` as an array, refused unless it lies strictly inside the limits and
    ``extra_constraints`` hold there."""
    q0 = jnp.asarray(q0, dtype=float)
    if q0.shape != (n,) or not bool(jnp.all((q0 > limits.q_min) & (q0 < limits.q_max))):
        raise ValueError(f"q0: expected shape ({n},) strictly inside the limits, got {q0}")
    if extra_constraints is not None:
        g0 = jnp.atleast_1d(extra_constraints(q0))
        if g0.ndim != 1:
            raise ValueError(f"extra_constraints: must return shape (m,), got {g0.shape}")
        if not bool(jnp.all(g0 < 0)):
            raise ValueError(f"q0: violates extra_constraints at rest, g = {g0}")
    return q0


def _feasible_start(key, q0, mid, half, limits, w_f, rest, n, L, ts_check, init_fraction, extra):
    """``(theta, trajectory)``: a random start (Gaussian ``a``, ``b``, offset ``q0``) scaled so
    its peak use of the tightest box limit is ``init_fraction``, then halved until every
    constraint holds on ``ts_check``."""
    # q - q0, qd and qdd are linear in the amplitudes: one scale sets the use of every limit
    alpha, beta = jax.random.normal(key, (2, n, L)) / np.sqrt(L)
    theta = {"u": (q0 - mid) / half, "alpha": alpha, "beta": beta}
    Q, Qd, Qdd = _trajectory(theta, mid, half, limits.qd_max, w_f, rest).sample(ts_check)
    room = jnp.minimum(q0 - limits.q_min, limits.q_max - q0)
    use = jnp.max(
        jnp.stack(
            [
                jnp.max(jnp.abs(Q - q0[None, :]) / room[None, :]),
                jnp.max(jnp.abs(Qd) / limits.qd_max[None, :]),
                jnp.max(jnp.abs(Qdd) / limits.qdd_max[None, :]),
            ]
        )
    )
    scale = init_fraction / use
    theta = {**theta, "alpha": scale * alpha, "beta": scale * beta}
    for _ in range(30):
        traj = _trajectory(theta, mid, half, limits.qd_max, w_f, rest)
        if bool(jnp.all(constraint_values(traj, limits, ts_check, extra) < 0)):
            break
        theta = {**theta, "alpha": 0.5 * theta["alpha"], "beta": 0.5 * theta["beta"]}
    else:
        raise RuntimeError("optimise_excitation: found no feasible random start")
    return theta, traj


def _feasible_result(traj, limits, ts_check, extra, throw: bool):
    """``(trajectory, amplitude scale, max violation)``: the optimised ``traj``, refused if it
    diverged, shrunk towards its offset until its constraints hold on ``ts_check``
    (`restore_feasibility`); with ``throw``, refused if even that fails."""
    if not bool(jnp.all(jnp.isfinite(traj.a)) & jnp.all(jnp.isfinite(traj.q0))):
        raise RuntimeError("optimise_excitation: the optimisation diverged (non-finite)")
    traj, scale, v = restore_feasibility(traj, limits, ts_check, extra)
    if throw and not v <= 0:
        raise RuntimeError(
            f"optimise_excitation: the result violates its constraints (max {v:.3g}) on the "
            "check grid; try a larger margin or penalty"
        )
    return traj, scale, v


def _condition(traj, model, columns, ts, terms, cw, sv) -> float:
    """cond of ``traj``'s column-scaled base regressor on ``ts`` (`excitation_cost`, undone
    from its logarithm)."""
    c = excitation_cost(traj, model, columns, ts, terms, coulomb_width=cw, stribeck_velocity=sv)
    return float(np.exp(c))
