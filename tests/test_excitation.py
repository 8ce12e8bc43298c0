"""Excitation design (Swevers et al. (1997) Fourier trajectories, Gautier & Khalil (1992) condition
criterion), checked against: the series written out term by term, autodiff of q(t) (jacfwd),
central differences of the cost, the condition number recomputed with numpy from the lead's
stacked regressor, limits checked on a fine grid directly, and the crane's piston positions from
its full model's loop-closure coordinates (s - l_min, an independent geometric route)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmb
from jaxmb.identification import excitation as ex
from jaxmb.identification import regressor as rg
from jaxmb.models import crane

TERMS = ("viscous", "coulomb")
ARM_LIMITS = dict(q_min=[-0.8, 0.05, 0.02], q_max=[0.8, 0.65, 0.18],
                  qd_max=[1.0, 0.6, 0.1], qdd_max=[2.0, 1.5, 0.3])  # fmt: skip
PERIOD = 10.0


def _random_traj(seed, n=3, L=4, w_f=0.7):
    rng = np.random.default_rng(seed)
    return ex.FourierTrajectory(rng.normal(size=n), rng.normal(size=(n, L)),
                                rng.normal(size=(n, L)), w_f)  # fmt: skip


def _series_by_hand(traj, t):
    """The Fourier series of Swevers et al. (1997) written out term by term (numpy loops)."""
    q0, a, b, w = (np.asarray(traj.q0), np.asarray(traj.a), np.asarray(traj.b), traj.w_f)
    q = q0.copy()
    for i in range(a.shape[0]):
        for ll in range(1, a.shape[1] + 1):
            q[i] += (a[i, ll - 1] * np.sin(w * ll * t) - b[i, ll - 1] * np.cos(w * ll * t)) / (
                w * ll
            )
    return q


def _scaled_log_cond(model, traj, columns, ts):
    """log cond of the column-normalised base regressor via the lead's `stacked_regressor` and
    numpy's cond (shares only `full_regressor` with the code under test)."""
    Q, Qd, Qdd = (np.asarray(x) for x in traj.sample(ts))
    Y = np.asarray(rg.stacked_regressor(model, Q, Qd, Qdd, TERMS))
    W = Y.reshape(-1, Y.shape[-1])
    Wb = W[:, list(columns)]
    return np.log(np.linalg.cond(Wb / np.linalg.norm(Wb, axis=0)))


@pytest.fixture(scope="module")
def arm():
    return jaxmb.models.series_parallel_3dof()


@pytest.fixture(scope="module")
def arm_limits():
    return ex.ExcitationLimits(**ARM_LIMITS)


@pytest.fixture(scope="module")
def arm_result(arm, arm_limits):
    return ex.optimise_excitation(arm, period=PERIOD, harmonics=3, limits=arm_limits,
                                  key=jax.random.key(0), terms=TERMS, steps=300,
                                  n_samples=100)  # fmt: skip


@pytest.mark.parametrize("seed", range(3))
def test_series_and_analytic_derivatives(seed):
    traj = _random_traj(seed)
    for t in np.random.default_rng(seed).uniform(-5, 20, 4):
        q, qd, qdd = traj(t)
        np.testing.assert_allclose(q, _series_by_hand(traj, t), rtol=1e-12, atol=1e-12)
        # derivatives by autodiff of q(t) and of qd(t): float64 agreement to round-off
        np.testing.assert_allclose(qd, jax.jacfwd(lambda s: traj(s)[0])(t), atol=1e-12)
        np.testing.assert_allclose(qdd, jax.jacfwd(lambda s: traj(s)[1])(t), atol=1e-12)


def test_periodic_with_mean_q0():
    traj = _random_traj(7)
    ts = np.linspace(0, traj.period, 64, endpoint=False)
    for x, y in zip(traj.sample(ts), traj.sample(ts + traj.period), strict=True):
        np.testing.assert_allclose(x, y, atol=1e-11)  # round-off of sin at ~10 rad arguments
    # the harmonics average to zero over one period (uniform grid is exact for L < 64)
    np.testing.assert_allclose(traj.sample(ts)[0].mean(axis=0), traj.q0, atol=1e-12)


def test_at_rest_projection():
    traj = _random_traj(3)
    rest = traj.at_rest()
    for t in (0.0, rest.period):
        _, qd, qdd = rest(t)
        np.testing.assert_allclose(qd, 0, atol=1e-12)
        np.testing.assert_allclose(qdd, 0, atol=1e-12)
    # an orthogonal projection: idempotent, and the removed part lies along the normals
    np.testing.assert_allclose(rest.at_rest().a, rest.a, atol=1e-14)
    ell = np.arange(1, traj.harmonics + 1)
    da, db = np.asarray(traj.a - rest.a), np.asarray(traj.b - rest.b)
    np.testing.assert_allclose(da, da[:, :1] * np.ones_like(ell)[None, :], atol=1e-14)
    np.testing.assert_allclose(db, (db[:, :1] * ell[None, :]), atol=1e-14)
    with pytest.raises(ValueError, match="harmonics >= 2"):
        _random_traj(0, L=1).at_rest()


