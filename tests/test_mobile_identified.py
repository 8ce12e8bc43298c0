"""The shipped example of a machine as built (`data/machines/mobile_knuckle`) from its logs to
proved gains. `jaxmb identify` of its two fit logs (the empty bucket, an unknown load) finds
every valve effect, every transducer's offset and the unknown load within the tolerances of
issue 79 point 5, and the free-run replay of its validation log comes within 1.5x of the true
machine's own replay. The parameter file it writes drives `simulate`, a study and a tuning
unchanged, and the README's chain (issue 80 point 5) runs on it at small sizes. One
identification, module-scoped, shared by the tests below; the module runs on a worker of its
own (tests/conftest.py)."""

import csv
import dataclasses
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import hydraulic_tolerance, unlisted

from jaxmb import cli

DATA = Path(__file__).resolve().parents[1] / "data"
MOBILE = DATA / "machines" / "mobile_knuckle"
MACHINE = MOBILE / "mobile_knuckle.toml"
VAL = MOBILE / "mobile_knuckle_validation.parquet"
TRUTH = json.loads((MOBILE / "mobile_knuckle_truth.json").read_text())
# the issue's tolerances: overlap 0.05 V, delay 2 ms, spool time constant 10 %, each edge
# coefficient 0.5 %, each offset 0.1 bar, the unknown payload 1 %
ABSOLUTE = {"deadband": 0.05, "delay": 2e-3, "p_a": 1e4, "p_b": 1e4}
RELATIVE = {"tau": 0.10, "c_pa": 5e-3, "c_an": 5e-3, "c_pb": 5e-3, "c_bn": 5e-3}


@pytest.fixture(scope="module")
def identified(tmp_path_factory):
    """``(output folder, summary)`` of `jaxmb identify` on the fit logs as shipped, the
    structure given (which saves the held-out fits' time; the crane's campaign test runs the
    choices): every valve effect, the transducers' and the encoders' offsets, the mechanics
    fixed and no leakage, as the defaults choose them on these logs (docs/hydraulic-machines.md,
    "A machine as built"), and the long refit kept, which the defaults do not keep here:
    without it the fold replays at 2.2x the true machine's."""
    out = tmp_path_factory.mktemp("mobile") / "id"
    argv = ["identify", str(MOBILE / "mobile_knuckle_empty.parquet"),
            str(MOBILE / "mobile_knuckle_loaded.parquet"), "--model", str(MACHINE),
            "--validate", str(VAL), "--out", str(out),
            "--leakage", "none", "--valve-effects", "fitted", "--offsets", "fitted",
            "--encoder-offsets", "fitted", "--mechanics", "fixed", "--long-refit", "yes",
            "--quiet"]  # fmt: skip
    assert cli.main(argv) == 0
    return out, json.loads((out / "summary.json").read_text())


