"""Output-error identification of the crane's hydraulics with multiple shooting, on the
SYNTHETIC logs of data/synthetic_crane (scripts/make_crane_logs.py): the Jacobian against
central differences, recovery of the TRUE valve coefficients and bulk moduli (the truth file
is read only here, never by the fit), and better predictions on the validation log.

A slice of each log keeps the tests short; every fit starts from the nominal plant."""

import json
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import backend_compiles

from jaxmb.identification.hydraulic_route import log_columns
from jaxmb.identification.output_error import (
    COM_STEP,
    HydraulicParameters,
    cost,
    embedding,
    fit,
    initial_theta,
    make_segments,
    parameter_values,
    pilot_segments,
    plant_with,
    predict,
    residuals_and_jacobian,
    theta_covariance,
    value_std,
    with_block,
    with_scales,
)
from jaxmb.io.logs import read_log
from jaxmb.io.params_file import apply_hydraulics
from jaxmb.models.crane import lift_tilt_crane_plant

DATA = Path(__file__).resolve().parents[1] / "data" / "synthetic_crane"
VALVES = [f"valve.{a}.{e}" for a in ("lift", "tilt") for e in ("c_pa", "c_an", "c_pb", "c_bn")]
BETAS = ["cylinder.lift.beta", "cylinder.tilt.beta"]
# internal leakage: nominal 0, so the log-space parameter needs a reference to start from
LEAKS = {"cylinder.lift.c_int": 1e-14, "cylinder.tilt.c_int": 1e-14}
# the fitting slice: 4 s of the excitation log (8 segments of 0.5 s, residuals at 100 Hz)
FIT_SLICE = (1.0, 5.0)


def _columns(path):
    """A log's columns (read and validated by the project's reader) and its sidecar."""
    log = read_log(path)
    return log_columns(log), log.meta


@pytest.fixture(scope="module")
def truth():
    return json.loads((DATA / "synthetic_crane_truth.json").read_text())


@pytest.fixture(scope="module")
def excitation():
    cols, side = _columns(DATA / "synthetic_crane_excitation.parquet")
    assert side["synthetic"] is True and side["model"] == "lift_tilt_crane"
    return cols, side


@pytest.fixture(scope="module")
def nominal(excitation):
    """The nominal plant at the experiment's known payload (a condition, from the sidecar)."""
    payload = excitation[1]["conditions"]["payload_kg"]
    return lift_tilt_crane_plant(full=True, payload=payload)


@pytest.fixture(scope="module")
def spec():
    return HydraulicParameters(VALVES + BETAS + list(LEAKS), reference=LEAKS)


@pytest.fixture(scope="module")
def segments(nominal, excitation):
    return make_segments(nominal, excitation[0], t_start=FIT_SLICE[0], t_end=FIT_SLICE[1])


@pytest.fixture(scope="module")
def result(nominal, spec, segments):
    return fit(nominal, spec, segments, max_evaluations=25)


def test_parameters_round_trip(nominal, spec, truth):
    """plant_with / parameter_values: theta = log(value / reference), leaves land where named
    (the reference is the nominal value, or the given one for leakage, nominally 0)."""
    ref = {n: LEAKS.get(n, truth["nominal"][n]) for n in spec.names}
    theta = jnp.log(jnp.asarray([truth["parameters"][n] / ref[n] for n in spec.names]))
    p = plant_with(theta, nominal, spec)
    vals = parameter_values(theta, nominal, spec)
    for n in spec.names:
        np.testing.assert_allclose(vals[n], truth["parameters"][n], rtol=1e-12)
    np.testing.assert_allclose(
        p.actuator("tilt").valve.c_pb, truth["parameters"]["valve.tilt.c_pb"]
    )
    np.testing.assert_allclose(p.actuator("lift").cylinder.beta, 0.8e9, rtol=1e-12)
    assert p.actuator("lift").valve.c_pa != nominal.actuator("lift").valve.c_pa
    np.testing.assert_array_equal(initial_theta(nominal, spec), np.zeros(len(spec)))
    # a leaf that is 0 nominally (leakage) starts at its reference
    leak = HydraulicParameters(["cylinder.lift.c_int"], reference={"cylinder.lift.c_int": 1e-14})
    np.testing.assert_allclose(initial_theta(nominal, leak), [0.0])
    assert parameter_values(jnp.log(jnp.asarray([2.0])), nominal, leak) == pytest.approx(
        {"cylinder.lift.c_int": 2e-14}
    )


