r"""The Moore-Penrose pseudo-inverse with an absolute and a relative singular-value tolerance,
differentiable everywhere (Aghili (2005) eq. (15) needs it at singular configurations).

``jax.numpy.linalg.pinv`` cuts singular values only relative to the largest one. A constraint
Jacobian with a single row (the slider-crank's) is then never rank-deficient in floating point:
at the singular configuration its entries are round-off of ~1e-16 and the "pseudo-inverse" is
~1e16. Aghili (2005) Section 8 treats singular values below an absolute threshold ``epsilon`` as
zero, which is what `pinv` does with ``atol``.

Derivative: where the rank is locally constant, Golub & Pereyra (1973, SIAM J. Numer. Anal.
10(2), Thm. 4.3)

    d(A^+) = -A^+ dA A^+ + A^+ A^{+T} dA^T (I - A A^+) + (I - A^+ A) dA^T A^{+T} A^+ .

Implemented as a custom JVP, so neither the SVD's own derivative (which divides by differences
of singular values and is NaN for the repeated zeros of a rank-deficient matrix) nor ``1/s`` at
a cut singular value ever enters a gradient. At the threshold itself the pseudo-inverse is
discontinuous, and the formula gives the derivative of the branch that was taken.
"""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

__all__ = ["ATOL", "pinv", "rank"]

ATOL = 1e-9
"""Default absolute singular-value floor, in the units of the matrix (for a constraint Jacobian:
constraint units per coordinate unit, e.g. m/rad). Right for mechanisms of 0.1-10 m in float64."""


def _cutoff(s: Array, shape: tuple[int, int], atol: float, rtol: float | None) -> Array:
    if rtol is None:
        rtol = max(shape) * float(jnp.finfo(s.dtype).eps)  # numpy's matrix_rank convention
    s_max = s[0] if s.shape[0] else jnp.zeros((), s.dtype)
    return jnp.maximum(atol, rtol * s_max)


def rank(a: Float[ArrayLike, "m n"], atol: float = ATOL, rtol: float | None = None) -> Array:
    """Number of singular values above ``max(atol, rtol * s_max)`` (the numerical rank `pinv` uses)."""
    a = jnp.asarray(a)
    s = jnp.linalg.svd(a, compute_uv=False)
    return jnp.sum(s > _cutoff(s, a.shape, atol, rtol))


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _pinv(a, atol, rtol):
    u, s, vt = jnp.linalg.svd(a, full_matrices=False)
    keep = s > _cutoff(s, a.shape, atol, rtol)
    s_inv = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)  # double where: no 1/0 anywhere
    return (vt.T * s_inv[None, :]) @ u.T


@_pinv.defjvp
def _pinv_jvp(atol, rtol, primals, tangents):
    (a,), (da,) = primals, tangents
    p = _pinv(a, atol, rtol)  # n x m
    eye_n = jnp.eye(a.shape[1], dtype=a.dtype)
    eye_m = jnp.eye(a.shape[0], dtype=a.dtype)
    dp = (
        -p @ da @ p
        + p @ p.T @ da.T @ (eye_m - a @ p)  # Golub & Pereyra (1973) Thm. 4.3
        + (eye_n - p @ a) @ da.T @ p.T @ p
    )
    return p, dp


def pinv(
    a: Float[ArrayLike, "m n"], atol: float = ATOL, rtol: float | None = None
) -> Float[Array, "n m"]:
    r"""$A^+$ by the SVD, singular values $\le \max(\mathrm{atol}, \mathrm{rtol}\, s_{max})$ taken as zero.

    Args:
        a: an (m, n) matrix; m may exceed n (redundant constraints) and ``a`` may be all zero.
        atol: absolute floor (Aghili (2005) eq. (70)'s epsilon), in the units of ``a``.
        rtol: relative floor; default ``max(m, n) * eps`` of the dtype, so that round-off rows
            (e.g. a constraint that is identically zero up to 1e-17) count as rank-deficient.
    """
    a = jnp.asarray(a)
    if a.ndim != 2:
        raise ValueError(f"pinv: expected a 2-D matrix, got shape {a.shape}")
    if not atol >= 0 or (rtol is not None and not rtol >= 0):
        raise ValueError(f"pinv: atol and rtol must be >= 0, got atol={atol}, rtol={rtol}")
    return _pinv(a, float(atol), None if rtol is None else float(rtol))
