"""`long_refit`: the fit span cut into long segments, what the refit fits, and its Jacobian
through a 10 s segment against central differences (the refit's gradient, as anything that
identifies through the simulation checks it). The refit's effect on the free-run replay and
its held-out choice are measured end to end by the crane's and the knuckle's identify tests
(tests/test_identify_main.py)."""

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from jaxmb.identification.hydraulic_route import log_columns, with_held
from jaxmb.identification.long_refit import LONG_TIME, STRIDE, long_segments, long_selectors
from jaxmb.identification.model_choice import HELD_OUT, spec_for
from jaxmb.identification.output_error import (
    HydraulicParameters,
    make_segments,
    residuals_and_jacobian,
)
from jaxmb.io.logs import Log, read_log
from jaxmb.io.machine import load_machine

DATA = Path(__file__).resolve().parents[1] / "data" / "synthetic_crane"


@pytest.fixture(scope="module")
def crane():
    return load_machine("crane", payload=60.0)


def _flat_log(plant, seconds: float, h: float = 1e-3) -> dict:
    t = np.arange(int(round(seconds / h)) + 1) * h
    cols = {"t": t, **{c: 0.3 + 0.01 * np.sin(t) for c in plant.coordinate_names}}
    for a in plant.actuator_names:
        cols[f"p_a_{a}"], cols[f"p_b_{a}"] = 50e5 + 1e5 * np.sin(t), 20e5 + 1e5 * np.cos(t)
    cols.update({c: 0.1 * np.sin(t) for c in plant.command_names})
    return cols


@pytest.mark.parametrize(
    "seconds, window, count, length",
    [
        (40.0, None, 4, 10.0),  # the 40 s logs: four of 10 s
        (65.0, None, 7, 9.28),  # longer: as many as keep each at most LONG_TIME
        (40.0, (2.0, 8.0), 4, 1.5),  # a short window: still HELD_OUT of them
    ],
)
def test_long_segments_cut_the_span_into_equal_segments(crane, seconds, window, count, length):
    plant = crane.plant
    cols = _flat_log(plant, seconds)
    t0, t1 = window or (None, None)
    seg = long_segments(plant, cols, np.ones(6), t_start=t0, t_end=t1)
    ts = np.asarray(seg.ts)
    assert ts.shape[0] == count >= HELD_OUT
    spans = ts[:, -1] - ts[:, 0]
    np.testing.assert_allclose(spans, length, atol=1e-9)
    assert np.all(spans <= LONG_TIME + 1e-9)
    np.testing.assert_allclose(np.diff(ts, axis=1), STRIDE * 1e-3, rtol=1e-9)
    np.testing.assert_allclose(ts[1:, 0], ts[:-1, -1], atol=1e-9)  # consecutive
    assert ts[0, 0] == pytest.approx(0.0 if window is None else window[0], abs=1e-9)
    np.testing.assert_array_equal(seg.scale, np.ones(6))  # the short fit's noise levels


def test_long_selectors_hold_leakage_and_payload_and_add_viscous_coefficients_and_booms(crane):
    short = HydraulicParameters(
        ("valve.lift.c_pa", "cylinder.lift.c_int", "body.payload.mass"),
        reference={"cylinder.lift.c_int": 1e-14},
    )
    names = long_selectors(crane.plant, short, ("body.L.mass", "body.payload.mass"))
    assert names == (
        "valve.lift.c_pa",
        "friction.lift.sigma",
        "friction.tilt.sigma",
        "body.L.mass",
    )


def test_jacobian_through_a_long_segment_matches_central_differences(crane):
    """Through 10 s of RK4 steps, with the kinds of parameter the long refit adds (viscous
    coefficients, masses) and a valve edge: forward mode is the exact derivative of the
    discrete solution, so central differences (step 1e-5 in theta) agree to 1e-6 of the
    directional derivative's norm (measured 6e-9), along a boom's mass and a random
    direction, at a point 1 % from the file's values. (From 5 % off, the 10 s free run drove
    the tilt into its end stop, which the log passes 3-4 cm from: a kink, where central
    differences at any step scatter over four orders of magnitude. The fit's trust region
    rejects such steps.)"""
    cols = log_columns(read_log(DATA / "synthetic_crane_payload_excitation.parquet"))
    plant = crane.plant
    seg = make_segments(plant, cols, segment_time=10.0, t_start=20.0, t_end=30.0)
    assert seg.ts.shape[0] == 1
    names = ("valve.lift.c_bn", "friction.tilt.sigma", "body.L.mass", "body.payload.mass")
    spec = spec_for(names)
    theta = jnp.asarray(np.random.default_rng(0).uniform(-0.01, 0.01, len(spec)))
    r, J = (np.asarray(x) for x in residuals_and_jacobian(theta, plant, spec, seg))
    assert np.all(np.isfinite(J)) and np.linalg.norm(r) > 0
    eps = 1e-5
    v = np.random.default_rng(1).normal(size=len(spec))
    for d in (np.eye(len(spec))[2], v / np.linalg.norm(v)):
        rp, _ = residuals_and_jacobian(theta + eps * d, plant, spec, seg)
        rm, _ = residuals_and_jacobian(theta - eps * d, plant, spec, seg)
        fd = (np.asarray(rp) - np.asarray(rm)) / (2 * eps)
        jd = J @ d
        assert np.linalg.norm(jd) > 0
        np.testing.assert_allclose(jd, fd, atol=1e-6 * np.linalg.norm(jd))


def test_held_parameters_enter_the_replay_but_a_named_payload_wins(crane):
    """What the long refit held at the short fit's values (a leakage, the payload) enters the
    validation replay's plant, but a validation log that names its payload keeps it."""
    held = {"cylinder.tilt.c_int": (2.1e-14, 1e-15), "body.payload.mass": (59.0, 0.5)}
    t = np.arange(3.0)
    j = crane.plant.model.body_names.index("payload")
    i = crane.plant.actuator_names.index("tilt")
    for meta, payload in (({"conditions": {"payload_kg": 60.0}}, 60.0), ({}, 59.0)):
        plant = with_held(crane.plant, held, Log(t, {"q1": t}, meta))
        assert float(plant.actuators[i].cylinder.c_int) == 2.1e-14
        assert float(plant.model.bodies[j].mass) == payload
    assert with_held(crane.plant, {}, Log(t, {"q1": t}, {})) is crane.plant
