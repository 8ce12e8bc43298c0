"""Physics identities over random states (hypothesis), on the arm and a random chain."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    bias_lagrangian,
    bias_rnea,
    body_mass_matrices,
    coriolis_matrix,
    forward_dynamics,
    gravity_forces,
    inverse_dynamics,
    kinetic_energy,
    mass_matrix,
    potential_energy,
    regressor,
)
from hypothesis import given
from hypothesis import strategies as st

import jaxmb

CHAIN = jaxmb.models.serial_chain(5, seed=3)
ARM = jaxmb.models.series_parallel_3dof(full=True)

angle = st.floats(-3.0, 3.0)
rate = st.floats(-2.0, 2.0)
stroke = st.floats(0.0, 0.2)


@st.composite
def arm_states(draw):
    q = [draw(angle), draw(st.floats(-1.0, 1.5)), draw(stroke)]
    qd = [draw(rate), draw(rate), 0.1 * draw(rate)]
    qdd = [draw(rate), draw(rate), draw(rate)]
    return np.array(q), np.array(qd), np.array(qdd)


@st.composite
def chain_states(draw):
    return tuple(np.array([draw(rate) for _ in range(CHAIN.n)]) for _ in range(3))


systems = st.one_of(
    arm_states().map(lambda s: (ARM, *s)), chain_states().map(lambda s: (CHAIN, *s))
)


def rel_close(a, b, rtol):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=0, atol=rtol * max(1.0, np.abs(b).max()))


@given(systems)
def test_gamma_symmetric_positive_definite(sys_):
    model, q, _, _ = sys_
    G = np.asarray(mass_matrix(model, q))
    rel_close(G, G.T, 1e-13)
    assert np.linalg.eigvalsh(G).min() > 0
    # the CRBA fast path equals the literal sum of J_i^T M_i J_i (eqs. (9)-(10))
    rel_close(G, body_mass_matrices(model, q).sum(0), 1e-12)


@given(systems)
def test_christoffel_C_skew_and_consistent_with_h(sys_):
    model, q, qd, _ = sys_
    C = np.asarray(coriolis_matrix(model, q, qd))
    G_dot = np.asarray(jax.jvp(lambda x: jaxmb.mass_matrix(model, x), (q,), (qd,))[1])
    N = G_dot - 2 * C
    rel_close(N, -N.T, 1e-10)  # skew-symmetry of Gammadot - 2C
    h = np.asarray(bias_lagrangian(model, q, qd))
    rel_close(C @ qd, h, 1e-10)


@given(systems)
def test_recursive_fast_path_equals_the_definition(sys_):
    """RNEA on the augmented tree mapped by E (jaxmb.algorithms.recursive) vs eqs. (9)-(13) by autodiff."""
    model, q, qd, qdd = sys_
    rel_close(bias_rnea(model, q, qd), bias_lagrangian(model, q, qd), 1e-10)
    tau = inverse_dynamics(model, q, qd, qdd)
    rel_close(tau, inverse_dynamics(model, q, qd, qdd, method="lagrangian"), 1e-10)
    rel_close(forward_dynamics(model, q, qd, tau), qdd, 1e-9)  # round trip
    rel_close(
        forward_dynamics(model, q, qd, tau, method="lagrangian"),
        forward_dynamics(model, q, qd, tau),
        1e-9,
    )


@given(systems)
def test_gravity_force_is_minus_gradient_of_potential(sys_):
    model, q, _, _ = sys_
    grad_V = jax.grad(lambda x: jaxmb.potential_energy(model, x))(jnp.asarray(q))
    rel_close(gravity_forces(model, q), -grad_V, 1e-10)


@given(systems)
def test_regressor_is_linear_in_the_parameters(sys_):
    """One regressor predicts the inverse dynamics of a model with other inertial parameters."""
    model, q, qd, qdd = sys_
    Y = np.asarray(regressor(model, q, qd, qdd))
    other = model
    for b, scale in zip(model.bodies, np.linspace(0.6, 1.7, len(model.bodies)), strict=True):
        other = jaxmb.replace_body(other, b.name, mass=b.mass * scale, com=b.com * (2 - scale))
    for m in (model, other):
        pi = np.asarray(jaxmb.inertial_parameters(m)).ravel()
        rel_close(Y @ pi, inverse_dynamics(m, q, qd, qdd), 1e-10)
    # and affine in the accelerations: Y(qdd) - Y(0) = Y(2 qdd) - Y(qdd)
    Y0, Y2 = regressor(model, q, qd, 0 * qdd), regressor(model, q, qd, 2 * qdd)
    rel_close(np.asarray(Y) - Y0, np.asarray(Y2) - Y, 1e-10)


@pytest.mark.parametrize("model", [ARM, CHAIN], ids=["arm-full", "chain5"])
def test_mass_matrix_gradient_wrt_body_parameters_matches_finite_differences(model):
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.uniform(0.05, 0.15, model.n))
    W = jnp.asarray(rng.normal(size=(model.n, model.n)))
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def loss(p):
        return jnp.sum(W * jaxmb.mass_matrix(eqx.combine(p, static), q))

    g = jax.grad(loss)(params)
    for i, body in enumerate(model.bodies):
        for field in ("mass", "com", "inertia"):
            leaf = getattr(body, field)
            ga = np.asarray(getattr(g.bodies[i], field))
            for idx in np.ndindex(np.shape(leaf)):
                eps = 1e-6 * max(1.0, abs(float(leaf[idx])))

                def shifted(d, i=i, field=field, idx=idx):
                    return eqx.tree_at(
                        lambda p: getattr(p.bodies[i], field),
                        params,
                        getattr(params.bodies[i], field).at[idx].add(d),
                    )

                fd = (loss(shifted(eps)) - loss(shifted(-eps))) / (2 * eps)
                # central differences: truncation ~ eps^2, round-off ~ 1e-16 |loss| / eps
                np.testing.assert_allclose(
                    ga[idx], fd, rtol=1e-6, atol=1e-6, err_msg=f"{body.name}.{field}{idx}"
                )


def test_power_balance_along_an_integrated_motion():
    """d/dt (T + V) = qd^T Q_a: integrate the full arm under a time-varying actuator force and
    compare the energy change with the work done, accumulated as a third state."""
    model = ARM

    def Q_a(t, q):
        return -jaxmb.gravity_forces(model, q) + jnp.array([20.0, 40.0, 300.0]) * jnp.sin(
            jnp.array([3.0, 5.0, 7.0]) * t
        )

    def f(t, y, args):
        q, qd, _ = y
        tau = Q_a(t, q)
        return qd, jaxmb.forward_dynamics(model, q, qd, tau), qd @ tau

    y0 = (jnp.array([0.1, 0.3, 0.1]), jnp.array([0.5, -0.3, 0.02]), jnp.array(0.0))
    ts = jnp.linspace(0.0, 1.0, 11)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(f),
        diffrax.Tsit5(),
        0.0,
        1.0,
        1e-3,
        y0,
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=1e-11, atol=1e-11),
        max_steps=100_000,
    )
    q, qd, work = sol.ys
    E = jax.vmap(
        lambda q_, qd_: jaxmb.kinetic_energy(model, q_, qd_) + jaxmb.potential_energy(model, q_)
    )(q, qd)
    assert float(jnp.ptp(q[:, 2])) > 0.01  # the cylinder really moves
    scale = float(jnp.abs(work).max())
    np.testing.assert_allclose(E - E[0], work, rtol=0, atol=1e-7 * scale)
    # and instantaneously, exactly: d/dt (T + V) via jvp along (qd, qdd)
    q0, qd0 = y0[0], y0[1]
    qdd0 = jaxmb.forward_dynamics(model, q0, qd0, Q_a(0.0, q0))
    _, dE = jax.jvp(
        lambda a, b: kinetic_energy(model, a, b) + potential_energy(model, a),
        (q0, qd0),
        (qd0, qdd0),
    )
    np.testing.assert_allclose(dE, qd0 @ Q_a(0.0, q0), rtol=1e-10)
