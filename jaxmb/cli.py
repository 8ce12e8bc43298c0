"""The ``jaxmb`` command.

``jaxmb identify LOG --model NAME`` identifies a model from a logged experiment (the main job;
plain ``jaxmb`` runs it on the bundled KR300 recordings).
``jaxmb simulate`` runs the Section IV closed-loop scenario and writes its report.
``jaxmb montecarlo CONFIG.toml --out DIR`` runs a Monte Carlo robustness study (resumable).
``jaxmb tune`` tunes the robust controller's gains against the practical-stability bounds (the
arm), or the VDC gains within the valve and pressure limits (the crane).
``jaxmb state`` (also ``jaxmb --q ...``) prints, for the 3-DoF series-parallel arm at a given
state, Gamma, the per-body Gamma_i, h, the gravity force and the forward-dynamics acceleration.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

import numpy as np


def _vector(text: str, name: str, n: int) -> np.ndarray:
    try:
        values = [float(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise SystemExit(
            f"jaxmb: --{name}: expected {n} numbers separated by commas, got {text!r}"
        ) from None
    if len(values) != n or not np.all(np.isfinite(values)):
        raise SystemExit(f"jaxmb: --{name}: expected {n} finite numbers, got {text!r}")
    return np.asarray(values)


def _matrix_lines(name: str, A: np.ndarray, names: tuple[str, ...]) -> list[str]:
    width = max(12, *(len(c) + 2 for c in names))
    head = " " * 8 + "".join(f"{c:>{width}}" for c in names)
    rows = [
        f"{r:>8}" + "".join(f"{x:>{width}.6g}" for x in row)
        for r, row in zip(names, A, strict=True)
    ]
    return [name, head, *rows]


def _vector_line(name: str, v: np.ndarray, names: tuple[str, ...], unit: str) -> str:
    return (
        f"{name:<28}"
        + "  ".join(f"{c}={x:.6g}" for c, x in zip(names, v, strict=True))
        + f"  ({unit})"
    )


def state(args: argparse.Namespace) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)  # the CLI reports in float64
    import jax.numpy as jnp

    import jaxmb
    from jaxmb.models.series_parallel import L0, STROKE, l0

    model = jaxmb.models.series_parallel_3dof(full=args.full)
    names = model.coordinate_names
    q = _vector(args.q, "q", 3)
    qd = _vector(args.qd, "qd", 3)
    tau = _vector(args.tau, "tau", 3)
    lo, hi = -l0, 2 * L0 - l0
    if not lo < q[2] < hi:
        raise SystemExit(
            f"jaxmb: --q: delta = {q[2]} m is outside the closed chain's domain ({lo}, {hi}) m"
        )
    q, qd, tau = jnp.asarray(q), jnp.asarray(qd), jnp.asarray(tau)
    Gamma_i = np.asarray(jaxmb.body_mass_matrices(model, q))
    Gamma = np.asarray(jaxmb.mass_matrix(model, q))
    h = np.asarray(jaxmb.bias_forces(model, q, qd))
    Qg = np.asarray(jaxmb.gravity_forces(model, q))
    qdd = np.asarray(jaxmb.forward_dynamics(model, q, qd, tau))

    if args.json:
        out = {
            "model": "series_parallel_3dof" + ("(full)" if args.full else ""),
            "coordinates": list(names),
            "q": q.tolist(),
            "qd": qd.tolist(),
            "tau": tau.tolist(),
            "Gamma": Gamma.tolist(),
            "Gamma_i": {b: G.tolist() for b, G in zip(model.body_names, Gamma_i, strict=True)},
            "h": h.tolist(),
            "gravity_force": Qg.tolist(),
            "qdd": qdd.tolist(),
        }
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    lines = [
        f"3-DoF series-parallel arm ({'full plant: + cylinder, piston' if args.full else 'nominal'})",
        _vector_line("q", np.asarray(q), names, "rad, rad, m"),
        _vector_line("qd", np.asarray(qd), names, "rad/s, rad/s, m/s"),
        _vector_line("tau (Q_a)", np.asarray(tau), names, "N m, N m, N"),
        "",
        *_matrix_lines("Gamma = sum_i Gamma_i (eq. 10)", Gamma, names),
    ]
    for b, G in zip(model.body_names, Gamma_i, strict=True):
        lines += ["", *_matrix_lines(f"Gamma_{b} (eq. 9)", G, names)]
    lines += [
        "",
        _vector_line("h (eq. 13)", h, names, "N m, N m, N"),
        _vector_line("gravity force Q_g", Qg, names, "N m, N m, N"),
        _vector_line("qdd (forward dynamics)", qdd, names, "rad/s^2, rad/s^2, m/s^2"),
    ]
    if not STROKE[0] <= float(q[2]) <= STROKE[1]:
        lines.append(f"note: delta = {float(q[2])} m is outside the stroke {STROKE} m")
    print("\n".join(lines))
    return 0


def _gain(text: str, name: str) -> list[float]:
    vals = _vector(text, name, 3) if "," in text or " " in text.strip() else _vector(text, name, 1)
    if not np.all(vals > 0):
        raise SystemExit(f"jaxmb: --{name}: expected positive gains, got {text!r}")
    return np.broadcast_to(vals, (3,)).tolist()


def crane_cmd(args: argparse.Namespace) -> int:
    """``jaxmb simulate --machine crane``: the VDC closed loop on the A-B-C-D task, or an
    open-loop replay of a command table (``--commands``)."""
    from pathlib import Path

    out = Path(args.out)
    _check_writable(out)  # made by the report once every input has passed
    t_final = 18.0 if args.t_final is None else args.t_final
    if not t_final > 0 or not 0 < args.dt_save <= t_final:
        raise SystemExit("jaxmb: --t-final and --dt-save must be positive, dt-save <= t-final")
    if not args.payload >= 0:
        raise SystemExit(f"jaxmb: --payload: expected a mass >= 0 kg, got {args.payload}")
    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxmb.control.crane_run import run_crane

    gains = None
    if args.gains is not None:
        if args.commands is not None:
            raise SystemExit("jaxmb: --gains: the replay of --commands has no controller")
        from jaxmb.control.crane_run import crane_controller
        from jaxmb.control.study_config import read_gains

        try:
            gains = read_gains(args.gains, "crane")
        except ValueError as err:
            raise SystemExit(f"jaxmb simulate: {err}") from None
        try:
            crane_controller(**gains)  # shapes and signs, before anything compiles
        except ValueError as err:
            raise SystemExit(f"jaxmb simulate: gains file {args.gains}: {err}") from None
    notes: dict = {}
    if args.commands is not None:
        from jaxmb.control.crane_report import check_command_table, read_commands
        from jaxmb.models.crane import lift_tilt_crane_plant

        try:
            table = read_commands(args.commands, ("u_lift", "u_tilt"))
            if args.t_final is None:  # the table's span
                t_final = float(table.t[-1])
            u_max = {f"u_{a.name}": float(a.valve.u_max) for a in lift_tilt_crane_plant().actuators}
            table, clipped = check_command_table(
                table, t_final, u_max, args.commands, clip=args.clip_commands
            )
        except ValueError as err:
            raise SystemExit(f"jaxmb: --commands: {err}") from None
        if args.clip_commands:
            notes["commands_clipped"] = clipped
            print("--clip-commands: " + ", ".join(f"{k} {v} clipped" for k, v in clipped.items()))
        what = f"open-loop replay of {args.commands}"
    else:
        if args.clip_commands:
            raise SystemExit("jaxmb: --clip-commands: only for the replay of --commands")
        table = None
        what = "VDC closed loop on the A-B-C-D task"
    plant = None
    if args.params is not None:
        from jaxmb.identification.hydraulic_route import apply_hydraulics
        from jaxmb.identification.params_file import read_params
        from jaxmb.models.crane import lift_tilt_crane_plant

        try:
            doc = read_params(args.params, model_name="crane")
            plant = apply_hydraulics(lift_tilt_crane_plant(), doc)  # its payload, if identified
            if args.payload != 0.0:  # the option names this run's payload
                plant = apply_hydraulics(
                    plant, {"payload": {"mass": args.payload, "com": [0.0] * 3}}
                )
        except ValueError as err:
            raise SystemExit(f"jaxmb simulate: {err}") from None
    payload = args.payload  # the run's: the option's, else the parameter file's if it has one
    if plant is not None and "payload" in plant.model.body_names:
        payload = float(plant.model.bodies[plant.model.body_names.index("payload")].mass)
    print(
        f"jaxmb simulate: lift/tilt crane, {what}, {t_final:g} s, payload {payload:g} kg -> {out}/"
    )
    if args.params is not None:
        print(f"plant and controller model: hydraulic parameters from {args.params}")
    if gains is not None:
        print(f"VDC gains from {args.gains}: {gains}")
    summary = run_crane(
        out,
        plant=plant,
        gains=gains,
        commands=table,
        notes=notes,
        t_final=t_final,
        dt_save=args.dt_save,
        payload=payload,
        progress=not args.quiet,
        plots=not args.no_plots,
    )
    if "max_tool_position_error_m" in summary:
        print(
            f"max tool position error {summary['max_tool_position_error_m']:.4g} m, "
            f"rho {summary['rho_s']:.4g} s, max joint errors "
            + ", ".join(f"{k} {v:.3g} rad" for k, v in summary["max_joint_error_rad"].items())
        )
    print(
        "valve saturation time: "
        + ", ".join(f"{k} {v:.3g} s" for k, v in summary["saturation_time_s"].items())
    )
    hit = {k: v for k, v in summary["events"].items() if v["count"]}
    for k, v in hit.items():
        print(
            f"warning: {k}: {int(v['count'])} time(s), first at t = {v['first_time']:.4g} s, "
            f"{v['duration']:.3g} s in all"
        )
    if not summary["success"]:
        print("warning: the solver failed; the series stop where it did")
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def _check_writable(out) -> None:
    """The output folder could be made and written, checked without making it (a refused run
    leaves nothing behind)."""
    import os
    from pathlib import Path

    parent = Path(out).absolute()
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise SystemExit(f"jaxmb: --out: cannot write to {str(out)!r} ({parent} is not writable)")


def _check_out(out) -> None:
    """The output folder must be creatable and writable before anything is computed."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".jaxmb-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise SystemExit(
            f"jaxmb: --out: cannot write to {str(out)!r}: {err.strerror or err}"
        ) from None


