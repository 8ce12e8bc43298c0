"""Which uncertainty matters (issue 80 point 3): a machine study's closed loop differentiated
by forward mode along its run, each derivative times its parameter's std, the derivatives
checked against central differences of the same loop."""

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmb.control import uncertainty_ranking as ur
from jaxmb.control.sampling import Distribution, Parameter
from jaxmb.control.studies import machine_study
from jaxmb.io.machine import load_machine

KNUCKLE = Path(__file__).resolve().parents[1] / "data/machines/knuckle_telescope"
R = ((1.0, 0.6, 0.0), (0.6, 1.0, 0.0), (0.0, 0.0, 1.0))


@pytest.fixture(scope="module")
def ranked():
    """The knuckle's VDC over the first 1.5 s of its task (1 s hold, then moving), over a
    valve edge (lognormal, as an identified one), a bulk modulus (normal) and the payload (a
    range), the first two correlated."""
    machine = load_machine(KNUCKLE / "knuckle_telescope.toml")
    dist = Distribution(
        (
            Parameter("valve.lift.c_pa", "lognormal", spread=0.03),
            Parameter("cylinder.fold.beta", "normal", spread=0.1),
            Parameter("body.payload.mass", "range", low=60.0, high=140.0),
        ),
        R,
    )
    study, controller = machine_study(machine, dist, t_final=1.5)
    return study, controller, ur.ranking(study, controller)


def test_derivatives_match_central_differences(ranked):
    """Every column of the forward-mode Jacobian of the error and pressure series against
    central differences of the study's own closed loop (steps of 1e-3 in the edge's log and
    of the bulk modulus, 0.01 kg): within 1 % of each series' largest change, the smallest
    cross-couplings included (measured: at most 0.4 %). Not 0.1 kg: 0.1 kg more payload turns
    the first held command of the lift valve (9e-4 V) negative, where its flow switches edges,
    a kink that a command held for a sample shows in the next row (forward and backward
    differences there 4339 and 4208 Pa/kg, forward mode 4208; at 0.01 kg all three agree)."""
    study, controller, r = ranked
    # the loop the ranking ran: the study's at the ranking's tolerances
    options = dataclasses.replace(study.options, rtol=ur.RTOL, atol=ur.ATOL)
    study = machine_study(load_machine(KNUCKLE / "knuckle_telescope.toml"), study.distribution,
                          t_final=1.5, options=options)[0]  # fmt: skip
    run = jax.jit(lambda v: ur.series(study, controller, v))
    v0 = np.asarray(study.nominal_values, float)
    np.testing.assert_allclose(run(jnp.asarray(v0)), r["series"], rtol=1e-9, atol=1e-9)
    log = [p.kind == "lognormal" for p in study.distribution.parameters]
    for k, (h, is_log) in enumerate(zip([1e-3, 1e-3 * v0[1], 0.01], log, strict=True)):
        plus, minus = v0.copy(), v0.copy()
        plus[k] = v0[k] * np.exp(h) if is_log else v0[k] + h
        minus[k] = v0[k] * np.exp(-h) if is_log else v0[k] - h
        fd = (np.asarray(run(jnp.asarray(plus))) - np.asarray(run(jnp.asarray(minus)))) / (2 * h)
        ad = r["jacobian"][:, :, k]
        for c in range(fd.shape[1]):
            size = np.max(np.abs(fd[:, c]))
            err = np.max(np.abs(ad[:, c] - fd[:, c]))
            t = int(np.argmax(np.abs(ad[:, c] - fd[:, c])))
            print(study.distribution.names[k], c, f"{size:.3g}", f"{err / size:.2e}", t)
            assert err <= 1e-2 * size, (study.distribution.names[k], c, err, size)


