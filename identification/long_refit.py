r"""A refit of the chosen output-error structure on long segments (about 10 s each), kept where
held-out long segments prefer it.

Multiple shooting on 0.5 s segments (`model_choice`) weighs what a segment shows within half a
second: pressure transients, a start's acceleration. A free-run replay integrates what it
hardly sees: a flow error a tenth of a percent, a viscous force a little off, a boom a
kilogram heavier, each a slow drift of the piston. On the knuckle example's 40 s log, its
telescope (a 10 um encoder, a cylinder that carries little load) replayed 2.35x as far from
the log as the true plant's own replay. Fitting the same parameters on four 10 s segments,
each from its estimated start state (`start_states`), and with them the viscous coefficients
(``friction.<a>.sigma``) and the masses that a joint refinement fits
(`hydraulic_route.refined_selectors`), brought every signal within the noise floor: free-run
ratios 0.88/1.02/1.05 for lift, fold and telescope, pressures 1.00-1.01 (the payload held,
below). A single segment over the whole log (single shooting) did worse (telescope 0.71x but
lift 1.51x, and 2.5x the time): one start state has to carry the whole log.

Two parameters are held at the multiple-shooting estimate. Internal leakage: on the crane,
whose true plant leaks, a long refit moved the tilt's leakage 25 % off its truth for a
slightly better replay (the viscous coefficients and the leakage both turn a load into a slow
drift). The payload's mass: it is a condition of one log, not of the machine, and refitted
with the booms it traded against them (the knuckle's payload 99.3 kg for 100, boom 1 245.5 kg
for 250). A validation log that names its payload then replayed the lift, fold and telescope
5.7x, 14.9x and 3.0x the true plant's (0.85x, 1.08x and 1.06x with the refitted 99.3 kg);
with the payload held, the booms came out at 246.8, 180.03 and 90.02 kg (250, 180, 90) and
the named payload's replay at 0.88x, 1.02x and 1.05x.

Each long segment is fitted as a chain of pieces of at most 1 s (`piece_segments`,
`shooting.fit_chains`: multiple shooting with continuity as a constraint, condensed), the
same least-squares problem as the long segment's single shooting where the chains close
(for a plant without spool or bristle states; one with them keeps single shooting), its
pieces run side by side instead of 10 000 RK4 steps in sequence. The long segments are a
whole number of pieces long (a 65 s log: seven of 9.2 s; at most m x STRIDE samples of each
are left out). The held-out long segments
are scored by single shooting (`replay_cost`: a simulation without Jacobian).

A longer horizon is not always better (a valve coefficient the long refit trades against a
mass is worse for another motion), so, as `model_choice` does for the structure, the log
decides: three of every `HELD_OUT` long segments are fitted, the fourth scored by both
estimates from the same start states, and only a refit that predicts it better is kept (then
refitted on every long segment). The multiple-shooting estimate saw the held-out span as short
segments, the train refit did not: the comparison favours keeping it, not the refit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from jaxmb.actuators.hydraulics import StribeckFriction
from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.identification import fit_progress
from jaxmb.identification import output_error as oe
from jaxmb.identification.campaign import Campaign
from jaxmb.identification.model_choice import HELD_OUT, extended_theta, masked, spec_for
from jaxmb.identification.shooting import PIECE_TIME, fit_chains, internal_states
from jaxmb.identification.start_states import estimate_start_states, head_segments

__all__ = [
    "CHOICES",
    "LONG_TIME",
    "long_samples",
    "long_segments",
    "long_sets",
    "piece_segments",
    "refit_long",
    "replay_cost",
]

CHOICES = ("auto", "no", "yes")
LONG_TIME = 10.0  # s: the longest long segment (the fit span cut into at least HELD_OUT)
STRIDE = 10  # every 10th sample in the residual: 1 kHz logs at 100 Hz, as the short fit


def long_segments(
    plant: HydraulicPlant,
    log: Mapping[str, np.ndarray],
    scales: np.ndarray,
    *,
    t_start: float | None = None,
    t_end: float | None = None,
    samples: int | None = None,
) -> oe.Segments:
    """The fit span (``t_start`` .. ``t_end``, default the whole log) cut into
    ``max(HELD_OUT, ceil(span / LONG_TIME))`` equal segments, a whole number of ``STRIDE``
    samples each (`long_samples`; ``samples`` given: as many of that length as fit), with the
    residual ``scales`` of the short fit (its noise levels)."""
    t = np.asarray(log["t"], float)
    h = float(np.mean(np.diff(t)))
    lo, hi = _span(t, t_start, t_end)
    if samples is None:
        samples = long_samples(log, t_start=t_start, t_end=t_end)
    seg = oe.make_segments(
        plant, log, segment_time=samples * h, stride=STRIDE, t_start=float(t[lo]),
        t_end=float(t[hi]),
    )  # fmt: skip
    return oe.with_scales(seg, np.asarray(scales))


def _span(t: np.ndarray, t_start, t_end) -> tuple[int, int]:
    h = float(np.mean(np.diff(t)))
    lo = 0 if t_start is None else int(np.searchsorted(t, t_start - 0.5 * h))
    hi = t.size - 1 if t_end is None else int(np.searchsorted(t, t_end + 0.5 * h)) - 1
    return lo, hi


def long_samples(
    log: Mapping[str, np.ndarray], *, t_start: float | None = None, t_end: float | None = None
) -> int:
    """Samples per long segment of ``log``'s fit span (`long_segments`): the span over
    ``max(HELD_OUT, ceil(span / LONG_TIME))``, a whole number of pieces (`piece_segments`)
    of a whole number of ``STRIDE`` samples each."""
    t = np.asarray(log["t"], float)
    h = float(np.mean(np.diff(t)))
    lo, hi = _span(t, t_start, t_end)
    n = max(HELD_OUT, int(np.ceil((hi - lo) * h / LONG_TIME - 1e-9)))
    samples = ((hi - lo) // n // STRIDE) * STRIDE
    if samples < STRIDE:
        raise ValueError(f"long segments: the fit span ({(hi - lo) * h:g} s) is too short")
    m = min(samples // STRIDE, int(np.ceil(samples * h / PIECE_TIME - 1e-9)))
    return m * ((samples // m // STRIDE) * STRIDE)


def piece_segments(
    plant: HydraulicPlant, log: Mapping[str, np.ndarray], long: oe.Segments
) -> tuple[oe.Segments, int]:
    """``long`` (`long_segments`) cut into ``m`` equal pieces each, at most `PIECE_TIME`
    long, that `shooting.fit_chains` fits as chains: ``(pieces, m)``, the pieces in the
    log's order (chain ``k`` holds pieces ``k m .. k m + m - 1``) with ``long``'s scales.
    A plant whose actuators hold states of their own (spool, LuGre bristles) gets ``m = 1``:
    each long segment one piece, single shooting (`shooting.internal_states`)."""
    ts = np.asarray(long.ts)
    t = np.asarray(log["t"], float)
    h = float(np.mean(np.diff(t)))
    samples = int(round((ts[0, -1] - ts[0, 0]) / h))
    if internal_states(plant):
        m = 1  # continuity holds (q, qd, p) only: no chains (`shooting`)
    else:  # the fewest pieces of at most PIECE_TIME that tile it in STRIDE samples
        strides = samples // STRIDE
        m = int(np.ceil(samples * h / PIECE_TIME - 1e-9))
        while strides % m:  # long_segments' own m divides strides: this ends there or before
            m += 1
    pieces = oe.make_segments(
        plant, log, segment_time=samples // m * h, stride=STRIDE, t_start=float(ts[0, 0]),
        t_end=float(ts[-1, -1]),
    )  # fmt: skip
    K = ts.shape[0] * m
    p_ts = np.asarray(pieces.ts)
    if p_ts.shape[0] < K or not np.allclose(p_ts[:K:m, 0], ts[:, 0]):
        raise ValueError("piece_segments: the pieces do not start where the long segments do")
    pieces = eqx.tree_at(
        lambda s: [getattr(s, f) for f in oe.PER_SEGMENT], pieces,
        [getattr(pieces, f)[:K] for f in oe.PER_SEGMENT],
    )  # fmt: skip
    return oe.with_scales(pieces, np.asarray(long.scale)), m


def replay_cost(
    theta: np.ndarray, plant: HydraulicPlant, spec: oe.HydraulicParameters, seg: oe.Segments
) -> float:
    """``1/2 |r|^2`` of ``seg``'s segments simulated whole (single shooting, no Jacobian)
    with ``spec`` at ``theta``: a held-out score."""
    fitted = oe.strong_types(oe.plant_with(jnp.asarray(theta), plant, spec))
    y = np.asarray(oe.simulate_segments_compiled(fitted, seg, 1e-3))
    r = (y - np.asarray(seg.targets)) / np.asarray(seg.scale) * np.asarray(seg.weights)[..., None]
    r = np.where(np.isfinite(r), r, oe.DIVERGED)
    return 0.5 * float(np.sum(r**2))


def long_selectors(
    plant: HydraulicPlant, spec: oe.HydraulicParameters, refine: Sequence[str]
) -> tuple[str, ...]:
    """What the long refit fits: the short fit's parameters but internal leakage and the
    payload's mass (module docstring), each Stribeck law's viscous coefficient, and the booms'
    masses among ``refine``."""
    names = [n for n in spec.names if not _held(n)]
    names += [
        f"friction.{a.name}.sigma"
        for a in plant.actuators
        if isinstance(a.friction, StribeckFriction) and float(a.friction.sigma) > 0
    ]
    return tuple(dict.fromkeys(names + [n for n in refine if not _held(n)]))


def long_sets(plant, log, scales, t_start, t_end):
    """``(long segments, their pieces, the pieces' heads, pieces per segment)`` of one log,
    or of a campaign's logs (`campaign.Campaign`): there every long segment is as long as the
    longest log's (`long_samples`), each log holding as many as fit in it (one shorter than
    that holds none: its span is fitted by the short segments only)."""
    if not isinstance(log, Campaign):
        seg = long_segments(plant, log, scales, t_start=t_start, t_end=t_end)
        pieces, m = piece_segments(plant, log, seg)
        return seg, pieces, head_segments(plant, log, pieces), m
    longest = max(log.columns, key=lambda c: len(c["t"]))
    samples = long_samples(longest)
    segs, pieces, heads, logs = [], [], [], []
    for k, cols in enumerate(log.columns):
        if len(cols["t"]) <= samples:
            continue
        s = long_segments(plant, cols, scales, samples=samples)
        p, m = piece_segments(plant, cols, s)
        segs.append(s)
        pieces.append(p)
        heads.append(head_segments(plant, cols, p))
        logs.append(k)
    part = Campaign(*(tuple(getattr(log, f)[k] for k in logs)
                      for f in ("names", "columns", "payloads")), body=log.body)  # fmt: skip
    return part.join(plant, segs), part.join(plant, pieces), part.join(plant, heads), m


def _held(name: str) -> bool:
    """Whether the long refit holds ``name`` at the short fit's value (module docstring)."""
    return name.endswith(".c_int") or name == "body.payload.mass"


