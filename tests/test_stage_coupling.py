"""`stage_coupling`: stage 1's uncertainty carried into stage 2's covariance, against the
spread of the two-step estimator itself (Monte Carlo over both stages' noise), and the map
from stage 1's inertial parameters to the plant's body selectors against the parallel-axis
theorem and central differences."""

import numpy as np

from jaxmb.actuators.parameters import additive_step
from jaxmb.identification import stage_coupling as coupling
from jaxmb.identification.regressor import INERTIAL_NAMES


def test_carried_covariance_is_the_two_step_estimators_spread():
    """A linear two-step problem: stage 1 estimates p1 (Q) with covariance C1, stage 2 fits
    theta (P) by least squares with the held selectors ``T p1`` at stage 1's estimate.
    Over 20 000 draws of both stages' noise, the estimates' covariance and their covariance
    with stage 1's are `carried`'s (within the draws' sampling error), where stage 2's own
    covariance alone is 2-3x too small."""
    rng = np.random.default_rng(0)
    N, P, S, Q = 60, 2, 3, 4
    J2, J1 = rng.normal(size=(N, P)), rng.normal(size=(N, S))
    T = rng.normal(size=(S, Q))
    L1 = rng.normal(size=(Q, Q)) * 0.3
    C1 = L1 @ L1.T + 0.05 * np.eye(Q)
    sigma = 0.5
    theta, p1 = np.array([1.0, -2.0]), rng.normal(size=Q)
    draws = 20_000
    p1_hat = p1 + rng.multivariate_normal(np.zeros(Q), C1, size=draws)
    y = (J2 @ theta + J1 @ T @ p1)[None, :] + sigma * rng.normal(size=(draws, N))
    # stage 2: residual y - J2 theta - J1 T p1_hat, weighted by the noise
    theta_hat = np.linalg.lstsq(J2, (y - p1_hat @ (J1 @ T).T).T, rcond=None)[0].T
    cov2 = sigma**2 * np.linalg.inv(J2.T @ J2)
    total, cross = coupling.carried(cov2, J2 / sigma, J1 / sigma, T, C1)
    sample = np.cov(theta_hat.T)
    np.testing.assert_allclose(total, sample, rtol=0.05, atol=0.02 * np.abs(sample).max())
    assert np.all(np.diag(total) > 2.0 * np.diag(cov2))
    sample_cross = ((theta_hat - theta_hat.mean(0)).T @ (p1_hat - p1_hat.mean(0))) / (draws - 1)
    np.testing.assert_allclose(cross, sample_cross, atol=0.03 * np.abs(sample_cross).max())
    # a parameter the residuals do not determine (a zero row) keeps stage 2's row
    dead = cov2.copy()
    dead[1, :], dead[:, 1] = 0.0, 0.0
    total, cross = coupling.carried(dead, J2 / sigma, J1 / sigma, T, C1)
    assert np.all(total[1] == 0.0) and np.all(cross[1] == 0.0)


def _stage1(rng, body="boom"):
    """Stage 1's ten inertial parameters of one body (about its frame's origin) from a
    mass, centre and inertia about the centre (the parallel-axis theorem)."""
    m, c = 80.0, rng.normal(size=3) * 0.4
    A = rng.normal(size=(3, 3))
    I_c = A @ A.T + 2.0 * np.eye(3)
    I_o = I_c + m * (c @ c * np.eye(3) - np.outer(c, c))
    p = [m, *(m * c), I_o[0, 0], I_o[0, 1], I_o[1, 1], I_o[0, 2], I_o[1, 2], I_o[2, 2]]
    return [f"{body}.{n}" for n in INERTIAL_NAMES], np.array(p), m, c, I_c


def test_selector_map_is_the_derivative_of_the_plants_body_values():
    """`selector_map` moves each selector's theta as its value (mass, centre, inertia about
    the centre, from the parallel-axis theorem) moves with stage 1's parameters, by central
    differences; a selector stage 2 fits takes nothing from stage 1 (`held_selectors`)."""
    rng = np.random.default_rng(1)
    names, p, m, c, I_c = _stage1(rng)
    held = coupling.held_selectors(names, p, fitted=["body.boom.mass"])
    assert held == tuple(f"body.boom.{f}" for f in
                         ("com_x", "com_y", "com_z", "I_xx", "I_yy", "I_zz"))  # fmt: skip
    plant = {"body.boom.I_xx": I_c[0, 0], "body.boom.I_yy": I_c[1, 1], "body.boom.I_zz": I_c[2, 2]}
    T = coupling.selector_map(held, names, p, plant)
    step = additive_step("body.boom.com_x")  # a centre's theta: metres per step

    def values(q):
        m_, mc = q[0], q[1:4]
        c_ = mc / m_
        I_o = np.array([[q[4], q[5], q[7]], [q[5], q[6], q[8]], [q[7], q[8], q[9]]])
        I = I_o - m_ * (c_ @ c_ * np.eye(3) - np.outer(c_, c_))
        return np.array([c_[0] / step, c_[1] / step, c_[2] / step,
                         np.log(I[0, 0]), np.log(I[1, 1]), np.log(I[2, 2])])  # fmt: skip

    np.testing.assert_allclose(values(p)[:3] * step, c, rtol=1e-12)
    np.testing.assert_allclose(np.exp(values(p)[3:]), np.diag(I_c), rtol=1e-12)
    h = 1e-6 * np.maximum(np.abs(p), 1.0)
    fd = np.stack([(values(p + h[k] * e) - values(p - h[k] * e)) / (2 * h[k])
                   for k, e in enumerate(np.eye(10))], axis=1)  # fmt: skip
    np.testing.assert_allclose(T, fd, rtol=1e-6, atol=1e-8 * np.abs(fd).max())


def test_stage_1s_friction_is_held_where_stage_2_does_not_fit_it():
    """A Stribeck cylinder takes stage 1's Coulomb force (its static force at the file's
    ratio to it) and viscous coefficient: the static force is held even where stage 2 fits
    the Coulomb force, each moving as the log of stage 1's value; a cylinder whose stage 1
    Coulomb force is not positive, or that is not Stribeck, keeps the file's."""
    names = ["friction.lift.F_c", "friction.lift.sigma", "friction.tilt.F_c"]
    values = np.array([400.0, 900.0, -5.0])
    fitted = ["friction.lift.F_c"]
    held = coupling.held_selectors(names, values, fitted, stribeck=["lift", "tilt"])
    assert held == ("friction.lift.F_s", "friction.lift.sigma")
    assert coupling.held_selectors(names, values, fitted) == ()  # no Stribeck law
    T = coupling.selector_map(held, names, values, {})
    np.testing.assert_allclose(T, [[1 / 400.0, 0, 0], [0, 1 / 900.0, 0]])
