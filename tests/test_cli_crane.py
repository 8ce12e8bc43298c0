"""`jaxmb simulate --machine crane`: closed loop and command replay, the files it writes, and
its argument checks (made before anything is computed)."""

import csv
import json

import numpy as np
import pytest

from jaxmb.cli import main
from jaxmb.control.crane_report import LOG_COLUMNS


def _header(path):
    with open(path) as fh:
        return tuple(next(csv.reader(fh)))


def test_closed_loop_writes_the_report(tmp_path, capsys):
    out = tmp_path / "crane"
    argv = [
        "simulate",
        "--machine",
        "crane",
        "--t-final",
        "1.0",
        "--dt-save",
        "0.01",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "VDC closed loop" in printed and "valve saturation time" in printed
    names = {p.name for p in out.iterdir()}
    assert {
        "timeseries.csv",
        "control.csv",
        "summary.json",
        "tool_path.png",
        "piston_forces.png",
        "pressures.png",
        "valve_voltages.png",
    } <= names
    assert _header(out / "timeseries.csv") == LOG_COLUMNS  # a simulated run is a valid log
    s = json.loads((out / "summary.json").read_text())
    for key in (
        "max_tool_position_error_m",
        "max_joint_error_rad",
        "rho_s",
        "saturation_time_s",
        "events",
    ):
        assert key in s
    assert set(s["saturation_time_s"]) == {"lift", "tilt"}
    assert {"stroke_end_lift", "cavitation_tilt", "overpressure_lift"} <= set(s["events"])
    rows = np.loadtxt(out / "timeseries.csv", delimiter=",", skiprows=1)
    assert rows.shape == (101, len(LOG_COLUMNS))
    np.testing.assert_allclose(rows[-1, 0], 1.0)


def test_replay_of_a_command_file(tmp_path, capsys):
    cmd = tmp_path / "cmd.csv"
    cmd.write_text("t,u_lift,u_tilt\n0,0,0\n0.2,2,-1\n0.5,2,-1\n")
    out = tmp_path / "replay"
    argv = ["simulate", "--machine", "crane", "--commands", str(cmd), "--t-final", "0.5"]
    assert main([*argv, "--out", str(out), "--no-plots", "--quiet"]) == 0
    assert "open-loop replay" in capsys.readouterr().out
    rows = np.loadtxt(out / "timeseries.csv", delimiter=",", skiprows=1)
    cols = dict(zip(LOG_COLUMNS, rows.T, strict=True))
    np.testing.assert_allclose(
        cols["u_lift"], np.interp(cols["t"], [0, 0.2, 0.5], [0, 2, 2]), atol=1e-12
    )
    assert cols["x_lift"][-1] > cols["x_lift"][0]  # u > 0 extends the cylinder
    assert cols["q1"][-1] > cols["q1"][0]  # and extension raises the lift boom
    assert "control.csv" not in {p.name for p in out.iterdir()}


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--commands", "MISSING.csv"], "--commands: commands file"),
        (["--t-final", "-1"], "--t-final and --dt-save must be positive"),
        (["--payload", "-5"], "--payload: expected a mass >= 0 kg"),
    ],
)
def test_bad_arguments_fail_before_computing(tmp_path, extra, message):
    with pytest.raises(SystemExit, match=message):
        main(["simulate", "--machine", "crane", "--out", str(tmp_path / "o"), *extra])


def test_unwritable_out_fails_first(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SystemExit, match="--out: cannot write"):
        main(["simulate", "--machine", "crane", "--out", str(blocker / "sub")])
    with pytest.raises(SystemExit, match="--out: cannot write"):
        main(["simulate", "--out", str(blocker / "sub")])


def test_a_bad_command_column_is_named(tmp_path):
    cmd = tmp_path / "cmd.csv"
    cmd.write_text("t,u_lift\n0,0\n1,1\n")
    with pytest.raises(SystemExit, match=r"missing column\(s\) \['u_tilt'\]"):
        main(
            ["simulate", "--machine", "crane", "--commands", str(cmd), "--out", str(tmp_path / "o")]
        )
