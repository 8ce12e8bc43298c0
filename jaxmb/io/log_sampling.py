"""How a log is sampled, and a log put on a uniform grid: what the identification needs before
it filters and differentiates (the format itself: `jaxmb.io.logs`).

Irregular sampling is accepted by the loader; `sampling_report` measures it (median interval,
jitter, gaps), `check_uniform` refuses a log that is not uniform with the counts, `resample`
interpolates a log onto a uniform grid, refusing to bridge gaps longer than ``max_gap``, and
`uniform_segments` splits a log as recorded at its gaps and resamples each piece."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from jaxmb.io.logs import Log, LogError, nonfinite_problem, time_problems, with_note

__all__ = [
    "SamplingReport",
    "sampling_report",
    "window_option",
    "check_uniform",
    "UniformSegments",
    "uniform_segments",
    "resample",
]


class SamplingReport(NamedTuple):
    """How a log is sampled (`sampling_report`).

    dt: median interval, s. fs: ``1 / dt``, Hz. jitter: ``max |dt_k - dt|``, s.
    n_gaps: intervals longer than ``2 dt``. gaps: ``((t_before, t_after), ...)`` of those.
    uniform: ``jitter <= 1e-6 dt`` (round-off of stored time stamps only)."""

    dt: float
    fs: float
    jitter: float
    n_gaps: int
    gaps: tuple[tuple[float, float], ...]
    uniform: bool


def sampling_report(log: Log) -> SamplingReport:
    """Median interval, jitter and gaps of ``log.t`` (see `SamplingReport`)."""
    problems = time_problems(log.t)
    if problems:
        raise LogError(problems[0])
    d = np.diff(log.t)
    dt = float(np.median(d))
    jitter = float(np.max(np.abs(d - dt)))
    idx = np.flatnonzero(d > 2 * dt)
    gaps = tuple((float(log.t[i]), float(log.t[i + 1])) for i in idx)
    return SamplingReport(dt, 1.0 / dt, jitter, len(gaps), gaps, jitter <= 1e-6 * dt)


def window_option(log: Log, window: tuple[float, float] | None, source: str) -> Log:
    """``log`` within the ``--window`` option's ``(t0, t1)`` (None: all of it); a window outside
    the log is refused naming the option and the file ``source``."""
    if window is None:
        return log
    try:
        return log.window(*window)
    except LogError as err:
        raise LogError(f"--window: {source}: {str(err).removeprefix('window: ')}") from None


def check_uniform(log: Log, source: str, *, advice: str | None = None) -> SamplingReport:
    """Refuse a log that is not uniformly sampled, naming its ``source`` with the counts
    (`sampling_report`): the identification filters and differentiates on a uniform grid, so
    a gap or jittered time stamps are refused up front, before anything compiles, never
    interpolated silently. ``advice`` replaces the message's closing advice. Returns the report
    of a uniform log."""
    rep = sampling_report(log)
    if rep.uniform:
        return rep
    d = np.diff(log.t)
    worst = int(np.argmax(np.abs(d - rep.dt)))
    what = (
        f"{rep.n_gaps} gap(s), the longest {float(d.max()):.4g} s from t = "
        f"{float(log.t[int(np.argmax(d))]):.6g} s"
        if rep.n_gaps
        else f"time stamps jittered by up to {rep.jitter:.3g} s (at t = {float(log.t[worst]):.6g} s)"
    )
    raise LogError(
        f"{source}: column 't': not uniformly sampled ({log.n} samples at a median interval of "
        f"{rep.dt:.4g} s; {what}); expected one interval throughout (to 1e-6 of it). "
        + (advice or "Put the log on a uniform grid (jaxmb.io.log_sampling.resample, which "
           "refuses to bridge long gaps) or fit a --window without the gap")
    )  # fmt: skip


class UniformSegments(NamedTuple):
    """A log as recorded, put on one uniform grid piece by piece (`uniform_segments`).

    segments: the gap-free pieces, each uniformly sampled at ``dt``. note: what was found and
    done, for the report: ``dt``, ``jitter_s`` (``max |dt_k - dt|`` over the intervals that are
    not gaps), ``max_gap_s`` (the rule that made it), ``gaps``
    ``[[t_before, t_after], ...]``, ``segments`` and ``dropped`` ``[[t0, t1], ...]`` (pieces too
    short to keep), ``resampled`` (whether time stamps were interpolated) and ``method``."""

    segments: tuple[Log, ...]
    note: dict


def uniform_segments(
    log: Log, *, max_gap: float, min_duration: float = 0.0, dt: float | None = None
) -> UniformSegments:
    """``log`` split at every interval longer than ``max_gap`` s (a gap: nothing is
    interpolated across it), and each piece put on the uniform grid of interval ``dt`` (default
    ``log``'s median interval) by a not-a-knot cubic spline through the time stamps
    (`resample`) where its stamps jitter or ``dt`` is not its own; pieces shorter than
    ``min_duration`` s are dropped (and named in the note). A uniform log without gaps comes
    back as it is, as its only segment. Raises when nothing of
    at least ``min_duration`` is left.

    A cubic through stamps ``h`` apart is off by about ``(2 pi f h)^4 / 384`` of a component at
    ``f`` Hz: at the identification's low-pass cutoff, with ``h`` a tenth of its period, 4e-4."""
    rep = sampling_report(log)
    grid = rep.dt if dt is None else float(dt)
    max_gap = float(max_gap)
    if not max_gap >= rep.dt:
        raise ValueError(f"uniform_segments: max_gap must be >= the median interval "
                         f"{rep.dt:.4g} s, got {max_gap}")  # fmt: skip
    d = np.diff(log.t)
    cuts = np.flatnonzero(d > max_gap)
    bounds = [0, *(cuts + 1).tolist(), log.n]
    kept, dropped, resampled = [], [], False
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        piece = Log(log.t[a:b], {k: v[a:b] for k, v in log.signals.items()}, log.sidecar)
        span = [float(log.t[a]), float(log.t[b - 1])]
        if b - a < 4 or span[1] - span[0] < min_duration:
            dropped.append(span)
            continue
        if float(np.max(np.abs(np.diff(piece.t) - grid))) > 1e-6 * grid:
            piece, resampled = resample(piece, grid, "cubic", max_gap=max_gap), True
        kept.append(piece)
    note = {
        "dt": grid,
        "jitter_s": float(np.max(np.abs(d[d <= max_gap] - rep.dt), initial=0.0)),  # gaps apart
        "max_gap_s": max_gap,
        "gaps": [[float(log.t[i]), float(log.t[i + 1])] for i in cuts],
        "segments": [[float(p.t[0]), float(p.t[-1])] for p in kept],
        "dropped": dropped,
        "resampled": resampled,
        "method": "cubic spline onto the median interval, within each gap-free segment",
    }
    if not kept:
        raise LogError(
            f"column 't': no gap-free stretch of at least {min_duration:.3g} s between the "
            f"{len(cuts)} gap(s) longer than {max_gap:.3g} s"
        )
    return UniformSegments(tuple(kept), note)


def resample(
    log: Log, dt: float | None = None, method: str = "linear", *, max_gap: float | None = None
) -> Log:
    """``log`` interpolated onto the uniform grid ``t_0 + k dt`` within ``[t_0, t_end]``.

    Args:
        dt: grid interval, s; default the median interval of ``log``.
        method: ``"linear"`` (piecewise linear, `scipy.interpolate.make_interp_spline` k=1) or
            ``"cubic"`` (not-a-knot cubic spline, `scipy.interpolate.CubicSpline`).
        max_gap: longest source interval that may be bridged, s; default twice the median
            interval. A longer gap raises `LogError` with its time: interpolating across it
            would invent data.
    """
    from scipy.interpolate import CubicSpline, make_interp_spline

    if method not in ("linear", "cubic"):
        raise ValueError(f"resample: method must be 'linear' or 'cubic', got {method!r}")
    rep = sampling_report(log)
    dt = rep.dt if dt is None else float(dt)
    if not dt > 0:
        raise ValueError(f"resample: dt must be > 0 s, got {dt}")
    max_gap = 2 * rep.dt if max_gap is None else float(max_gap)
    d = np.diff(log.t)
    long = np.flatnonzero(d > max_gap)
    if long.size:
        i = int(long[0])
        raise LogError(
            f"column 't': gap of {float(d[i])!r} s from t = {float(log.t[i])!r} s to {float(log.t[i + 1])!r} s is "
            f"longer than max_gap = {max_gap!r} s; resample refuses to interpolate over it "
            "(split the log with Log.window, or raise max_gap)"
        )
    for name in log.names:
        p = nonfinite_problem(name, log.signals[name], log.t)
        if p is not None:
            raise LogError(p)
    span = log.t[-1] - log.t[0]
    n = int(np.floor(span / dt * (1 + 1e-12))) + 1  # tolerate round-off at the last point
    tg = log.t[0] + dt * np.arange(n)
    tg[-1] = min(tg[-1], log.t[-1])
    if not log.names:
        return with_note(Log(tg, {}, log.sidecar), {"resample": {"dt": dt, "method": method}})
    Y = log.stack(log.names)
    k = 1 if method == "linear" else 3
    if method == "cubic" and log.n < 4:
        raise LogError(f"resample: a cubic spline needs >= 4 samples, got {log.n}")
    f = make_interp_spline(log.t, Y, k=k, axis=0) if k == 1 else CubicSpline(log.t, Y, axis=0)
    Yg = f(tg)
    out = Log(tg, {c: Yg[:, j] for j, c in enumerate(log.names)}, log.sidecar)
    return with_note(out, {"resample": {"dt": dt, "method": method, "max_gap": max_gap}})