def _about(
    names: Sequence[str], held: Mapping, seg: oe.Segments, pieces: oe.Segments, m: int
) -> dict:
    """The report's account of the long refit: what it fits and holds, and on what segments."""
    return {
        "parameters": list(names),
        "held_at_short_fit": list(held),
        "segments": int(seg.ts.shape[0]),
        "segment_time_s": float(seg.ts[0, -1] - seg.ts[0, 0]),
        "pieces_per_segment": m,
        "piece_time_s": float(pieces.ts[0, -1] - pieces.ts[0, 0]),
    }


def _held_out_trial(
    base: HydraulicPlant,
    long_spec: oe.HydraulicParameters,
    seg: oe.Segments,
    pieces: oe.Segments,
    m: int,
    theta0: np.ndarray,
    max_evaluations: int,
) -> tuple[oe.OutputErrorResult, oe.Segments, dict[str, float]]:
    """``(train fit, its pieces at their final start states, held-out costs)``: the refit on
    three of every `HELD_OUT` long segments, and the held-out ones' replay costs for the short
    estimate ("no") and that refit ("yes"), from the same start states (module docstring)."""
    chain = np.arange(pieces.ts.shape[0]) // m
    with fit_progress.fitting("held-out long segments aside"):
        train, closed = fit_chains(
            base, long_spec, masked(pieces, chain % HELD_OUT != HELD_OUT - 1), m,
            theta0=theta0, max_evaluations=max_evaluations,
        )  # fmt: skip
    # the held-out long segments run whole from the chains' estimated first start states
    k = np.arange(seg.ts.shape[0])
    test = masked(
        eqx.tree_at(lambda s: (s.q0, s.qd0, s.p0), seg,
                    (pieces.q0[::m], pieces.qd0[::m], pieces.p0[::m])),
        k % HELD_OUT == HELD_OUT - 1,
    )  # fmt: skip
    cost = {
        "no": replay_cost(theta0, base, long_spec, test),
        "yes": replay_cost(train.theta, base, long_spec, test),
    }
    return train, closed, cost


