"""`jaxmb identify` for hydraulic machines (a machine file, the built-in crane among them), in
two stages and a refit, with the report files of the main job:

1. the mechanics (booms, cylinder bodies, payload) and cylinder friction from the pressure
   forces by the regressor route (`mechanics`), before any simulation;
2. valve flow coefficients per edge, effective bulk moduli and cylinder Coulomb friction (and
   internal leakage) by output error from a log of positions, chamber pressures and valve
   commands (`output_error`, multiple shooting through the simulation), each signal weighted by
   its noise level against the model (`noise_weighted.fit_noise_weighted`), each segment's start
   state estimated from the samples just after it (`start_states`), the mechanics of stage 1
   either fixed or refined jointly (the boom and payload masses) and internal leakage fitted or
   not: by default the richer where it predicts held-out segments better by more than one
   standard error (`model_choice`), and the report says which;
3. the same parameters with the viscous coefficients and the booms' masses refitted on long
   segments (about 10 s), which see the slow drift a free-run replay integrates, the leakages
   and the payload held (`long_refit`): by default kept where held-out long segments prefer
   it, and the report says whether.

Validation is a free-run replay (single shooting): the identified plant starts from each
validation log's measured initial state and integrates the whole log, driven by its logged
valve commands, next to the nominal plant's replay of the same log. The report gives, per
signal, the RMSE (SI in ``summary.json``) and the NRMSE fit % of MATLAB's ``compare``; the
segment-wise prediction of the fit (restarts from the measured state every ``segment_time``)
is reported under its own name, ``validation_rmse_segments`` (restarts every
``segment_time_s``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from jaxmb import compile_cache
from jaxmb.actuators.hydraulics import StribeckFriction
from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.identification import drift, fit_progress, long_refit, report, shooting, start_states
from jaxmb.identification import mechanics as mech
from jaxmb.identification import model_choice as choice
from jaxmb.identification import output_error as oe
from jaxmb.identification import stage_coupling as coupling
from jaxmb.identification.campaign import Campaign, check_campaign, payload_body
from jaxmb.identification.log_length import check_fit_lengths, check_validation_length
from jaxmb.identification.signals import check_cutoff
from jaxmb.io import params_file
from jaxmb.io.covariance_file import write_covariance
from jaxmb.io.log_sampling import check_uniform, window_option
from jaxmb.io.logs import Log, schema_for
from jaxmb.io.machine import Machine, check_reach, weigh_payload
from jaxmb.io.params_file import apply_hydraulics

__all__ = [
    "DEFAULT_SELECTORS",
    "hydraulic_selectors",
    "identify_hydraulic",
    "log_columns",
    "validate_log",
    "with_held",
]

EDGES = ("c_pa", "c_an", "c_pb", "c_bn")


def hydraulic_selectors(
    plant: HydraulicPlant, *, friction: bool = True, leakage: bool = False
) -> tuple[str, ...]:
    """Every valve edge coefficient and cylinder bulk modulus of every actuator, and (with
    ``friction``) each cylinder's Coulomb friction force, (with ``leakage``) its internal
    leakage coefficient. (Refitting the viscous coefficients too was tried on the knuckle's
    40 s log: they came out 13-39 % below the truth, absorbing other errors, and the free run
    drifted as much.)"""
    out = []
    for a in plant.actuator_names:
        out += [f"valve.{a}.{e}" for e in EDGES] + [f"cylinder.{a}.beta"]
        if friction:
            out.append(f"friction.{a}.F_c")
        if leakage:
            out.append(f"cylinder.{a}.c_int")
    return tuple(out)


DEFAULT_SELECTORS = hydraulic_selectors


def log_columns(log: Log) -> dict[str, np.ndarray]:
    """The columns of a validated `Log` as the mapping `output_error` reads."""
    return {"t": np.asarray(log.t), **{k: np.asarray(log[k]) for k in log.names}}


def _plant_for(machine: Machine, log: Log, stage1: mech.MechanicsEstimate) -> HydraulicPlant:
    """The machine's plant under ``log``'s experimental conditions: the bodies of stage 1
    (`mechanics.identify_mechanics`), the payload the log's sidecar names if it names one
    (`jaxmb.io.machine.weigh_payload`), and stage 1's cylinder friction."""
    plant = mech.with_bodies(machine.plant, stage1.model)
    payload = log.meta.get("conditions", {}).get("payload_kg")
    if machine.payload is not None and payload is not None:
        # the same load weighed (`weigh_payload`); the file's body in its place broke what
        # the fit had balanced: the knuckle's fold replayed 6.9x the true plant's, not 1.0x
        plant = weigh_payload(plant, float(payload))
    return eqx.tree_at(lambda p: p.actuators, plant, _friction_from(stage1, plant.actuators))


def _friction_from(stage1: mech.MechanicsEstimate, actuators) -> tuple:
    """The actuators with stage 1's Coulomb force and viscous coefficient (where positive) in
    their Stribeck laws, the static force at the file's ratio to the Coulomb force (stage 1's
    own static force is poorly determined: the low-pass smears the hump below ``v_s``)."""
    out = []
    for a in actuators:
        f = a.friction
        fc = stage1.friction.get(f"friction.{a.name}.F_c", 0.0)
        if isinstance(f, StribeckFriction) and fc > 0:
            sigma = stage1.friction[f"friction.{a.name}.sigma"]
            f = eqx.tree_at(
                lambda f: (f.F_c, f.F_s, f.sigma), f,
                (jnp.asarray(fc), jnp.asarray(fc * f.F_s / f.F_c),
                 jnp.asarray(sigma) if sigma > 0 else f.sigma),
            )  # fmt: skip
            a = eqx.tree_at(lambda a: a.friction, a, f)
        out.append(a)
    return tuple(out)


# a validation replay whose RMSE exceeds this multiple of the expected one (noise and the
# parameters' covariance, `drift.expected_rmse`) is reported as a misfit of the model: the
# true plant's own replays of the synthetic logs stay within 2x (the angles' expectation leaves
# out the error of the measured start velocity)
MISFIT = 3.0

