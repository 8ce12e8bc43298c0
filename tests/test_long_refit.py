"""`long_refit`: the fit span cut into long segments, what the refit fits, and its Jacobian
through a 10 s segment against central differences (the refit's gradient, as anything that
identifies through the simulation checks it). The refit's effect on the free-run replay and
its held-out choice are measured end to end by the crane's campaign test
(tests/test_identify_main.py) and the mobile knuckle's (tests/test_mobile_identified.py)."""

import dataclasses
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmb.identification import shooting
from jaxmb.identification.hydraulic_route import log_columns, with_held
from jaxmb.identification.long_refit import (
    LONG_TIME,
    STRIDE,
    long_segments,
    long_selectors,
    piece_segments,
    replay_cost,
)
from jaxmb.identification.model_choice import HELD_OUT, spec_for
from jaxmb.identification.output_error import (
    HydraulicParameters,
    make_segments,
    plant_with,
    residuals_and_jacobian,
    simulate_segments_compiled,
    strong_types,
    with_scales,
)
from jaxmb.identification.shooting import PIECE_TIME
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
        (65.0, None, 7, 9.2),  # longer: as many as keep each at most LONG_TIME, 10 pieces
        (40.0, (2.0, 8.0), 4, 1.5),  # a short window: still HELD_OUT of them
        (24.05, None, 4, 5.95),  # 595 strides: 7 pieces of 0.85 s (6 do not tile it)
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
    # each a chain of m equal pieces of at most PIECE_TIME, in the log's order
    pieces, m = piece_segments(plant, cols, seg)
    p_ts = np.asarray(pieces.ts)
    assert p_ts.shape[0] == count * m and m >= np.ceil(length / PIECE_TIME - 1e-9)
    np.testing.assert_allclose(p_ts[::m, 0], ts[:, 0], atol=1e-9)
    np.testing.assert_allclose(p_ts[m - 1 :: m, -1], ts[:, -1], atol=1e-9)
    np.testing.assert_allclose(p_ts[1:, 0], p_ts[:-1, -1], atol=1e-9)
    assert np.all(p_ts[:, -1] - p_ts[:, 0] <= PIECE_TIME + 1e-9)
    np.testing.assert_array_equal(pieces.scale, seg.scale)


def test_a_plant_with_spool_states_is_not_chained(crane):
    """A piece starts a spool at its steady state, so chains of a plant with spool dynamics
    would not be its long segments: `piece_segments` gives one piece per long segment
    (single shooting) and `fit_chains` refuses chains of it, naming why."""
    plant = crane.plant
    assert not shooting.internal_states(plant)
    valve = dataclasses.replace(plant.actuators[0].valve, spool="first")
    spooled = eqx.tree_at(lambda p: p.actuators[0].valve, plant, valve)
    assert shooting.internal_states(spooled)
    cols = _flat_log(plant, 40.0)
    seg = long_segments(spooled, cols, np.ones(6))
    pieces, m = piece_segments(spooled, cols, seg)
    assert m == 1 and pieces.ts.shape == seg.ts.shape
    with pytest.raises(ValueError, match="spool or bristle states"):
        shooting.fit_chains(spooled, spec_for(NAMES), pieces, 2, theta0=np.zeros(4))


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


NAMES = ("valve.lift.c_bn", "friction.tilt.sigma", "body.L.mass", "body.payload.mass")


@pytest.fixture(scope="module")
def span(crane):
    """20-30 s of the payload log: one 10 s segment and its ten 1 s pieces."""
    cols = log_columns(read_log(DATA / "synthetic_crane_payload_excitation.parquet"))
    seg = make_segments(crane.plant, cols, segment_time=10.0, t_start=20.0, t_end=30.0)
    assert seg.ts.shape[0] == 1
    pieces, m = piece_segments(crane.plant, cols, seg)
    assert m == 10
    return seg, pieces


def _weighted_rows(x, seg):
    """The rows of a residual vector or Jacobian that weigh (start samples left out)."""
    keep = np.repeat(np.asarray(seg.weights).reshape(-1) > 0, len(seg.signal_names))
    return np.asarray(x)[keep]


