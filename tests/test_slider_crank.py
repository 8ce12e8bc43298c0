"""Aghili (2005) Section 8: the slider-crank from the generic machinery against the paper's closed
forms (eqs. 66-71), through its singular configurations (eq. 65)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmb
from jaxmb.constraints import projection as pj
from jaxmb.simulation import DriftCorrection, simulate

M_, L_, G_ = 1.3, 0.7, 9.81
SYSTEM = jaxmb.models.slider_crank(M_, L_, G_)
P_REGULAR = np.array([[1 / 5, -2 / 5], [-2 / 5, 4 / 5]])  # eq. (70), the matrix
SINGULAR = [(np.pi / 2, np.pi), (-np.pi / 2, np.pi), (3 * np.pi / 2, np.pi)]  # eq. (65), q2 = pi


def on_branch(q1):
    """The slider-crank branch q2 = 2 pi - 2 q1 (Section 8)."""
    return jnp.array([q1, 2 * np.pi - 2 * q1])


def test_mass_matrix_bias_and_jacobian_equal_eqs_68_69():
    rng = np.random.default_rng(0)
    for q, qd in zip(rng.uniform(-np.pi, np.pi, (5, 2)), rng.normal(size=(5, 2)), strict=True):
        c1, c2, s2, c12 = np.cos(q[0]), np.cos(q[1]), np.sin(q[1]), np.cos(q[0] + q[1])
        terms = pj.projected_terms(SYSTEM, q, qd)
        M = M_ * L_**2 * np.array([[3 + 2 * c2, 1 + c2], [1 + c2, 1]])  # eq. (68)
        h = np.array(
            [
                -M_ * L_**2 * s2 * (qd[1] ** 2 + 2 * qd[0] * qd[1]) + M_ * L_ * G_ * (c12 + 2 * c1),
                M_ * L_**2 * s2 * qd[0] ** 2 + M_ * L_ * G_ * c12,
            ]
        )  # eq. (68)
        A = L_ * np.array([[c1 + c12, c12]])  # eq. (69)
        np.testing.assert_allclose(terms.M, M, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(terms.h, h, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(terms.A, A, rtol=1e-12, atol=1e-12)
        y_C = L_ * (np.sin(q[0]) + np.sin(q[0] + q[1]))  # eq. (66)
        np.testing.assert_allclose(pj.constraint_residual(SYSTEM, q), [y_C], atol=1e-12)


@pytest.mark.parametrize("q", SINGULAR)
def test_projector_and_constraint_inertia_at_singular_configurations(q):
    """Eq. (70)-(71), with the paper's erratum mended. At q1 = n pi/2 the Jacobian is zero
    (round-off of 1e-16 in floating point), its singular value is below epsilon, A^+ = 0 and so
    P = I - A^+ A = I: the constraint is "virtually removed", as the text says. Eq. (70) prints
    its two cases the other way round; the constant matrix is P everywhere else on the branch
    (A = l c1 [2 1]), and eq. (71) is M''c there. At the singularity M'c = M''c = M, as the text
    after eq. (71) says of M'c."""
    terms = pj.projected_terms(SYSTEM, jnp.asarray(q), jnp.zeros(2))
    np.testing.assert_array_equal(terms.P, np.eye(2))
    gamma = M_ * L_**2
    for form in ("symmetric", "gamma"):
        Mc, _ = pj.constraint_inertia(terms, form, gamma)
        np.testing.assert_allclose(Mc, terms.M, rtol=1e-14)


@pytest.mark.parametrize("q1", [0.3, 1.2, 2.0, -2.5])
def test_projector_and_eq_71_on_the_regular_branch(q1):
    q = on_branch(q1)
    terms = pj.projected_terms(SYSTEM, q, jnp.array([1.0, -2.0]))
    np.testing.assert_allclose(terms.P, P_REGULAR, atol=1e-12)  # eq. (70)
    c2 = np.cos(q[1])
    eq71 = M_ * L_**2 * np.array([[1, (1 + c2) / 5], [0, (3 - 2 * c2) / 5]])
    Mc, _ = pj.constraint_inertia(terms, "gamma", M_ * L_**2)
    np.testing.assert_allclose(Mc, eq71, rtol=1e-12, atol=1e-12)  # eq. (71)
    np.testing.assert_allclose(terms.Cqd, 0.0, atol=1e-12)  # "C = 0 for this example"


