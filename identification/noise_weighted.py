"""Output error with every signal weighted by its own noise level, found from the fit itself:
maximum likelihood with unknown noise variances (`fit_noise_weighted`), alternating the fit, the
signals' scales and, given the log's heads, the segments' start states (`start_states`)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.identification import fit_progress
from jaxmb.identification.output_error import (
    HydraulicParameters,
    OutputErrorResult,
    Segments,
    fit,
    pilot_segments,
    plant_with,
    residual_scales,
    with_block,
    with_scales,
)
from jaxmb.identification.start_states import estimate_start_states

__all__ = ["NOISE_FTOL", "fit_noise_weighted"]

_PILOT_TOL = 1e-3  # relative tolerances of `fit_noise_weighted`'s pilot fits
# the scales have settled when every signal's residual RMS is within this of its scale
_SCALE_TOL = 0.1
_MAX_PILOTS = 4
# the relative tolerance of a fit on noise-weighted residuals: its cost is in noise units
# (about half the number of residuals), where moving one parameter by one standard deviation
# changes it by 0.5; 1e-6 of it is 0.02 on the 60 s crane log (`output_error.fit`'s default
# 1e-8 spent two more evaluations there for no change in six digits)
NOISE_FTOL = 1e-6


def fit_noise_weighted(
    plant: HydraulicPlant,
    spec: HydraulicParameters,
    segments: Segments,
    *,
    theta0=None,
    max_evaluations: int = 40,
    dt: float = 1e-3,
    heads: Segments | None = None,
    columns: HydraulicParameters | None = None,
) -> tuple[OutputErrorResult, Segments]:
    """`fit` with every signal scaled by its own residual RMS (`residual_scales`; `output_error`'s module
    docstring): maximum likelihood with unknown noise variances, by alternating the fit and
    the variances until they agree.

    Pilot fits, each stopped once a step lowers the cost by less than 1e-3 of it (``ftol``),
    start from ``segments``' own scales; after each, every signal is rescaled by its residual
    RMS, until each RMS is within 10 % of the scale it was fitted with (at most four pilots);
    then the fit to the final tolerance from there, on every segment. The pilots fit half the
    segments (`pilot_segments`), every other one, where the log has enough. One rescaling is
    not enough: under the spreads' scales a precise signal (a 10 um telescope encoder) holds
    so little of the cost that the first pilot stops long before that signal's residual
    reaches its noise (on the knuckle's 40 s log the telescope's RMS came out 10x its final
    value, so it weighed 100x too little in the fit).

    Given ``heads`` (`start_states.head_segments`: the log's every sample just after each
    segment's start), every segment's start state is re-estimated after each pilot for the
    pilot's parameters (`start_states.estimate_start_states`): the measured start velocities
    and pressures are biased where the motion is fast, and a fit from them bends the valves to
    explain the wrong transients. Returns the fit and the segments with the scales and start
    states it used, evaluated in calls of the pilots' count (`output_error.with_block`).
    ``columns`` as `fit`'s."""
    theta, K = theta0, segments.ts.shape[0]
    # the fit on every segment in calls of the pilots' count: one compiled program for both
    # (`output_error.with_block`; a second costs 25-35 s on the crane), and for every later
    # fit on the segments returned
    n = pilot_segments(segments).ts.shape[0]
    weighted = with_block(segments, n) if n < K else segments
    for k in range(_MAX_PILOTS):
        used = pilot_segments(weighted)
        with fit_progress.fitting(f"pilot {k + 1} (noise levels)"):
            pilot = fit(
                plant, spec, used, theta0=theta, max_evaluations=max_evaluations, dt=dt,
                xtol=_PILOT_TOL, ftol=_PILOT_TOL, columns=columns,
            )  # fmt: skip
        theta, old = pilot.theta, np.asarray(weighted.scale)
        weighted = with_scales(weighted, residual_scales(pilot, used))
        if heads is not None:
            fitted = plant_with(jnp.asarray(theta), plant, spec)
            weighted = estimate_start_states(fitted, heads, weighted, dt=dt)
        if np.all(np.abs(np.log(np.asarray(weighted.scale) / old)) < np.log1p(_SCALE_TOL)):
            break
    with fit_progress.fitting("every segment"):
        res = fit(
            plant, spec, weighted, theta0=theta, max_evaluations=max_evaluations, dt=dt,
            ftol=NOISE_FTOL, columns=columns,
        )  # fmt: skip
    return res, weighted
