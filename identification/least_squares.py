r"""Ordinary and weighted least squares on a base regressor, with the statistics a user needs to
trust the estimate: standard deviations, confidence intervals, the condition number and the
directions the data do not determine.

For ``y = W theta + e`` with ``e ~ N(0, sigma^2 Sigma)`` and weights ``w = 1/sigma_row``, the
weighted estimate is ``theta = argmin ||w (W theta - y)||^2`` and, with ``A = diag(w) W``,

    sigma^2 = ||w (W theta - y)||^2 / (m - r) ,   Cov(theta) = sigma^2 (A^T A)^{-1}

(Gautier & Poignet (2001) "Extended Kalman filtering and weighted least squares dynamic
identification of robot", their weighting: one noise level per joint equation, estimated from
the ordinary least-squares residuals and then used as weights — `least_squares(..., groups=)`).
The same formulas apply to a nonlinear fit with ``A`` its residual Jacobian at the optimum
(`covariance_from_jacobian`).
"""

from __future__ import annotations

import equinox as eqx
import numpy as np
import scipy.optimize
import scipy.stats
from jaxtyping import Float, Int

__all__ = [
    "LeastSquaresFit",
    "least_squares",
    "covariance_from_jacobian",
    "weak_directions",
    "model_decrease",
]


class LeastSquaresFit(eqx.Module):
    """A (weighted) least-squares estimate and its statistics.

    Attributes:
        theta: the estimate.
        std: standard deviations of the estimate.
        cov: covariance matrix.
        sigma2: residual variance of the (weighted) equations.
        condition: 2-norm condition number of the column-scaled weighted regressor (units do not
            inflate it; Gautier's excitation criterion).
        row_sigma: per-group noise levels used as weights (ones for OLS).
        dof: degrees of freedom m - r.
    """

    theta: Float[np.ndarray, " r"]
    std: Float[np.ndarray, " r"]
    cov: Float[np.ndarray, "r r"]
    sigma2: float
    condition: float
    row_sigma: Float[np.ndarray, " g"]
    dof: int

    def interval(self, level: float = 0.95) -> Float[np.ndarray, "r 2"]:
        """Two-sided confidence intervals (Student t with `dof` degrees of freedom)."""
        if not 0 < level < 1:
            raise ValueError(f"level: expected a probability in (0, 1), got {level}")
        k = scipy.stats.t.ppf(0.5 + level / 2, max(self.dof, 1))
        return np.stack([self.theta - k * self.std, self.theta + k * self.std], axis=-1)

    def inflated(self, factor: float) -> LeastSquaresFit:
        """The same estimate with variances times ``factor`` (e.g. for residuals correlated
        over ``factor`` rows, as after a low-pass filter: fewer independent equations)."""
        if not factor >= 1:
            raise ValueError(f"factor: expected >= 1, got {factor}")
        return LeastSquaresFit(
            theta=self.theta,
            std=self.std * np.sqrt(factor),
            cov=self.cov * factor,
            sigma2=self.sigma2 * factor,
            condition=self.condition,
            row_sigma=self.row_sigma,
            dof=self.dof,
        )

    @property
    def relative_std(self) -> Float[np.ndarray, " r"]:
        """``std / |theta|`` in percent: above ~10 % a parameter is poorly identified."""
        return 100.0 * self.std / np.maximum(np.abs(self.theta), 1e-300)


def _scaled_condition(A: np.ndarray) -> float:
    n = np.linalg.norm(A, axis=0)
    s = np.linalg.svd(A / np.where(n > 0, n, 1.0), compute_uv=False)
    return float(s[0] / s[-1]) if s[-1] > 0 else float("inf")


def covariance_from_jacobian(
    A: Float[np.ndarray, "m r"], residual: Float[np.ndarray, " m"]
) -> tuple[np.ndarray, float, int]:
    """``(cov, sigma^2, dof)`` from a (weighted) residual Jacobian at the optimum (see the module
    docstring). A rank-deficient ``A`` gives infinite variances in the null space directions
    (pseudo-inverse plus ``inf`` on the diagonal) instead of silently finite numbers."""
    A = np.asarray(A, dtype=float)
    residual = np.asarray(residual, dtype=float)
    m, r = A.shape
    dof = m - r
    if dof <= 0:
        raise ValueError(f"too few equations ({m}) for {r} parameters: no variance estimate")
    sigma2 = float(residual @ residual / dof)
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    keep = s > s[0] * 1e-12
    cov = sigma2 * (Vt[keep].T / s[keep] ** 2) @ Vt[keep]
    if not keep.all():
        null = Vt[~keep]
        cov = cov + np.diag(np.where(np.abs(null).max(axis=0) > 1e-8, np.inf, 0.0))
    return cov, sigma2, dof