# how each kind of signal is shown in tables and plots: (unit, SI per unit)
DISPLAY = {"angle": ("deg", np.pi / 180), "length": ("mm", 1e-3), "pressure": ("bar", 1e5)}


def required_signals(plant: HydraulicPlant) -> tuple[str, ...]:
    """What a log of ``plant`` must hold for output error and replay: its coordinates, every
    chamber pressure, every command and the supply pressures it takes from the log."""
    return (
        tuple(plant.coordinate_names)
        + tuple(f"{c}_{a}" for a in plant.actuator_names for c in ("p_a", "p_b"))
        + tuple(plant.input_names)
    )


def _read(machine: Machine, path, required) -> tuple[Log, dict]:
    log = machine.read_log(path, required=required)
    coords = machine.plant.model.coordinate_names
    check_reach(machine, log.stack(list(coords)), source=f"log {Path(path).name}", t=log.t)
    return log, log_columns(log)


@dataclass(frozen=True)
class _Fit:
    """What the two stages and the refit leave, everything the report and the validation read."""

    stage1: mech.MechanicsEstimate
    stage1_plant: HydraulicPlant  # the machine under the fit log's conditions, stage 1's bodies
    file_plant: HydraulicPlant  # the file's plant under the fit log's named payload
    res: oe.OutputErrorResult
    spec: oe.HydraulicParameters
    held: dict  # {name: (value, std)} held at the short fit's values by the long refit
    values: dict  # every estimate, the held ones included
    stds: dict
    conditions: dict
    choices: dict
    stage1_offsets: dict  # stage 1's pressure-force offsets: which were kept, their values
    stage1_cross: np.ndarray | None  # (P, Q) Cov(theta, stage 1's values): `stage_coupling`
    given_stage1: np.ndarray  # (P, P) theta's covariance given stage 1's values (stage 2's own)
    long_report: dict
    noise: dict  # each signal's residual scale (SI)
    pred: dict  # {log: its segment-wise prediction by the identified plant}
    nominal: dict  # {log: ... and by the file's}
    logs: dict  # {log: its conditions: the payload named or identified}


def identify_hydraulic(
    name: str,
    machine: Machine,
    log_path: str | Path | Sequence[str | Path],
    out: Path,
    validate: Sequence[str],
    progress: Callable[[str], None],
    *,
    save: Callable[[dict], None] = lambda summary: None,
    window: tuple[float, float] | None = None,
    segment_time: float = 0.5,
    friction: bool = True,
    leakage: str = "auto",
    max_evaluations: int = 20,
    prior_weight: float | None = None,
    mechanics: str = "auto",
    valve_effects: str = "auto",
    offsets: str = "auto",
    encoder_offsets: str = "auto",
    cutoff: float | None = None,
    stride: int | None = None,
    long: str = "auto",
) -> dict:
    """Stage 1 (`mechanics.identify_mechanics`) on ``log_path`` (within ``window`` if given),
    then `hydraulic_selectors` by multiple-shooting output error from there, every segment's
    start state estimated from the samples just after it (`start_states`), the mechanics
    ``"fixed"``, ``"refined"`` (the booms' and payload's masses fitted jointly) and the
    leakage ``"none"`` or ``"fitted"`` and each valve effect the file declares (overlap,
    delay, spool dynamics: ``valve_effects``) ``"held"`` or ``"fitted"`` and the pressure
    transducers' offsets (``offsets``) and the encoders' (``encoder_offsets``) ``"none"`` or
    ``"fitted"``, by default the richer where
    it predicts held-out segments better by more than one standard error
    (`model_choice.choose_and_fit`; stage 1 fits each
    cylinder's pressure-force offset and keeps those its std determines, `stage1_offsets`);
    validate by free-run replay of the ``validate`` logs (module docstring), write the report into ``out`` and
    return the summary entries. ``log_path`` may be several logs (a campaign, `campaign`: the
    machine's parameters shared, each log with its own start states and payload). ``cutoff``
    and ``stride``: stage 1's low-pass (Hz) and
    decimation (default `mechanics.CUTOFF` and 10). ``long``: the refit on long segments
    (`long_refit`), "auto" (kept where held-out long segments prefer it), "yes" or "no".

    A finished fit is never lost: the parameter files and the fit's report are written, and
    ``save`` is handed the summary so far, before any validation log is replayed. A validation
    log whose replay fails is reported by name under ``"validation_failed"`` (the others are
    still replayed), for the caller to raise after writing the summary."""
    choice.check_choices(mechanics=mechanics, leakage=leakage, valve_effects=valve_effects,
                         offsets=offsets, encoder_offsets=encoder_offsets)  # fmt: skip
    if long not in long_refit.CHOICES:
        raise ValueError(f"--long-refit: expected one of {long_refit.CHOICES}, got {long!r}")
    paths = [log_path] if isinstance(log_path, str | Path) else list(log_path)
    logs, vlogs, fit_log = _read_logs(
        machine, paths, validate, window=window, cutoff=cutoff, segment_time=segment_time,
        choosing=_choosing(machine, mechanics, leakage, valve_effects, offsets, encoder_offsets),
    )  # fmt: skip
    fit = _fit(
        machine, logs, fit_log, progress, window=window, segment_time=segment_time,
        friction=friction, leakage=leakage, max_evaluations=max_evaluations,
        prior_weight=prior_weight, mechanics=mechanics, valve_effects=valve_effects,
        offsets=offsets, encoder_offsets=encoder_offsets, cutoff=cutoff, stride=stride,
        long=long,
    )  # fmt: skip
    summary = _write_fit(name, machine, fit, out, paths, validate, segment_time)
    summary["validation"] = "pending: the fit is written; the validation logs replay next"
    save(summary)
    checks, failed = _validate(machine, fit, vlogs, progress, segment_time)
    compile_cache.relieve()  # between stages (`compile_cache.relieve`)
    progress("writing the report")
    summary.update(_validation_report(out, fit, checks, plant=fit.res.plant))
    if failed:
        summary["validation_failed"] = failed
    summary["plots"] = _plots(out, fit, checks)
    return summary


