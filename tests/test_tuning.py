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
from helpers import unlisted

from jaxmb.control import study_config, summary_keys
from jaxmb.control.tuning import (
    GAIN_NAMES,
    ROBUST,
    TuningWeights,
    adam_search,
    controller_with,
    diagnose,
    tuning_loss,
    tuning_provenance,
)
from jaxmb.multibody.checks import failures_as_nan

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
    # the gradient `jaxmb tune` computes, by the program it compiles (traced as the command
    # traces, inside failures_as_nan; the CLI test below reuses it)
    with failures_as_nan():
        fn, g0_ = ROBUST.loss_and_gradient(study, start, values, w, 1e-8, 1e-10)
        (J, _), g = fn(theta)
    assert all(bool(jnp.all(g0_[k] == g0[k])) for k in GAIN_NAMES)
    assert float(J) == pytest.approx(float(loss(theta)), rel=1e-9)
    rng = np.random.default_rng(0)
    d = {k: jnp.asarray(rng.normal(size=3)) for k in GAIN_NAMES}
    analytic = sum(float(jnp.dot(g[k], d[k])) for k in GAIN_NAMES)
    h = 1e-4
    plus = loss({k: theta[k] + h * d[k] for k in GAIN_NAMES})
    minus = loss({k: theta[k] - h * d[k] for k in GAIN_NAMES})
    fd = float(plus - minus) / (2 * h)
    assert abs(fd) > 1e-3  # a direction the loss feels
    assert analytic == pytest.approx(fd, rel=2e-3)


def test_tuning_stores_every_step_only_where_the_samples_fit():
    """Reverse mode keeps a checkpoint a step for the shipped tuning sample (4 plants of the
    arm's six states, 200 000 steps at most: about 100 MB) and falls back to diffrax's
    binomial checkpoints where the samples' steps would not fit in `STORED_STEPS_BYTES`."""
    from jaxmb.control.studies import SolverOptions
    from jaxmb.control.tuning import STORED_STEPS_BYTES, tuning_adjoint

    opts = SolverOptions()
    assert tuning_adjoint(4, opts, 6).checkpoints == opts.max_steps
    many = STORED_STEPS_BYTES // (opts.max_steps * 8 * 16) + 1  # one sample past the budget
    assert tuning_adjoint(many - 1, opts, 6).checkpoints == opts.max_steps
    assert tuning_adjoint(many, opts, 6).checkpoints is None


class _Study(eqx.Module):
    """A stand-in study: what `tuning_provenance` reads of one is its array leaves."""

    nominal: jax.Array


def _quadratic(g0, fail_at=None):
    """A tuning loss ``sum (log g - log 2)^2`` with `adam_search`'s step and record: no
    simulation, so resumption is tested on its own. ``fail_at``: the step that raises (a job
    killed there)."""

    def step(theta):
        J, grad = jax.value_and_grad(
            lambda th: sum(jnp.sum((th[k] + jnp.log(g0[k]) - jnp.log(2.0)) ** 2) for k in th)
        )(theta)
        return (J, {}), grad

    def record(k, J, aux, theta):
        if k == fail_at:
            raise KeyboardInterrupt
        return {"step": k, "loss": float(J)}

    return step, record


def _search(out, provenance, steps=4, fail_at=None):
    g0 = {"K": jnp.array([1.0, 3.0])}
    step, record = _quadratic(g0, fail_at)
    return adam_search(step, g0, out, steps=steps, learning_rate=0.1, record=record,
                       progress=False, provenance=provenance)  # fmt: skip


def test_a_tuning_resumes_only_its_own_configuration(tmp_path, capsys):
    """Issue 29, point 2: a resumed tuning continues exactly where it was stopped, and only
    when its configuration and sampled parameters hash as the saved ones; otherwise it is
    refused, naming what differs and how to start afresh, and nothing is overwritten. A
    corrupted state file is reported and the tuning recomputed, never trusted."""
    study = _Study(jnp.array([1.0, 2.0]))
    g0 = {"K": jnp.array([1.0, 3.0])}

    def provenance(study=study, lr=0.1, values=((0.5,),)):
        return tuning_provenance(study, g0, [7], np.array(values), steps=4, learning_rate=lr)

    whole = _search(tmp_path / "whole", provenance())
    out = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        _search(out, provenance(), fail_at=2)
    assert len(json.loads((out / "tune_state.json").read_text())["history"]) == 2
    assert _search(out, provenance()) == whole  # the same rows, Adam's state restored

    state = (out / "tune_state.json").read_text()
    for other, message in [
        (provenance(lr=0.2), r"another configuration \(differs in: learning_rate\)"),
        (provenance(study=_Study(jnp.array([1.0, 2.5]))), r"differs in: study_arrays_sha256"),
        (provenance(values=((0.6,),)), "same configuration on other sampled parameters"),
    ]:
        with pytest.raises(ValueError, match=message + f".*remove {out} to start afresh"):
            _search(out, other)
        assert (out / "tune_state.json").read_text() == state  # nothing overwritten

    for corrupt in (state[: len(state) // 2], json.dumps({"state": [], "history": []})):
        (out / "tune_state.json").write_text(corrupt)  # truncated; an old file without hashes
        assert _search(out, provenance()) == whole
        assert "tune_state.json is corrupted" in capsys.readouterr().err


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
    assert set(summary) <= set(summary_keys.TUNE)  # docs/reference.md
    assert not unlisted(out, summary_keys.TUNE_FILES)
    assert summary["tuning"]["steps"] == 2
    for name in ("validation_tuned", "validation_given"):
        v = summary[name]
        assert v["samples"] == 2 and set(v) >= {"phi", "theta", "delta"}
        assert (out / name / "results.parquet").exists()
        assert not unlisted(out / name, summary_keys.MONTECARLO_FILES)
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
    # issue 29: the same folder with another tuning configuration is refused before any step,
    # naming the difference, and leaves the saved tuning as it was
    with pytest.raises(SystemExit, match=r"another configuration \(differs in: steps\).*remove"):
        main(["tune", str(cfg), "--out", str(out), "--steps", "3", "--quiet"])
    assert (out / "history.csv").read_text().splitlines() == hist
    assert gains["scenario"] == "section_iv" and set(gains["gains"]) == set(GAIN_NAMES)
    # loaded by simulate (its printed kappa column is the tuned one) and by montecarlo
    sim = tmp_path / "sim"
    assert main(["simulate", "--gains", str(out / "gains.json"), "--t-final", "0.5",
                 "--out", str(sim), "--quiet", "--no-plots"]) == 0  # fmt: skip
    report = json.loads((sim / "summary.json").read_text())
    assert set(report) == set(summary_keys.ROBUST)
    np.testing.assert_allclose(list(report["kappa"].values()), gains["gains"]["kappa"])
    with pytest.raises(SystemExit, match="gains file"):
        main(["simulate", "--gains", str(cfg), "--out", str(sim)])
