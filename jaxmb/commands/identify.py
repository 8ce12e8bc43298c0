"""``jaxmb identify LOG --model NAME``: identify a model from a logged experiment (the main job;
plain ``jaxmb`` runs it on the bundled KR300 recordings)."""

from __future__ import annotations

import argparse
import sys

from jaxmb.cli import (
    check_device_options,
    check_writable,
    parse_mapping,
    parse_vector,
    setup_devices,
)


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
    check_device_options(args, "identify")  # the one check of --cpu-devices for every command
    log = [Path(p) for p in args.log]
    for p in (*log, *map(Path, args.validate)):
        if not p.is_file():
            raise SystemExit(f"jaxmb identify: no such log file {str(p)!r}")
    out = Path(args.out)
    check_writable(out)  # made once every input has passed its checks
    setup_devices(args)
    from jaxmb.identification.identify import identify

    terms, drives, window = _parsed(args)
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
            valve_effects=args.valve_effects,
            offsets=args.offsets,
            encoder_offsets=args.encoder_offsets,
            segment_time=args.segment_time,
            long_refit=args.long_refit,
            show_progress=not args.quiet,
            **options,
        )
    except ValueError as err:
        raise SystemExit(f"jaxmb identify: {err}") from None
    _print_summary(summary)
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def _parsed(args: argparse.Namespace):
    """``(terms, drives, window)`` from their options' text, each refused by its option."""
    terms = tuple(t for t in args.terms.split(",") if t) if args.terms is not None else None
    drives = None
    if args.gear_ratios is not None or args.torque_constants is not None:
        from jaxmb.identification.rigid import Drives

        try:
            drives = Drives(
                parse_mapping(args.gear_ratios, "gear-ratios"),
                parse_mapping(args.torque_constants, "torque-constants"),
            )
        except ValueError as err:
            raise SystemExit(f"jaxmb identify: {err}") from None
    window = None
    if args.window is not None:
        w = parse_vector(args.window, "window", 2)
        if not w[0] < w[1]:
            raise SystemExit(
                f"jaxmb identify: --window: expected T0,T1 with T0 < T1, got {args.window!r}"
            )
        window = (float(w[0]), float(w[1]))
    return terms, drives, window


def _print_summary(summary: dict) -> None:
    """The identification's few lines: route and method, the condition number, the fit's and
    each validation log's RMSE, and a warning for each log the model does not fit."""
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
    for name, bad in summary.get("model_misfit", {}).items():
        print(
            f"jaxmb identify: warning: the model does not fit {name}: its replay misses "
            + ", ".join(f"{c} by {r:.1f}x" for c, r in bad.items())
            + f" the error the noise and the parameters' spread explain (more than "
            f"{summary['model_misfit_threshold']:g}x). The machine may have effects its file "
            "does not declare (spool overlap, delay, a moving supply, sensor offsets; "
            "docs/hydraulic-machines.md), or the log another condition (payload)",
            file=sys.stderr,
        )
    urdf = summary.get("urdf")
    if urdf is not None:
        if urdf["file"] is None:
            print(f"identified URDF: {urdf['why']}")
        for line in urdf.get("not_in_file", ()):
            print(f"identified URDF {urdf['file']}: {line}")


def add_parser(sub) -> None:
    """The ``identify`` command."""
    p = sub.add_parser(
        "identify",
        help="identify a model's parameters from a logged experiment (the main job)",
        description="Identify inertial, drive, friction or hydraulic parameters from a log "
        "(CSV or Parquet with a t column and SI signals named after the model's coordinates and "
        "actuators; see jaxmb.io.logs) and write a report.",
    )
    p.add_argument(
        "log",
        nargs="+",
        help="the log to identify from (.csv or .parquet, sidecar .json), or several "
        "experiments fitted together: a robot's, each with its own noise levels and the "
        "payload its sidecar's conditions name (payload_kg, payload_com, payload_frame); a "
        "hydraulic machine's, each with its own start states and the payload_kg its sidecar "
        "names (the logs that name none carry one unknown load, identified)",
    )
    p.add_argument(
        "--model",
        required=True,
        help="a built-in model (arm, kr300, crane), a URDF file (regressor route) or a "
        "hydraulic machine file (.toml beside its URDF; see jaxmb.io.machine)",
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
        "--window", default=None, help="fit on T0,T1 (s) of the log only (default: all of it)"
    )
    _add_regressor_options(
        p.add_argument_group(
            "regressor fit (a robot; a hydraulic machine's stage 1, its mechanics)"
        )
    )
    _add_output_error_options(
        p.add_argument_group("output-error fit (a hydraulic machine's stage 2)")
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


def _add_regressor_options(p) -> None:
    """The regressor route's options: the method, the filter, the drive and friction terms, the
    motor-side conversions."""
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


def _add_output_error_options(p) -> None:
    """The hydraulic route's output-error options: its segments and its structure choices."""
    p.add_argument(
        "--leakage",
        nargs="?",
        choices=["auto", "none", "fitted"],
        const="fitted",
        default=None,
        help="hydraulic route: fit each cylinder's internal leakage (fitted; --leakage alone), "
        "leave it at the file's value (none), or (default: auto) fitted where it predicts "
        "held-out segments better by more than one standard error",
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
    # the hydraulic route's structure choices (`model_choice.CHOICES`): each "auto" by default,
    # the richer structure where it predicts held-out segments better by more than one
    # standard error
    by_rule = "where that predicts held-out segments better by more than one standard error"
    for option, choices, help in (
        ("--mechanics", ["auto", "fixed", "refined"],
         "the mechanics of stage 1 (regressor route) kept fixed in the output-error fit, "
         f"refined jointly (boom and payload masses), or (default) refined {by_rule}"),
        ("--valve-effects", ["auto", "held", "fitted"],
         "the valve effects the machine file declares (spool overlap, command delay, spool "
         "dynamics) held at the file's values, fitted from them, or (default) each group "
         f"fitted {by_rule}"),
        ("--offsets", ["auto", "none", "fitted"],
         "each pressure transducer's constant offset (beyond the [log] offsets the machine "
         "file knows) not fitted, fitted (stage 1 each cylinder's pressure-force offset, "
         "stage 2 each chamber's), or (default) stage 1 keeping those above 3 std and stage 2 "
         f"fitting them {by_rule}"),
        ("--encoder-offsets", ["auto", "none", "fitted"],
         "each coordinate's encoder offset (beyond the [log] offsets the machine file knows) "
         f"not fitted, fitted, or (default) fitted {by_rule} (an offset shows only through "
         "the machine's geometry and gravity, so the data often do not determine it)"),
    ):  # fmt: skip
        p.add_argument(option, choices=choices, default="auto", help=f"hydraulic route: {help}")
