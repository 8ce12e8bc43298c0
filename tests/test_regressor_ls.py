"""Regressor with drive/friction terms, base parameters (Gautier 1990) and least-squares
statistics, checked against inverse dynamics, the closed-form base parameters of a planar 2R arm
(Khalil & Dombre, "Modeling, identification and control of robots", Section 12.5: ZZ1R = ZZ1 +
L1^2 M2, MX1R = MX1 + L1 M2) and Monte Carlo over noise realisations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmb
from jaxmb.identification import least_squares as ls
from jaxmb.identification import regressor as rg

L1 = 0.7
TERMS = ("armature", "viscous", "coulomb", "offset")


@pytest.fixture(scope="module")
def planar2r():
    """Two revolute joints about parallel y axes, gravity -z: a vertical-plane 2R arm."""
    frames = [
        jaxmb.Frame("F1", joint="revolute", axis=[0, 1, 0], coordinate="q1"),
        jaxmb.Frame("F2", "F1", translation=[L1, 0, 0], joint="revolute", axis=[0, 1, 0],
                    coordinate="q2"),
    ]  # fmt: skip
    I = jnp.diag(jnp.array([0.06, 0.3, 0.25]))
    bodies = [
        jaxmb.Body("link1", "F1", 4.0, [0.3, 0.01, 0.02], I),
        jaxmb.Body("link2", "F2", 2.5, [0.25, -0.02, 0.01], 0.5 * I),
    ]
    return jaxmb.Model(frames, bodies)


def _states(n, N, seed):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-2, 2, (N, n)), rng.uniform(-2, 2, (N, n)), rng.uniform(-5, 5, (N, n)))


def test_full_regressor_is_inverse_dynamics_plus_drive_terms():
    model = jaxmb.models.serial_chain(3, seed=4)
    values = {c: {"armature": 0.1 * (i + 1), "viscous": 2.0, "coulomb": 1.5, "offset": -0.3}
              for i, c in enumerate(model.coordinate_names)}  # fmt: skip
    pi = rg.standard_parameters(model, TERMS, values)
    names = rg.parameter_names(model, TERMS)
    assert len(names) == pi.shape[0] == 10 * len(model.bodies) + 4 * model.n
    for q, qd, qdd in zip(*_states(model.n, 5, 0), strict=True):
        Y = rg.full_regressor(model, q, qd, qdd, TERMS, coulomb_width=0.01)
        Ia = np.array([values[c]["armature"] for c in model.coordinate_names])
        drive = Ia * qdd + 2.0 * qd + 1.5 * np.tanh(qd / 0.01) - 0.3
        expect = jaxmb.inverse_dynamics(model, q, qd, qdd) + drive
        np.testing.assert_allclose(Y @ pi, expect, rtol=1e-11, atol=1e-10)


def test_stribeck_column():
    qd = jnp.array([0.05, -0.3])
    B = rg.joint_term_columns(qd, jnp.zeros(2), ("stribeck",), coulomb_width=1e-3,
                              stribeck_velocity=0.1)  # fmt: skip
    np.testing.assert_allclose(np.diag(B), np.sign(qd) * np.exp(-((qd / 0.1) ** 2)), rtol=1e-6)


def test_base_parameters_of_planar_2r(planar2r):
    model = planar2r
    names = rg.parameter_names(model)
    W = np.asarray(rg.stacked_regressor(model, *_states(2, 200, 1))).reshape(-1, len(names))
    base = rg.base_parameters(W, names)
    # Khalil & Dombre: a 2R arm with parallel axes in a vertical plane has 6 base parameters
    # (ZZ1R, MX1R, MY1R... of link 1 and ZZ2, MX2, MY2 of link 2 in the xz-plane convention).
    assert base.rank == 6
    # the data are reproduced by the base parameters alone, for any standard parameters
    pi = np.random.default_rng(2).normal(size=len(names))
    W2 = np.asarray(rg.stacked_regressor(model, *_states(2, 50, 3))).reshape(-1, len(names))
    np.testing.assert_allclose(base.reduce(W2) @ base.project(pi), W2 @ pi, rtol=1e-9, atol=1e-9)
    # the closed-form regrouping: adding d to m2 while removing L1^2 d from link1's I_yy (the
    # joint axis) and L1 d from its m c_x changes no torque, so it changes no base parameter
    d = np.zeros(len(names))
    d[names.index("link2.m")] = 1.0
    d[names.index("link1.Iyy")] = -(L1**2)
    d[names.index("link1.mcx")] = -L1
    np.testing.assert_allclose(base.project(d), 0.0, atol=1e-9)
    # ... while each of those alone matters
    for p in ("link2.m", "link1.Iyy", "link1.mcx"):
        e = np.zeros(len(names))
        e[names.index(p)] = 1.0
        assert np.abs(base.project(e)).max() > 0.1
    # motion about y never shows I_xx, I_zz, I_xy, I_yz or m c_y of either link
    for b in ("link1", "link2"):
        for p in ("Ixx", "Izz", "Ixy", "Iyz", "mcy"):
            assert f"{b}.{p}" in base.unidentifiable
    assert len(base.expressions()) == 6


def test_least_squares_statistics_match_monte_carlo():
    rng = np.random.default_rng(5)
    m, r = 400, 4
    W = rng.normal(size=(m, r)) * np.array([1.0, 10.0, 0.1, 3.0])
    theta = np.array([1.0, -2.0, 30.0, 0.5])
    sigma = np.where(np.arange(m) % 2 == 0, 0.05, 0.5)  # two joints, different noise levels
    groups = np.arange(m) % 2
    ols, wls = [], []
    for _ in range(300):
        y = W @ theta + sigma * rng.normal(size=m)
        ols.append(ls.least_squares(W, y))
        wls.append(ls.least_squares(W, y, groups=groups))
    est_w = np.array([f.theta for f in wls])
    est_o = np.array([f.theta for f in ols])
    # unbiased, and the predicted standard deviations are the observed spread (within 15 %)
    assert (np.abs(est_w.mean(0) - theta) < 4 * est_w.std(0) / np.sqrt(300)).all()
    np.testing.assert_allclose(np.mean([f.std for f in wls], 0), est_w.std(0), rtol=0.15)
    # the estimated noise levels are the true ones, and weighting beats OLS
    np.testing.assert_allclose(np.mean([f.row_sigma for f in wls], 0), [0.05, 0.5], rtol=0.05)
    assert (est_w.std(0) < est_o.std(0)).all()
    # 95 % intervals cover the truth about 95 % of the time
    cover = np.mean([((f.interval(0.95)[:, 0] <= theta) & (theta <= f.interval(0.95)[:, 1]))
                     for f in wls], axis=0)  # fmt: skip
    assert (cover > 0.9).all() and (cover < 0.99).all()


def test_least_squares_refuses_bad_input():
    W = np.ones((10, 2))
    with pytest.raises(ValueError, match="rank 1 < 2"):
        ls.least_squares(W, np.ones(10))
    with pytest.raises(ValueError, match="too few equations"):
        ls.least_squares(np.eye(2), np.ones(2))
    W = np.random.default_rng(0).normal(size=(10, 2))
    y = np.ones(10)
    y[3] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        ls.least_squares(W, y)


def test_weak_directions_name_the_culprits():
    rng = np.random.default_rng(0)
    a = rng.normal(size=100)
    A = np.stack([a, 2 * a + 1e-9 * rng.normal(size=100), rng.normal(size=100)], axis=1)
    weak = ls.weak_directions(A, ("p0", "p1", "p2"))
    assert len(weak) == 1 and set(list(weak[0]["parameters"])[:2]) == {"p0", "p1"}


def _box_optimum(A, y, lower, upper):
    """The least-squares optimum of ``A theta - y`` in a box, by enumerating which parameters
    sit on which bound (each pattern's free parameters by numpy's ``lstsq``; the best
    feasible one wins): a reference independent of scipy's solvers, for a few parameters."""
    import itertools

    best, best_cost = None, np.inf
    for pattern in itertools.product((None, "lower", "upper"), repeat=A.shape[1]):
        th = np.array([{"lower": lo, "upper": up}.get(k, 0.0)
                       for k, lo, up in zip(pattern, lower, upper, strict=True)])  # fmt: skip
        if not np.all(np.isfinite(th)):
            continue
        free = np.array([k is None for k in pattern])
        if free.any():
            th[free] = np.linalg.lstsq(A[:, free], y - A[:, ~free] @ th[~free], rcond=None)[0]
        c = 0.5 * float(np.sum((A @ th - y) ** 2))
        if np.all(th >= lower - 1e-12) and np.all(th <= upper + 1e-12) and c < best_cost:
            best, best_cost = th, c
    return best


