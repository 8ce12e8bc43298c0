"""``jaxmb montecarlo CONFIG.toml --out DIR``: a Monte Carlo robustness study (resumable)."""

from __future__ import annotations

import argparse

from jaxmb.cli import add_device_options
from jaxmb.commands.study_setup import open_study


def montecarlo_cmd(args: argparse.Namespace) -> int:
    from pathlib import Path

    for name in ("samples", "chunk"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise SystemExit(f"jaxmb montecarlo: --{name}: expected an integer >= 1, got {v}")
    out, cfg = open_study(args, "montecarlo")
    import jax

    from jaxmb.control import montecarlo, study_config
    from jaxmb.control.mc_report import write_mc_report

    try:
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
    extra = {}
    if lead and cfg.get("identified", {}).get("rank", True) and "identified" in cfg:
        extra["uncertainty_ranking"] = _rank(study, controller, out, args.quiet)
    summary = write_mc_report(out, table, study, plots=not args.no_plots, extra=extra)
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


def _rank(study, controller, out, quiet: bool) -> dict:
    """`uncertainty_ranking` at the study's nominal values: ``uncertainty_ranking.csv`` and
    the summary's entry."""
    from jaxmb.control import uncertainty_ranking as ur
    from jaxmb.identification.report import write_table

    if not quiet:
        print("jaxmb montecarlo: ranking the parameters by their uncertainty's effect "
              "(forward-mode derivatives of the nominal closed loop)")  # fmt: skip
    try:
        result = ur.ranking(study, controller)
    except ValueError as err:
        raise SystemExit(f"jaxmb montecarlo: {err}") from None
    write_table(out / "uncertainty_ranking.csv", ur.rows(result))
    return {
        "how": "each parameter's effect: the outcome's derivative with respect to the "
        "parameter in its drawn coordinate (log for a lognormal) times its std there; "
        "std_first_order over every parameter, correlations included",
        "outcomes": ur.summary(result),
    }


def add_parser(sub) -> None:
    """The ``montecarlo`` command."""
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
    add_device_options(p)
    p.set_defaults(func=montecarlo_cmd)
