"""`jaxmb identify` for rigid robots (a URDF, the KR300, the 3-DoF arm), the regressor route
of the main job in four steps a reader follows: read the logs (`read_logs`: each log as recorded
split at its gaps and put on one grid, its payload and forces checked), choose what the user left
open from the data (`choose_settings`: the low-pass cutoff, the Coulomb sign's width), fit
(`rigid.identify_rigid`), and predict and report (`predictions`, `write_report`): the base
parameters with their statistics, their covariance, ``params.json`` and the identified URDF."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jaxmb.identification import report
from jaxmb.identification.coulomb_width import choose_coulomb_width
from jaxmb.identification.cutoff_choice import CANDIDATES, choose_cutoff
from jaxmb.identification.regressor import JOINT_TERMS
from jaxmb.identification.rigid import (
    DEFAULT_TERMS,
    Drives,
    generalized_forces,
    identify_rigid,
    predict_torques,
    unused_drives,
)
from jaxmb.identification.signals import check_cutoff
from jaxmb.io import params_file
from jaxmb.io.covariance_file import write_covariance
from jaxmb.io.log_sampling import check_uniform, sampling_report, uniform_segments, window_option
from jaxmb.io.logs import LogError, read_log, schema_for
from jaxmb.models.catalog import CATALOG
from jaxmb.multibody.model import coordinate_joint_types

__all__ = ["identify_robot", "payload_of", "rigid_options"]


def _rmse(measured: np.ndarray, predicted: np.ndarray, names: Sequence[str]) -> dict:
    err = np.sqrt(np.mean((np.asarray(measured) - np.asarray(predicted)) ** 2, axis=0))
    return {n: float(e) for n, e in zip(names, err, strict=True)}


def _fit_percent(measured: np.ndarray, predicted: np.ndarray, names: Sequence[str]) -> dict:
    """`report.fit_percent` per column."""
    y, yh = np.asarray(measured), np.asarray(predicted)
    return {n: report.fit_percent(y[:, k], yh[:, k]) for k, n in enumerate(names)}


def _as_recorded(log, source: str, cutoff: float, resample: str, dt: float | None = None):
    """``(segments, note)``: a uniform log as its one segment (note None); a log with jittered
    stamps or gaps split at every gap longer than a tenth of the ``cutoff``'s period (and two
    median intervals) and put on a uniform grid of interval ``dt`` (default its median) piece
    by piece (`jaxmb.io.log_sampling.uniform_segments`; pieces shorter than four of the cutoff's edge trims
    dropped), or refused with ``resample="off"``. With the cutoff chosen from the motion,
    ``cutoff`` is 10 Hz here."""
    rep = sampling_report(log)
    if rep.uniform:
        return (log,), None
    if resample == "off":
        check_uniform(log, source, advice="drop --resample off: the regressor route splits such "
                      "a log at its gaps and resamples each piece itself (--resample auto, the "
                      "default), or fit a --window without the gap")  # fmt: skip
    try:
        us = uniform_segments(log, max_gap=max(2 * rep.dt, 0.1 / cutoff), min_duration=12 / cutoff,
                              dt=dt)  # fmt: skip
    except LogError as err:
        raise LogError(f"{source}: {err}") from None
    return us.segments, us.note


def _fit_grid(logs: dict) -> float | None:
    """The one sampling interval of the fit logs, which are fitted as one set of equations:
    that of the uniform ones (which must agree), else the median of the jittered ones' medians
    (each within 5 % of it; a jittered log is resampled onto it). Refuses logs of different
    rates, naming them; None for one log."""
    if len(logs) < 2:
        return None
    reps = {Path(p).name: sampling_report(lg) for p, lg in logs.items()}
    uniform = {k: r.dt for k, r in reps.items() if r.uniform}
    dt = (
        next(iter(uniform.values())) if uniform else float(np.median([r.dt for r in reps.values()]))
    )
    for k, r in reps.items():
        tol = 1e-6 if r.uniform else 0.05
        if abs(r.dt - dt) > tol * dt:
            raise ValueError(
                "fit logs sampled at different rates: "
                + ", ".join(f"{k} {1 / r.dt:.10g} Hz" for k, r in reps.items())
                + "; logs fitted together must share one (put them on one grid first, or fit "
                "them apart)"
            )
    return dt


def _check_samples(segments: dict, log_paths, cutoff: float, how: str = "given") -> None:
    """Refuse a log that leaves no sample at ``cutoff``, by its length: at least one of its
    gap-free pieces must be longer than the two ``3 / cutoff`` edges the zero-phase filter
    trims. ``how`` the cutoff came: "given" (``--cutoff``), "chosen" (by the default rule
    from the fit logs' motion) or "highest" (the highest the rule may choose, so a log
    refused is too short for any)."""
    edge = 3.0 / cutoff
    for p in log_paths:
        piece = max(segments[p], key=lambda seg: float(seg.t[-1] - seg.t[0]))
        longest = float(piece.t[-1] - piece.t[0])
        if longest > 2 * edge:
            continue
        fs = (piece.t.size - 1) / longest if longest > 0 else float("nan")
        at_least = f" (at least {int(np.floor(2 * edge * fs)) + 2} samples)" if fs > 0 else ""
        need = f"{2 * edge:.3g} s{at_least}"
        said = {
            "given": f"the --cutoff {cutoff:g} Hz low-pass",
            "chosen": f"the {cutoff:g} Hz low-pass the fit logs' motion chose",
            "highest": f"the low-pass even at its highest cutoff ({cutoff:g} Hz)",
        }[how]
        advice = {
            "given": "a longer log, or a higher --cutoff",
            "chosen": "a longer log, or a higher --cutoff than the one chosen",
            "highest": "a longer log (tens of seconds of motion)",
        }[how]
        raise ValueError(
            f"{Path(p).name}: too short to identify: its longest gap-free stretch is "
            f"{longest:.3g} s ({piece.t.size} samples), and {said} trims {edge:.3g} s at both "
            f"ends, so a stretch must be longer than {need}; {advice}"
        )


def _sampling_line(source: str, note: dict) -> str:
    """One line for stderr: what a log as recorded had, and what was done."""
    gaps = note["gaps"]
    found = [f"time stamps jittered by up to {note['jitter_s'] * 1e3:.3g} ms"
             if note["resampled"] else "uniform time stamps"]  # fmt: skip
    if gaps:
        found.append(f"{len(gaps)} gap(s) (" + ", ".join(
            f"{b - a:.3g} s at t = {a:.6g} s" for a, b in gaps) + ")")  # fmt: skip
    done = f"{len(note['segments'])} gap-free segment(s) filtered each on its own"
    if note["resampled"]:
        done += f", put on a {note['dt'] * 1e3:.4g} ms grid (cubic), never across a gap"
    if note["dropped"]:
        done += f"; {len(note['dropped'])} piece(s) too short to keep dropped"
    return f"{source}: {', '.join(found)}: {done}"


def payload_of(log, model, source: str):
    """The known payload of a log's sidecar ``conditions`` (`rigid.Payload`): ``payload_kg``,
    ``payload_com`` (m, default the frame's origin) and ``payload_frame`` (default, where every
    body lies on one chain, the frame of the last body, the tool end); None without ``payload_kg`` or with
    0 kg. Refuses, naming the sidecar key, what is not a load on the model."""
    from jaxmb.identification.rigid import Payload

    cond = log.meta.get("conditions", {}) or {}
    where = f"{source}: sidecar conditions"
    if not isinstance(cond, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(cond).__name__}")
    if "payload_kg" not in cond:
        stray = [k for k in ("payload_com", "payload_frame") if k in cond]
        if stray:
            raise ValueError(f"{where}: {stray} given without payload_kg")
        return None
    m = cond["payload_kg"]
    if isinstance(m, bool) or not isinstance(m, int | float) or not 0 <= m < np.inf:
        raise ValueError(f"{where}.payload_kg: expected a mass >= 0 kg, got {m!r}")
    com = cond.get("payload_com", [0.0, 0.0, 0.0])
    if (not isinstance(com, list) or len(com) != 3
            or not all(isinstance(x, int | float) and np.isfinite(x) for x in com)):  # fmt: skip
        raise ValueError(f"{where}.payload_com: expected [x, y, z] in m, got {com!r}")
    frames = [f.name for f in model.frames]
    parent = {f.name: f.parent for f in model.frames}
    tool, chain = model.bodies[-1].frame, set()
    while tool in parent:  # the last body's frame and its ancestors
        chain.add(tool)
        tool = parent[tool]
    serial = all(b.frame in chain for b in model.bodies)  # every body on one chain
    if "payload_frame" not in cond and not serial:
        raise ValueError(f"{where}.payload_frame: needed, as the model's bodies branch (no one "
                         f"tool end); expected one of its frames {frames}")  # fmt: skip
    frame = cond.get("payload_frame", model.bodies[-1].frame)
    if frame not in frames:
        raise ValueError(f"{where}.payload_frame: expected one of the model's frames {frames}, "
                         f"got {frame!r}")  # fmt: skip
    return Payload(float(m), np.asarray(com, dtype=float), frame) if m > 0 else None


@dataclass(frozen=True)
class RobotLogs:
    """The logs of one identification, read and checked before anything is fitted.

    Attributes:
        fit: each fit log by its path, in its ``--window``.
        validation: each ``--validate`` log by its path, whole.
        segments: each log's gap-free pieces on a uniform grid (`_as_recorded`).
        payloads: each log's known payload (`payload_of`), or None.
        sampling: by log stem, what its time stamps had and what was done (logs as recorded).
    """

    fit: dict
    validation: dict
    segments: dict
    payloads: dict
    sampling: dict

    def all(self):
        """``(path, log)`` of the fit logs, then the validation logs."""
        return (*self.fit.items(), *self.validation.items())


def read_logs(model, log_paths, validate, options: dict, window, resample: str,
              user_drives: bool) -> RobotLogs:  # fmt: skip
    """Read every log, fit and validation, and check it before any fit: its columns against
    the model's schema, a given cutoff against its sampling, its payload and its forces; each
    log split at its gaps and put on one grid (`_as_recorded`, `_fit_grid`)."""
    schema = schema_for(model)
    required = tuple(model.coordinate_names)  # forces: tau_, tau_motor_ or i_ (rigid.Drives)
    fit = {p: read_log(p, schema, required=required) for p in log_paths}
    validation = {v: read_log(v, schema, required=required) for v in validate}
    given = options["cutoff"]
    for path, lg in (*fit.items(), *validation.items()):
        if given is not None:
            check_cutoff(given, lg.t, Path(path).name)
    fit = {p: window_option(lg, window, Path(p).name) for p, lg in fit.items()}
    reference = 10.0 if given is None else given  # what gaps and short pieces are judged by
    grid = _fit_grid(fit)
    segments, sampling, payloads = {}, {}, {}
    for path, lg in (*fit.items(), *validation.items()):  # the fit's window, the whole of others
        payloads[path] = payload_of(lg, model, Path(path).name)
        segments[path], note = _as_recorded(lg, Path(path).name, reference, resample,
                                            grid if path in fit else None)  # fmt: skip
        if note is not None:
            sampling[Path(path).stem] = note
            print(f"jaxmb identify: {_sampling_line(Path(path).name, note)}", file=sys.stderr)
        try:  # every log's forces, before the fit: a --validate log's too
            generalized_forces(lg, model.coordinate_names, options.get("drives"))
        except ValueError as err:
            raise ValueError(f"{Path(path).name}: {err}") from None
    if user_drives:  # a constant no column of the fit logs needs is said to be ignored, once
        for path, lg in fit.items():
            unused = unused_drives(lg, model.coordinate_names, options["drives"])
            if unused:
                print(f"jaxmb identify: {'; '.join(unused)} (in {Path(path).name})",
                      file=sys.stderr)  # fmt: skip
                break
    return RobotLogs(fit, validation, segments, payloads, sampling)


def _fit_set(logs: RobotLogs, log_paths):
    """``(segments, experiment labels, payloads)`` of the fit: one experiment per log, with
    its own noise levels."""
    segments, labels, carried = [], [], []
    for k, p in enumerate(log_paths):
        segments += logs.segments[p]
        labels += [k] * len(logs.segments[p])
        carried += [logs.payloads[p]] * len(logs.segments[p])
    return segments, labels, carried


def choose_settings(model, logs: RobotLogs, log_paths, validate, options: dict):
    """``(options, cutoff choice, width choice)``: what the user left open chosen from the fit
    logs, each choice a dict for the summary (None where given). The cutoff below 0.4 of the
    lowest rate of every log it will filter (`cutoff_choice`); the Coulomb sign trusted where
    qd stands above its noise (`coulomb_width`). Refuses a log too short for the cutoff, by
    its length."""
    segments, _, _ = _fit_set(logs, log_paths)
    chosen = options["cutoff"] is None
    choice = width = None
    if chosen:
        fs = min(1.0 / sampling_report(lg).dt for _, lg in logs.all())
        highest = max((c for c in CANDIDATES if c < 0.4 * fs), default=max(CANDIDATES))
        _check_samples(logs.segments, log_paths, highest, "highest")
        choice = choose_cutoff(segments, model.coordinate_names, fs=fs)
        options = {**options, "cutoff": choice["cutoff_hz"]}
        for path, lg in logs.all():
            check_cutoff(options["cutoff"], lg.t, Path(path).name)
    _check_samples(logs.segments, [*log_paths, *validate], options["cutoff"],
                   "chosen" if chosen else "given")  # fmt: skip
    if options.get("coulomb_width") is None:
        width = choose_coulomb_width(segments, model.coordinate_names, options["cutoff"])
        options = {**options, "coulomb_width": width["coulomb_width"]}
        print(f"jaxmb identify: Coulomb sign's width {width['coulomb_width']:.3g} rad/s (m/s on a "
              f"prismatic joint; one for every coordinate), {width['rule']}"
              + (f"; {width['note']}" if "note" in width else ""), file=sys.stderr)  # fmt: skip
    return options, choice, width


def predictions(res, model, logs: RobotLogs, log_paths, validate, cutoff, edge, progress):
    """The identified model's torques against the measured ones: the fit logs' RMSE (all
    together and per log), each validation log's RMSE and fit % within the filter's trimmed
    edges and on every sample, and the series the plots draw."""
    cols = [f"tau_{c}" for c in model.coordinate_names]

    def predict(path, edge):
        segs = logs.segments[path]
        return predict_torques(res, segs, cutoff=cutoff, edge=edge,
                               payloads=[logs.payloads[path]] * len(segs))  # fmt: skip

    series, per_log, measured, predicted, n_samples = {}, {}, [], [], 0
    for p in log_paths:
        s, tau_hat = predict(p, edge)
        per_log[Path(p).stem] = _rmse(s.at("tau"), tau_hat, cols)
        series[("fit", Path(p).stem)] = (s, tau_hat)
        measured.append(s.at("tau"))
        predicted.append(tau_hat)
        n_samples += s.index.size
    validation, validation_fit, every = {}, {}, {}
    for v in validate:
        progress(f"validating on {Path(v).name}")
        vs, vtau = predict(v, edge)
        validation[Path(v).stem] = _rmse(vs.at("tau"), vtau, cols)
        # and on every sample: the filter's derivatives are poorest within ~ 1 / cutoff of the
        # ends (trimmed above, as in the fit), where a robot often stands still
        es, etau = predict(v, 0.0)
        every[Path(v).stem] = _rmse(es.at("tau"), etau, cols)
        validation_fit[Path(v).stem] = _fit_percent(vs.at("tau"), vtau, cols)
        series[("validation", Path(v).stem)] = (vs, vtau)
    return {
        "samples": int(n_samples),
        "fit_rmse": _rmse(np.concatenate(measured), np.concatenate(predicted), cols),
        "fit_rmse_per_log": per_log,
        "validation_rmse": validation,
        "validation_fit_percent": validation_fit,
        "validation_rmse_every_sample": every,
    }, series


def write_report(out: Path, name, model, res, log_paths, validate, series, urdf_source) -> dict:
    """Write ``parameters.csv`` (the base parameters with std and 95 % interval), their
    ``covariance.json``, ``params.json``, the torque plots and the identified URDF; returns
    the summary's ``plots`` and ``urdf``. Refuses a non-finite estimate before writing."""
    fit = res.fit
    names = res.base.expressions()
    report.refuse_non_finite(dict(zip(names, fit.theta, strict=True)), "the base parameters")
    std = dict(zip(names, fit.std, strict=True))
    report.refuse_non_finite(std, "the base parameters' std", allow_inf=True)
    out.mkdir(parents=True, exist_ok=True)
    ci = fit.interval(0.95)
    rows = [
        {
            "parameter": e,
            "value": float(th),
            "std": float(sd),
            "rel_std_percent": float(r),
            "ci95_low": float(lo),
            "ci95_high": float(hi),
        }
        for e, th, sd, r, (lo, hi) in zip(
            names, fit.theta, fit.std, fit.relative_std, ci, strict=True
        )
    ]
    report.write_table(out / "parameters.csv", rows)
    uncertainty = {r["parameter"]: {"value": r["value"], "std": r["std"]} for r in rows}
    # the base parameters' joint covariance (the filtered noise's sandwich), linear
    write_covariance(
        out / "covariance.json", names, fit.theta, fit.cov, ["linear"] * len(names),
        note="base parameters (WLS), their covariance for the low-passed noise "
        "(rigid.filtered_noise_covariance)",
    )  # fmt: skip
    params_file.write_params(
        out / "params.json",
        model_name=name,
        method=res.method,
        model=res.model,
        joints=res.joint,
        joint_model={
            "terms": list(res.terms),
            "coulomb_width": res.coulomb_width,
            "stribeck_velocity": res.stribeck_velocity,
        },
        forces=res.scales,
        uncertainty=uncertainty,
        source={"log": _one_or_list(log_paths), "validation": [str(v) for v in validate]},
        covariance="covariance.json",
    )
    plots = report.torque_plots(out, series, coordinate_joint_types(model))
    urdf = _write_urdf(out / "identified.urdf", name, model, res, urdf_source, log_paths)
    return {"plots": plots, "urdf": urdf}