def test_the_example_identified_within_the_issues_tolerances(identified):
    from jaxmb.identification import output_error as oe
    from jaxmb.identification.hydraulic_route import log_columns
    from jaxmb.identification.summary_keys import HYDRAULIC, HYDRAULIC_FILES
    from jaxmb.io.machine import load_machine
    from jaxmb.io.params_file import apply_hydraulics

    out, summary = identified
    assert summary["model"] == "mobile_knuckle"
    # every key the reference explains (docs/reference.md), no other
    assert set(summary) == set(HYDRAULIC) - {"validation_failed"}
    assert not unlisted(out, HYDRAULIC_FILES)  # and every file it wrote
    assert summary["long_refit"]["choice"] == "yes"
    fitted, truth = summary["parameters"], TRUTH["parameters"]
    # the encoders read right; their offsets, fitted, take in what the fixed mechanics miss
    # (stage 1's bodies within their spread, which the covariance does not carry): measured
    # -0.009 and 0.005 deg, 0.34 mm; below 0.03 deg and 0.5 mm
    encoders = {k: v for k, v in fitted.items() if k.startswith("encoder.")}
    assert len(encoders) == 3 and max(map(abs, encoders.values())) < 5e-4, encoders
    checked = set()
    for name, value in fitted.items():
        last = name.split(".")[-1]
        if last in ABSOLUTE:
            assert abs(value - truth[name]) < ABSOLUTE[last], (name, value, truth[name])
        elif last in RELATIVE:
            assert value == pytest.approx(truth[name], rel=RELATIVE[last]), (name, value)
        else:
            continue
        checked.add(name)
    # every effect of every valve and every transducer checked
    assert checked == {k for k in truth if k.split(".")[-1] in {*ABSOLUTE, *RELATIVE}}
    # issue 27 point 4's tolerances on the rest: bulk moduli 5 %, Coulomb forces 10 %
    # (measured 0.1 % and 5.9 %), the viscous coefficients 25 % or flagged poorly identified
    # (the lift's, 354 +- 76 for 800, is: the long refit trades it against boom 1's mass);
    # the booms' masses, the file's values the truth, within 2 % (boom 1 246.1 kg for 250)
    for name, value in fitted.items():
        kind = name.split(".")[-1]
        if kind in ("beta", "F_c"):
            assert value == pytest.approx(truth[name], rel=hydraulic_tolerance(name)), name
            checked.add(name)
        elif kind == "sigma":
            ok = value == pytest.approx(truth[name], rel=hydraulic_tolerance(name))
            assert ok or name in summary["poorly_identified"], (name, value)
            checked.add(name)
    assert len(checked) == 3 * (4 + 3 + 3) + 6  # per valve and cylinder, per transducer
    urdf = (MOBILE / "mobile_knuckle.urdf").read_text()
    for body, mass in (("boom1", 250.0), ("boom2", 180.0), ("extension", 90.0)):
        assert f'<mass value="{mass}"/>' in urdf
        assert fitted[f"body.{body}.mass"] == pytest.approx(mass, rel=0.02), body
    logs = summary["fit_logs"]
    assert logs["mobile_knuckle_empty"]["payload_source"] == "named"
    assert logs["mobile_knuckle_loaded"]["payload_source"] == "identified"
    kg = logs["mobile_knuckle_loaded"]["payload_kg"]
    assert kg == pytest.approx(TRUTH["payload_kg"]["loaded"], rel=0.01)
    assert summary["payload"]["not_determined"] == ["com_y"]  # along the parallel joint axes

    # the true machine's free run of the same validation log (its load named, its
    # transducers' offsets): the floor the noise and the encoders' quantisation set
    machine = load_machine(MACHINE, payload=TRUTH["payload_kg"]["validation"])
    offsets = {f"{k.split('.')[2]}_{k.split('.')[1]}": v for k, v in truth.items()
               if k.startswith("sensor.")}  # fmt: skip
    true = dataclasses.replace(machine, offsets=offsets)
    plant = apply_hydraulics(true.plant, {"hydraulics": {
        k: v for k, v in truth.items() if not k.startswith("sensor.")}})  # fmt: skip
    floor = oe.predict(plant, log_columns(true.read_log(VAL)), mode="free", stride=1)["rmse"]
    stem = VAL.stem
    ours, nominal = summary["validation_rmse"][stem], summary["validation_rmse_nominal"][stem]
    print("\nfree run / true plant's: " + ", ".join(f"{c} {ours[c] / floor[c]:.2f}" for c in ours))
    # the issue's bound; measured 0.96, 1.44 and 0.60 for the angles (the fold within 4 % of
    # it: a sub-count drift, deterministic on one machine), 1.00-1.01 for the pressures
    for c, r in ours.items():
        assert r <= 1.5 * floor[c], (c, r, floor[c])
        assert r < nominal[c], (c, r, nominal[c])
    # what each replay should show (`drift`): a pressure's at its noise, as measured
    expected = summary["validation_rmse_expected"][stem]
    for c, r in ours.items():
        assert 0 < summary["validation_drift_std"][stem][c] < expected[c], c
        if c.startswith("p_"):
            assert r == pytest.approx(expected[c], rel=0.15), (c, r, expected[c])
    assert all(f > 95 for f in summary["validation_fit_percent"][stem].values())
    table = (out / "validation.csv").read_text().splitlines()
    assert table[0].startswith("log,signal,unit,rmse,rmse_nominal,rmse_expected")
    assert table[4].startswith(f"{stem},p_a_lift,bar,")


def test_the_parameter_file_drives_simulate_and_a_study(identified, tmp_path):
    """`params.json` with every valve effect and offset it fitted: `jaxmb simulate`'s replay
    of the validation log is identify's own, to rounding; a study's plant and VDC model take
    its values; a study over the identified distribution draws each fitted parameter from the
    covariance beside it (issue 80 point 2)."""
    from jaxmb.control import study_config
    from jaxmb.control.sampling import leaf_getter
    from jaxmb.identification.summary_keys import REPLAY, REPLAY_FILES

    out, summary = identified
    sim = tmp_path / "replay"
    argv = ["simulate", "--machine", str(MACHINE), "--commands", str(VAL), "--params",
            str(out / "params.json"), "--out", str(sim), "--quiet"]  # fmt: skip
    assert cli.main(argv) == 0
    replayed = json.loads((sim / "summary.json").read_text())
    assert set(replayed) <= set(REPLAY) and not unlisted(sim, REPLAY_FILES)  # docs/reference.md
    for c, r in summary["validation_rmse"][VAL.stem].items():
        assert replayed["rmse"][c] == pytest.approx(r, rel=1e-9), c
    assert (sim / "replay.png").is_file() and (sim / "replay.csv").is_file()

    cfg = tmp_path / "study.toml"
    cfg.write_text(f'[study]\nscenario = "machine"\nmachine = "{MACHINE}"\n'
                   f'params = "{out / "params.json"}"\n')  # fmt: skip
    study, controller, *_, desc = study_config.build_study(study_config.load_config(cfg))
    plant_leaves = [
        n for n in summary["parameters"] if n.split(".")[0] not in ("sensor", "encoder")
    ]
    assert len(plant_leaves) == len(summary["parameters"]) - 9  # six transducers, three encoders
    for name in plant_leaves:
        value = summary["parameters"][name]
        for plant in (study.plant, controller.plant):
            assert float(leaf_getter(plant, name)(plant)) == pytest.approx(value, rel=1e-12)
    j = study.plant.model.body_names.index("payload")
    assert float(study.plant.model.bodies[j].mass) == pytest.approx(
        summary["payload"]["mass_kg"], rel=1e-12
    )
    assert len(desc["study"]["params_sha256"]) == 64
    # a study over what the identification left uncertain: every output-error parameter drawn
    # from the covariance it wrote, 2x inflated, the bodies held
    cfg.write_text(cfg.read_text() + "\n[identified]\ninflate = 2.0\n")
    study, *_, desc = study_config.build_study(study_config.load_config(cfg))
    # the transducers' and encoders' offsets belong to the logs, not to the plant: not drawn
    assert set(study.distribution.names) == set(plant_leaves)
    assert len(desc["study"]["covariance_sha256"]) == 64
    drawn = study.distribution.sample(study.nominal_values, 0, np.arange(200))
    positive = [i for i, n in enumerate(study.distribution.names) if n in plant_leaves]
    assert np.all(drawn[:, positive] > 0)  # positive quantities, drawn in log space


