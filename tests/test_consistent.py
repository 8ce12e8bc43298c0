"""Physically consistent inertial parameters (identification/consistent.py).

References that share no code with the module: point-mass bodies (pseudo-inertia by its
integral definition), exact rational arithmetic (`fractions.Fraction`) for the triangle
inequalities, NumPy's inverse and slogdet for the divergence, central finite differences, and
synthetic data with known ground truth for the fits."""

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import jaxmb
from jaxmb.identification import consistent as C
from jaxmb.identification.consistent import (
    bregman_divergence,
    fit_consistent,
    is_physically_consistent,
    log_cholesky_to_parameters,
    parameters_from_pseudo_inertia,
    parameters_to_log_cholesky,
    pseudo_inertia,
)


def _parameters(m, c, I_C):
    """Pinocchio-order pi from mass, COM and COM inertia, by the parallel-axis theorem."""
    I = I_C + m * (c @ c * np.eye(3) - np.outer(c, c))
    return np.array([m, *(m * c), I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]])


def _random_bodies(rng, n):
    """Random physical bodies: mass 0.1-100 kg, COM within 1 m, principal moments of a box with
    random sides (triangle inequalities hold), rotated by a random rotation."""
    out = []
    for R in Rotation.random(n, random_state=rng).as_matrix():
        m = rng.uniform(0.1, 100.0)
        a, b, c = rng.uniform(0.01, 1.0, 3)
        I_C = R @ np.diag(m / 12 * np.array([b * b + c * c, a * a + c * c, a * a + b * b])) @ R.T
        out.append(_parameters(m, rng.uniform(-1, 1, 3), I_C))
    return np.array(out)


def _exactly_physical(p) -> bool:
    """m > 0 and the COM inertia satisfies the strict triangle inequalities, decided exactly in
    rational arithmetic on the float values of ``p``. In principal axes 2 Sigma_C,kk = I_i + I_j -
    I_k, so the inequalities say Sigma_C = tr(I_C)/2 1 - I_C is positive definite (Sylvester's
    leading minors). Everything is multiplied by m > 0 to stay polynomial."""
    p = [Fraction(float(x)) for x in p]
    m, h = p[0], p[1:4]
    I = [[p[4], p[5], p[7]], [p[5], p[6], p[8]], [p[7], p[8], p[9]]]
    if not m > 0:
        return False
    hh = sum(x * x for x in h)
    mIc = [[m * I[i][j] - (hh * (i == j) - h[i] * h[j]) for j in range(3)] for i in range(3)]
    tr = sum(mIc[i][i] for i in range(3))
    S = [[tr / 2 * (i == j) - mIc[i][j] for j in range(3)] for i in range(3)]
    minors = (
        S[0][0],
        S[0][0] * S[1][1] - S[0][1] * S[1][0],
        S[0][0] * (S[1][1] * S[2][2] - S[1][2] * S[2][1])
        - S[0][1] * (S[1][0] * S[2][2] - S[1][2] * S[2][0])
        + S[0][2] * (S[1][0] * S[2][1] - S[1][1] * S[2][0]),
    )
    return all(x > 0 for x in minors)


# ---------------------------------------------------------------- maps


