"""`jaxmb simulate --machine crane`: closed loop and command replay, the files it writes, and
its argument checks (made before anything is computed)."""

import csv
import json

import numpy as np
import pytest
from helpers import unlisted

from jaxmb.cli import main
from jaxmb.control.machine_report import LOG_COLUMNS
from jaxmb.control.summary_keys import MACHINE, MACHINE_FILES


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
    assert set(s) <= set(MACHINE) and not unlisted(out, MACHINE_FILES)  # docs/reference.md
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
    assert not unlisted(out, MACHINE_FILES)  # docs/reference.md
    # issue 29: commands beyond the valves' +-10 V are replayed clipped only when asked, and
    # the report counts them (the same table shape: the same compiled replay)
    cmd.write_text("t,u_lift,u_tilt\n0,0,0\n0.2,1e6,-1\n0.5,2,-11\n")
    clipped = tmp_path / "clipped"
    argv = ["simulate", "--machine", "crane", "--commands", str(cmd), "--clip-commands"]
    assert main([*argv, "--out", str(clipped), "--no-plots", "--quiet"]) == 0
    assert "--clip-commands: u_lift 1 clipped, u_tilt 1 clipped" in capsys.readouterr().out
    summary = json.loads((clipped / "summary.json").read_text())
    assert set(summary) <= set(MACHINE)  # docs/reference.md
    assert not unlisted(clipped, MACHINE_FILES)
    assert summary["commands_clipped"] == {"u_lift": 1, "u_tilt": 1}
    rows = np.loadtxt(clipped / "timeseries.csv", delimiter=",", skiprows=1)
    cols = dict(zip(LOG_COLUMNS, rows.T, strict=True))
    np.testing.assert_allclose(cols["t"][-1], 0.5)  # the table's span: the default --t-final
    np.testing.assert_allclose(
        cols["u_lift"], np.interp(cols["t"], [0, 0.2, 0.5], [0, 10, 2]), atol=1e-12
    )
    np.testing.assert_allclose(
        cols["u_tilt"], np.interp(cols["t"], [0, 0.2, 0.5], [0, -1, -10]), atol=1e-12
    )


@pytest.mark.parametrize(
    "table, extra, message",
    [
        ("t,u_lift,u_tilt\n0,0,0\n0.5,2,-1\n", ["--t-final", "2"],
         r"cmd\.csv: the table covers t = 0 \.\. 0\.5 s, not the run's 0 \.\. 2 s \(--t-final\); "
         r"a replay does not hold commands beyond the table"),
        ("t,u_lift,u_tilt\n0.1,0,0\n0.5,2,-1\n", [],
         r"cmd\.csv: the table covers t = 0\.1 \.\. 0\.5 s, not the run's 0 \.\. 0\.5 s"),
        ("t,u_lift,u_tilt\n0,0,0\n0.2,1e6,-1\n0.5,-1e6,-1\n", [],
         r"cmd\.csv: column 'u_lift' has 2 of 3 commands outside the valve's range \+-10 V "
         r"\(first 1e\+06 V at t = 0\.2 s; max \|u\| 1e\+06 V\); the valve saturates there: "
         r"--clip-commands replays them clipped"),
        (None, ["--clip-commands"], r"--clip-commands: only for the replay of --commands"),
    ],
)  # fmt: skip
def test_command_tables_outside_the_run_or_the_valves_are_refused(tmp_path, table, extra, message):
    """Issue 29: a table shorter than the run is not held at its last row, and commands
    beyond a valve's range are not clipped, without a word; nothing is written."""
    cmd = tmp_path / "cmd.csv"
    args = ["simulate", "--machine", "crane", "--out", str(tmp_path / "o"), *extra]
    if table is not None:
        cmd.write_text(table)
        args += ["--commands", str(cmd)]
    with pytest.raises(SystemExit, match=message):
        main(args)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--commands", "MISSING.csv"], "--commands: commands file"),
        (["--t-final", "-1"], "--t-final: expected a duration > 0 s"),
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
