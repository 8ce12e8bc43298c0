"""Runs of a hydraulic machine file (the built-in crane's or a user's) and their reports: the
time series in the log format (so that a simulated run is a valid log), the counterparts of
Petrovic & Mattila (2022) Figs. 13-16 and ``summary.json``.

Log format, per coordinate and cylinder (`log_columns`; for the crane, shared/specs/
lift_tilt_crane.md, "What a logged experiment holds", whose columns `LOG_COLUMNS` lists):
``t`` (s), ``q1``, ``q2`` (rad), ``qd_q1``, ``qd_q2`` (rad/s), ``p_a_lift``, ``p_b_lift``,
``p_a_tilt``, ``p_b_tilt`` (Pa), ``u_lift``, ``u_tilt`` (V, as the valve receives them:
saturated to +-10 V), ``x_lift``, ``x_tilt`` (m).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from jaxmb.actuators.plant import HydraulicPlant, events_summary
from jaxmb.io.logs import read_log
from jaxmb.multibody.kinematics import frame_jacobian, frame_pose
from jaxmb.simulation import CommandTable, Trajectory

__all__ = [
    "LOG_COLUMNS",
    "log_columns",
    "read_commands",
    "write_log_csv",
    "machine_summary",
    "write_machine_report",
]

ACTUATORS = ("lift", "tilt")
LOG_COLUMNS = (
    "t",
    "q1",
    "q2",
    "qd_q1",
    "qd_q2",
    "p_a_lift",
    "p_b_lift",
    "p_a_tilt",
    "p_b_tilt",
    "u_lift",
    "u_tilt",
    "x_lift",
    "x_tilt",
)


def read_commands(
    path: str | Path, names: tuple[str, ...], optional: tuple[str, ...] = ()
) -> CommandTable:
    """A command table from a CSV (or a Parquet log) with a ``t`` column (s) and one column per
    command in ``names`` (e.g. ``u_lift``, ``u_tilt``, V), and those of ``optional`` (a logged
    supply pressure, Pa) that it has. Extra columns (a whole log) are ignored.

    Raises ValueError naming the file and column for a missing column, a non-number, NaN or
    inf, or times that are not strictly increasing."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"commands file {str(path)!r} does not exist")
    if path.suffix == ".parquet":  # a log in the project's format (read and validated there)
        log = read_log(path)
        missing = [c for c in names if not log.has(c)]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; the columns are {log.names}")
        names = (*names, *(c for c in optional if log.has(c)))
        return CommandTable(np.asarray(log.t), log.stack(names), tuple(names))
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if len(rows) < 3:
        raise ValueError(f"{path}: expected a header and at least 2 rows of commands")
    header = [h.strip() for h in rows[0]]
    names = (*names, *(c for c in optional if c in header))
    missing = [c for c in ("t", *names) if c not in header]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; the header is {header}")
    cols = {}
    for c in ("t", *names):
        j = header.index(c)
        try:
            cols[c] = np.array([float(r[j]) for r in rows[1:]])
        except (ValueError, IndexError):
            raise ValueError(f"{path}: column {c!r} holds a value that is not a number") from None
        if not np.all(np.isfinite(cols[c])):
            k = int(np.argmax(~np.isfinite(cols[c])))
            raise ValueError(f"{path}: column {c!r} is NaN or inf at row {k + 2}")
    t = cols["t"]
    if not np.all(np.diff(t) > 0):
        k = int(np.argmax(~(np.diff(t) > 0)))
        raise ValueError(
            f"{path}: column 't' must be strictly increasing; t[{k + 1}] = {t[k + 1]} after "
            f"t[{k}] = {t[k]}"
        )
    return CommandTable(t, np.column_stack([cols[c] for c in names]), names)


def check_command_table(
    table: CommandTable, t_final: float, u_max: dict[str, float], source, *, clip: bool = False
) -> tuple[CommandTable, dict[str, int]]:
    """A replay's command table against its run and its valves: it must cover ``0 .. t_final``
    (a table is not held at its ends without a word), and its commands stay within each
    valve's range ``+-u_max`` (V), or with ``clip`` are clipped to it, counted per column.
    Returns the table to replay and the clipped counts. Raises ValueError naming ``source``."""
    t = np.asarray(table.t)
    if t[0] > 0.0 or t[-1] < t_final - 1e-9:
        raise ValueError(
            f"{source}: the table covers t = {t[0]:g} .. {t[-1]:g} s, not the run's 0 .. "
            f"{t_final:g} s (--t-final); a replay does not hold commands beyond the table: "
            "give a --t-final within it, or a table that starts at 0 s"
        )
    values = np.asarray(table.values)
    counts = {}
    for j, name in enumerate(table.names):
        limit = u_max[name]
        outside = np.abs(values[:, j]) > limit
        counts[name] = int(outside.sum())
        if counts[name] and not clip:
            k = int(np.argmax(outside))
            raise ValueError(
                f"{source}: column {name!r} has {counts[name]} of {len(t)} commands outside the "
                f"valve's range +-{limit:g} V (first {values[k, j]:g} V at t = {t[k]:g} s; "
                f"max |u| {np.abs(values[:, j]).max():g} V); the valve saturates there: "
                "--clip-commands replays them clipped and reports the counts"
            )
    if clip:
        lim = np.array([u_max[n] for n in table.names])
        table = CommandTable(t, np.clip(values, -lim, lim), table.names)
    return table, counts