def test_pseudo_inertia_is_the_second_moment_of_point_masses():
    """J = sum_k m_k [x_k; 1][x_k; 1]^T (Wensing et al. (2017) eq. (8)) for a cloud of point
    masses, whose pi comes from its own sums: I = sum_k m_k (|x_k|^2 1 - x_k x_k^T)."""
    rng = np.random.default_rng(0)
    for _ in range(3):
        mk, xk = rng.uniform(0.1, 2.0, 7), rng.normal(size=(7, 3))
        xh = np.concatenate([xk, np.ones((7, 1))], axis=1)
        J_ref = np.einsum("k,ki,kj->ij", mk, xh, xh)
        I = np.einsum("k,kij->ij", mk, np.einsum("ki,ki->k", xk, xk)[:, None, None] * np.eye(3))
        I -= np.einsum("k,ki,kj->ij", mk, xk, xk)
        h = mk @ xk
        pi = np.array([mk.sum(), *h, I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]])
        # 1e-12: float64 sums of a handful of O(1) terms
        np.testing.assert_allclose(pseudo_inertia(pi), J_ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(
            parameters_from_pseudo_inertia(J_ref), pi, rtol=1e-12, atol=1e-12
        )


def _assert_round_trip(pi):
    theta = parameters_to_log_cholesky(pi)
    back = np.asarray(log_cholesky_to_parameters(theta))
    # 1e-12 of each body's largest entry: a Cholesky factorisation and its product, in float64
    scale = np.abs(pi).max(axis=-1, keepdims=True)
    np.testing.assert_array_less(np.abs(back - pi), np.broadcast_to(1e-12 * scale, pi.shape))
    return theta


def test_round_trip_random_bodies():
    pi = _random_bodies(np.random.default_rng(1), 200)
    theta = _assert_round_trip(pi)
    # the convention of the module docstring: m = e^{2 alpha}, t = COM
    np.testing.assert_allclose(np.exp(2 * theta[:, 0]), pi[:, 0], rtol=1e-12)
    np.testing.assert_allclose(theta[:, 7:], pi[:, 1:4] / pi[:, :1], rtol=1e-10, atol=1e-12)


def test_round_trip_series_parallel_bodies(arm_full):
    pi = np.asarray(jaxmb.inertial_parameters(arm_full))
    assert pi.shape == (5, 10)
    _assert_round_trip(pi)
    # per-body maps vmap to the batched ones
    th = jax.vmap(parameters_to_log_cholesky)(jnp.asarray(pi)[:, None])[:, 0]
    np.testing.assert_allclose(th, parameters_to_log_cholesky(pi), rtol=1e-14, atol=1e-14)


def test_every_theta_is_physical():
    rng = np.random.default_rng(2)
    # standard normal draws, wide draws (masses e^{+-12}, COMs ~ 6 m) and hand-picked extremes
    extremes = np.array(
        [
            [8.0, -6.0, 5.0, 0.0, 20.0, -20.0, 30.0, 50.0, -50.0, 10.0],
            [-8.0, 4.0, -4.0, 6.0, 0.0, 1e3, -1e3, 1e-3, 0.0, 0.0],
            [0.0] * 10,
        ]
    )
    for theta in (rng.normal(size=(300, 10)), 3 * rng.normal(size=(300, 10)), extremes):
        pi = np.asarray(log_cholesky_to_parameters(theta))
        assert np.isfinite(pi).all()
        assert all(_exactly_physical(p) for p in pi)
    # and directly on the principal moments of the COM inertia for the moderate draws
    pi = np.asarray(log_cholesky_to_parameters(rng.normal(size=(300, 10))))
    m, c = pi[:, 0], pi[:, 1:4] / pi[:, :1]
    I_O = np.asarray(pseudo_inertia(pi))[:, :3, :3]
    I_O = np.trace(I_O, axis1=1, axis2=2)[:, None, None] * np.eye(3) - I_O
    I_C = I_O - m[:, None, None] * (
        np.einsum("bi,bi->b", c, c)[:, None, None] * np.eye(3) - np.einsum("bi,bj->bij", c, c)
    )
    lam = np.linalg.eigvalsh(I_C)  # ascending
    assert (m > 0).all() and (lam[:, 0] > 0).all()
    assert (lam[:, 0] + lam[:, 1] > lam[:, 2]).all()
    assert is_physically_consistent(pi).all()


def test_jacobian_matches_central_differences():
    theta = 0.5 * np.random.default_rng(3).normal(size=(3, 10))
    Jac = jax.jacfwd(log_cholesky_to_parameters)(jnp.asarray(theta))  # (3, 10, 3, 10)
    Jac_rev = jax.jacrev(log_cholesky_to_parameters)(jnp.asarray(theta))
    np.testing.assert_allclose(Jac, Jac_rev, rtol=1e-12, atol=1e-14)
    eps = 1e-6
    for b in range(3):
        for k in range(10):
            tp, tm = theta.copy(), theta.copy()
            tp[b, k] += eps
            tm[b, k] -= eps
            fd = (log_cholesky_to_parameters(tp) - log_cholesky_to_parameters(tm)) / (2 * eps)
            # 1e-7: central differences have O(eps^2) truncation and O(1e-16/eps) round-off
            np.testing.assert_allclose(Jac[:, :, b, k], fd, rtol=1e-7, atol=1e-8)


def test_non_physical_input_raises_naming_the_body():
    pi = _random_bodies(np.random.default_rng(4), 3)
    bad = pi.copy()
    bad[1, 4] = -1.0  # I_xx < 0 violates the triangle inequality I_yy + I_zz >= ... and more
    assert not _exactly_physical(bad[1])
    assert list(np.asarray(is_physically_consistent(bad))) == [True, False, True]
    with pytest.raises(ValueError, match="pi: body 1 is not physically consistent"):
        parameters_to_log_cholesky(bad)
    neg = pi.copy()
    neg[2, 0] = -neg[2, 0]
    with pytest.raises(ValueError, match="body 2"):
        parameters_to_log_cholesky(neg)
    assert not np.asarray(is_physically_consistent(neg))[2]
    # traced: a run-time error, or NaN inside failures_as_nan (as the commands trace), with no
    # raising check left in the program for the persistent cache to refuse
    from jaxmb.multibody.checks import failures_as_nan

    pair = jnp.asarray(np.stack([pi[:2], bad[:2]]))  # a consistent pair, one with body 1 not
    with pytest.raises(RuntimeError, match="not physically consistent"):
        jax.jit(parameters_to_log_cholesky)(bad)
    with failures_as_nan():
        th = jax.vmap(jax.jit(parameters_to_log_cholesky))(pair)
        jaxpr = str(jax.make_jaxpr(parameters_to_log_cholesky)(jnp.asarray(bad)))
    np.testing.assert_allclose(th[0], parameters_to_log_cholesky(pi[:2]), rtol=1e-12)
    assert np.isnan(th[1]).all() and "callback" not in jaxpr


# ---------------------------------------------------------------- divergence


def _divergence_ref(p, p0):
    J, J0 = np.asarray(pseudo_inertia(p)), np.asarray(pseudo_inertia(p0))
    A = np.linalg.solve(J0, J)
    sign, logdet = np.linalg.slogdet(A)
    assert sign > 0
    return -logdet + np.trace(A) - 4


def test_bregman_divergence():
    rng = np.random.default_rng(5)
    prior = _random_bodies(rng, 20)
    other = _random_bodies(rng, 20)
    d = np.asarray(bregman_divergence(other, prior))
    ref = np.array([_divergence_ref(p, p0) for p, p0 in zip(other, prior, strict=True)])
    np.testing.assert_allclose(d, ref, rtol=1e-9)  # 1e-9: ill-conditioned J of flat bodies
    assert (d > 0).all()
    # zero at the prior (to round-off) and stationary there, in pi and in theta
    np.testing.assert_allclose(bregman_divergence(prior, prior), 0.0, atol=1e-12)
    g = jax.grad(lambda p: bregman_divergence(p, prior).sum())(jnp.asarray(prior))
    gscale = np.abs(jax.grad(lambda p: bregman_divergence(p, prior).sum())(jnp.asarray(other)))
    assert np.abs(g).max() < 1e-9 * gscale.max()
    # small perturbations: positive, and second order in the perturbation
    theta0 = parameters_to_log_cholesky(prior)
    dirn = rng.normal(size=theta0.shape)
    d1 = bregman_divergence(log_cholesky_to_parameters(theta0 + 1e-3 * dirn), prior)
    d2 = bregman_divergence(log_cholesky_to_parameters(theta0 + 2e-3 * dirn), prior)
    assert (d1 > 0).all()
    np.testing.assert_allclose(d2 / d1, 4.0, rtol=1e-2)


def test_divergence_residuals_are_its_square_root():
    """The least-squares form used by the fit: ||r_b||^2 = d(J_b || J0_b) exactly, smooth at the
    prior (the series branch) and away from it."""
    rng = np.random.default_rng(6)
    prior = _random_bodies(rng, 10)
    theta0 = parameters_to_log_cholesky(prior)
    for scale in (1e-5, 1e-2, 0.5, 2.0):
        theta = theta0 + scale * rng.normal(size=theta0.shape)
        r = C._divergence_residuals(theta, theta0)
        ref = np.array(
            [
                _divergence_ref(p, p0)
                for p, p0 in zip(log_cholesky_to_parameters(theta), prior, strict=True)
            ]
        )
        # atol: the reference subtracts 4 from O(1) terms, losing ~1e-15 absolute
        np.testing.assert_allclose(np.sum(np.asarray(r) ** 2, -1), ref, rtol=1e-8, atol=1e-14)
    # Jacobian at and next to the prior: finite and equal to central differences
    f = jax.jit(lambda t: C._divergence_residuals(t, theta0))
    for shift in (0.0, 5e-4, 2e-3):  # on the series branch, at its edge (1e-3), and beyond
        th = theta0 + shift
        Jf = np.asarray(jax.jacfwd(f)(th))
        assert np.isfinite(Jf).all()
        eps = 1e-5
        for k in (0, 2, 5):
            e = np.zeros_like(np.asarray(theta0))
            e[:, k] = eps
            fd = (f(th + e) - f(th - e)) / (2 * eps)
            # bodies are independent: body b's residuals depend on theta_b only
            Jk = np.stack([Jf[b, :, b, k] for b in range(10)])
            np.testing.assert_allclose(Jk, fd, rtol=1e-6, atol=1e-7)  # FD: eps^2 and 1e-16/eps


# ---------------------------------------------------------------- fits


@pytest.fixture(scope="module")
def chain():
    """A random 3-joint serial chain (revolute, revolute, prismatic) under gravity."""
    return jaxmb.models.serial_chain(3, seed=1)


def _states(N, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-2, 2, (N, 3))
    return q, scale * rng.normal(0, 1.5, (N, 3)), scale * rng.normal(0, 3, (N, 3))


@pytest.fixture(scope="module")
def samples(chain):
    """Stacked regressors (3N x 30) and friction columns (3N x 6: viscous qd_j, Coulomb
    tanh(qd_j / 0.02), one of each per joint, in joint order) of four sets of random states:
    training and fresh (150 each), and two weakly excited sets (30 slow states each). All are
    computed in one batch so that the regressor compiles once."""
    sets = {"train": _states(150, 0), "fresh": _states(150, 1)}
    sets |= {"poor_a": _states(30, 4, 0.3), "poor_b": _states(30, 6, 0.3)}
    q, qd, qdd = (np.concatenate([v[k] for v in sets.values()]) for k in range(3))
    Y = np.asarray(jax.vmap(lambda a, b, c: jaxmb.regressor(chain, a, b, c))(q, qd, qdd))
    F = np.zeros((len(q), 3, 6))
    for j in range(3):
        F[:, j, j] = qd[:, j]
        F[:, j, 3 + j] = np.tanh(qd[:, j] / 0.02)
    out, start = {}, 0
    for name, v in sets.items():
        N = len(v[0])
        out[name] = (
            Y[start : start + N].reshape(3 * N, 30),
            F[start : start + N].reshape(3 * N, 6),
        )
        start += N
    return out


FRICTION = np.array([2.0, 1.5, 1.0, 3.0, 2.0, 1.0])  # viscous N m s/rad, Coulomb N m


@pytest.fixture(scope="module")
def friction_data(chain, samples):
    pi_true = np.asarray(jaxmb.inertial_parameters(chain))
    Y, F = samples["train"]
    Yf, _ = samples["fresh"]  # for predictions
    tau0 = Y @ pi_true.ravel() + F @ FRICTION
    sigma = 0.01 * np.sqrt(np.mean(tau0**2))  # 1 % noise
    tau = tau0 + np.random.default_rng(2).normal(0, sigma, tau0.shape)
    return pi_true, Y, F, Yf, tau, sigma


def test_fit_recovers_identifiable_parameters_and_friction(friction_data):
    pi_true, Y, F, Yf, tau, sigma = friction_data
    theta_true = parameters_to_log_cholesky(pi_true)
    theta0 = theta_true + 0.3 * np.random.default_rng(3).normal(size=(3, 10))
    fit = fit_consistent(Y, tau, theta0=theta0, Y_extra=F, extra_positive=np.ones(6, bool))
    assert bool(fit.converged) and 0 < int(fit.steps) < 256
    assert fit.pi.shape == (3, 10) and fit.theta.shape == (3, 10) and fit.extra.shape == (6,)
    # identifiable combinations: predictions on fresh states. Expected error ~ sigma sqrt(p/m)
    # ~ 0.3 % of rms(tau) for 1 % noise, 26 identifiable parameters and 450 rows; allow 1 %.
    err = np.linalg.norm(Yf @ (np.asarray(fit.pi).ravel() - pi_true.ravel()))
    assert err < 1e-2 * np.linalg.norm(Yf @ pi_true.ravel())
    # friction: within 4 standard deviations of the least-squares estimate (its covariance
    # sigma^2 (A^T A)^+ on the full, rank-deficient regressor; friction columns are identifiable)
    A = np.hstack([Y, F])
    cov = sigma**2 * np.linalg.pinv(A.T @ A)
    std = np.sqrt(np.diag(cov)[30:])
    assert (std < 0.02 * FRICTION).all()  # the data do determine them to 2 %
    assert (np.abs(np.asarray(fit.extra) - FRICTION) < 4 * std).all()
    # the truth is interior, so the physical optimum is the unconstrained one: same cost and
    # the same friction as ordinary least squares (tolerances: optimiser tolerance 1e-10)
    z = np.linalg.lstsq(A, tau, rcond=None)[0]
    rms2 = np.mean(tau**2)
    np.testing.assert_allclose(fit.cost, 0.5 * np.sum((A @ z - tau) ** 2) / rms2, rtol=1e-8)
    np.testing.assert_allclose(fit.extra, z[30:], rtol=1e-6)
    # every fitted body is physical (decided exactly)
    assert all(_exactly_physical(p) for p in np.asarray(fit.pi))
    np.testing.assert_allclose(fit.pi, log_cholesky_to_parameters(fit.theta), rtol=1e-14)


def test_fit_with_exact_prior_recovers_every_parameter(samples, friction_data):
    """Noise-free data and the true parameters as prior: the data term and the divergence both
    vanish at the truth only, so even the parameters the data cannot see are recovered."""
    pi_true, Y, F, _, _, _ = friction_data
    Y_poor, _ = samples["poor_a"]
    tau = Y_poor @ pi_true.ravel()
    theta0 = parameters_to_log_cholesky(pi_true) + 0.3 * np.random.default_rng(5).normal(
        size=(3, 10)
    )
    for w in (1e-4, 1.0):
        fit = fit_consistent(Y_poor, tau, theta0=theta0, prior=pi_true, prior_weight=w)
        assert bool(fit.converged)
        # 1e-10: solver tolerance, at the exact optimum
        np.testing.assert_allclose(fit.pi, pi_true, rtol=0, atol=1e-10)
        assert float(fit.cost) < 1e-20


def test_ols_non_physical_while_fit_stays_physical(samples, friction_data):
    """A 5 g last body, weak excitation (30 slow states) and 5 % noise: the least-squares
    estimate (minimum norm, as numpy returns it) is not a physical body; the consistent fits
    are, they cost at least as much as OLS (the unconstrained minimum) and, with a rough prior
    (the truth scaled by 1.2), they predict fresh, well excited states better than OLS."""
    pi_true = np.array(friction_data[0])
    Yf = friction_data[3]
    m, c = 0.005, np.array([0.02, 0.01, -0.01])
    pi_true[2] = _parameters(m, c, np.diag([2e-6, 3e-6, 4e-6]))
    Y, _ = samples["poor_b"]
    tau0 = Y @ pi_true.ravel()
    tau = tau0 + np.random.default_rng(7).normal(0, 0.05 * np.sqrt(np.mean(tau0**2)), tau0.shape)
    z = np.linalg.lstsq(Y, tau, rcond=None)[0]
    ols = z.reshape(3, 10)
    assert not all(_exactly_physical(p) for p in ols)
    assert not np.asarray(is_physically_consistent(ols)).all()

    prior = 1.2 * pi_true
    theta0 = parameters_to_log_cholesky(prior)
    free = fit_consistent(Y, tau, theta0=theta0)
    reg = fit_consistent(Y, tau, theta0=theta0, prior=prior, prior_weight=1e-2)
    rms2 = np.mean(tau**2)
    cost_ols = 0.5 * np.sum((Y @ z - tau) ** 2) / rms2
    for fit in (free, reg):
        assert all(_exactly_physical(p) for p in np.asarray(fit.pi))
        assert float(fit.cost) >= cost_ols
    # without a prior the optimum lies on the boundary (theta -> infinity): the solver reports
    # no convergence, yet stays physical and close to the best cost (within 10 % of OLS)
    assert float(free.cost) < 1.1 * cost_ols
    assert bool(reg.converged)

    def err(p):
        return np.linalg.norm(Yf @ (np.ravel(p) - pi_true.ravel()))

    assert err(reg.pi) < 0.5 * err(ols)


def test_positive_extras_stay_positive(friction_data):
    """A joint without Coulomb friction: noise drives the least-squares estimate negative, the
    positivity mask keeps it positive and the rest within 4 standard deviations of the truth."""
    pi_true, Y, F, _, _, sigma = friction_data
    friction = FRICTION.copy()
    friction[5] = 0.0
    tau0 = Y @ pi_true.ravel() + F @ friction
    rng = np.random.default_rng(8)
    A = np.hstack([Y, F])
    tau = tau0 + rng.normal(0, sigma, tau0.shape)
    z = np.linalg.lstsq(A, tau, rcond=None)[0]
    assert z[35] < 0  # this noise draw makes the unconstrained estimate non-physical
    fit = fit_consistent(
        Y,
        tau,
        theta0=parameters_to_log_cholesky(pi_true),
        Y_extra=F,
        extra_positive=np.array([True] * 6),
    )
    std = np.sqrt(np.diag(sigma**2 * np.linalg.pinv(A.T @ A))[30:])
    assert float(fit.extra[5]) >= 0.0
    assert (np.abs(np.asarray(fit.extra) - friction) < 4 * std).all()
    # without the mask the fit reproduces the negative least-squares value
    loose = fit_consistent(Y, tau, theta0=parameters_to_log_cholesky(pi_true), Y_extra=F)
    np.testing.assert_allclose(loose.extra, z[30:], rtol=1e-6, atol=1e-9)


def test_fit_jits_and_checks_input(friction_data):
    pi_true, Y, F, _, tau, _ = friction_data
    theta0 = parameters_to_log_cholesky(pi_true)
    direct = fit_consistent(Y, tau, theta0=theta0, Y_extra=F)
    jitted = jax.jit(lambda t: fit_consistent(Y, t, theta0=theta0, Y_extra=F))(tau)
    # compare what the data determine: rounding differs between the two programs, and the
    # solver's path along the undetermined directions amplifies it (~1e-8 there; 2.3e-9 relative
    # in the determined ones with jax 0.10.2 and scipy 1.17)
    np.testing.assert_allclose(Y @ np.ravel(jitted.pi), Y @ np.ravel(direct.pi), rtol=1e-8)
    np.testing.assert_allclose(jitted.extra, direct.extra, rtol=1e-9)
    # shape mismatches: the runtime jaxtyping check (TypeError) fires before our ValueError
    with pytest.raises((TypeError, ValueError)):
        fit_consistent(Y, tau[:-1], theta0=theta0)
    with pytest.raises((TypeError, ValueError)):
        fit_consistent(Y, tau, theta0=theta0[:2])
    with pytest.raises(ValueError, match="theta0: expected shape"):
        fit_consistent(Y[:, :20], tau, theta0=theta0)
    with pytest.raises(ValueError, match="weights: expected positive"):
        fit_consistent(Y, tau, theta0=theta0, weights=-np.ones_like(tau))
    with pytest.raises(ValueError, match="prior: body 1 is not physically consistent"):
        bad = pi_true.copy()
        bad[1, 0] = -1.0
        fit_consistent(Y, tau, theta0=theta0, prior=bad, prior_weight=1.0)
    with pytest.raises(ValueError, match="prior_weight"):
        fit_consistent(Y, tau, theta0=theta0, prior_weight=1.0)
    with pytest.raises((TypeError, ValueError)):  # a float mask: jaxtyping's Bool, or ours
        fit_consistent(Y, tau, theta0=theta0, Y_extra=F, extra_positive=np.ones(6))