def refit_long(
    plant: HydraulicPlant,
    res: oe.OutputErrorResult,
    spec: oe.HydraulicParameters,
    log: Mapping[str, np.ndarray] | Campaign,
    scales: np.ndarray,
    refine: Sequence[str],
    *,
    choice: str = "auto",
    t_start: float | None = None,
    t_end: float | None = None,
    max_evaluations: int = 20,
) -> tuple[
    oe.OutputErrorResult,
    oe.HydraulicParameters,
    HydraulicPlant,
    dict,
    dict,
    tuple[oe.Segments, int] | None,
]:
    """The short fit ``res`` of ``spec`` on ``plant`` refitted on `long_segments` of ``log``
    (a log's columns, or a campaign's logs: `campaign.Campaign`) (`long_selectors`), each
    segment from its start state estimated for ``res``'s plant, weighted by ``scales``.
    ``choice``: "auto" keeps the refit only where held-out long segments prefer it (module
    docstring), "yes" always, "no" never.

    Returns the estimate kept, its parameters, the plant its ``theta`` is relative to
    (``plant`` with the held leakages and payload set), the held parameters ``{name: (value, std)}`` (the
    short fit's; empty when the refit is not kept), the report of the choice and the chains
    it was fitted on (their pieces at the final start states, and the pieces per chain; None
    when the refit is not kept)."""
    if choice not in CHOICES:
        raise ValueError(f"refit_long: choice: expected one of {CHOICES}, got {choice!r}")
    if choice == "no":
        return res, spec, plant, {}, {"choice": "no", "how": "--long-refit no"}, None
    names = long_selectors(plant, spec, refine)
    held = {n: (res.values[n], res.std[n]) for n in spec.names if n not in names}
    # the held leakages and payload at the short fit's values; every other reference stays
    # the plant's, so the short estimate is the refit's start as it is (`model_choice.extended_theta`)
    base = oe.strong_types(oe.with_values(plant, {n: v for n, (v, _) in held.items()}))
    long_spec = spec_for(names)
    theta0 = extended_theta(res, long_spec)
    short = oe.plant_with(jnp.asarray(theta0), base, long_spec)
    seg, pieces, heads, m = long_sets(base, log, scales, t_start, t_end)
    pieces = estimate_start_states(short, heads, pieces)
    about = _about(names, held, seg, pieces, m)
    kw = dict(max_evaluations=max_evaluations)
    if choice == "yes":
        with fit_progress.fitting("every long segment"):
            out, end = fit_chains(base, long_spec, pieces, m, theta0=theta0, **kw)
        report = {"choice": "yes", "how": "--long-refit yes", **about}
        return out, long_spec, base, held, report, (end, m)
    train, closed, cost = _held_out_trial(base, long_spec, seg, pieces, m, theta0, max_evaluations)
    keep = cost["yes"] < cost["no"]
    report = {
        "choice": "yes" if keep else "no",
        "held_out_cost": cost,
        "how": f"fitted on {HELD_OUT - 1} of every {HELD_OUT} long segments, the short and the "
        "long estimate scored on the held-out ones from the same estimated start states",
        **about,
    }
    if not keep:
        return res, spec, plant, {}, report, None
    # from the train fit's start states (its chains closed at its estimate), every piece
    # weighing again
    pieces = eqx.tree_at(lambda s: (s.q0, s.qd0, s.p0), pieces, (closed.q0, closed.qd0, closed.p0))
    with fit_progress.fitting("every long segment"):
        out, end = fit_chains(base, long_spec, pieces, m, theta0=train.theta, **kw)
    return out, long_spec, base, held, report, (end, m)