def test_from_the_logs_to_proved_gains(identified, tmp_path):
    """The README's chain from this identification (issue 80 point 5), at small sizes: the
    shipped study over the identified distribution (`data/mobile_identified.toml`, its paths
    pointed at this run's files), a tuning over it, the study again with the tuned gains;
    each step hands the next its files."""
    import pyarrow.parquet as pq

    from jaxmb.control.summary_keys import MONTECARLO, MONTECARLO_FILES, TUNE, TUNE_FILES

    out, summary = identified
    text = (DATA / "mobile_identified.toml").read_text()
    for shipped, here in (('"machines/mobile_knuckle/mobile_knuckle.toml"', f'"{MACHINE}"'),
                          ('"../out/mobile/params.json"', f'"{out / "params.json"}"')):  # fmt: skip
        assert text.count(shipped) == 1, shipped
        text = text.replace(shipped, here)
    small = {"samples": 2, "chunk": 2, "lanes": 2, "steps": 1, "validation_samples": 2,
             "t_final": 0.3}  # fmt: skip
    for key, value in small.items():
        text, n = re.subn(rf"(?m)^{key} = \S+", f"{key} = {value}", text)
        assert n >= 1, key  # samples: the study's and the tuning's
    text = text.replace("[study]\n", "[study]\nt_final = 1.5\n", 1)
    cfg = tmp_path / "mobile_identified.toml"
    cfg.write_text(text)
    mc, tune, mc2 = (tmp_path / d for d in ("mobile_mc", "mobile_tune", "mobile_mc_tuned"))
    quiet = ["--no-plots", "--quiet"]
    assert cli.main(["montecarlo", str(cfg), "--out", str(mc), *quiet]) == 0
    study = json.loads((mc / "study.json").read_text())
    assert set(json.loads((mc / "summary.json").read_text())) <= set(MONTECARLO)  # the reference
    assert not unlisted(mc, MONTECARLO_FILES)
    # the identified parameters drawn, the task's payload range hand-set
    assert set(study["parameters"]) - set(summary["parameters"]) == {"body.payload.mass"}
    covariance = out / "covariance.json"
    assert (
        study["study"]["study"]["covariance_sha256"]
        == hashlib.sha256(covariance.read_bytes()).hexdigest()
    )
    with (mc / "uncertainty_ranking.csv").open() as f:
        ranked = {r["parameter"] for r in csv.DictReader(f)}
    assert ranked == set(study["parameters"])
    assert cli.main(["tune", str(cfg), "--out", str(tune), *quiet]) == 0
    assert set(json.loads((tune / "summary.json").read_text())) <= set(TUNE)
    assert not unlisted(tune, TUNE_FILES)
    changed = json.loads((tune / "summary.json").read_text())["changed"]
    assert set(changed) == {"tolerated_error", "given", "tuned"}
    argv = ["montecarlo", str(cfg), "--gains", str(tune / "gains.json"), "--out", str(mc2)]
    assert cli.main([*argv, *quiet]) == 0
    tuned = json.loads((tune / "gains.json").read_text())["gains"]
    ran = json.loads((mc2 / "study.json").read_text())["study"]["controller"]
    for k in ("lam", "k_x", "k_f"):
        np.testing.assert_allclose(ran[k], tuned[k], rtol=1e-12)
    rows = pq.read_table(mc2 / "results.parquet").to_pydict()
    assert len(rows["sample"]) == 2 and not any(rows["failed"])
