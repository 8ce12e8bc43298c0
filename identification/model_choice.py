r"""Which parameters the output error fits, chosen from the log: internal leakage or not, the
valves' declared effects held or fitted, the pressure transducers' offsets or none, the
encoders' offsets or none, the mechanics of stage 1 fixed or refined, each by interleaved
cross-validation over the multiple-shooting segments.

A richer parameter set always lowers the fit's own cost, so only segments the fit did not see
say whether it predicts better (Ljung 1999, sec. 16.5: cross-validation for model structure).
Both choices matter in practice and go either way:

- Internal leakage (``cylinder.<a>.c_int``). The crane's true plant leaks (2e-14 m^3/(s Pa),
  about 1 mm of piston drift over 20 s); without a leakage term its valve edges absorb the flow
  and its tilt angle's free run drifted 4.3x the true plant's (stage 2 from estimated start
  states), with a leakage fitted 0.71x. The knuckle does not leak; a leakage fitted there came out at
  6e-15 m^3/(s Pa) on the fold, 3.6 standard deviations off its true 0, and that fold drifted
  2.2x. A log-space leakage cannot reach 0, so "none" is a structure of its own.
- The valves' effects a machine file declares (`effect_selectors`): spool overlap, and the
  command delay with the spool's lag, each group held at the file's values or fitted (from
  them, in log space: each stays positive).
- The pressure transducers' offsets (``sensor.<a>.p_a``, ``p_b``; `sensor_selectors`): a
  transducer's zero is off by up to about a bar, a constant that a model without it explains
  with the valve edges and the bulk modulus (a chamber that reads 1 bar high at 50 bar looks
  2 % stiffer); each offset fitted from 0, additive (either sign).
- The encoders' offsets (``encoder.<coordinate>.offset``; `encoder_selectors`): an encoder's
  zero is off by a fraction of a degree. A replay starts from the reading less the offset and
  is compared plus it, so the offset shows only where the machine's geometry and gravity
  differ between the two angles (the cylinder's lever, the load's arm): often too little for
  the data to determine it, which is what the choice finds out.
- The mechanics: stage 1's masses fixed, or the booms' and payload's masses refined jointly.

Three of every ``HELD_OUT`` segments are fitted, the fourth scored from the same start states;
leakage is chosen first (with the mechanics the cheaper way), then each valve effect, then the
transducers' offsets, then the encoders', then the mechanics, and the winner is refitted on
every segment.

The richer structure must predict the held-out segments better by more than chance: by more
than one standard error of the difference of their costs, estimated from the spread of the
held-out segments' own differences (a paired variant of the one-standard-error rule of
cross-validation, Breiman, Friedman, Olshen & Stone 1984, sec. 3.4.3; Hastie, Tibshirani &
Friedman 2009, sec. 7.10, which take the standard error of the best structure's cost; the
two structures' costs move together from segment to segment, so their difference's spread is
the one that says whether the gain is chance). A plain "lower wins" kept a leakage the mobile
example's machine does not have, by about 1 of a held-out cost of 7704 (0.01 %), and its
telescope's free-run replay drifted 1.5x as far as without it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.identification import fit_progress
from jaxmb.identification import output_error as oe
from jaxmb.identification.noise_weighted import NOISE_FTOL, fit_noise_weighted
from jaxmb.identification.start_states import estimate_start_states

__all__ = [
    "CHOICES",
    "EFFECTS",
    "HELD_OUT",
    "LEAKAGE_REFERENCE",
    "check_choices",
    "choose_and_fit",
    "effect_selectors",
    "encoder_selectors",
    "extended_theta",
    "masked",
    "richer_gain",
    "sensor_selectors",
    "spec_for",
]

CHOICES = {
    "mechanics": ("auto", "fixed", "refined"),
    "leakage": ("auto", "none", "fitted"),
    "valve_effects": ("auto", "held", "fitted"),
    "offsets": ("auto", "none", "fitted"),
    "encoder_offsets": ("auto", "none", "fitted"),
}
# the valves' effects a machine file may declare (`effect_selectors`), chosen in this order
# between the leakage and the mechanics; each "held" at the file's value or "fitted"
EFFECTS = ("overlap", "dynamics")
# each choice's two structures: (without its parameters, with them)
_LABELS = {
    "leakage": ("none", "fitted"),
    "offsets": ("none", "fitted"),
    "encoder_offsets": ("none", "fitted"),
    "mechanics": ("fixed", "refined"),
} | {k: ("held", "fitted") for k in EFFECTS}
HELD_OUT = 4  # every 4th segment is held out when choosing a structure
LEAKAGE_REFERENCE = 1e-14  # m^3/(s Pa): 0.06 l/min at 100 bar, where a leakage fit starts


def masked(seg: oe.Segments, keep: np.ndarray) -> oe.Segments:
    """``seg`` with only the segments ``keep`` in its residual (same shapes: same compile)."""
    w = np.asarray(seg.weights) * keep[:, None]
    return eqx.tree_at(lambda s: s.weights, seg, jnp.asarray(w))


def spec_for(names: Sequence[str]) -> oe.HydraulicParameters:
    """The parameters ``names``, each leakage relative to `LEAKAGE_REFERENCE` (its plant value
    may be 0: no leakage)."""
    ref = {n: LEAKAGE_REFERENCE for n in names if n.endswith(".c_int")}
    return oe.HydraulicParameters(tuple(names), reference=ref)


def extended_theta(res: oe.OutputErrorResult, spec: oe.HydraulicParameters) -> np.ndarray:
    """``res``'s estimate as a start for ``spec`` (a superset): new parameters at their
    references (theta 0)."""
    th = dict(zip(res.names, np.asarray(res.theta).tolist(), strict=True))
    return np.array([th.get(n, 0.0) for n in spec.names])


def check_choices(**given: str) -> None:
    """Refuse a ``--mechanics``, ``--leakage``, ``--valve-effects``, ``--offsets`` or
    ``--encoder-offsets`` that is none of `CHOICES` (before any fit)."""
    for key, value in given.items():
        if value not in CHOICES[key]:
            option = key.replace("_", "-")
            raise ValueError(f"--{option}: expected one of {CHOICES[key]}, got {value!r}")


def choose_and_fit(
    plant: HydraulicPlant,
    base: Sequence[str],
    leaks: Sequence[str],
    refine: Sequence[str],
    seg: oe.Segments,
    *,
    heads: oe.Segments | None = None,
    mechanics: str = "auto",
    leakage: str = "auto",
    effects: Mapping[str, Sequence[str]] | None = None,
    valve_effects: str = "auto",
    sensors: Sequence[str] = (),
    offsets: str = "auto",
    encoders: Sequence[str] = (),
    encoder_offsets: str = "auto",
    max_evaluations: int = 20,
) -> tuple[oe.OutputErrorResult, oe.HydraulicParameters, oe.Segments, dict]:
    """The output-error fit of ``base`` plus, as chosen, the leakages ``leaks``, each group of
    valve ``effects`` (``{"overlap" | "dynamics": selectors}``, `effect_selectors`), the
    transducers' offsets ``sensors`` (`sensor_selectors`), the encoders' ``encoders``
    (`encoder_selectors`) and the masses ``refine``; each signal weighted by its noise level
    (`noise_weighted.fit_noise_weighted`), every segment's start state estimated from
    ``heads`` when given (`start_states.estimate_start_states`). ``mechanics``, ``leakage``,
    ``valve_effects`` (every group of ``effects`` alike), ``offsets`` and
    ``encoder_offsets`` are "auto" (module docstring) or force a choice. Returns the fit, its
    parameters, the segments with their scales and start states, and the report of each
    choice."""
    check_choices(mechanics=mechanics, leakage=leakage, valve_effects=valve_effects,
                  offsets=offsets, encoder_offsets=encoder_offsets)  # fmt: skip
    effects = {k: tuple(v) for k, v in (effects or {}).items() if k in EFFECTS and v}
    groups = {
        "leakage": (tuple(leaks), leakage),
        **{k: (effects.get(k, ()), valve_effects) for k in EFFECTS},
        "offsets": (tuple(sensors), offsets),
        "encoder_offsets": (tuple(encoders), encoder_offsets),
        "mechanics": (tuple(refine), mechanics),
    }
    options = {
        k: (False,) if not names else (False, True) if how == "auto" else (how in ("fitted", "refined"),)
        for k, (names, how) in groups.items()
    }  # fmt: skip
    # every fit below through one compiled program per segment shape (the pilots' half and
    # the whole): the union of the candidates' columns, those outside the candidate fitted
    # held at their nominal values by a mask (`output_error.fit`'s ``columns``)
    kw = dict(max_evaluations=max_evaluations,
              columns=_spec_of(base, groups, {k: max(o) for k, o in options.items()}))  # fmt: skip
    simplest = {k: o[0] for k, o in options.items()}
    if all(len(o) == 1 for o in options.values()):
        spec = _spec_of(base, groups, simplest)
        with fit_progress.fitting("the given structure"):
            res, seg = fit_noise_weighted(plant, spec, seg, heads=heads, **kw)
        report = {k: {"choice": v} for k, v in _labels(groups, simplest).items()}
        return res, spec, seg, _reported(report, groups)
    held = _held_out_segments(seg.ts.shape[0])
    spec = _spec_of(base, groups, simplest)
    with fit_progress.fitting("the simplest structure, held-out segments aside"):
        best, train = fit_noise_weighted(plant, spec, masked(seg, ~held), heads=heads, **kw)
    # the pilots' scales and start states for every segment, the held-out ones included
    seg = eqx.tree_at(lambda s: s.weights, train, seg.weights)
    flags, spec, best, report = _cross_validated(
        plant, base, groups, options, (simplest, spec, best), train, masked(seg, held), held, kw
    )
    res, seg = _fit_chosen(plant, spec, seg, best, heads, flags != simplest, kw)
    return res, spec, seg, _reported(report, groups)


def _spec_of(
    base: Sequence[str], groups: dict, flags: Mapping[str, bool]
) -> oe.HydraulicParameters:
    """The parameters ``base`` plus those of each group of ``groups`` whose flag is set."""
    return spec_for(tuple(base) + sum((groups[k][0] for k in groups if flags[k]), ()))


def _labels(groups: dict, flags: Mapping[str, bool]) -> dict:
    """Each choice's structure by name (`_LABELS`) under ``flags``."""
    return {k: _LABELS[k][int(flags[k])] for k in groups}