def rpr3_flexible_cmd(args: argparse.Namespace) -> int:
    """``jaxmb simulate --machine rpr3-flexible``: Ider et al. (2019) Section 6."""
    from pathlib import Path

    t_final = 2.0 if args.t_final is None else args.t_final
    steps = round(t_final / 0.002)
    # the report reads the errors after 1 s and checks eq. (31) over 0.6-0.95 s
    if not t_final >= 1.0 or abs(steps * 0.002 - t_final) > 1e-9:
        raise SystemExit(
            f"jaxmb: --t-final: expected a multiple of the sampling interval 0.002 s of at least "
            f"1 s (the report's windows: errors after 1 s, eq. (31) over 0.6-0.95 s), got {t_final}"
        )
    if args.omega is not None and not args.omega > 0:
        raise SystemExit(f"jaxmb: --omega: expected a bandwidth > 0 rad/s, got {args.omega}")
    out = Path(args.out)
    _check_out(out)
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


def _machine_choice(text: str) -> str:
    if text in ("arm", "crane", "rpr3-flexible") or text.lower().endswith(".toml"):
        return text
    raise argparse.ArgumentTypeError(
        f"expected arm, crane, rpr3-flexible or a machine file (.toml), got {text!r}"
    )


def machine_cmd(args: argparse.Namespace) -> int:
    """``jaxmb simulate --machine FILE.toml``: a free-run replay of a log (``--commands LOG``),
    or the VDC closed loop on the file's ``[task]``."""
    from pathlib import Path

    if args.commands is not None and args.gains is not None:
        raise SystemExit("jaxmb simulate: --gains: the replay of --commands has no controller")
    if args.t_final is not None and not args.t_final > 0:
        raise SystemExit(
            f"jaxmb simulate: --t-final: expected a duration > 0 s, got {args.t_final}"
        )
    out = Path(args.out)
    _check_writable(out)
    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxmb.models.machine import load_machine

    try:
        machine = load_machine(args.machine)
    except ValueError as err:
        raise SystemExit(f"jaxmb simulate: {err}") from None
    if args.commands is None:
        return _machine_vdc(args, machine, out)
    from jaxmb.identification.replay import replay

    try:
        print(f"jaxmb simulate: {machine.name}, free-run replay of {args.commands} -> {out}/")
        summary = replay(machine, args.commands, out, params=args.params,
                         t_final=args.t_final, plots=not args.no_plots)  # fmt: skip
    except ValueError as err:
        raise SystemExit(f"jaxmb simulate: {err}") from None
    units = summary["display_units"]
    print(
        "replay RMSE: "
        + ", ".join(f"{c} {v:.4g} {units[c]}" for c, v in summary["rmse_display"].items())
    )
    print("fit %: " + ", ".join(f"{c} {v:.1f}" for c, v in summary["fit_percent"].items()))
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def _machine_vdc(args: argparse.Namespace, machine, out) -> int:
    """The VDC closed loop of a machine file on its ``[task]`` (checked before any compile)."""
    from jaxmb.control.machine_run import machine_controller, run_machine

    plant, gains = machine.plant, None
    try:
        if args.params is not None:
            from jaxmb.identification.hydraulic_route import apply_hydraulics
            from jaxmb.identification.params_file import read_params

            doc = read_params(args.params)
            if doc["model"] not in machine.names:
                raise ValueError(
                    f"--params: {args.params} holds parameters of model {doc['model']!r}, not "
                    f"{machine.name!r}"
                )
            plant = apply_hydraulics(plant, doc)
        if args.gains is not None:
            from jaxmb.control.study_config import read_gains

            gains = read_gains(args.gains, "machine")
        machine_controller(machine, plant, gains)  # the task, gains' shapes and signs
    except ValueError as err:
        raise SystemExit(f"jaxmb simulate: {err}") from None
    t_final = machine.task.t_final if args.t_final is None else args.t_final
    if not 0 < args.dt_save <= t_final:
        raise SystemExit(f"jaxmb simulate: --dt-save: expected 0 < dt <= {t_final:g} s")
    print(
        f"jaxmb simulate: {machine.name}, VDC closed loop on the file's [task], {t_final:g} s -> {out}/"
    )
    if args.params is not None:
        print(f"plant and controller model: identified parameters from {args.params}")
    if gains is not None:
        print(f"VDC gains from {args.gains}: {gains}")
    summary = run_machine(machine, out, plant=plant, gains=gains, t_final=t_final,
                          dt_save=args.dt_save, progress=not args.quiet,
                          plots=not args.no_plots)  # fmt: skip
    print(
        f"max tool position error {summary['max_tool_position_error_m']:.4g} m, max joint "
        "errors " + ", ".join(f"{k} {v:.3g}" for k, v in summary["max_joint_error_rad"].items())
    )
    print(
        "valve saturation time: "
        + ", ".join(f"{k} {v:.3g} s" for k, v in summary["saturation_time_s"].items())
    )
    if not summary["success"]:
        print("warning: the solver failed; the series stop where it did")
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


