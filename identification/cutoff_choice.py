"""The regressor route's low-pass cutoff, chosen from the fit logs' motion.

The low-pass must pass the motion the model explains and may remove everything above it: the
torque noise, and effects the rigid-body model does not describe. `choose_cutoff` measures the
motion's bandwidth, ``f_motion``: for each coordinate the frequency below which 99 % of its
velocity's power lies (from the position's Hann-windowed periodogram of each gap-free segment
of 4 s or more, its encoder-noise floor taken off; `motion_bandwidth`), the largest over the
coordinates that move above their noise, and the segments. The cutoff is the
smallest candidate of 2, 3, 4, 5, 7, 10 and 15 Hz at or above ``3 f_motion``, where the
zero-phase order-4 Butterworth passes the motion's top within 1.5e-4 of its amplitude
(``1 / (1 + 3^-8)``).

Why not cross-validation inside the fit log: on the KR300's trajectory A, blocked
cross-validation (held-out blocks' measured torques, every candidate on the same samples)
prefers the highest candidate, 15 Hz, while the held-out trajectories B and C are predicted
best at 2 Hz (summed joint-torque RMSE over all samples 1506/1599 N m at 2 Hz, 1653/1836 at
15 Hz). The torques above the motion's band follow trajectory A itself and do not carry over to
other motions; the cutoff that generalises is the one that keeps only the motion's band. On A
``f_motion`` is 0.5 Hz and the rule picks 2 Hz. (Measured, docs/identification.md.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxmb.io.logs import Log

__all__ = [
    "CANDIDATES",
    "FACTOR",
    "POWER",
    "MIN_SPAN",
    "white_noise_variance",
    "motion_bandwidth",
    "choose_cutoff",
]

CANDIDATES = (2.0, 3.0, 4.0, 5.0, 7.0, 10.0, 15.0)
FACTOR = 3.0  # cutoff / f_motion
POWER = 0.99  # the share of the velocity's power below f_motion
MIN_SPAN = 4.0  # s: segments the bandwidth is measured on (0.25 Hz bins)


def _periodogram(x: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Hann-windowed periodogram ``(f, P)`` of ``x`` less its mean, and its white-noise floor:
    the median of ``P`` over the upper half of the band, where a robot's motion has nothing."""
    w = np.hanning(x.size)
    power = np.abs(np.fft.rfft((x - x.mean()) * w)) ** 2
    f = np.fft.rfftfreq(x.size, dt)
    return f, power, float(np.median(power[f > f[-1] / 2]))


def white_noise_variance(x: np.ndarray, dt: float) -> float:
    """Per-sample variance of the white noise in ``x`` sampled at ``dt``: its periodogram's
    floor (a median) over ``ln 2 sum(w^2)``, the median of a periodogram bin of unit white noise
    through the Hann window ``w`` (exponentially distributed, mean ``sum(w^2)``)."""
    x = np.asarray(x, dtype=float)
    return _periodogram(x, dt)[2] / (np.log(2.0) * float(np.sum(np.hanning(x.size) ** 2)))


def motion_bandwidth(segments: Sequence[Log], coordinates: Sequence[str]) -> dict:
    """``{coordinate: f}`` Hz: the frequency below which `POWER` of the coordinate's velocity
    power lies (module docstring); None for a coordinate that does not move above its noise.

    From the position's Hann-windowed periodogram ``P(f)``, not a differentiated velocity's:
    the encoder's noise is white in position, so its floor is the median of ``P`` over the
    upper half of the band, where a robot's motion has nothing. Bins within 3x that floor are
    taken as noise; the velocity's power is ``f^2 P`` of the rest, up to twice the highest
    motion any candidate passes. A coordinate moves when its largest bin is 30 dB above the
    floor. Measured on the segments of at least `MIN_SPAN` s (the longest one if none is): a
    shorter one's periodogram smears a slow motion over its coarse bins."""
    spans = [float(seg.t[-1] - seg.t[0]) for seg in segments]
    used = [seg for seg, T in zip(segments, spans, strict=True) if T >= MIN_SPAN]
    used = used or [segments[int(np.argmax(spans))]]
    f_lim = 2.0 * max(CANDIDATES) / FACTOR
    out = {}
    for c in coordinates:
        f_max = None
        for seg in used:
            dt = float(np.median(np.diff(seg.t)))
            f, power, floor = _periodogram(np.asarray(seg[c], dtype=float), dt)
            low = f <= f_lim
            if not power[low][1:].max(initial=0.0) > 1e3 * floor:
                continue  # no motion above the noise in this segment
            v = np.where(power[low] > 3.0 * floor, power[low], 0.0) * f[low] ** 2
            share = np.cumsum(v) / v.sum()
            fc = float(f[low][np.searchsorted(share, POWER)])
            f_max = fc if f_max is None else max(f_max, fc)
        out[c] = f_max
    return out


def choose_cutoff(
    segments: Sequence[Log],
    coordinates: Sequence[str],
    candidates: Sequence[float] = CANDIDATES,
    *,
    fs: float | None = None,
) -> dict:
    """The smallest candidate cutoff at or above `FACTOR` times the motion's bandwidth and
    below 0.4 of the sampling rate ``fs`` (default the segments' lowest; give the lowest of
    every log the cutoff will filter): ``{"cutoff_hz", "f_motion_hz": {coordinate: f or
    None}, "rule"}``. Raises, naming ``--cutoff`` and the coordinate, when the motion is too
    fast for every candidate, or when no coordinate moves above its noise."""
    if fs is None:
        fs = min(1.0 / float(np.median(np.diff(seg.t))) for seg in segments)
    bands = motion_bandwidth(segments, coordinates)
    moving = {c: f for c, f in bands.items() if f is not None}
    if not moving:
        raise ValueError(
            f"--cutoff: no coordinate of {list(coordinates)} moves above its noise in the fit "
            "log, so the default rule finds no motion band; give --cutoff"
        )
    fastest = max(moving, key=moving.get)
    f_motion = moving[fastest]
    fits = [c for c in sorted(candidates) if FACTOR * f_motion <= c < 0.4 * fs]
    if not fits:
        raise ValueError(
            f"--cutoff: the motion of {fastest} reaches {f_motion:.3g} Hz ({POWER:.0%} of its "
            f"velocity's power), so the default rule ({FACTOR:g} x that, below 0.4 of the "
            f"{fs:g} Hz sampling rate) finds no candidate of {list(candidates)} Hz; give --cutoff"
        )
    return {
        "cutoff_hz": fits[0],
        "f_motion_hz": bands,
        "rule": f"the smallest of {list(candidates)} Hz at or above {FACTOR:g} x the motion's "
        f"bandwidth ({POWER:.0%} of each coordinate's velocity power, above its noise floor, "
        f"below it), below 0.4 of the {fs:g} Hz sampling rate; identification.cutoff_choice",
    }
