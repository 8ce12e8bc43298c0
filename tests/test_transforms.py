"""Every public function runs under jit, vmap over states, grad w.r.t. the model, float32."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmb

ARM = jaxmb.models.series_parallel_3dof()
WRENCH = {"F3": jnp.array([0.0, 0.0, 0.0, 0.0, -25.0, 0.0])}

FUNCTIONS = {
    "frame_pose": lambda m, q, qd: jaxmb.frame_pose(m, q, "F3"),
    "frame_jacobian": lambda m, q, qd: jaxmb.frame_jacobian(m, q, "C2"),
    "body_mass_matrices": lambda m, q, qd: jaxmb.body_mass_matrices(m, q),
    "mass_matrix": lambda m, q, qd: jaxmb.mass_matrix(m, q),
    "bias_forces": lambda m, q, qd: jaxmb.bias_forces(m, q, qd),
    "coriolis_matrix": lambda m, q, qd: jaxmb.coriolis_matrix(m, q, qd),
    "gravity_forces": lambda m, q, qd: jaxmb.gravity_forces(m, q),
    "wrench_forces": lambda m, q, qd: jaxmb.wrench_forces(m, q, "F3", WRENCH["F3"]),
    "forward_dynamics": lambda m, q, qd: jaxmb.forward_dynamics(m, q, qd, 10 * qd, WRENCH),
    "inverse_dynamics": lambda m, q, qd: jaxmb.inverse_dynamics(m, q, qd, qd, WRENCH),
    "kinetic_energy": lambda m, q, qd: jaxmb.kinetic_energy(m, q, qd),
    "potential_energy": lambda m, q, qd: jaxmb.potential_energy(m, q),
    "regressor": lambda m, q, qd: jaxmb.regressor(m, q, qd, qd),
}
Q = jnp.array([[0.1, 0.3, 0.05], [-0.4, 0.8, 0.15]])
QD = jnp.array([[0.2, -0.1, 0.03], [0.5, 0.2, -0.02]])


@pytest.mark.parametrize("name", FUNCTIONS)
def test_jit_vmap_grad(name):
    f = FUNCTIONS[name]
    eager = [f(ARM, q, qd) for q, qd in zip(Q, QD, strict=True)]
    batched = jax.vmap(f, in_axes=(None, 0, 0))(ARM, Q, QD)
    np.testing.assert_allclose(batched, np.stack(eager), rtol=1e-12, atol=1e-12)
    jitted = eqx.filter_jit(f)(ARM, Q[0], QD[0])
    np.testing.assert_allclose(jitted, eager[0], rtol=1e-12, atol=1e-12)
    grads = eqx.filter_grad(lambda m: jnp.sum(f(m, Q[0], QD[0]) ** 2))(ARM)
    leaves = jax.tree.leaves(grads)
    assert leaves and all(np.isfinite(np.asarray(x)).all() for x in leaves)
    if name not in (
        "frame_pose",
        "frame_jacobian",
        "wrench_forces",
        "regressor",
    ):  # no mass in them
        assert np.abs(np.asarray(grads.bodies[2].mass)) > 0


@pytest.mark.parametrize("name", ["mass_matrix", "bias_forces", "forward_dynamics", "regressor"])
def test_float32(name):
    f = FUNCTIONS[name]
    to32 = lambda x: x.astype(jnp.float32) if eqx.is_inexact_array(x) else x  # noqa: E731
    arm32 = jax.tree.map(to32, ARM)
    WRENCH["F3"] = WRENCH["F3"].astype(jnp.float32)
    try:
        out = f(arm32, Q[0].astype(jnp.float32), QD[0].astype(jnp.float32))
    finally:
        WRENCH["F3"] = WRENCH["F3"].astype(jnp.float64)
    assert out.dtype == jnp.float32
    ref = np.asarray(f(ARM, Q[0], QD[0]))
    np.testing.assert_allclose(out, ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())


def test_vmap_over_perturbed_models():
    """Monte Carlo style: one compiled function over a batch of models."""
    masses = jnp.array([50.0, 60.0, 75.0])

    def with_mass(m):
        return eqx.tree_at(lambda a: a.bodies[2].mass, ARM, m)

    batched = jax.vmap(lambda m: jaxmb.mass_matrix(with_mass(m), Q[0]))(masses)
    for m, G in zip(masses, batched, strict=True):
        np.testing.assert_allclose(
            G, jaxmb.mass_matrix(jaxmb.replace_body(ARM, "link2", mass=m), Q[0]), rtol=1e-13
        )


def test_gradients_finite_near_the_chain_singularity():
    """Close to zeta = 0 (delta -> 2 L0 - l0) E blows up, but stays finite and differentiable."""
    d_sing = 2 * 0.35 - 0.425
    for gap in (1e-3, 1e-6):
        q = jnp.array([0.0, 0.3, d_sing - gap])
        g = jax.grad(lambda x: jaxmb.kinetic_energy(ARM, x, jnp.array([0.1, 0.1, 1e-4])))(q)
        assert np.isfinite(np.asarray(g)).all()
