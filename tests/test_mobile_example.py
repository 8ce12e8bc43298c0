"""The shipped example of a machine as built (issue 79 point 5, `data/machines/mobile_knuckle`,
made by `scripts/make_machine_logs.py --campaign --offsets 1`): its logs are what its truth
file says, and what its machine file's data-sheet values miss."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from jaxmb.identification import output_error as oe
from jaxmb.identification.hydraulic_route import log_columns
from jaxmb.io.logs import read_log
from jaxmb.io.machine import load_machine
from jaxmb.io.params_file import apply_hydraulics

MOBILE = Path(__file__).resolve().parents[1] / "data" / "machines" / "mobile_knuckle"
TRUTH = json.loads((MOBILE / "mobile_knuckle_truth.json").read_text())
NOISE = 0.3e5  # Pa, the generator's pressure noise (PRESSURE_NOISE)


def test_the_campaigns_sidecars_and_its_load_sensing_supply():
    """Three logs of one machine: the empty bucket named (0 kg), the load not named (the truth
    file holds it), the validation's load named; the pump's pressure moves with the load."""
    payload = {stem: read_log(MOBILE / f"mobile_knuckle_{stem}.parquet").meta["conditions"]
               for stem in ("empty", "loaded", "validation")}  # fmt: skip
    assert payload == {"empty": {"payload_kg": 0.0}, "loaded": {},
                       "validation": {"payload_kg": TRUTH["payload_kg"]["validation"]}}  # fmt: skip
    assert TRUTH["payload_kg"]["loaded"] > 0
    for stem in ("empty", "loaded", "validation"):
        pump = np.asarray(read_log(MOBILE / f"mobile_knuckle_{stem}.parquet")["P_pump"])  # bar
        assert 59.0 < pump.min() and pump.max() < 211.0 and np.ptp(pump) > 50.0, stem


def test_the_true_machine_replays_its_log_at_the_noise_and_the_data_sheet_does_not():
    """The first 5 s of the validation log, replayed free-running from its first sample: by the
    truth file's machine (every valve effect, its load, the transducers' offsets subtracted)
    every pressure at the transducers' 0.3 bar noise and every angle within a few encoder
    counts; by the machine file's data-sheet values (no offsets known), pressures bars off."""
    kg = TRUTH["payload_kg"]["validation"]
    machine = load_machine(MOBILE / "mobile_knuckle.toml", payload=kg)
    params = TRUTH["parameters"]
    offsets = {f"{k.split('.')[2]}_{k.split('.')[1]}": v for k, v in params.items()
               if k.startswith("sensor.")}  # fmt: skip
    assert len(offsets) == 6 and max(abs(v) for v in offsets.values()) > 0.5e5
    true = dataclasses.replace(machine, offsets=offsets)
    plant = apply_hydraulics(true.plant, {"hydraulics": {
        k: v for k, v in params.items() if not k.startswith("sensor.")}})  # fmt: skip
    val = MOBILE / "mobile_knuckle_validation.parquet"

    def free_run(m, p):
        return oe.predict(p, log_columns(m.read_log(val).window(0.0, 5.0)), mode="free",
                          stride=1)["rmse"]  # fmt: skip

    rmse = free_run(true, plant)
    for a in ("lift", "fold", "extend"):
        for c in (f"p_a_{a}", f"p_b_{a}"):
            assert rmse[c] == pytest.approx(NOISE, rel=0.1), (c, rmse[c])
        assert rmse[a] < 5e-5, (a, rmse[a])  # a count: 4.8e-5 rad, 1e-5 m
    sheet = free_run(machine, machine.plant)
    assert max(sheet[c] for c in sheet if c.startswith("p_")) > 10 * NOISE


def test_the_generator_makes_the_shipped_logs_commands(monkeypatch, tmp_path):
    """`scripts/make_machine_logs.py` reproduces what it shipped: its experiment on the true
    machine (a load-sensing pump: the loop runs on the moving supply it makes), cut to the
    first 0.3 s and logged by its sensors (`write_experiment`), reads back as the empty log's
    first samples: the commands to 1e-6 V (the last samples aside, where the shorter run's
    last step is clipped), the angles to an encoder count, the first transducer to its
    converter's step (the same noise draws, the truth's offset), the pump's supply within its
    noise, the sidecar's payload."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "scripts"))
    import make_machine_logs as mk

    machine = load_machine(MOBILE / "mobile_knuckle.toml", payload=0.0)
    plant = mk.true_plant(machine.plant, np.random.default_rng(0))
    limits = mk.joint_limits(machine.urdf_path, plant.model.coordinate_names)
    offsets = {f"{k.split('.')[2]}_{k.split('.')[1]}": v
               for k, v in TRUTH["parameters"].items() if k.startswith("sensor.")}  # fmt: skip
    path = tmp_path / "empty.parquet"
    tr, supply = mk.write_experiment(path, machine, plant, np.random.default_rng([0, 0]), 0.3,
                                     0.25, limits, 0.0, named=True, offsets=offsets)  # fmt: skip
    made = machine.read_log(path)
    log = machine.read_log(MOBILE / "mobile_knuckle_empty.parquet")
    assert made.meta["conditions"] == {"payload_kg": 0.0}
    assert np.asarray(made.t) == pytest.approx(np.asarray(log.t[:301]), abs=1e-9)
    for a in plant.actuator_names:
        assert np.abs(made[f"u_{a}"][:-2] - log[f"u_{a}"][:299]).max() < 1e-6, a
    for c in plant.coordinate_names:
        assert np.abs(made[c] - log[c][:301]).max() <= 2 * np.pi / 2**17 + 1e-12, c
    step = (mk.P_RANGE[1] - mk.P_RANGE[0]) / (2**mk.ADC_BITS - 1)
    assert np.abs(made["p_a_lift"] - log["p_a_lift"][:301]).max() <= step * (1 + 1e-9)
    assert np.abs(supply - log["p_s"][:301]).max() < 5 * NOISE
    assert np.ptp(supply) > 1e5  # it moves
