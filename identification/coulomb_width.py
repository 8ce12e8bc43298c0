"""The smoothed Coulomb sign's width, chosen from the log's velocity noise.

The regressor's Coulomb column is ``tanh(qd / w)`` (`regressor`), a sign smoothed so that the
model stays differentiable. Its width ``w`` decides what the model predicts where a joint
barely moves: at the ends of a log, where a robot creeps into or out of standstill and its
drive holds the friction of that creep, and at every velocity reversal. A width far above the
velocity estimate's noise calls such a creep "no friction"; one below the noise lets the noise
choose the sign. `choose_coulomb_width` takes `FACTOR` times the largest noise standard
deviation of the filtered velocity that the fit uses, so that the sign is trusted where the
velocity stands above its noise. The rule takes friction to be a sign, as a drive's Coulomb
friction is to well below the velocities a log resolves; for a friction law smoother than
that (a pre-sliding slope the log resolves), give the width (``--coulomb-width``). One width
serves every coordinate: the largest, in rad/s (m/s for a prismatic joint).

The noise is the log's white-noise floor carried through the filter: for the velocity source
``x`` (the logged ``qd_<c>`` where there is one, as `signals.estimate_derivatives` uses it,
else the position), ``sigma_x^2`` per sample is the median of its Hann-windowed periodogram
over the upper half of the band divided by ``ln 2 sum(window^2)``
(`cutoff_choice.white_noise_variance`), and the filtered velocity's variance is ``sigma_x^2
sum_k g_k^2`` with ``g`` the impulse response of the same pipeline (`estimate_derivatives` run
on an impulse): exact for white noise; noise that is coloured below the upper half of the band
is read at its level there.

Measured on the KUKA KR300 recordings (docs/identification.md): the logged velocities' noise
after the 2 Hz filter is 3.7-5.5e-5 rad/s, so the width is 1.6e-4 rad/s; with the former fixed
1e-2 rad/s the identified model predicted B and C's standstill ends hundreds of N m off.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from jaxmb.identification.cutoff_choice import white_noise_variance
from jaxmb.identification.signals import estimate_derivatives
from jaxmb.io.logs import Log

__all__ = ["FACTOR", "FLOOR", "velocity_noise", "choose_coulomb_width"]

FACTOR = 3.0  # width / the filtered velocity's noise std
FLOOR = 1e-6  # the smallest width (a noise-free log), in the coordinate's unit per second
_SUPPORT = 20.0  # cutoff periods of impulse response: the filter's decays to < 1e-12 of its peak


@lru_cache(maxsize=64)  # one per rate, cutoff and source: segments and coordinates share it
def _impulse_gain(dt: float, cutoff: float, measured_velocity: bool) -> float:
    """``sum_k g_k^2`` of the velocity pipeline's impulse response ``g`` (module docstring)."""
    n = max(201, int(_SUPPORT / (cutoff * dt)) | 1)
    delta = np.zeros(n)
    delta[n // 2] = 1.0
    zero = np.zeros(n)
    signals = {"x": zero, "qd_x": delta} if measured_velocity else {"x": delta}
    f = estimate_derivatives(Log(np.arange(n) * dt, signals), ["x"], cutoff=cutoff)
    g = np.asarray(f["qd_x"])
    return float(np.sum(g**2))


def velocity_noise(segments: Sequence[Log], coordinates: Sequence[str], cutoff: float) -> dict:
    """``{coordinate: sigma}``: the largest over ``segments`` of the noise standard deviation of
    the velocity `signals.estimate_derivatives` gives at ``cutoff`` Hz (module docstring)."""
    out = {}
    for c in coordinates:
        worst = 0.0
        for seg in segments:
            dt = float(np.median(np.diff(seg.t)))
            measured = seg.has(f"qd_{c}")
            x = np.asarray(seg[f"qd_{c}" if measured else c], dtype=float)
            var = white_noise_variance(x, dt) * _impulse_gain(dt, cutoff, measured)
            worst = max(worst, float(np.sqrt(var)))
        out[c] = worst
    return out


def choose_coulomb_width(
    segments: Sequence[Log], coordinates: Sequence[str], cutoff: float
) -> dict:
    """`FACTOR` times the largest filtered-velocity noise of `velocity_noise`, at least `FLOOR`:
    ``{"coulomb_width", "velocity_noise": {coordinate: sigma}, "rule"}``."""
    noise = velocity_noise(segments, coordinates, cutoff)
    width = max(FACTOR * max(noise.values()), FLOOR)
    out = {
        "coulomb_width": width,
        "velocity_noise": noise,
        "rule": f"{FACTOR:g} x the largest noise std of the velocity filtered at {cutoff:g} Hz "
        f"(white-noise floor of the log through the filter), at least {FLOOR:g}; "
        "identification.coulomb_width",
    }
    if width == FLOOR:
        out["note"] = (
            "the log's velocities show no noise (a noise-free synthetic log?), so the width is "
            "the floor: friction is taken as a sign; give --coulomb-width for a smoother law"
        )
    return out