_METHODS = {
    "consistent": "base-parameter WLS, then a physically consistent (log-Cholesky) fit",
    "wls": "base-parameter WLS (one noise level per joint)",
    "ols": "base-parameter OLS",
}


def identify_robot(name, model, log_paths, out, validate, options, progress, window=None, *,
                   user_drives: bool = False, urdf_source=None, resample: str = "auto",
                   given: frozenset = frozenset()) -> dict:  # fmt: skip
    """The regressor route of `jaxmb identify` (module docstring): read, choose, fit, predict,
    report; returns the summary's route part. ``options`` are `rigid.identify_rigid`'s
    (`rigid_options`), ``given`` the settings the user gave."""
    logs = read_logs(model, log_paths, validate, options, window, resample, user_drives)
    chosen_cutoff = options["cutoff"] is None
    options, choice, width = choose_settings(model, logs, log_paths, validate, options)
    progress("identifying (regressor route)")
    segments, labels, carried = _fit_set(logs, log_paths)
    res = identify_rigid(model, segments, payloads=carried, experiments=labels, **options)
    cutoff, edge = options.get("cutoff", 10.0), options.get("edge")
    predicted, series = predictions(res, model, logs, log_paths, validate, cutoff, edge, progress)
    noise = {}
    if res.method != "ols":  # WLS's weights: each log's filtered residual RMS per joint
        cols = [f"tau_{c}" for c in model.coordinate_names]
        sig = np.asarray(res.fit.row_sigma).reshape(len(log_paths), model.n)
        noise = {Path(p).stem: dict(zip(cols, map(float, sig[k]), strict=True))
                 for k, p in enumerate(log_paths)}  # fmt: skip
    carried_by = {Path(p).stem: {"mass_kg": c.mass, "com_m": c.com.tolist(), "frame": c.frame}
                  for p, c in logs.payloads.items() if c is not None}  # fmt: skip
    progress("writing the report")
    written = write_report(out, name, model, res, log_paths, validate, series, urdf_source)
    chosen = (*(("cutoff",) if chosen_cutoff else ()), *(("coulomb_width",) if width else ()))
    return {
        "route": "regressor",
        "method": _METHODS[res.method],
        "method_key": res.method,
        "known_forces": list(res.known_forces),
        "cutoff_hz": cutoff,
        "cutoff_choice": choice,
        "coulomb_width_choice": width,
        "settings": _settings(options, given, chosen=chosen),
        "condition_number": res.fit.condition,
        "n_base_parameters": res.base.rank,
        "n_standard_parameters": len(res.names),
        "unidentifiable": list(res.base.unidentifiable),
        "weak_directions": res.weak,
        "physically_consistent": res.consistent,
        "samples": predicted["samples"],
        "sampling": logs.sampling,
        "fit_rmse": predicted["fit_rmse"],
        "fit_rmse_per_log": predicted["fit_rmse_per_log"],
        "wls_sigma_per_log": noise,
        "payloads": carried_by,
        "validation_rmse": predicted["validation_rmse"],
        "validation_fit_percent": predicted["validation_fit_percent"],
        "validation_rmse_every_sample": predicted["validation_rmse_every_sample"],
        "validation_edge_s": 3.0 / cutoff if edge is None else edge,
        **written,
    }


