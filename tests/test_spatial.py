"""Spatial algebra against definitions written out with numpy."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import rot_x, rot_z, skew_np

import jaxmb
from jaxmb.multibody import spatial


def random_transform(rng):
    A = rng.normal(size=(3, 3))
    Q, R = np.linalg.qr(A)
    Q = Q * np.sign(np.diag(R))
    if np.linalg.det(Q) < 0:
        Q[:, 0] *= -1
    return Q, rng.normal(size=3)


def expm_series(A, terms=40):
    """Matrix exponential by its Taylor series (reference for Rodrigues' formula)."""
    out, term = np.eye(3), np.eye(3)
    for k in range(1, terms):
        term = term @ A / k
        out = out + term
    return out


@pytest.mark.parametrize("seed", range(3))
def test_skew_vee_and_rotations(seed):
    rng = np.random.default_rng(seed)
    w, x = rng.normal(size=(2, 3))
    np.testing.assert_allclose(spatial.skew(w) @ x, np.cross(w, x), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(spatial.vee(spatial.skew(w)), w, rtol=1e-15)
    a = rng.uniform(-4, 4)
    np.testing.assert_allclose(spatial.rot_x(a), rot_x(a), atol=1e-15)
    np.testing.assert_allclose(spatial.rot_z(a), rot_z(a), atol=1e-15)
    ry = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
    np.testing.assert_allclose(spatial.rot_y(a), ry, atol=1e-15)
    axis = w / np.linalg.norm(w)
    np.testing.assert_allclose(
        spatial.rot_axis_angle(axis, a), expm_series(skew_np(axis * a)), atol=1e-12
    )


@pytest.mark.parametrize("seed", range(3))
def test_adjoint_is_a_homomorphism_and_matches_apply(seed):
    rng = np.random.default_rng(seed)
    T1, T2 = random_transform(rng), random_transform(rng)
    Ad = lambda T: np.asarray(spatial.adjoint(*T))  # noqa: E731
    # definition after Dastranj & Mattila eq. (6), written out here
    R, p = T1
    ref = np.block([[R, np.zeros((3, 3))], [skew_np(p) @ R, R]])
    np.testing.assert_allclose(Ad(T1), ref, atol=1e-14)
    T12 = spatial.compose(T1, T2)
    np.testing.assert_allclose(Ad(T12), Ad(T1) @ Ad(T2), atol=1e-12)
    np.testing.assert_allclose(Ad(spatial.inverse(T1)), np.linalg.inv(Ad(T1)), atol=1e-12)
    X = jnp.asarray(rng.normal(size=(6, 4)))
    np.testing.assert_allclose(spatial.adjoint_apply(*T1, X), Ad(T1) @ X, atol=1e-12)
    np.testing.assert_allclose(spatial.adjoint_transpose_apply(*T1, X), Ad(T1).T @ X, atol=1e-12)
    H = np.asarray(spatial.homogeneous(*T1)) @ np.asarray(spatial.homogeneous(*T2))
    np.testing.assert_allclose(spatial.homogeneous(*T12), H, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_wrench_transform_preserves_power(seed):
    rng = np.random.default_rng(seed)
    R, p = random_transform(rng)
    V_B, W_A = rng.normal(size=(2, 6))
    V_A = spatial.adjoint(R, p) @ V_B  # eq. (6)
    W_B = spatial.wrench_transform(R, p, W_A)
    np.testing.assert_allclose(W_B @ V_B, W_A @ V_A, rtol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_spatial_inertia_gives_kinetic_energy(seed):
    rng = np.random.default_rng(seed)
    m, c = rng.uniform(1, 5), rng.normal(size=3)
    A = rng.normal(size=(3, 3))
    I_C = A @ A.T + np.eye(3)
    w, v = rng.normal(size=(2, 3))
    M = spatial.spatial_inertia(m, c, I_C)
    v_com = v + np.cross(w, c)  # velocity of the COM
    T_ref = 0.5 * m * v_com @ v_com + 0.5 * w @ I_C @ w
    V = np.concatenate([w, v])
    np.testing.assert_allclose(0.5 * V @ M @ V, T_ref, rtol=1e-12)


def test_twist_from_transform_matches_frame_jacobian(arm):
    """eq. (1) on the pose's time derivative equals the propagated Jacobian times qd (eq. (5))."""
    rng = np.random.default_rng(7)
    q = jnp.array([0.4, 0.2, 0.12])
    qd = jnp.asarray(rng.normal(size=3)) * jnp.array([1, 1, 0.1])
    for frame in ["B1", "F1", "B2", "C2", "B3", "C3", "F3"]:
        T, T_dot = jax.jvp(lambda q_: jaxmb.frame_pose(arm, q_, frame), (q,), (qd,))  # noqa: B023
        V = spatial.twist_from_transform(T, T_dot)
        np.testing.assert_allclose(V, jaxmb.frame_jacobian(arm, q, frame) @ qd, atol=1e-12)


def test_skew_of_a_batch_is_the_cross_product_matrix_of_each():
    """`skew` (a product with the Levi-Civita symbol) over a batch: each entry exactly the
    written-out bracket, the matrix of numpy's cross product."""
    rng = np.random.default_rng(5)
    W, X = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    S = np.asarray(spatial.skew(jnp.asarray(W)))
    np.testing.assert_array_equal(S, np.stack([skew_np(w) for w in W]))
    np.testing.assert_allclose(np.einsum("kij,kj->ki", S, X), np.cross(W, X), rtol=0, atol=1e-15)
    S2 = np.asarray(spatial.skew(jnp.asarray(rng.normal(size=(2, 4, 3)))))
    assert S2.shape == (2, 4, 3, 3) and np.array_equal(S2, -np.swapaxes(S2, -1, -2))


def test_small_matmul_is_the_matrix_product():
    """`small_matmul` (the fused form of the plant's small products) is numpy's matrix
    product for matrix.vector and matrix.matrix, and so is its forward-mode derivative."""
    rng = np.random.default_rng(3)
    for a, b in [((3, 3), (3,)), ((6, 6), (6,)), ((3, 3), (3, 3)), ((6, 3), (3, 4))]:
        A, B = rng.normal(size=a), rng.normal(size=b)
        got = spatial.small_matmul(jnp.asarray(A), jnp.asarray(B))
        np.testing.assert_allclose(got, A @ B, rtol=1e-13, atol=1e-14, err_msg=f"{a} @ {b}")
    A, B = rng.normal(size=(3, 3)), rng.normal(size=(3, 2))
    dA, dB = rng.normal(size=(3, 3)), rng.normal(size=(3, 2))
    _, t = jax.jvp(spatial.small_matmul, (jnp.asarray(A), jnp.asarray(B)),
                   (jnp.asarray(dA), jnp.asarray(dB)))  # fmt: skip
    np.testing.assert_allclose(t, dA @ B + A @ dB, rtol=1e-13, atol=1e-14)
    # shapes that `@` would refuse are refused, not silently summed: by the shape annotations
    # where jaxtyping checks them (the tests), else by the function's own check
    bare = inspect.unwrap(spatial.small_matmul)
    for a, b in [((3, 1), (3,)), ((2, 3, 3), (3,)), ((3, 3), (2, 3, 3))]:
        with pytest.raises(TypeError):
            spatial.small_matmul(jnp.ones(a), jnp.ones(b))
        with pytest.raises(ValueError, match="small_matmul: expected a matrix"):
            bare(jnp.ones(a), jnp.ones(b))
    # the composed transforms agree either way
    T1 = (jnp.asarray(spatial.rot_axis_angle(jnp.array([0.0, 0.6, 0.8]), 0.7)), jnp.ones(3))
    T2 = (jnp.asarray(spatial.rot_z(0.3)), jnp.array([0.1, -0.2, 0.3]))
    for x, y in zip(spatial.compose(T1, T2, fused=True), spatial.compose(T1, T2), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-14, atol=1e-15)
