r"""Long segments fitted as chains of short pieces: multiple shooting, condensed (Bock & Plitt
1984).

A free-run error builds up over seconds, so the long refit (`long_refit`) fits segments of
about 10 s. Simulated whole, a 10 s segment is 10 000 RK4 steps in sequence, each carrying
the P tangent columns of the forward-mode Jacobian: one evaluation of a 60 s crane log took
11 s on this 2-core machine. Here each long segment is a chain of ``m`` pieces of about
1 s (`PIECE_TIME`) that run side by side (`jax.vmap`, the pieces shared among the devices):
ten times fewer steps in sequence, each over ten times more lanes.

Unknowns: theta and the start state ``x_k = (q_k, qd_k, p_k)`` of every piece, a chain's
first one free (from its estimated state: `chain_starts`, `fit_chains`). Continuity, piece
``k - 1``'s end state ``e_{k-1}`` equal to ``x_k``, is a constraint, not a penalty:
linearised, a step ``dtheta`` moves the next start by

    dx_k = c_k + E^theta_{k-1} dtheta + E^x_{k-1} dx_{k-1},   c_k = e_{k-1} - x_k,

so ``dx_k = a_k + D_k dtheta + F_k ds`` along a chain (``a`` and ``D`` by that recursion
from ``dx = 0`` at its first piece, ``F`` from the identity there, ``ds`` its first start's
step) and each piece's residuals ``r_k + J^x_k dx_k + J^theta_k dtheta`` become
``r~_k + J~_k dtheta + J^x_k F_k ds`` with ``r~_k = r_k + J^x_k a_k`` and ``J~_k =
J^theta_k + J^x_k D_k``: condensing (Bock & Plitt 1984). Each Levenberg-Marquardt step then
solves a problem in theta and the chains' first starts only and moves every start state
with it, closing the gaps to first order. ``1/2 |r~|^2`` is, to first order, the cost of
the continuous run at theta; it is what a step is accepted on. Where the gaps are closed,
``r~`` and ``J~`` are the long segment's residuals and Jacobian (tests/test_long_refit.py
checks both against a 10 s single-shooting run), so the result and its covariance are those
of the long segment's problem. (A plant whose actuators hold spool or bristle states is not chained: a piece
starts them steady, `internal_states`.)

The pieces' start states and end states are in the scaled units of `start_states` (the
residual scales, velocities per 50 ms). The tangent columns of a start state cost little: a
state tangent is propagated by the shared state Jacobian (`SharedJacobianForwardMode`), a
parameter's also through the plant."""

from __future__ import annotations

import time
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxmb import compile_cache
from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.identification import fit_progress
from jaxmb.identification import output_error as oe
from jaxmb.identification.least_squares import model_decrease
from jaxmb.identification.start_states import unknowns_scale
from jaxmb.multibody.checks import as_real_array, check_number, check_type
from jaxmb.saved_programs import saved

__all__ = [
    "PIECE_TIME",
    "linearized",
    "condensed",
    "chain_starts",
    "closed_chain",
    "fit_chains",
    "start_vector",
]

PIECE_TIME = 1.0  # s: the longest piece (measured on the crane's 40 s log, one evaluation:
# 4 x 10 s 14.6 s, 20 x 2 s 4.9 s, 40 x 1 s 3.8 s)


# a chain is closed where no gap exceeds this (scaled units: a thousandth of a signal's
# residual scale, its noise level). While one is open, ``1/2 |r~|^2`` is a first-order
# estimate only, biased low (measured from the log's start states on the crane: 367 against
# 755 once closed; with gaps of 1e-3, 0.15 of 705): a step refused from open chains is
# followed by one that only closes them (theta unchanged), so that no step is refused for a
# bias of the reference. At this tolerance the bias is below 0.5, what moving one parameter
# by one standard deviation changes the (noise-weighted) cost by; a tolerance of 1e-6 cost
# the 60 s crane log's long refit one more evaluation (gaps 3e-4 -> 9e-7, the cost unchanged
# in six digits). That bias may exceed ``ftol`` of the cost, so a tiny step between closed
# chains can be accepted or refused on it: statistically immaterial, by the same 0.5.
GAP_TOL = 1e-3