def test_centre_of_mass_coordinates_are_additive_and_differentiable(nominal):
    """A body's centre coordinate (which may sit at 0) is ``nominal + COM_STEP * theta``, set
    with the other coordinates of the same body kept, next to a log-scaled mass; the body's
    inertia about its centre stays (it moves rigidly), unless a diagonal entry of it is
    selected (log-scaled, the other entries kept); a centre's std is COM_STEP times theta's;
    the leaves stay differentiable in theta."""
    spec = HydraulicParameters(["body.payload.mass", "body.payload.com_x", "body.payload.com_z"])
    assert initial_theta(nominal, spec).tolist() == [0.0, 0.0, 0.0]
    theta = jnp.asarray([np.log(1.1), 0.5, -0.2])
    body = plant_with(theta, nominal, spec).model.bodies[2]
    assert nominal.model.body_names[2] == "payload"
    m0 = float(nominal.model.bodies[2].mass)  # the sidecar's payload
    np.testing.assert_allclose(body.mass, 1.1 * m0, rtol=1e-14)
    np.testing.assert_allclose(body.com, [0.5 * COM_STEP, 0.0, -0.2 * COM_STEP], atol=1e-15)
    np.testing.assert_array_equal(body.inertia, nominal.model.bodies[2].inertia)
    vals = parameter_values(theta, nominal, spec)
    assert vals == pytest.approx({"body.payload.mass": 1.1 * m0, "body.payload.com_x": 0.05,
                                  "body.payload.com_z": -0.02}, rel=1e-12)  # fmt: skip
    std = value_std(np.array([0.01, 0.02, 0.03]), spec, vals)
    assert std == pytest.approx({"body.payload.mass": 0.011 * m0, "body.payload.com_x": 0.002,
                                 "body.payload.com_z": 0.003}, rel=1e-12)  # fmt: skip
    d = jax.jacfwd(lambda th: plant_with(th, nominal, spec).model.bodies[2].com)(theta)
    np.testing.assert_allclose(d, COM_STEP * np.array([[0, 1, 0], [0, 0, 0], [0, 0, 1]]))
    # an inertia's diagonal entry (about the centre), log-scaled, its other entries kept
    spec_i = HydraulicParameters(["body.L.I_yy", "body.L.com_x"])
    L = plant_with(jnp.asarray([np.log(1.2), 0.1]), nominal, spec_i).model.bodies[0]
    L0 = nominal.model.bodies[0]
    assert nominal.model.body_names[0] == "L"
    np.testing.assert_allclose(L.inertia[1, 1], 1.2 * L0.inertia[1, 1], rtol=1e-14)
    keep = ~np.eye(3, dtype=bool) | (np.arange(3) != 1)[:, None]
    np.testing.assert_array_equal(np.asarray(L.inertia)[keep], np.asarray(L0.inertia)[keep])
    np.testing.assert_allclose(L.com[0], L0.com[0] + 0.1 * COM_STEP, rtol=1e-14)
    with pytest.raises(ValueError, match="a body's field is one of"):
        HydraulicParameters(["body.payload.Ixy"])
    # a parameter file carries centres and inertias in its bodies, not as selectors
    with pytest.raises(ValueError, match=r"hydraulics\['body.payload.com_x'\]: a body's centre"):
        apply_hydraulics(nominal, {"hydraulics": {"body.payload.com_x": 0.1}})
    with pytest.raises(ValueError, match="is additive: it takes no reference"):
        HydraulicParameters(["body.payload.com_x"], reference={"body.payload.com_x": 1.0})