def test_jacobian_through_a_long_segment_matches_central_differences(crane, span):
    """Through 10 s of RK4 steps, with the kinds of parameter the long refit adds (viscous
    coefficients, masses) and a valve edge: forward mode is the exact derivative of the
    discrete solution, so central differences (step 1e-5 in theta) agree to 1e-6 of the
    directional derivative's norm (measured 6e-9), along a boom's mass and a random
    direction, at a point 1 % from the file's values. (From 5 % off, the 10 s free run drove
    the tilt into its end stop, which the log passes 3-4 cm from: a kink, where central
    differences at any step scatter over four orders of magnitude. The fit's trust region
    rejects such steps.) The differences are of plain simulations (the program that scores
    held-out segments): a Jacobian at every shifted point would cost P + 1 of them."""
    plant, seg = crane.plant, span[0]
    spec = spec_for(NAMES)
    theta = jnp.asarray(np.random.default_rng(0).uniform(-0.01, 0.01, len(spec)))
    r, J = (np.asarray(x) for x in residuals_and_jacobian(theta, plant, spec, seg))
    assert np.all(np.isfinite(J)) and np.linalg.norm(r) > 0

    def weighted_residuals(th):  # `residuals`' weighting, of the plain simulation
        y = simulate_segments_compiled(strong_types(plant_with(th, plant, spec)), seg, 1e-3)
        w = np.asarray(seg.weights)[..., None] / np.asarray(seg.scale)[None, None, :]
        return ((np.asarray(y) - np.asarray(seg.targets)) * w).reshape(-1)

    np.testing.assert_allclose(weighted_residuals(theta), r, rtol=0, atol=1e-9 * np.abs(r).max())
    eps = 1e-5
    v = np.random.default_rng(1).normal(size=len(spec))
    for d in (np.eye(len(spec))[2], v / np.linalg.norm(v)):
        rp = weighted_residuals(theta + eps * d)
        rm = weighted_residuals(theta - eps * d)
        fd = (rp - rm) / (2 * eps)
        jd = J @ d
        assert np.linalg.norm(jd) > 0
        np.testing.assert_allclose(jd, fd, atol=1e-6 * np.linalg.norm(jd))


def test_closed_chains_of_pieces_are_the_long_segment(crane, span):
    """Multiple shooting condensed (`shooting`): from the log's start states (gaps up to
    0.8 of a residual scale), three condensing steps close the ten pieces' chain (Newton on
    continuity), and then its condensed residuals and Jacobian are the 10 s segment's,
    computed by single shooting through 10 000 RK4 steps: two formulations of one
    derivative (measured 7e-13 and 2.5e-8 relative)."""
    plant, (seg, pieces) = crane.plant, span
    spec = spec_for(NAMES)
    theta = jnp.asarray(np.random.default_rng(0).uniform(-0.01, 0.01, len(spec)))
    n = plant.model.n
    gaps = []
    for _ in range(4):
        lin = shooting.linearized(theta, plant, spec, pieces)
        r, J, a, D = shooting.condensed(lin, shooting.start_vector(pieces, n), 10)
        gaps.append(np.max(np.abs(a)))
        pieces = shooting.moved(pieces, a, n)
    assert gaps[0] > 0.1 and gaps[-1] < 1e-6  # the first piece's start is fixed: 0 step
    np.testing.assert_array_equal(a[0], 0.0)
    assert np.all(D[0] == 0) and np.linalg.norm(D[1:]) > 0
    r_long, J_long = (np.asarray(x) for x in residuals_and_jacobian(theta, plant, spec, seg))
    r_long, J_long = _weighted_rows(r_long, seg), _weighted_rows(J_long, seg)
    r, J = _weighted_rows(r, pieces), _weighted_rows(J, pieces)
    np.testing.assert_allclose(r, r_long, atol=1e-9 * np.linalg.norm(r_long))
    np.testing.assert_allclose(J, J_long, atol=1e-6 * np.linalg.norm(J_long))
    # the condensed cost of the closed chain is the replay's (`replay_cost`, no Jacobian)
    cost = 0.5 * float(r @ r)
    assert replay_cost(np.asarray(theta), plant, spec, seg) == pytest.approx(cost, rel=1e-9)