def log_columns(plant: HydraulicPlant, tr: Trajectory) -> dict[str, np.ndarray]:
    """The trajectory as log-format columns (SI units; commands saturated as the valves get
    them)."""
    cols = {"t": np.asarray(tr.t)}
    for i, nm in enumerate(tr.coordinate_names):
        cols[nm] = np.asarray(tr.q)[:, i]
    for i, nm in enumerate(tr.coordinate_names):
        cols[f"qd_{nm}"] = np.asarray(tr.qd)[:, i]
    for a in plant.actuators:
        cols[f"p_a_{a.name}"] = np.asarray(tr.signals[f"p_a_{a.name}"])
        cols[f"p_b_{a.name}"] = np.asarray(tr.signals[f"p_b_{a.name}"])
    for a in plant.actuators:
        cols[f"u_{a.name}"] = np.clip(
            np.asarray(tr.signals[f"u_{a.name}"]), -float(a.valve.u_max), float(a.valve.u_max)
        )
    for a in plant.actuators:
        cols[f"x_{a.name}"] = np.asarray(tr.signals[f"x_{a.name}"])
    return cols


def _write_csv(path: Path, cols: dict[str, np.ndarray]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        w.writerows(np.column_stack(list(cols.values())).tolist())


def write_log_csv(path: Path, plant: HydraulicPlant, tr: Trajectory) -> None:
    """Write the run as a log-format CSV."""
    _write_csv(path, log_columns(plant, tr))


def machine_summary(
    plant: HydraulicPlant, tr: Trajectory, extra: dict | None = None, *, tool: str = "tool"
) -> dict:
    """Max joint errors, the position error of frame ``tool``, the performance index rho,
    saturation time per valve and pressure/stroke events.

    ``rho = max |tool position error| / max |tool velocity|`` (s), the VDC literature's
    performance index (Petrovic & Mattila (2022) Section 1, after Zhu)."""
    import jax

    t = np.asarray(tr.t)
    model = plant.model
    tool_frame = tool
    tool = jax.vmap(lambda q: frame_pose(model, q, tool_frame)[:3, 3])(tr.q)
    out: dict = {
        "t_final_s": float(t[-1]),
        "samples": int(t.size),
        "solver_steps": int(tr.num_steps),
    }
    out["success"] = bool(tr.success)
    has_ref = tr.q_d.shape[1] == tr.q.shape[1]
    if has_ref:
        tool_d = jax.vmap(lambda q: frame_pose(model, q, tool_frame)[:3, 3])(tr.q_d)
        e_tool = np.linalg.norm(np.asarray(tool) - np.asarray(tool_d), axis=1)
        J = jax.vmap(lambda q: frame_jacobian(model, q, tool_frame))(tr.q)
        R = jax.vmap(lambda q: frame_pose(model, q, tool_frame)[:3, :3])(tr.q)
        v = np.einsum(
            "tij,tj->ti",
            np.asarray(R),
            np.einsum("tkj,tj->tk", np.asarray(J), np.asarray(tr.qd))[:, 3:],
        )
        speed = np.linalg.norm(v, axis=1)
        e = np.asarray(tr.e)
        out["max_tool_position_error_m"] = float(e_tool.max())
        out["max_tool_speed_m_s"] = float(speed.max())
        out["rho_s"] = float(e_tool.max() / max(speed.max(), 1e-12))
        out["max_joint_error_rad"] = dict(
            zip(tr.coordinate_names, np.abs(e).max(axis=0).tolist(), strict=True)
        )
        out["rmse_joint_rad"] = dict(
            zip(tr.coordinate_names, np.sqrt((e**2).mean(axis=0)).tolist(), strict=True)
        )
    sat = {}
    dt = np.diff(t)
    for a in plant.actuators:
        u = np.asarray(tr.signals[f"u_{a.name}"])
        s = (np.abs(u) >= float(a.valve.u_max)).astype(float)
        sat[a.name] = float(np.sum(0.5 * (s[1:] + s[:-1]) * dt))
    out["saturation_time_s"] = sat
    out["events"] = events_summary(tr.events)
    out["pressure_range_bar"] = {
        k: [float(np.min(tr.signals[k])) / 1e5, float(np.max(tr.signals[k])) / 1e5]
        for k in tr.signals
        if k.startswith("p_")
    }
    out["stroke_range_m"] = {
        a.name: [float(np.min(tr.signals[f"x_{a.name}"])), float(np.max(tr.signals[f"x_{a.name}"]))]
        for a in plant.actuators
    }
    if extra:
        out.update(extra)
    return out


def write_machine_report(
    out: Path,
    plant: HydraulicPlant,
    tr: Trajectory,
    *,
    control: dict[str, np.ndarray] | None = None,
    extra: dict | None = None,
    plots: bool = True,
    tool: str = "tool",
) -> dict:
    """``timeseries.csv`` (log format), ``control.csv`` (required forces, desired path; closed
    loop only), ``summary.json`` and the PNG figures into ``out``; ``tool`` names the frame
    whose path the summary and ``tool_path.png`` follow."""
    out.mkdir(parents=True, exist_ok=True)
    write_log_csv(out / "timeseries.csv", plant, tr)
    if control:
        _write_csv(out / "control.csv", {"t": np.asarray(tr.t), **control})
    summary = machine_summary(plant, tr, extra, tool=tool)
    with open(out / "summary.json", "w") as fh:
        json.dump(summary, fh, indent=2)
    if plots:
        _figures(out, plant, tr, control or {}, tool)
    return summary


def _figures(
    out: Path, plant: HydraulicPlant, tr: Trajectory, control: dict, tool_frame: str
) -> None:
    import jax
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.asarray(tr.t)
    model = plant.model
    tool = np.asarray(jax.vmap(lambda q: frame_pose(model, q, tool_frame)[:3, 3])(tr.q))
    has_ref = tr.q_d.shape[1] == tr.q.shape[1]
    # the two world axes along which the tool moves most (x, y for the planar crane)
    i, j = sorted(np.argsort(np.ptp(tool, axis=0))[-2:])

    fig, ax = plt.subplots(figsize=(6, 6))  # Fig. 13
    if has_ref:
        tool_d = np.asarray(jax.vmap(lambda q: frame_pose(model, q, tool_frame)[:3, 3])(tr.q_d))
        ax.plot(tool_d[:, i], tool_d[:, j], "--", label="desired")
    ax.plot(tool[:, i], tool[:, j], label="achieved")
    ax.set_xlabel(f"{tool_frame} {'xyz'[i]} [m]")
    ax.set_ylabel(f"{tool_frame} {'xyz'[j]} [m]")
    ax.set_aspect("equal")
    ax.legend()
    ax.set_title("Tool path (cf. Petrovic & Mattila Fig. 13)")
    fig.tight_layout()
    fig.savefig(out / "tool_path.png", dpi=110)
    plt.close(fig)

    names = [a.name for a in plant.actuators]

    def panels(title: str, path: str, draw, ylabel) -> None:
        """One panel per actuator, saved as ``out/path``."""
        fig, axes = plt.subplots(len(names), 1, sharex=True, figsize=(8, 5))
        for ax, nm in zip(np.atleast_1d(axes), names, strict=True):
            draw(ax, nm, plant.actuator(nm))
            ax.set_ylabel(ylabel(nm))
        np.atleast_1d(axes)[-1].set_xlabel("t [s]")
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(out / path, dpi=110)
        plt.close(fig)

    def forces(ax, nm, a):
        if f"f_r_{nm}" in control:
            ax.plot(t, control[f"f_r_{nm}"] / 1e3, "--", label="required f_pr")
        f_p = a.cylinder.force(tr.signals[f"p_a_{nm}"], tr.signals[f"p_b_{nm}"])
        ax.plot(t, np.asarray(f_p) / 1e3, label="achieved f_p = A_a p_a - A_b p_b")
        ax.legend(fontsize=8)

    def pressures(ax, nm, a):
        for c in ("p_a", "p_b"):
            ax.plot(t, np.asarray(tr.signals[f"{c}_{nm}"]) / 1e5, label=f"{c}_{nm}")
        for p in (a.valve.p_s, a.valve.p_r):
            ax.axhline(float(p) / 1e5, color="r", ls=":", lw=0.8)
        ax.legend(fontsize=8)

    def voltages(ax, nm, a):
        u_max = float(a.valve.u_max)
        ax.plot(t, np.clip(np.asarray(tr.signals[f"u_{nm}"]), -u_max, u_max))
        for lim in (u_max, -u_max):
            ax.axhline(lim, color="r", ls=":", lw=0.8)

    panels("Piston forces (cf. Fig. 14)", "piston_forces.png", forces, lambda nm: f"{nm} [kN]")
    panels("Chamber pressures (cf. Fig. 15); dotted: supply and return", "pressures.png",
           pressures, lambda nm: "bar")  # fmt: skip
    panels("Valve voltages (cf. Fig. 16)", "valve_voltages.png", voltages,
           lambda nm: f"u_{nm} [V]")  # fmt: skip