def test_pilot_fits_take_every_other_segment_that_counts(nominal, excitation):
    """`fit_noise_weighted`'s pilots fit half the segments, spread over those in the residual
    (a held-out mask's zero-weight segments are never taken), the same count with or without
    the mask (one compiled program); a short log keeps all of them."""
    seg = make_segments(nominal, excitation[0], t_start=1.0, t_end=21.0)  # 40 segments
    K = seg.ts.shape[0]
    half = pilot_segments(seg)
    assert half.ts.shape[0] == 20 and half.targets.shape[1:] == seg.targets.shape[1:]
    starts = np.asarray(half.ts[:, 0])
    assert starts[0] == seg.ts[0, 0] and starts[-1] == seg.ts[-1, 0]
    assert np.all(np.isin(starts, np.asarray(seg.ts[:, 0])))
    held = np.arange(K) % 4 == 3  # as model_choice holds out
    masked = eqx.tree_at(lambda s: s.weights, seg, seg.weights * jnp.asarray(~held)[:, None])
    kept = pilot_segments(masked)
    assert kept.ts.shape == half.ts.shape
    assert np.all(np.asarray(kept.weights).sum(axis=1) > 0)
    assert len(set(np.asarray(kept.ts[:, 0]).tolist())) == 20
    short = make_segments(nominal, excitation[0], t_start=1.0, t_end=5.0)  # 8: all of them
    assert pilot_segments(short) is short


def test_bad_selectors(nominal, segments):
    with pytest.raises(ValueError, match="must read '<part>.<name>.<field>'"):
        HydraulicParameters(["valve.lift"])
    with pytest.raises(ValueError, match="no actuator 'boom'"):
        initial_theta(nominal, HydraulicParameters(["valve.boom.c_pa"]))
    with pytest.raises(ValueError, match="has no leaf 'c_xx'"):
        initial_theta(nominal, HydraulicParameters(["valve.lift.c_xx"]))
    with pytest.raises(ValueError, match="nominal value is 0.0"):
        initial_theta(nominal, HydraulicParameters(["cylinder.lift.c_int"]))
    with pytest.raises(ValueError, match="nominal value is 0.0"):  # a start given: the same
        fit(nominal, HydraulicParameters(["cylinder.lift.c_int"]), segments, theta0=[0.0])
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['p_b_tilt'\]"):
        make_segments(nominal, {"t": np.arange(3.0), "q1": np.zeros(3)} | {
            k: np.zeros(3) for k in ("q2", "p_a_lift", "p_b_lift", "p_a_tilt", "u_lift", "u_tilt")
        })  # fmt: skip


def test_a_parameter_the_residuals_do_not_see_has_an_infinite_std():
    """`theta_covariance`: a Jacobian column of zeros (a boom's inertia about an axis the
    motion never turns about) and two columns that only act as their sum leave those three
    parameters undetermined (infinite std, not the pseudo-inverse's 0), while the others
    keep the covariance ``sigma^2 (J^T J)^{-1}`` of the determined block (its closed form
    for orthogonal columns: ``sigma^2 / |J_i|^2``), however unequal the columns' scales (a
    leakage coefficient's column is 1e-7 of a valve's: J^T J spans 1e15, within rounding of
    singular, until its columns are scaled)."""
    rng = np.random.default_rng(0)
    N = 200
    Q, _ = np.linalg.qr(rng.normal(size=(N, 3)))
    a, b, c = 3.0 * Q[:, 0], 1e-7 * Q[:, 1], Q[:, 2]
    J = np.stack([a, np.zeros(N), b, c, c], axis=1)  # P = 5: columns 1 and (3, 4) unseen
    r = rng.normal(0.0, 0.1, N)
    sigma2, cov, undetermined, _ = theta_covariance(J, r, N)
    assert sigma2 == pytest.approx(float(r @ r) / (N - 5), rel=1e-12)
    np.testing.assert_array_equal(undetermined, [False, True, False, True, True])
    np.testing.assert_allclose(np.diag(cov)[[0, 2]], sigma2 / np.array([9.0, 1e-14]), rtol=1e-10)
    full = theta_covariance(J[:, [0, 2]], r, N)
    block = cov[np.ix_([0, 2], [0, 2])] / sigma2  # sigma^2 counts P parameters: compare (J^T J)^-1
    np.testing.assert_allclose(full[1] / full[0], block, rtol=1e-10, atol=1e-14)
    assert not full[2].any()  # a determined fit: nothing marked