def test_chains_fit_recovers_the_plant_that_made_the_data(crane, span):
    """`shooting.fit_chains` on the file's own 10 s free run (the plant's single-shooting
    signals from the segment's start, cut into the ten pieces' targets) from 1 % off the
    file's values and the log's start states (open chains: the log's, not the run's): it
    ends at the file's values (theta 0) with the chain closed and the cost ~0. (On the log
    itself these parameters run to the box's bounds and the tilt's end stop, a kink, see the
    test above: a poor test of convergence.)"""
    plant, (seg, pieces) = crane.plant, span
    spec = spec_for(NAMES)
    y = np.asarray(simulate_segments_compiled(strong_types(plant), seg, 1e-3))  # (1, 1001, c)
    seg = eqx.tree_at(lambda s: s.targets, seg, jnp.asarray(y))
    idx = 100 * np.arange(10)[:, None] + np.arange(101)[None, :]
    pieces = eqx.tree_at(lambda s: s.targets, pieces, jnp.asarray(y[0][idx]))
    theta0 = np.full(len(spec), 0.01)
    chains, end = shooting.fit_chains(plant, spec, pieces, 10, theta0=theta0, max_evaluations=20)
    assert chains.success, chains.message
    assert chains.cost0 > 1.0 and chains.cost < 1e-12
    np.testing.assert_allclose(chains.theta, 0.0, atol=1e-6)
    assert replay_cost(chains.theta, plant, spec, seg) < 1e-12
    # the pieces' start states are the run's own (chain closed)
    np.testing.assert_allclose(np.asarray(end.p0)[1:].reshape(9, -1), y[0, idx[1:, 0], 2:],
                               rtol=1e-6)  # fmt: skip


def test_a_chains_first_start_state_is_fitted_with_theta(crane, span):
    """A 10 s chain whose first start state is wrong (its velocities 2 mrad/s off the run's,
    as a start estimated from the head samples alone can be, `start_states`), fitted to the
    run's own signals plus white noise (0.1 mrad, 0.3 bar, the residual scales):
    `shooting.fit_chains` with ``free_starts`` fits that start with theta, so theta comes out within its 99 %
    ellipsoid about the file's values (theta 0, by the fit's own covariance) and the start
    velocities nearer the run's. Held at the wrong start, theta bent to explain the drift the
    run integrates from it: 29 in squared distance here, 1204 on the knuckle's 40 s log (21
    parameters)."""
    import scipy.stats

    plant, spec = crane.plant, spec_for(NAMES)
    seg, pieces = (with_scales(s, np.array([1e-4, 1e-4, 3e4, 3e4, 3e4, 3e4])) for s in span)
    y = np.asarray(simulate_segments_compiled(strong_types(plant), seg, 1e-3))  # (1, 1001, c)
    rng = np.random.default_rng(0)
    noisy = y + rng.normal(size=y.shape) * np.asarray(seg.scale)[None, None, :]
    idx = 100 * np.arange(10)[:, None] + np.arange(101)[None, :]
    qd0 = np.asarray(pieces.qd0).copy()
    qd0[0] += 2e-3
    pieces = eqx.tree_at(lambda s: (s.targets, s.qd0), pieces,
                         (jnp.asarray(noisy[0][idx]), jnp.asarray(qd0)))  # fmt: skip
    chains, end = shooting.fit_chains(plant, spec, pieces, 10, theta0=np.zeros(len(spec)),
                                      free_starts=True)  # fmt: skip
    assert chains.success, chains.message
    theta = np.asarray(chains.theta)
    d2 = float(theta @ np.linalg.solve(chains.covariance, theta))
    assert d2 < scipy.stats.chi2.ppf(0.99, len(spec)), (d2, theta)
    off = np.abs(np.asarray(end.qd0)[0] - np.asarray(seg.qd0)[0])
    assert np.all(off < 0.5 * 2e-3), off


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
