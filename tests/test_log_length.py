"""A log too short for what the hydraulic route asks of it is refused by its length (samples
and seconds against what the route needs, the file named), before anything compiles and with
nothing written (`identification.log_length`); one row per case. Stage 1 drops 1.5 / cutoff s
at each end (0.375 s at the default 4 Hz: 375 samples at 1 kHz), stage 2 fits 0.5 s segments,
a structure chosen from held-out segments needs eight of them."""

from pathlib import Path

import pytest

from jaxmb import cli
from jaxmb.identification.log_length import check_fit_lengths
from jaxmb.io.logs import read_log, write_log

CRANE = Path(__file__).resolve().parents[1] / "data/synthetic_crane"
LOG = CRANE / "synthetic_crane_payload_excitation.parquet"  # 40 s at 1 kHz


def _first(tmp_path, name, seconds):
    """``LOG``'s first ``seconds`` s as ``name``.parquet."""
    log = read_log(LOG)
    n = int(round(seconds * 1000)) + 1
    path = tmp_path / f"{name}.parquet"
    write_log(path, log.t[:n], {k: v[:n] for k, v in log.signals.items()}, meta=log.meta)
    return path


CASES = {
    "stage 1's filter edges": (
        [("short", 0.6)], [], [],
        r"short\.parquet: too short to identify: 601 samples over 0\.6 s; a fit log needs at "
        r"least 751 samples \(0\.75 s\): stage 1's 4 Hz low-pass drops 0\.375 s at each end",
    ),
    "one segment": (
        [("short", 0.4)], [], ["--cutoff", "10"],
        r"short\.parquet: too short to identify: 401 samples over 0\.4 s; a fit log needs at "
        r"least 501 samples \(0\.5 s\): .* segments of 0\.5 s",
    ),
    "the structure's choice": (
        [("short", 3.0)], [], [],
        r"too short to choose the structure from held-out segments of 0\.5 s: short\.parquet "
        r"3001 samples over 3 s, 6 segment\(s\); .* needs two held out: 8 segments, 4 s of "
        r"fit logs; longer logs, or --mechanics, --leakage",
    ),
    "a campaign's choice": (
        [("a", 1.5), ("b", 1.9)], [], [],
        r"held-out segments of 0\.5 s: a\.parquet 1501 samples over 1\.5 s, 3 segment\(s\), "
        r"b\.parquet 1901 samples over 1\.9 s, 3 segment\(s\); ",
    ),
    "a window's": (
        [("fit", 5.0)], [], ["--window", "0,3"],
        r"held-out segments of 0\.5 s: fit\.parquet 3001 samples over 3 s, 6 segment\(s\); ",
    ),
    "a segment shorter than a sample": (
        [("fit", 5.0)], [], ["--segment-time", "0.0004"],
        r"--segment-time: expected at least one sample period of fit\.parquet \(0\.001 s\), "
        r"got 0\.0004 s",
    ),
    "a validation log": (
        [("fit", 5.0)], [("val", 0.3)], [],
        r"val\.parquet: too short to validate on: 301 samples over 0\.3 s; a validation log "
        r"needs at least 501 samples \(0\.5 s\)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_a_log_too_short_is_refused_by_its_length(tmp_path, case):
    fits, vals, options, message = CASES[case]
    out = tmp_path / "out"
    argv = ["identify", *(str(_first(tmp_path, n, s)) for n, s in fits), "--model", "crane"]
    for n, s in vals:
        argv += ["--validate", str(_first(tmp_path, n, s))]
    with pytest.raises(SystemExit, match=message):
        cli.main([*argv, *options, "--out", str(out), "--quiet"])
    assert not out.exists()


def test_a_given_structure_needs_one_segment_only():
    """With every structure option given, nothing is held out: a 3 s log passes, as does a
    log just one segment and the filter edges long."""
    log = read_log(LOG)
    for seconds in (3.0, 0.75):
        short = log.window(0.0, seconds)
        check_fit_lengths({"a": short}, cutoff=4.0, segment_time=0.5, choosing=False)
    with pytest.raises(ValueError, match="a: too short to identify: 750 samples"):
        check_fit_lengths({"a": log.window(0.0, 0.749)}, cutoff=4.0, segment_time=0.5,
                          choosing=False)  # fmt: skip