# the machines each option of `jaxmb simulate` applies to ("file": a machine file); an option
# given for another machine is refused by name (issue 29), never silently ignored
_ARM_ONLY = ("arm",)
SIMULATE_OPTIONS = {
    "commands": ("crane", "file"), "clip_commands": ("crane",), "payload": ("crane",),
    "Lambda": _ARM_ONLY, "K": _ARM_ONLY, "kappa": _ARM_ONLY, "eps": _ARM_ONLY, "form": _ARM_ONLY,
    "params": ("arm", "crane", "file"), "gains": ("arm", "crane", "file"),
    "omega": ("rpr3-flexible",),
}  # fmt: skip
_WHY = {
    ("payload", "file"): " (a machine file's payload is its [payload], a log sidecar's "
    "conditions.payload_kg, or an identified --params)",
    ("clip_commands", "file"): " (a machine file's replay reads a validated log)",
}


def _check_simulate_options(args: argparse.Namespace, kind: str) -> None:
    """Refuse every option given (not at its default) that ``kind`` of machine does not use."""
    defaults = build_parser().parse_args(["simulate"])
    for option, machines in SIMULATE_OPTIONS.items():
        if kind in machines or getattr(args, option) == getattr(defaults, option):
            continue
        flag = "--" + option.replace("_", "-")
        shown = [m if m != "file" else "a machine file (.toml)" for m in machines]
        machine = args.machine if kind != "file" else "a machine file"
        raise SystemExit(
            f"jaxmb simulate: {flag}: not for {machine}; only for --machine "
            f"{' or '.join(shown)}{_WHY.get((option, kind), '')}"
        )


