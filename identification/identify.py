"""`jaxmb identify`: the main job. A log in, a model users can trust out.

``identify(log, model, out)`` picks the route from the model:

- a mechanical model (the 3-DoF arm, the KR300, any URDF) with a log of positions and generalized
  forces: the regressor route (`rigid.identify_rigid`): base parameters by weighted least
  squares, then a physically consistent model;
- a hydraulic machine (a machine file, `jaxmb.io.machine`; the built-in crane is one) with
  a log of positions, pressures and valve commands: the output-error route (`hydraulic_route`),
  hydraulic parameters by multiple shooting through the simulation, validated by free-run
  replay.

It writes into ``out``: ``summary.json`` (``fit_rmse``, ``validation_rmse`` per log, the method,
the condition number, ...), ``parameters.csv`` (estimates with standard deviations and 95 %
intervals), ``params.json`` (the identified model, `params_file`; `jaxmb simulate --params`
loads it) and PNG plots of fit, validation and residuals.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import numpy as np

from jaxmb.identification import fit_progress, report
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
from jaxmb.io.machine import load_machine
from jaxmb.models.catalog import CATALOG
from jaxmb.multibody.model import coordinate_joint_types

__all__ = ["resolve_model", "identify"]


def _identifiable() -> list[str]:
    return sorted(k for k, e in CATALOG.items() if e.identify)


def resolve_model(name_or_path: str):
    """``(name, model or machine, route)`` for a built-in name, a URDF path (the regressor
    route) or a machine file (``.toml``, `jaxmb.io.machine`: the hydraulic route)."""
    entry = CATALOG.get(name_or_path)
    if entry is not None and entry.identify:
        return name_or_path, entry.load(), "hydraulic" if entry.hydraulic else "rigid"
    path = Path(name_or_path)
    if path.suffix.lower() in (".urdf", ".toml"):
        if not path.is_file():
            raise ValueError(f"--model: no such file {str(path)!r}")
        if path.suffix.lower() == ".toml":
            machine = load_machine(path)
            return machine.name, machine, "hydraulic"
        from jaxmb.io.urdf import load_urdf

        return path.stem, load_urdf(path), "rigid"
    raise ValueError(
        f"--model: expected one of {_identifiable()}, a URDF (.urdf) or a machine file (.toml), "
        f"got {name_or_path!r}"
    )


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


def _payload(log, model, source: str):
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


def _identify_rigid(name, model, log_paths, out, validate, options, progress, window=None, *,
                    user_drives: bool = False, urdf_source=None, resample: str = "auto",
                    given: frozenset = frozenset()):  # fmt: skip
    schema = schema_for(model)
    required = tuple(model.coordinate_names)  # forces: tau_, tau_motor_ or i_ (rigid.Drives)
    logs = {p: read_log(p, schema, required=required) for p in log_paths}
    vlogs = {v: read_log(v, schema, required=required) for v in validate}  # all checked first
    chosen = options["cutoff"] is None  # chosen from the fit logs' motion, below
    for path, lg in (*logs.items(), *vlogs.items()):
        if not chosen:
            check_cutoff(options["cutoff"], lg.t, Path(path).name)
    logs = {p: window_option(lg, window, Path(p).name) for p, lg in logs.items()}
    reference = 10.0 if chosen else options["cutoff"]  # what gaps and short pieces are judged by
    grid = _fit_grid(logs)
    segments, sampling, payloads = {}, {}, {}
    for path, lg in (*logs.items(), *vlogs.items()):  # the fit's window, the whole of others
        payloads[path] = _payload(lg, model, Path(path).name)
        segments[path], note = _as_recorded(lg, Path(path).name, reference, resample,
                                            grid if path in logs else None)  # fmt: skip
        if note is not None:
            sampling[Path(path).stem] = note
            print(f"jaxmb identify: {_sampling_line(Path(path).name, note)}", file=sys.stderr)
        try:  # every log's forces, before the fit: a --validate log's too
            generalized_forces(lg, model.coordinate_names, options.get("drives"))
        except ValueError as err:
            raise ValueError(f"{Path(path).name}: {err}") from None
    if user_drives:  # a constant no column of the fit logs needs is said to be ignored, once
        for path, lg in logs.items():
            unused = unused_drives(lg, model.coordinate_names, options["drives"])
            if unused:
                print(f"jaxmb identify: {'; '.join(unused)} (in {Path(path).name})",
                      file=sys.stderr)  # fmt: skip
                break
    fit_segments, labels, carried = [], [], []
    for k, p in enumerate(log_paths):  # one experiment per log: its own noise levels
        fit_segments += segments[p]
        labels += [k] * len(segments[p])
        carried += [payloads[p]] * len(segments[p])
    choice = None
    if chosen:  # below 0.4 of the lowest rate of every log it will filter
        fs = min(1.0 / sampling_report(lg).dt for lg in (*logs.values(), *vlogs.values()))
        highest = max((c for c in CANDIDATES if c < 0.4 * fs), default=max(CANDIDATES))
        _check_samples(segments, log_paths, highest, "highest")
        choice = choose_cutoff(fit_segments, model.coordinate_names, fs=fs)
        options = {**options, "cutoff": choice["cutoff_hz"]}
        for path, lg in (*logs.items(), *vlogs.items()):
            check_cutoff(options["cutoff"], lg.t, Path(path).name)
    _check_samples(segments, [*log_paths, *validate], options["cutoff"],
                   "chosen" if chosen else "given")  # fmt: skip
    width = None
    if options.get("coulomb_width") is None:  # the sign trusted where qd stands above its noise
        width = choose_coulomb_width(fit_segments, model.coordinate_names, options["cutoff"])
        options = {**options, "coulomb_width": width["coulomb_width"]}
        print(f"jaxmb identify: Coulomb sign's width {width['coulomb_width']:.3g} rad/s (m/s on a "
              f"prismatic joint; one for every coordinate), {width['rule']}"
              + (f"; {width['note']}" if "note" in width else ""), file=sys.stderr)  # fmt: skip
    progress("identifying (regressor route)")
    res = identify_rigid(model, fit_segments, payloads=carried, experiments=labels, **options)
    cutoff, edge = options.get("cutoff", 10.0), options.get("edge")
    cols = [f"tau_{c}" for c in model.coordinate_names]
    series, fit_rmse, per_log, measured, predicted, n_samples = {}, {}, {}, [], [], 0
    for p in log_paths:
        s, tau_hat = predict_torques(res, segments[p], cutoff=cutoff, edge=edge,
                                     payloads=[payloads[p]] * len(segments[p]))  # fmt: skip
        per_log[Path(p).stem] = _rmse(s.at("tau"), tau_hat, cols)
        series[("fit", Path(p).stem)] = (s, tau_hat)
        measured.append(s.at("tau"))
        predicted.append(tau_hat)
        n_samples += s.index.size
    fit_rmse = _rmse(np.concatenate(measured), np.concatenate(predicted), cols)
    validation, validation_fit, every = {}, {}, {}
    for v in validate:
        progress(f"validating on {Path(v).name}")
        vs, vtau = predict_torques(res, segments[v], cutoff=cutoff, edge=edge,
                                   payloads=[payloads[v]] * len(segments[v]))  # fmt: skip
        validation[Path(v).stem] = _rmse(vs.at("tau"), vtau, cols)
        # and on every sample: the filter's derivatives are poorest within ~ 1 / cutoff of the
        # ends (trimmed above, as in the fit), where a robot often stands still
        es, etau = predict_torques(res, segments[v], cutoff=cutoff, edge=0.0,
                                   payloads=[payloads[v]] * len(segments[v]))  # fmt: skip
        every[Path(v).stem] = _rmse(es.at("tau"), etau, cols)
        validation_fit[Path(v).stem] = _fit_percent(vs.at("tau"), vtau, cols)
        series[("validation", Path(v).stem)] = (vs, vtau)
    noise = {}
    if res.method != "ols":  # WLS's weights: each log's filtered residual RMS per joint
        sig = np.asarray(res.fit.row_sigma).reshape(len(log_paths), model.n)
        noise = {Path(p).stem: dict(zip(cols, map(float, sig[k]), strict=True))
                 for k, p in enumerate(log_paths)}  # fmt: skip
    carried_by = {Path(p).stem: {"mass_kg": c.mass, "com_m": c.com.tolist(), "frame": c.frame}
                  for p, c in payloads.items() if c is not None}  # fmt: skip
    progress("writing the report")
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
            res.base.expressions(), fit.theta, fit.std, fit.relative_std, ci, strict=True
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
    return {
        "route": "regressor",
        "method": {
            "consistent": "base-parameter WLS, then a physically consistent (log-Cholesky) fit",
            "wls": "base-parameter WLS (one noise level per joint)",
            "ols": "base-parameter OLS",
        }[res.method],
        "method_key": res.method,
        "known_forces": list(res.known_forces),
        "cutoff_hz": cutoff,
        "cutoff_choice": choice,
        "coulomb_width_choice": width,
        "settings": _settings(
            options,
            given,
            chosen=(*(("cutoff",) if chosen else ()), *(("coulomb_width",) if width else ())),
        ),
        "condition_number": fit.condition,
        "n_base_parameters": res.base.rank,
        "n_standard_parameters": len(res.names),
        "unidentifiable": list(res.base.unidentifiable),
        "weak_directions": res.weak,
        "physically_consistent": res.consistent,
        "samples": int(n_samples),
        "sampling": sampling,
        "fit_rmse": fit_rmse,
        "fit_rmse_per_log": per_log,
        "wls_sigma_per_log": noise,
        "payloads": carried_by,
        "validation_rmse": validation,
        "validation_fit_percent": validation_fit,
        "validation_rmse_every_sample": every,
        "validation_edge_s": 3.0 / cutoff if edge is None else edge,
        "plots": plots,
        "urdf": urdf,
    }


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


def identify(
    log_path,
    model: str,
    out,
    *,
    validate: Sequence[str] = (),
    method: str | None = None,
    cutoff: float | None = None,
    stride: int | None = None,
    terms: Sequence[str] | None = None,
    prior_weight: float | None = None,
    coulomb_width: float | None = None,
    window: tuple[float, float] | None = None,
    resample: str | None = None,
    drives=None,
    leakage: str | None = None,
    mechanics: str = "auto",
    valve_effects: str = "auto",
    offsets: str = "auto",
    encoder_offsets: str = "auto",
    segment_time: float | None = None,
    long_refit: str = "auto",
    show_progress: bool = True,
) -> dict:
    """Run the pipeline and write the report into ``out``; returns ``summary.json``'s content.

    ``method``, ``terms``, ``coulomb_width`` and ``drives`` are the regressor route's (a rigid
    robot; default "consistent", `DEFAULT_TERMS`, the width chosen from the velocity's noise
    (`coulomb_width`), the model's own drives); ``leakage``, ``segment_time``, ``mechanics``,
    ``valve_effects``, ``offsets``, ``encoder_offsets`` and ``long_refit`` a hydraulic
    machine's. An option given
    for the other route is refused.
    ``cutoff`` and ``stride`` (the low-pass and decimation of the regressor equations) apply to
    both: for a robot, the cutoff chosen from the motion (`cutoff_choice`) and stride 1;
    `mechanics.CUTOFF` and 10 for a hydraulic machine's stage 1. ``log_path`` may be several
    logs (a robot's experiments, each with its own payload and noise levels, fitted
    together; a hydraulic machine's campaign, `campaign`); logs are told apart by their
    file stems, so two logs, fitted or validated, may not share one."""
    from tqdm.auto import tqdm

    paths = [log_path] if isinstance(log_path, str | Path) else list(log_path)
    if not paths:
        raise ValueError("identify: no log given")
    stems = [Path(p).stem for p in (*paths, *validate)]
    twice = sorted({st for st in stems if stems.count(st) > 1})
    if twice:
        raise ValueError(f"logs {twice}: given twice, or two files of one name; the report tells "
                         "logs apart by their names, so their rows would mix")  # fmt: skip
    t0 = time.perf_counter()
    out = Path(out)  # made by the route once every input has passed its checks

    def write_summary(part: dict) -> dict:
        summary = {
            "model": name,
            "log": _one_or_list(paths),
            "validation_logs": [str(v) for v in validate],
            **part,
            "params_file": "params.json",
            "time_s": time.perf_counter() - t0,
        }
        text = json.dumps(params_file.json_safe(summary), indent=1, allow_nan=False)
        (out / "summary.json").write_text(text + "\n")
        return summary

    bar = tqdm(total=4 + len(validate), disable=not show_progress, leave=True, unit="stage")

    def progress(stage: str):
        bar.set_description_str(stage)
        bar.set_postfix_str("")
        bar.update(1)

    # every evaluation of a fit moves the bar's text in place: which choice, how far
    # (`fit_progress`)
    listening = fit_progress.reporting(lambda text: bar.set_postfix_str(text))
    with listening, closing(bar):
        progress("loading the model")
        name, m, route = resolve_model(model)
        if route == "rigid":
            given = {"--leakage": leakage is not None, "--segment-time": segment_time is not None,
                     "--mechanics": mechanics != "auto",
                     "--valve-effects": valve_effects != "auto",
                     "--offsets": offsets != "auto",
                     "--encoder-offsets": encoder_offsets != "auto",
                     "--long-refit": long_refit != "auto"}  # fmt: skip
            if any(given.values()):
                raise ValueError(
                    f"{', '.join(k for k, v in given.items() if v)}: only for a hydraulic "
                    f"machine's output error; model {name!r} is identified by the regressor route"
                )
            if drives is not None:
                _check_drives(drives, m.coordinate_names)
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
            source = model if Path(model).suffix.lower() == ".urdf" else None
            summary = _identify_rigid(name, m, paths, out, validate, options, progress, window,
                                      user_drives=drives is not None, urdf_source=source,
                                      resample=resample or "auto",
                                      given=frozenset(k for k, v in (
                                          ("method", method), ("cutoff", cutoff),
                                          ("coulomb_width", coulomb_width), ("stride", stride),
                                          ("terms", terms), ("prior_weight", prior_weight))
                                          if v is not None))  # fmt: skip
        else:
            from jaxmb.identification.hydraulic_route import identify_hydraulic

            given = {"--method": method is not None, "--terms": terms is not None,
                     "--gear-ratios/--torque-constants": drives is not None,
                     "--resample": resample is not None,
                     "--coulomb-width": coulomb_width is not None}  # fmt: skip
            if any(given.values()):
                raise ValueError(
                    f"{', '.join(k for k, v in given.items() if v)}: only for the regressor "
                    f"route of a rigid robot; model {name!r} is a hydraulic machine (stage 1 "
                    "fits its mechanics and cylinder friction, stage 2 its hydraulics)"
                )

            summary = identify_hydraulic(
                name, m, paths, out, validate, progress, save=write_summary, window=window,
                leakage=leakage or "auto",
                prior_weight=prior_weight, mechanics=mechanics, valve_effects=valve_effects,
                offsets=offsets, encoder_offsets=encoder_offsets, cutoff=cutoff, stride=stride,
                long=long_refit,
                segment_time=0.5 if segment_time is None else segment_time,
            )  # fmt: skip
        bar.update(bar.total - bar.n)
    summary = write_summary(summary)
    failed = summary.get("validation_failed", {})
    if failed:
        raise ValueError(
            "validation failed on "
            + "; ".join(f"{stem}: {why}" for stem, why in failed.items())
            + f". The fit is written to {out}/ (params.json, parameters.csv, summary.json)"
        )
    return summary


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
