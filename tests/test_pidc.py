"""Aghili (2005) Section 7 control laws: minimum (weighted) norm, passive joints and the
controllability condition, hybrid motion/force decoupling."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmb
from jaxmb.constraints import projection as pj
from jaxmb.control import (
    ProjectedInverseDynamics,
    hybrid_motion_force,
    metric_weights,
    passive_joint_map,
    pidc_force,
)
from jaxmb.models import planar_rpr

RPR = jaxmb.models.rpr3()
TASK = jax.tree_util.Partial(planar_rpr.end_effector, RPR)
DEG = np.pi / 180


def state(seed):
    rng = np.random.default_rng(seed)
    angles = np.array([45, 155, 255]) * DEG + rng.uniform(-0.1, 0.1, 3)
    q = pj.assemble(
        RPR,
        dict(zip(planar_rpr.ACTUATED, angles, strict=True)),
        {"theta7": -0.1, "xi2": 0.75, "xi4": 1.2, "xi6": 0.9},
    )
    qd = pj.projector(RPR, q) @ jnp.asarray(rng.normal(size=7))
    desired = tuple(jnp.asarray(rng.normal(size=3)) for _ in range(3))
    return q, qd, desired


def test_closed_loop_task_acceleration_is_the_commanded_one():
    """Theorem 4 at a state: with f from eqs. (45)-(46) the task acceleration is
    thetadd_d + G_D ed + G_P e, whatever the metric and the actuation."""
    q, qd, desired = state(0)
    G_P, G_D = jnp.array([30.0, 40.0, 50.0]), jnp.array([5.0, 6.0, 7.0])
    w = metric_weights(RPR.coordinate_names, ("xi2", "xi4", "xi6"), kappa=0.4)
    X = jax.jacfwd(TASK)(q)
    Xdot_qd = jax.jvp(lambda x: jax.jvp(TASK, (x,), (qd,))[1], (q,), (qd,))[1]
    e = desired[0] - TASK(q)
    ed = desired[1] - X @ qd
    commanded = desired[2] + G_D * ed + G_P * e
    for kw in ({}, {"weights": w}, {"actuated": planar_rpr.ACTUATED}):
        ctrl = ProjectedInverseDynamics(RPR, TASK, G_P, G_D, **kw)
        f = ctrl(0.0, q, qd, desired)
        qdd = pj.forward_dynamics(RPR, q, qd, f)
        np.testing.assert_allclose(X @ qdd + Xdot_qd, commanded, rtol=1e-8, atol=1e-8)


def test_minimum_norm_and_weighted_norm():
    """Eq. (48): adding any force in N(A)^perp = R(A^T) leaves the motion and only raises
    ||f|| (W = I) or ||f||_W = (f^T W^-1 f)^(1/2) (eq. (49), the weighted law)."""
    q, qd, desired = state(1)
    rng = np.random.default_rng(2)
    w = metric_weights(RPR.coordinate_names, ("xi2", "xi4", "xi6"), kappa=0.4)
    A = pj.constraint_jacobian(RPR, q)
    for weights in (None, w):
        ctrl = ProjectedInverseDynamics(RPR, TASK, jnp.ones(3), jnp.ones(3), weights=weights)
        f = ctrl(0.0, q, qd, desired)
        qdd = pj.forward_dynamics(RPR, q, qd, f)
        winv = jnp.ones(7) if weights is None else 1.0 / weights
        norm = float(f @ (winv * f))
        for _ in range(5):
            z = A.T @ jnp.asarray(rng.normal(size=4))
            np.testing.assert_allclose(
                pj.forward_dynamics(RPR, q, qd, f + z), qdd, rtol=1e-9, atol=1e-9
            )
            assert float((f + z) @ (winv * (f + z))) >= norm * (1 - 1e-12)
        # first-order optimality: f is W^-1-orthogonal to R(A^T)
        np.testing.assert_allclose(A @ (winv * f), 0.0, atol=1e-9 * float(jnp.abs(f).max()))


def test_passive_joints_get_no_input_and_the_motion_is_kept():
    q, qd, desired = state(3)
    full = ProjectedInverseDynamics(RPR, TASK, jnp.ones(3), jnp.ones(3))
    passive = ProjectedInverseDynamics(
        RPR, TASK, jnp.ones(3), jnp.ones(3), actuated=planar_rpr.ACTUATED
    )
    f_full = full(0.0, q, qd, desired)
    f, residual = passive.control(0.0, q, qd, desired)
    np.testing.assert_allclose(f[3:], 0.0, atol=1e-9)  # eq. (55)
    assert float(jnp.abs(f_full[3:]).max()) > 1.0  # the unrestricted law does load them
    np.testing.assert_allclose(
        pj.forward_dynamics(RPR, q, qd, f),
        pj.forward_dynamics(RPR, q, qd, f_full),
        rtol=1e-9,
        atol=1e-9,
    )
    assert float(residual) < 1e-9


def test_controllability_condition_fails_at_the_slider_crank_singularity():
    """Slider-crank with only the rod joint q2 actuated: N(A) = span([1, -2]) misses B^perp =
    span(e1) on the regular branch, so eq. (64) holds; at the singular point N(A) = R^2 contains
    e1 while N(A)^perp = {0}, so it fails, and the input cannot avoid the passive joint."""
    sc = jaxmb.models.slider_crank(g=0.0)
    actuated = jnp.array([0.0, 1.0])
    regular = jnp.array([0.4, 2 * np.pi - 0.8])
    singular = jnp.array([np.pi / 2, np.pi])
    _, ok = passive_joint_map(pj.projector(sc, regular), actuated)
    _, bad = passive_joint_map(pj.projector(sc, singular), actuated)
    assert float(ok) < 1e-12
    np.testing.assert_allclose(bad, 1.0, atol=1e-12)
    terms = pj.projected_terms(sc, singular, jnp.zeros(2))
    f, residual = pidc_force(terms, jnp.array([1.0, 0.0]), actuated=actuated)
    np.testing.assert_allclose(residual, 1.0, atol=1e-12)
    assert abs(float(f[0])) > 0.1  # reported: the passive crank would need a torque


def test_hybrid_motion_force_decouples():
    """Eqs. (51), (54): the motion follows u_p (eq. (44)) and the constraint force equals u_F
    (eq. (32)), independently of each other."""
    rng = np.random.default_rng(4)
    for seed in (5, 6):
        q, qd, _ = state(seed)
        terms = pj.projected_terms(RPR, q, qd)
        u_p = jnp.asarray(rng.normal(size=7))
        lam_d = jnp.asarray(rng.normal(size=4) * 50)
        u_F = terms.A.T @ lam_d
        f = hybrid_motion_force(terms, u_p, u_F)
        qdd = pj.forward_dynamics(RPR, q, qd, f)
        PM = terms.P @ terms.M
        np.testing.assert_allclose(PM @ qdd, PM @ u_p, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(pj.constraint_force(RPR, q, qd, f), u_F, rtol=1e-9, atol=1e-8)
        lam, _ = pj.lagrange_multipliers(RPR, q, qd, f)
        np.testing.assert_allclose(lam, lam_d, rtol=1e-9, atol=1e-8)


def test_bad_arguments():
    with pytest.raises(ValueError, match="G_P must be"):
        ProjectedInverseDynamics(RPR, TASK, jnp.ones(2), jnp.ones(3))
    with pytest.raises(ValueError, match="actuated"):
        ProjectedInverseDynamics(RPR, TASK, jnp.ones(3), jnp.ones(3), actuated=("theta9",))
    with pytest.raises(ValueError, match="kappa"):
        metric_weights(RPR.coordinate_names, ("xi2",), kappa=0.0)
    with pytest.raises(ValueError, match="not among"):
        metric_weights(RPR.coordinate_names, ("s",), kappa=1.0)


def test_integral_force_loop_removes_the_force_error_of_a_wrong_model():
    """Aghili (2005) eq. (52) with its integral state carried by the controller: on the
    slider-crank whose masses the controller underestimates by 20 %, eq. (51) alone leaves a
    constraint-force error of a few N; the integral action (G_I = 50 1/s) removes it, through a
    10 ms force sensor, while the motion is unchanged (the force and motion loops decouple)."""
    import equinox as eqx

    from jaxmb.actuators.plant import ForceSensedPlant
    from jaxmb.control import HybridForceControl
    from jaxmb.simulation import SinusoidReference, simulate

    plant_sys, model_sys = jaxmb.models.slider_crank(m=1.0), jaxmb.models.slider_crank(m=0.8)
    plant = ForceSensedPlant(plant_sys, tau=0.01)
    pidc = ProjectedInverseDynamics(
        model_sys, lambda q: q[:1], jnp.array([25.0]), jnp.array([10.0])
    )

    def force_d(t, q):  # 5 N of reaction at the slider, in generalized coordinates A^T lambda_d
        return pj.constraint_jacobian(model_sys, q)[0] * 5.0

    ref = SinusoidReference([0.3], [0.2], [6.0])
    w = 0.2 * 2 * np.pi / 6
    q0, qd0 = jnp.array([0.3, -0.6]), jnp.array([w, -2 * w])  # on the branch q2 = -2 q1
    ts = jnp.linspace(0, 4, 401)
    run = eqx.filter_jit(lambda c: simulate(plant, c, ref, q0, qd0, ts))
    errs, tracks = [], []
    for G_I in (0.0, 50.0):
        tr = run(HybridForceControl(pidc, force_d, 1.0, G_I))
        F = jax.vmap(lambda q, qd, u: pj.constraint_force(plant_sys, q, qd, u))(tr.q, tr.qd, tr.u)
        F_d = jax.vmap(force_d)(tr.t, tr.q)
        errs.append(float(jnp.linalg.norm(F - F_d, axis=1)[ts > 2].max()))
        tracks.append(np.asarray(tr.q[:, 0]))
        assert tr.controller_state.shape == (401, 2)
        Phi = jax.vmap(lambda q: plant_sys.constraint(plant_sys.model, q))(tr.q)
        assert float(jnp.abs(Phi).max()) < 1e-10
    assert errs[0] > 1.0 and errs[1] < 0.05, errs
    np.testing.assert_allclose(tracks[0], tracks[1], atol=1e-9)