def test_effects_are_ranked_with_the_parameters_stds(ranked):
    """Each parameter's std where it is drawn (the log's for the edge, relative x nominal for
    the bulk modulus, (high - low) / sqrt(12) for the range); each effect one std's first-order
    change (an RMS error's: the RMS over the run of that std's error), ranked by size; the
    first-order spread with the correlation; the rows say it, shares summing to 1."""
    study, _, r = ranked
    v0 = np.asarray(study.nominal_values, float)
    np.testing.assert_allclose(r["std"], [0.03, 0.1 * v0[1], 80.0 / np.sqrt(12.0)], rtol=1e-12)
    G = r["jacobian"] * r["std"][None, None, :]
    i = r["outcomes"].index("rmse_lift")
    np.testing.assert_allclose(r["effect"][i], np.sqrt(np.mean(G[:, 0, :] ** 2, 0)), rtol=1e-12)
    for i, o in enumerate(r["outcomes"]):
        e = r["effect"][i]
        ranked_effects = [abs(e[r["parameters"].index(n)]) for n in r["ranked"][o]]
        assert ranked_effects == sorted(ranked_effects, reverse=True)
        assert r["outcome_std"][i] > 0
    j = r["outcomes"].index("peak_pressure_lift")
    e = r["effect"][j]
    assert r["outcome_std"][j] == pytest.approx(np.sqrt(e @ np.asarray(R) @ e), rel=1e-12)
    # statics: while the task holds its first waypoint (t < 1 s), a heavier payload raises
    # the lift's bore-side pressure (the lift cylinder carries it)
    k = int(np.searchsorted(np.asarray(study.ts), 0.5))
    assert r["jacobian"][k, 3, 2] > 0  # columns: 3 errors, then p_a, p_b of lift, ...
    assert r["peaks"]["lift"]["time_s"] <= 1.5
    rows = ur.rows(r)
    assert len(rows) == len(r["outcomes"]) * 3
    for o in r["outcomes"]:
        mine = [x for x in rows if x["outcome"] == o]
        assert [x["rank"] for x in mine] == [1, 2, 3]
        assert sum(x["share"] for x in mine) == pytest.approx(1.0)


def _identified_study(folder: Path, factor: float = 1.01) -> tuple[Path, dict]:
    """A knuckle study over an identification's distribution: two identified parameters (a
    parameter file and its covariance, as `jaxmb identify` writes them, a transducer's offset
    among them; the edge ``factor`` times the file's) and the payload's range hand-set."""
    from jaxmb.io import params_file
    from jaxmb.io.covariance_file import write_covariance

    machine = load_machine(KNUCKLE / "knuckle_telescope.toml")
    plant = machine.plant
    hyd = {
        "valve.lift.c_pa": factor * float(plant.actuator("lift").valve.c_pa),
        "cylinder.fold.beta": 0.98 * float(plant.actuator("fold").cylinder.beta),
    }
    C = np.array([[4e-4, 2e-4, 0.0], [2e-4, 2.5e-3, 0.0], [0.0, 0.0, 1e6]])
    write_covariance(folder / "covariance.json", [*hyd, "sensor.lift.p_a"],
                     [*hyd.values(), 3e3], C, ["log", "log", "linear"])  # fmt: skip
    params_file.write_params(folder / "params.json", model_name=machine.name,
                             method="output error", hydraulics=hyd, covariance="covariance.json",
                             source={params_file.DIGEST: machine.digest()})  # fmt: skip
    cfg = folder / "study.toml"
    cfg.write_text(
        f'[study]\nscenario = "machine"\nmachine = "{machine.path}"\nparams = "params.json"\n'
        "samples = 2\nchunk = 2\nlanes = 2\nt_final = 1.2\n\n[identified]\ninflate = 2.0\n\n"
        '[[parameter]]\nname = "body.payload.mass"\ndistribution = "range"\nlow = 60.0\n'
        "high = 140.0\n"
    )
    return cfg, hyd