def test_cost_is_log_cond_and_gradient_matches_fd(arm, arm_limits):
    columns = ex.base_columns(arm, arm_limits, jax.random.key(3), TERMS)
    ts = np.linspace(0, PERIOD, 40, endpoint=False)
    rng = np.random.default_rng(1)
    traj = ex.FourierTrajectory([0.1, 0.35, 0.1], 0.05 * rng.normal(size=(3, 2)),
                                0.05 * rng.normal(size=(3, 2)), 2 * np.pi / PERIOD)  # fmt: skip
    # the base columns are independent (full column rank) and span the full regressor
    Q, Qd, Qdd = (np.asarray(x) for x in traj.sample(ts))
    W = np.asarray(rg.stacked_regressor(arm, Q, Qd, Qdd, TERMS)).reshape(len(ts) * 3, -1)
    assert np.linalg.matrix_rank(W[:, list(columns)]) == len(columns) == np.linalg.matrix_rank(W)

    # one compiled function gives the value, the gradient and the finite differences
    value_and_grad = jax.jit(jax.value_and_grad(
        lambda tr: ex.excitation_cost(tr, arm, columns, ts, TERMS)))  # fmt: skip
    value, grad = value_and_grad(traj)
    np.testing.assert_allclose(value, _scaled_log_cond(arm, traj, columns, ts), rtol=1e-9)

    def cost(tr):
        return value_and_grad(tr)[0]

    d = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape)), traj)
    h = 1e-6
    fd = (cost(jax.tree.map(lambda x, v: x + h * v, traj, d))
          - cost(jax.tree.map(lambda x, v: x - h * v, traj, d))) / (2 * h)  # fmt: skip
    directional = sum(jnp.vdot(g, v) for g, v in zip(jax.tree.leaves(grad), jax.tree.leaves(d),
                                                      strict=True))  # fmt: skip
    np.testing.assert_allclose(directional, fd, rtol=1e-6)  # central differences, h = 1e-6


def test_arm_condition_improves_within_limits(arm, arm_result):
    res = arm_result
    ts = np.arange(100) * PERIOD / 100
    before = np.exp(_scaled_log_cond(arm, res.initial, res.columns, ts))
    after = np.exp(_scaled_log_cond(arm, res.trajectory, res.columns, ts))
    np.testing.assert_allclose([res.condition_initial, res.condition], [before, after], rtol=1e-8)
    assert after < before / 5, (before, after)  # stated factor: at least 5x better conditioned
    assert res.cost_history[-1] < res.cost_history[0]
    # limits on a fine grid (5000 points per period), straight from the trajectory
    tab = res.to_table(PERIOD / 5000)
    lim = {k: np.asarray(v) for k, v in ARM_LIMITS.items()}
    assert (tab["q"] >= lim["q_min"]).all() and (tab["q"] <= lim["q_max"]).all()
    assert (np.abs(tab["qd"]) <= lim["qd_max"]).all()
    assert (np.abs(tab["qdd"]) <= lim["qdd_max"]).all()
    assert res.feasible and res.max_violation <= 0


def test_to_table(arm_result):
    tab = arm_result.to_table(0.01, periods=2)
    assert tab["t"].shape == (2001,) and tab["q"].shape == (2001, 3)
    np.testing.assert_allclose(np.diff(tab["t"]), 0.01, rtol=1e-9)
    for k in ("q", "qd", "qdd"):
        np.testing.assert_allclose(tab[k][-1], tab[k][0], atol=1e-10)  # end equals start
        np.testing.assert_allclose(tab[k][1000], tab[k][0], atol=1e-10)  # one period
    with pytest.raises(ValueError, match="dt"):
        arm_result.to_table(0.0)