def test_jacobian_matches_central_differences(nominal, spec, segments):
    """Forward mode through the fixed-step RK4 segments (the plant's state Jacobian shared
    among the columns) is the exact derivative of the discrete solution, so it must match
    central differences (step 1e-5 in theta: truncation ~1e-10, round-off ~1e-11 relative) to
    1e-6 of the column's norm, along two coordinate directions and one random direction, at a
    point away from nominal."""
    theta = jnp.asarray(np.random.default_rng(0).uniform(-0.1, 0.1, len(spec)))
    r, J = residuals_and_jacobian(theta, nominal, spec, segments)
    r, J = np.asarray(r), np.asarray(J)
    assert np.all(np.isfinite(J)) and np.linalg.norm(r) > 0
    eps = 1e-5
    v = np.random.default_rng(1).normal(size=len(spec))
    for d in (np.eye(len(spec))[0], np.eye(len(spec))[9], v / np.linalg.norm(v)):
        rp, _ = residuals_and_jacobian(theta + eps * d, nominal, spec, segments)
        rm, _ = residuals_and_jacobian(theta - eps * d, nominal, spec, segments)
        fd = (np.asarray(rp) - np.asarray(rm)) / (2 * eps)
        jd = J @ d
        assert np.linalg.norm(jd) > 0
        np.testing.assert_allclose(jd, fd, atol=1e-6 * np.linalg.norm(jd))
    # the same compiled program for a subset of the columns (`fit`'s ``columns``): the mask
    # holds the leakages at their nominal 0, which log-space theta only approaches (-60: a
    # leakage 1e-40 m^3/(s Pa)); their columns come out 0, the others those of that plant
    leaks = np.array([n in LEAKS for n in spec.names])
    r_m, J_m = residuals_and_jacobian(
        theta, nominal, spec, segments, active=jnp.asarray(~leaks, float)
    )
    r_0, J_0 = residuals_and_jacobian(jnp.where(leaks, -60.0, theta), nominal, spec, segments)
    assert not np.asarray(J_m)[:, leaks].any()
    np.testing.assert_allclose(r_m, r_0, rtol=0, atol=1e-12 * np.abs(r_0).max())
    np.testing.assert_allclose(
        np.asarray(J_m)[:, ~leaks], np.asarray(J_0)[:, ~leaks], rtol=0,
        atol=1e-12 * np.abs(J_0).max(),
    )  # fmt: skip