def _choosing(machine, mechanics, leakage, valve_effects, offsets, encoder_offsets) -> bool:
    """Whether any structure is left to the held-out data (``"auto"``), which then needs
    held-out segments."""
    given = (mechanics, leakage, offsets, encoder_offsets)
    return "auto" in given or bool(
        valve_effects == "auto" and choice.effect_selectors(machine.plant)
    )


def _read_logs(machine, paths, validate, *, window, cutoff, segment_time, choosing: bool):
    """``(fit logs, validation logs, the first fit log in its window)``, every log read and
    checked before anything compiles: its columns (`_read`), a campaign's logs against each
    other, its sampling, and its length against what is asked of it (`log_length`), each
    refused by name. The logs are ``{stem: (log, columns)}``."""
    if window is not None and len(paths) > 1:
        raise ValueError(
            "--window: selects a span of one fit log; with several, cut each log to its span"
        )
    required = required_signals(machine.plant)
    logs = {Path(p).stem: _read(machine, p, required) for p in paths}
    if len(logs) > 1:
        check_campaign({stem: log for stem, (log, _) in logs.items()})
    vlogs = {Path(v).stem: _read(machine, v, required) for v in validate}
    stage1_cutoff = mech.CUTOFF if cutoff is None else cutoff
    for p in paths:
        log = logs[Path(p).stem][0]
        check_cutoff(stage1_cutoff, log.t, Path(p).name)
        check_uniform(log, Path(p).name)
    fit_log = window_option(logs[Path(paths[0]).stem][0], window, Path(paths[0]).name)
    check_uniform(fit_log, Path(paths[0]).name)
    for v in validate:
        check_uniform(vlogs[Path(v).stem][0], Path(v).name)
    check_fit_lengths(
        {Path(p).name: logs[Path(p).stem][0] for p in paths}, window=window,
        cutoff=stage1_cutoff, segment_time=segment_time, choosing=choosing,
    )  # fmt: skip
    for v in validate:
        check_validation_length(vlogs[Path(v).stem][0], Path(v).name, segment_time=segment_time)
    return logs, vlogs, fit_log


def _validate(machine, fit, vlogs, progress, segment_time):
    """``(checks, failed)``: each validation log's free-run replay (`validate_log`) by its
    stem, and the error of each whose replay failed; one log's failure does not stop the
    others."""
    checks, failed = {}, {}
    for stem, (vlog, vcols) in vlogs.items():
        compile_cache.relieve()  # between stages (`compile_cache.relieve`)
        progress(f"validating on {stem} (free-run replay)")
        try:
            checks[stem] = validate_log(machine, fit, vlog, vcols, segment_time)
        except Exception as err:  # noqa: BLE001 - any failure of one log is reported, not lost
            failed[stem] = f"{type(err).__name__}: {err}"
    return checks, failed


def _plots(out: Path, fit, checks) -> list:
    """The fit's segment-wise predictions and each validation log's free runs (identified
    and nominal) against the measured signals, in display units; the files written."""
    series = {f"fit_{stem}": pred for stem, pred in fit.pred.items()}
    for stem, check in checks.items():
        series[f"validation_{stem}"] = check["free"]
        series[f"validation_{stem}_nominal"] = check["free_nominal"]
    kinds = schema_for(fit.res.plant).kinds
    signals = tuple(fit.noise)
    display = {c: DISPLAY.get(kinds[c], ("", 1.0)) for c in signals}
    return report.series_plots(
        out,
        {
            tag: (
                p["t"],
                np.stack([p["measured"][c] for c in signals], 1),
                np.stack([p["predicted"][c] for c in signals], 1),
            )
            for tag, p in series.items()
        },
        signals,
        unit=[display[c][0] for c in signals],
        scale=[display[c][1] for c in signals],
    )


def _campaign(
    machine: Machine, logs: Mapping[str, tuple[Log, dict]]
) -> tuple[tuple[str, ...], list[Log], list[float | None], Campaign]:
    """``(stems, logs, the payload each names, the campaign)`` of the fit logs: a log's named
    payload (kg) is None where it names none or the machine carries no payload."""
    stems = tuple(logs)
    raw = [logs[s][0] for s in stems]
    known = [log.meta.get("conditions", {}).get("payload_kg") for log in raw]
    known = [None if m is None or machine.payload is None else float(m) for m in known]
    camp = Campaign.of(stems, [logs[s][1] for s in stems], known, payload_body(machine.plant))
    return stems, raw, known, camp


def _stage1(
    machine: Machine, fit_log: Log, raw: Sequence[Log], known: Sequence[float | None],
    unknown: bool, progress, *, offsets, prior_weight, cutoff, stride,
) -> tuple[mech.MechanicsEstimate, dict]:  # fmt: skip
    """Stage 1 (`stage1_with_offsets`): the mechanics by the regressor route on the fit log (in
    its window), or on every log of a campaign, the payload too where a log names none; the
    estimate and the report of the offsets' choice."""
    progress(
        "identifying the mechanics (regressor route on the pressure forces)"
        + (", payload included" if unknown else "")
    )
    return stage1_with_offsets(
        machine, fit_log if len(raw) == 1 else raw, offsets,
        payload_known=known[0] if len(raw) == 1 else known,
        prior_weight=mech.PRIOR_WEIGHT if prior_weight is None else prior_weight,
        cutoff=mech.CUTOFF if cutoff is None else cutoff, stride=stride or 10,
    )  # fmt: skip


def _short_segments(
    plant: HydraulicPlant, camp: Campaign, segment_time: float, t0, t1
) -> tuple[oe.Segments, oe.Segments]:
    """``(segments, their heads)`` of stage 2 on every log of ``camp``, joined on one time
    axis (a campaign's logs weighted by common scales)."""
    scales = None if len(camp) == 1 else camp.scales(plant)
    parts = [
        oe.make_segments(plant, c, segment_time=segment_time, t_start=t0, t_end=t1, scales=scales)
        for c in camp.columns
    ]
    seg = camp.join(plant, parts)
    heads = camp.join(
        plant,
        [start_states.head_segments(plant, c, p) for c, p in zip(camp.columns, parts, strict=True)],
    )
    return seg, heads


