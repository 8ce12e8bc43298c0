"""Stage 1 of a hydraulic machine's identification (`identification.mechanics`): the booms,
cylinder bodies, payload and cylinder friction from the pressure forces, checked against the
synthetic log's true parameters, which the fit never reads."""

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import true_stage1_vector

import jaxmb
from jaxmb.identification import mechanics as mech
from jaxmb.io.machine import load_machine

KNUCKLE = Path(__file__).resolve().parents[1] / "data/machines/knuckle_telescope"


@pytest.fixture(scope="module")
def knuckle():
    machine = load_machine(KNUCKLE / "knuckle_telescope.toml")
    log = machine.read_log(KNUCKLE / "knuckle_telescope_excitation.parquet")
    truth = json.loads((KNUCKLE / "knuckle_telescope_truth.json").read_text())["parameters"]
    return machine, log, truth, mech.identify_mechanics(machine, log)  # payload not told


def test_base_parameters_agree_with_the_truth_within_their_std(knuckle):
    """Every base parameter the WLS estimates (inertial combinations and friction) lies within
    4 standard deviations of the true model's base parameters ``K pi_true``: the estimate is
    unbiased and its std honest, on a log with 0.3 bar pressure noise."""
    machine, log, truth, e = knuckle
    true = true_stage1_vector(e, machine.with_payload(100.0).model, truth)
    z = (e.base_fit.theta - e.base.project(true)) / e.base_fit.std
    assert np.all(np.abs(z) < 4.0), dict(zip(e.base.expressions(3), np.round(z, 2), strict=True))
    assert e.base.rank < len(e.names)  # a real log: fewer base than standard parameters


def test_payload_friction_and_booms(knuckle):
    """The payload the log does not name comes out within 3 % and within 3 std of 100 kg; each
    cylinder's Coulomb force within 10 %; the booms stay within 3 std of their (true) file
    values; the centre along the parallel joint axes (y) is reported as not determined."""
    machine, log, truth, e = knuckle
    assert e.converged
    assert e.payload_mass == pytest.approx(100.0, rel=0.03)
    assert abs(e.payload_mass - 100.0) < 3 * e.payload_mass_std
    assert e.payload_com_determined == (True, False, True)
    for a in machine.plant.actuator_names:
        k = f"friction.{a}.F_c"
        assert e.friction[k] == pytest.approx(truth[k], rel=0.10), k
    true = true_stage1_vector(e, machine.with_payload(100.0).model, truth)
    for b in ("boom1", "boom2", "extension"):
        for p in ("m", "mcx", "mcz"):
            k = e.names.index(f"{b}.{p}")
            assert abs(e.values[k] - true[k]) < 3 * e.std[k], (b, p)
    # the out-of-plane first moments are held by the prior, and said so
    assert "boom1.mcy" in e.not_determined and "boom2.m" not in e.not_determined
    # a physical model comes out: every body's pseudo-inertia positive definite
    from jaxmb.identification.consistent import is_physically_consistent

    pi = np.asarray(jaxmb.inertial_parameters(e.model))
    assert all(bool(is_physically_consistent(p)) for p in pi)


def test_a_known_payload_is_not_fitted(knuckle):
    """With the payload named (the sidecar's 100 kg), its body moves to the right-hand side:
    it is not among the fitted parameters and the model carries it at that mass; the booms'
    estimates stay where they were."""
    machine, log, truth, e = knuckle
    k = mech.identify_mechanics(machine, log.window(0.0, 12.0), payload_known=100.0)
    assert "payload.m" not in k.names and k.payload_mass is None
    j = k.model.body_names.index("payload")
    assert float(k.model.bodies[j].mass) == 100.0
    for n in ("boom2.m", "boom2.mcx", "friction.lift.F_c"):
        assert k.value(n) == pytest.approx(e.value(n), abs=3 * max(k.std_of(n), e.std_of(n)))