def test_segments_in_blocks_run_the_program_of_one_block(nominal, spec, segments, excitation):
    """`with_block`: 16 and 12 segments in calls of 8 (the second padded with copies that weigh
    nothing) run the 8-segment program the other tests compiled, nothing new, and each
    segment's rows and Jacobian rows land where its own: the first 8 are the 8-segment set's,
    the last 4 of the 12 those of the 16 (what a fit whose pilots run half the segments relies
    on to compile one program, `noise_weighted.fit_noise_weighted`)."""
    theta = jnp.asarray(np.random.default_rng(0).uniform(-0.1, 0.1, len(spec)))
    r8, J8 = (np.asarray(x) for x in residuals_and_jacobian(theta, nominal, spec, segments))
    sc = np.asarray(segments.scale)
    longer = {
        k: with_block(with_scales(make_segments(nominal, excitation[0], t_start=1.0, t_end=t), sc), 8)
        for k, t in ((16, 9.0), (12, 7.0))
    }  # fmt: skip
    with backend_compiles() as compiled:
        got = {k: residuals_and_jacobian(theta, nominal, spec, s) for k, s in longer.items()}
    assert not [c for c in compiled if "_residuals_and_jacobian" in c], compiled
    rows = r8.size // 8  # per segment
    for k, (r, J) in got.items():
        r, J = np.asarray(r), np.asarray(J)
        assert r.shape == (k * rows,) and J.shape == (k * rows, len(spec))
        np.testing.assert_array_equal(r[: 8 * rows], r8)
        np.testing.assert_array_equal(J[: 8 * rows], J8)
    (r16, J16), (r12, J12) = (tuple(np.asarray(x) for x in got[k]) for k in (16, 12))
    np.testing.assert_array_equal(r12[8 * rows :], r16[8 * rows : 12 * rows])
    np.testing.assert_array_equal(J12[8 * rows :], J16[8 * rows : 12 * rows])
    assert np.abs(r16[8 * rows :]).max() > 0
    with pytest.raises(ValueError, match="with_block: block"):
        with_block(segments, 0)


def test_a_subset_embeds_in_columns_with_the_same_references(nominal, spec, segments):
    """`embedding` places a subset's parameters among a superset's columns, and refuses a
    superset that lacks one or references it otherwise (theta would mean another value)."""
    lift_leak = "cylinder.lift.c_int"
    sub = HydraulicParameters(["cylinder.tilt.beta", lift_leak], reference={lift_leak: 1e-14})
    index, active = embedding(sub, spec)
    assert [spec.names[i] for i in index] == list(sub.names)
    assert float(active.sum()) == 2 and bool(active[index].all())
    with pytest.raises(ValueError, match=r"embedding: columns: \['cylinder.tilt.beta'\] .* not"):
        embedding(sub, HydraulicParameters(VALVES + list(LEAKS), reference=LEAKS))
    with pytest.raises(ValueError, match="another reference"):
        embedding(sub, HydraulicParameters(VALVES + BETAS + list(LEAKS), reference={
            "cylinder.lift.c_int": 2e-14, "cylinder.tilt.c_int": 1e-14}))  # fmt: skip
    with pytest.raises(ValueError, match=r"cost: theta must have shape \(2,\), got \(1,\)"):
        cost(np.zeros(1), nominal, sub, segments, columns=spec)
    # the mask holds a leaf at its nominal value whatever theta holds
    th = jnp.asarray(np.linspace(-0.2, 0.3, len(spec)))
    masked = plant_with(th, nominal, spec, active)
    alone = plant_with(th[index], nominal, sub)
    for a, b in zip(jax.tree.leaves(masked), jax.tree.leaves(alone), strict=True):
        np.testing.assert_array_equal(a, b)


def test_fit_recovers_the_true_hydraulics(result, truth, spec):
    """From nominal (valve edges off by -10..+15 %, beta by +25 %), on 4 s of noisy synthetic
    data: valve coefficients within 3 %, bulk moduli within 10 % of the TRUE values; the cost
    drops by a factor of at least 20. Internal leakage (true 2e-14 m^3/(s Pa), about 0.01 l/min
    per 100 bar against flows of tens of l/min) is fitted too and the fit reports it as poorly
    determined (relative std above 20 %; the estimates came out 2.2x and 0.1x the truth, the
    latter at its bound), unlike the valves and bulk moduli (below 1 %)."""
    print(f"\nfit: {result.n_evaluations} evaluations, {result.wall_time:.1f} s, "
          f"cost {result.cost0:.4g} -> {result.cost:.4g}")  # fmt: skip
    errors = {}
    for n in spec.names:
        true = truth["parameters"][n]
        errors[n] = result.values[n] / true - 1
        print(f"  {n:22s} true {true:.5g}  fit {result.values[n]:.5g}  "
              f"err {100 * errors[n]:+.2f} %  std {100 * result.std[n] / true:.2f} %")  # fmt: skip
    for n in VALVES:
        assert abs(errors[n]) < 0.03, (n, errors[n])
    for n in BETAS:
        assert abs(errors[n]) < 0.10, (n, errors[n])
    for n in spec.names:
        rel = result.std[n] / result.values[n]
        if n in LEAKS:
            assert rel > 0.2, (n, rel)
        else:
            assert rel < 0.01, (n, rel)
    assert result.cost < result.cost0 / 20
    assert result.cost_history[0] == result.cost0
    assert result.jacobian.shape == (result.residuals.size, len(spec))
    assert np.all(np.diag(result.covariance) > 0)