def _per_log(
    machine: Machine, stems: Sequence[str], known: Sequence[float | None], conditions: dict
) -> dict:
    """Each fit log's payload (kg) and whether it was named or identified (empty without a
    payload)."""
    if machine.payload is None:
        return {stem: {} for stem in stems}
    return {
        stem: {"payload_kg": conditions.get("payload_kg") if m is None else m,
               "payload_source": "identified" if m is None else "named"}
        for stem, m in zip(stems, known, strict=True)
    }  # fmt: skip


def _predictions(
    plant_of: Callable[[int], HydraulicPlant],
    logs: Mapping[str, tuple[Log, dict]],
    stems: Sequence[str],
    segment_time: float,
    t0,
    t1,
) -> dict:
    """The segment-wise prediction (`output_error.predict`) of each log by the plant
    ``plant_of(k)`` of its index, each on its own time axis (its report and plots), not the
    campaign's joined one."""
    return {
        stem: oe.predict(plant_of(k), logs[stem][1], segment_time=segment_time,
                         t_start=t0, t_end=t1)
        for k, stem in enumerate(stems)
    }  # fmt: skip


def _fit(
    machine: Machine, logs: Mapping[str, tuple[Log, dict]], fit_log: Log, progress, *, window,
    segment_time, friction, leakage, max_evaluations, prior_weight, mechanics, valve_effects,
    offsets, encoder_offsets, cutoff, stride, long,
) -> _Fit:  # fmt: skip
    """Stage 1, stage 2 with its structure chosen, and the long refit (module docstring), on
    one log (``fit_log``: its ``window``) or a campaign's (`campaign`)."""
    t0, t1 = (None, None) if window is None else window
    stems, raw, known, camp = _campaign(machine, logs)
    unknown = machine.payload is not None and bool(camp.unknown)
    stage1, stage1_offsets = _stage1(
        machine, fit_log, raw, known, unknown, progress, offsets=offsets,
        prior_weight=prior_weight, cutoff=cutoff, stride=stride,
    )  # fmt: skip
    # the plant carries the unknown load (a log that names none), or the first log's
    ref = raw[known.index(None)] if None in known else raw[0]
    plant = _plant_for(machine, ref, stage1)
    conditions = {} if known[0] is None or len(raw) > 1 else {"payload_kg": known[0]}
    if unknown:
        conditions = {"payload_kg": stage1.payload_mass, "payload_source": "identified"}
    compile_cache.relieve()  # between stages (`compile_cache.relieve`)
    progress("identifying (output-error route)")
    seg, heads = _short_segments(plant, camp, segment_time, t0, t1)
    base = hydraulic_selectors(plant, friction=friction)
    leaks = tuple(
        n for n in hydraulic_selectors(plant, friction=False, leakage=True) if n not in base
    )
    with fit_progress.fitting("stage 2"):
        res, spec, seg, choices = choice.choose_and_fit(
            plant, base, leaks, refined_selectors(plant, stage1), seg, heads=heads,
            mechanics=mechanics, leakage=leakage, effects=choice.effect_selectors(plant),
            valve_effects=valve_effects, sensors=choice.sensor_selectors(plant),
            offsets=offsets, encoders=choice.encoder_selectors(plant),
            encoder_offsets=encoder_offsets, max_evaluations=max_evaluations,
        )  # fmt: skip
    compile_cache.relieve()  # between stages (`compile_cache.relieve`)
    with fit_progress.fitting("long refit"):
        res, spec, base, held, long_report, chains = long_refit.refit_long(
            plant, res, spec, camp.columns[0] if len(camp) == 1 else camp, np.asarray(seg.scale),
            refined_selectors(plant, stage1), choice=long, t_start=t0, t_end=t1,
            max_evaluations=max_evaluations,
        )  # fmt: skip
    # stage 1's bodies' uncertainty carried into stage 2's covariance (`stage_coupling`)
    compile_cache.relieve()
    progress("carrying stage 1's uncertainty into the covariance")
    given_stage1 = np.asarray(res.covariance)
    res, stage1_cross = _carry_stage1(
        res, spec, stage1, base if chains else plant, chains or seg,
    )  # fmt: skip
    # every estimate, those the long refit held at the short fit's values included
    values = {**{n: v for n, (v, _) in held.items()}, **res.values}
    stds = {**{n: s for n, (_, s) in held.items()}, **res.std}
    if "body.payload.mass" in values and "payload_source" in conditions:
        conditions["payload_kg"] = values["body.payload.mass"]
    per_log = _per_log(machine, stems, known, conditions)
    return _Fit(
        stage1=stage1, stage1_plant=plant, file_plant=_nominal_for(machine, ref), res=res,
        spec=spec, held=held, values=values, stds=stds, conditions=conditions, choices=choices,
        stage1_offsets=stage1_offsets, long_report=long_report, stage1_cross=stage1_cross,
        given_stage1=given_stage1,
        noise=dict(zip(seg.signal_names, np.asarray(seg.scale).tolist(), strict=True)),
        pred=_predictions(lambda k: _under(res.plant, known[k], camp.body), logs, stems,
                          segment_time, t0, t1),
        nominal=_predictions(lambda k: _nominal_for(machine, raw[k]), logs, stems,
                             segment_time, t0, t1),
        logs=per_log,
    )  # fmt: skip