def rigid_options(name, model, model_arg: str, *, method, cutoff, stride, terms, prior_weight,
                  coulomb_width, drives) -> tuple[dict, frozenset]:  # fmt: skip
    """``(options, given)``: `rigid.identify_rigid`'s options from the command's, the defaults
    filled in (the method "consistent", `DEFAULT_TERMS`, stride 1, prior weight 0.1; the cutoff
    and the Coulomb width left None, to be chosen from the data), a built-in model's known
    forces and drives added; ``given`` the settings the user gave. Refuses unknown terms and
    drives of coordinates the model lacks."""
    if drives is not None:
        _check_drives(drives, model.coordinate_names)
    unknown = [t for t in (terms or ()) if t not in JOINT_TERMS]
    if unknown:
        raise ValueError(
            f"--terms: unknown term(s) {unknown}; expected some of {list(JOINT_TERMS)}, "
            "comma separated"
        )
    options = dict(
        method=method or "consistent", cutoff=cutoff,
        stride=stride or 1, terms=DEFAULT_TERMS if terms is None else tuple(terms),
        prior_weight=0.1 if prior_weight is None else prior_weight,
        coulomb_width=coulomb_width,
    )  # fmt: skip
    entry = CATALOG.get(name)  # a built-in name, or a URDF named after one
    if entry is not None and entry.known_forces is not None:
        options["known_forces"] = entry.known_forces()
    if drives is not None:
        options["drives"] = drives
    elif entry is not None and entry.gear_ratios is not None:
        options["drives"] = Drives(gear_ratio=entry.gear_ratios())
    given = frozenset(k for k, v in (
        ("method", method), ("cutoff", cutoff), ("coulomb_width", coulomb_width),
        ("stride", stride), ("terms", terms), ("prior_weight", prior_weight)) if v is not None)  # fmt: skip
    return options, given


