"""Run a closed-loop scenario and write its report: CSV time series, RMSE next to the paper's
Table III, ultimate bounds next to the measured errors, PNG plots like the paper's Figs. 3-4 and
the control effort, and ``summary.json`` for other tools."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxmb.control.bounds import inertia_eigenvalue_bounds, lumped_uncertainty, ultimate_bounds
from jaxmb.control.scenario import PAPER_RMSE, Scenario
from jaxmb.models.series_parallel import STROKE
from jaxmb.simulation import Trajectory, simulate

__all__ = ["run_scenario", "write_report"]

UNITS = {"phi": "rad", "theta": "rad", "delta": "m"}
SETTLE = 5.0  # s: errors "after the transient" are measured from here on (runs >= 10 s)


def run_scenario(sc: Scenario, *, dt_save: float = 0.01, progress: bool = True) -> Trajectory:
    """Simulate the scenario from t = 0 to ``sc.t_final``, saving every ``dt_save`` s. A failed
    solve is reported by the trajectory's ``success`` (the CLI traces under
    `jaxmb.multibody.checks.failures_as_nan`, so nothing raises inside the compiled loop)."""
    n_save = int(round(sc.t_final / dt_save)) + 1
    ts = jnp.linspace(0.0, sc.t_final, n_save)
    return simulate(
        sc.plant, sc.controller, sc.reference, sc.q0, sc.qd0, ts,
        disturbance=sc.disturbance, progress=progress, throw=False,
    )  # fmt: skip


def analyse(sc: Scenario, tr: Trajectory) -> dict:
    """RMSE, errors after the transient, dbar along the run, Gamma's eigenvalue bounds over the
    box the motion spans, and the ultimate bounds of eqs. (22)-(25)."""
    names = tr.coordinate_names
    t, e = np.asarray(tr.t), np.asarray(tr.e)
    d = np.asarray(
        jax.vmap(
            lambda t_, q, qd, u: lumped_uncertainty(
                sc.nominal, sc.plant, t_, q, qd, u, wrenches=sc.disturbance.wrenches_at
            )
        )(tr.t, tr.q, tr.qd, tr.u)
    )
    dbar = np.abs(d).max(axis=0)
    q = np.asarray(tr.q)
    lo, hi = q.min(axis=0) - 0.05, q.max(axis=0) + 0.05
    # the chain's domain in delta is (-l0, 2 L0 - l0); stay inside it
    lo[2], hi[2] = max(lo[2], -0.4), min(hi[2], 0.27)
    gmin, gmax = inertia_eigenvalue_bounds(sc.nominal, lo, hi)
    c = sc.controller
    b = ultimate_bounds(c.K, c.kappa, c.eps, c.Lambda, dbar, gmin, gmax)
    settle = min(SETTLE, 0.5 * float(t[-1]))  # short runs: the second half
    after = t >= settle
    delta = q[:, 2]
    outside = (delta < STROKE[0]) | (delta > STROKE[1])
    return {
        "coordinates": list(names),
        "rmse": dict(zip(names, np.sqrt((e**2).mean(axis=0)).tolist(), strict=True)),
        "max_abs_error_after_5s": dict(  # after 5 s, or the second half of a shorter run
            zip(names, np.abs(e[after]).max(axis=0).tolist(), strict=True)
        ),
        "max_abs_error_after_s": settle,  # where that window starts
        "ultimate_bound_e": dict(zip(names, np.asarray(b.e).tolist(), strict=True)),
        "kappa_exceeds_dbar": dict(
            zip(names, np.asarray(b.kappa_exceeds_dbar).tolist(), strict=True)
        ),
        "dbar": dict(zip(names, dbar.tolist(), strict=True)),
        "kappa": dict(zip(names, np.asarray(c.kappa).tolist(), strict=True)),
        "ultimate_bound_s": float(b.s),
        "gamma_min": float(gmin),
        "gamma_max": float(gmax),
        "workspace_box": {"lower": lo.tolist(), "upper": hi.tolist()},
        "paper_rmse_table_III": PAPER_RMSE,
        "stroke": {
            "range_m": list(STROKE),
            "delta_min_m": float(delta.min()),
            "delta_max_m": float(delta.max()),
            "time_outside_s": float(outside.sum() * (t[1] - t[0])),
            "first_exit_s": float(t[outside][0]) if outside.any() else None,
        },
        "settle_time_s": settle,
        "solver_steps": int(tr.num_steps),
        "units": UNITS,
    }


def write_report(sc: Scenario, tr: Trajectory, out: Path, *, plots: bool = True) -> dict:
    """Write the report files into ``out`` (created if needed) and return the summary."""
    out.mkdir(parents=True, exist_ok=True)
    summary = analyse(sc, tr)
    names = summary["coordinates"]
    cols = {"t": np.asarray(tr.t)}
    for key, arr in [
        ("q", tr.q),
        ("qd", tr.qd),
        ("q_d", tr.q_d),
        ("qd_d", tr.qd_d),
        ("e", tr.e),
        ("u", tr.u),
    ]:
        for i, nm in enumerate(names):
            cols[f"{key}_{nm}"] = np.asarray(arr)[:, i]
    with open(out / "timeseries.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        w.writerows(np.column_stack(list(cols.values())).tolist())
    with open(out / "rmse.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["coordinate", "unit", "rmse_jaxmb", "rmse_paper_table_III"])
        for nm in names:
            w.writerow([nm, UNITS.get(nm, ""), summary["rmse"][nm], PAPER_RMSE.get(nm, "")])
    with open(out / "bounds.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["coordinate", "unit", "dbar", "kappa", "kappa_exceeds_dbar",
                    "ultimate_bound_e", "max_abs_error_after_5s", "inside_bound"])  # fmt: skip
        for nm in names:
            w.writerow([
                nm, UNITS.get(nm, ""), summary["dbar"][nm], summary["kappa"][nm],
                summary["kappa_exceeds_dbar"][nm], summary["ultimate_bound_e"][nm],
                summary["max_abs_error_after_5s"][nm],
                summary["max_abs_error_after_5s"][nm] <= summary["ultimate_bound_e"][nm],
            ])  # fmt: skip
    with open(out / "summary.json", "w") as fh:
        json.dump(summary, fh, indent=2)
    if plots:
        _plots(sc, tr, summary, out)
    return summary


def _plots(sc: Scenario, tr: Trajectory, summary: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = summary["coordinates"]
    t = np.asarray(tr.t)

    def panels(title: str, path: str, draw, ylabel) -> None:
        """One panel per coordinate, the disturbance window shaded, saved as ``out/path``."""
        fig, axes = plt.subplots(len(names), 1, sharex=True, figsize=(8, 2.2 * len(names)))
        fig.suptitle(title)
        lo, hi = sc.disturbance_window
        for i, (ax, nm) in enumerate(zip(axes, names, strict=True)):
            if lo < t[-1] and hi > t[0]:  # only what the run spans: a short run keeps its axis
                ax.axvspan(max(lo, t[0]), min(hi, t[-1]), color="0.85", label="disturbance")
            draw(ax, i, nm)
            ax.set_ylabel(ylabel(nm))
            ax.set_xlim(t[0], t[-1])
        axes[-1].set_xlabel("t [s]")
        fig.tight_layout()
        fig.savefig(out / path, dpi=110)
        plt.close(fig)

    def tracking(ax, i, nm):
        ax.plot(t, np.asarray(tr.q_d)[:, i], "--", label="desired")
        ax.plot(t, np.asarray(tr.q)[:, i], label="actual")
        if nm == "delta":
            for lim in STROKE:
                ax.axhline(lim, color="r", lw=0.8, ls=":")
        if i == 0:
            ax.legend(loc="upper right", fontsize=8)

    def errors(ax, i, nm):
        e = np.asarray(tr.e)[:, i]
        ax.plot(t, e)
        bnd = summary["ultimate_bound_e"][nm]
        ax.axhline(bnd, color="k", ls="--", lw=0.8)
        ax.axhline(-bnd, color="k", ls="--", lw=0.8)
        scale = max(np.abs(e).max(), 1e-9)
        ax.set_ylim(-1.2 * scale, 1.2 * scale)
        tag = "" if bnd <= 1.2 * scale else " (off scale)"
        ok = "kappa > dbar" if summary["kappa_exceeds_dbar"][nm] else "kappa <= dbar"
        text = f"bound |e| <= {bnd:.3g}{tag}; {ok}"
        ax.text(0.01, 0.92, text, transform=ax.transAxes, fontsize=8, va="top")

    def effort(ax, i, nm):
        del nm
        ax.plot(t, np.asarray(tr.u)[:, i])

    panels("Desired vs actual (cf. Dastranj & Mattila Fig. 3)", "tracking.png", tracking,
           lambda nm: f"{nm} [{UNITS.get(nm, '')}]")  # fmt: skip
    panels("Tracking errors (cf. Fig. 4); dashed: computed ultimate bound", "errors.png", errors,
           lambda nm: f"e_{nm} [{UNITS.get(nm, '')}]")  # fmt: skip
    panels("Control effort Q_a", "effort.png", effort,
           lambda nm: f"{nm} [{'N' if nm == 'delta' else 'N m'}]")  # fmt: skip