def _carry_stage1(
    res: oe.OutputErrorResult,
    spec: oe.HydraulicParameters,
    stage1: mech.MechanicsEstimate,
    base: HydraulicPlant,
    fitted,
) -> tuple[oe.OutputErrorResult, np.ndarray | None]:
    """``res`` with stage 1's bodies' uncertainty carried into its covariance and stds, and
    theta's covariance with stage 1's values (`stage_coupling`). ``fitted``: what ``res`` was
    fitted on, the long refit's ``(pieces, m)`` (relative to ``base``) or the short fit's
    segments. The held bodies' Jacobian costs one evaluation with their columns added."""
    stribeck = [a.name for a in base.actuators if isinstance(a.friction, StribeckFriction)]
    held = coupling.held_selectors(stage1.names, stage1.values, spec.names, stribeck)
    if not held:
        return res, None
    ext = oe.HydraulicParameters([*spec.names, *held], dict(spec.reference))
    theta = jnp.asarray(np.concatenate([np.asarray(res.theta), np.zeros(len(held))]))
    if isinstance(fitted, tuple):
        pieces, m = fitted
        lin = shooting.linearized(theta, base, ext, pieces)
        J = shooting.condensed(lin, shooting.start_vector(pieces, base.model.n), m)[1]
    else:
        J = np.asarray(oe.residuals_and_jacobian(theta, oe.strong_types(base), ext, fitted)[1])
    now = oe.parameter_values(jnp.zeros(len(held)), base, oe.HydraulicParameters(held))
    T = coupling.selector_map(held, stage1.names, stage1.values, now)
    cov, cross = coupling.carried(
        res.covariance, res.jacobian, J[:, len(spec) :], T, np.asarray(stage1.covariance)
    )
    dead = np.array([not np.isfinite(res.std[n]) for n in spec.names])
    sd = np.where(dead, np.inf, np.sqrt(np.clip(np.diag(cov), 0.0, None)))
    out = dataclasses.replace(res, covariance=cov, std=oe.value_std(sd, spec, res.values))
    return out, cross


# stage 1 keeps a cylinder's pressure-force offset whose estimate exceeds this many stds
SIGNIFICANT = 3.0


def stage1_with_offsets(machine: Machine, logs, offsets: str, **kw):
    """Stage 1 (`mechanics.identify_mechanics`, ``kw`` its options) with each cylinder's
    pressure-force offset (``sensor.<a>.force``) as ``offsets`` says: "none", "fitted" (every
    cylinder's) or "auto": every cylinder's fitted, those within `SIGNIFICANT` stds of 0
    dropped and the rest refitted (a t-test on a linear regression's coefficient: a column
    the data do not determine only adds variance to the masses). Returns the estimate and
    the report of the choice."""
    if offsets == "none":
        return mech.identify_mechanics(machine, logs, **kw), {"choice": "none"}
    every = machine.plant.actuator_names
    full = mech.identify_mechanics(machine, logs, force_offsets=every, **kw)
    found = {a: (full.value(f"sensor.{a}.force"), full.std_of(f"sensor.{a}.force")) for a in every}
    keep = every
    if offsets == "auto":
        keep = tuple(a for a, (v, s) in found.items() if abs(v) > SIGNIFICANT * s)
    about = {
        "fitted": list(keep),
        "force_offset_N": {a: {"value": v, "std": s} for a, (v, s) in found.items()},
        "how": "each cylinder's pressure-force offset fitted in stage 1"
        + (f", kept where it exceeds {SIGNIFICANT:g} std" if offsets == "auto" else ""),
    }
    if keep == every:
        return full, {"choice": "fitted", **about}
    est = mech.identify_mechanics(machine, logs, force_offsets=keep, **kw)
    return est, {"choice": "fitted" if keep else "none", **about}


def _poorly(row: Mapping) -> bool:
    """Whether a ``parameters.csv`` row is poorly identified: a relative std above 20 %, or
    an additive parameter's std above its step (`output_error.additive_step`)."""
    n = row["parameter"]
    if oe.is_additive(n):
        return not row["std"] <= oe.additive_step(n)
    return row["rel_std_percent"] > 20


def _under(plant: HydraulicPlant, payload: float | None, body) -> HydraulicPlant:
    """``plant`` carrying a log's named ``payload`` (kg) as the file's payload ``body``
    (`campaign.payload_body`); None: its own (the unknown load)."""
    if payload is None or body is None:
        return plant
    return oe.with_segment_payload(plant, jnp.asarray([float(payload), *body]))


def _write_fit(
    name: str, machine: Machine, fit: _Fit, out: Path, paths, validate, segment_time: float
) -> dict:
    """``parameters.csv``, ``mechanics.csv``, ``base_parameters.csv`` and ``params.json`` of a
    finished fit, before any validation; returns the summary's entries of the fit."""
    res, stage1 = fit.res, fit.stage1
    report.refuse_non_finite(res.values, "the identified parameters")
    report.refuse_non_finite(res.std, "the identified parameters' std", allow_inf=True)
    out.mkdir(parents=True, exist_ok=True)
    rows = _parameter_rows(fit)
    report.write_table(out / "parameters.csv", rows)
    mechanics_summary = _mechanics_report(out, stage1)
    _write_covariance(out / COVARIANCE, fit, rows)
    _write_params(out / "params.json", name, machine, fit, rows, paths, validate)
    J = res.jacobian
    n = np.linalg.norm(J, axis=0)
    s = np.linalg.svd(J / np.where(n > 0, n, 1), compute_uv=False)
    return {
        "route": "output error",
        "method": _method_text(segment_time, fit.long_report, res.bandwidth),
        "method_key": "output_error",
        "machine_file": str(machine.path),
        "condition_number": float(s[0] / s[-1]),
        "parameters": {r["parameter"]: r["value"] for r in rows},
        # relative standard deviation above 20 % (an additive one's std above its step: a
        # transducer's offset 1 bar, a centre's 0.1 m): the log does not determine these
        "poorly_identified": [r["parameter"] for r in rows if _poorly(r)],
        "cost_initial": res.cost0,
        "cost_final": res.cost,
        "evaluations": res.n_evaluations,
        "conditions": fit.conditions,
        "payload": _payload_summary(stage1, fit.values, fit.stds),
        "mechanics": {**mechanics_summary, "stage2": fit.choices["mechanics"]},
        "leakage": fit.choices["leakage"],
        "valve_effects": {k: fit.choices[k] for k in choice.EFFECTS},
        "offsets": {**fit.choices["offsets"], "stage1": fit.stage1_offsets},
        "encoder_offsets": fit.choices["encoder_offsets"],
        "long_refit": fit.long_report,
        "fit_rmse": _pooled_rmse(fit.pred),
        "fit_rmse_nominal": _pooled_rmse(fit.nominal),
        # each fit log's conditions and segment-wise prediction
        "fit_logs": {
            stem: {
                **fit.logs[stem],
                "duration_s": float(p["t"][-1] - p["t"][0]),
                "fit_rmse": p["rmse"],
                "fit_rmse_nominal": fit.nominal[stem]["rmse"],
            }
            for stem, p in fit.pred.items()
        },  # fmt: skip
        "segment_time_s": segment_time,
        # each signal's residual scale (SI): its RMS residual once pilots and rescaling
        # agree, i.e. its noise level against the model (maximum likelihood with unknown
        # noise variances)
        "residual_scales": fit.noise,
        "samples": int(sum(len(p["t"]) for p in fit.pred.values())),
    }


