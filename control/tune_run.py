"""``jaxmb tune``: tune the robust controller's gains on a Monte Carlo sample (`tuning.tune`),
then validate the tuned gains and the configuration's own gains (Table II by default) on a
fresh sample of the same distribution, and write the comparison.

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

from .mc_report import _column, write_mc_report
from .montecarlo import run_study
from .study_config import build_study, write_gains
from .tuning import GAIN_NAMES, TuningWeights, controller_with, tune

__all__ = ["TUNING_OFFSET", "run_tune", "TUNE_KEYS"]

TUNING_OFFSET = 1_000_000_000
TUNE_KEYS = {"samples", "steps", "learning_rate", "validation_samples", "initial",
             *(f.name for f in fields(TuningWeights))}  # fmt: skip


def _weights(section: dict) -> TuningWeights:
    kw = {}
    for f in fields(TuningWeights):
        if f.name in section:
            v = section[f.name]
            kw[f.name] = tuple(map(float, v)) if isinstance(v, list) else v
    return TuningWeights(**kw)


def bound_analysis(table, study, gains: dict) -> dict:
    """Per coordinate on a validation sample: kappa, the largest dbar, eq. (25), the ultimate
    bound from that dbar and the measured max error after the transient."""
    from .bounds import ultimate_bounds

    ok = ~np.asarray(table["failed"])
    out = {}
    dbar = np.array([np.nanmax(_column(table, f"dbar_{c}")[ok]) for c in study.coordinate_names])
    b = ultimate_bounds(
        gains["K"], gains["kappa"], gains["eps"], gains["Lambda"], dbar, *study.gamma
    )
    for i, c in enumerate(study.coordinate_names):
        err = _column(table, f"max_error_{c}")[ok]
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


def run_tune(cfg: dict, out: Path, *, progress: bool = True, plots: bool = True) -> dict:
    """The whole workflow of ``jaxmb tune`` (module docstring); returns the summary."""
    out = Path(out)
    section = dict(cfg.get("tune", {}))
    extra = sorted(set(section) - TUNE_KEYS)
    if extra:
        raise ValueError(f"[tune]: unknown key(s) {extra}; expected some of {sorted(TUNE_KEYS)}")
    cfg_study = {k: v for k, v in cfg.items() if k != "tune"}
    if cfg_study["study"]["scenario"] != "section_iv":
        raise ValueError("[tune]: gain tuning is implemented for scenario 'section_iv'")
    n_val = int(section.get("validation_samples", 64))
    study, given, _, chunk, lanes, desc = build_study(cfg_study, samples=n_val)
    initial = section.get("initial", {})
    bad = sorted(set(initial) - set(GAIN_NAMES))
    if bad:
        raise ValueError(f"[tune] initial: unknown gain(s) {bad}; expected {GAIN_NAMES}")
    start = controller_with(
        given,
        {k: np.broadcast_to(np.asarray(initial.get(k, getattr(given, k)), float), (3,))
         for k in GAIN_NAMES},
    )  # fmt: skip
    m = int(section.get("samples", 4))
    result = tune(
        study, start, TUNING_OFFSET + np.arange(m), out,
        steps=int(section.get("steps", 30)),
        learning_rate=float(section.get("learning_rate", 0.1)),
        weights=_weights(section), progress=progress,
    )  # fmt: skip
    tuned = result["gains"]
    write_gains(out / "gains.json", "section_iv", tuned, tuning_samples=m)
    given_gains = {k: np.asarray(getattr(given, k)) for k in GAIN_NAMES}
    summary: dict = {
        "tuning": {
            "samples": m,
            "steps": len(result["history"]),
            "chosen_step": result["step"],
            "final_loss": result["history"][-1]["loss"],
            "dbar": result["dbar"].tolist(),
            "kappa_exceeds_dbar": result["kappa_exceeds_dbar"].tolist(),
            "peak_over_limit": result["peak"].tolist(),
            "ultimate_bound_e": result["bound_e"].tolist(),
            "conflicts": result["conflicts"],
        },
        "gains": {
            "tuned": {k: v.tolist() for k, v in tuned.items()},
            "given": {k: v.tolist() for k, v in given_gains.items()},
        },
    }
    tables = {}
    for name, gains in (("tuned", tuned), ("given", given_gains)):
        ctrl = controller_with(given, {k: jnp.asarray(v) for k, v in gains.items()})
        d = {**desc, "controller": {k: np.asarray(v).tolist() for k, v in gains.items()}}
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
        summary[f"validation_{name}"] = bound_analysis(table, study, gains)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if plots:
        _plots(out, result["history"], tables, study)
    return summary


def _plots(out: Path, history: list[dict], tables: dict, study) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = [h["step"] for h in history]
    for k in ("loss", "tracking", "effort", "chattering"):
        ax.semilogy(steps, [max(h[k], 1e-12) for h in history], label=k)
    ax.set_xlabel("Adam step")
    ax.set_ylabel("loss terms")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "loss_history.png", dpi=110)
    plt.close(fig)

    coords = study.coordinate_names
    fig, axes = plt.subplots(1, len(coords), figsize=(4 * len(coords), 3.8), squeeze=False)
    for j, c in enumerate(coords):
        ax = axes[0, j]
        data, labels = [], []
        for name in ("given", "tuned"):
            t = tables[name]
            ok = ~np.asarray(t["failed"])
            data.append(_column(t, f"max_error_{c}")[ok])
            labels.append(f"{name}\n({int((~ok).sum())} failed)")
        ax.boxplot(data, showfliers=True)
        ax.set_xticks([1, 2], labels)
        ax.set_yscale("log")
        for k, name in enumerate(("given", "tuned")):
            t = tables[name]
            ok = ~np.asarray(t["failed"])
            b = _column(t, f"bound_e_{c}")[ok]
            if b.size:
                ax.plot([k + 0.75, k + 1.25], [b.max()] * 2, "r-", lw=2)
        ax.set_ylabel(f"max |e_{c}| after transient (red: computed bound)")
    fig.suptitle("fresh validation sample: given gains vs tuned gains")
    fig.tight_layout()
    fig.savefig(out / "comparison.png", dpi=110)
    plt.close(fig)