def simulate_cmd(args: argparse.Namespace) -> int:
    kind = "file" if args.machine.lower().endswith(".toml") else args.machine
    _check_simulate_options(args, kind)
    if kind == "file":
        return machine_cmd(args)
    if args.machine == "crane":
        return crane_cmd(args)
    if args.machine == "rpr3-flexible":
        return rpr3_flexible_cmd(args)
    if args.t_final is None:
        args.t_final = 20.0
    import jax

    jax.config.update("jax_enable_x64", True)
    from pathlib import Path

    from jaxmb.control import RobustController, section_iv
    from jaxmb.control.report import run_scenario, write_report

    if not args.t_final > 0 or not 0 < args.dt_save <= args.t_final:
        raise SystemExit("jaxmb: --t-final and --dt-save must be positive, dt-save <= t-final")
    gains = {k: _gain(getattr(args, k), k) for k in ("Lambda", "K", "kappa", "eps")}
    if args.gains is not None:
        from jaxmb.control.study_config import read_gains

        try:
            gains.update(read_gains(args.gains, "section_iv"))
        except ValueError as err:
            raise SystemExit(f"jaxmb simulate: {err}") from None
    try:  # the gains' shapes and signs, before anything compiles
        sc = section_iv(t_final=args.t_final, **gains)
    except (TypeError, ValueError) as err:
        where = "" if args.gains is None else f"gains file {args.gains}: "
        raise SystemExit(f"jaxmb simulate: {where}{err}") from None
    if args.form != "paper" or args.params is not None:
        import equinox as eqx

        nominal = sc.nominal
        if args.params is not None:
            from jaxmb.identification.params_file import apply_bodies, read_params

            try:
                nominal = apply_bodies(nominal, read_params(args.params, model_name="arm"))
            except ValueError as err:
                raise SystemExit(f"jaxmb simulate: {err}") from None
            print(f"controller model: identified bodies from {args.params}")
        ctrl = RobustController(nominal, **gains, form=args.form)
        sc = eqx.tree_at(lambda s: s.controller, sc, ctrl)
        sc = eqx.tree_at(lambda s: s.nominal, sc, nominal)
    out = Path(args.out)
    _check_out(out)
    print(f"jaxmb simulate: Section IV scenario, {args.t_final:g} s, gains {gains}, -> {out}/")
    tr = run_scenario(sc, dt_save=args.dt_save, progress=not args.quiet)
    if not bool(tr.success):
        bad = np.flatnonzero(~np.isfinite(np.asarray(tr.q)).all(axis=1))
        at = f" after t = {float(tr.t[bad[0] - 1]):.4g} s" if bad.size and bad[0] > 0 else ""
        raise SystemExit(
            f"jaxmb simulate: the solver failed{at} (max_steps exhausted, or the state left the "
            f"arm's domain); nothing written to {out}"
        )
    summary = write_report(sc, tr, out, plots=not args.no_plots)
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
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def _mapping(text: str | None, name: str) -> dict[str, float]:
    """``"q1=250,q2=3.5"`` -> ``{"q1": 250.0, "q2": 3.5}``."""
    if text is None:
        return {}
    out = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not key.strip():
            raise SystemExit(f"jaxmb: --{name}: expected NAME=VALUE,... got {text!r}")
    return out