def test_model_decrease_is_what_the_best_step_achieves_on_a_linear_problem():
    """For linear residuals ``r = A theta - y`` the Gauss-Newton model is exact, so the model
    decrease is the cost minus the box's least-squares optimum's (`_box_optimum`, by
    enumeration): without bounds, with a parameter on the bound the descent pushes against,
    and where a parameter on a bound gains by moving inward once the others are refitted
    (a test of the gradient's sign at the current point alone would call that converged)."""
    rng = np.random.default_rng(3)
    A = rng.normal(size=(50, 3))
    y = A @ np.array([2.0, -1.0, 0.5]) + 0.1 * rng.normal(size=50)

    def decrease_is_exact(A, y, theta, lower, upper):
        cost = 0.5 * float(np.sum((A @ theta - y) ** 2))
        best = _box_optimum(A, y, lower, upper)
        want = cost - 0.5 * float(np.sum((A @ best - y) ** 2))
        got = ls.model_decrease(A @ theta - y, A, theta, lower, upper)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-15 * cost), (got, want)

    inf = np.full(3, np.inf)
    decrease_is_exact(A, y, np.zeros(3), -inf, inf)
    # theta_0 on an upper bound of 0, below its optimum (2): it stays there
    upper = np.array([0.0, np.inf, np.inf])
    decrease_is_exact(A, y, np.zeros(3), -inf, upper)
    # theta_0 on its upper bound with the gradient pushing it out, yet the box's optimum
    # moves it to its lower bound: the columns nearly collinear
    A2 = np.array([[1.0, 1.0], [0.01, 0.0], [0.0, 0.0]])
    y2 = -np.array([-1e-3, 0.0999, 5.0])
    lo2, hi2 = np.array([-1.0, -10.0]), np.array([0.0, 10.0])
    decrease_is_exact(A2, y2, np.zeros(2), lo2, hi2)
    assert ls.model_decrease(-y2, A2, np.zeros(2), lo2, hi2) > 1e-4  # 9.5e-4, not 5e-7
    # at the optimum nothing is left
    best = np.linalg.lstsq(A, y, rcond=None)[0]
    assert abs(ls.model_decrease(A @ best - y, A, best, -inf, inf)) < 1e-12


def test_stacked_regressor_is_jittable_and_batched(planar2r):
    Q, Qd, Qdd = (jnp.asarray(x) for x in _states(2, 7, 9))
    W = rg.stacked_regressor(planar2r, Q, Qd, Qdd, TERMS)
    one = jax.jit(lambda q, qd, qdd: rg.full_regressor(planar2r, q, qd, qdd, TERMS))
    np.testing.assert_allclose(W[3], one(Q[3], Qd[3], Qdd[3]), rtol=1e-13)
    with pytest.raises(ValueError, match="Q: expected shape"):
        rg.stacked_regressor(planar2r, Q[:, :1], Qd[:, :1], Qdd[:, :1])
    with pytest.raises(ValueError, match="terms: expected names"):
        rg.parameter_names(planar2r, ("damping",))
