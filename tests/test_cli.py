"""The `jaxmb` command."""

import json
import os

import numpy as np
import pytest
from helpers import unlisted

import jaxmb
from jaxmb.cli import main
from jaxmb.control.summary_keys import ROBUST, ROBUST_FILES


def test_default_runs_the_main_job_on_the_bundled_logs(monkeypatch):
    import jaxmb.commands.identify as identify

    seen = {}
    # build_parser binds identify_cmd when main() calls it, so the stand-in records the args
    monkeypatch.setattr(identify, "identify_cmd", lambda args: seen.update(vars(args)) or 0)
    assert main([]) == 0
    assert seen["model"] == "kr300" and [p.rsplit("_", 1)[-1] for p in seen["log"]] == ["A.parquet"]
    assert [v.rsplit("_", 1)[-1] for v in seen["validate"]] == ["B.parquet", "C.parquet"]
    assert seen["cutoff"] is None  # the main job runs with the defaults (issue 31)


def test_commands_set_their_xla_flags_and_keep_the_users(monkeypatch):
    """The commands split the CPU into devices and compile without XLA's fusion emitters; an
    option already in $XLA_FLAGS is the user's and stays as given."""
    import argparse

    from jaxmb.cli import setup_devices

    args = argparse.Namespace(cpu_devices=3, coordinator=None, distributed=False)
    monkeypatch.setenv("XLA_FLAGS", "")
    setup_devices(args)
    flags = os.environ["XLA_FLAGS"].split()
    assert sorted(flags) == [
        "--xla_cpu_use_fusion_emitters=false",
        "--xla_force_host_platform_device_count=3",
    ]
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=true --xla_dump_to=/tmp/d")
    setup_devices(args)
    flags = os.environ["XLA_FLAGS"].split()
    assert flags[:2] == ["--xla_cpu_use_fusion_emitters=true", "--xla_dump_to=/tmp/d"]
    assert flags[2:] == ["--xla_force_host_platform_device_count=3"]


def test_state_prints_the_arm_dynamics(capsys):
    assert main(["state"]) == 0
    out = capsys.readouterr().out
    for needle in [
        "Gamma = sum_i Gamma_i",
        "Gamma_base",
        "Gamma_link1",
        "Gamma_link2",
        "h (eq. 13)",
        "gravity force Q_g",
        "qdd (forward dynamics)",
        "phi",
        "delta",
    ]:
        assert needle in out


def test_json_output_matches_the_library(capsys):
    assert (
        main(
            [
                "state",
                "--q",
                "0.2,0.5,0.12",
                "--qd",
                "0,0.1,0",
                "--tau",
                "0,1000,900",
                "--full",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    arm = jaxmb.models.series_parallel_3dof(full=True)
    q, qd, tau = np.array([0.2, 0.5, 0.12]), np.array([0, 0.1, 0]), np.array([0, 1000.0, 900.0])
    assert out["coordinates"] == ["phi", "theta", "delta"]
    assert set(out["Gamma_i"]) == {"base", "link1", "link2", "cylinder", "piston"}
    np.testing.assert_allclose(out["Gamma"], jaxmb.mass_matrix(arm, q), rtol=1e-12)
    np.testing.assert_allclose(out["qdd"], jaxmb.forward_dynamics(arm, q, qd, tau), rtol=1e-10)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--q", "1,2"], "--q: expected 3 finite numbers"),
        (["--qd", "a,b,c"], "--qd: expected 3 numbers"),
        (["--q", "0,0,0.3"], "outside the closed chain's domain"),
        (["--tau", "0,nan,0"], "--tau: expected 3 finite numbers"),
    ],
)
def test_bad_input_is_named(argv, message):
    with pytest.raises(SystemExit, match=message):
        main(argv)


def test_simulate_writes_the_report(tmp_path, capsys):
    """A short run of the Section IV scenario: every promised file, and summary.json's keys."""
    out = tmp_path / "sim"
    assert (
        main(["simulate", "--out", str(out), "--t-final", "2", "--dt-save", "0.02", "--quiet"]) == 0
    )
    names = {p.name for p in out.iterdir()}
    assert {
        "timeseries.csv",
        "rmse.csv",
        "bounds.csv",
        "summary.json",
        "tracking.png",
        "errors.png",
        "effort.png",
    } <= names
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == set(ROBUST) and not unlisted(out, ROBUST_FILES)  # docs/reference.md
    for key in ("rmse", "max_abs_error_after_5s", "ultimate_bound_e", "kappa_exceeds_dbar"):
        assert set(summary[key]) == {"phi", "theta", "delta"}, key
    assert all(isinstance(v, bool) for v in summary["kappa_exceeds_dbar"].values())
    rows = (out / "timeseries.csv").read_text().splitlines()
    assert rows[0].startswith("t,q_phi,q_theta,q_delta") and len(rows) == 1 + 101
    # RMSE in the summary is the RMSE of the CSV's error columns
    data = np.loadtxt(out / "timeseries.csv", delimiter=",", skiprows=1)
    header = rows[0].split(",")
    e_theta = data[:, header.index("e_theta")]
    np.testing.assert_allclose(summary["rmse"]["theta"], np.sqrt(np.mean(e_theta**2)), rtol=1e-12)
    # a 2 s run has no "after 5 s": the errors after the transient are its second half's, as
    # the summary and the printed header say, and agree with the CSV
    assert summary["max_abs_error_after_s"] == 1.0
    after = data[:, 0] >= 1.0
    assert summary["max_abs_error_after_5s"]["theta"] == pytest.approx(np.abs(e_theta[after]).max())
    printed = capsys.readouterr().out
    assert "RMSE" in printed and "max|e| t>1s" in printed


def test_simulate_rejects_bad_gains():
    with pytest.raises(SystemExit, match="--kappa: expected positive gains"):
        main(["simulate", "--kappa", "-5"])