def test_identified_plant_predicts_the_validation_log_better(result, nominal, truth):
    """Segment-wise prediction of 6 s of the validation log (a different motion): pressure and
    position RMSE lower with the identified parameters than with the nominal ones, and close to
    what the TRUE plant achieves (the pressure sensor noise, 0.3 bar, is the floor)."""
    cols, _ = _columns(DATA / "synthetic_crane_validation.parquet")
    opts = {"t_start": 1.0, "t_end": 7.0}
    nom = predict(nominal, cols, **opts)
    with backend_compiles() as compiled:
        fitted = predict(result.plant, cols, **opts)
    # the nominal's program serves the fitted plant: `plant_with` makes its leaves strongly
    # typed, the file's plant holds weakly typed ones (`output_error.strong_types`)
    assert not compiled
    print("\nvalidation RMSE (bar / mrad): nominal -> identified")
    for c in nom["rmse"]:
        k = 1e-5 if c.startswith("p_") else 1e3
        print(f"  {c:9s} {k * nom['rmse'][c]:.3f} -> {k * fitted['rmse'][c]:.3f}")
    for c in ("p_a_lift", "p_b_lift", "p_a_tilt", "p_b_tilt"):
        assert fitted["rmse"][c] < 0.8 * nom["rmse"][c], c
        assert fitted["rmse"][c] > 0.2e5  # not below the sensor noise: nothing was fitted here
    for c in ("q1", "q2"):
        assert fitted["rmse"][c] < nom["rmse"][c], c


def test_replay_drift_std_is_the_spread_of_replays_of_sampled_parameters(result, spec):
    """`drift`: the replay's sensitivity G = dy/dtheta (forward mode) equals central
    differences of free-run replays, and the delta-method std sqrt(diag(G Sigma G^T)) equals
    the spread of free runs of 48 plants drawn from N(theta, Sigma), the fit's covariance
    (leakage left out: nearly undetermined, it is not in the linear regime), within the
    sampling error of a std from 48 draws (~10 %), at every 100th sample of 2 s of the
    validation log."""
    from jaxmb.identification import drift
    from jaxmb.identification.output_error import free_run_segment

    cols, _ = _columns(DATA / "synthetic_crane_validation.parquet")
    base = result.plant  # theta = 0 is the fitted plant
    spec_v = HydraulicParameters(VALVES + BETAS)
    k = [spec.names.index(n) for n in spec_v.names]
    cov = result.covariance[np.ix_(k, k)]
    seg = free_run_segment(base, cols, t_end=2.0)
    theta = jnp.zeros(len(spec_v))
    keep = np.asarray(seg.weights[0]) > 0  # the replay's samples after its measured start
    G = np.asarray(drift.replay_sensitivity(theta, base, spec_v, seg))[keep]

    def run(th):  # the free run, compiled once for every plant (`predict`)
        y = predict(plant_with(th, base, spec_v), cols, mode="free", stride=1, t_end=2.0)
        return np.stack([y["predicted"][c] for c in seg.signal_names], axis=-1)

    eps = 1e-5
    for j in (0, 8):
        e = eps * np.eye(len(spec_v))[j]
        fd = (run(theta + e) - run(theta - e)) / (2 * eps)
        np.testing.assert_allclose(G[..., j], fd, atol=1e-6 * np.abs(G[..., j]).max())
    # what `expected_rmse` uses: the same G from the replay cut into two pieces of 1 s,
    # chained once their gaps are closed (measured: equal to 1e-14 of each column's largest)
    span = {k: v[cols["t"] <= cols["t"][0] + 2.0 + 1e-9] for k, v in cols.items()}
    t_c, G_c = drift.chained_sensitivity(theta, base, spec_v, span, np.asarray(seg.scale))
    t_all = np.asarray(seg.ts[0])[keep]
    at = np.searchsorted(t_all, t_c)
    assert t_c.size == 200 and np.allclose(t_all[at], t_c)  # every 10th sample after the start
    column = np.abs(G).max(axis=(0, 1))  # each parameter's largest
    assert np.all(np.abs(G_c - G[at]).max(axis=(0, 1)) <= 1e-6 * column)
    std = drift.replay_std(G, cov)[::100]
    draws = np.random.default_rng(0).multivariate_normal(np.zeros(len(k)), cov, size=48)
    spread = np.std(np.stack([run(jnp.asarray(d)) for d in draws]), axis=0, ddof=1)[::100]
    later = slice(2, None)  # from 0.2 s: the start state is measured, the spread starts at 0
    assert np.all(std[later] > 0)
    np.testing.assert_allclose(spread[later], std[later], rtol=0.3)
    assert np.median(np.abs(spread[later] / std[later] - 1)) < 0.12


