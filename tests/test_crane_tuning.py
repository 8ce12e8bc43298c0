"""Crane VDC gain tuning (jaxmb.control.vdc_tuning, `jaxmb tune` on the crane scenario): the
forward-mode gradient through the hydraulic closed loop against central finite differences,
the optimisation, its resumption, the validation against the given gains and the gains file
read back by `montecarlo` and `simulate --machine crane`.

The whole module runs inside one `failures_as_nan` context (as `tuning.tune` traces), so the
gradient `jaxmb tune` compiled is the one the finite-difference test evaluates."""

import json
import os
from dataclasses import replace
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmb.control import study_config
from jaxmb.control.crane_run import crane_controller
from jaxmb.control.montecarlo import read_results
from jaxmb.control.tune_run import TUNING_OFFSET
from jaxmb.control.tuning import gains_of
from jaxmb.control.vdc_tuning import (
    VDC_GAINS,
    VdcTuningWeights,
    vdc_conflicts,
    vdc_controller_with,
    vdc_loss_and_gradient,
    vdc_tuning_loss,
)
from jaxmb.multibody.checks import failures_as_nan

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", autouse=True)
def as_nan():
    with failures_as_nan():
        yield


def tiny_config(tmp: Path) -> Path:
    """The shipped crane study and [tune] section, shortened: the first 0.5 s of the A-B
    segment from rest, two tuning plants, two validation plants."""
    text = (REPO / "data" / "montecarlo_crane.toml").read_text()
    for a, b in [("t_final = 18.0", "t_final = 0.5"), ("lanes = 16", "lanes = 1"),
                 ("samples = 4\n", "samples = 2\n"), ("validation_samples = 64", "validation_samples = 2"),
                 ("t_final = 2.0", "t_final = 0.5")]:  # fmt: skip
        assert a in text, a
        text = text.replace(a, b)
    path = tmp / "tune_crane.toml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    from jaxmb.cli import main

    tmp = tmp_path_factory.mktemp("crane_tune")
    cfg, out = tiny_config(tmp), tmp / "tune"
    flags = os.environ.get("XLA_FLAGS")
    try:
        assert main(["tune", str(cfg), "--out", str(out), "--steps", "3", "--quiet"]) == 0
    finally:  # the CLI sets the device count for its process; later tests spawn their own
        os.environ.pop("XLA_FLAGS", None)
        if flags is not None:
            os.environ["XLA_FLAGS"] = flags
    return cfg, out


def test_vdc_gains_round_trip():
    ctrl = crane_controller()
    g0 = {k: jnp.asarray(getattr(ctrl, k)) for k in VDC_GAINS}
    theta = {k: jnp.full(jnp.shape(g0[k]), 0.5) for k in VDC_GAINS}
    c = vdc_controller_with(ctrl, gains_of(theta, g0))
    for k in VDC_GAINS:
        np.testing.assert_allclose(getattr(c, k), np.asarray(g0[k]) * np.exp(0.5), rtol=1e-15)
    assert c.k_x.shape == (2,) and c.lam.shape == (2,) and c.k_v.shape == ()


def test_gradient_matches_finite_differences(tuned):
    """Every component of dJ/dtheta (log-gains: lambda per joint, k_v, k_0, k_x and k_f per
    cylinder) by forward mode at the tuning tolerance (rtol 1e-8), against central differences
    of the primal loss solved at rtol 1e-10, on the tuning plants (payloads of 174 and 102 kg
    the controller does not know: the lift valve saturates near the end, so every term but the
    pressure band's is on).

    Measured: at rtol 1e-8 central differences are the noisy side. They move by 2e-3 relative
    with h (1e-3, 1e-4, 1e-5: the adaptive steps change with theta), while the forward-mode
    gradient at 1e-8 equals the one at 1e-10 to 1e-4, and that one matches differences at
    1e-10 (h = 1e-3) to 5e-5 on the large components."""
    cfg, _ = tuned
    study, ctrl, *_ = study_config.build_study(study_config.load_config(cfg))
    values = jnp.asarray(study.values(TUNING_OFFSET + np.arange(2)))
    w = VdcTuningWeights()
    fn, g0 = vdc_loss_and_gradient(study, ctrl, values, w, rtol=1e-8, atol=1e-10)
    theta = {k: jnp.zeros(jnp.shape(g0[k])) for k in VDC_GAINS}
    (J, aux), grad = fn(theta)
    opts = replace(study.options, rtol=1e-10, atol=1e-12)
    loss = eqx.filter_jit(lambda th: vdc_tuning_loss(th, g0, study, ctrl, values, w, opts)[0])
    np.testing.assert_allclose(float(loss(theta)), float(J), rtol=1e-6)
    assert bool(aux["success"])
    assert min(float(aux[k]) for k in ("tracking", "effort", "chattering", "saturation")) > 0
    gmax = max(float(jnp.max(jnp.abs(v))) for v in grad.values())
    h, checked = 1e-3, 0
    for k in VDC_GAINS:
        for i in np.ndindex(jnp.shape(g0[k])):
            e = {kk: jnp.zeros_like(v) for kk, v in theta.items()}
            e[k] = e[k].at[i].set(1.0)
            plus = loss({kk: theta[kk] + h * e[kk] for kk in VDC_GAINS})
            minus = loss({kk: theta[kk] - h * e[kk] for kk in VDC_GAINS})
            fd = float(plus - minus) / (2 * h)
            g = float(grad[k][i])
            assert abs(g - fd) <= 1e-3 * abs(fd) + 1e-4 * gmax, (k, i, g, fd)
            checked += abs(fd) > 0.1 * gmax
    assert checked >= 5  # most gains move the loss: the check is not of zeros