def internal_states(plant: HydraulicPlant) -> bool:
    """Whether an actuator of ``plant`` holds states beyond its chamber pressures (a spool's
    dynamics, LuGre bristles): a piece starts them at their steady state
    (`output_error.simulate_one`), so continuity of ``(q, qd, p)`` would not make a chain
    the long segment."""
    return any(
        a.valve.n_states or (a.friction is not None and a.friction.n_states)
        for a in plant.actuators
    )


def start_vector(pieces: oe.Segments, n: int) -> Float[np.ndarray, "K z"]:
    """Every piece's start state ``(q, qd, p)`` in the scaled units (module docstring)."""
    x = np.concatenate(
        [np.asarray(pieces.q0), np.asarray(pieces.qd0), np.asarray(pieces.p0).reshape(
            pieces.p0.shape[0], -1)], axis=1,
    )  # fmt: skip
    return x / np.asarray(unknowns_scale(pieces, n))[None, :]


@saved
def _linearized(theta, plant, spec, pieces, dt):
    n = plant.model.n

    def local(th, pl, seg):
        scale = unknowns_scale(seg, n)
        P = th.shape[0]

        def one(ts, q0, qd0, p0, targets, weights, payload):
            def f(v):
                x = v[P:] * scale
                y, qd_end = oe.simulate_one(
                    oe.plant_with(v[:P], pl, spec), seg, ts, q0 + x[:n], qd0 + x[n : 2 * n],
                    p0 + x[2 * n :].reshape(p0.shape), dt=dt, end_velocity=True,
                    payload=payload,
                )  # fmt: skip
                r = (y - targets) / seg.scale[None, :] * weights[:, None]
                r = jnp.where(jnp.isfinite(r), r, oe.DIVERGED).reshape(-1)
                e = jnp.concatenate([y[-1, :n], qd_end, y[-1, n:]]) / scale
                return (r, e), (r, e)

            v = jnp.concatenate([th, jnp.zeros(scale.shape[0])])
            (J_r, J_e), (r, e) = jax.jacfwd(f, has_aux=True)(v)
            return r, e, J_r, J_e

        return jax.vmap(one)(seg.ts, seg.q0, seg.qd0, seg.p0, seg.targets, seg.weights, seg.payload)

    r, e, J_r, J_e = oe.per_device(local, theta, plant, pieces)
    # a diverged piece's end state stays NaN (`condensed` starts a chain after it)
    return r, e, jnp.where(jnp.isfinite(J_r), J_r, 0.0), J_e