# Why a setting the user did not give has its value (summary.json's "settings")
_DEFAULT_WHY = {
    "method": "the physically consistent fit: a model that simulates",
    "stride": "every filtered sample",
    "terms": "armature, viscous, Coulomb, offset: Stribeck terms measured no gain on the KR300, "
    "and blocked cross-validation inside a log chose terms and prior weights that predicted "
    "other logs worse (docs/identification.md)",
    "prior_weight": "a light pull toward the model's own inertias (docs/identification.md)",
}


def _settings(options: dict, given: frozenset, chosen: Sequence[str]) -> dict:
    """Each regressor-route setting: its value and whether it was given, chosen from the data
    or a default (with why)."""
    out = {}
    for key in ("method", "cutoff", "coulomb_width", "stride", "terms", "prior_weight"):
        value = options.get(key)
        value = list(value) if isinstance(value, tuple) else value
        if key in given:
            out[key] = {"value": value, "source": "given"}
        elif key in chosen:
            out[key] = {"value": value, "source": "chosen from the data", "why": f"{key}_choice"}
        else:
            out[key] = {"value": value, "source": "default", "why": _DEFAULT_WHY[key]}
    return out


def _limits(name: str) -> dict:
    """A built-in model's joint limits (`jaxmb.models.catalog.Builtin.limits`), else none."""
    entry = CATALOG.get(name)
    return entry.limits() if entry is not None and entry.limits is not None else {}


