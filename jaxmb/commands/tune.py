"""``jaxmb tune``: the robust controller's gains against the practical-stability bounds (the
arm), or the VDC gains within the valve and pressure limits (a crane or machine file)."""

from __future__ import annotations

import argparse

import numpy as np

from jaxmb.cli import add_device_options
from jaxmb.commands.study_setup import open_study


def tune_cmd(args: argparse.Namespace) -> int:
    out, cfg = open_study(args, "tune")
    from jaxmb.control.kinds import kind_of
    from jaxmb.control.tune_run import check_tune_section, run_tune

    try:
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
        for line in kind_of(cfg["study"]["scenario"]).lines(v):
            print(f"  {line}")
    for line in summary["tuning"]["conflicts"]:
        print(f"conflict: {line}")
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


def add_parser(sub) -> None:
    """The ``tune`` command."""
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
    # one host: the tuning's samples are solved one after another, and only its validation
    # studies would shard over hosts (a study across hosts: `jaxmb montecarlo --distributed`)
    add_device_options(p, hosts=False)
    p.set_defaults(func=tune_cmd)