def test_a_study_over_the_identified_distribution_ranks_its_parameters(tmp_path):
    """`jaxmb montecarlo` on a study with ``[identified]`` (two identified parameters drawn
    from their covariance, the payload's range hand-set) writes ``uncertainty_ranking.csv``
    and the summary's entry: every outcome with its parameters ranked."""
    import csv
    import json

    from jaxmb.cli import main

    cfg, hyd = _identified_study(tmp_path)
    out = tmp_path / "out"
    assert main(["montecarlo", str(cfg), "--out", str(out), "--no-plots", "--quiet"]) == 0
    with (out / "uncertainty_ranking.csv").open() as f:
        rows = list(csv.DictReader(f))
    outcomes = {r["outcome"] for r in rows}
    machine = load_machine(KNUCKLE / "knuckle_telescope.toml")
    assert outcomes == set(ur.outcome_names_of(machine.plant))
    assert {r["parameter"] for r in rows} == {"body.payload.mass", *hyd}  # no offset drawn
    summary = json.loads((out / "summary.json").read_text())["uncertainty_ranking"]
    assert set(summary["outcomes"]) == outcomes
    for o, entry in summary["outcomes"].items():
        mine = sorted((int(r["rank"]), r["parameter"]) for r in rows if r["outcome"] == o)
        assert list(entry["top"]) == [p for _, p in mine]
        assert entry["std_first_order"] > 0
    # the identified edge (std 2 % x 2) against the file's: its std where drawn is the log's
    edge = next(r for r in rows if r["parameter"] == "valve.lift.c_pa")
    assert float(edge["std"]) == pytest.approx(2.0 * 0.02, rel=1e-9)
    # another identification's files (a parameter file and its covariance, consistent) in
    # the same folder: the resume is refused, the rows kept
    _identified_study(tmp_path, factor=1.02)
    before = (out / "results.parquet").read_bytes()
    with pytest.raises(SystemExit, match="holds results of a different study"):
        main(["montecarlo", str(cfg), "--out", str(out), "--no-plots", "--quiet"])
    assert (out / "results.parquet").read_bytes() == before


def test_tuning_over_the_identified_distribution_writes_gains_a_study_loads(tmp_path):
    """`jaxmb tune` on the same study (issue 80 point 4): its training and validation
    samples drawn from the identified distribution (the covariance's hash in the validation
    study's rows), and its gains file loads into `jaxmb montecarlo --gains` unchanged."""
    import json

    import pyarrow.parquet as pq

    from jaxmb.cli import main

    cfg, hyd = _identified_study(tmp_path)
    tune = tmp_path / "tune.toml"
    tune.write_text(cfg.read_text() + "\n[tune]\nsamples = 1\nsteps = 1\nvalidation_samples = 2\n"
                    "t_final = 0.2\ntolerated_error = [2e-3, 2e-3, 1e-3]\n")  # fmt: skip
    out = tmp_path / "tune"
    assert main(["tune", str(tune), "--out", str(out), "--no-plots", "--quiet"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["validation_tuned"]["samples"] == 2
    # what the tuning changed, given against tuned gains, from the validation rows
    tol = dict(zip(("lift", "fold", "extend"), (2e-3, 2e-3, 1e-3), strict=True))
    assert s["changed"]["tolerated_error"] == tol
    for name in ("given", "tuned"):
        rows = pq.read_table(out / f"validation_{name}" / "results.parquet").to_pydict()
        within = [all(rows[f"rmse_{c}"][k] <= r for c, r in tol.items()) for k in range(2)]
        got = s["changed"][name]
        assert got["fraction_within_tolerance"] == np.mean(within)
        for c in tol:
            assert got["worst_error"][c] == max(rows[f"max_error_{c}"])
            assert got["worst_error"][c] == s[f"validation_{name}"][c]["max_error"]["max"]
    gains = json.loads((out / "gains.json").read_text())["gains"]
    studies = list(out.rglob("study.json"))
    assert studies, sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    for m in studies:
        study = json.loads(m.read_text())
        assert len(study["study"]["study"]["covariance_sha256"]) == 64
        assert set(study["parameters"]) == {"body.payload.mass", *hyd}
    mc = tmp_path / "mc"
    argv = ["montecarlo", str(cfg), "--gains", str(out / "gains.json"), "--out", str(mc),
            "--no-plots", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    rows = pq.read_table(mc / "results.parquet").to_pydict()
    assert set(hyd) <= set(rows) and len(rows["sample"]) == 2
    ran = json.loads((mc / "study.json").read_text())["study"]["controller"]
    for k in ("lam", "k_x", "k_f"):  # the tuned gains, as the tuning wrote them
        np.testing.assert_allclose(ran[k], gains[k], rtol=1e-12)
