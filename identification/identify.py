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
import time
from collections.abc import Sequence
from contextlib import closing
from functools import partial
from pathlib import Path

from jaxmb.identification import fit_progress
from jaxmb.identification.rigid_route import identify_robot, rigid_options
from jaxmb.io import params_file
from jaxmb.io.machine import load_machine
from jaxmb.models.catalog import CATALOG

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


def _one_or_list(paths):
    """A path as a string, several as a list of strings."""
    return str(paths[0]) if len(paths) == 1 else [str(p) for p in paths]


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

    paths = _checked_paths(log_path, validate)
    t0 = time.perf_counter()
    out = Path(out)  # made by the route once every input has passed its checks
    bar = tqdm(total=4 + len(validate), disable=not show_progress, leave=True, unit="stage")
    progress = partial(_next_stage, bar)
    # every evaluation of a fit moves the bar's text in place: which choice, how far
    # (`fit_progress`)
    listening = fit_progress.reporting(lambda text: bar.set_postfix_str(text))
    with listening, closing(bar):
        progress("loading the model")
        name, m, route = resolve_model(model)
        write_summary = partial(_write_summary, out, name, paths, validate, t0)
        if route == "rigid":
            _refuse_hydraulic_options(name, leakage=leakage, segment_time=segment_time,
                                      mechanics=mechanics, valve_effects=valve_effects,
                                      offsets=offsets, encoder_offsets=encoder_offsets,
                                      long_refit=long_refit)  # fmt: skip
            summary = _robot_summary(
                name, m, model, paths, out, validate, progress, window, method=method,
                cutoff=cutoff, stride=stride, terms=terms, prior_weight=prior_weight,
                coulomb_width=coulomb_width, drives=drives, resample=resample,
            )  # fmt: skip
        else:
            from jaxmb.identification.hydraulic_route import identify_hydraulic

            _refuse_rigid_options(name, method=method, terms=terms, drives=drives,
                                  resample=resample, coulomb_width=coulomb_width)  # fmt: skip
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
    _raise_if_validation_failed(summary, out)
    return summary


def _robot_summary(name, m, model: str, paths, out, validate, progress, window, *, method,
                   cutoff, stride, terms, prior_weight, coulomb_width, drives,
                   resample) -> dict:  # fmt: skip
    """The regressor route's part of the summary for the robot ``m`` (`rigid_route`), its
    options completed by `rigid_options`."""
    options, given = rigid_options(
        name, m, model, method=method, cutoff=cutoff, stride=stride, terms=terms,
        prior_weight=prior_weight, coulomb_width=coulomb_width, drives=drives,
    )  # fmt: skip
    source = model if Path(model).suffix.lower() == ".urdf" else None
    return identify_robot(
        name, m, paths, out, validate, options, progress, window,
        user_drives=drives is not None, urdf_source=source,
        resample=resample or "auto", given=given,
    )  # fmt: skip


def _checked_paths(log_path, validate: Sequence[str]) -> list:
    """The logs to fit as a list, refused where there are none or where two logs, fitted or
    validated, share a file stem (the report tells logs apart by it)."""
    paths = [log_path] if isinstance(log_path, str | Path) else list(log_path)
    if not paths:
        raise ValueError("identify: no log given")
    stems = [Path(p).stem for p in (*paths, *validate)]
    twice = sorted({st for st in stems if stems.count(st) > 1})
    if twice:
        raise ValueError(f"logs {twice}: given twice, or two files of one name; the report tells "
                         "logs apart by their names, so their rows would mix")  # fmt: skip
    return paths


def _write_summary(out: Path, name: str, paths: list, validate, t0: float, part: dict) -> dict:
    """``summary.json``'s content (the route's ``part`` between the inputs and the params file
    and the time since ``t0``), written into ``out``."""
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


def _next_stage(bar, stage: str) -> None:
    """Move ``bar`` on to ``stage``, clearing the previous stage's fit text."""
    bar.set_description_str(stage)
    bar.set_postfix_str("")
    bar.update(1)


def _refuse_hydraulic_options(name: str, *, leakage, segment_time, mechanics, valve_effects,
                              offsets, encoder_offsets, long_refit) -> None:  # fmt: skip
    """Refuse, for the rigid robot ``name``, the hydraulic route's options that were given."""
    _refuse_options_of("a hydraulic machine's output error", name,
                       "is identified by the regressor route", {
        "--leakage": leakage is not None, "--segment-time": segment_time is not None,
        "--mechanics": mechanics != "auto", "--valve-effects": valve_effects != "auto",
        "--offsets": offsets != "auto", "--encoder-offsets": encoder_offsets != "auto",
        "--long-refit": long_refit != "auto"})  # fmt: skip


def _refuse_rigid_options(name: str, *, method, terms, drives, resample, coulomb_width) -> None:
    """Refuse, for the hydraulic machine ``name``, the regressor route's options that were
    given."""
    _refuse_options_of("the regressor route of a rigid robot", name,
                       "is a hydraulic machine (stage 1 fits its mechanics and cylinder "
                       "friction, stage 2 its hydraulics)", {
        "--method": method is not None, "--terms": terms is not None,
        "--gear-ratios/--torque-constants": drives is not None,
        "--resample": resample is not None,
        "--coulomb-width": coulomb_width is not None})  # fmt: skip


def _raise_if_validation_failed(summary: dict, out: Path) -> None:
    """Refuse a fit that failed a validation log, naming each and why, once it is written."""
    failed = summary.get("validation_failed", {})
    if failed:
        raise ValueError(
            "validation failed on "
            + "; ".join(f"{stem}: {why}" for stem, why in failed.items())
            + f". The fit is written to {out}/ (params.json, parameters.csv, summary.json)"
        )


def _refuse_options_of(route: str, name: str, is_what: str, given: dict) -> None:
    """Refuse the options of the other route that were given, naming them."""
    if any(given.values()):
        raise ValueError(
            f"{', '.join(k for k, v in given.items() if v)}: only for {route}; model {name!r} "
            f"{is_what}"
        )
