"""The kinds of closed loop the control workflows know (`KINDS`), and the studies they run
(`SCENARIOS`, from the one table of machines, `jaxmb.models.catalog.CATALOG`): what ``jaxmb
montecarlo`` and ``jaxmb tune`` look up instead of naming a machine.

A kind (`ControlKind`) gives its study builder (a configuration's ``[study]`` to a study and
its default controller), its gains and their tuner (loss terms, default steps: a
`tuning.Tuner`), its tuning weights, its solver defaults, and its reports (the validation
summary and the panels of the comparison plot):

- `ROBUST`: the Section IV arm under the robust controller of Dastranj & Mattila (2026) eq.
  (18), judged against the ultimate bounds of eqs. (19)-(25);
- `VDC`: a hydraulic machine file (the built-in crane's or a user's) under virtual
  decomposition control on the file's ``[task]``, judged by its valves' range and pressure
  band (VDC's virtual stability holds for any positive gains: it has no bound to check).

A configuration's ``scenario`` names a built-in machine's study (`jaxmb.models.catalog.CATALOG`:
``section_iv``, the arm's; ``crane``, the built-in crane's machine file, the same code path as a
user's file) or ``machine`` (with ``machine = "FILE.toml"``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from jaxmb.control.mc_report import figure_column
from jaxmb.control.studies import arm_study, machine_study
from jaxmb.control.tuning import ROBUST as ROBUST_TUNER
from jaxmb.control.tuning import Tuner, TuningWeights
from jaxmb.control.vdc_tuning import VDC as VDC_TUNER
from jaxmb.control.vdc_tuning import VdcTuningWeights
from jaxmb.io.machine import load_machine
from jaxmb.io.params_file import apply_hydraulics, read_params
from jaxmb.models.catalog import CATALOG
from jaxmb.multibody.model import coordinate_joint_types

__all__ = [
    "ControlKind",
    "ROBUST",
    "VDC",
    "KINDS",
    "SCENARIOS",
    "kind_of",
    "relative_path",
    "bound_analysis",
    "limits_analysis",
]


@dataclass(frozen=True)
class ControlKind:
    """What the control workflows need of one kind of machine (module docstring).

    Attributes:
        name: the kind's name, as messages show it.
        tuner: its gains (``tuner.gain_names``), their loss and default tuning steps.
        weights: the dataclass of its ``[tune]`` loss weights.
        build: ``(cfg, machine, distribution, options, common, gains) -> (study, controller,
            identity)``: the study of a loaded configuration (``machine``: the built-in
            machine a scenario names, or None), and what identifies its files beyond the
            configuration (hashes that go into the study's description).
        solver: its ``[solver]`` defaults.
        limits: whether it takes ``[limits]`` (the arm's torque limits; a machine's limits are
            its valves' and pressures).
        validation: ``(table, study, gains) -> dict``: the figures `jaxmb tune` reports of a
            validation sample.
        panels: ``study -> [(column, label, limit)]``: the comparison plot's panels, ``limit``
            a function of the table (the red bar) or None.
        lines: ``validation -> [str]``: that summary as the lines ``jaxmb tune`` prints.
        machine_file: whether its scenarios run a machine file (``[study] machine``, or the
            built-in one a scenario names; ``[study] params`` applies).
    """

    name: str
    tuner: Tuner
    weights: type
    build: Callable
    solver: dict
    limits: bool
    validation: Callable
    panels: Callable
    lines: Callable
    machine_file: bool

    @property
    def gain_names(self) -> tuple[str, ...]:
        return self.tuner.gain_names


def relative_path(cfg: dict, key: str) -> Path:
    """``[study] key`` of a configuration as a path, relative to the configuration's folder."""
    name = cfg["study"][key]
    if not isinstance(name, str):
        raise ValueError(f"[study] {key}: expected a file's path, got {name!r}")
    p = Path(name)
    return p if p.is_absolute() else Path(cfg.get("_dir", ".")) / p


def _build_arm(cfg, machine, distribution, options, common, gains):
    del machine
    limits = cfg.get("limits", {})
    if "torque" in limits:
        common = {**common, "torque_limit": limits["torque"]}
    study, controller = arm_study(distribution, options=options, **common, **gains)
    return study, controller, {}


def _build_machine(cfg, machine, distribution, options, common, gains):
    """A machine file's study: the built-in ``machine`` a scenario names, else ``[study]
    machine`` (a built-in name, or a path relative to the configuration), with ``[study]
    params`` (`jaxmb identify`'s params.json) as its plant and controller model if given."""
    st = cfg["study"]
    name = st["machine"] if machine is None else machine
    entry = CATALOG.get(name)
    if entry is not None and entry.hydraulic:
        machine = entry.load()
    else:
        machine = load_machine(relative_path(cfg, "machine"))
    identity = {"machine_files_sha256": machine.digest()}
    plant = machine.plant
    if "params" in st:
        p = relative_path(cfg, "params")
        try:
            plant = apply_hydraulics(
                plant, read_params(p, model_name=machine.names, machine_digest=machine.digest())
            )
        except ValueError as err:
            raise ValueError(f"[study] params: {err}") from None
        identity["params_sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
    if "payload" not in st:
        common = {k: v for k, v in common.items() if k != "payload"}  # the file's, or identified
    study, controller = machine_study(
        machine, distribution, options=options, plant=plant, **common, **gains
    )
    return study, controller, identity


def bound_analysis(table, study, gains: dict) -> dict:
    """Per coordinate on a validation sample: kappa, the largest dbar, eq. (25), the ultimate
    bound from that dbar and the measured max error after the transient."""
    from jaxmb.control.bounds import ultimate_bounds

    ok = ~np.asarray(table["failed"])
    out = {}
    dbar = np.array(
        [np.nanmax(figure_column(table, f"dbar_{c}")[ok]) for c in study.coordinate_names]
    )
    b = ultimate_bounds(
        gains["K"], gains["kappa"], gains["eps"], gains["Lambda"], dbar, *study.gamma
    )
    for i, c in enumerate(study.coordinate_names):
        err = figure_column(table, f"max_error_{c}")[ok]
        out[c] = {
            "kappa": float(gains["kappa"][i]),
            "dbar_max": float(dbar[i]),
            "kappa_exceeds_dbar": bool(gains["kappa"][i] > dbar[i]),
            "ultimate_bound_e": float(b.e[i]),
            "max_error_p95": float(np.percentile(err, 95)) if err.size else None,
            "max_error_max": float(err.max()) if err.size else None,
        }
    out["failed"] = int((~ok).sum())
    out["samples"] = int(ok.size)
    return out


def limits_analysis(table, study, gains: dict) -> dict:
    """Per joint and valve on a validation sample: RMSE and max error after the transient
    (median, p95, max), peak valve command and saturation time, and the fraction of samples
    whose chambers left [p_r, p_s]. VDC has no ultimate bound (virtual stability holds for any
    positive gains), so there is no bound column."""
    del gains
    ok = ~np.asarray(table["failed"])
    out: dict = {}

    def stats(name):
        x = figure_column(table, name)[ok]
        if not x.size:
            return None
        return {q: float(np.percentile(x, p)) for q, p in (("p50", 50), ("p95", 95), ("max", 100))}

    types = coordinate_joint_types(study.plant.model)
    for c in study.coordinate_names:
        out[c] = {"rmse": stats(f"rmse_{c}"), "max_error": stats(f"max_error_{c}"),
                  "unit": "m" if types[c] == "prismatic" else "rad"}  # fmt: skip
    for a in study.plant.actuators:  # a valve named as a coordinate gets its own key
        out[a.name if a.name not in out else f"valve_{a.name}"] = {
            "u_max": float(a.valve.u_max),
            "peak_command": stats(f"peak_effort_{a.name}"),
            "saturation_time_s": stats(f"valve_saturation_time_{a.name}"),
        }
    hit = np.asarray(figure_column(table, "pressure_limits_hit")[ok])
    out["pressure_limits_hit_fraction"] = float(hit.mean()) if hit.size else None
    out["failed"] = int((~ok).sum())
    out["samples"] = int(ok.size)
    return out


def _bound_lines(validation: dict) -> list[str]:
    return [
        f"{c:>6}: kappa {r['kappa']:.4g} vs dbar {r['dbar_max']:.4g} "
        f"({'holds' if r['kappa_exceeds_dbar'] else 'fails'}), bound "
        f"{r['ultimate_bound_e']:.4g}, measured max error {r['max_error_max']}"
        for c, r in validation.items()
        if isinstance(r, dict) and r["max_error_max"] is not None  # None: every sample failed
    ]


def _limits_lines(validation: dict) -> list[str]:
    out = []
    for c, r in validation.items():
        if not isinstance(r, dict) or not all(r.values()):
            continue  # a count, or figures of a sample set that all failed
        if "rmse" in r:  # a joint
            out.append(f"{c:>6}: rmse p95 {r['rmse']['p95']:.3g} {r['unit']}, max error after "
                       f"the transient p95 {r['max_error']['p95']:.3g} {r['unit']}")  # fmt: skip
        else:  # a valve
            out.append(f"{c:>6}: peak command p95 {r['peak_command']['p95']:.3g} V (limit "
                       f"{r['u_max']:g}), saturated p95 {r['saturation_time_s']['p95']:.3g} s")  # fmt: skip
    return out


def _bound_panels(study) -> list:
    return [(f"max_error_{c}", f"max |e_{c}| after transient (red: computed bound)",
             lambda t, c=c: figure_column(t, f"bound_e_{c}")) for c in study.coordinate_names]  # fmt: skip


def _limit_panels(study) -> list:
    types = coordinate_joint_types(study.plant.model)
    panels = [(f"rmse_{c}", f"rmse {c}, {'m' if types[c] == 'prismatic' else 'rad'}", None)
              for c in study.coordinate_names]  # fmt: skip
    panels += [(f"peak_effort_{a.name}", f"peak |u_{a.name}|, V (red: valve limit)",
                lambda t, a=a: np.full(len(t), float(a.valve.u_max)))
               for a in study.plant.actuators]  # fmt: skip
    return panels


ROBUST = ControlKind(
    name="robust control of the Section IV arm",
    tuner=ROBUST_TUNER,
    weights=TuningWeights,
    build=_build_arm,
    solver={"max_steps": 100_000},
    limits=True,
    validation=bound_analysis,
    panels=_bound_panels,
    lines=_bound_lines,
    machine_file=False,
)

VDC = ControlKind(
    name="VDC of a hydraulic machine file",
    tuner=VDC_TUNER,
    weights=VdcTuningWeights,
    build=_build_machine,
    solver={"rtol": 1e-6, "atol": 1e-8, "dt_save": 1e-3, "max_steps": 500_000},
    limits=False,
    validation=limits_analysis,
    panels=_limit_panels,
    lines=_limits_lines,
    machine_file=True,
)

# the closed loops the control workflows study, by the kind a machine's catalog entry names
KINDS: dict[str, ControlKind] = {"robust": ROBUST, "vdc": VDC}

# scenario -> (kind, the built-in machine file it names, or None: the arm, or [study] machine):
# each catalog machine with a study under its study's name, and "machine" for a user's file
SCENARIOS: dict[str, tuple[ControlKind, str | None]] = {
    **{e.study: (KINDS[e.control], name if e.hydraulic else None)
       for name, e in CATALOG.items() if e.study is not None},
    "machine": (VDC, None),
}  # fmt: skip


def kind_of(scenario: str) -> ControlKind:
    """The kind of a configuration's scenario (a key of `SCENARIOS`)."""
    return SCENARIOS[scenario][0]