def test_lugre_coulomb_levels_by_output_error():
    """LuGre friction (a bristle state per cylinder, integrated by RK4 at 40 us because the
    bristle equation is stiff at speed) from the SYNTHETIC LuGre log (nominal hydraulics, F_c
    1.5x nominal). From nominal (-33 %), the Coulomb levels come within 15 % of the TRUE
    values on 2 s of data (about 2-3 reported standard deviations) and the cost goes down.
    F_s, sigma2 and the bristle constants are not identifiable from this slow experiment
    (viscous force ~3 N at the speeds reached); see the report."""
    truth = json.loads((DATA / "synthetic_crane_truth.json").read_text())["lugre"]["parameters"]
    cols, side = _columns(DATA / "synthetic_crane_lugre.parquet")
    assert side["synthetic"] is True
    plant = lift_tilt_crane_plant(
        full=True, payload=side["conditions"]["payload_kg"], friction="lugre"
    )
    spec = HydraulicParameters(["friction.lift.F_c", "friction.tilt.F_c"])
    dt = 4e-5
    seg = make_segments(plant, cols, t_start=1.0, t_end=3.0, dt=dt)
    res = fit(plant, spec, seg, dt=dt, max_evaluations=12)
    print(f"\nLuGre fit: {res.n_evaluations} evaluations, {res.wall_time:.1f} s")
    for n in spec.names:
        err = res.values[n] / truth[n] - 1
        print(f"  {n}: err {100 * err:+.1f} %, std {100 * res.std[n] / truth[n]:.1f} %")
        assert abs(err) < 0.15, (n, err)
    assert res.cost < res.cost0


_SHARDED = """
import sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import numpy as np
from jaxmb.identification.hydraulic_route import log_columns
from jaxmb.io.params_file import apply_hydraulics
from jaxmb.io.logs import read_log
from jaxmb.identification.output_error import make_segments, residuals_and_jacobian
from jaxmb.identification.output_error import HydraulicParameters, with_block
from jaxmb.models.crane import lift_tilt_crane_plant
log, out, payload, theta, names = sys.argv[1:]
assert len(jax.local_devices()) == 2
plant = lift_tilt_crane_plant(full=True, payload=float(payload))
seg = make_segments(plant, log_columns(read_log(log)), t_start=1.0, t_end=3.5)
spec = HydraulicParameters(names.split(","))
theta = jnp.asarray([float(x) for x in theta.split(",")])
# under the caller's own jit too: the blocks' rows are joined by jnp, not on the host
r, J = jax.jit(lambda t: residuals_and_jacobian(t, plant, spec, with_block(seg, 3)))(theta)
np.savez(out, r=r, J=J)
"""