def linearized(
    theta: Float[Array, " P"],
    plant: HydraulicPlant,
    spec: oe.HydraulicParameters,
    pieces: oe.Segments,
    dt: float = 1e-3,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every piece's weighted residuals ``r`` (K, R) and scaled end state ``e`` (K, z) with
    their Jacobians (K, R, P + z) and (K, z, P + z) in theta and the piece's own start state
    (scaled), one compiled program per (spec, piece shapes), the pieces shared among the
    devices (`output_error.per_device`)."""
    out = _linearized(jnp.asarray(theta, float), oe.strong_types(plant), spec, pieces, dt)
    return tuple(np.asarray(x) for x in out)


def condensed(
    lin: tuple[np.ndarray, ...], starts: Float[np.ndarray, "K z"], m: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(r~, J~, a, D)`` of the module docstring for chains of ``m`` consecutive pieces, from
    `linearized`'s output at the scaled start states ``starts``: the condensed residuals
    (K R,) and Jacobian (K R, P), and each piece's start-state step ``a_k + D_k dtheta``
    ((K, z) and (K, z, P); zero at a chain's first piece and after a diverged piece)."""
    r, e, J_r, J_e = lin
    K, z = e.shape
    P = J_r.shape[2] - z
    a, D = np.zeros((K, z)), np.zeros((K, z, P))
    # a diverged piece (NaN end) does not pull its successor: that one starts a chain
    ended = np.all(np.isfinite(e), axis=1) & np.all(np.isfinite(J_e), axis=(1, 2))
    for k in range(K):
        if k % m and ended[k - 1]:
            E_x = J_e[k - 1, :, P:]
            a[k] = e[k - 1] - starts[k] + E_x @ a[k - 1]
            D[k] = J_e[k - 1, :, :P] + E_x @ D[k - 1]
    J_x = J_r[..., P:]
    r_c = r + np.einsum("krz,kz->kr", J_x, a)
    J_c = J_r[..., :P] + np.einsum("krz,kzp->krp", J_x, D)
    return r_c.reshape(-1), J_c.reshape(-1, P), a, D


def moved(pieces: oe.Segments, step: Float[np.ndarray, "K z"], n: int) -> oe.Segments:
    """``pieces`` with every start state moved by the scaled ``step`` (on the host: the
    compiled program sees the same input types)."""
    x = step * np.asarray(unknowns_scale(pieces, n))[None, :]
    q0 = np.asarray(pieces.q0) + x[:, :n]
    qd0 = np.asarray(pieces.qd0) + x[:, n : 2 * n]
    p0 = np.asarray(pieces.p0) + x[:, 2 * n :].reshape(pieces.p0.shape)
    return eqx.tree_at(
        lambda s: (s.q0, s.qd0, s.p0), pieces, tuple(jnp.asarray(v) for v in (q0, qd0, p0))
    )


# the most Newton steps `closed_chain` takes to close a chain's gaps, each one evaluation of
# `linearized` (measured on the crane's 20 s validation log from its measured start states,
# the nominal plant: gaps 341, 0.25, then 1e-7 units, closed after two steps)
MAX_CLOSINGS = 6


def closed_chain(
    theta: Float[Array, " P"],
    plant: HydraulicPlant,
    spec: oe.HydraulicParameters,
    pieces: oe.Segments,
    dt: float = 1e-3,
) -> tuple[np.ndarray, np.ndarray, oe.Segments] | None:
    """``pieces`` as one chain, its gaps closed at ``theta`` by Newton steps on continuity
    (``x_k <- x_k + a_k``, the module docstring's ``a`` from a `linearized` evaluation, until no
    gap exceeds `GAP_TOL`): the chain is then the single-shooting run from the first piece's
    start. Returns its condensed weighted residuals (K R,) and Jacobian (K R, P), the long
    run's own (`condensed`), with the pieces at their closed start states; None where a piece
    diverges or `MAX_CLOSINGS` steps leave a gap open."""
    n, K = plant.model.n, int(pieces.ts.shape[0])
    plant = oe.strong_types(plant)
    for _ in range(MAX_CLOSINGS + 1):
        lin = linearized(theta, plant, spec, pieces, dt)
        r, J, a, _ = condensed(lin, start_vector(pieces, n), K)
        if not (np.all(np.isfinite(lin[1])) and np.all(np.isfinite(r))):
            return None
        if np.max(np.abs(a), initial=0.0) <= GAP_TOL:
            return r, J, pieces
        pieces = moved(pieces, a, n)
    return None


def chain_starts(
    lin: tuple[np.ndarray, ...], m: int
) -> tuple[Float[np.ndarray, "K R C"], Float[np.ndarray, "K z z"]]:
    """How each chain's first start state (scaled units) moves the pieces along it: ``F_k``,
    the identity at a chain's first piece and ``E^x_{k-1} F_{k-1}`` along it (a step ``ds``
    of it moves piece ``k``'s start by ``F_k ds``), and the condensed residuals' Jacobian in
    it, ``J^x_k F_k`` ((K, R, K/m z), a chain's columns zero outside it). A chain broken by a
    diverged piece holds the rest of it at its own start (`condensed`): F = 0 there."""
    r, e, J_r, J_e = lin
    K, z = e.shape
    P = J_r.shape[2] - z
    J_x, E_x = J_r[..., P:], J_e[..., P:]
    ended = np.all(np.isfinite(e), axis=1) & np.all(np.isfinite(J_e), axis=(1, 2))
    out, F = np.zeros((K, r.shape[1], (K // m) * z)), np.zeros((K, z, z))
    for k in range(K):
        if k % m == 0:
            F[k] = np.eye(z)
        elif ended[k - 1]:
            F[k] = E_x[k - 1] @ F[k - 1]
        c = k // m
        out[k, :, c * z : (c + 1) * z] = J_x[k] @ F[k]
    return out, F


class _Condensed(NamedTuple):
    """The condensed problem at one trial point of `fit_chains` (module docstring)."""

    r: Float[np.ndarray, " N"]  # condensed residuals r~
    J: Float[np.ndarray, "N PC"]  # their Jacobian in theta, then in the chains' first starts (C)
    a: Float[np.ndarray, "K z"]  # each piece's start-state step at dtheta = 0: its gap
    D: Float[np.ndarray, "K z P"]  # that step's derivative in theta
    F: Float[np.ndarray, "K z z"] | None  # ... in its chain's first start (None: starts held)


def _checked_chains(
    plant: HydraulicPlant,
    spec: oe.HydraulicParameters,
    pieces: oe.Segments,
    m: int,
    theta0,
    bound: float,
    max_evaluations: int,
    ftol: float,
    xtol: float,
    dt: float,
) -> Float[np.ndarray, " P"]:
    """``theta0`` as a (P,) array, once `fit_chains`'s arguments are checked."""
    check_type(plant, HydraulicPlant, "fit_chains: plant")
    check_type(pieces, oe.Segments, "fit_chains: pieces (see make_segments)")
    check_number(m, "fit_chains: m (pieces per chain)", integer=True, at_least=1)
    K = int(pieces.ts.shape[0])
    if K % m:
        raise ValueError(f"fit_chains: {K} pieces are not chains of {m}")
    check_type(spec, oe.HydraulicParameters, "fit_chains: spec")
    check_number(max_evaluations, "fit_chains: max_evaluations", integer=True, at_least=1)
    for name, x in (("bound", bound), ("ftol", ftol), ("xtol", xtol), ("dt", dt)):
        check_number(x, f"fit_chains: {name}", above=0)
    if m > 1 and internal_states(plant):
        raise ValueError("fit_chains: an actuator holds spool or bristle states, which a chain "
                         "does not carry across pieces: pass m = 1 (single shooting)")  # fmt: skip
    oe.initial_theta(plant, spec)  # refuses a leaf at 0 without a reference
    x0 = np.asarray(as_real_array(theta0, "fit_chains: theta0"), float)
    if x0.shape != (len(spec),):
        raise ValueError(f"fit_chains: theta0 must have shape ({len(spec)},), got {x0.shape}")
    return x0


def _condensed_at(
    theta: Float[np.ndarray, " P"],
    segs: oe.Segments,
    plant: HydraulicPlant,
    spec: oe.HydraulicParameters,
    m: int,
    C: int,
    dt: float,
    history: list[float],
) -> _Condensed:
    """The condensed problem at ``theta`` from the pieces ``segs`` (one evaluation of
    `linearized`), with the ``C`` columns of the chains' first starts where they are fitted;
    its cost appended to ``history``."""
    lin = linearized(jnp.asarray(theta), plant, spec, segs, dt)
    r, J, a, D = condensed(lin, start_vector(segs, plant.model.n), m)
    history.append(0.5 * float(r @ r))
    fit_progress.evaluation(len(history), history[-1])
    if not C:
        return _Condensed(r, J, a, D, None)
    S, F = chain_starts(lin, m)
    return _Condensed(r, np.concatenate([J, S.reshape(-1, C)], axis=1), a, D, F)


def _gap(a: Float[np.ndarray, "K z"], live: np.ndarray) -> float:
    """The largest gap between consecutive pieces of the chains that count (scaled units)."""
    return float(np.max(np.abs(a[live]), initial=0.0))


def _start_step(
    cond: _Condensed, step: Float[np.ndarray, " PC"], m: int
) -> Float[np.ndarray, "K z"]:
    """Every piece's start-state step for ``step``: it moves with theta (``D``) and with its
    chain's first start (``F``, where the starts are fitted)."""
    P = cond.D.shape[2]
    if cond.F is None:
        return cond.a + cond.D @ step[:P]
    ds = np.repeat(step[P:].reshape(-1, cond.a.shape[1]), m, axis=0)
    return cond.a + cond.D @ step[:P] + np.einsum("kzy,ky->kz", cond.F, ds)


def _damped_step(
    cond: _Condensed,
    x: Float[np.ndarray, " PC"],
    seen: np.ndarray,
    lo: Float[np.ndarray, " PC"],
    hi: Float[np.ndarray, " PC"],
    mu: float,
) -> Float[np.ndarray, " PC"]:
    """The projected Levenberg-Marquardt step from ``x`` with damping ``mu``: an unknown at a
    bound that the descent pushes outward stays there, the others take the damped step of
    their own subproblem (an unknown no residual sees is not moved)."""
    H, g = cond.J.T @ cond.J, cond.J.T @ cond.r
    free = seen & ~(((x >= hi) & (g < 0)) | ((x <= lo) & (g > 0)))
    Hf = H[np.ix_(free, free)]
    step = np.zeros_like(x)
    step[free] = -np.linalg.solve(Hf + mu * np.diag(np.diag(Hf) + 1e-12), g[free])
    return step


def _levenberg_marquardt(
    plant: HydraulicPlant,
    spec: oe.HydraulicParameters,
    pieces: oe.Segments,
    m: int,
    x0: Float[np.ndarray, " P"],
    *,
    C: int,
    live: np.ndarray,
    bound: float,
    max_evaluations: int,
    ftol: float,
    xtol: float,
    dt: float,
    history: list[float],
) -> tuple[np.ndarray, oe.Segments, _Condensed, np.ndarray, bool, str]:
    """`fit_chains`'s iteration: ``(theta, the pieces at their start states, the condensed
    problem there, the unknowns the residuals see, success, message)``."""
    P, n = len(x0), plant.model.n
    theta, segs = x0, pieces
    lo = np.concatenate([x0 - bound, np.full(C, -np.inf)])
    hi = np.concatenate([x0 + bound, np.full(C, np.inf)])
    cond = _condensed_at(theta, segs, plant, spec, m, C, dt, history)
    # a held-out chain's start columns are 0 (and a parameter that moves nothing), so not fitted
    seen = np.linalg.norm(cond.J, axis=0) > 0
    cost, mu, success, message = history[-1], 1e-3, False, "max_evaluations reached"
    close = False
    while len(history) < max_evaluations:
        x = np.concatenate([theta, np.zeros(C)])  # the starts' unknowns are steps from here
        if close:  # the same theta, the gaps closed: its cost without their bias
            step = np.zeros_like(x)
        # where the chains are closed and the linear model lets no step lower the cost by
        # ``ftol`` of it, no evaluation is spent to confirm it
        elif _gap(cond.a, live) <= GAP_TOL and model_decrease(
            cond.r, cond.J[:, seen], x[seen], lo[seen], hi[seen]
        ) < ftol * cost:  # fmt: skip
            success, message = True, "model decrease below tolerance, chains closed"
            break
        else:
            step = _damped_step(cond, x, seen, lo, hi, mu)
        step = np.clip(x + step, lo, hi) - x  # on a bound exactly
        trial = theta + step[:P]
        trial_segs = moved(segs, _start_step(cond, step, m), n)
        out = _condensed_at(trial, trial_segs, plant, spec, m, C, dt, history)
        closed = _gap(out.a, live) <= GAP_TOL
        if close or history[-1] < cost:
            drop = cost - history[-1]
            theta, segs, cond, cost = trial, trial_segs, out, history[-1]
            if not close:
                mu /= 3.0  # trust the model more
                if closed and (drop < ftol * cost or np.max(np.abs(step[:P])) < xtol):
                    success, message = True, "cost or step below tolerance, chains closed"
                    break
            close = False
            continue
        mu *= 4.0
        # refused: from open chains the cost is a low estimate (`GAP_TOL`), close them first
        close = _gap(cond.a, live) > GAP_TOL
        if not close and np.max(np.abs(step[:P])) < xtol:
            success, message = True, "no step lowers the cost, chains closed"
            break
    if not success:
        message += f"; largest gap {_gap(cond.a, live):.3g} (chains closed below {GAP_TOL:g})"
    return theta, segs, cond, seen, success, message


def _chains_result(
    theta: Float[np.ndarray, " P"],
    plant: HydraulicPlant,
    spec: oe.HydraulicParameters,
    pieces: oe.Segments,
    m: int,
    cond: _Condensed,
    seen: np.ndarray,
    history: list[float],
    t0: float,
    success: bool,
    message: str,
) -> oe.OutputErrorResult:
    """`fit_chains`'s result at ``theta``: theta's Jacobian with the start states' directions
    projected out, so that its covariance is the Schur complement of the joint one (the
    starts unknown, not known), the chains the series of its sandwich."""
    P, K = len(spec), int(pieces.ts.shape[0])
    Js = cond.J[:, P:][:, seen[P:]]
    J_theta = cond.J[:, :P]
    if Js.shape[1]:
        J_theta = J_theta - Js @ np.linalg.lstsq(Js, J_theta, rcond=None)[0]
    return oe.fit_result(
        theta, plant, spec, cond.r, J_theta, pieces.n_residuals - int(seen[P:].sum()), history,
        (K // m, m * pieces.targets.shape[1]), n_evaluations=len(history),
        wall_time=time.perf_counter() - t0, success=success, message=message,
    )  # fmt: skip


def fit_chains(
    plant: HydraulicPlant,
    spec: oe.HydraulicParameters,
    pieces: oe.Segments,
    m: int,
    *,
    theta0,
    bound: float = 1.5,
    max_evaluations: int = 20,
    ftol: float = 1e-6,
    xtol: float = 1e-6,
    dt: float = 1e-3,
    free_starts: bool = False,
) -> tuple[oe.OutputErrorResult, oe.Segments]:
    """The output-error fit of ``spec`` on chains of ``m`` consecutive ``pieces`` each
    (module docstring) from ``theta0``, ``|theta - theta0| <= bound``, with
    ``free_starts`` every chain's first start state fitted with theta (its own unknowns,
    `chain_starts`), else held where it is: Levenberg-Marquardt
    on the condensed problem, one evaluation of `linearized` per trial point (a refused
    step from open chains is followed by one that closes them: `GAP_TOL`), until, with the
    chains closed, a step lowers the cost by less than ``ftol`` of it or moves theta by less
    than ``xtol``, or the linear model predicts no step could lower it by ``ftol`` of it.

    Why the first start states are unknowns: estimated from the head samples alone
    (`start_states`), a 10 s chain's start carries a velocity error that the run integrates
    into a drift of its positions; with the start held, the fit bends theta to explain that
    drift. Measured on the knuckle's 40 s log (true bodies, true plant): its exact
    simulation from the generator's states matches the log to the encoders' quantisation,
    from the estimated starts it misses the angles by 1.6x more, and theta came out 1204 in
    squared Mahalanobis distance from the truth (21 parameters; chi^2 95 %: 32.7), 31.5
    with the starts free. Not yet the route's default: on the crane's campaign the free
    starts replayed the empty bucket's q2 at 1.74x the true plant's (1.32x held).

    Returns the fit (residuals and covariance condensed: the long segments' own where the
    chains are closed; its Jacobian in theta with the start states' directions projected
    out, so that its covariance is theta's marginal with the start states unknown; the
    chains as the series of `output_error.theta_covariance`'s sandwich) and the pieces at
    their final start states."""
    x0 = _checked_chains(plant, spec, pieces, m, theta0, bound, max_evaluations, ftol, xtol, dt)
    n, K = plant.model.n, int(pieces.ts.shape[0])
    plant = oe.strong_types(plant)
    compile_cache.relieve()  # as `output_error.fit`: below the kernel's memory-map limit
    live = np.any(np.asarray(pieces.weights) > 0, axis=1)  # chains held out do not count
    # the start states' columns only where they are fitted: held, they would cost a
    # (N, P + C) Jacobian and its normal matrix every evaluation for columns masked out
    z = 2 * n + int(np.prod(pieces.p0.shape[1:]))
    C = (K // m) * z * bool(free_starts)
    history: list[float] = []
    t0 = time.perf_counter()
    theta, segs, cond, seen, success, message = _levenberg_marquardt(
        plant, spec, pieces, m, x0, C=C, live=live, bound=bound,
        max_evaluations=max_evaluations, ftol=ftol, xtol=xtol, dt=dt, history=history,
    )  # fmt: skip
    result = _chains_result(
        theta, plant, spec, pieces, m, cond, seen, history, t0, success, message
    )
    return result, segs