def model_decrease(
    r: Float[np.ndarray, " m"],
    J: Float[np.ndarray, "m p"],
    theta: Float[np.ndarray, " p"],
    lower: Float[np.ndarray, " p"],
    upper: Float[np.ndarray, " p"],
) -> float:
    """The most any step from ``theta`` within ``[lower, upper]`` can lower ``1/2 |r|^2``
    by the linear (Gauss-Newton) model ``r + J dtheta``: the model's box-constrained
    least-squares step (scipy's bounded-variable ``lsq_linear``). A nonlinear least-squares
    fit whose model decrease is a small fraction of its cost has converged, which no further
    evaluation needs to confirm: near the optimum the model's decrease is what a step
    achieves, up to the residuals' curvature that Gauss-Newton leaves out. (Fixing the
    parameters that sit on a bound is not enough: with the others refitted, a parameter on
    a bound may gain by moving inward.)"""
    r = np.asarray(r, float)
    step = scipy.optimize.lsq_linear(J, -r, bounds=(lower - theta, upper - theta), method="bvls").x
    Js = J @ step
    return -float(r @ Js) - 0.5 * float(Js @ Js)  # without cancelling against the cost


def least_squares(
    W: Float[np.ndarray, "m r"],
    y: Float[np.ndarray, " m"],
    *,
    groups: Int[np.ndarray, " m"] | None = None,
    weights: Float[np.ndarray, " m"] | None = None,
    iterations: int = 10,
) -> LeastSquaresFit:
    """OLS, or WLS with given row ``weights``, or Gautier's WLS with one noise level per row
    group (e.g. per joint: ``groups = row index mod n``), re-estimated from the weighted
    residuals up to ``iterations`` times.

    Raises for too few equations, non-finite data and a rank-deficient regressor (reduce it to
    base parameters first, `regressor.base_parameters`)."""
    W = np.asarray(W, dtype=float)
    y = np.asarray(y, dtype=float)
    if W.ndim != 2 or y.shape != (W.shape[0],):
        raise ValueError(f"W, y: expected shapes (m, r) and (m,), got {W.shape} and {y.shape}")
    m, r = W.shape
    if m <= r:
        raise ValueError(f"too few equations: {m} rows for {r} parameters")
    if not (np.isfinite(W).all() and np.isfinite(y).all()):
        raise ValueError("W, y: non-finite entries (NaN or inf) in the regressor or the data")
    if groups is not None and weights is not None:
        raise ValueError("give either groups (two-step WLS) or weights, not both")

    def solve(w):
        A, b = W * w[:, None], y * w
        theta, *_ = np.linalg.lstsq(A, b, rcond=None)
        return theta, A, b - A @ theta

    row_sigma = np.ones(1)
    w = np.ones(m) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (m,) or not (np.isfinite(w).all() and (w > 0).all()):
        raise ValueError(f"weights: expected {m} finite positive numbers")
    theta, A, res = solve(w)
    norms = np.linalg.norm(A, axis=0)
    rank = np.linalg.matrix_rank(A / np.where(norms > 0, norms, 1.0))  # units do not count
    if rank < r:
        raise ValueError(
            f"the regressor has rank {rank} < {r} columns: reduce it to "
            "base parameters (regressor.base_parameters) or excite the system more"
        )
    if groups is not None:
        groups = np.asarray(groups)
        if groups.shape != (m,):
            raise ValueError(f"groups: expected shape ({m},), got {groups.shape}")
        labels = np.unique(groups)
        index = np.searchsorted(labels, groups)
        counts = np.bincount(index)
        # per-group noise level from the residuals (Gautier & Poignet (2001)); iterated, because
        # OLS residuals of a precise group carry the imprecise groups' error through the shared
        # estimate and overstate its noise
        for _ in range(iterations):
            raw = (y - W @ theta) ** 2
            dof_share = 1.0 - r / m  # each group's share of the lost degrees of freedom
            new = np.sqrt(np.bincount(index, weights=raw) / (counts * dof_share))
            new = np.maximum(new, 1e-12 * max(new.max(), 1e-300))
            converged = (
                np.allclose(new, row_sigma, rtol=1e-3) if row_sigma.shape == new.shape else False
            )
            row_sigma = new
            theta, A, res = solve(1.0 / row_sigma[index])
            if converged:
                break
    cov, sigma2, dof = covariance_from_jacobian(A, res)
    return LeastSquaresFit(
        theta=theta,
        std=np.sqrt(np.diag(cov)),
        cov=cov,
        sigma2=sigma2,
        condition=_scaled_condition(A),
        row_sigma=row_sigma,
        dof=dof,
    )


def weak_directions(
    A: Float[np.ndarray, "m r"], names: tuple[str, ...], *, rtol: float = 1e-6, top: int = 3
) -> list[dict]:
    """Directions of parameter space the data barely determine: right singular vectors of the
    column-scaled ``A`` whose singular value is below ``rtol`` times the largest, each with its
    relative singular value and the parameters that dominate it."""
    A = np.asarray(A, dtype=float)
    n = np.linalg.norm(A, axis=0)
    _, s, Vt = np.linalg.svd(A / np.where(n > 0, n, 1.0), full_matrices=False)
    out = []
    for sv, v in zip(s, Vt, strict=True):
        if sv < rtol * s[0]:
            idx = np.argsort(-np.abs(v))[:top]
            out.append(
                {
                    "relative_singular_value": float(sv / s[0]),
                    "parameters": {names[i]: float(v[i]) for i in idx},
                }
            )
    return out
