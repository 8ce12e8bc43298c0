r"""Gradient-based tuning of the robust controller's gains (Dastranj & Mattila (2026) eq. (18):
Lambda, K, kappa, eps) through the diffrax simulation, batched over a Monte Carlo sample of
plants, against the practical-stability conditions of Section III-B.

Gains are ``g = g0 exp(theta)`` (always positive, scale-free steps); optax's Adam minimises

    J = mean_samples sum_i (rmse_i / r_i)^2                       tracking
      + w_u mean sum_i (u_rms,i / u_max,i)^2                      control effort
      + w_c mean sum_i (udot_rms,i / (u_max,i / 1 s))^2           chattering
      + w_b sum_i ebar_i / r_i                                    the computed bound itself
      + rho sum_i ((1 + m) dbar_i / kappa_i - 1)^+^2              eq. (25): kappa_i > dbar_i
      + rho sum_i (peak_i / u_max,i - 1)^+^2                      actuator limits

with ``r_i`` a tolerated error per coordinate, ``dbar_i`` the largest |d_i| of eq. (19) over
the tuning sample's runs under the current gains (held constant within a step: the condition is
re-checked every step), ``ebar_i`` the ultimate bound of eqs. (22)-(25) with that dbar
(`bounds.ultimate_bounds`), ``peak_i`` a smooth maximum of |Q_a,i| (a p-norm over samples and
times) and ``m`` a margin. Keeping the bound in the loss is what makes the tuned bound tight
rather than merely true: with ``kappa_i <= dbar_i`` it falls back to the K-based bound, which is
orders of magnitude larger.

Gradients are those of the discrete solve; through the thin boundary layer they are wrong at
loose tolerances (`jaxmb.simulation.simulate`), so tuning solves at ``rtol = 1e-8`` and a test
checks the gradient against central finite differences.
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from pathlib import Path

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array

from jaxmb.compile_cache import strong_types
from jaxmb.control.bounds import ultimate_bounds
from jaxmb.control.montecarlo import values_hash
from jaxmb.control.robust import RobustController
from jaxmb.control.studies import ArmStudy
from jaxmb.multibody.checks import failures_as_nan
from jaxmb.saved_programs import saved

__all__ = [
    "tuning_provenance",
    "TuningWeights",
    "GAIN_NAMES",
    "tuning_loss",
    "tuning_adjoint",
    "STORED_STEPS_BYTES",
    "tune",
    "Tuner",
    "ROBUST",
    "gain_columns",
    "gains_from_columns",
    "diagnose",
    "adam_search",
    "gains_of",
    "tracking_term",
]

GAIN_NAMES = ("Lambda", "K", "kappa", "eps")


@dataclass(frozen=True)
class TuningWeights:
    """Weights and scales of the tuning loss (module docstring).

    Attributes:
        tolerated_error: ``r_i`` per coordinate (rad, rad, m).
        effort, chattering, bound: ``w_u``, ``w_c``, ``w_b``.
        penalty: ``rho``, on eq. (25) and the actuator limits.
        margin: ``m``: tuned kappa_i must exceed ``(1 + m) dbar_i``.
        peak_norm: the p of the smooth maximum of |Q_a|.
        cvar: None for the mean tracking error over samples; alpha in (0, 1) for the mean over
            the worst ``alpha`` fraction (CVaR).
    """

    # numbers, or arrays where a compiled loss takes them as arguments (`_value_and_grad`)
    tolerated_error: tuple[float, ...] | Array = (0.01, 0.01, 0.002)
    effort: float | Array = 0.1
    chattering: float | Array = 0.01
    bound: float | Array = 0.1
    penalty: float | Array = 1000.0
    margin: float | Array = 0.2
    peak_norm: float | Array = 16.0
    cvar: float | None = None


def gains_of(theta: dict, g0: dict) -> dict:
    """Gains from log-parameters: ``g = g0 exp(theta)`` (for every gain ``theta`` names)."""
    return {k: g0[k] * jnp.exp(theta[k]) for k in theta}


def tracking_term(rmse, tolerated_error, cvar: float | None):
    """``sum_i (rmse_i / r_i)^2`` of each sample (``rmse`` (M, n)), averaged over the samples,
    or over the worst ``cvar`` fraction of them (CVaR)."""
    track = jnp.sum((rmse / jnp.asarray(tolerated_error)[None, :]) ** 2, axis=1)  # (M,)
    if cvar is None:
        return jnp.mean(track)
    k = max(1, int(np.ceil(cvar * track.shape[0])))
    return jnp.mean(jax.lax.top_k(track, k)[0])


def controller_with(base: RobustController, gains: dict) -> RobustController:
    """``base`` with new gains, each broadcast to ``base``'s shape (one value for every
    coordinate, or one per coordinate; set by `equinox.tree_at`)."""
    return eqx.tree_at(
        lambda c: [getattr(c, k) for k in GAIN_NAMES],
        base,
        [jnp.broadcast_to(jnp.asarray(gains[k], float), jnp.shape(getattr(base, k)))
         for k in GAIN_NAMES],
    )  # fmt: skip


def tuning_terms(
    study: ArmStudy, controller: RobustController, values, options, adjoint=None
) -> dict:
    """Differentiable figures of one sample's run for the loss (``adjoint`` as `simulate`'s)."""
    tr, dbar = study.trajectory(controller, values, options, adjoint)
    dt = study.options.dt_save
    e = tr.e
    limit = study.torque_limit[None, :]
    u = tr.u / limit
    udot = jnp.diff(tr.u, axis=0) / dt / limit  # per second
    return {
        "rmse": jnp.sqrt(jnp.mean(e**2, axis=0)),
        "effort": jnp.sqrt(jnp.mean(u**2, axis=0)),
        "chattering": jnp.sqrt(jnp.mean(udot**2, axis=0)),
        "u_scaled": jnp.abs(u),
        "dbar": dbar,
        "success": tr.success,
    }


# Reverse mode through the samples' solves keeps every step's solver state (a checkpoint a
# step) when they fit in this many bytes, instead of diffrax's default O(sqrt(max_steps))
# checkpoints with the steps between them solved again. Measured on the Section IV gradient
# with respect to K (20 s, 11 548 Tsit5 steps, one process, twice each way): compile 12.2-16.1 s
# against 19.4-19.6 s, the gradient 4.4-5.4 forward runs against 7.6-8.8, the same values to the
# last digit; dev/performance-history.md
STORED_STEPS_BYTES = 256 * 2**20


def tuning_adjoint(samples: int, options, state_size: int) -> diffrax.RecursiveCheckpointAdjoint:
    """Every step stored if ``samples`` solves of at most ``options.max_steps`` steps fit in
    `STORED_STEPS_BYTES`; a stored step is the state, Tsit5's first-stage slope and a few
    scalars (measured: 133 bytes a step for the arm's six states), else diffrax's default."""
    per_step = 8 * (2 * state_size + 4)
    if samples * options.max_steps * per_step <= STORED_STEPS_BYTES:
        return diffrax.RecursiveCheckpointAdjoint(checkpoints=options.max_steps)
    return diffrax.RecursiveCheckpointAdjoint()


def tuning_loss(theta, g0, study, base, values, weights: TuningWeights, options):
    """``(J, aux)`` for the samples ``values`` (M, P); see the module docstring."""
    gains = gains_of(theta, g0)
    ctrl = controller_with(base, gains)
    adjoint = tuning_adjoint(values.shape[0], options, 2 * len(study.coordinate_names))
    terms = jax.vmap(lambda v: tuning_terms(study, ctrl, v, options, adjoint))(values)
    r = jnp.asarray(weights.tolerated_error)
    track_term = tracking_term(terms["rmse"], r, weights.cvar)
    effort = jnp.mean(jnp.sum(terms["effort"] ** 2, axis=1))
    chatter = jnp.mean(jnp.sum(terms["chattering"] ** 2, axis=1))
    dbar = jax.lax.stop_gradient(jnp.max(terms["dbar"], axis=0))
    b = ultimate_bounds(gains["K"], gains["kappa"], gains["eps"], gains["Lambda"], dbar,
                        *study.gamma)  # fmt: skip
    p = weights.peak_norm
    peak = jnp.mean(terms["u_scaled"] ** p, axis=(0, 1)) ** (1 / p)  # (n,)
    cond25 = jnp.sum(jax.nn.relu((1 + weights.margin) * dbar / gains["kappa"] - 1) ** 2)
    limits = jnp.sum(jax.nn.relu(peak - 1) ** 2)
    J = (
        track_term
        + weights.effort * effort
        + weights.chattering * chatter
        + weights.bound * jnp.sum(b.e / r)
        + weights.penalty * (cond25 + limits)
    )
    aux = {
        "tracking": track_term,
        "effort": effort,
        "chattering": chatter,
        "bound_e": b.e,
        "dbar": dbar,
        "kappa_exceeds_dbar": b.kappa_exceeds_dbar,
        "peak": jnp.max(terms["u_scaled"], axis=(0, 1)),
        "success": jnp.all(terms["success"]),
    }
    return J, aux


def diagnose(gains: dict, dbar, peak) -> list[str]:
    """What holds and what conflicts at the end of a tuning: eq. (25) per coordinate and the
    actuator limits (peak |Q_a| / limit)."""
    out = []
    for i in range(len(dbar)):
        k, d, pk = float(gains["kappa"][i]), float(dbar[i]), float(peak[i])
        if k <= d and pk >= 1:
            out.append(
                f"coordinate {i}: kappa {k:.4g} <= dbar {d:.4g} (eq. 25) and the actuator "
                f"limit is reached (peak {pk:.2f} x limit): they conflict"
            )
        elif k <= d:
            out.append(f"coordinate {i}: kappa {k:.4g} <= dbar {d:.4g}: eq. (25) fails")
        elif pk > 1:
            out.append(f"coordinate {i}: peak |Q_a| {pk:.2f} x the limit")
    return out


@dataclass(frozen=True)
class Tuner:
    """What `tune` needs of a kind of controller: the arm's robust controller (`ROBUST`) or a
    hydraulic machine's VDC (`jaxmb.control.vdc_tuning.VDC`).

    Attributes:
        gain_names: the gains tuned (attributes of the controller).
        with_gains: ``(base, gains) -> controller`` with those gains.
        loss_and_gradient: ``(study, base, values, weights, rtol, atol) -> (fn, g0)``, with
            ``fn(theta) -> ((J, aux), dJ/dtheta)`` about ``g0`` = ``base``'s gains.
        row: ``(aux, gains, weights, study) -> (figures, feasible)``: a step's history columns
            (floats) besides its loss and gains, and whether the step met the kind's limits.
        result: ``(best, g0, study) -> (figures, conflicts)``: the chosen step's figures for the
            summary, and the constraints it still meets (`diagnose`, `vdc_conflicts`).
        steps: Adam steps by default.
        last_if_infeasible: where no step met the limits, the result is the last step (the
            arm: its penalties have pushed the gains furthest toward eq. (25)) rather than
            the step of least loss (VDC).
    """

    gain_names: tuple[str, ...]
    with_gains: Callable
    loss_and_gradient: Callable
    row: Callable
    result: Callable
    steps: int
    last_if_infeasible: bool = False


def gain_columns(gains: dict, names) -> dict[str, float]:
    """Gains as flat history columns: a scalar gain as itself (``k_v``), a vector gain per
    component (``lam_0``, ``lam_1``, ...)."""
    out = {}
    for k in names:
        a = np.asarray(gains[k], float)
        out.update(
            {k: float(a)} if a.ndim == 0 else {f"{k}_{i}": float(x) for i, x in enumerate(a)}
        )
    return out


def gains_from_columns(row: dict, g0: dict) -> dict[str, np.ndarray]:
    """The gains of a history row (`gain_columns`), shaped as ``g0``'s."""
    out = {}
    for k, v in g0.items():
        shape = np.shape(v)
        out[k] = np.asarray(row[k] if shape == () else [row[f"{k}_{i}"] for i in range(shape[0])])
    return out


def tune(
    study,
    base,
    indices,
    out: Path,
    *,
    tuner: Tuner,
    steps: int | None = None,
    learning_rate: float = 0.1,
    weights,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    progress: bool = True,
    description: dict | None = None,
) -> dict:
    """Tune ``base``'s gains over the samples ``indices`` of ``study``'s distribution, by Adam
    on the loss of ``tuner``'s kind (`adam_search`: ``out/history.csv`` and
    ``out/tune_state.json`` as it goes, resumable; a resume checks the saved state's
    configuration and sampled parameters, `tuning_provenance`, with ``description``: the
    study's description, where the caller has one). ``steps`` defaults to the tuner's; runs
    solve at ``rtol``/``atol`` (gradients through the loops are wrong at loose tolerances).

    The result is the step of least loss among those that met the kind's limits (if none did:
    the last step or the least-loss one, as the tuner says), with the figures its own runs gave
    (no second compile). Returns ``{"gains",
    "history", "figures", "conflicts", "step"}``."""
    steps = tuner.steps if steps is None else steps
    values = jnp.asarray(study.values(indices))
    # traced under failures_as_nan: a trial stage outside the machine's domain is a rejected
    # step (not an error), and a sample that really leaves it is a failed run
    with failures_as_nan():
        fn, g0 = tuner.loss_and_gradient(study, base, values, weights, rtol, atol)
        provenance = tuning_provenance(
            study, g0, indices, values, steps=steps, learning_rate=learning_rate,
            weights=weights, rtol=rtol, atol=atol, description=description,
        )  # fmt: skip

        def record(index, J, aux, theta):
            gains = gains_of(theta, g0)
            figures, feasible = tuner.row(aux, gains, weights, study)
            row = {"step": index, "loss": float(J), "feasible": bool(feasible)}
            row.update(figures)
            row.update(gain_columns(gains, tuner.gain_names))
            if not bool(aux["success"]) or not np.isfinite(row["loss"]):
                raise failed_step(index, gains)
            return row

        history = adam_search(fn, g0, Path(out), steps=steps, learning_rate=learning_rate,
                              record=record, progress=progress, provenance=provenance)  # fmt: skip
    feasible = [h for h in history if h["feasible"]]
    fallback = history[-1:] if tuner.last_if_infeasible else history
    best = min(feasible or fallback, key=lambda h: h["loss"])
    figures, conflicts = tuner.result(best, g0, study)
    return {
        "gains": gains_from_columns(best, g0),
        "history": history,
        "figures": figures,
        "conflicts": conflicts,
        "step": best["step"],
    }


def tuning_provenance(study, g0: dict, indices, values, **settings) -> dict:
    """What a tuning's rows depend on, for `adam_search` to check a resume against (issue 29:
    results of two configurations never mix): the study's numbers (every array leaf: nominal
    plant, distribution, horizon, references), the start gains ``g0``, the tuning ``settings``
    (steps, learning rate, weights, tolerances, the study's description where the caller has
    one), and the sampled parameters. Returns ``{"configuration": {...}, "config_sha256",
    "values_sha256"}`` (`montecarlo.values_hash`: the same hash as a Monte Carlo chunk's)."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(eqx.filter(study, eqx.is_array)):
        a = np.asarray(leaf)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    configuration = {
        "study_arrays_sha256": h.hexdigest(),
        "g0": {k: np.asarray(v).tolist() for k, v in g0.items()},
        "samples": int(np.size(indices)),
        **{k: asdict(v) if is_dataclass(v) else v for k, v in settings.items()},
    }
    text = json.dumps(configuration, sort_keys=True, default=str)
    return {
        "configuration": json.loads(text),
        "config_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "values_sha256": values_hash(indices, np.asarray(values)),
    }


def _saved_state(path: Path, template) -> tuple | None:
    """``(saved, leaves)`` of a tune_state.json, or None where it is corrupted: not JSON, its
    hashes or history missing, or optimiser leaves that do not fit ``template``."""
    try:
        saved = json.loads(path.read_text())
        ok = isinstance(saved, dict) and all(
            k in saved for k in ("config_sha256", "values_sha256", "configuration", "state")
        )
        ok = ok and isinstance(saved.get("history"), list)
        ok = ok and all(isinstance(r, dict) and "loss" in r for r in saved["history"])
        like = jax.tree.leaves(template)
        ok = ok and len(saved["state"]) == len(like)
        # each leaf in its template's dtype: Adam's step count stays int32, as in a run that
        # was never stopped (an int64 count gives another decay schedule to round-off)
        leaves = (
            [jnp.asarray(x, t.dtype) for x, t in zip(saved["state"], like, strict=True)]
            if ok
            else []
        )
        ok = ok and all(x.shape == t.shape for x, t in zip(leaves, like, strict=True))
    except (OSError, ValueError, TypeError):
        return None
    return (saved, leaves) if ok else None


def _check_resume(saved: dict, provenance: dict, out: Path) -> None:
    """Refuse to resume a tuning whose saved rows came from another configuration or other
    sampled parameters, naming what differs and how to start afresh."""
    afresh = f"remove {out} to start afresh, or pass another --out"
    if saved["config_sha256"] != provenance["config_sha256"]:
        old, new = saved["configuration"], provenance["configuration"]
        differ = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        raise ValueError(
            f"tune: {out} holds {len(saved['history'])} step(s) of a tuning with another "
            f"configuration (differs in: {', '.join(differ) or 'its hash'}); {afresh}"
        )
    if saved["values_sha256"] != provenance["values_sha256"]:
        raise ValueError(
            f"tune: {out} holds a tuning of the same configuration on other sampled "
            f"parameters (their hash differs: the sampling changed); {afresh}"
        )


def adam_search(step, g0: dict, out: Path, *, steps: int, learning_rate: float, record,
                progress: bool = True, provenance: dict) -> list[dict]:  # fmt: skip
    """Adam over log-gains ``theta`` (``g = g0 exp(theta)``, from ``theta = 0``), the loop both
    tuners share.

    ``step(theta) -> ((J, aux), dJ/dtheta)``; ``record(k, J, aux, theta) -> row`` makes the
    history row of step ``k`` (a dict of floats) and raises where the step's runs failed.
    Writes ``out/history.csv`` and ``out/tune_state.json`` (the optimiser's state, and the
    `tuning_provenance` hashes) after every step. Called again on the same ``out`` it resumes
    from the last step where both hashes match; another configuration's or other samples'
    state is refused (ValueError); a corrupted state file is reported on stderr and the tuning
    starts afresh, never trusted. Adam's step decays exponentially to a tenth of
    ``learning_rate`` over ``steps``, so that the gains settle rather than circle. Returns
    the history."""
    out.mkdir(parents=True, exist_ok=True)
    opt = optax.adam(optax.exponential_decay(learning_rate, steps, 0.1))
    theta = {k: jnp.zeros_like(v) for k, v in g0.items()}
    state = opt.init(theta)
    history: list[dict] = []
    state_path, hist_path = out / "tune_state.json", out / "history.csv"
    if state_path.exists():
        loaded = _saved_state(state_path, (theta, state))
        if loaded is None:
            print(
                f"tune: {state_path} is corrupted (unreadable, or without its hashes); "
                "starting the tuning afresh",
                file=sys.stderr,
            )
        else:
            saved, leaves = loaded
            _check_resume(saved, provenance, out)
            theta, state = jax.tree.unflatten(jax.tree.structure((theta, state)), leaves)
            history = saved["history"]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, initial=min(len(history), steps), desc="tune", unit="step")
    while len(history) < steps:
        (J, aux), g = step(theta)
        row = record(len(history), J, aux, theta)
        history.append(row)
        updates, state = opt.update(g, state, theta)
        theta = optax.apply_updates(theta, updates)
        leaves = [np.asarray(x).tolist() for x in jax.tree.leaves((theta, state))]
        record_ = {**provenance, "state": leaves, "history": history}
        tmp = state_path.with_suffix(".json.tmp")  # a kill mid-write leaves the old state whole
        tmp.write_text(json.dumps(record_))
        tmp.replace(state_path)
        with open(hist_path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(history[0]))
            w.writeheader()
            w.writerows(history)
        if bar is not None:
            bar.set_postfix(loss=f"{row['loss']:.4g}")
            bar.update(1)
    if bar is not None:
        bar.close()
    return history


def failed_step(k: int, gains: dict) -> RuntimeError:
    """The error of a tuning step whose runs failed or whose loss is not finite."""
    shown = {n: np.asarray(v).tolist() for n, v in gains.items()}
    return RuntimeError(
        f"tune: step {k}: a tuning run failed or the loss is not finite (gains {shown}); lower "
        "the learning rate or widen the solver's max_steps"
    )


def _loss_and_gradient(study, base, values, weights, rtol, atol):
    """The arm's `Tuner.loss_and_gradient`: reverse mode through the vmapped samples, solved
    by Tsit5 whatever the study's method (at rtol 1e-8 steps are set by accuracy, not by the
    boundary layer's stiffness, and Rodas4 saves too few of them to pay for its Jacobians).
    One compiled program (`_value_and_grad`) serves every study, controller, sample set and
    weights of the same shapes."""
    options = replace(study.options, rtol=rtol, atol=atol, method="tsit5")
    g0 = {k: jnp.asarray(getattr(base, k)) for k in GAIN_NAMES}
    values = jnp.asarray(values)
    numbers = {
        f.name: jnp.asarray(getattr(weights, f.name), float)
        for f in fields(weights)
        if f.name != "cvar"
    }

    def fn(theta):
        # weak types made strong: a gain from a Python float would compile the program again
        traced = strong_types((theta, g0, study, base, values, numbers))
        return _value_and_grad(*traced, weights.cvar, options)

    return fn, g0


@saved
def _value_and_grad(theta, g0, study, base, values, numbers, cvar, options):
    """``((J, aux), dJ/dtheta)`` of `tuning_loss`: every argument but ``cvar`` and the solver
    options is traced (the weights' numbers included), so nothing is a constant of the
    program."""
    weights = TuningWeights(**numbers, cvar=cvar)
    return jax.value_and_grad(
        lambda th: tuning_loss(th, g0, study, base, values, weights, options), has_aux=True
    )(theta)


def _row(aux, gains, weights, study):
    """A step's figures: its terms, and per coordinate dbar, the bound and the peak effort;
    feasible where eq. (25) holds with the margin and the actuator limits are kept."""
    feasible = bool(
        jnp.all(gains["kappa"] > (1 + weights.margin) * aux["dbar"]) & jnp.all(aux["peak"] <= 1)
    )
    row = {k: float(aux[k]) for k in ("tracking", "effort", "chattering")}
    for i in range(len(study.coordinate_names)):
        row.update({f"{f}_{i}": float(aux[a][i])
                    for f, a in (("dbar", "dbar"), ("bound_e", "bound_e"), ("peak", "peak"))})  # fmt: skip
    return row, feasible


def _result(best, g0, study):
    """The chosen step's figures (dbar, peak and bound from the tuning sample at the tuning
    tolerance) and what conflicts (`diagnose`)."""
    n = len(study.coordinate_names)
    dbar, peak, bound_e = (np.asarray([best[f"{f}_{i}"] for i in range(n)])
                           for f in ("dbar", "peak", "bound_e"))  # fmt: skip
    kappa = gains_from_columns(best, g0)["kappa"]
    figures = {
        "dbar": dbar.tolist(),
        "kappa_exceeds_dbar": (kappa > dbar).tolist(),  # eq. (25), as `ultimate_bounds` has it
        "peak_over_limit": peak.tolist(),
        "ultimate_bound_e": bound_e.tolist(),
    }
    return figures, diagnose({"kappa": kappa}, dbar, peak)


# the arm's robust controller of eq. (18), tuned against the bounds of eqs. (19)-(25)
ROBUST = Tuner(
    gain_names=GAIN_NAMES,
    with_gains=controller_with,
    loss_and_gradient=_loss_and_gradient,
    row=_row,
    result=_result,
    steps=30,
    last_if_infeasible=True,
)
