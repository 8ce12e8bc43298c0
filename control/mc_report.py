"""The report of a Monte Carlo study: ``summary.json`` (fraction of samples within the computed
ultimate bound, percentiles of every figure, the failed and the worst samples with their
parameters) and plots: error distributions, measured errors against the computed bounds, the
worst cases' parameters."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

__all__ = ["summarise", "write_mc_report", "figure_column"]

PERCENTILES = (5, 50, 95, 99)


def figure_column(table: pa.Table, name: str) -> np.ndarray:
    """A figure as float with NaN for nulls (failed samples)."""
    return np.asarray(table[name].to_numpy(zero_copy_only=False), dtype=float)


def summarise(table: pa.Table, parameter_names, coordinate_names, nominal_values) -> dict:
    failed = np.asarray(table["failed"])
    ok = ~failed
    sample = np.asarray(table["sample"])
    figures = [c for c in table.column_names if c not in ("sample", "failed", *parameter_names)]
    out: dict = {
        "samples": int(table.num_rows),
        "failed": int(failed.sum()),
        "failed_samples": sample[failed][:50].tolist(),
        "percentiles": list(PERCENTILES),
        "figures": {},
    }
    for f in figures:
        v = figure_column(table, f)[ok]
        if v.size == 0:
            continue
        out["figures"][f] = {
            "mean": float(v.mean()),
            "max": float(v.max()),
            **{f"p{p}": float(np.percentile(v, p)) for p in PERCENTILES},
        }
    if "bound_held" in table.column_names:
        held = figure_column(table, "bound_held")[ok] > 0.5
        out["fraction_within_bound"] = float(held.mean()) if held.size else None
        out["fraction_kappa_exceeds_dbar"] = {
            c: float((figure_column(table, f"kappa_exceeds_dbar_{c}")[ok] > 0.5).mean())
            for c in coordinate_names
        }
    # worst cases: the largest max error after the transient, each coordinate relative to its
    # median over the study (so rad and m weigh alike)
    errs = np.stack([figure_column(table, f"max_error_{c}") for c in coordinate_names], axis=1)
    med = np.median(errs[ok], axis=0) if ok.any() else np.ones(len(coordinate_names))
    rel = errs / np.where(med > 0, med, 1.0)
    score = np.max(np.where(np.isnan(rel), -np.inf, rel), axis=1)
    score[failed] = np.inf  # a failed sample is the worst case there is
    order = np.argsort(-score, kind="stable")[:10]
    values = np.stack([figure_column(table, n) for n in parameter_names], axis=1)
    out["worst"] = [
        {
            "sample": int(sample[i]),
            "failed": bool(failed[i]),
            "max_error": {
                c: (None if failed[i] else float(errs[i, j]))
                for j, c in enumerate(coordinate_names)
            },  # fmt: skip
            "parameters": dict(zip(parameter_names, values[i].tolist(), strict=True)),
        }
        for i in order
    ]
    out["nominal_parameters"] = dict(
        zip(parameter_names, np.asarray(nominal_values, dtype=float).tolist(), strict=True)
    )
    return out


def write_mc_report(
    out: Path, table: pa.Table, study, *, plots: bool = True, extra: dict | None = None
) -> dict:
    """Write ``summary.json`` and the plots into ``out``; returns the summary."""
    out = Path(out)
    names = study.parameter_names
    coords = study.coordinate_names
    summary = summarise(table, names, coords, study.nominal_values)
    summary.update(extra or {})
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if plots:
        _plots(out, table, study, summary)
    return summary


def _plots(out: Path, table: pa.Table, study, summary: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    coords = study.coordinate_names
    ok = ~np.asarray(table["failed"])
    fig, axes = plt.subplots(2, len(coords), figsize=(4 * len(coords), 6), squeeze=False)
    for j, c in enumerate(coords):
        for row, f in enumerate(("rmse", "max_error")):
            v = figure_column(table, f"{f}_{c}")[ok]
            ax = axes[row, j]
            ax.hist(v, bins=min(50, max(5, v.size // 5)), color="C0")
            # a narrow spread (a tight study) has long tick labels: fewer ticks, no overlap
            ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
            ax.set_xlabel(f"{f.replace('_', ' ')} {c}")
            ax.set_ylabel("samples")
    fig.suptitle(
        f"{summary['samples']} samples, {summary['failed']} failed (max error: after the transient)"
    )
    fig.tight_layout()
    fig.savefig(out / "error_distributions.png", dpi=110)
    plt.close(fig)

    if "bound_held" in table.column_names:
        fig, axes = plt.subplots(1, len(coords), figsize=(4 * len(coords), 3.8), squeeze=False)
        for j, c in enumerate(coords):
            e = figure_column(table, f"max_error_{c}")[ok]
            b = figure_column(table, f"bound_e_{c}")[ok]
            tight = figure_column(table, f"kappa_exceeds_dbar_{c}")[ok] > 0.5
            ax = axes[0, j]
            ax.loglog(b[tight], e[tight], ".", color="C2", label="kappa > dbar (eq. 25)")
            ax.loglog(b[~tight], e[~tight], ".", color="C3", label="kappa <= dbar: K-based")
            lim = [np.nanmin(np.r_[e[e > 0], b]), np.nanmax(np.r_[e, b])]
            ax.loglog(lim, lim, "k--", lw=0.8, label="error = bound")
            ax.set_xlabel(f"computed ultimate bound on |e_{c}|")
            ax.set_ylabel(f"measured max |e_{c}| after transient")
        axes[0, 0].legend(fontsize=7)
        frac = summary.get("fraction_within_bound")
        fig.suptitle(f"measured errors against eqs. (22)-(25): {frac:.1%} of samples within bound")
        fig.tight_layout()
        fig.savefig(out / "errors_vs_bounds.png", dpi=110)
        plt.close(fig)

    worst = summary["worst"]
    names = list(study.parameter_names)
    if names and worst:
        nominal = np.asarray([summary["nominal_parameters"][n] for n in names])
        vals = np.asarray([[w["parameters"][n] for n in names] for w in worst])
        rel = np.where(nominal != 0, vals / np.where(nominal != 0, nominal, 1.0), vals)
        # 2 in below the rows for the rotated parameter names (the crane's are long)
        fig, ax = plt.subplots(figsize=(1.2 + 0.6 * len(names), 2.4 + 0.35 * len(worst)))
        im = ax.imshow(rel, aspect="auto", cmap="coolwarm")
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
        labels = [f"#{w['sample']}{' (failed)' if w['failed'] else ''}" for w in worst]
        ax.set_yticks(range(len(worst)), labels, fontsize=7)
        fig.colorbar(im, ax=ax, label="value / nominal (absolute where nominal is 0)")
        ax.set_title("worst samples, worst first")
        fig.tight_layout()
        fig.savefig(out / "worst_cases.png", dpi=110)
        plt.close(fig)
