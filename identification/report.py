"""Report files of `jaxmb identify`: the parameter table and the fit, validation and residual
plots (measured vs predicted)."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = ["write_table", "torque_plots", "series_plots"]


def refuse_non_finite(
    values: Mapping[str, float | np.ndarray], what: str, *, allow_inf: bool = False
) -> None:
    """Raise ValueError, before anything is written, where an estimate came out NaN (or inf,
    unless ``allow_inf``: a std of a direction the log does not determine). The commands trace
    their programs with run-time checks that give NaN instead of raising
    (`jaxmb.multibody.checks.failures_as_nan`), so this is where such a failure surfaces, by name."""
    ok = (lambda a: ~np.isnan(a)) if allow_inf else np.isfinite
    bad = [k for k, v in values.items() if not ok(np.asarray(v, dtype=float)).all()]
    if bad:
        raise ValueError(
            f"{what} came out {'NaN' if allow_inf else 'NaN or inf'} for {', '.join(bad)} (a run "
            "left the model's domain or a solve failed); nothing written"
        )


def write_table(path, rows: Sequence[Mapping]) -> Path:
    """A CSV with one row per mapping (the keys of the first row as header)."""
    path = Path(path)
    with path.open("w", newline="") as f:
        if rows:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            for r in rows:
                w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()})
    return path


def fit_percent(measured: np.ndarray, predicted: np.ndarray) -> float:
    """The NRMSE fit of system identification (MATLAB's ``compare``),
    ``100 (1 - |y - y_hat| / |y - mean(y)|)``: 100 is perfect, 0 no better than the mean,
    negative worse; NaN for a constant signal."""
    y, yh = np.asarray(measured, float), np.asarray(predicted, float)
    den = np.linalg.norm(y - y.mean())
    return float(100.0 * (1.0 - np.linalg.norm(y - yh) / den)) if den > 0 else float("nan")


def series_plots(
    out: Path,
    series: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    labels: Sequence[str],
    *,
    unit: str | Sequence[str],
    scale: float | Sequence[float] = 1.0,
) -> list[str]:
    """For each entry ``{tag: (t, measured (N, k), predicted (N, k))}``: ``<tag>.png`` with
    measured and predicted per column, and ``residuals_<tag>.png`` with the residual over time
    and its histogram. ``unit`` and ``scale`` (SI per display unit) are one for all columns or
    one per column."""
    k = len(labels)
    units = [unit] * k if isinstance(unit, str) else list(unit)
    scales = list(np.broadcast_to(np.asarray(scale, float), (k,)))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for tag, (t, meas, pred) in series.items():
        fig, axes = plt.subplots(k, 1, figsize=(9, 1.8 * k + 0.6), sharex=True, squeeze=False)
        for i, (ax, lab) in enumerate(zip(axes[:, 0], labels, strict=True)):
            ax.plot(t, meas[:, i] / scales[i], lw=0.8, label="measured")
            ax.plot(t, pred[:, i] / scales[i], lw=0.8, label="predicted")
            rmse = np.sqrt(np.mean((meas[:, i] - pred[:, i]) ** 2)) / scales[i]
            ax.set_ylabel(f"{lab} ({units[i]})")
            ax.set_title(f"RMSE {rmse:.3g} {units[i]}", fontsize=8, loc="right")
        axes[0, 0].legend(loc="upper left", fontsize=8)
        axes[-1, 0].set_xlabel("t (s)")
        fig.suptitle(f"{tag}: measured vs predicted")
        fig.tight_layout()
        fig.savefig(out / f"{tag}.png", dpi=110)
        plt.close(fig)
        written.append(f"{tag}.png")

        fig, axes = plt.subplots(k, 2, figsize=(10, 1.8 * k + 0.6), squeeze=False,
                                 gridspec_kw={"width_ratios": [3, 1]})  # fmt: skip
        for i, lab in enumerate(labels):
            r = (meas[:, i] - pred[:, i]) / scales[i]
            axes[i, 0].plot(t, r, lw=0.6)
            axes[i, 0].set_ylabel(f"{lab} ({units[i]})")
            axes[i, 1].hist(r, bins=50)
        axes[-1, 0].set_xlabel("t (s)")
        fig.suptitle(f"{tag}: residuals (measured - predicted)")
        fig.tight_layout()
        fig.savefig(out / f"residuals_{tag}.png", dpi=110)
        plt.close(fig)
        written.append(f"residuals_{tag}.png")
    return written


def torque_plots(out: Path, series: Mapping, joint_types: Mapping[str, str]) -> list[str]:
    """Generalized-force plots of the regressor route, ``series`` ``{(role, stem): (samples,
    tau_hat)}`` with role ``fit`` or ``validation``: ``fit_<log>`` and ``validation_<log>``;
    ``joint_types`` ``{coordinate: "revolute" | "prismatic"}`` in the model's order gives each
    axis its unit (N m, N)."""
    tagged = {}
    for (role, stem), (s, tau_hat) in series.items():
        tagged[f"{role}_{stem}"] = (s.at("t"), s.at("tau"), tau_hat)
    units = ["N" if kind == "prismatic" else "N m" for kind in joint_types.values()]
    return series_plots(out, tagged, [f"tau_{c}" for c in joint_types], unit=units)