def _parameter_rows(fit: _Fit) -> list[dict]:
    """``parameters.csv``'s rows: each parameter stage 2 fitted or the long refit held, its
    value, std, relative std, 95 % interval (log-normal; normal for an additive one, a centre
    coordinate or an offset, which may take either sign), the machine file's value and stage
    1's."""
    res, spec, held = fit.res, fit.spec, fit.held
    sd = np.sqrt(np.clip(np.diag(res.covariance), 0, None))
    sd[[not np.isfinite(res.std[n]) for n in res.names]] = np.inf  # undetermined: [0, inf]
    every = (*spec.names, *held)
    file_values = {n: float(oe.parameter_getter(fit.file_plant, n)(fit.file_plant)) for n in every}
    start = fit.stage1_plant
    start_values = {n: float(oe.parameter_getter(start, n)(start)) for n in every}
    estimates = [(n, res.values[n], res.std[n], sd[k]) for k, n in enumerate(res.names)]
    estimates += [(n, v, s, s / v) for n, (v, s) in held.items()]  # std of log(value)
    rows = []
    for n, val, s, sd_n in estimates:
        lo, hi = val * np.exp(-1.96 * sd_n), val * np.exp(1.96 * sd_n)  # log-normal interval
        if oe.is_additive(n):  # a centre coordinate, a transducer's offset: either sign
            lo, hi = val - 1.96 * s, val + 1.96 * s
        rows.append(
            {
                "parameter": n,
                "value": float(val),
                "std": float(s),
                "rel_std_percent": float(100 * s / abs(val)) if val else float("inf"),
                "ci95_low": float(lo),
                "ci95_high": float(hi),
                "nominal": float(file_values[n]),
                "stage1": float(start_values[n]),
            }
        )
    return rows


def _write_params(path: Path, name: str, machine: Machine, fit: _Fit, rows, paths, validate):
    """``params.json`` (`jaxmb.io.params_file`): the identified plant, stage 1's and stage 2's
    estimates with their stds, the payload, and where they came from (the logs, their
    conditions, the machine file's digest)."""
    res, stage1 = fit.res, fit.stage1
    params_file.write_params(
        path,
        model_name=name,
        method="output error, multiple shooting",
        model=res.plant.model,
        hydraulics={**_friction_rest(res.plant), **{r["parameter"]: r["value"] for r in rows}},
        payload=None
        if stage1.payload_mass is None
        else {
            "mass": max(fit.values.get("body.payload.mass", stage1.payload_mass), 0.0),
            "com": list(stage1.payload_com),
            "std": stage1.payload_mass_std,
        },  # fmt: skip
        uncertainty={
            **{
                n: {"value": float(v), "std": float(sd_)}
                for n, v, sd_ in zip(stage1.names, stage1.values, stage1.std, strict=True)
            },
            **{r["parameter"]: {"value": r["value"], "std": r["std"]} for r in rows},
        },  # fmt: skip
        source={
            "log": str(paths[0]) if len(paths) == 1 else [str(p) for p in paths],
            "validation": [str(v) for v in validate],
            **fit.conditions,
            params_file.DIGEST: machine.digest(),
        },  # fmt: skip
        covariance=COVARIANCE,
    )


def _method_text(segment_time: float, long_report: dict, bandwidth) -> str:
    """How stage 2 fitted, in words (``summary.json``'s ``method``)."""
    return (
        "output error by multiple shooting (RK4 1 ms, forward-mode Jacobian, "
        f"trust-region least squares), {segment_time:g} s segments, each from the state "
        "fitted to the samples just after its start, each signal weighted by its noise level"
        + (
            f"; refitted on {long_report['segments']} segments of "
            f"{long_report['segment_time_s']:.3g} s, each a chain of "
            f"{long_report['pieces_per_segment']} pieces (long_refit, shooting)"
            if long_report["choice"] == "yes"
            else ""
        )
        + "; covariance: Newey & West's sandwich for residuals correlated in time, Bartlett "
        f"bandwidth {bandwidth} residual samples (identification.newey_west)"
    )


def _pooled_rmse(preds: Mapping[str, dict]) -> dict:
    """Each signal's RMSE over every log's predicted samples (one log: its own)."""
    n = {stem: len(p["t"]) for stem, p in preds.items()}
    signals = next(iter(preds.values()))["rmse"]
    return {
        c: float(np.sqrt(sum(n[k] * p["rmse"][c] ** 2 for k, p in preds.items()) / sum(n.values())))
        for c in signals
    }


COVARIANCE = "covariance.json"


