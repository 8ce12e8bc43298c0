"""The ``jaxmb`` command line: a thin dispatcher.

Each command is a module of `jaxmb.commands` (``identify``, ``simulate``, ``montecarlo``,
``tune``, ``state``) that adds its own subparser, registered under the ``jaxmb.commands``
entry-point group (pyproject.toml), so this module imports no workflow: it finds the commands
in the installed package's metadata. A package of one's own adds a command the same way. The
helpers here are the commands' common ground: option parsing, output-folder checks, devices.
Plain ``jaxmb`` runs the main job (``jaxmb identify`` on the bundled KR300 recordings)."""

from __future__ import annotations

import argparse
import re
import sys
from importlib.metadata import entry_points

import numpy as np

GROUP = "jaxmb.commands"


def parse_vector(text: str, name: str, n: int) -> np.ndarray:
    try:
        values = [float(v) for v in text.replace(",", " ").split()]
    except ValueError:
        raise SystemExit(
            f"jaxmb: --{name}: expected {n} numbers separated by commas, got {text!r}"
        ) from None
    if len(values) != n or not np.all(np.isfinite(values)):
        raise SystemExit(f"jaxmb: --{name}: expected {n} finite numbers, got {text!r}")
    return np.asarray(values)


def check_writable(out) -> None:
    """The output folder could be made and written, checked without making it (a refused run
    leaves nothing behind)."""
    import os
    from pathlib import Path

    parent = Path(out).absolute()
    while not parent.exists():
        parent = parent.parent
    _refuse_file(out, parent)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SystemExit(f"jaxmb: --out: cannot write to {str(out)!r} ({parent} is not writable)")


def _refuse_file(out, found) -> None:
    """Refuse an ``--out`` that is, or lies inside, an existing file (``found``: the nearest
    path of ``out``'s that exists)."""
    from pathlib import Path

    if found.is_dir():
        return
    if found == Path(out).absolute():
        raise SystemExit(
            f"jaxmb: --out: cannot write to {str(out)!r}: it is an existing file, and --out "
            "names a folder (give another name, or remove the file)"
        )
    raise SystemExit(
        f"jaxmb: --out: cannot write to {str(out)!r}: {str(found)!r} is a file, not a folder"
    )


def check_out(out) -> None:
    """The output folder must be creatable and writable before anything is computed."""
    from pathlib import Path

    found = Path(out).absolute()
    while not found.exists():
        found = found.parent
    _refuse_file(out, found)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".jaxmb-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise SystemExit(
            f"jaxmb: --out: cannot write to {str(out)!r}: {err.strerror or err}"
        ) from None


def parse_mapping(text: str | None, name: str) -> dict[str, float]:
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


def check_device_options(args: argparse.Namespace, command: str) -> None:
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


# XLA's CPU fusion emitters (MLIR kernels, XLA's default) cost about a fifth of every compile
# and bought the commands' programs no speed: the crane's closed loop compiles in 12.9 s
# instead of 15.7 s without them, and 100 perturbed plants vmapped in 23.9 s instead of 28.5 s,
# running 2.75 s instead of 2.96 s (dev/performance-history.md). A user's own XLA_FLAGS decide.
CPU_FLAGS = {"xla_cpu_use_fusion_emitters": "false"}


def setup_devices(args: argparse.Namespace) -> None:
    """Before jax is imported: split the CPU into XLA devices (one per core by default, so that
    a sharded batch uses every core), compile without the fusion emitters (`CPU_FLAGS`), and
    join a multi-process run if asked. Options already in ``$XLA_FLAGS`` are kept."""
    import os

    n = args.cpu_devices or os.cpu_count() or 1
    wanted = {"xla_force_host_platform_device_count": str(n), **CPU_FLAGS}
    flags = os.environ.get("XLA_FLAGS", "")
    for name, value in wanted.items():
        if name not in flags:
            flags = f"{flags} --{name}={value}".strip()
    os.environ["XLA_FLAGS"] = flags
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


def add_device_options(p: argparse.ArgumentParser, *, hosts: bool = True) -> None:
    """``--cpu-devices``, and with ``hosts`` the options that join a multi-process run."""
    p.add_argument(
        "--cpu-devices",
        type=int,
        default=None,
        help="split the CPU into this many XLA devices (default: one per core)",
    )
    if not hosts:
        return
    p.add_argument(
        "--distributed",
        action="store_true",
        help="join a multi-process run whose layout JAX detects (SLURM, Open MPI, ...)",
    )
    p.add_argument("--coordinator", default=None, help="host:port of process 0 (jax.distributed)")
    p.add_argument("--num-processes", type=int, default=None, help="with --coordinator")
    p.add_argument("--process-id", type=int, default=None, help="with --coordinator")


def commands() -> dict:
    """The registered commands, ``{name: entry point}``, sorted by name."""
    found = {ep.name: ep for ep in entry_points(group=GROUP)}
    if not found:
        raise SystemExit(
            f"jaxmb: no commands registered under the entry-point group {GROUP!r}: install the "
            "package (pip install -e .) so that its metadata lists them"
        )
    return dict(sorted(found.items()))


def build_parser() -> argparse.ArgumentParser:
    """The parser of every registered command (each entry point adds its own subparser)."""
    parser = argparse.ArgumentParser(
        prog="jaxmb", description="Differentiable multibody dynamics for closed-chain manipulators."
    )
    sub = parser.add_subparsers(dest="command")
    for name, ep in commands().items():
        try:
            add = ep.load()
        except Exception as err:  # a broken command of another package must not break the rest
            print(f"jaxmb: command {name!r} ({ep.value}) did not load: {err}", file=sys.stderr)
            continue
        add(sub)
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
    """Run the command ``argv`` (default: the process's arguments) names; returns its status."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = main_job_argv()  # plain `jaxmb` runs the main job on the bundled logs
    elif argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["state", *argv]  # `jaxmb --q ...`: the arm's dynamics at a state
    args = parser.parse_args(_negative_values(argv))
    # compiled programs persist across runs, in the user's cache folder unless
    # $JAXMB_COMPILE_CACHE moves it or says off (jaxmb.compile_cache); they hold no host
    # callback for that, so run-time checks give NaN and each command raises from the status
    import faulthandler

    from jaxmb import compile_cache
    from jaxmb.multibody.checks import failures_as_nan

    if not faulthandler.is_enabled():  # a fatal signal (a loader crash) shows where it hit
        faulthandler.enable()
    compile_cache.enable()
    with failures_as_nan():
        return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