@pytest.fixture(scope="module")
def crane_runs():
    """The crane with a 0.2 m stroke margin on both cylinders, which narrows the band that the
    working range allows, optimised with and without the stroke constraints (same key)."""
    model = crane.lift_tilt_crane()
    plant = crane.lift_tilt_crane_plant(full=False)
    g = ex.cylinder_stroke_constraints(plant, margin=0.2)
    (lo1, hi1), (lo2, hi2) = crane.WORKING_RANGE["q1"], crane.WORKING_RANGE["q2"]
    limits = ex.ExcitationLimits([lo1, lo2], [hi1, hi2], [0.5, 0.5], [1.0, 1.0])
    kw = dict(period=8.0, harmonics=3, limits=limits, key=jax.random.key(1), terms=TERMS,
              steps=200, n_samples=80, rest=True, q0=[0.5, 0.0])  # fmt: skip
    return (ex.optimise_excitation(model, extra_constraints=g, **kw),
            ex.optimise_excitation(model, **kw))  # fmt: skip


def _pistons(Q):
    """Piston positions from the full crane's loop closure: x = s - l_min (the cylinder loops)."""
    loops = crane.lift_tilt_crane(full=True).coordinate_map
    qhat = np.asarray(jax.vmap(loops)(jnp.asarray(Q)))
    return qhat[:, [3, 5]] - np.array([crane.CYLINDERS[c]["l_min"] for c in ("lift", "tilt")])


def test_crane_strokes_held(crane_runs):
    constrained, free = crane_runs
    stroke = np.array([crane.CYLINDERS[c]["stroke"] for c in ("lift", "tilt")])
    margin = 0.2
    x = _pistons(constrained.to_table(8.0 / 4000)["q"])
    assert (x >= margin).all() and (x <= stroke - margin).all(), (x.min(0), x.max(0))
    assert constrained.feasible and constrained.condition < constrained.condition_initial / 3
    # without the constraint the optimum leaves the band: the constraint did the work
    x_free = _pistons(free.to_table(8.0 / 4000)["q"])
    assert (x_free < margin - 0.05).any() or (x_free > stroke - margin + 0.05).any()
    for res in crane_runs:  # rest=True: starts and ends at rest
        tab = res.to_table(0.01)
        for k in ("qd", "qdd"):
            np.testing.assert_allclose(tab[k][[0, -1]], 0, atol=1e-12)


def test_restore_feasibility_closed_form(arm_limits):
    """q - q0, qd and qdd all scale linearly with the amplitude, so the largest feasible scale
    of a trajectory centred at mid-range is 1 / (its largest use of any limit)."""
    mid = 0.5 * (arm_limits.q_min + arm_limits.q_max)
    rng = np.random.default_rng(5)
    traj = ex.FourierTrajectory(mid, 2.0 * rng.normal(size=(3, 3)), 2.0 * rng.normal(size=(3, 3)),
                                2 * np.pi / PERIOD)  # fmt: skip
    ts = np.arange(2000) * PERIOD / 2000
    Q, Qd, Qdd = (np.asarray(x) for x in traj.sample(ts))
    lim = {k: np.asarray(v) for k, v in ARM_LIMITS.items()}
    use = max(np.max(np.abs(Q - np.asarray(mid)) / (0.5 * (lim["q_max"] - lim["q_min"]))),
              np.max(np.abs(Qd) / lim["qd_max"]), np.max(np.abs(Qdd) / lim["qdd_max"]))  # fmt: skip
    assert use > 1  # infeasible as given
    fixed, scale, v = ex.restore_feasibility(traj, arm_limits, ts)
    np.testing.assert_allclose(scale, 1 / use, rtol=1e-9)  # 40 bisection halvings
    assert v <= 0 and v > -1e-9  # on the boundary
    np.testing.assert_allclose(fixed.a, scale * traj.a, rtol=1e-15)


def test_bad_input():
    with pytest.raises(ValueError, match="q_max must exceed q_min"):
        ex.ExcitationLimits([0.0], [-1.0], [1.0], [1.0])
    with pytest.raises(ValueError, match="qd_max must be > 0"):
        ex.ExcitationLimits([0.0], [1.0], [0.0], [1.0])
    with pytest.raises(ValueError, match="b must have shape"):
        ex.FourierTrajectory(np.zeros(2), np.zeros((2, 3)), np.zeros((3, 3)), 1.0)
    with pytest.raises(ValueError, match="w_f"):
        ex.FourierTrajectory(np.zeros(2), np.zeros((2, 3)), np.zeros((2, 3)), -1.0)
    model = crane.lift_tilt_crane()
    limits = ex.ExcitationLimits([-0.4, -0.75], [1.4, 0.65], [0.5, 0.5], [1.0, 1.0])
    g = ex.cylinder_stroke_constraints(crane.lift_tilt_crane_plant(full=False), margin=0.2)
    with pytest.raises(ValueError, match="q0: violates extra_constraints"):
        ex.optimise_excitation(model, period=8.0, harmonics=2, limits=limits,
                               key=jax.random.key(0), extra_constraints=g, q0=[-0.3, 0.0])  # fmt: skip
