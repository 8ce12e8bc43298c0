"""``jaxmb tune``: tune a controller's gains on a Monte Carlo sample, then validate the tuned
gains and the configuration's own gains on a fresh sample of the same distribution, and write
the comparison: the robust controller of the Section IV arm (`tuning.tune`, against the
bounds of eqs. (19)-(25); given gains Table II by default) or the crane's VDC
(`crane_tuning.tune_crane`, within the valve and pressure limits; given gains
`crane_run.GAINS` by default). ``[tune] t_final`` tunes on the first seconds of the study's
horizon (the validation runs all of it).

Samples: tuning uses indices ``TUNING_OFFSET + k``, validation ``0 .. N-1`` of the study's
distribution (`sampling.Distribution`: a sample depends on the seed and its index alone), so
the two never share a plant. Validation runs are resumable Monte Carlo studies in
``out/validation_tuned`` and ``out/validation_given``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import fields
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from jaxmb.control.crane_tuning import (
    VDC_GAINS,
    CraneTuningWeights,
    tune_crane,
    vdc_controller_with,
)
from jaxmb.control.mc_report import figure_column, write_mc_report
from jaxmb.control.montecarlo import run_study
from jaxmb.control.study_config import build_study, read_gains, write_gains
from jaxmb.control.tuning import GAIN_NAMES, TuningWeights, controller_with, tune
from jaxmb.multibody.model import coordinate_joint_types

__all__ = ["TUNING_OFFSET", "run_tune", "TUNE_KEYS", "check_tune_section"]

TUNING_OFFSET = 1_000_000_000
_COMMON = {"samples", "steps", "learning_rate", "validation_samples", "initial", "t_final"}
WEIGHTS = {"section_iv": TuningWeights, "crane": CraneTuningWeights, "machine": CraneTuningWeights}
TUNE_KEYS = {s: _COMMON | {f.name for f in fields(w)} for s, w in WEIGHTS.items()}


def _weights(section: dict, cls):
    kw = {}
    for f in fields(cls):
        if f.name in section:
            v = section[f.name]
            kw[f.name] = tuple(map(float, v)) if isinstance(v, list) else v
    return cls(**kw)


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


def crane_validation(table, study, gains: dict) -> dict:
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


def _tune_arm(study, given, section, m, out, progress, description):
    initial = section.get("initial", {})
    bad = sorted(set(initial) - set(GAIN_NAMES))
    if bad:
        raise ValueError(f"[tune] initial: unknown gain(s) {bad}; expected {GAIN_NAMES}")
    start = controller_with(
        given,
        {k: np.broadcast_to(np.asarray(initial.get(k, getattr(given, k)), float), (3,))
         for k in GAIN_NAMES},
    )  # fmt: skip
    result = tune(
        study, start, TUNING_OFFSET + np.arange(m), out,
        steps=int(section.get("steps", 30)),
        learning_rate=float(section.get("learning_rate", 0.1)),
        weights=_weights(section, TuningWeights), progress=progress, description=description,
    )  # fmt: skip
    tuning = {
        "dbar": result["dbar"].tolist(),
        "kappa_exceeds_dbar": result["kappa_exceeds_dbar"].tolist(),
        "peak_over_limit": result["peak"].tolist(),
        "ultimate_bound_e": result["bound_e"].tolist(),
    }
    return result, tuning


def _tune_crane(study, given, section, m, out, progress, description):
    initial = section.get("initial", {})
    bad = sorted(set(initial) - set(VDC_GAINS))
    if bad:
        raise ValueError(f"[tune] initial: unknown gain(s) {bad}; expected {VDC_GAINS}")
    start = vdc_controller_with(given, {k: initial.get(k, getattr(given, k)) for k in VDC_GAINS})
    result = tune_crane(
        study, start, TUNING_OFFSET + np.arange(m), out,
        steps=int(section.get("steps", 20)),
        learning_rate=float(section.get("learning_rate", 0.1)),
        weights=_weights(section, CraneTuningWeights), progress=progress, description=description,
    )  # fmt: skip
    tuning = {
        "peak_command_over_u_max": result["peak"].tolist(),
        "pressure_excess_over_band": result["pressure_excess"].tolist(),
    }
    return result, tuning


# the common [tune] keys: (type, lowest value, what a message says is expected)
_RANGES = {
    "samples": (int, 1, "an integer >= 1"),
    "steps": (int, 1, "an integer >= 1"),
    "validation_samples": (int, 1, "an integer >= 1"),
    "learning_rate": (float, 0.0, "a finite number > 0"),
    "t_final": (float, 0.0, "a duration > 0 s"),
}


def check_tune_section(cfg: dict, scenario: str) -> dict:
    """The ``[tune]`` table of a tune configuration, checked before anything is built: present
    (an empty table takes every default), no unknown keys, each common key of its type and
    range. Returns it."""
    if "tune" not in cfg:
        raise ValueError(
            "no [tune] table: `jaxmb tune` reads its settings there (an empty [tune] takes the "
            f"defaults); keys for scenario {scenario!r}: {sorted(TUNE_KEYS[scenario])}"
        )
    section = cfg["tune"]
    if not isinstance(section, dict):
        raise ValueError(f"[tune]: expected a table, got {section!r}")
    extra = sorted(set(section) - TUNE_KEYS[scenario])
    if extra:
        raise ValueError(
            f"[tune]: unknown key(s) {extra} for scenario {scenario!r}; expected some of "
            f"{sorted(TUNE_KEYS[scenario])}"
        )
    for key, (kind, low, expected) in _RANGES.items():
        if key not in section:
            continue
        v = section[key]
        ok = isinstance(v, int | float) and not isinstance(v, bool)
        ok = ok and (isinstance(v, int) if kind is int else np.isfinite(v))
        if not (ok and (v >= low if kind is int else v > low)):
            raise ValueError(f"[tune] {key}: expected {expected}, got {v!r}")
    if "initial" in section and not isinstance(section["initial"], dict):
        raise ValueError(f"[tune] initial: expected a table of gains, got {section['initial']!r}")
    return dict(section)


def run_tune(cfg: dict, out: Path, *, progress: bool = True, plots: bool = True) -> dict:
    """The whole workflow of ``jaxmb tune`` (module docstring); returns the summary."""
    out = Path(out)
    scenario = cfg["study"]["scenario"]
    section = check_tune_section(cfg, scenario)
    cfg_study = {k: v for k, v in cfg.items() if k != "tune"}
    n_val = int(section.get("validation_samples", 64))
    study, given, _, chunk, lanes, desc = build_study(cfg_study, samples=n_val)
    tune_study = study
    if "t_final" in section:  # a shorter tuning horizon; validation runs the study's own
        short = {**cfg_study, "study": {**cfg_study["study"], "t_final": section["t_final"]}}
        tune_study = build_study(short, samples=n_val)[0]
    m = int(section.get("samples", 4))
    arm = scenario == "section_iv"
    names = GAIN_NAMES if arm else VDC_GAINS
    # what the tuning's rows depend on besides the study's numbers: its description (the
    # study table, without the [tune] settings that tune_provenance records itself)
    result, tuning = (_tune_arm if arm else _tune_crane)(tune_study, given, section, m, out,
                                                          progress, desc)  # fmt: skip
    write_gains(out / "gains.json", scenario, result["gains"], tuning_samples=m)
    summary: dict = {
        "scenario": scenario,
        "tuning": {
            "samples": m,
            "t_final": float(tune_study.ts[-1]),
            "steps": len(result["history"]),
            "chosen_step": result["step"],
            "final_loss": result["history"][-1]["loss"],
            **tuning,
            "conflicts": result["conflicts"],
        },
        "gains": {
            # the tuned gains as a user reads them back (what `jaxmb simulate --gains` loads)
            "tuned": read_gains(out / "gains.json", scenario),
            "given": {k: np.asarray(getattr(given, k)).tolist() for k in names},
        },
    }
    with_gains = controller_with if arm else vdc_controller_with
    analysis = bound_analysis if arm else crane_validation
    tables = {}
    for name in ("tuned", "given"):
        gains = summary["gains"][name]
        ctrl = with_gains(given, {k: jnp.asarray(v, float) for k, v in gains.items()})
        d = {**desc, "controller": gains}
        folder = out / f"validation_{name}"
        manifest = folder / "study.json"
        if manifest.exists() and json.loads(manifest.read_text()).get("study") != d:
            shutil.rmtree(folder)  # derived from other gains (a resumed, longer tuning)
        folder.mkdir(parents=True, exist_ok=True)
        table = run_study(
            study, ctrl, folder, samples=n_val, chunk=chunk, description=d,
            progress=progress, lanes=lanes,
        )  # fmt: skip
        write_mc_report(folder, table, study, plots=plots)
        tables[name] = table
        summary[f"validation_{name}"] = analysis(
            table, study, {k: np.asarray(v, float) for k, v in gains.items()}
        )
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if plots:
        _plots(out, result["history"], tables, study, arm)
    return summary


def _plots(out: Path, history: list[dict], tables: dict, study, arm: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = [h["step"] for h in history]
    for k in ("loss", "tracking", "effort", "chattering", "saturation", "pressure"):
        if k in history[0] and any(h[k] > 0 for h in history):
            ax.semilogy(steps, [max(h[k], 1e-12) for h in history], label=k)
    ax.set_xlabel("Adam step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no step 2.5
    ax.set_ylabel("loss terms")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "loss_history.png", dpi=110)
    plt.close(fig)

    # (figure column, its label, the limit each gains' box is drawn against: red)
    if arm:
        panels = [(f"max_error_{c}", f"max |e_{c}| after transient (red: computed bound)",
                   lambda t, c=c: figure_column(t, f"bound_e_{c}")) for c in study.coordinate_names]  # fmt: skip
    else:
        panels = [(f"rmse_{c}", f"rmse {c}, rad", None) for c in study.coordinate_names]
        panels += [(f"peak_effort_{a.name}", f"peak |u_{a.name}|, V (red: valve limit)",
                    lambda t, a=a: np.full(len(t), float(a.valve.u_max)))
                   for a in study.plant.actuators]  # fmt: skip
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.8), squeeze=False)
    for j, (col, label, limit) in enumerate(panels):
        ax = axes[0, j]
        data, labels = [], []
        for k, name in enumerate(("given", "tuned")):
            t = tables[name]
            ok = ~np.asarray(t["failed"])
            data.append(figure_column(t, col)[ok])
            labels.append(f"{name}\n({int((~ok).sum())} failed)")
            b = limit(t)[ok] if limit is not None else np.empty(0)
            if b.size:
                ax.plot([k + 0.75, k + 1.25], [b.max()] * 2, "r-", lw=2)
        ax.boxplot(data, showfliers=True)
        ax.set_xticks([1, 2], labels)
        ax.set_yscale("log")
        ax.set_ylabel(label)
    fig.suptitle("fresh validation sample: given gains vs tuned gains")
    fig.tight_layout()
    fig.savefig(out / "comparison.png", dpi=110)
    plt.close(fig)