def _reported(report: dict, groups: dict) -> dict:
    """``report`` with each choice's candidate parameters named."""
    report["mechanics"]["refined_parameters"] = list(groups["mechanics"][0])
    report["leakage"]["leakage_parameters"] = list(groups["leakage"][0])
    for k in (*EFFECTS, "offsets", "encoder_offsets"):
        report[k]["parameters"] = list(groups[k][0])
    return report


def _held_out_segments(count: int) -> np.ndarray:
    """``(count,)`` bool: every `HELD_OUT`-th segment, scored but not fitted while choosing;
    refused where fewer than two would be held out."""
    k = np.arange(count)
    held = k % HELD_OUT == HELD_OUT - 1
    if held.sum() < 2:  # a standard error needs two held-out differences
        raise ValueError(
            f"--mechanics/--leakage/--valve-effects/--offsets/--encoder-offsets auto: needs at "
            f"least {2 * HELD_OUT} segments to hold two out (the choice's standard error needs two); "
            f"the fit span has {k.size}: a longer log or --window, or each of them given"
        )
    return held


def _cross_validated(plant, base, groups, options, start, train, test, held, kw):
    """``(flags, spec, fit, report)``: from ``start`` (the simplest structure's flags, spec
    and fit on ``train``), each choice with two options decided in turn by the held-out cost
    of ``test`` (`_try_richer`), the others reported as given."""
    flags, spec, best = start
    report = {}
    for key, opts in options.items():
        if len(opts) == 1:
            report[key] = {"choice": _labels(groups, flags)[key]}
            continue
        report[key], richer = _try_richer(
            plant, base, groups, key, (flags, spec, best), train, test, held, kw
        )
        if richer is not None:
            flags, spec, best = richer
    return flags, spec, best, report


