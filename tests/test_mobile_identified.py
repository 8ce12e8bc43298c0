"""Issue 79 point 5 on the shipped example of a machine as built (`data/machines/mobile_knuckle`):
`jaxmb identify` of its two fit logs (the empty bucket, an unknown load) finds every valve
effect, every transducer's offset and the unknown load within the issue's tolerances, and the
free-run replay of its validation log comes within 1.5x of the true machine's own replay. A
module of its own: its fit runs on a worker of its own (tests/conftest.py)."""

import dataclasses
import json
from pathlib import Path

import pytest

from jaxmb import cli

MOBILE = Path(__file__).resolve().parents[1] / "data" / "machines" / "mobile_knuckle"
TRUTH = json.loads((MOBILE / "mobile_knuckle_truth.json").read_text())
# the issue's tolerances: overlap 0.05 V, delay 2 ms, spool time constant 10 %, each edge
# coefficient 0.5 %, each offset 0.1 bar, the unknown payload 1 %
ABSOLUTE = {"deadband": 0.05, "delay": 2e-3, "p_a": 1e4, "p_b": 1e4}
RELATIVE = {"tau": 0.10, "c_pa": 5e-3, "c_an": 5e-3, "c_pb": 5e-3, "c_bn": 5e-3}


def test_the_example_identified_within_the_issues_tolerances(tmp_path):
    """The fit logs as shipped, the structure given (which saves the held-out fits' time; the
    crane's tests run the choices): every valve effect, the transducers' and the encoders'
    offsets, the mechanics fixed and no leakage, as the defaults choose them on these logs
    (docs/hydraulic-machines.md, "A machine as built"), and the long refit kept, which the
    defaults do not keep here: without it the fold replays at 2.2x the true machine's."""
    from jaxmb.identification import output_error as oe
    from jaxmb.identification.hydraulic_route import log_columns
    from jaxmb.io.machine import load_machine
    from jaxmb.io.params_file import apply_hydraulics

    out = tmp_path / "id"
    val = MOBILE / "mobile_knuckle_validation.parquet"
    argv = ["identify", str(MOBILE / "mobile_knuckle_empty.parquet"),
            str(MOBILE / "mobile_knuckle_loaded.parquet"), "--model",
            str(MOBILE / "mobile_knuckle.toml"), "--validate", str(val), "--out", str(out),
            "--leakage", "none", "--valve-effects", "fitted", "--offsets", "fitted",
            "--encoder-offsets", "fitted", "--mechanics", "fixed", "--long-refit", "yes",
            "--quiet"]  # fmt: skip
    assert cli.main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
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
    logs = summary["fit_logs"]
    assert logs["mobile_knuckle_empty"]["payload_source"] == "named"
    assert logs["mobile_knuckle_loaded"]["payload_source"] == "identified"
    kg = logs["mobile_knuckle_loaded"]["payload_kg"]
    assert kg == pytest.approx(TRUTH["payload_kg"]["loaded"], rel=0.01)

    # the true machine's free run of the same validation log (its load named, its
    # transducers' offsets): the floor the noise and the encoders' quantisation set
    kg = TRUTH["payload_kg"]["validation"]
    machine = load_machine(MOBILE / "mobile_knuckle.toml", payload=kg)
    offsets = {f"{k.split('.')[2]}_{k.split('.')[1]}": v for k, v in truth.items()
               if k.startswith("sensor.")}  # fmt: skip
    true = dataclasses.replace(machine, offsets=offsets)
    plant = apply_hydraulics(true.plant, {"hydraulics": {
        k: v for k, v in truth.items() if not k.startswith("sensor.")}})  # fmt: skip
    floor = oe.predict(plant, log_columns(true.read_log(val)), mode="free", stride=1)["rmse"]
    ours = summary["validation_rmse"]["mobile_knuckle_validation"]
    nominal = summary["validation_rmse_nominal"]["mobile_knuckle_validation"]
    print("\nfree run / true plant's: " + ", ".join(f"{c} {ours[c] / floor[c]:.2f}" for c in ours))
    # the issue's bound; measured 0.96, 1.44 and 0.60 for the angles (the fold within 4 % of
    # it: a sub-count drift, deterministic on one machine), 1.00-1.01 for the pressures
    for c, r in ours.items():
        assert r <= 1.5 * floor[c], (c, r, floor[c])
        assert r < nominal[c], (c, r, nominal[c])