def test_segments_shared_over_devices_give_the_same_residuals_and_jacobian(
    nominal, excitation, tmp_path
):
    """With two XLA devices (what the CLI makes of a 2-core CPU) each device simulates its
    share of the segments (`output_error.per_device`, `jax.shard_map`). The five segments run
    in calls of three (`with_block`, as a noise-weighted fit runs them), inside a jit of the
    caller's: the second call is padded to three with a copy that weighs nothing, and each
    call's three to four for the two devices. Residuals and Jacobian equal the one-device,
    one-call run's to round-off."""
    import os
    import subprocess
    import sys

    spec = HydraulicParameters(VALVES[:4] + BETAS[:1])
    theta = np.random.default_rng(2).uniform(-0.1, 0.1, len(spec))
    seg = make_segments(nominal, excitation[0], t_start=1.0, t_end=3.5)
    assert seg.ts.shape[0] == 5
    r, J = residuals_and_jacobian(jnp.asarray(theta), nominal, spec, seg)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    out = tmp_path / "sharded.npz"
    argv = [sys.executable, "-c", _SHARDED, str(DATA / "synthetic_crane_excitation.parquet"),
            str(out), str(excitation[1]["conditions"]["payload_kg"]),
            ",".join(repr(float(x)) for x in theta), ",".join(spec.names)]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.load(out)
    assert got["r"].shape == r.shape and got["J"].shape == J.shape
    assert np.abs(np.asarray(J)).max() > 0
    np.testing.assert_allclose(got["r"], r, rtol=0, atol=1e-9 * np.abs(r).max())
    np.testing.assert_allclose(got["J"], J, rtol=0, atol=1e-9 * np.abs(J).max())


def test_start_states_are_recovered_from_the_samples_after_them(result, segments, excitation):
    """`start_states`: targets made by the fitted plant itself (every sample of the first 0.1 s
    after each segment's start, from the measured start states), the start states then moved
    off by about ten times their measurement error: the estimator brings them back (positions
    to 1e-8 rad, velocities to 1e-6 rad/s, pressures to 0.1 Pa) in its four damped
    Gauss-Newton steps."""
    import equinox as eqx

    from jaxmb.identification.output_error import simulate_segments
    from jaxmb.identification.start_states import estimate_start_states, head_segments

    plant = result.plant
    heads = head_segments(plant, excitation[0], segments)
    assert heads.ts.shape == (segments.ts.shape[0], 101)
    np.testing.assert_array_equal(heads.ts[:, 0], segments.ts[:, 0])
    np.testing.assert_allclose(np.diff(np.asarray(heads.ts), axis=1), 1e-3, rtol=1e-6)
    y = simulate_segments(plant, heads)
    K, n = segments.q0.shape
    y = y.at[:, 0].set(jnp.concatenate([segments.q0, segments.p0.reshape(K, -1)], 1))
    clean = eqx.tree_at(lambda s: s.targets, heads, y)
    rng = np.random.default_rng(2)
    moved = eqx.tree_at(
        lambda s: (s.q0, s.qd0, s.p0), segments,
        (segments.q0 + rng.normal(0, 3e-4, (K, n)), segments.qd0 + rng.normal(0, 5e-3, (K, n)),
         segments.p0 + rng.normal(0, 1e5, segments.p0.shape)),
    )  # fmt: skip
    got = estimate_start_states(plant, clean, moved)
    np.testing.assert_allclose(got.q0, segments.q0, rtol=0, atol=1e-8)
    np.testing.assert_allclose(got.qd0, segments.qd0, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got.p0, segments.p0, rtol=0, atol=0.1)
    np.testing.assert_array_equal(got.targets, moved.targets)  # only the start states change
