"""``jaxmb tune``: tune a controller's gains on a Monte Carlo sample (`tuning.tune`), then
validate the tuned gains and the configuration's own gains on a fresh sample of the same
distribution, and write the comparison. What is tuned, against what, and what the validation
reports is the scenario's kind's (`kinds.SCENARIOS`): the robust controller of the Section IV
arm against the bounds of eqs. (19)-(25) (given gains Table II by default), or a machine
file's VDC within its valve and pressure limits (given gains the file's). ``[tune] t_final``
tunes on the first seconds of the study's horizon (the validation runs all of it).

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

from jaxmb.control.kinds import SCENARIOS, ControlKind, kind_of
from jaxmb.control.mc_report import figure_column, write_mc_report
from jaxmb.control.montecarlo import run_study
from jaxmb.control.study_config import build_study, read_gains, write_gains
from jaxmb.control.tuning import tune

__all__ = ["TUNING_OFFSET", "run_tune", "TUNE_KEYS", "check_tune_section", "what_changed"]

TUNING_OFFSET = 1_000_000_000
_COMMON = {"samples", "steps", "learning_rate", "validation_samples", "initial", "t_final"}
TUNE_KEYS = {s: _COMMON | {f.name for f in fields(k.weights)} for s, (k, _) in SCENARIOS.items()}


def _tune(kind: ControlKind, study, given, section, m, out, progress, description) -> dict:
    """`tuning.tune` from ``[tune]``: its start gains (``initial``, over the ``given``
    controller's), steps, learning rate and weights."""
    initial = section.get("initial", {})
    names = kind.gain_names
    bad = sorted(set(initial) - set(names))
    if bad:
        raise ValueError(f"[tune] initial: unknown gain(s) {bad}; expected {names}")
    start = kind.tuner.with_gains(given, {k: initial.get(k, getattr(given, k)) for k in names})
    kw = {f.name: section[f.name] for f in fields(kind.weights) if f.name in section}
    weights = kind.weights(**{k: tuple(map(float, v)) if isinstance(v, list) else v
                              for k, v in kw.items()})  # fmt: skip
    return tune(
        study, start, TUNING_OFFSET + np.arange(m), out, tuner=kind.tuner,
        steps=int(section.get("steps", kind.tuner.steps)),
        learning_rate=float(section.get("learning_rate", 0.1)),
        weights=weights, progress=progress, description=description,
    )  # fmt: skip


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
    kind = kind_of(scenario)
    # what the tuning's rows depend on besides the study's numbers: its description (the
    # study table, without the [tune] settings that tune_provenance records itself)
    result = _tune(kind, tune_study, given, section, m, out, progress, desc)
    write_gains(out / "gains.json", scenario, result["gains"], tuning_samples=m)
    summary: dict = {
        "scenario": scenario,
        "tuning": {
            "samples": m,
            "t_final": float(tune_study.ts[-1]),
            "steps": len(result["history"]),
            "chosen_step": result["step"],
            "final_loss": result["history"][-1]["loss"],
            **result["figures"],
            "conflicts": result["conflicts"],
        },
        "gains": {
            # the tuned gains as a user reads them back (what `jaxmb simulate --gains` loads)
            "tuned": read_gains(out / "gains.json", scenario),
            "given": {k: np.asarray(getattr(given, k)).tolist() for k in kind.gain_names},
        },
    }
    tables = {}
    for name in ("tuned", "given"):
        gains = summary["gains"][name]
        ctrl = kind.tuner.with_gains(given, {k: jnp.asarray(v, float) for k, v in gains.items()})
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
        summary[f"validation_{name}"] = kind.validation(
            table, study, {k: np.asarray(v, float) for k, v in gains.items()}
        )
    if "tolerated_error" in section:
        summary["changed"] = what_changed(tables, study.coordinate_names,
                                          section["tolerated_error"])  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if plots:
        _plots(out, result["history"], tables, kind.panels(study))
    return summary


def what_changed(tables: dict, coordinates, tolerated_error) -> dict:
    """What the tuned gains changed on the validation samples (the study's distribution, its
    own horizon): the fraction of samples whose RMS tracking error is within ``[tune]
    tolerated_error`` on every coordinate (a failed sample is not), and each coordinate's
    worst error, given gains against tuned."""
    tol = np.broadcast_to(np.asarray(tolerated_error, float), (len(coordinates),))
    out: dict = {"tolerated_error": dict(zip(coordinates, tol.tolist(), strict=True))}
    for name, table in tables.items():
        within = ~np.asarray(table["failed"])
        worst = {}
        for c, r in zip(coordinates, tol, strict=True):
            within &= figure_column(table, f"rmse_{c}") <= r  # NaN (failed): not within
            worst[c] = float(np.nanmax(figure_column(table, f"max_error_{c}")))
        out[name] = {"fraction_within_tolerance": float(np.mean(within)), "worst_error": worst}
    return out


def _plots(out: Path, history: list[dict], tables: dict, panels: list) -> None:
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

    # (figure column, its label, the limit each gains' box is drawn against: red), the kind's
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