def _write_covariance(path: Path, fit: _Fit, rows: Sequence[dict]) -> None:
    """The parameters' joint covariance (`jaxmb.io.covariance_file`): stage 2's in its log
    space (a centre coordinate linear, in m), the long refit's held parameters with their own
    variances, stage 1's (``mechanics.<name>``, linear, the Laplace approximation's) beside
    them; separate fits, uncorrelated blocks."""
    res, stage1 = fit.res, fit.stage1
    fitted = list(res.names)
    held = list(fit.held)
    scale = np.array([oe.additive_step(n) if oe.is_additive(n) else 1.0 for n in fitted])
    undetermined = [n for n in fitted if not np.isfinite(res.std[n])]
    C2 = np.asarray(res.covariance, float) * np.outer(scale, scale)
    k_u = [fitted.index(n) for n in undetermined]
    C2[k_u, :] = 0.0
    C2[:, k_u] = 0.0
    C_held = np.diag([(s / v) ** 2 for v, s in fit.held.values()])  # std of log(value)
    C = scipy.linalg.block_diag(C2, C_held, np.asarray(stage1.covariance, float))
    if fit.stage1_cross is not None:  # theta's covariance with stage 1's values
        X = np.asarray(fit.stage1_cross, float) * scale[:, None]
        X[k_u, :] = 0.0
        C[: len(fitted), -len(stage1.names) :] = X
        C[-len(stage1.names) :, : len(fitted)] = X.T
    value = {r["parameter"]: r["value"] for r in rows}
    write_covariance(
        path, fitted + held + [f"mechanics.{n}" for n in stage1.names],
        [value[n] for n in fitted + held] + list(stage1.values), C,
        ["linear" if oe.is_additive(n) else "log" for n in fitted] + ["log"] * len(held)
        + ["linear"] * len(stage1.names),
        stage=["output error"] * len(fitted) + ["output error (held by the long refit)"]
        * len(held) + ["mechanics"] * len(stage1.names),
        undetermined=undetermined,
        note="stage 2 (output error) carries stage 1's (mechanics) bodies' uncertainty and "
        "its covariance with them (first order, identification.stage_coupling); the long "
        "refit's held parameters are uncorrelated with both",
    )  # fmt: skip


def validate_log(machine: Machine, fit: _Fit, vlog: Log, vcols: dict, segment_time: float) -> dict:
    """The free-run replay of one validation log by the identified plant under the log's own
    conditions (a payload its sidecar names, 0 kg included, is known: it is not drawn from the
    fit), the file's plant's replay beside it, the RMSE the noise and the parameters'
    covariance lead one to expect (`drift.expected_rmse`) and the segment-wise prediction."""
    vplant_nominal = with_held(_plant_for(machine, vlog, fit.stage1), fit.held, vlog)
    # the replay holds stage 1's bodies at their estimate, with which stage 2's estimate moves
    # together (`stage_coupling`): its drift is theta's spread given them, stage 2's own
    spec, theta, cov = fit.spec, np.array(fit.res.theta), np.array(fit.given_stage1)
    if "payload_kg" in vlog.meta.get("conditions", {}) and "body.payload.mass" in spec.names:
        # its own payload stays as named: not a parameter of this replay (and a named 0 kg
        # has no log-scale reference)
        keep = [k for k, n in enumerate(spec.names) if n != "body.payload.mass"]
        spec = oe.HydraulicParameters([spec.names[k] for k in keep], dict(spec.reference))
        theta, cov = theta[keep], cov[np.ix_(keep, keep)]
    vplant = oe.plant_with(jnp.asarray(theta), vplant_nominal, spec)
    free = oe.predict(vplant, vcols, mode="free", stride=1)  # every sample
    report.refuse_non_finite(free["rmse"], "its free-run replay")
    free0 = oe.predict(_nominal_for(machine, vlog), vcols, mode="free", stride=1)
    return {
        "free": free,
        "free_nominal": free0,
        "expected": drift.expected_rmse(theta, cov, vplant_nominal, spec, vcols, fit.noise),
        "segments": oe.predict(vplant, vcols, segment_time=segment_time)["rmse"],
    }


def _validation_report(out: Path, fit: _Fit, checks: Mapping[str, dict], plant) -> dict:
    """``validation.csv`` and the summary's validation entries of the logs that replayed."""
    kinds = schema_for(plant).kinds
    signals = tuple(fit.noise)
    display = {c: DISPLAY.get(kinds[c], ("", 1.0)) for c in signals}
    fit_pct = {
        stem: {
            tag: {c: report.fit_percent(p["measured"][c], p["predicted"][c]) for c in p["rmse"]}
            for tag, p in (("identified", c_["free"]), ("nominal", c_["free_nominal"]))
        }
        for stem, c_ in checks.items()
    }
    report.write_table(
        out / "validation.csv",
        [
            {
                "log": stem,
                "signal": c,
                "unit": display[c][0],
                "rmse": ch["free"]["rmse"][c] / display[c][1],
                "rmse_nominal": ch["free_nominal"]["rmse"][c] / display[c][1],
                "rmse_expected": ch["expected"][c]["expected_rmse"] / display[c][1],
                "fit_percent": fit_pct[stem]["identified"][c],
                "fit_percent_nominal": fit_pct[stem]["nominal"][c],
            }
            for stem, ch in checks.items()
            for c in signals
        ],
    )
    ratio = {
        stem: {s: c["free"]["rmse"][s] / v["expected_rmse"] for s, v in c["expected"].items()}
        for stem, c in checks.items()
    }
    misfit = {stem: {s: x for s, x in r.items() if x > MISFIT} for stem, r in ratio.items()}
    misfit = {stem: r for stem, r in misfit.items() if r}
    return {
        "validation": "free-run replay of the logged commands from the measured initial state",
        # signals whose replay misses by more than MISFIT times what the noise and the
        # parameters' covariance explain: the model structure does not fit that log
        "model_misfit": misfit,
        "model_misfit_threshold": MISFIT,
        "validation_rmse": {stem: c["free"]["rmse"] for stem, c in checks.items()},
        "validation_rmse_nominal": {stem: c["free_nominal"]["rmse"] for stem, c in checks.items()},
        "validation_fit_percent": {stem: f["identified"] for stem, f in fit_pct.items()},
        "validation_fit_percent_nominal": {stem: f["nominal"] for stem, f in fit_pct.items()},
        # short-horizon: restarts per segment
        "validation_rmse_segments": {stem: c["segments"] for stem, c in checks.items()},
        # what the replay may drift given the parameters' std (first order; `drift`), and
        # the RMSE that with the noise level (residual_scales) leads one to expect
        "validation_drift_std": {
            stem: {s: v["drift_std"] for s, v in c["expected"].items()}
            for stem, c in checks.items()
        },
        "validation_rmse_expected": {
            stem: {s: v["expected_rmse"] for s, v in c["expected"].items()}
            for stem, c in checks.items()
        },
    }