def identify_cmd(args: argparse.Namespace) -> int:
    """``jaxmb identify LOG --model NAME_OR_URDF --out DIR``: the main job."""
    from pathlib import Path

    for name, ok, expected in (
        ("cutoff", args.cutoff is None or args.cutoff > 0, "a frequency > 0 Hz"),
        ("stride", args.stride is None or args.stride >= 1, "an integer >= 1"),
        ("prior-weight", args.prior_weight is None or args.prior_weight >= 0, "a weight >= 0"),
        ("coulomb-width", args.coulomb_width is None or 0 < args.coulomb_width < float("inf"),
         "a velocity > 0"),
        ("segment-time", args.segment_time is None or 0 < args.segment_time < float("inf"),
         "a duration > 0 s"),
    ):  # fmt: skip
        if not ok:
            value = getattr(args, name.replace("-", "_"))
            raise SystemExit(f"jaxmb identify: --{name}: expected {expected}, got {value}")
    _check_device_options(args, "identify")  # the one check of --cpu-devices for every command
    log = [Path(p) for p in args.log]
    for p in (*log, *map(Path, args.validate)):
        if not p.is_file():
            raise SystemExit(f"jaxmb identify: no such log file {str(p)!r}")
    out = Path(args.out)
    _check_writable(out)  # made once every input has passed its checks
    _setup_devices(args)
    from jaxmb.identification.identify import identify

    terms = tuple(t for t in args.terms.split(",") if t) if args.terms is not None else None
    drives = None
    if args.gear_ratios is not None or args.torque_constants is not None:
        from jaxmb.identification.rigid import Drives

        try:
            drives = Drives(
                _mapping(args.gear_ratios, "gear-ratios"),
                _mapping(args.torque_constants, "torque-constants"),
            )
        except ValueError as err:
            raise SystemExit(f"jaxmb identify: {err}") from None
    window = None
    if args.window is not None:
        w = _vector(args.window, "window", 2)
        if not w[0] < w[1]:
            raise SystemExit(
                f"jaxmb identify: --window: expected T0,T1 with T0 < T1, got {args.window!r}"
            )
        window = (float(w[0]), float(w[1]))
    options = {} if terms is None else {"terms": terms}
    print(f"jaxmb identify: {', '.join(map(str, log))} with model {args.model!r} -> {out}/")
    try:
        summary = identify(
            log[0] if len(log) == 1 else log,
            args.model,
            out,
            validate=args.validate,
            method=args.method,
            cutoff=args.cutoff,
            stride=args.stride,
            prior_weight=args.prior_weight,
            coulomb_width=args.coulomb_width,
            window=window,
            resample=args.resample,
            drives=drives,
            leakage=args.leakage,
            mechanics=args.mechanics,
            segment_time=args.segment_time,
            long_refit=args.long_refit,
            show_progress=not args.quiet,
            **options,
        )
    except ValueError as err:
        raise SystemExit(f"jaxmb identify: {err}") from None
    print(f"route: {summary['route']}, method: {summary['method']}")
    print(f"condition number {summary['condition_number']:.4g}")
    print("fit RMSE: " + ", ".join(f"{k} {v:.4g}" for k, v in summary["fit_rmse"].items()))
    if len(summary.get("fit_rmse_per_log", {})) > 1:
        for name, rm in summary["fit_rmse_per_log"].items():
            print(f"  of {name}: " + ", ".join(f"{k} {v:.4g}" for k, v in rm.items()))
    for name, rm in summary["validation_rmse"].items():
        print(f"validation RMSE on {name}: " + ", ".join(f"{k} {v:.4g}" for k, v in rm.items()))
        every = summary.get("validation_rmse_every_sample", {}).get(name)
        if every is not None:
            print(f"  on every sample ({summary['validation_edge_s']:.3g} s ends included): "
                  + ", ".join(f"{k} {v:.4g}" for k, v in every.items()))  # fmt: skip
        if name in summary.get("validation_rmse_expected", {}):
            ex = summary["validation_rmse_expected"][name]
            print("  expected from the noise and the parameters' std: "
                  + ", ".join(f"{k} {v:.4g}" for k, v in ex.items()))  # fmt: skip
    urdf = summary.get("urdf")
    if urdf is not None:
        if urdf["file"] is None:
            print(f"identified URDF: {urdf['why']}")
        for line in urdf.get("not_in_file", ()):
            print(f"identified URDF {urdf['file']}: {line}")
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def _check_device_options(args: argparse.Namespace, command: str) -> None:
    """The device and multi-process options, checked before anything starts: counts >= 1, a
    process id below the number of processes, and those two only with ``--coordinator``."""
    n, pid = getattr(args, "num_processes", None), getattr(args, "process_id", None)
    for flag, v in (("--cpu-devices", args.cpu_devices), ("--num-processes", n)):
        if v is not None and v < 1:
            raise SystemExit(f"jaxmb {command}: {flag}: expected an integer >= 1, got {v}")
    if getattr(args, "coordinator", None):
        if n is None or pid is None:
            raise SystemExit("jaxmb: --coordinator needs --num-processes and --process-id")
        if not 0 <= pid < n:
            raise SystemExit(
                f"jaxmb {command}: --process-id: expected 0 <= id < --num-processes = {n}, got {pid}"
            )
    elif n is not None or pid is not None:
        raise SystemExit(
            f"jaxmb {command}: --num-processes, --process-id: only with --coordinator HOST:PORT "
            "(a multi-process run; one process uses every local device without them)"
        )


def _setup_devices(args: argparse.Namespace) -> None:
    """Before jax is imported: split the CPU into XLA devices (one per core by default, so that
    a sharded batch uses every core), and join a multi-process run if asked."""
    import os

    n = args.cpu_devices or os.cpu_count() or 1
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
    import jax

    jax.config.update("jax_enable_x64", True)
    if getattr(args, "coordinator", None) or getattr(args, "distributed", False):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        flag = "--coordinator" if args.coordinator else "--distributed"
        try:
            if args.coordinator:
                jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)
            else:
                jax.distributed.initialize()  # detected from the cluster (SLURM, Open MPI, ...)
        except (RuntimeError, ValueError) as err:
            raise SystemExit(
                f"jaxmb: {flag}: could not join the multi-process run: {err}"
            ) from None


