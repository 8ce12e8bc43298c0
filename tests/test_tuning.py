"""Gain tuning (jaxmb.control.tuning, `jaxmb tune`): the gradient through the simulation
against central finite differences (the tolerance fact of `simulate`), the optimisation and its
resumption, the bound diagnosis, and the gains file read back by `simulate` and `montecarlo`."""

import json
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmb.control import study_config
from jaxmb.control.tuning import GAIN_NAMES, TuningWeights, controller_with, diagnose, tuning_loss

REPO = Path(__file__).resolve().parents[1]


def tiny_config(tmp: Path) -> Path:
    """The shipped Section IV study and [tune] section, shortened: 1.5 s, one tuning plant, two
    validation plants."""
    text = (REPO / "data" / "montecarlo_section_iv.toml").read_text()
    for a, b in [("t_final = 20.0", "t_final = 1.5"), ("settle = 5.0", "settle = 0.75"),
                 ("lanes = 32", "lanes = 1"), ("samples = 4\n", "samples = 1\n"),
                 ("validation_samples = 64", "validation_samples = 2"),
                 # the validation studies by Tsit5: Rodas4 compiles in twice the time and is
                 # tested in tests/test_rosenbrock.py and tests/test_montecarlo.py
                 ('method = "rodas4"', 'method = "tsit5"')]:  # fmt: skip
        assert a in text
        text = text.replace(a, b)
    path = tmp / "tune.toml"
    path.write_text(text)
    return path


def test_gradient_matches_finite_differences(tmp_path):
    """d J / d theta along a random direction of all 12 log-gains, at the tuning tolerance
    (rtol 1e-8), against central differences of the same loss. The bound and penalty terms use
    dbar as a constant (stop_gradient), so they are off here: what is checked is the part that
    goes through the diffrax solve."""
    cfg = study_config.load_config(tiny_config(tmp_path))
    study, ctrl, *_ = study_config.build_study(cfg)
    start = controller_with(ctrl, {"Lambda": jnp.full(3, 2.0), "K": jnp.full(3, 300.0),
                                   "kappa": jnp.full(3, 300.0), "eps": jnp.full(3, 1e-3)})  # fmt: skip
    g0 = {k: getattr(start, k) for k in GAIN_NAMES}
    values = jnp.asarray(study.values([1_000_000_000]))
    w = TuningWeights(bound=0.0, penalty=0.0)
    from dataclasses import replace

    opts = replace(study.options, rtol=1e-8, atol=1e-10, method="tsit5")  # as `tune` solves
    loss = eqx.filter_jit(lambda th: tuning_loss(th, g0, study, start, values, w, opts)[0])
    theta = {k: jnp.zeros(3) for k in GAIN_NAMES}
    g = eqx.filter_jit(jax.grad(lambda th: tuning_loss(th, g0, study, start, values, w, opts)[0]))(
        theta
    )
    rng = np.random.default_rng(0)
    d = {k: jnp.asarray(rng.normal(size=3)) for k in GAIN_NAMES}
    analytic = sum(float(jnp.dot(g[k], d[k])) for k in GAIN_NAMES)
    h = 1e-4
    plus = loss({k: theta[k] + h * d[k] for k in GAIN_NAMES})
    minus = loss({k: theta[k] - h * d[k] for k in GAIN_NAMES})
    fd = float(plus - minus) / (2 * h)
    assert abs(fd) > 1e-3  # a direction the loss feels
    assert analytic == pytest.approx(fd, rel=2e-3)


def test_diagnose_names_the_conflict():
    gains = {"kappa": np.array([10.0, 500.0, 50.0])}
    lines = diagnose(gains, np.array([20.0, 100.0, 80.0]), np.array([0.5, 1.3, 1.2]))
    assert "coordinate 0: kappa 10 <= dbar 20: eq. (25) fails" in lines[0]
    assert "peak |Q_a| 1.30 x the limit" in lines[1]
    assert "they conflict" in lines[2]


def test_tune_cli_writes_gains_that_simulate_and_montecarlo_load(tmp_path, capsys):
    from jaxmb.cli import main

    cfg = tiny_config(tmp_path)
    out = tmp_path / "tune"
    assert main(["tune", str(cfg), "--out", str(out), "--steps", "2", "--quiet"]) == 0
    hist = (out / "history.csv").read_text().splitlines()
    assert len(hist) == 3  # header + 2 steps
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tuning"]["steps"] == 2
    for name in ("validation_tuned", "validation_given"):
        v = summary[name]
        assert v["samples"] == 2 and set(v) >= {"phi", "theta", "delta"}
        assert (out / name / "results.parquet").exists()
    assert (out / "comparison.png").stat().st_size > 10_000
    # the given gains are Table II: eq. (25) fails for theta and delta there, as measured
    assert not summary["validation_given"]["theta"]["kappa_exceeds_dbar"]
    assert not summary["validation_given"]["delta"]["kappa_exceeds_dbar"]
    gains = json.loads((out / "gains.json").read_text())
    # the same command on the finished folder resumes from the saved state: no new steps,
    # the same gains (the state, Adam's included, is written after every step)
    assert main(["tune", str(cfg), "--out", str(out), "--steps", "2", "--quiet"]) == 0
    assert (out / "history.csv").read_text().splitlines() == hist
    assert json.loads((out / "gains.json").read_text())["gains"] == gains["gains"]
    state = json.loads((out / "tune_state.json").read_text())
    assert len(state["history"]) == 2 and len(state["state"]) > 4
    assert gains["scenario"] == "section_iv" and set(gains["gains"]) == set(GAIN_NAMES)
    # loaded by simulate (its printed kappa column is the tuned one) and by montecarlo
    sim = tmp_path / "sim"
    assert main(["simulate", "--gains", str(out / "gains.json"), "--t-final", "0.5",
                 "--out", str(sim), "--quiet", "--no-plots"]) == 0  # fmt: skip
    report = json.loads((sim / "summary.json").read_text())
    np.testing.assert_allclose(list(report["kappa"].values()), gains["gains"]["kappa"])
    with pytest.raises(SystemExit, match="gains file"):
        main(["simulate", "--gains", str(cfg), "--out", str(sim)])
