"""Free-run replay of a log by a machine: ``jaxmb simulate --machine FILE.toml --commands LOG``.

The plant (the machine file's, or with identified hydraulics from a parameter file) starts from
the log's measured initial state (positions, their smoothed derivative, the chamber pressures:
`output_error.make_segments`) and integrates the whole log (or its first ``t_final`` s) driven by
the logged valve commands, linearly interpolated; RK4 at a fixed 1 ms, the paper's setting. The
report compares the replay with the measured signals: ``summary.json`` (RMSE in SI and NRMSE fit
% per signal, the cylinder events), ``replay.csv`` (the replay and the log, in the log format),
and ``replay.png`` with its residuals (angles in deg, positions in mm, pressures in bar).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from jaxmb.identification import output_error as oe
from jaxmb.identification import report
from jaxmb.identification.hydraulic_route import (
    DISPLAY,
    apply_hydraulics,
    log_columns,
    required_signals,
)
from jaxmb.io import params_file
from jaxmb.io.logs import schema_for, write_log
from jaxmb.io.machine import Machine, check_reach, weigh_payload

__all__ = ["replay"]


def replay(
    machine: Machine,
    log_path,
    out,
    *,
    params=None,
    payload: float | None = None,
    t_final: float | None = None,
    plots: bool = True,
) -> dict:
    """Replay ``log_path`` (module docstring) and write the report into ``out``; returns the
    summary. ``payload`` (kg) replaces the log sidecar's and the parameter file's. Every input
    is read and checked before anything compiles or is written."""
    plant = machine.plant
    log = machine.read_log(log_path, required=required_signals(plant))
    check_reach(machine, log.stack(list(plant.coordinate_names)), source="log", t=log.t)
    if params is not None:  # identified hydraulics and payload
        doc = params_file.read_params(
            params, model_name=machine.names, machine_digest=machine.digest()
        )
        plant = apply_hydraulics(plant, doc)
    if payload is None:
        payload = log.meta.get("conditions", {}).get("payload_kg")
    if payload is not None and machine.payload is not None:  # the experiment's own payload
        plant = weigh_payload(plant, float(payload))
    cols = log_columns(log)
    t_end = None
    if t_final is not None:
        if not 0 < t_final:
            raise ValueError(f"--t-final: expected a duration > 0 s, got {t_final}")
        t_end = float(log.t[0]) + t_final
        if t_end > float(log.t[-1]) + 1e-9:  # the log's commands end there: no silent hold
            raise ValueError(
                f"--t-final: {t_final:g} s goes beyond {Path(log_path).name}, which spans "
                f"{float(log.t[-1] - log.t[0]):g} s from its first sample"
            )
    run = oe.predict(plant, cols, mode="free", stride=1, t_end=t_end)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = list(run["rmse"])
    kinds = schema_for(plant).kinds
    display = {c: DISPLAY.get(kinds[c], ("", 1.0)) for c in names}
    signals = {f"{c}": run["predicted"][c] for c in names}
    signals.update({f"measured_{c}": run["measured"][c] for c in names})
    write_log(out / "replay.csv", run["t"], signals, meta={"model": machine.name})
    summary = {
        "machine": machine.name,
        "machine_file": str(machine.path),
        "log": str(log_path),
        "params": None if params is None else str(params),
        "mode": "free-run replay of the logged commands from the measured initial state",
        "solver": "RK4, fixed 1 ms",
        "payload_kg": float(plant.model.body("payload").mass)
        if "payload" in plant.model.body_names
        else None,
        "t_span_s": [float(run["t"][0]), float(run["t"][-1])],
        "rmse": run["rmse"],
        "rmse_display": {c: run["rmse"][c] / display[c][1] for c in names},
        "display_units": {c: display[c][0] for c in names},
        "fit_percent": {
            c: report.fit_percent(run["measured"][c], run["predicted"][c]) for c in names
        },
    }
    if plots:
        summary["plots"] = report.series_plots(
            out,
            {
                "replay": (
                    run["t"],
                    np.stack([run["measured"][c] for c in names], 1),
                    np.stack([run["predicted"][c] for c in names], 1),
                )
            },  # fmt: skip
            names,
            unit=[display[c][0] for c in names],
            scale=[display[c][1] for c in names],
        )
    text = json.dumps(params_file.json_safe(summary), indent=1, allow_nan=False)
    (out / "summary.json").write_text(text + "\n")
    return summary