def test_tune_cli_writes_crane_gains_that_montecarlo_and_simulate_load(tuned, capsys):
    from jaxmb.cli import main

    cfg, out = tuned
    hist = (out / "history.csv").read_text().splitlines()
    assert len(hist) == 4  # header + 3 steps
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenario"] == "crane" and summary["tuning"]["steps"] == 3
    assert summary["tuning"]["t_final"] == 0.5
    losses = [h["loss"] for h in json.loads((out / "tune_state.json").read_text())["history"]]
    assert losses[-1] < losses[0]  # the steps descend
    for name in ("validation_tuned", "validation_given"):
        v = summary[name]
        assert v["samples"] == 2 and v["failed"] == 0
        assert set(v) >= {"q1", "q2", "lift", "tilt", "pressure_limits_hit_fraction"}
        assert v["lift"]["u_max"] == 10.0 and v["q1"]["rmse"]["max"] > 0
        assert (out / name / "results.parquet").exists()
    # the crane's Monte Carlo study (the given gains' validation; the arm's study is checked
    # against an independent `simulate` in tests/test_montecarlo.py, the crane shares that
    # code path): its columns, the sampled parameters, and what the first 0.5 s of A-B shows
    table = read_results(out / "validation_given")
    for c in ("rmse_q1", "max_error_q2", "valve_saturation_time_lift", "cavitation_time_tilt",
              "overpressure_time_lift", "stroke_end_time_tilt", "pressure_limits_hit",
              "peak_effort_tilt", "num_steps", "body.payload.mass"):  # fmt: skip
        assert c in table.column_names, c
    study, *_ = study_config.build_study(study_config.load_config(cfg))
    np.testing.assert_array_equal(
        np.asarray(table["body.payload.mass"]), study.values([0, 1])[:, 2]
    )
    assert max(table["rmse_q1"].to_pylist() + table["rmse_q2"].to_pylist()) < 0.02
    assert not any(table["pressure_limits_hit"].to_pylist())
    assert all(0 < u for u in table["peak_effort_lift"].to_pylist())  # the valve works
    assert (out / "comparison.png").stat().st_size > 10_000
    assert (out / "loss_history.png").stat().st_size > 5_000
    gains = json.loads((out / "gains.json").read_text())
    assert gains["scenario"] == "crane" and set(gains["gains"]) == set(VDC_GAINS)
    assert isinstance(gains["gains"]["k_v"], float) and len(gains["gains"]["lam"]) == 2
    assert gains["gains"] != summary["gains"]["given"]
    # the same command on the finished folder resumes from the saved state: no new steps
    assert main(["tune", str(cfg), "--out", str(out), "--steps", "3", "--quiet"]) == 0
    assert (out / "history.csv").read_text().splitlines() == hist
    assert json.loads((out / "gains.json").read_text())["gains"] == gains["gains"]
    printed = capsys.readouterr().out
    assert "tuned gains: lam" in printed and "peak command p95" in printed
    # loaded by montecarlo ([controller] gains = the file) and by simulate --machine crane
    mc = study_config.load_config(cfg)
    mc["controller"] = {"gains": str(out / "gains.json")}
    _, ctrl, *_ = study_config.build_study(mc)
    for k in VDC_GAINS:
        np.testing.assert_allclose(np.asarray(getattr(ctrl, k)), gains["gains"][k], rtol=1e-15)
    with pytest.raises(SystemExit, match="gains file .*x': cannot read JSON"):
        main(["simulate", "--machine", "crane", "--gains", str(REPO / "data" / "kr300" / "x"),
              "--out", str(out / "sim")])  # fmt: skip
    arm = out / "arm_gains.json"
    study_config.write_gains(arm, "section_iv", {"K": [1.0, 2.0, 3.0]})
    with pytest.raises(SystemExit, match="expected .*'crane'.* got scenario 'section_iv'"):
        main(["simulate", "--machine", "crane", "--gains", str(arm), "--out", str(out / "sim")])
    bad = out / "bad_gains.json"
    study_config.write_gains(bad, "crane", {"lam": [-1.0, 2.0]})
    with pytest.raises(
        SystemExit, match=r"VDCController.lam: must be > 0 and finite; got \[-1.0, 2.0\]"
    ):
        main(["simulate", "--machine", "crane", "--gains", str(bad), "--out", str(out / "sim")])
    with pytest.raises(SystemExit, match="--gains: the replay of --commands has no controller"):
        main(["simulate", "--machine", "crane", "--gains", str(out / "gains.json"),
              "--commands", str(cfg), "--out", str(out / "sim")])  # fmt: skip


def test_conflicts_name_the_valve_and_the_chamber():
    plant = crane_controller().plant
    lines = vdc_conflicts(plant, np.array([1.75, 0.4]), np.array([0.0, 0.0, 0.0, 0.031]))
    assert len(lines) == 2
    assert lines[0].startswith("valve lift: the law asks up to 1.75 x u_max (10 V)")
    assert (
        lines[1] == "cylinder tilt, chamber b: the pressure leaves [p_r, p_s] by 3.1 % of the band"
    )
