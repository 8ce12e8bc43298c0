"""How long a log must be for what the hydraulic route (`hydraulic_route`) asks of it, checked
before anything compiles, so that a log too short is refused by its length (its samples and
seconds against what the route needs, the file named) and not by the first step it breaks:

- stage 1 drops ``1.5 / cutoff`` s at each end of a fit log, where its zero-phase low-pass is
  least accurate (`mechanics.pressure_samples`);
- stage 2 cuts the fit span into segments of ``segment_time`` s (`output_error.make_segments`),
  and a structure chosen from held-out segments (`model_choice.choose_and_fit`) holds out one
  of every `model_choice.HELD_OUT` and needs two held out, for the choice's standard error;
- a validation log's segment-wise prediction restarts every ``segment_time`` s (its free run
  needs no more)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from jaxmb.identification.mechanics import edge_samples
from jaxmb.identification.model_choice import HELD_OUT
from jaxmb.io.logs import Log

__all__ = ["check_fit_lengths", "check_validation_length"]


def _rate(log: Log) -> float:
    return 1.0 / float(np.median(np.diff(log.t)))


def _length(log: Log) -> str:
    return f"{log.t.size} samples over {float(log.t[-1] - log.t[0]):.4g} s"


def _segment_samples(log: Log, segment_time: float) -> int:
    """Samples per segment, as `output_error.make_segments` counts them."""
    return int(round(segment_time * _rate(log)))


def check_fit_lengths(
    logs: Mapping[str, Log],
    *,
    cutoff: float,
    segment_time: float,
    choosing: bool,
    window: tuple[float, float] | None = None,
) -> None:
    """Refuse a fit log (``{file name: its log}``, fitted within ``window`` if given) shorter
    than stage 1's filter edges and one stage-2 segment, and (``choosing``: a structure option
    on "auto") fit logs that hold fewer than ``2 x HELD_OUT`` segments between them (module
    docstring). A window's samples are counted as each stage takes them: stage 1 those with
    ``t0 <= t <= t1`` (`jaxmb.io.logs.Log.window`), stage 2 within half a sample of its ends
    (`output_error.make_segments`)."""
    segments = {}
    for name, whole in logs.items():
        log = whole if window is None else whole.window(*window)
        fs = _rate(log)
        edge = edge_samples(cutoff, fs)  # as `mechanics.pressure_samples` drops them
        L = _segment_samples(log, segment_time)
        if L < 1:
            raise ValueError(
                f"--segment-time: expected at least one sample period of {name} "
                f"({1 / fs:.4g} s), got {segment_time:g} s"
            )
        need = max(2 * edge + 1, L + 1)
        if log.t.size < need:
            raise ValueError(
                f"{name}: too short to identify: {_length(log)}; a fit log needs at least "
                f"{need} samples ({(need - 1) / fs:.4g} s): stage 1's {cutoff:g} Hz low-pass "
                f"drops {edge / fs:.4g} s at each end, and stage 2 fits segments of "
                f"{segment_time:g} s"
            )
        lo, hi = 0, whole.t.size - 1
        if window is not None:  # as `output_error.make_segments` finds the span
            h = float(np.mean(np.diff(whole.t)))
            lo = int(np.searchsorted(whole.t, window[0] - 0.5 * h))
            hi = int(np.searchsorted(whole.t, window[1] + 0.5 * h)) - 1
        segments[name] = (hi - lo) // L
    need = 2 * HELD_OUT
    if choosing and sum(segments.values()) < need:
        held = ", ".join(
            f"{n} {_length(logs[n] if window is None else logs[n].window(*window))}, {k} segment(s)"
            for n, k in segments.items()
        )
        raise ValueError(
            f"too short to choose the structure from held-out segments of {segment_time:g} s: "
            f"{held}; the choice holds out one of every {HELD_OUT} segments and "
            f"needs two held out: {need} segments, {need * segment_time:g} s of fit logs; "
            "longer logs, or --mechanics, --leakage, --valve-effects, --offsets and "
            "--encoder-offsets each given"
        )


def check_validation_length(log: Log, name: str, *, segment_time: float) -> None:
    """Refuse a validation log shorter than one segment of its segment-wise prediction."""
    L = _segment_samples(log, segment_time)
    if log.t.size < L + 1:
        raise ValueError(
            f"{name}: too short to validate on: {_length(log)}; a validation log needs at "
            f"least {L + 1} samples ({L / _rate(log):.4g} s): its segment-wise prediction "
            f"restarts every {segment_time:g} s"
        )