def montecarlo_cmd(args: argparse.Namespace) -> int:
    from pathlib import Path

    for name in ("samples", "chunk"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise SystemExit(f"jaxmb montecarlo: --{name}: expected an integer >= 1, got {v}")
    _check_device_options(args, "montecarlo")
    out = Path(args.out)
    _check_writable(out)  # made once the configuration is read: a refusal leaves nothing
    _setup_devices(args)
    import jax

    from jaxmb.control import montecarlo, study_config
    from jaxmb.control.mc_report import write_mc_report

    try:
        cfg = study_config.load_config(args.config)
        if args.gains is not None:
            cfg.setdefault("controller", {})["gains"] = str(Path(args.gains).resolve())
        study, controller, n, chunk, lanes, desc = study_config.build_study(
            cfg, samples=args.samples, chunk=args.chunk
        )
    except ValueError as err:
        raise SystemExit(f"jaxmb montecarlo: {err}") from None
    lead = jax.process_index() == 0
    if lead:
        what = desc["study"].get("machine", desc["study"]["scenario"])
        print(
            f"jaxmb montecarlo: {what}, {n} samples (chunks of {chunk}, "
            f"{lanes} lanes) over {len(jax.devices())} device(s), {jax.process_count()} "
            f"process(es) -> {out}/"
        )
    try:
        table = montecarlo.run_study(
            study, controller, out, samples=n, chunk=chunk, description=desc,
            progress=not args.quiet, lanes=lanes,
        )  # fmt: skip
    except ValueError as err:
        raise SystemExit(f"jaxmb montecarlo: {err}") from None
    if table is None:
        return 0
    summary = write_mc_report(out, table, study, plots=not args.no_plots)
    print(f"{summary['samples']} samples, {summary['failed']} failed")
    if "fraction_within_bound" in summary:
        print(f"within the computed ultimate bound: {summary['fraction_within_bound']:.1%}")
        print(f"kappa_i > dbar_i (eq. 25): {summary['fraction_kappa_exceeds_dbar']}")
    for c in study.coordinate_names:
        f = summary["figures"].get(f"rmse_{c}")
        if f:
            print(f"rmse {c}: median {f['p50']:.4g}, p95 {f['p95']:.4g}, max {f['max']:.4g}")
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def tune_cmd(args: argparse.Namespace) -> int:
    from pathlib import Path

    _check_device_options(args, "tune")

    out = Path(args.out)
    _check_writable(out)  # made once the configuration is read: a refusal leaves nothing
    _setup_devices(args)
    from jaxmb.control import study_config
    from jaxmb.control.tune_run import check_tune_section, run_tune

    try:
        cfg = study_config.load_config(args.config)
        check_tune_section(cfg, cfg["study"]["scenario"])  # before the options below add to it
        if args.steps is not None:
            cfg.setdefault("tune", {})["steps"] = args.steps
        if args.validation_samples is not None:
            cfg.setdefault("tune", {})["validation_samples"] = args.validation_samples
        print(f"jaxmb tune: {args.config} -> {out}/")
        summary = run_tune(cfg, out, progress=not args.quiet, plots=not args.no_plots)
    except ValueError as err:
        raise SystemExit(f"jaxmb tune: {err}") from None
    tuned, given = summary["gains"]["tuned"], summary["gains"]["given"]
    for label, g in (("given", given), ("tuned", tuned)):
        cols = [f"{k} " + " ".join(f"{x:.3g}" for x in np.atleast_1d(v)) for k, v in g.items()]
        print(f"{label} gains: " + " | ".join(cols))
    for name in ("given", "tuned"):
        v = summary[f"validation_{name}"]
        print(f"validation ({name} gains, {v['samples']} fresh samples, {v['failed']} failed):")
        for c, r in v.items():
            if not isinstance(r, dict) or not all(r.values()):
                continue  # a count, or figures of a sample set that all failed
            if "kappa" in r:
                print(
                    f"  {c:>6}: kappa {r['kappa']:.4g} vs dbar {r['dbar_max']:.4g} "
                    f"({'holds' if r['kappa_exceeds_dbar'] else 'fails'}), bound "
                    f"{r['ultimate_bound_e']:.4g}, measured max error {r['max_error_max']}"
                )
            elif "rmse" in r:
                print(
                    f"  {c:>6}: rmse p95 {r['rmse']['p95']:.3g} {r['unit']}, max error after "
                    f"the transient p95 {r['max_error']['p95']:.3g} {r['unit']}"
                )
            else:
                print(
                    f"  {c:>6}: peak command p95 {r['peak_command']['p95']:.3g} V "
                    f"(limit {r['u_max']:g}), saturated p95 {r['saturation_time_s']['p95']:.3g} s"
                )
    for line in summary["tuning"]["conflicts"]:
        print(f"conflict: {line}")
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def _add_device_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cpu-devices",
        type=int,
        default=None,
        help="split the CPU into this many XLA devices (default: one per core)",
    )
    p.add_argument(
        "--distributed",
        action="store_true",
        help="join a multi-process run whose layout JAX detects (SLURM, Open MPI, ...)",
    )
    p.add_argument("--coordinator", default=None, help="host:port of process 0 (jax.distributed)")
    p.add_argument("--num-processes", type=int, default=None, help="with --coordinator")
    p.add_argument("--process-id", type=int, default=None, help="with --coordinator")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxmb", description="Differentiable multibody dynamics for closed-chain manipulators."
    )
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("state", help="dynamics of the 3-DoF series-parallel arm at one state")
    p.add_argument("--q", default="0.1,0.35,0.1", help="phi,theta,delta (rad, rad, m)")
    p.add_argument("--qd", default="0.2,-0.1,0.05", help="velocities (rad/s, rad/s, m/s)")
    p.add_argument("--tau", default="0,0,0", help="actuator forces Q_a (N m, N m, N)")
    p.add_argument("--full", action="store_true", help="the full plant (adds cylinder, piston)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=state)
    p = sub.add_parser(
        "simulate",
        help="a closed-loop run with a report: the arm's Section IV scenario, or the crane",
    )
    p.add_argument(
        "--machine",
        type=_machine_choice,
        default="arm",
        help="arm: Dastranj & Mattila Section IV (robust control); crane: the lift/tilt crane "
        "(VDC on the A-B-C-D task, or --commands); rpr3-flexible: Ider et al. Section 6 (the "
        "flexible-joint 3-RPR, fourth-order inverse dynamics control, a particle impact); or a "
        "hydraulic machine file (.toml): VDC on the file's [task] (--gains, --params apply), or "
        "a free-run replay of --commands LOG from its measured initial state",
    )
    p.add_argument(
        "--out",
        default=None,
        help="output folder (default out/section_iv, out/crane, out/rpr3_flexible, out/machine or "
        "out/replay)",
    )
    p.add_argument("--t-final", type=float, default=None, help="duration, s (arm 20, crane 18)")
    p.add_argument(
        "--dt-save", type=float, default=None, help="save interval, s (arm 0.01, crane 0.001)"
    )
    p.add_argument(
        "--commands",
        default=None,
        help="crane: CSV with t, u_lift, u_tilt (s, V) replayed open loop (a log works too)",
    )
    p.add_argument(
        "--clip-commands",
        action="store_true",
        help="crane: replay --commands outside a valve's range clipped to it (counted in the "
        "report) instead of refusing them",
    )
    p.add_argument("--payload", type=float, default=0.0, help="crane: payload at the tool, kg")
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
        "model takes its bodies; the crane's plant and VDC model take its hydraulic parameters",
    )
    p.add_argument(
        "--gains",
        default=None,
        help="gains.json of `jaxmb tune` (arm: overrides --K etc.; crane: the VDC gains)",
    )
    p.add_argument(
        "--omega", type=float, default=None, help="rpr3-flexible: ITAE bandwidth, rad/s (50)"
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress meter")
    p.set_defaults(func=simulate_cmd)
    p = sub.add_parser(
        "identify",
        help="identify a model's parameters from a logged experiment (the main job)",
        description="Identify inertial, drive, friction or hydraulic parameters from a log "
        "(CSV or Parquet with a t column and SI signals named after the model's coordinates and "
        "actuators; see jaxmb.identification.logs) and write a report.",
    )
    p.add_argument(
        "log",
        nargs="+",
        help="the log to identify from (.csv or .parquet, sidecar .json); a robot: one or more "
        "experiments fitted together, each with its own noise levels and the payload its "
        "sidecar's conditions name (payload_kg, payload_com, payload_frame)",
    )
    p.add_argument(
        "--model",
        required=True,
        help="a built-in model (arm, kr300, crane), a URDF file (regressor route) or a "
        "hydraulic machine file (.toml beside its URDF; see jaxmb.models.machine)",
    )
    p.add_argument("--out", default="out/identify", help="output folder (default out/identify)")
    p.add_argument(
        "--validate",
        action="append",
        default=[],
        metavar="LOG2",
        help="predict a further log with the identified model (repeatable); hydraulic "
        "machines: a free-run replay of its commands from its measured initial state",
    )
    p.add_argument(
        "--method",
        choices=["consistent", "wls", "ols"],
        default=None,
        help="regressor route of a rigid robot: physically consistent fit (default), "
        "base-parameter WLS or OLS",
    )
    p.add_argument(
        "--cutoff",
        type=float,
        default=None,
        help="zero-phase low-pass cutoff, Hz (default for a robot: the smallest of 2-15 Hz at or "
        "above 3 x the fit logs' motion bandwidth, reported; a hydraulic machine's stage 1 "
        "(mechanics): 4)",
    )
    p.add_argument(
        "--stride",
        type=int,
        default=None,
        help="keep every k-th filtered sample (default 1 for a robot; a hydraulic machine's "
        "stage 1: 10)",
    )
    p.add_argument(
        "--prior-weight",
        type=float,
        default=None,
        help="consistent fit: weight w of the log-det divergence toward the model's own (CAD) "
        "inertias, which trusts them to about 1/(2 sqrt(w)) in scale (default 0.1 for a robot; "
        "625, i.e. 2 %%, for a hydraulic machine's booms; 0 for none on a robot)",
    )
    p.add_argument(
        "--terms",
        default=None,
        help="joint drive/friction terms, comma separated, from armature, viscous, coulomb, "
        "stribeck, offset (default armature,viscous,coulomb,offset; empty string for none)",
    )
    p.add_argument(
        "--coulomb-width",
        type=float,
        default=None,
        help="regressor route: width w of the smoothed Coulomb sign tanh(qd / w), rad/s or m/s "
        "(default: 3 x the filtered velocity's noise std, from the log; reported)",
    )
    p.add_argument(
        "--window", default=None, help="fit on T0,T1 (s) of the log only (default: all of it)"
    )
    p.add_argument(
        "--resample",
        choices=("auto", "off"),
        default=None,
        help="regressor route, logs as recorded (jittered time stamps, gaps): split at every "
        "gap longer than a tenth of the cutoff's period (and 2 samples), put each piece on a "
        "uniform grid at the median interval, and filter each on its own (auto, the default; "
        "the report says what was found and done), or refuse such a log (off)",
    )
    p.add_argument(
        "--gear-ratios",
        default=None,
        help="motor-side logs: gear ratios per coordinate, e.g. q1=256.9,q2=267.4 "
        "(tau = G tau_motor_<c>); the built-in KR300 has its own",
    )
    p.add_argument(
        "--torque-constants",
        default=None,
        help="logs of motor currents i_<c>: torque constants, N m/A, e.g. q1=1.2,q2=1.2",
    )
    p.add_argument(
        "--leakage",
        nargs="?",
        choices=["auto", "none", "fitted"],
        const="fitted",
        default=None,
        help="hydraulic route: fit each cylinder's internal leakage (fitted; --leakage alone), "
        "leave it at the file's value (none), or (default: auto) whichever predicts held-out "
        "segments better",
    )
    p.add_argument(
        "--segment-time",
        type=float,
        default=None,
        help="hydraulic route: the output error's multiple-shooting segments, s (default 0.5; "
        "longer segments weigh the slow drift of positions more, which a free-run replay "
        "integrates, and need a longer log)",
    )
    p.add_argument(
        "--long-refit",
        choices=["auto", "no", "yes"],
        default="auto",
        help="hydraulic route: refit on segments of about 10 s, which see the slow drift a "
        "free-run replay integrates, with the viscous coefficients and masses (yes), keep the "
        "short segments' fit (no), or (default: auto) whichever predicts held-out long "
        "segments better",
    )
    p.add_argument(
        "--mechanics",
        choices=["auto", "fixed", "refined"],
        default="auto",
        help="hydraulic route: the mechanics of stage 1 (regressor route) kept fixed in the "
        "output-error fit, refined jointly (boom and payload masses), or (default) whichever "
        "predicts held-out segments better",
    )
    p.add_argument(
        "--cpu-devices",
        type=int,
        default=None,
        help="split the CPU into this many XLA devices, which share the output error's "
        "segments (default: one per core)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.set_defaults(func=identify_cmd)
    p = sub.add_parser(
        "montecarlo",
        help="a Monte Carlo robustness study over perturbed plants (resumable)",
        description="Run the study CONFIG.toml describes (see jaxmb.control.study_config and "
        "data/montecarlo_*.toml) and write DIR/results.parquet (one row per sample), "
        "DIR/summary.json and plots. Running it again on an interrupted DIR resumes it.",
    )
    p.add_argument("config", help="the study's TOML file")
    p.add_argument("--out", default="out/montecarlo", help="the study folder")
    p.add_argument("--samples", type=int, default=None, help="N (overrides the config)")
    p.add_argument("--chunk", type=int, default=None, help="samples per jitted call")
    p.add_argument("--gains", default=None, help="gains file of `jaxmb tune` for the controller")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_device_options(p)
    p.set_defaults(func=montecarlo_cmd)
    p = sub.add_parser(
        "tune",
        help="tune controller gains by gradient over a Monte Carlo sample (arm or crane)",
        description="Tune Lambda, K, kappa, eps of eq. (18) (scenario section_iv) or the VDC "
        "gains lam, k_v, k_0, k_x, k_f (scenario crane) through the simulation over the "
        "[tune] samples of CONFIG.toml (a montecarlo config with a [tune] section), then "
        "validate the tuned and the given gains on a fresh sample. Writes gains.json "
        "(`jaxmb simulate --gains`, `jaxmb montecarlo --gains`), history.csv and plots.",
    )
    p.add_argument(
        "config",
        help="the study's TOML file (data/montecarlo_section_iv.toml, data/montecarlo_crane.toml)",
    )
    p.add_argument("--out", default="out/tune", help="output folder (resumes if it has a run)")
    p.add_argument("--steps", type=int, default=None, help="Adam steps (overrides [tune])")
    p.add_argument(
        "--validation-samples", type=int, default=None, help="fresh samples per gain set"
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_device_options(p)
    p.set_defaults(func=tune_cmd)
    return parser


def main_job_argv() -> list[str]:
    """`jaxmb identify` on the bundled KR300 recordings: identify from trajectory A, predict the
    held-out trajectories B and C."""
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data" / "kr300"
    logs = [data / f"kr300_traj_{k}.parquet" for k in "ABC"]
    if not all(p.is_file() for p in logs):
        raise SystemExit(
            f"jaxmb: the bundled logs are not at {data} (a source checkout has them); "
            "run `jaxmb identify LOG --model NAME` with a log of your own"
        )
    return ["identify", str(logs[0]), "--model", "kr300", "--validate", str(logs[1]),
            "--validate", str(logs[2]), "--out", "out/identify"]  # fmt: skip


def _negative_values(argv: list[str]) -> list[str]:
    """``--eps -1e-4`` -> ``--eps=-1e-4``: argparse takes a word that starts with '-' and is
    not a plain negative number (``-1e-4``, ``-30,60,30``) for an option, and no jaxmb option
    starts with '-' and a digit, so such a word after an option is its value."""
    out: list[str] = []
    for word in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and re.match(r"-\.?\d", word):
            out[-1] = f"{out[-1]}={word}"
        else:
            out.append(word)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = main_job_argv()  # plain `jaxmb` runs the main job on the bundled logs
    elif argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["state", *argv]  # `jaxmb --q ...`: the arm's dynamics at a state
    args = parser.parse_args(_negative_values(argv))
    if getattr(args, "command", None) == "simulate":
        toml = args.machine.lower().endswith(".toml")
        crane = args.machine == "crane" or toml
        if args.out is None:
            file_out = "out/replay" if args.commands is not None else "out/machine"
            args.out = {"crane": "out/crane", "rpr3-flexible": "out/rpr3_flexible"}.get(
                args.machine, file_out if toml else "out/section_iv"
            )
        if args.dt_save is None:
            args.dt_save = 0.001 if crane else 0.01
    # compiled programs persist across runs where $JAXMB_COMPILE_CACHE asks for it
    # (jaxmb.compile_cache); they hold no host callback for that, so run-time checks give NaN
    # and each command raises from the status
    from jaxmb import compile_cache
    from jaxmb.checks import failures_as_nan

    compile_cache.enable()
    with failures_as_nan():
        return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