def _one_or_list(paths):
    """A path as a string, several as a list of strings."""
    return str(paths[0]) if len(paths) == 1 else [str(p) for p in paths]


def _write_urdf(path: Path, name, prior, res, urdf_source, log_paths) -> dict:
    """The identified model as a URDF (`jaxmb.io.urdf_write`): a copy of the input URDF, or
    of the built-in model written as one, with the identified bodies and joint terms. Only a
    physically consistent fit is a model to write; ``{"file": ..., "not_in_file": ...}`` or
    ``{"file": None, "why": ...}`` for the summary."""
    from jaxmb.io.urdf_write import model_urdf, with_parameters

    bad = [b for b, ok in res.consistent.items() if not ok]
    if res.method != "consistent" or bad:
        why = (
            f"method {res.method!r} fits base parameters, which are not a physical model"
            if res.method != "consistent"
            else f"bodies {bad} are not physically realisable"
        )
        return {"file": None, "why": why + "; no URDF written (use --method consistent)"}  # fmt: skip
    try:
        source = (Path(urdf_source).read_bytes() if urdf_source is not None
                  else model_urdf(prior, name=name, limits=_limits(name)))  # fmt: skip
    except ValueError as err:  # closed loops: no URDF describes the model
        return {"file": None, "why": f"{err}; no URDF written"}
    not_in_file = {}
    if res.known_forces or res.scales:
        not_in_file["forces"] = (
            "generalized forces outside the rigid-body model, not in the URDF: "
            + ", ".join(
                [
                    *(f"{k} (known)" for k in res.known_forces),
                    *(f"{k} (scale {v:.6g})" for k, v in res.scales.items()),
                ]
            )  # fmt: skip
        )
    gear = res.drives.gear_ratio if res.drives is not None else {}
    notes = {
        "jaxmb identify": f"physically consistent fit of "
        f"{', '.join(Path(p).name for p in log_paths)}; inertias, "
        "damping (viscous), friction (Coulomb) and transmission rotor inertia (armature) "
        "identified",
        **not_in_file,
    }
    path.write_text(with_parameters(source, res.model, res.joint, gear_ratio=gear, notes=notes))
    return {"file": path.name, "not_in_file": list(not_in_file.values())}


def _check_drives(drives, coordinates: Sequence[str]) -> None:
    """Refuse gear ratios or torque constants for coordinates the model does not have."""
    for what, d in (
        ("gear-ratios", drives.gear_ratio),
        ("torque-constants", drives.torque_constant),
    ):
        unknown = sorted(set(d) - set(coordinates))
        if unknown:
            raise ValueError(
                f"--{what}: unknown coordinate(s) {unknown}; the model's coordinates are "
                f"{list(coordinates)}"
            )
