r"""A least-squares estimate's covariance when its residuals are correlated in time
(heteroscedasticity and autocorrelation consistent, HAC: Newey & West 1987).

``sigma^2 (J^T J)^{-1}`` holds for white residuals. An output-error fit's are not: an
encoder's quantisation error stays put while the joint creeps, and a replay's small flow
error builds up over a segment, so neighbouring samples carry much the same information and
the classic covariance counts them as independent (measured on the mobile example's long
refit: the telescope's position residuals correlate 0.7 from one 10 ms sample to the next
and 0.3 a second apart, the pressures' below 0.05). The sandwich

    Cov(theta) = (J^T J)^{-1} M (J^T J)^{-1},
    M = sum_g sum_{t, t'} w(t - t') s_gt s_gt'^T,   s_gt = sum_c J_gtc r_gtc,

counts them by how much they correlate: ``s_gt`` is the score (the cost's gradient) of the
residuals of series ``g`` (a segment, or a chain of pieces) at time ``t``, over every signal
``c``; series are taken as independent (each starts from its own state; consecutive segments
of one log do share the error of the samples at their boundary, which this leaves out). With Bartlett's weights
``w(l) = 1 - |l| / (L + 1)`` (Newey & West 1987, eq. 2) ``M`` is positive semi-definite, and
``M = sum_g sum_u S_gu S_gu^T / (L + 1)`` with ``S_gu`` the sum of ``L + 1`` consecutive
scores (zero beyond the series' ends): the cost is the series' length, not its square.
White residuals of variance ``sigma^2`` give ``M = sigma^2 J^T J`` in expectation: the
classic covariance.

The bandwidth ``L`` is chosen from the scores (Andrews 1991, eqs. 6.2 and 6.4, the AR(1)
plug-in for Bartlett's kernel, every score weighted alike), at most the series' length."""

from __future__ import annotations

import numpy as np
from jaxtyping import Float

__all__ = ["bandwidth", "long_run_covariance", "scores"]

# an AR(1) coefficient is held within this of +-1: the plug-in's (1 - rho)^-6 would
# otherwise turn a random-walk-like score into an unbounded bandwidth before the cap
_RHO_MAX = 0.97


def scores(
    J: Float[np.ndarray, "N P"], r: Float[np.ndarray, " N"], series: tuple[int, int]
) -> Float[np.ndarray, "G S P"]:
    """Each time sample's score ``s_gt`` (module docstring): ``J``'s rows times the residuals,
    summed over the signals, for residuals ordered (series, sample, signal) with ``series =
    (G, S)``: G series of S samples (``N`` divisible by ``G S``)."""
    G, S = series
    N, P = J.shape
    if N % (G * S):
        raise ValueError(f"scores: {N} residual rows are not {G} series of {S} samples")
    return (J * r[:, None]).reshape(G, S, N // (G * S), P).sum(axis=2)


def bandwidth(s: Float[np.ndarray, "G S P"]) -> int:
    """Bartlett's bandwidth for the scores ``s`` by Andrews' AR(1) plug-in (module docstring):
    his kernel scale ``S_T = 1.1447 (alpha S)^(1/3)`` from each score's lag-one coefficient
    ``rho_a`` and innovation variance ``v_a``, ``alpha = sum 4 rho^2 v^2 / ((1 - rho)^6 (1 +
    rho)^2) / sum v^2 / (1 - rho)^4``. His weights ``1 - |l| / S_T`` are ours with ``L + 1 =
    S_T``: ``L = ceil(S_T) - 1``, within ``0 .. S - 1``."""
    G, S, _ = s.shape
    if S < 3:
        return 0
    x0, x1 = s[:, :-1].reshape(-1, s.shape[2]), s[:, 1:].reshape(-1, s.shape[2])
    den0 = np.sum(x0 * x0, axis=0)
    live = den0 > 0  # a score that is zero throughout (a parameter the series do not see)
    if not live.any():
        return 0
    rho = np.clip(np.sum(x0 * x1, axis=0)[live] / den0[live], -_RHO_MAX, _RHO_MAX)
    v = np.mean((x1[:, live] - rho * x0[:, live]) ** 2, axis=0)
    num = np.sum(4 * rho**2 * v**2 / ((1 - rho) ** 6 * (1 + rho) ** 2))
    den = np.sum(v**2 / (1 - rho) ** 4)
    if not den > 0:
        return 0
    return int(min(max(np.ceil(1.1447 * (num / den * S) ** (1 / 3)) - 1, 0), S - 1))


def long_run_covariance(s: Float[np.ndarray, "G S P"], L: int) -> Float[np.ndarray, "P P"]:
    """``M`` of the module docstring: Bartlett-weighted autocovariances of the scores ``s``
    up to lag ``L`` (0: their plain sum of squares, White's), summed over the series."""
    if L == 0:
        return np.einsum("gtp,gtq->pq", s, s)
    G, S, P = s.shape
    c = np.concatenate([np.zeros((G, 1, P)), np.cumsum(s, axis=1)], axis=1)
    start = np.arange(-L, S)  # windows [u, u + L] that overlap the series
    S_u = c[:, np.clip(start + L + 1, 0, S)] - c[:, np.clip(start, 0, S)]
    return np.einsum("gup,guq->pq", S_u, S_u) / (L + 1)