def refined_selectors(plant: HydraulicPlant, stage1: mech.MechanicsEstimate) -> tuple[str, ...]:
    """What a joint refinement of the mechanics fits by output error: the mass of the payload
    (when stage 1 identified it) and of every boom (not the cylinder bodies)."""
    cylinder_bodies = {f"{a}_{k}" for a in plant.actuator_names for k in ("tube", "rod")}
    out = [b for b in stage1.fitted_bodies if b not in cylinder_bodies]
    return tuple(f"body.{b}.mass" for b in out)


def with_held(plant: HydraulicPlant, held: dict, log: Log) -> HydraulicPlant:
    """``plant`` with the parameters that the long refit held at the short fit's values
    (`long_refit.refit_long`'s ``{name: (value, std)}``), but a payload that ``log``'s sidecar
    names: the identified plant's base for replaying ``log``."""
    named = "payload_kg" in log.meta.get("conditions", {})
    keep = {n: v for n, (v, _) in held.items() if not (named and n == "body.payload.mass")}
    return apply_hydraulics(plant, {"hydraulics": keep})


def _nominal_for(machine: Machine, log: Log) -> HydraulicPlant:
    """The file's (unidentified) plant under ``log``'s named payload, if it names one."""
    payload = log.meta.get("conditions", {}).get("payload_kg")
    if machine.payload is None or payload is None:
        return machine.plant
    return machine.with_payload(float(payload))


def _friction_rest(plant: HydraulicPlant) -> dict:
    """The friction leaves that output error does not refit but stage 1 set (static force,
    viscous coefficient), for the parameter file."""
    return {
        f"friction.{a.name}.{k}": float(getattr(a.friction, k))
        for a in plant.actuators
        if isinstance(a.friction, StribeckFriction)
        for k in ("F_s", "sigma")
    }


def _mechanics_report(out: Path, e: mech.MechanicsEstimate) -> dict:
    """``mechanics.csv`` (every stage-1 parameter with std, 95 % interval, the file's value and
    whether the log or the prior determines it), ``base_parameters.csv`` (the base parameters'
    WLS estimates) and the summary entries."""
    z = 1.959963984540054
    rows = [
        {"parameter": n, "value": float(v), "std": float(s), "ci95_low": float(v - z * s),
         "ci95_high": float(v + z * s), "nominal": float(p), "from_log": float(f),
         "determined_by": "log" if f >= mech.DETERMINED else "prior"}
        for n, v, s, p, f in zip(e.names, e.values, e.std, e.nominal, e.from_log, strict=True)
    ]  # fmt: skip
    report.write_table(out / "mechanics.csv", rows)
    ci = e.base_fit.interval(0.95)
    report.write_table(
        out / "base_parameters.csv",
        [
            {"base_parameter": x, "value": float(v), "std": float(s), "ci95_low": float(lo),
             "ci95_high": float(hi)}
            for x, v, s, (lo, hi) in zip(
                e.base.expressions(3), e.base_fit.theta, e.base_fit.std, ci, strict=True
            )
        ],
    )  # fmt: skip
    out_ = {
        "method": "regressor route on the pressure forces: base parameters by WLS (one noise "
        "level per joint), then a physically consistent (log-Cholesky) fit of every body pulled "
        f"toward the file's values (prior weight {e.prior_weight:g}); zero-phase low-pass at "
        f"{e.cutoff_hz:g} Hz on every column, friction laws filtered alike; {e.samples} samples; "
        "std by the Laplace approximation",
        "prior_weight": e.prior_weight,
        "n_base_parameters": e.base.rank,
        "condition_number": e.base_fit.condition,
        "converged": e.converged,
        "rms_residual": dict(zip(e.model.coordinate_names, e.rms_residual, strict=True)),
        "bodies": {
            b.name: {"mass_kg": float(b.mass), "com_m": np.asarray(b.com).tolist()}
            for b in e.model.bodies
        },
        "friction": e.friction,
        "determined_by_prior": list(e.not_determined),
        "weak_directions": e.weak,
    }
    return out_


def _payload_summary(e: mech.MechanicsEstimate, values: dict, stds: dict) -> dict | None:
    """The identified payload for ``summary.json``: mass with std and 95 % interval (stage 1's,
    or stage 2's where the mechanics were refined), the centre where the log determines it,
    and what it does not."""
    if e.payload_mass is None:
        return None
    m, s = e.payload_mass, e.payload_mass_std
    refined = "body.payload.mass" in values
    extra = {}
    if refined:
        # output error's std is conditional on the booms' centres and inertias, which stage 2
        # holds at stage 1's values: the payload is no better known than stage 1 knew them
        m, s_cond = values["body.payload.mass"], stds["body.payload.mass"]
        s = max(s, s_cond)
        extra = {"mass_std_conditional_kg": s_cond}
    return {
        "mass_kg": m,
        "mass_std_kg": s,
        "mass_ci95_kg": [m - 1.96 * s, m + 1.96 * s],
        "com_m": list(e.payload_com),
        "com_std_m": list(e.payload_com_std),
        "not_determined": [f"com_{'xyz'[k]}" for k in range(3) if not e.payload_com_determined[k]],
        **extra,
        "stage1_mass_kg": e.payload_mass,
        "stage1_mass_std_kg": e.payload_mass_std,
        "method": "stage 1 (mechanics): the payload body fitted with the booms, which the "
        "file's values hold by the prior"
        + ("; its mass refined by output error (stage 2)" if refined else ""),
    }
