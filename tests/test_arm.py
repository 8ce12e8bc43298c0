"""The 3-DoF series-parallel arm of Dastranj & Mattila (2026) Section IV (shared/specs)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import SPEC_L0, SPEC_l0, arm_state, body_mass_matrices, mass_matrix, rot_x

import jaxmb

STROKE = np.linspace(0.0, 0.2, 9)


def dzeta_ddelta_eq28(delta):
    """Dastranj & Mattila (2026) eq. (28), typed in from the paper."""
    c = (delta + SPEC_l0) ** 2 / (2 * SPEC_L0**2) - 1
    return (delta + SPEC_l0) / (SPEC_L0**2 * np.sqrt(1 - c**2))


@pytest.mark.parametrize("delta", [0.0, 0.05, 0.1, 0.15, 0.2, 0.27])
def test_E_from_autodiff_equals_eq_26_28(arm, delta):
    q = jnp.array([0.3, -0.2, delta])
    E = jaxmb.coordinate_map_jacobian(arm, q)
    E_ref = np.diag([1.0, 1.0, dzeta_ddelta_eq28(delta)])  # eq. (26)
    np.testing.assert_allclose(E, E_ref, rtol=1e-12, atol=1e-15)
    zeta = jaxmb.augmented_coordinates(arm, q)[2]
    # the triangle: |AB| = 2 L0 cos(zeta/2) = l0 + delta, with zeta in (-pi, 0)
    assert -np.pi < zeta < 0
    np.testing.assert_allclose(2 * SPEC_L0 * np.cos(zeta / 2), SPEC_l0 + delta, rtol=1e-13)


def test_table_I_distance_vectors(arm):
    """The spec's frames reproduce the paper's Table I."""
    q = jnp.array([0.2, 0.4, 0.1])

    def p_AB(A, B):  # origin of B in A coordinates
        T = np.linalg.inv(np.asarray(jaxmb.frame_pose(arm, q, A))) @ np.asarray(
            jaxmb.frame_pose(arm, q, B)
        )
        return T[:3, 3]

    table = {
        ("C1", "B1"): [0, 0, -0.103],
        ("F1", "B1"): [0, -0.206, -0.075],
        ("C2", "B2"): [-0.959, -0.001, 0.077],
        ("F2", "B2"): [-2, 0, 0],
        ("C3", "B3"): [-1.041, -0.001, 0.077],
        ("F3", "B3"): [-2, 0, 0],
    }
    for (A, B), ref in table.items():
        np.testing.assert_allclose(p_AB(A, B), ref, atol=1e-12, err_msg=f"p_{A}{B}")
    R_B1F1 = (np.linalg.inv(jaxmb.frame_pose(arm, q, "B1")) @ jaxmb.frame_pose(arm, q, "F1"))[
        :3, :3
    ]
    np.testing.assert_allclose(R_B1F1, rot_x(np.pi / 2), atol=1e-12)


def test_gamma_spd_over_the_stroke_and_sum_of_parts(arm):
    rng = np.random.default_rng(0)
    for delta in STROKE:
        q, _ = arm_state(rng)
        q = jnp.asarray(q[0]).at[2].set(delta)
        G = np.asarray(mass_matrix(arm, q))
        parts = np.asarray(body_mass_matrices(arm, q))
        np.testing.assert_allclose(parts.sum(0), G, rtol=1e-13, atol=1e-12)  # eq. (10)
        np.testing.assert_allclose(G, G.T, atol=1e-12)
        assert np.linalg.eigvalsh(G).min() > 1e-3
        for P in parts:  # each Gamma_i is symmetric positive semidefinite
            assert np.linalg.eigvalsh(P).min() > -1e-9 * np.abs(P).max()


def test_full_model_adds_only_cylinder_and_piston_terms(arm, arm_full):
    rng = np.random.default_rng(1)
    q, _ = arm_state(rng, 5)
    for qi in q:
        nominal = np.asarray(body_mass_matrices(arm, qi))
        full = np.asarray(body_mass_matrices(arm_full, qi))
        assert arm_full.body_names == ("base", "link1", "link2", "cylinder", "piston")
        np.testing.assert_allclose(full[:3], nominal, rtol=1e-13, atol=1e-12)
        diff = np.asarray(mass_matrix(arm_full, qi) - mass_matrix(arm, qi))
        np.testing.assert_allclose(diff, full[3:].sum(0), rtol=1e-12, atol=1e-12)
        assert np.abs(full[3:]).max() > 1e-3  # the cylinder and piston do contribute


def test_cylinder_frames_follow_the_triangle(arm_full):
    """K sits at A with x_K towards B; P's origin is B = [L0, 0, 0] in B3 (the spec)."""
    q = jnp.array([0.1, 0.5, 0.13])
    T_K = np.asarray(jaxmb.frame_pose(arm_full, q, "K"))
    T_P = np.asarray(jaxmb.frame_pose(arm_full, q, "P"))
    T_B3 = np.asarray(jaxmb.frame_pose(arm_full, q, "B3"))
    B = T_B3 @ np.array([SPEC_L0, 0, 0, 1])
    np.testing.assert_allclose(T_P[:3, 3], B[:3], atol=1e-12)
    AB = B[:3] - T_K[:3, 3]
    np.testing.assert_allclose(np.linalg.norm(AB), SPEC_l0 + 0.13, rtol=1e-12)
    np.testing.assert_allclose(T_K[:3, 0], AB / np.linalg.norm(AB), atol=1e-12)


def test_coordinate_names(arm, arm_full):
    assert arm.coordinate_names == ("phi", "theta", "delta")
    assert arm_full.coordinate_names == ("phi", "theta", "delta")
    assert arm_full.augmented_names == ("phi", "theta", "zeta", "alpha", "s")
    assert {"B1", "C1", "F1", "B2", "C2", "F2", "B3", "C3", "F3"} <= set(arm.frame_names)


def test_delta_outside_the_chain_domain_raises(arm):
    with pytest.raises(RuntimeError, match="outside the triangle's domain"):
        jax.block_until_ready(mass_matrix(arm, jnp.array([0.0, 0.0, 0.3])))


def test_gravity_force_matches_the_papers_formula(arm):
    """Q = sum_i J_Ci^T [0; m_i R_CiS g] (formula after Table II), evaluated literally."""
    q = jnp.array([0.3, 0.6, 0.08])
    g = np.array([0, 0, -9.81])
    Q = np.zeros(3)
    for body in arm.bodies:
        R_SC = np.asarray(jaxmb.frame_pose(arm, q, body.com_frame))[:3, :3]
        W = np.concatenate([np.zeros(3), float(body.mass) * R_SC.T @ g])
        Q += np.asarray(jaxmb.frame_jacobian(arm, q, body.com_frame)).T @ W
    np.testing.assert_allclose(jaxmb.gravity_forces(arm, q), Q, rtol=1e-12, atol=1e-10)