def test_tolerance_band_of_eq_70():
    """A^+ = 0 iff sigma(A) = sqrt(5) l |c1| < epsilon: the documented absolute tolerance."""
    eps = SYSTEM.atol
    for factor, expected in ((0.5, np.eye(2)), (2.0, P_REGULAR)):
        c1 = factor * eps / (L_ * np.sqrt(5))
        P = pj.projector(SYSTEM, on_branch(np.arccos(c1)))
        np.testing.assert_allclose(P, expected, atol=1e-6)


def test_forms_agree_and_gradients_finite_at_the_singularity():
    q, qd = jnp.array(SINGULAR[0]), jnp.array([1.0, -2.0])
    f = jnp.array([0.3, -0.2])
    qdds = [pj.forward_dynamics(SYSTEM, q, qd, f, inertia=form) for form in pj.INERTIA_FORMS]
    for qdd in qdds[1:]:
        np.testing.assert_allclose(qdd, qdds[0], rtol=1e-12)

    def loss(q, m):
        return jnp.sum(pj.forward_dynamics(jaxmb.models.slider_crank(m, L_, G_), q, qd, f) ** 2)

    for point in (q, on_branch(np.pi / 2 + 1e-7)):  # at and near the singular point
        gq, gm = jax.grad(loss, argnums=(0, 1))(point, M_)
        assert np.all(np.isfinite(np.asarray(gq))) and np.isfinite(float(gm))
    # away from it, reverse mode agrees with finite differences
    point = on_branch(0.4)
    gq = jax.grad(loss)(point, M_)
    d = 1e-6
    fd = [
        (loss(point.at[i].add(d), M_) - loss(point.at[i].add(-d), M_)) / (2 * d) for i in range(2)
    ]
    np.testing.assert_allclose(gq, fd, rtol=1e-6)


def test_ten_second_run_through_singularities():
    """No gravity, no input: the crank turns through q1 = pi/2 + n pi six times. Reached:
    max |Phi| ~ 1e-12 (the drift tolerance) and relative energy drift ~ 2e-7."""
    system = jaxmb.models.slider_crank(M_, L_, 0.0)
    w = 3.0
    ts = jnp.linspace(0.0, 10.0, 1001)
    traj = simulate(
        system,
        lambda t, q, qd, d: jnp.zeros(2),
        lambda t: jnp.zeros(2),
        jnp.zeros(2),
        jnp.array([w, -2 * w]),
        ts,
        correction=DriftCorrection(tol=1e-12),
    )
    c1 = np.cos(np.asarray(traj.q[:, 0]))
    passes = int(np.sum(np.sign(c1[1:]) != np.sign(c1[:-1])))
    assert passes >= 4, passes
    phi = jax.vmap(lambda q: pj.constraint_residual(system, q))(traj.q)
    T = jax.vmap(lambda q, qd: jaxmb.kinetic_energy(system.model, q, qd))(traj.q, traj.qd)
    drift = float(jnp.max(jnp.abs(T / T[0] - 1)))
    print(
        f"slider-crank: {passes} singular passes, max|Phi| {float(jnp.abs(phi).max()):.2e}, energy drift {drift:.2e}"
    )
    assert float(jnp.abs(phi).max()) < 1e-9
    assert drift < 1e-4
    # and it stays on the slider-crank branch q2 = -2 q1 (mod 2 pi) through every singular point
    wrap = np.asarray(traj.q[:, 1] + 2 * traj.q[:, 0])
    np.testing.assert_allclose(np.angle(np.exp(1j * wrap)), 0.0, atol=1e-8)


def test_simulation_gradient_and_vmap():
    """Reverse mode through the drift-corrected solve agrees with finite differences, and a
    vmapped batch of runs equals the runs one by one."""
    ts = jnp.linspace(0.0, 0.5, 6)

    def final_angle(a):
        traj = simulate(
            SYSTEM,
            lambda t, q, qd, d: jnp.zeros(2),
            lambda t: jnp.zeros(2),
            on_branch(a),
            jnp.zeros(2),
            ts,
        )
        return traj.q[-1, 0]

    g = jax.grad(final_angle)(0.3)
    d = 1e-5
    fd = (final_angle(0.3 + d) - final_angle(0.3 - d)) / (2 * d)
    np.testing.assert_allclose(g, fd, rtol=1e-5)
    batch = jax.vmap(final_angle)(jnp.array([0.3, 0.5]))
    np.testing.assert_allclose(batch, [final_angle(0.3), final_angle(0.5)], rtol=1e-10)
