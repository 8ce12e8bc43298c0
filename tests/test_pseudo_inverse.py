"""The tolerance-aware pseudo-inverse against numpy, and its derivative against finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmb.constraints.pseudo_inverse import pinv, rank


@pytest.mark.parametrize("shape", [(2, 5), (5, 2), (4, 4)])
def test_full_rank_matches_numpy(shape):
    a = np.random.default_rng(0).normal(size=shape)
    np.testing.assert_allclose(pinv(jnp.asarray(a)), np.linalg.pinv(a), rtol=1e-12, atol=1e-12)


def test_rank_deficient_and_zero():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(4, 2)) @ rng.normal(size=(2, 6))  # rank 2
    p = np.asarray(pinv(jnp.asarray(a)))
    assert int(rank(jnp.asarray(a))) == 2
    np.testing.assert_allclose(p, np.linalg.pinv(a, rcond=1e-10), atol=1e-10)
    # the four Penrose conditions
    np.testing.assert_allclose(a @ p @ a, a, atol=1e-12)
    np.testing.assert_allclose(p @ a @ p, p, atol=1e-12)
    np.testing.assert_allclose((a @ p).T, a @ p, atol=1e-12)
    np.testing.assert_allclose((p @ a).T, p @ a, atol=1e-12)
    assert np.all(np.asarray(pinv(jnp.zeros((1, 3)))) == 0)


def test_absolute_floor():
    """A one-row matrix of round-off is zero for pinv, although numpy inverts it (~1e16)."""
    a = jnp.array([[-1.2e-16, -2.3e-16]])
    assert np.all(np.asarray(pinv(a)) == 0)
    assert np.abs(np.linalg.pinv(np.asarray(a))).max() > 1e15
    assert int(rank(a)) == 0
    assert int(rank(jnp.array([[1e-8, 0.0]]))) == 1  # above the default floor
    assert int(rank(jnp.array([[1e-8, 0.0]]), atol=1e-6)) == 0


@pytest.mark.parametrize("rank_", [3, 2])
def test_jvp_matches_finite_differences(rank_):
    """Golub & Pereyra's formula at constant rank, including a rank-deficient matrix moved
    along a rank-preserving direction."""
    rng = np.random.default_rng(2)
    U, V = rng.normal(size=(3, rank_)), rng.normal(size=(rank_, 5))
    dU, dV = rng.normal(size=U.shape), rng.normal(size=V.shape)

    def f(t):
        return pinv((U + t * dU) @ (V + t * dV))

    _, jvp = jax.jvp(f, (0.0,), (1.0,))
    eps = 1e-6
    fd = (f(eps) - f(-eps)) / (2 * eps)
    np.testing.assert_allclose(jvp, fd, rtol=1e-6, atol=1e-7)


def test_gradient_finite_at_zero_matrix():
    g = jax.grad(lambda a: jnp.sum(pinv(a) ** 2 + pinv(a)))(jnp.zeros((2, 3)))
    assert np.all(np.isfinite(np.asarray(g)))


def test_bad_arguments():
    with pytest.raises(ValueError, match="atol"):
        pinv(jnp.zeros((2, 2)), atol=-1.0)
