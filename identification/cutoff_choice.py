"""The regressor route's low-pass cutoff, chosen from the fit log by cross-validation.

The cutoff trades the noise the low-pass removes against the motion it distorts (the filtered
accelerations lag and shrink above it) and the fit's degrees of freedom. No value suits every
robot and log: the KR300's recordings, for one, predict their held-out trajectories better at
2 Hz than at 10 (their torques carry slow unmodelled effects that a wider band lets the fit
chase). `choose_cutoff` scores each candidate by
blocked K-fold cross-validation inside the fit log (Arlot & Celisse (2010), blocks of time, as
the samples are correlated): each block's *measured* torques are predicted by base parameters
fitted to the rest, leaving out a guard band of ``1 / cutoff`` seconds on both sides of the
block, through which the filter would carry the held-out torques into the fit. The score is
the Gaussian log-likelihood with one unknown noise variance per joint, ``sum_j log MSE_j``, so
joints of small torques count as much as large ones and the score does not depend on units.
The measured torques are the target at every cutoff, so every candidate is judged on the same
data. Base-parameter WLS is fitted in the folds (fast, linear); the route's final fit then uses
the chosen cutoff.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import regressor as rg
from .least_squares import least_squares
from .logs import Log

__all__ = ["CANDIDATES", "FOLDS", "CutoffChoice", "choose_cutoff"]

CANDIDATES = (2.0, 3.0, 4.0, 5.0, 7.0, 10.0, 15.0)
FOLDS = 10


class CutoffChoice(dict):
    """``{"cutoff_hz": chosen, "score": {cutoff: sum_j log MSE_j}, "rmse": {cutoff: {column:
    held-out RMSE}}, "folds": K, "skipped": {cutoff: why}}``: what `choose_cutoff` found, as the
    report writes it."""


def choose_cutoff(
    model,
    segments: Sequence[Log],
    equations,
    *,
    candidates: Sequence[float] = CANDIDATES,
    folds: int = FOLDS,
) -> CutoffChoice:
    """The candidate cutoff whose base-parameter fits best predict held-out blocks of
    ``segments`` (module docstring). ``equations(cutoff)`` gives the route's equations at a
    cutoff: ``(s, W, y)`` with ``s`` the `rigid.RigidSamples`, ``W (T, n, p)`` the unfiltered
    regressor and ``y (T, n)`` the measured side (torques, known forces moved over), both at
    the full rate. Candidates at or above 0.4 of the sampling rate, or that leave a fold too
    few samples, are skipped and named."""
    fs = 1.0 / float(np.median(np.diff(segments[0].t)))
    score, rmse, skipped = {}, {}, {}
    for c in candidates:
        if c >= 0.4 * fs:
            skipped[c] = f"at or above 0.4 of the {fs:g} Hz sampling rate"
            continue
        try:
            s, W, y = equations(c)
        except ValueError as err:  # segments too short for this cutoff's edges
            skipped[c] = str(err)
            continue
        T, n, p = W.shape
        Wf = s.lowpass(W.reshape(T, n * p), c).reshape(T, n, p)
        yf = s.lowpass(y, c)
        idx = s.index
        if idx.size < 2 * folds * n:
            skipped[c] = "too few samples for the folds"
            continue
        base = rg.base_parameters(Wf[idx].reshape(-1, p), tuple(map(str, range(p))))
        guard = 1.0 / c
        err = np.zeros(n)
        count = 0
        blocks = np.array_split(np.arange(idx.size), folds)
        try:
            for block in blocks:
                t0, t1 = s.t[idx[block[0]]] - guard, s.t[idx[block[-1]]] + guard
                seg_of = np.searchsorted(s.bounds, idx, side="right") - 1
                near = (s.t[idx] >= t0) & (s.t[idx] <= t1)
                same = np.isin(seg_of, np.unique(seg_of[block]))
                fit = np.flatnonzero(~(near & same))
                A = base.reduce(Wf[idx[fit]].reshape(-1, p))
                groups = np.tile(np.arange(n), fit.size)
                theta = least_squares(A, yf[idx[fit]].reshape(-1), groups=groups).theta
                held = idx[block]
                pred = base.reduce(W[held].reshape(-1, p)) @ theta
                err += np.sum((y[held] - pred.reshape(-1, n)) ** 2, axis=0)
                count += held.size
        except ValueError as e:  # a fold without enough equations
            skipped[c] = str(e)
            continue
        mse = err / count
        score[c] = float(np.sum(np.log(mse)))
        rmse[c] = np.sqrt(mse)
    if not score:
        raise ValueError(f"--cutoff: no candidate of {list(candidates)} Hz could be scored: "
                         + "; ".join(f"{c:g} Hz: {w}" for c, w in skipped.items()))  # fmt: skip
    best = min(score, key=score.get)
    return CutoffChoice(cutoff_hz=best, score=score, rmse=rmse, folds=folds, skipped=skipped)
