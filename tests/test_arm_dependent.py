"""The full 3-DoF arm in dependent coordinates [phi, theta, zeta, alpha, s] (Aghili (2005)'s
projection route) against the minimal-coordinate model of the core (the coordinate map route)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmb
from jaxmb.constraints import projection as pj
from jaxmb.simulation import SinusoidReference, simulate

DEP = jaxmb.models.series_parallel_3dof_dependent()
MIN = jaxmb.models.series_parallel_3dof(full=True)
l0 = 0.425  # spec, typed in again


def to_dependent(q, qd, qdd=None):
    qhat = jaxmb.augmented_coordinates(MIN, q)
    E = jaxmb.coordinate_map_jacobian(MIN, q)
    if qdd is None:
        return qhat, E @ qd
    Edot_qd = jax.jvp(lambda x: jaxmb.coordinate_map_jacobian(MIN, x) @ qd, (q,), (qd,))[1]
    return qhat, E @ qd, E @ qdd + Edot_qd


def to_input(u):
    """Joint torques on phi and theta, the cylinder force along s."""
    return jnp.array([u[0], u[1], 0.0, 0.0, u[2]])


@pytest.mark.parametrize("inertia", pj.INERTIA_FORMS)
def test_accelerations_equal_minimal_model(inertia):
    rng = np.random.default_rng(11)
    for _ in range(6):
        q = jnp.array([rng.uniform(-3, 3), rng.uniform(-1, 1.5), rng.uniform(0.0, 0.2)])
        qd = jnp.asarray(rng.normal(size=3) * np.array([1.0, 1.0, 0.1]))
        u = jnp.asarray(rng.normal(size=3) * np.array([100.0, 1000.0, 5000.0]))
        qdd = jaxmb.forward_dynamics(MIN, q, qd, u)
        qhat, qhat_d, qhat_dd = to_dependent(q, qd, qdd)
        got = pj.forward_dynamics(DEP, qhat, qhat_d, to_input(u), inertia=inertia)
        np.testing.assert_allclose(
            got, qhat_dd, rtol=1e-9, atol=1e-9 * float(jnp.abs(qhat_dd).max())
        )


def test_five_second_simulations_agree():
    """The same PD + gravity-compensation loop closed around both plants; the minimal states and
    the dependent ones mapped back agree along 5 s."""
    ref = SinusoidReference([0.0, 0.35, 0.10], [0.6, 0.25, 0.06], [10.0, 8.0, 5.0])
    Kp, Kd = jnp.array([2e4, 3e4, 4e4]), jnp.array([3e3, 5e3, 2e3])

    def control_minimal(t, q, qd, desired):
        q_d, qd_d, _ = desired
        return Kp * (q_d - q) + Kd * (qd_d - qd) - jaxmb.gravity_forces(MIN, q)

    def control_dependent(t, qhat, qhat_d, desired):
        q = jnp.array([qhat[0], qhat[1], qhat[4] - l0])
        qd = jnp.array([qhat_d[0], qhat_d[1], qhat_d[4]])
        return to_input(control_minimal(t, q, qd, desired))

    q0 = ref(0.0) + jnp.array([0.1, -0.1, 0.02])
    qd0 = jnp.zeros(3)
    ts = jnp.linspace(0.0, 5.0, 251)
    a = simulate(MIN, control_minimal, ref, q0, qd0, ts)
    qhat0, qhat_d0 = to_dependent(q0, qd0)
    b = simulate(DEP, control_dependent, ref, qhat0, qhat_d0, ts)
    q_b = jnp.stack([b.q[:, 0], b.q[:, 1], b.q[:, 4] - l0], axis=1)
    np.testing.assert_allclose(q_b, a.q, atol=1e-7)
    mapped = jax.vmap(lambda q: jaxmb.augmented_coordinates(MIN, q))(a.q)
    np.testing.assert_allclose(b.q, mapped, atol=1e-7)  # zeta and alpha too
    assert float(jnp.abs(a.q - a.q_d).max()) < 0.2  # a real motion, tracked
