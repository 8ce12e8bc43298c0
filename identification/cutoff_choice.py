"""The regressor route's low-pass cutoff, chosen from the fit logs' motion.

The low-pass must pass the motion the model explains and may remove everything above it: the
torque noise, and effects the rigid-body model does not describe. `choose_cutoff` measures the
motion's bandwidth, ``f_motion``: for each coordinate the frequency below which 99 % of its
velocity's power lies (a Hann-windowed periodogram of each gap-free segment; the measured
velocity where the log has one), the largest over coordinates and segments. The cutoff is the
smallest candidate of 2, 3, 4, 5, 7, 10 and 15 Hz at or above ``3 f_motion``, where the
zero-phase order-4 Butterworth passes the motion's top within 1.5e-4 of its amplitude
(``1 / (1 + 3^-8)``).

Why not cross-validation inside the fit log: on the KR300's trajectory A, blocked
cross-validation (held-out blocks' measured torques, every candidate on the same samples)
prefers the highest candidate, 15 Hz, while the held-out trajectories B and C are predicted
best at 2 Hz (summed joint-torque RMSE over all samples 1506/1599 N m at 2 Hz, 1653/1836 at
15 Hz). The torques above the motion's band follow trajectory A itself and do not carry over to
other motions; the cutoff that generalises is the one that keeps only the motion's band. On A
``f_motion`` is 0.5 Hz and the rule picks 2 Hz. (Measured, README.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .logs import Log

__all__ = ["CANDIDATES", "FACTOR", "POWER", "motion_bandwidth", "choose_cutoff"]

CANDIDATES = (2.0, 3.0, 4.0, 5.0, 7.0, 10.0, 15.0)
FACTOR = 3.0  # cutoff / f_motion
POWER = 0.99  # the share of the velocity's power below f_motion


def motion_bandwidth(segments: Sequence[Log], coordinates: Sequence[str]) -> dict:
    """``{coordinate: f}`` Hz: the frequency below which `POWER` of the coordinate's velocity
    power lies, the largest over ``segments`` (module docstring)."""
    out = {}
    for c in coordinates:
        f_max = 0.0
        for seg in segments:
            dt = float(np.median(np.diff(seg.t)))
            v = np.asarray(seg[f"qd_{c}"]) if seg.has(f"qd_{c}") else np.gradient(seg[c], dt)
            v = (v - v.mean()) * np.hanning(v.size)
            power = np.abs(np.fft.rfft(v)) ** 2
            if not power.sum() > 0:
                continue  # a coordinate that does not move in this segment
            f = np.fft.rfftfreq(v.size, dt)
            share = np.cumsum(power) / power.sum()
            f_max = max(f_max, float(f[np.searchsorted(share, POWER)]))
        out[c] = f_max
    return out


def choose_cutoff(
    segments: Sequence[Log], coordinates: Sequence[str], candidates: Sequence[float] = CANDIDATES
) -> dict:
    """The smallest candidate cutoff at or above `FACTOR` times the motion's bandwidth and
    below 0.4 of the sampling rate: ``{"cutoff_hz", "f_motion_hz": {coordinate: f}, "rule"}``.
    Raises, naming ``--cutoff``, when the motion is too fast for every candidate."""
    fs = min(1.0 / float(np.median(np.diff(seg.t))) for seg in segments)
    bands = motion_bandwidth(segments, coordinates)
    f_motion = max(bands.values())
    fits = [c for c in sorted(candidates) if FACTOR * f_motion <= c < 0.4 * fs]
    if not fits:
        raise ValueError(
            f"--cutoff: the motion reaches {f_motion:.3g} Hz ({POWER:.0%} of the velocity's "
            f"power), so the default rule ({FACTOR:g} x that, below 0.4 of the {fs:g} Hz "
            f"sampling rate) finds no candidate of {list(candidates)} Hz; give --cutoff"
        )
    return {
        "cutoff_hz": fits[0],
        "f_motion_hz": bands,
        "rule": f"the smallest of {list(candidates)} Hz at or above {FACTOR:g} x the motion's "
        f"bandwidth ({POWER:.0%} of each coordinate's velocity power below it), "
        "identification.cutoff_choice",
    }