def test_prior_weight_is_checked_before_any_work():
    machine = load_machine(KNUCKLE / "knuckle_telescope.toml")
    log = machine.read_log(KNUCKLE / "knuckle_telescope_validation.parquet")
    with pytest.raises(ValueError, match="prior_weight: expected a finite number > 0, got -1.0"):
        mech.identify_mechanics(machine, log, prior_weight=-1.0)


def test_payload_alone_with_the_booms_at_their_true_values(knuckle):
    """The payload-only fit that starts stage 1 (`payload.payload_only`): with the booms at
    their (here true) file values the pressures pin the payload's mass to a fraction of a
    percent, its centre in x and z to centimetres; y (along the joint axes) is not excited."""
    from jaxmb.identification.payload import payload_only

    machine, log, truth, e = knuckle
    plant = machine.with_payload(0.0)
    s = mech.pressure_samples(plant, log.window(0.0, 10.0))
    tau, Y, Yf = mech.equations(plant, s)
    pi_file = np.asarray(jaxmb.inertial_parameters(plant.model))
    j = plant.model.body_names.index("payload")
    p = payload_only(tau, Y, Yf, pi_file, j, machine.payload.com)
    assert p.mass == pytest.approx(100.0, rel=0.005) and p.mass_std < 0.5
    assert p.com_determined == (True, False, True)
    assert abs(p.com[0]) < 0.02 and abs(p.com[2]) < 0.02 and p.com[1] == 0.0


# each chamber's transducer offset (bar), as a real logger's may read: up to about 1 bar
OFFSETS_BAR = {"lift": (0.8, -0.5), "fold": (0.4, -0.9), "extend": (-0.6, 0.7)}


def _offset_log(machine, log):
    """``log`` as transducers with `OFFSETS_BAR` would have read it, and each cylinder's
    pressure-force offset ``A_a o_a - A_b o_b`` (N) that follows."""
    new, dF = {}, {}
    for a in machine.plant.actuators:
        oa, ob = (1e5 * o for o in OFFSETS_BAR[a.name])
        new[f"p_a_{a.name}"] = log[f"p_a_{a.name}"] + oa
        new[f"p_b_{a.name}"] = log[f"p_b_{a.name}"] + ob
        dF[a.name] = float(a.cylinder.force(oa, ob))
    return log.with_signals(new), dF


def test_pressure_force_offsets_are_fitted_and_keep_the_masses_unbiased(knuckle):
    """Transducers up to 0.9 bar off shift each cylinder's pressure force by ``A_a o_a - A_b
    o_b`` (up to 1 kN): fitted as one column each, the offsets come out within 3 std of
    those forces and the unknown payload within 3 % and 3 std of 100 kg, while the same log
    fitted without them misses the payload by several of its stds. On the clean log the
    "auto" choice keeps none (each within 3 std of 0)."""
    from jaxmb.identification.hydraulic_route import stage1_with_offsets

    machine, log, truth, clean = knuckle
    biased, dF = _offset_log(machine, log)
    e, about = stage1_with_offsets(machine, biased, "fitted")
    assert about["choice"] == "fitted" and about["fitted"] == list(machine.plant.actuator_names)
    for a, f in dF.items():
        v, s = e.value(f"sensor.{a}.force"), e.std_of(f"sensor.{a}.force")
        print(a, "force offset", v, "+-", s, "true", f)
        assert abs(v - f) < 3 * s, a
        assert about["force_offset_N"][a] == {"value": v, "std": s}
    assert e.payload_mass == pytest.approx(100.0, rel=0.03)
    assert abs(e.payload_mass - 100.0) < 3 * e.payload_mass_std
    ignored = mech.identify_mechanics(machine, biased)
    print("payload", e.payload_mass, "+-", e.payload_mass_std, "ignoring", ignored.payload_mass)
    assert abs(ignored.payload_mass - 100.0) > 3 * ignored.payload_mass_std
    _, none = stage1_with_offsets(machine, log, "auto")
    assert none["choice"] == "none" and none["fitted"] == [], none
    assert stage1_with_offsets(machine, biased, "none")[1] == {"choice": "none"}