def _try_richer(plant, base, groups, key, current, train, test, held, kw):
    """``(report, richer)``: choice ``key``'s structure with its parameters fitted on
    ``train`` from ``current`` (flags, spec, fit), scored against it on the held-out segments
    of ``test``; ``richer`` its ``(flags, spec, fit)`` where it wins (`richer_gain` beyond one
    standard error), else None."""
    flags, spec, best = current
    alt = {**flags, key: True}
    s_alt = _spec_of(base, groups, alt)
    with fit_progress.fitting(f"trying {key} {_labels(groups, alt)[key]}"):
        r_alt = oe.fit(
            plant, s_alt, train, theta0=extended_theta(best, s_alt), ftol=NOISE_FTOL, **kw
        )
    without = oe.segment_costs(best.theta, plant, spec, test, columns=kw["columns"])[held]
    within = oe.segment_costs(r_alt.theta, plant, s_alt, test, columns=kw["columns"])[held]
    gain, se = richer_gain(without, within)
    without_label, with_label = _labels(groups, flags)[key], _labels(groups, alt)[key]
    how = (
        f"interleaved cross-validation: fitted on {HELD_OUT - 1} of every {HELD_OUT} segments, "
        "scored on the held-out ones; the richer structure where it lowers their cost by more "
        "than one standard error of the difference"
    )
    cost = {without_label: float(without.sum()), with_label: float(within.sum())}
    report = {"choice": with_label if gain > se else without_label, "held_out_cost": cost,
              "gain": gain, "standard_error": se, "how": how,
              "held_out_segments": int(held.sum())}  # fmt: skip
    return report, ((alt, s_alt, r_alt) if gain > se else None)


