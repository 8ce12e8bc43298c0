"""``jaxmb simulate``: the Section IV closed-loop scenario of the arm, the flexible 3-RPR, or a
hydraulic machine file, the built-in crane's included (VDC on its task, a log's free-run replay
or a command table's open-loop replay), each with its report. The machines come from the one
table, `jaxmb.models.catalog.CATALOG`; what runs is their closed loop's kind's (`RUNS`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from jaxmb.cli import (
    check_out,
    check_writable,
    parse_vector,
)


def _gain(text: str, name: str) -> list[float]:
    vals = (
        parse_vector(text, name, 3)
        if "," in text or " " in text.strip()
        else parse_vector(text, name, 1)
    )
    if not np.all(vals > 0):
        raise SystemExit(f"jaxmb simulate: --{name}: expected positive gains, got {text!r}")
    return np.broadcast_to(vals, (3,)).tolist()


def _check_dt_save(dt_save: float, t_final: float) -> None:
    """Refuse a ``--dt-save`` outside ``(0, t_final]``, naming the value given."""
    if not 0 < dt_save <= t_final:
        raise SystemExit(
            f"jaxmb simulate: --dt-save: expected 0 < dt <= {t_final:g} s (the run's duration), "
            f"got {dt_save}"
        )


def rpr3_flexible_cmd(args: argparse.Namespace) -> int:
    """``jaxmb simulate --machine rpr3-flexible``: Ider et al. (2019) Section 6."""
    from pathlib import Path

    t_final = 2.0 if args.t_final is None else args.t_final
    steps = round(t_final / 0.002)
    # the report reads the errors after 1 s and checks eq. (31) over 0.6-0.95 s
    if not t_final >= 1.0 or abs(steps * 0.002 - t_final) > 1e-9:
        raise SystemExit(
            f"jaxmb simulate: --t-final: expected a multiple of the sampling interval 0.002 s of at least "
            f"1 s (the report's windows: errors after 1 s, eq. (31) over 0.6-0.95 s), got {t_final}"
        )
    if args.omega is not None and not args.omega > 0:
        raise SystemExit(
            f"jaxmb simulate: --omega: expected a bandwidth > 0 rad/s, got {args.omega}"
        )
    out = Path(args.out)
    check_out(out)
    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxmb.control.rpr3_flexible import run_rpr3_flexible

    print(
        f"jaxmb simulate: flexible-joint 3-RPR (Ider et al. Section 6), {t_final:g} s, "
        f"impact at 0.25 s -> {out}/"
    )
    s = run_rpr3_flexible(
        out, t_final=t_final, omega=args.omega, progress=not args.quiet, plots=not args.no_plots
    )
    err = s["max_abs_error_after_1s"]
    print(
        "max |e| after 1 s: " + ", ".join(f"{k} {v:.3g}" for k, v in err.items()) + " (m, m, rad)"
    )
    if "impact" in s:
        print(
            f"impact at t = {s['impact']['time_s']:.6f} s, H = {s['impact']['impulse_H_N_s']:.4g} N s"
        )
    st = s["stability"]
    verdict = "holds" if st["desoer_condition_holds"] else "does not hold"
    print(
        f"stability: sigma0 {st['sigma0']:.4g} 1/s, Delta_M {st['delta_M']:.3g}, m {st['m']:.4g}: "
        f"Desoer's condition (eq. 27) {verdict}"
    )
    if not s["success"]:
        print("warning: a solve failed; the series stop where it did")
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def machine_cmd(args: argparse.Namespace) -> int:
    """``jaxmb simulate --machine FILE.toml`` (or a built-in machine file's name, ``crane``):
    the VDC closed loop on the file's ``[task]``; with ``--commands`` a log's free-run replay
    from its measured initial state, or a command table's open-loop replay from the task's
    first waypoint at rest. Every input is checked before anything compiles."""
    from pathlib import Path

    if args.commands is not None and args.gains is not None:
        raise SystemExit("jaxmb simulate: --gains: the replay of --commands has no controller")
    if args.clip_commands and args.commands is None:
        raise SystemExit("jaxmb simulate: --clip-commands: only for the replay of --commands")
    if args.t_final is not None and not args.t_final > 0:
        raise SystemExit(
            f"jaxmb simulate: --t-final: expected a duration > 0 s, got {args.t_final}"
        )
    if args.payload is not None and not args.payload >= 0:
        raise SystemExit(f"jaxmb simulate: --payload: expected a mass >= 0 kg, got {args.payload}")
    out = Path(args.out)
    check_writable(out)
    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxmb.io.machine import load_machine

    try:
        machine = load_machine(args.machine)
        if args.payload is not None and machine.payload is None:
            raise ValueError(f"--payload: machine file {machine.path} has no [payload] table")
        if args.commands is not None and _is_log(args.commands, machine):
            if args.clip_commands:
                raise ValueError(
                    "--clip-commands: not for a log's replay (a validated log's commands are "
                    "what the valves received)"
                )
            return _log_replay(args, machine, out)
        plant = _plant(args, machine)
    except ValueError as err:
        raise SystemExit(f"jaxmb simulate: {err}") from None
    if args.commands is not None:
        return _table_replay(args, machine, plant, out)
    return _machine_vdc(args, machine, plant, out)


def _is_log(path, machine) -> bool:
    """Whether ``path`` is a log of ``machine``, replayed from its measured state: Parquet (by
    name or content), or a CSV whose header holds every coordinate under the file's ``[log]
    columns`` names. Anything else is a command table (whose reader names what is wrong)."""
    import csv
    import io
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        return False
    with open(path, "rb") as fh:
        head = fh.read(65536)
    if path.suffix.lower() == ".parquet" or head.startswith(b"PAR1") or b"\0" in head:
        return True  # the log reader names a file that is not what its name says
    first = head.decode("utf-8", errors="replace").splitlines()[:1]
    header = {h.strip() for h in next(csv.reader(io.StringIO(first[0])), [])} if first else set()
    return {machine.columns.get(c, c) for c in machine.plant.coordinate_names} <= header


def _plant(args: argparse.Namespace, machine):
    """The machine's plant with ``--params`` (identified parameters, refused if another
    machine's) and ``--payload`` (this run's payload, over the parameter file's)."""
    from jaxmb.io.params_file import apply_hydraulics, read_params

    plant = machine.plant
    if args.params is not None:
        plant = apply_hydraulics(
            plant,
            read_params(args.params, model_name=machine.names, machine_digest=machine.digest()),
        )
    if args.payload is not None:  # the same load weighed: the centre the file's or identified
        from jaxmb.io.machine import weigh_payload

        plant = weigh_payload(plant, args.payload)
    return plant


def _payload_note(plant) -> str:
    if "payload" not in plant.model.body_names:
        return ""
    return f", payload {float(plant.model.body('payload').mass):g} kg"


def _log_replay(args: argparse.Namespace, machine, out) -> int:
    from jaxmb.identification.replay import replay

    print(f"jaxmb simulate: {machine.name}, free-run replay of {args.commands} -> {out}/")
    summary = replay(machine, args.commands, out, params=args.params, payload=args.payload,
                     t_final=args.t_final, plots=not args.no_plots)  # fmt: skip
    units = summary["display_units"]
    print(
        "replay RMSE: "
        + ", ".join(f"{c} {v:.4g} {units[c]}" for c, v in summary["rmse_display"].items())
    )
    print("fit %: " + ", ".join(f"{c} {v:.1f}" for c, v in summary["fit_percent"].items()))
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def _table_replay(args: argparse.Namespace, machine, plant, out) -> int:
    """A command table replayed open loop from the task's first waypoint at rest."""
    from jaxmb.control.machine_report import check_command_table, read_commands
    from jaxmb.control.machine_run import run_table

    acts = plant.actuators
    try:
        if machine.task is None:
            raise ValueError(
                f"machine file {machine.path} has no [task]: a command table replays from its "
                "first waypoint at rest (a log replays from its measured state)"
            )
        table = read_commands(args.commands, tuple(f"u_{a.name}" for a in acts), plant.logged)
        if not set(plant.logged) <= set(table.names):  # a table of commands only
            plant = plant.constant_supply()  # the file's supply and return pressures
        t_final = float(table.t[-1]) if args.t_final is None else args.t_final  # the table's
        u_max = {f"u_{a.name}": float(a.valve.u_max) for a in acts}
        table, clipped = check_command_table(
            table, t_final, u_max, args.commands, clip=args.clip_commands
        )
    except ValueError as err:
        raise SystemExit(f"jaxmb simulate: --commands: {err}") from None
    _check_dt_save(args.dt_save, t_final)
    notes = {}
    if args.clip_commands:
        notes["commands_clipped"] = clipped
        print("--clip-commands: " + ", ".join(f"{k} {v} clipped" for k, v in clipped.items()))
    print(
        f"jaxmb simulate: {machine.name}, open-loop replay of {args.commands}, {t_final:g} s"
        f"{_payload_note(plant)} -> {out}/"
    )
    summary = run_table(machine, table, out, plant=plant, t_final=t_final, dt_save=args.dt_save,
                        notes=notes, progress=not args.quiet, plots=not args.no_plots)  # fmt: skip
    return _print_run(summary, out)


def _machine_vdc(args: argparse.Namespace, machine, plant, out) -> int:
    """The VDC closed loop of a machine file on its ``[task]`` (checked before any compile)."""
    from jaxmb.control.machine_run import (
        machine_controller,
        refuse_off_samples,
        run_machine,
        save_times,
    )

    gains = None
    try:
        if args.gains is not None:
            from jaxmb.control.study_config import read_gains

            gains = read_gains(args.gains, "machine")
        machine_controller(machine, plant)  # the task
    except ValueError as err:
        raise SystemExit(f"jaxmb simulate: {err}") from None
    try:
        machine_controller(machine, plant, gains)  # the gains' shapes and signs
    except ValueError as err:
        raise SystemExit(f"jaxmb simulate: gains file {args.gains}: {err}") from None
    t_final = machine.task.t_final if args.t_final is None else args.t_final
    _check_dt_save(args.dt_save, t_final)
    try:
        refuse_off_samples(machine, save_times(t_final, args.dt_save),
                           f"--dt-save {args.dt_save:g} s over --t-final {t_final:g} s")  # fmt: skip
    except ValueError as err:
        raise SystemExit(f"jaxmb simulate: {err}") from None
    print(
        f"jaxmb simulate: {machine.name}, VDC closed loop on the file's [task], {t_final:g} s"
        f"{_payload_note(plant)} -> {out}/"
    )
    if args.params is not None:
        print(f"plant and controller model: identified parameters from {args.params}")
    if gains is not None:
        print(f"VDC gains from {args.gains}: {gains}")
    summary = run_machine(machine, out, plant=plant, gains=gains, t_final=t_final,
                          dt_save=args.dt_save, progress=not args.quiet,
                          plots=not args.no_plots)  # fmt: skip
    print(
        f"max tool position error {summary['max_tool_position_error_m']:.4g} m, rho "
        f"{summary['rho_s']:.4g} s, max joint errors "
        + ", ".join(f"{k} {v:.3g}" for k, v in summary["max_joint_error_rad"].items())
    )
    return _print_run(summary, out)


def _print_run(summary: dict, out) -> int:
    """What every machine run prints last: valve saturation, cylinder events, solver failure."""
    print(
        "valve saturation time: "
        + ", ".join(f"{k} {v:.3g} s" for k, v in summary["saturation_time_s"].items())
    )
    for k, v in summary["events"].items():
        if v["count"]:
            print(f"warning: {k}: {int(v['count'])} time(s), first at t = "
                  f"{v['first_time']:.4g} s, {v['duration']:.3g} s in all")  # fmt: skip
    if not summary["success"]:
        print("warning: the solver failed; the series stop where it did")
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def section_iv_cmd(args: argparse.Namespace) -> int:
    """``jaxmb simulate --machine arm``: Dastranj & Mattila (2026) Section IV, the robust
    controller of eq. (18) on the 3-DoF series-parallel arm."""
    if args.t_final is None:
        args.t_final = 20.0
    import jax

    jax.config.update("jax_enable_x64", True)
    from pathlib import Path

    from jaxmb.control.report import run_scenario, write_report

    sc, gains = _section_iv_scenario(args)
    out = Path(args.out)
    check_out(out)
    print(f"jaxmb simulate: Section IV scenario, {args.t_final:g} s, gains {gains}, -> {out}/")
    tr = run_scenario(sc, dt_save=args.dt_save, progress=not args.quiet)
    if not bool(tr.success):
        bad = np.flatnonzero(~np.isfinite(np.asarray(tr.q)).all(axis=1))
        at = f" after t = {float(tr.t[bad[0] - 1]):.4g} s" if bad.size and bad[0] > 0 else ""
        raise SystemExit(
            f"jaxmb simulate: the solver failed{at} (max_steps exhausted, or the state left the "
            f"arm's domain); nothing written to {out}"
        )
    _print_section_iv(write_report(sc, tr, out, plots=not args.no_plots))
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def _section_iv_scenario(args: argparse.Namespace):
    """The Section IV scenario with the options' gains (a gains file's over the flags'), the
    controller's form and, with ``--params``, the identified bodies in the controller's model;
    every gain's shape and sign checked before anything compiles."""
    from jaxmb.control import RobustController, section_iv

    if not args.t_final > 0:
        raise SystemExit(
            f"jaxmb simulate: --t-final: expected a duration > 0 s, got {args.t_final}"
        )
    _check_dt_save(args.dt_save, args.t_final)
    gains = {k: _gain(getattr(args, k), k) for k in ("Lambda", "K", "kappa", "eps")}
    if args.gains is not None:
        from jaxmb.control.study_config import read_gains

        try:
            gains.update(read_gains(args.gains, _machines()[args.machine].study))
        except ValueError as err:
            raise SystemExit(f"jaxmb simulate: {err}") from None
    try:  # the gains' shapes and signs, before anything compiles
        sc = section_iv(t_final=args.t_final, **gains)
    except (TypeError, ValueError) as err:
        where = "" if args.gains is None else f"gains file {args.gains}: "
        raise SystemExit(f"jaxmb simulate: {where}{err}") from None
    if args.form == "paper" and args.params is None:
        return sc, gains
    import equinox as eqx

    nominal = sc.nominal
    if args.params is not None:
        from jaxmb.io.params_file import apply_bodies, read_params

        try:
            nominal = apply_bodies(nominal, read_params(args.params, model_name=args.machine))
        except ValueError as err:
            raise SystemExit(f"jaxmb simulate: {err}") from None
        print(f"controller model: identified bodies from {args.params}")
    ctrl = RobustController(nominal, **gains, form=args.form)
    sc = eqx.tree_at(lambda s: s.controller, sc, ctrl)
    return eqx.tree_at(lambda s: s.nominal, sc, nominal), gains


def _print_section_iv(summary: dict) -> None:
    """The run's table against Table III and the ultimate bounds of eqs. (22)-(25), and its
    warnings (the stroke left, kappa_i > dbar_i failing)."""
    names = summary["coordinates"]
    after = f"max|e| t>{summary['max_abs_error_after_s']:g}s"  # 5 s, or half a shorter run
    print(
        f"{'':>8}{'RMSE':>12}{'Table III':>11}{after:>13}{'bound e':>12}{'dbar':>10}"
        f"{'kappa>dbar':>12}"
    )
    for nm in names:
        print(
            f"{nm:>8}{summary['rmse'][nm]:>12.4g}{summary['paper_rmse_table_III'][nm]:>11.3g}"
            f"{summary['max_abs_error_after_5s'][nm]:>13.4g}{summary['ultimate_bound_e'][nm]:>12.4g}"
            f"{summary['dbar'][nm]:>10.4g}{str(summary['kappa_exceeds_dbar'][nm]):>12}"
        )
    st = summary["stroke"]
    if st["time_outside_s"] > 0:
        print(
            f"warning: delta left the stroke {st['range_m']} m (min {st['delta_min_m']:.4g} m, "
            f"max {st['delta_max_m']:.4g} m, first at t = {st['first_exit_s']:.3g} s, "
            f"{st['time_outside_s']:.3g} s outside)"
        )
    failing = [nm for nm in names if not summary["kappa_exceeds_dbar"][nm]]
    if failing:
        print(
            f"note: kappa_i > dbar_i (eq. 25) fails for {failing}; their bound is the K-based one"
        )


@dataclass(frozen=True)
class Run:
    """What `jaxmb simulate` does with one kind of closed loop (a catalog entry's ``control``):
    its command, the options it takes (besides those every machine takes), and its default save
    interval."""

    run: Callable[[argparse.Namespace], int]
    options: tuple[str, ...]
    dt_save: float


# by the kind of closed loop; the machines come from the one table, jaxmb.models.catalog, and
# ".toml" is any machine file (the built-in crane's included:
# `--machine jaxmb/models/machines/lift_tilt_crane.toml`)
RUNS = {
    "robust": Run(section_iv_cmd, ("Lambda", "K", "kappa", "eps", "form", "params", "gains"), 0.01),
    "vdc": Run(machine_cmd, ("commands", "clip_commands", "payload", "params", "gains"), 1e-3),
    "fourth_order": Run(rpr3_flexible_cmd, ("omega",), 0.01),
}
_FILE = ".toml"


def _machines() -> dict:
    """``{name: catalog entry}`` of every machine `jaxmb simulate` runs, and ``".toml"``: a machine
    file's."""
    from jaxmb.models.catalog import CATALOG, machine_file

    return {**{k: e for k, e in CATALOG.items() if e.control in RUNS}, _FILE: machine_file(_FILE)}


def _key(machine: str) -> str:
    return _FILE if machine.lower().endswith(_FILE) else machine


def _shown(key: str) -> str:
    return "a machine file (.toml)" if key == _FILE else key


def _machine_choice(text: str) -> str:
    machines = _machines()
    if _key(text) in machines:
        return text
    names = ", ".join(k for k in machines if k != _FILE)
    raise argparse.ArgumentTypeError(f"expected {names} or a machine file (.toml), got {text!r}")


def _check_simulate_options(args: argparse.Namespace, key: str) -> None:
    """Refuse every option given (not at its default) that machine ``key`` does not take (issue
    29: never silently ignored), naming the machines that do."""
    parser = argparse.ArgumentParser(prog="jaxmb")
    add_parser(parser.add_subparsers(dest="command"))  # this command's own defaults
    defaults = parser.parse_args(["simulate"])
    machines = _machines()
    takes = {k: RUNS[e.control].options for k, e in machines.items()}
    for option in dict.fromkeys(o for r in RUNS.values() for o in r.options):
        if option in takes[key] or getattr(args, option) == getattr(defaults, option):
            continue
        flag = "--" + option.replace("_", "-")
        shown = [_shown(k) for k, o in takes.items() if option in o]
        machine = args.machine if key != _FILE else "a machine file"
        raise SystemExit(
            f"jaxmb simulate: {flag}: not for {machine}; only for --machine {' or '.join(shown)}"
        )


def simulate_cmd(args: argparse.Namespace) -> int:
    key = _key(args.machine)
    entry = _machines()[key]
    run = RUNS[entry.control]
    if args.out is None:
        replay = entry.control == "vdc" and args.commands is not None
        args.out = "out/replay" if replay else f"out/{entry.folder}"
    if args.dt_save is None:
        args.dt_save = run.dt_save
    _check_simulate_options(args, key)
    return run.run(args)


def add_parser(sub) -> None:
    """The ``simulate`` command."""
    p = sub.add_parser(
        "simulate",
        help="a closed-loop run or a replay with a report: the arm's Section IV scenario, a "
        "hydraulic machine file (the crane's built in), or the flexible 3-RPR",
    )
    p.add_argument(
        "--machine",
        type=_machine_choice,
        default="arm",
        help="arm: Dastranj & Mattila Section IV (robust control); rpr3-flexible: Ider et al. "
        "Section 6 (the flexible-joint 3-RPR, fourth-order inverse dynamics control, a particle "
        "impact); a hydraulic machine file (.toml), or crane (the built-in lift/tilt crane's "
        "file): VDC on the file's [task] (the crane's: A-B-C-D), or a replay of --commands",
    )
    p.add_argument(
        "--out",
        default=None,
        help="output folder (default out/ and the machine's folder: out/section_iv, out/crane, "
        "out/rpr3_flexible, out/machine for a machine file; out/replay for a replay of --commands)",
    )
    p.add_argument("--t-final", type=float, default=None, help="duration, s (arm 20, crane 18)")
    p.add_argument(
        "--dt-save", type=float, default=None, help="save interval, s (arm 0.01, crane 0.001)"
    )
    p.add_argument(
        "--commands",
        default=None,
        help="a machine file's replay: a log (Parquet, or a CSV with every coordinate) from its "
        "measured initial state, or a command table (CSV with t and u_<valve>, s and V) open "
        "loop from the task's first waypoint at rest",
    )
    p.add_argument(
        "--clip-commands",
        action="store_true",
        help="a command table's replay: commands outside a valve's range clipped to it "
        "(counted in the report) instead of refused",
    )
    p.add_argument(
        "--payload",
        type=float,
        default=None,
        help="a machine file's payload mass for this run, kg (default: the file's [payload], an "
        "identified --params' or a log sidecar's conditions.payload_kg)",
    )
    p.add_argument("--Lambda", default="1", help="Lambda (one value or phi,theta,delta)")
    p.add_argument("--K", default="30", help="K gains")
    p.add_argument("--kappa", default="50", help="kappa gains")
    p.add_argument("--eps", default="1e-4", help="boundary-layer widths")
    p.add_argument(
        "--form",
        choices=["paper", "passivity"],
        default="paper",
        help="eq. (18) as printed, or with C(q, qd) qd_r (see jaxmb.control.robust)",
    )
    p.add_argument(
        "--params",
        default=None,
        help="identified parameters (params.json of `jaxmb identify`): the arm's controller "
        "model takes its bodies; a machine file's plant and VDC model take its hydraulic "
        "parameters and payload",
    )
    p.add_argument(
        "--gains",
        default=None,
        help="gains.json of `jaxmb tune` (arm: overrides --K etc.; a machine file: the VDC gains)",
    )
    p.add_argument(
        "--omega", type=float, default=None, help="rpr3-flexible: ITAE bandwidth, rad/s (50)"
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress meter")
    p.set_defaults(func=simulate_cmd)
