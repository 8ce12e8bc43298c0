"""The 3-RPR of Ider et al. Section 6: model against eqs. (50)-(51), the loop-closure solve
against the printed initial values, and PIDC (Aghili (2005) eqs. 45-46, 62) tracking eq. (53)."""

import jax
import jax.numpy as jnp
import numpy as np

import jaxmb
from jaxmb.constraints import projection as pj
from jaxmb.control import ProjectedInverseDynamics
from jaxmb.models import planar_rpr
from jaxmb.simulation import desired_state, simulate

SYSTEM = jaxmb.models.rpr3()
DEG = np.pi / 180
# Section 6, typed in again on purpose
L, L7, ALPHA, BETA, G7 = 2.0, 0.4, 60 * DEG, 30 * DEG, 0.231


def eq50(q):
    t1, t3, t5, t7, x2, x4, x6 = q
    return np.array(
        [
            x2 * np.cos(t1) + L7 * np.cos(t7) - L - x4 * np.cos(t3),
            x2 * np.sin(t1) + L7 * np.sin(t7) - x4 * np.sin(t3),
            x2 * np.cos(t1) + L7 * np.cos(t7 + ALPHA) - 0.5 * L - x6 * np.cos(t5),
            x2 * np.sin(t1) + L7 * np.sin(t7 + ALPHA) - 0.866 * L - x6 * np.sin(t5),
        ]
    )


def eq51(q):
    t1, t7, x2 = q[0], q[3], q[4]
    return np.array(
        [x2 * np.cos(t1) + G7 * np.cos(t7 + BETA), x2 * np.sin(t1) + G7 * np.sin(t7 + BETA), t7]
    )


def assemble_initial():
    fixed = {"theta1": 45 * DEG, "theta3": 155 * DEG, "theta5": 255 * DEG}
    return pj.assemble(SYSTEM, fixed, {"theta7": 0.0, "xi2": 1.0, "xi4": 1.0, "xi6": 1.0})


def test_model_matches_eqs_50_51():
    assert SYSTEM.coordinate_names == ("theta1", "theta3", "theta5", "theta7", "xi2", "xi4", "xi6")
    rng = np.random.default_rng(0)
    for q in rng.uniform([-3, -3, -3, -3, 0.3, 0.3, 0.3], [3, 3, 3, 3, 2, 2, 2], (5, 7)):
        np.testing.assert_allclose(pj.constraint_residual(SYSTEM, q), eq50(q), atol=1e-12)
        np.testing.assert_allclose(
            planar_rpr.end_effector(SYSTEM, jnp.asarray(q)), eq51(q), atol=1e-12
        )


def test_loop_closure_gives_the_printed_initial_values():
    """Eq. (52) and the text before it. The paper's digits are truncated, not rounded: we get
    theta7 = -5.3878 deg, xi2 = 0.75660, xi6 = 0.90162 m; all six truncate to the printed values."""
    q = np.asarray(assemble_initial())
    x = eq51(q)
    ours = {
        "theta7 (deg)": (q[3] / DEG, -5.38, 2),
        "xi2": (q[4], 0.756, 3),
        "xi4": (q[5], 1.177, 3),
        "xi6": (q[6], 0.901, 3),
        "x_G": (x[0], 0.745, 3),
        "y_G": (x[1], 0.631, 3),
    }
    for name, (value, printed, digits) in ours.items():
        assert np.trunc(value * 10**digits) / 10**digits == printed, (name, value)
    assert np.abs(eq50(q)).max() < 1e-12


def test_pidc_tracks_the_cycloidal_deployment():
    """Exact model, actuated base joints only: the task error obeys e'' + G_D e' + G_P e = 0
    (Theorem 4), here critically damped, e(t) = e(0)(1 + w t) exp(-w t) since e'(0) = 0."""
    w = 10.0
    task = jax.tree_util.Partial(planar_rpr.end_effector, SYSTEM)
    ctrl = ProjectedInverseDynamics(
        SYSTEM, task, G_P=jnp.full(3, w * w), G_D=jnp.full(3, 2 * w), actuated=planar_rpr.ACTUATED
    )
    ts = jnp.linspace(0.0, 2.0, 101)
    traj = simulate(
        SYSTEM, ctrl, planar_rpr.deployment_reference, assemble_initial(), jnp.zeros(7), ts
    )
    e = traj.q_d - jax.vmap(task)(traj.q)
    closed = e[0][None, :] * ((1 + w * ts) * jnp.exp(-w * ts))[:, None]
    np.testing.assert_allclose(e, closed, atol=1e-8)
    assert float(jnp.abs(e[-1]).max()) < 1e-7  # at rest at (1.05 m, 0.80 m, 25 deg)
    np.testing.assert_allclose(traj.u[:, 3:], 0.0, atol=1e-9)  # passive joints get nothing
    assert float(jnp.abs(traj.u[:, :3]).max()) > 1.0

    def residual_at(t, q, qd):
        return ctrl.control(t, q, qd, desired_state(planar_rpr.deployment_reference, t))[1]

    residual = jax.vmap(residual_at)(ts, traj.q, traj.qd)
    assert float(residual.max()) < 1e-9  # eq. (64) holds along the run
    phi = jax.vmap(lambda q: pj.constraint_residual(SYSTEM, q))(traj.q)
    assert float(jnp.abs(phi).max()) < 1e-9