def _fit_chosen(plant, spec, seg, best, heads, changed: bool, kw):
    """``(fit, segments)``: the chosen structure ``spec`` refitted on every segment from its
    estimate ``best``; where it is not the pilots' structure (``changed``), with its own
    scales and start states."""
    if changed:
        # another structure than the pilots fitted: its scales and start states anew, from its
        # estimate (the pilots' start states were estimated by a plant without its
        # parameters: a valve's overlap and lag from the file's values bias them, and a final
        # fit from them kept the edges 1 % and the overlap 0.02 V off)
        with fit_progress.fitting("the chosen structure"):
            return fit_noise_weighted(plant, spec, seg, theta0=best.theta, heads=heads, **kw)
    if heads is not None:  # the start states for the chosen structure's estimate
        seg = estimate_start_states(oe.plant_with(jnp.asarray(best.theta), plant, spec), heads, seg)
    with fit_progress.fitting("the chosen structure, every segment"):
        res = oe.fit(plant, spec, seg, theta0=best.theta, ftol=NOISE_FTOL, **kw)
    return res, seg


def richer_gain(without: np.ndarray, within: np.ndarray) -> tuple[float, float]:
    """``(gain, se)``: how much a richer structure lowers the held-out segments' cost
    (``without`` and ``within``, one cost a segment) and the standard error of that sum,
    ``sqrt(K) std(d)`` of the K segments' differences ``d`` (module docstring)."""
    d = np.asarray(without, float) - np.asarray(within, float)
    se = float(np.sqrt(d.size) * np.std(d, ddof=1)) if d.size > 1 else float("inf")
    return float(d.sum()), se


def effect_selectors(plant: HydraulicPlant) -> dict[str, tuple[str, ...]]:
    """The valves' effects a machine file declares, as the groups `choose_and_fit` chooses:
    ``"overlap"`` (each ``deadband`` > 0) and ``"dynamics"``: each ``delay`` > 0 and the
    spool's lag (a first-order spool's time constant, a second-order one's frequency and
    damping) together, since at the frequencies a log excites a delay and a lag trade off (on
    a synthetic crane log, choosing the delay first and then the lag kept the delay, 3 ms off,
    and held the lag at the file's value: the lag's fit then no longer predicted held-out
    segments better; chosen together, both came out right). Each is a positive leaf, fitted in
    log space from the file's value; a valve whose file declares no overlap or delay has none
    to fit (the report's misfit check says when the ideal valve does not explain a log)."""
    out: dict[str, list[str]] = {k: [] for k in EFFECTS}
    for a in plant.actuators:
        v = a.valve
        if float(v.deadband) > 0:
            out["overlap"].append(f"valve.{a.name}.deadband")
        if float(v.delay) > 0:
            out["dynamics"].append(f"valve.{a.name}.delay")
        out["dynamics"] += [f"valve.{a.name}.{f}" for f in _SPOOL_LEAVES[v.spool]]
    return {k: tuple(v) for k, v in out.items() if v}


_SPOOL_LEAVES = {"none": (), "first": ("tau",), "second": ("omega", "zeta")}


def sensor_selectors(plant: HydraulicPlant) -> tuple[str, ...]:
    """Every chamber's pressure transducer offset (``sensor.<a>.p_a``, ``sensor.<a>.p_b``):
    every machine's pressures are read by transducers, so every machine has them to choose
    (a known offset is subtracted from the log first: ``[log] offsets``)."""
    return tuple(f"sensor.{a}.{c}" for a in plant.actuator_names for c in ("p_a", "p_b"))


def encoder_selectors(plant: HydraulicPlant) -> tuple[str, ...]:
    """Every coordinate's encoder offset (``encoder.<coordinate>.offset``): identification
    reads every coordinate's position from the log, so each has an encoder to choose (a known
    offset is subtracted from the log first: ``[log] offsets``)."""
    return tuple(f"encoder.{c}.offset" for c in plant.coordinate_names)
