"""Time to result: each command as a user runs it, from Enter to its last file, twice, each in a
fresh process sharing one compile-cache folder that starts empty (the first run compiles and
stores its programs, the second reads them back), printed next to the goals it is held to.

    python scripts/bench_commands.py                      # every command below
    python scripts/bench_commands.py --only simulate-crane

The peer of a first run is its goal, of a second run its first run: what a user waits the
first time, and what the persistent cache saves them the next (`jaxmb.compile_cache`). Run it
alone on the machine: both runs of a command compete with nothing else."""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jaxmb import compile_cache

ROOT = Path(__file__).resolve().parents[1]
MOBILE = ROOT / "data" / "machines" / "mobile_knuckle"

# name: (the command's arguments, goal of the first run s, goal of the second as its fraction)
COMMANDS = {
    "simulate-crane": (["simulate", "--machine", "crane"], 25.0, 5.0 / 25.0),
    "identify-mobile": (
        [
            "identify",
            str(MOBILE / "mobile_knuckle_empty.parquet"),
            str(MOBILE / "mobile_knuckle_loaded.parquet"),
            "--model",
            str(MOBILE / "mobile_knuckle.toml"),
            "--validate",
            str(MOBILE / "mobile_knuckle_validation.parquet"),
        ],
        240.0,
        0.40,
    ),
}


def run_once(argv: list[str], out: Path, cache: Path) -> float:
    """Wall seconds of ``jaxmb ARGV --out OUT`` in a fresh process whose compile cache is
    ``cache``; its output goes to ``out``/log.txt (a failure raises, naming it)."""
    env = {**os.environ, compile_cache.ENV: str(cache)}
    out.mkdir(parents=True, exist_ok=True)
    code = "from jaxmb.cli import main; raise SystemExit(main())"
    t0 = time.perf_counter()
    with (out / "log.txt").open("w") as log:
        done = subprocess.run([sys.executable, "-c", code, *argv, "--out", str(out / "result")],
                              stdout=log, stderr=subprocess.STDOUT, env=env, check=False)  # fmt: skip
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): see {out / 'log.txt'}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(COMMANDS), action="append")
    args = parser.parse_args()
    names = args.only or list(COMMANDS)
    rows = []
    with tempfile.TemporaryDirectory(prefix="jaxmb-bench-commands-") as tmp:
        for name in names:
            argv, goal, fraction = COMMANDS[name]
            cache = Path(tmp) / name / "cache"  # empty: the first run compiles everything
            first = run_once(argv, Path(tmp) / name / "first", cache)
            second = run_once(argv, Path(tmp) / name / "second", cache)
            rows.append((name, first, goal, second, fraction))
            print(f"{name}: first {first:.1f} s, second {second:.1f} s", flush=True)
    print(f"\n{'command':<18} {'first':>8} {'goal':>7} {'ratio':>6}   {'second':>8} "
          f"{'/first':>7} {'goal':>6}")  # fmt: skip
    for name, first, goal, second, fraction in rows:
        print(f"{name:<18} {first:7.1f}s {goal:6.0f}s {first / goal:6.2f}   {second:7.1f}s "
              f"{second / first:7.2f} {fraction:6.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
