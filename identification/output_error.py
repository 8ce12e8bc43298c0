r"""Hydraulic parameter identification by output error with multiple shooting.

The plant (a `jaxmb.actuators.plant.HydraulicPlant`) is simulated open loop with a log's valve commands
(`jaxmb.simulation.CommandTable`, linear interpolation of the logged samples) and its parameters
are chosen to minimise the mismatch between simulated and measured pressures and positions:

    min_theta 1/2 sum_k sum_j sum_c ((y_c(t_kj; theta, x_k) - y~_c(t_kj)) / s_c)^2

Multiple shooting (Bock & Plitt 1984): the log is cut into K segments of ``segment_time``
(default 0.5 s); segment k starts at its first sample from the *measured* state ``x_k`` and
runs for one segment only, so a wrong parameter cannot make the simulation drift far from the
data (a single long open-loop run of a hydraulic crane integrates every flow error into the
positions). All segments are simulated in one `jax.vmap`-ed call.

What is implemented, and what is not:

- Initial states: `make_segments` takes them as measured: ``q`` from the log, ``qd`` its
  zero-phase Savitzky-Golay derivative (`scipy.signal.savgol_filter`, cubic, 51 ms window),
  chamber pressures Savitzky-Golay smoothed (cubic, 21 ms window), spool states at the logged
  command (steady state), LuGre bristle states at their steady state for the measured piston
  velocity. Those filters lag fast motion, and a fit from them is biased (on the knuckle the
  telescope's valve edges came out 5 standard deviations off). `noise_weighted.fit_noise_weighted` given
  ``heads`` re-estimates every start state after each pilot from the log's every sample just
  after it (`start_states`: multiple shooting with free initial states, solved by blocks; the
  Jacobian of the parameter fit stays P columns wide). The identification command passes
  ``heads`` (`hydraulic_route`).
- Residuals: ``q`` (rad) and the chamber pressures (Pa) of every actuator, on every
  ``stride``-th log sample (default 10, i.e. 100 Hz) after each segment's start, each divided
  by a per-signal scale ``s_c``: by default the signal's standard deviation over the log, so
  that positions and pressures weigh by how much they vary (an explicit ``scales`` mapping
  overrides it). That weighting converges from far away but is not maximum likelihood: an
  encoder's noise is ~1e-4 of its signal's spread, a pressure sensor's ~1e-2, so the angles,
  which pin the flow most directly, weigh ~100x too little. `noise_weighted.fit_noise_weighted` therefore
  scales each signal by its own residual RMS (the ML estimate of its noise level, start-state
  errors included; Ljung 1999, ch. 7: maximum likelihood with unknown noise variances),
  alternating fits and rescaling until the two agree, which is what a free-run replay's drift
  rewards.
- Integration: classical RK4 with a fixed 1 ms step (``dt``), differentiated in forward mode
  (`diffrax.ForwardMode`, `jax.jacfwd`): the Jacobian is then the exact derivative of the
  discrete solution, with no adjoint error (the reverse-mode pitfall of adaptive solves at
  loose tolerances does not arise). Measured on the synthetic crane, eight 0.5 s segments:
  RK4 1 ms against Tsit5 at rtol 1e-10 differs by 3e-7 rad and 0.005 bar, far below the
  sensors' resolution, and runs 10x faster than that adaptive solve. The P columns share
  one state Jacobian per vector-field evaluation (`simulate` under
  `jaxmb.simulation.sensitivities.SharedJacobianForwardMode`: forward sensitivities by the
  staggered direct method), so a column costs a small matrix product plus the part of the
  plant its parameter enters.
- Parameters: plant leaves named by selectors (`HydraulicParameters`). A positive leaf is
  ``value = reference * exp(theta)`` with the reference the nominal value, so the optimiser
  sees O(1) numbers and values stay positive; a body's centre coordinate, which may sit at 0
  or below, is ``nominal + COM_STEP * theta``, a pressure transducer's offset (either sign)
  ``nominal + SENSOR_STEP * theta``, an encoder's ``nominal + ENCODER_STEP * theta``.
- Solver: `scipy.optimize.least_squares` (trust-region reflective, box bounds on theta) with
  the Jacobian from `jax.jacfwd`; the result carries the cost history, the residuals and the
  Jacobian at the optimum, and the covariance of theta: Newey & West's sandwich around
  ``(J^T J)^{-1}``, which counts residuals correlated in time (an encoder's quantisation, a
  replay's slow drift) as the fewer independent samples they are (`newey_west`).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
import scipy.signal
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Float

from jaxmb import compile_cache
from jaxmb.actuators.hydraulics import LuGreFriction
from jaxmb.actuators.parameters import (
    COM_AXES,
    COM_STEP,
    ENCODER_STEP,
    INERTIA_AXES,
    SENSOR_STEP,
    HydraulicParameters,
    additive_step,
    is_additive,
    is_entry,
    parameter_getter,
    with_values,
)
from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.compile_cache import strong_types
from jaxmb.identification import fit_progress, newey_west
from jaxmb.identification.least_squares import model_decrease
from jaxmb.multibody.checks import as_real_array, check_number, check_type
from jaxmb.saved_programs import saved
from jaxmb.simulation import CommandTable, simulate
from jaxmb.simulation.sensitivities import SharedJacobianForwardMode

__all__ = [
    "HydraulicParameters",
    "parameter_getter",
    "Segments",
    "OutputErrorResult",
    "make_segments",
    "plant_with",
    "parameter_values",
    "with_values",
    "initial_theta",
    "simulate_segments",
    "simulate_one",
    "reading_offsets",
    "with_segment_payload",
    "join_segments",
    "residuals",
    "residuals_and_jacobian",
    "embedding",
    "cost",
    "segment_costs",
    "per_device",
    "segment_batches",
    "fit",
    "residual_scales",
    "with_scales",
    "with_block",
    "pilot_segments",
    "free_run_segment",
    "predict",
    "COM_STEP",
    "ENCODER_STEP",
    "SENSOR_STEP",
    "additive_step",
    "is_entry",
    "is_additive",
    "value_std",
    "strong_types",
    "theta_covariance",
]


def _references(plant: HydraulicPlant, spec: HydraulicParameters) -> tuple[Array, Array]:
    """``(reference values, theta0)``: theta0 = log(nominal / reference) (0 where nominal = 0);
    an additive selector's reference is its nominal value, theta0 = 0."""
    given = dict(spec.reference)
    refs, th0 = [], []
    for n in spec.names:
        nominal = parameter_getter(plant, n)(plant)
        if is_additive(n):
            refs.append(nominal)
            th0.append(jnp.zeros(()))
            continue
        if n in given:
            ref = jnp.asarray(given[n])
            th0.append(jnp.where(nominal > 0, jnp.log(jnp.where(nominal > 0, nominal, 1) / ref), 0))
        else:
            if not isinstance(nominal, jax.core.Tracer) and not float(nominal) > 0:
                raise ValueError(
                    f"parameter {n!r}: nominal value is {float(nominal)}; a leaf that is 0 "
                    "needs a positive entry in HydraulicParameters(reference=...)"
                )
            ref = nominal
            th0.append(jnp.zeros(()))
        refs.append(ref)
    return jnp.stack(refs), jnp.stack(th0)


def _values(refs: Array, theta: Array, spec: HydraulicParameters) -> Array:
    """Each selected leaf's value: ``reference * exp(theta)``, or ``nominal +
    additive_step(name) * theta`` for the additive ones."""
    step = np.array([additive_step(n) if is_additive(n) else 0.0 for n in spec.names])
    return jnp.where(step > 0, refs + step * theta, refs * jnp.exp(theta))


def value_std(
    std: Float[np.ndarray, " P"], spec: HydraulicParameters, values: Mapping[str, float]
) -> dict[str, float]:
    """First-order std of each value from theta's: ``value * std(theta)``, or
    ``additive_step(name) * std(theta)`` for the additive ones."""
    return {
        n: (additive_step(n) if is_additive(n) else values[n]) * float(s)
        for n, s in zip(spec.names, std, strict=True)
    }  # fmt: skip


def initial_theta(plant: HydraulicPlant, spec: HydraulicParameters) -> Float[Array, " P"]:
    """theta of the plant's own values: zeros, except ``log(nominal / reference)`` for leaves
    given a reference (0 where the nominal is 0)."""
    return _references(plant, spec)[1]


def plant_with(
    theta: Float[Array, " P"],
    plant: HydraulicPlant,
    spec: HydraulicParameters,
    active: Float[Array, " P"] | None = None,
) -> HydraulicPlant:
    """``plant`` (the nominal) with each selected leaf set to ``reference * exp(theta)`` (a
    centre's coordinate to ``nominal + COM_STEP * theta``). A body keeps its inertia about its
    centre: a refined centre moves the body rigidly. (Keeping instead its inertia about its
    frame's origin, the regressor's parameter, leaves the masses of the first boom and of
    bodies beyond a prismatic joint undetermined, and a point payload unphysical.) Uses
    `equinox.tree_at` (no constructor checks: a log-scaled value is positive by construction;
    an inertia diagonal scaled far from its start can leave the physically realisable set,
    which `fit`'s ``bound`` does not prevent).

    ``active`` (P,), data rather than structure: where it is 0 the leaf keeps its nominal value
    whatever theta holds, so one compiled program serves every subset of ``spec``
    (`fit`'s ``columns``)."""
    if theta.shape != (len(spec),):
        raise ValueError(f"plant_with: theta must have shape ({len(spec)},), got {theta.shape}")
    refs, _ = _references(plant, spec)
    values = _values(refs, theta, spec)
    if active is not None:
        nominal = jnp.stack([parameter_getter(plant, n)(plant) for n in spec.names])
        values = jnp.where(active > 0, values, nominal)
    leaves = [i for i, n in enumerate(spec.names) if not is_entry(n)]
    getters = [parameter_getter(plant, spec.names[i]) for i in leaves]
    out = eqx.tree_at(lambda p: [g(p) for g in getters], plant, [values[i] for i in leaves])
    # a centre's coordinates, an inertia's diagonal, are entries of one leaf: set them together
    arrays: dict[tuple[int, str], Array] = {}
    for i, n in enumerate(spec.names):
        if is_entry(n):
            _, who, field = n.split(".")
            j = plant.model.body_names.index(who)
            if field in COM_AXES:
                com = arrays.get((j, "com"), plant.model.bodies[j].com)
                arrays[j, "com"] = com.at[COM_AXES[field]].set(values[i])
            else:
                k = INERTIA_AXES[field]
                inertia = arrays.get((j, "inertia"), plant.model.bodies[j].inertia)
                arrays[j, "inertia"] = inertia.at[k, k].set(values[i])
    if not arrays:
        return out
    return eqx.tree_at(
        lambda p: [getattr(p.model.bodies[j], leaf) for j, leaf in arrays],
        out,
        list(arrays.values()),
    )


def parameter_values(
    theta: Float[Array, " P"], plant: HydraulicPlant, spec: HydraulicParameters
) -> dict[str, float]:
    """``{selector: reference * exp(theta)}`` (``nominal + COM_STEP * theta`` for a centre)
    in SI units."""
    refs, _ = _references(plant, spec)
    vals = np.asarray(_values(refs, jnp.asarray(theta), spec))
    return {n: float(v) for n, v in zip(spec.names, vals, strict=True)}


# ---------------------------------------------------------------------------------------------
# logs and segments


class Segments(eqx.Module):
    """A log cut into K multiple-shooting segments (`make_segments`).

    Attributes:
        ts: (K, S) save times of each segment, s; ``ts[:, 0]`` is its start.
        q0, qd0: (K, n) measured start coordinates and velocities (rad, rad/s).
        p0: (K, m, 2) measured start pressures ``[p_a, p_b]`` per actuator, Pa.
        targets: (K, S, c) the measured signals at ``ts`` (SI units).
        weights: (K, S) 1 where a sample enters the residual, 0 at each start.
        scale: (c,) per-signal scale ``s_c`` of the residual (SI units).
        payload: (K, 13) the payload body during each segment where its log names the load:
            mass (kg), centre (m, in its link) and inertia about it (kg m^2, row-major); a NaN
            mass where the plant's own payload (fitted, or the file's) applies: the logs of a
            campaign (`campaign`) carry different loads on one machine.
        commands: the log's valve commands (`CommandTable`; a campaign's logs joined on one
            time axis).
        signal_names: the c residual signals (static).
        n_steps: solver steps per segment (static).
        block: segments per call of the compiled residual-and-Jacobian program (static;
            None: all K in one call). `noise_weighted.fit_noise_weighted` sets it to its
            pilots' count (`with_block`), so that the pilots, which fit half the segments,
            and every later fit on all of them run one program (`residuals_and_jacobian`).
    """

    ts: Float[Array, "K S"]
    q0: Float[Array, "K n"]
    qd0: Float[Array, "K n"]
    p0: Float[Array, "K m 2"]
    targets: Float[Array, "K S c"]
    weights: Float[Array, "K S"]
    scale: Float[Array, " c"]
    payload: Float[Array, "K 13"]
    commands: CommandTable
    signal_names: tuple[str, ...] = eqx.field(static=True)
    n_steps: int = eqx.field(static=True)
    block: int | None = eqx.field(static=True, default=None)

    @property
    def n_residuals(self) -> int:
        return int(np.sum(np.asarray(self.weights) > 0)) * len(self.signal_names)


def _checked_log(
    plant: HydraulicPlant,
    log: Mapping[str, np.ndarray],
    segment_time: float,
    stride: int,
    dt: float,
) -> tuple[Float[np.ndarray, " N"], float, tuple[str, ...]]:
    """``(t, sample period, residual signal names)`` of a log `make_segments` accepts: the
    arguments' types, the log's columns (all present and finite) and a uniform time axis."""
    check_type(plant, HydraulicPlant, "make_segments: plant")
    check_type(
        log, Mapping, "make_segments: log (columns by name; see hydraulic_route.log_columns)"
    )
    check_number(segment_time, "make_segments: segment_time (s)", above=0)
    check_number(stride, "make_segments: stride", integer=True, at_least=1)
    check_number(dt, "make_segments: dt (s)", above=0)
    required = (
        ["t"]
        + list(plant.coordinate_names)
        + [f"{c}_{a}" for a in plant.actuator_names for c in ("p_a", "p_b")]
        + list(plant.input_names)
    )
    missing = [c for c in required if c not in log]
    if missing:
        raise ValueError(f"make_segments: log lacks column(s) {missing}")
    t = np.asarray(log["t"], dtype=float)
    h = np.diff(t)
    if t.ndim != 1 or t.size < 3 or not np.all(h > 0):
        raise ValueError("make_segments: column 't' must be 1-D and strictly increasing")
    h_mean = float(np.mean(h))
    if np.max(np.abs(h - h_mean)) > 1e-6 * h_mean:
        raise ValueError("make_segments: column 't' must be uniformly sampled")
    names = tuple(plant.coordinate_names) + tuple(
        f"{c}_{a}" for a in plant.actuator_names for c in ("p_a", "p_b")
    )
    for c in names + tuple(plant.input_names):
        if not np.all(np.isfinite(log[c])):
            raise ValueError(f"make_segments: column {c!r} holds NaN or inf")
    return t, h_mean, names


def _segment_starts(
    t: Float[np.ndarray, " N"],
    h_mean: float,
    segment_time: float,
    stride: int,
    t_start: float | None,
    t_end: float | None,
) -> tuple[int, int, int, np.ndarray]:
    """``(L, i_lo, i_hi, starts)``: samples per segment, the first and last sample of
    ``[t_start, t_end]`` and the (K,) first sample of each whole segment within it."""
    L = int(round(segment_time / h_mean))  # samples per segment
    if L < stride or L % stride:
        raise ValueError(
            f"make_segments: segment_time {segment_time} s must be a multiple of stride x the "
            f"sample period ({stride} x {h_mean:g} s)"
        )
    i_lo = 0 if t_start is None else int(np.searchsorted(t, t_start - 0.5 * h_mean))
    i_hi = t.size - 1 if t_end is None else int(np.searchsorted(t, t_end + 0.5 * h_mean)) - 1
    starts = np.arange(i_lo, i_hi - L + 1, L)
    if starts.size == 0:
        raise ValueError(
            f"make_segments: [{t[i_lo]}, {t[i_hi]}] s is shorter than one segment of "
            f"{segment_time} s"
        )
    return L, i_lo, i_hi, starts


def _smoothed_states(
    plant: HydraulicPlant, log: Mapping[str, np.ndarray], h_mean: float
) -> tuple[Float[np.ndarray, "N n"], Float[np.ndarray, "N n"], Float[np.ndarray, "N m 2"]]:
    """``(q, qd, p)`` at every log sample for the start states: ``q`` as logged, ``qd`` its
    zero-phase derivative and the chamber pressures zero-phase smoothed (cubic
    Savitzky-Golay, 51 ms and 21 ms windows: the module docstring)."""
    w_d = 2 * int(round(0.025 / h_mean)) + 1
    w_p = 2 * int(round(0.010 / h_mean)) + 1
    q = np.stack([np.asarray(log[c], float) for c in plant.coordinate_names], axis=1)
    qd = scipy.signal.savgol_filter(q, w_d, 3, deriv=1, delta=h_mean, axis=0)
    p = np.stack(
        [
            np.stack([np.asarray(log[f"{c}_{a}"], float) for c in ("p_a", "p_b")], axis=1)
            for a in plant.actuator_names
        ],
        axis=1,
    )  # (N, m, 2)
    p_s = scipy.signal.savgol_filter(p, w_p, 3, axis=0)
    return q, qd, p_s


def _signal_scales(
    y: Float[np.ndarray, "N c"],
    names: tuple[str, ...],
    scales: Mapping[str, float] | None,
    i_lo: int,
    i_hi: int,
) -> Float[np.ndarray, " c"]:
    """Each residual signal's scale ``s_c``: ``scales``'s entry, else its standard deviation
    over samples ``i_lo..i_hi``; refused unless every one is positive."""
    sc = np.array(
        [float((scales or {}).get(c, np.std(y[i_lo : i_hi + 1, j]))) for j, c in enumerate(names)]
    )
    if not np.all(sc > 0):
        raise ValueError(
            f"make_segments: scales must be > 0, got {dict(zip(names, sc, strict=True))}"
        )
    return sc


def make_segments(
    plant: HydraulicPlant,
    log: Mapping[str, np.ndarray],
    *,
    segment_time: float = 0.5,
    stride: int = 10,
    t_start: float | None = None,
    t_end: float | None = None,
    scales: Mapping[str, float] | None = None,
    dt: float = 1e-3,
) -> Segments:
    """Cut ``log`` (columns ``t``, the plant's coordinates, ``p_a_<a>``, ``p_b_<a>`` and
    ``u_<a>``, SI) into consecutive segments of ``segment_time`` s within ``[t_start, t_end]``.

    Start states: see the module docstring. Scales ``s_c``: the standard deviation of each
    residual signal over the whole log unless ``scales`` gives it. ``dt``: the solver step of
    `simulate_segments` (s); the log must be uniformly sampled with a period dividing it."""
    t, h_mean, names = _checked_log(plant, log, segment_time, stride, dt)
    L, i_lo, i_hi, starts = _segment_starts(t, h_mean, segment_time, stride, t_start, t_end)
    q, qd, p_s = _smoothed_states(plant, log, h_mean)
    idx = starts[:, None] + stride * np.arange(L // stride + 1)[None, :]  # (K, S)
    y = np.stack([np.asarray(log[c], float) for c in names], axis=1)
    sc = _signal_scales(y, names, scales, i_lo, i_hi)
    weights = np.ones(idx.shape)
    weights[:, 0] = 0.0  # the start sample is the initial condition, not a prediction
    commands = CommandTable(t, np.stack([log[c] for c in plant.input_names], axis=1),
                            plant.input_names)  # fmt: skip
    return Segments(
        ts=jnp.asarray(t[idx]),
        q0=jnp.asarray(q[starts]),
        qd0=jnp.asarray(qd[starts]),
        p0=jnp.asarray(p_s[starts]),
        targets=jnp.asarray(y[idx]),
        weights=jnp.asarray(weights),
        scale=jnp.asarray(sc),
        payload=jnp.asarray(np.full((starts.size, 13), np.nan)),
        commands=commands,
        signal_names=names,
        n_steps=int(np.ceil(segment_time / dt)) + 8,
    )


def _start_state(plant: HydraulicPlant, commands: CommandTable, t0, q0, qd0, p0) -> dict:
    """Actuator states at a segment start: the measured pressures less their transducers'
    offsets (`jaxmb.actuators.hydraulics.PressureTransducers`); the spool where the logged
    commands before ``t0`` (delayed as the valve receives them) left it
    (`jaxmb.actuators.hydraulics.Valve.spool_at`); LuGre bristles at their steady state
    ``z = g(v) v / (sigma0 |v|_s)`` for the measured piston velocity (0 at rest)."""
    _, xd, _ = plant.piston_kinematics(q0, qd0)
    table = commands.for_plant(plant)
    out = {}
    for i, a in enumerate(plant.actuators):
        s = {"p_a": p0[i, 0] - a.sensor.p_a, "p_b": p0[i, 1] - a.sensor.p_b}
        if a.valve.n_states:
            s["spool"] = a.valve.spool_at(lambda t, i=i: table(t)[i], t0)
        if a.friction is not None and a.friction.n_states:
            f = a.friction
            if not isinstance(f, LuGreFriction):
                raise ValueError(f"actuator {a.name!r}: no start state for {type(f).__name__}")
            s["z"] = f.steady_z(xd[i])[None]
        out[a.name] = s
    return out


def simulate_segments(
    plant: HydraulicPlant, segments: Segments, *, dt: float = 1e-3
) -> Float[Array, "K S c"]:
    """Every segment simulated open loop from its measured start state with the logged
    commands (classical RK4, fixed step ``dt``, forward-mode differentiable), vmapped; the
    signals ``segments.signal_names`` at ``segments.ts`` (SI units). A failed segment gives
    NaN rows."""

    def one(ts, q0, qd0, p0, payload):
        return simulate_one(plant, segments, ts, q0, qd0, p0, dt=dt, payload=payload)

    return jax.vmap(one)(segments.ts, segments.q0, segments.qd0, segments.p0, segments.payload)


def simulate_one(
    plant: HydraulicPlant,
    segments: Segments,
    ts,
    q0,
    qd0,
    p0,
    *,
    dt: float = 1e-3,
    end_velocity: bool = False,
    payload=None,
) -> Float[Array, "S c"] | tuple[Float[Array, "S c"], Float[Array, " n"]]:
    """One segment of `simulate_segments` from the start state ``(q0, qd0, p0)`` at
    ``ts[0]``: the signals ``segments.signal_names`` at ``ts``, differentiable in forward
    mode with the plant's state Jacobian shared among the columns
    (`SharedJacobianForwardMode`). ``end_velocity``: also the velocities at ``ts[-1]``
    (with the signals' last row, the state a next segment starts from; `shooting`).
    ``payload``: the segment's payload body (`Segments.payload`; a NaN mass: the plant's)."""
    if payload is not None:
        plant = with_segment_payload(plant, payload)
    q0 = q0 - jnp.stack(plant.encoders)  # the coordinates, from what the encoders read
    act0 = _start_state(plant, segments.commands, ts[0], q0, qd0, p0)
    tr = simulate(
        plant, segments.commands, None, q0, qd0, ts,
        solver="rk4", fixed_step=dt, actuator_state0=act0, max_steps=segments.n_steps,
        adjoint=SharedJacobianForwardMode(), throw=False,
    )  # fmt: skip
    y = jnp.stack([tr.signal(c) for c in segments.signal_names], axis=-1)
    y = y + reading_offsets(plant, segments.signal_names)[None, :]  # what the sensors read
    return (y, tr.qd[-1]) if end_velocity else y


def reading_offsets(plant: HydraulicPlant, names: Sequence[str]) -> Float[Array, " c"]:
    """What each signal's sensor reads beyond the signal: a chamber pressure's transducer
    offset (``p_a_<a>``, ``p_b_<a>``; `jaxmb.actuators.hydraulics.PressureTransducers`), a
    coordinate's encoder offset (`HydraulicPlant`'s ``encoders``), 0 for the others.
    Segments hold readings (`Segments.q0`, ``p0``, ``targets``): a simulation starts from a
    reading less its offset (`simulate_one`, `_start_state`) and is compared plus it."""
    out = []
    for c in names:
        a = next((a for a in plant.actuators if c in (f"p_a_{a.name}", f"p_b_{a.name}")), None)
        if a is not None:
            out.append(getattr(a.sensor, c[:3]))
        elif c in plant.coordinate_names:
            out.append(plant.encoders[plant.coordinate_names.index(c)])
        else:
            out.append(jnp.zeros(()))
    return jnp.stack(out)


def with_segment_payload(plant: HydraulicPlant, payload) -> HydraulicPlant:
    """``plant`` with its payload body set to ``payload`` (13,): mass, centre, inertia as in
    `Segments.payload`, where the mass is a number; its own where NaN. A plant without a
    payload body as it is."""
    names = plant.model.body_names
    if "payload" not in names:
        return plant
    j = names.index("payload")
    body = plant.model.bodies[j]
    known = ~jnp.isnan(payload[0])
    row = jnp.nan_to_num(payload)
    return eqx.tree_at(
        lambda p: (p.model.bodies[j].mass, p.model.bodies[j].com, p.model.bodies[j].inertia),
        plant,
        (jnp.where(known, row[0], body.mass), jnp.where(known, row[1:4], body.com),
         jnp.where(known, row[4:].reshape(3, 3), body.inertia)),
    )  # fmt: skip


def join_segments(parts: Sequence[Segments], commands: CommandTable) -> Segments:
    """The segments of several logs as one set (a campaign, `campaign.Campaign`): their
    per-segment fields concatenated in order, ``commands`` the logs' commands joined on the
    time axis their ``ts`` share. Every part must have the same samples per segment and the
    same signals; the first part's scales and solver steps serve all."""
    first = parts[0]
    for k, p in enumerate(parts[1:], 1):
        if p.ts.shape[1:] != first.ts.shape[1:] or p.signal_names != first.signal_names:
            raise ValueError(
                f"join_segments: part {k} has segments of shape {p.ts.shape[1:]} and signals "
                f"{p.signal_names}, part 0 {first.ts.shape[1:]} and {first.signal_names}"
            )
    fields = [jnp.concatenate([getattr(p, f) for p in parts]) for f in PER_SEGMENT]
    out = eqx.tree_at(lambda s: [getattr(s, f) for f in PER_SEGMENT], first, fields)
    n_steps = max(p.n_steps for p in parts)
    return dataclasses.replace(out, commands=commands, n_steps=n_steps)


# a diverged segment (NaN) costs this much per residual instead of poisoning the solver
DIVERGED = 1e3


def residuals(
    theta: Float[Array, " P"],
    plant: HydraulicPlant,
    spec: HydraulicParameters,
    segments: Segments,
    *,
    dt: float = 1e-3,
    active: Float[Array, " P"] | None = None,
) -> Float[Array, " N"]:
    r"""The weighted output error ``w (y(theta) - y~) / s`` of every segment, flattened
    (segment, sample, signal order; the zero-weight start samples are kept as zeros so that
    the shape is static); ``active`` as `plant_with`'s."""
    y = simulate_segments(plant_with(theta, plant, spec, active), segments, dt=dt)
    r = (y - segments.targets) / segments.scale[None, None, :] * segments.weights[..., None]
    return jnp.where(jnp.isfinite(r), r, DIVERGED).reshape(-1)


def residuals_and_jacobian(
    theta: Float[Array, " P"],
    plant: HydraulicPlant,
    spec: HydraulicParameters,
    segments: Segments,
    dt: float = 1e-3,
    active: Float[Array, " P"] | None = None,
) -> tuple[Float[Array, " N"], Float[Array, "N P"]]:
    """`residuals` and their Jacobian ``d r / d theta`` by forward mode (`jax.jacfwd`), one
    compiled function per (spec, segment shapes), the segments shared among the local devices
    (`per_device`), in calls of ``segments.block`` segments where that is set (`with_block`).
    ``active`` (default all 1) is an argument of that function, not part of it: the columns
    of the leaves it holds at their nominal values come out 0. The plant's leaves are made
    strongly typed (`strong_types`), as `fit` makes them, so that a call here and a fit of the
    same plant share that program (a weak type is part of its signature: the crane's 8
    segments, 20-25 s a compile)."""
    active = jnp.asarray(np.ones(len(spec)) if active is None else active, float)
    plant = strong_types(plant)
    # the program never sees the block (a static field would make each block size a program)
    K, block, segments = segments.ts.shape[0], segments.block, with_block(segments, None)
    if block is None or K <= block:
        return _residuals_and_jacobian(theta, plant, spec, segments, dt, active)
    # in calls of ``block`` segments (the last padded with copies that weigh nothing): the
    # program of the pilots' shape serves every fit of the log (`with_block`); the rows are
    # per segment, so the blocks' rows in order are the whole set's. `jnp`, not the host:
    # the blocks stay where they were computed, and a caller's own `jit` around this traces
    parts = [
        _residuals_and_jacobian(theta, plant, spec, b, dt, active)
        for b in segment_batches(segments, block)
    ]
    rows = K * segments.targets.shape[1] * segments.targets.shape[2]
    return tuple(jnp.concatenate([p[i] for p in parts])[:rows] for i in range(2))


@saved
def _residuals_and_jacobian(theta, plant, spec, segments, dt, active):
    def local(th, p, seg):
        def f(t):
            r = residuals(t, p, spec, seg, dt=dt, active=active).reshape(seg.targets.shape)
            return r, r

        J, r = jax.jacfwd(f, has_aux=True)(th)
        return r, J

    r, J = per_device(local, theta, plant, segments)
    r, J = r.reshape(-1), J.reshape(-1, theta.shape[0])
    return r, jnp.where(jnp.isfinite(J), J, 0.0)


def embedding(
    spec: HydraulicParameters, columns: HydraulicParameters, who: str = "embedding"
) -> tuple[np.ndarray, Float[Array, " C"]]:
    """``(index, active)``: where each of ``spec``'s parameters sits among ``columns`` (a
    superset, the same reference for every name both hold) and the (C,) mask of those
    columns. Refuses a ``columns`` that lacks one of ``spec``'s names or gives it another
    reference: theta would then mean another value."""
    missing = [n for n in spec.names if n not in columns.names]
    if missing:
        raise ValueError(f"{who}: columns: {missing} of the fitted parameters are not among them")
    ref, col_ref = dict(spec.reference), dict(columns.reference)
    other = [n for n in spec.names if ref.get(n) != col_ref.get(n)]
    if other:
        raise ValueError(
            f"{who}: columns: {other} have another reference than the fitted parameters"
        )
    index = np.array([columns.names.index(n) for n in spec.names])
    active = np.zeros(len(columns))
    active[index] = 1.0  # built on the host: an eager `.at[].set` compiles per shape
    return index, jnp.asarray(active)


def cost(
    theta: Float[np.ndarray, " P"],
    plant: HydraulicPlant,
    spec: HydraulicParameters,
    segments: Segments,
    *,
    columns: HydraulicParameters | None = None,
    dt: float = 1e-3,
) -> float:
    """``1/2 |r|^2`` of `residuals` at ``theta``, by the compiled program `fit` uses for the
    same ``columns`` and shapes (its Jacobian unused: one evaluation costs less than
    compiling the residuals alone, 5-10 s on the crane)."""
    return float(np.sum(segment_costs(theta, plant, spec, segments, columns=columns, dt=dt)))


def segment_costs(
    theta: Float[np.ndarray, " P"],
    plant: HydraulicPlant,
    spec: HydraulicParameters,
    segments: Segments,
    *,
    columns: HydraulicParameters | None = None,
    dt: float = 1e-3,
) -> Float[np.ndarray, " K"]:
    """Each segment's ``1/2 |r_k|^2`` (`cost`'s terms): 0 where a segment weighs nothing,
    unless its simulation diverged (`DIVERGED` residuals)."""
    cols = spec if columns is None else columns
    index, active = embedding(spec, cols, "cost")
    theta = np.asarray(theta, float)
    if theta.shape != (len(spec),):
        raise ValueError(f"cost: theta must have shape ({len(spec)},), got {theta.shape}")
    full = np.zeros(len(cols))
    full[index] = theta
    r, _ = residuals_and_jacobian(
        jnp.asarray(full), strong_types(plant), cols, segments, dt, active
    )
    return 0.5 * np.sum(np.asarray(r).reshape(segments.ts.shape[0], -1) ** 2, axis=1)


def per_device(fn, theta, plant: HydraulicPlant, segments: Segments):
    """``fn(theta, plant, segments)``, whose outputs run along the segments (leading axis K),
    with the segments shared among the local devices: the segments are independent, so with
    several devices (the CLI splits the CPU into one XLA device per core) each runs its share
    (`jax.shard_map`, as a Monte Carlo study does with its samples), the batch padded to a
    multiple of the device count with zero-weight copies of the last segment. One device: a
    plain call. Call it under `jax.jit`."""
    devices = jax.local_devices()
    K = segments.ts.shape[0]
    if len(devices) == 1 or K == 1:
        return fn(theta, plant, segments)
    segments = _padded(segments, len(devices))
    dynamic, static = eqx.partition((plant, segments), eqx.is_array)
    specs = jax.tree.map(lambda _: P(), dynamic)
    specs = eqx.tree_at(
        lambda d: [getattr(d[1], f) for f in PER_SEGMENT], specs,
        [P("segment")] * len(PER_SEGMENT),
    )  # fmt: skip
    out = jax.shard_map(
        lambda th, d: fn(th, *eqx.combine(d, static)),
        mesh=Mesh(np.asarray(devices), ("segment",)),
        in_specs=(P(), specs),
        out_specs=P("segment"),
        check_vma=False,
    )(theta, dynamic)
    return jax.tree.map(lambda x: x[:K], out)


# the fields of `Segments` that run along its segments
PER_SEGMENT = ("ts", "q0", "qd0", "p0", "targets", "weights", "payload")


def segment_batches(segments: Segments, size: int) -> list[Segments]:
    """``segments`` in batches of ``size`` (the log's commands shared), the last padded with
    copies of the last segment that weigh nothing: a compiled program of one batch's shape
    serves every count of segments. On the host (numpy): slicing on the device would compile
    an eager program for every new count."""
    K = segments.ts.shape[0]
    fields = {f: np.asarray(getattr(segments, f)) for f in PER_SEGMENT}
    extra = -K % size
    fields = {f: np.concatenate([x, np.repeat(x[-1:], extra, axis=0)]) for f, x in fields.items()}
    fields["weights"][K:] = 0.0
    return [
        eqx.tree_at(
            lambda s: [getattr(s, f) for f in PER_SEGMENT],
            segments,
            [fields[f][lo : lo + size] for f in PER_SEGMENT],
        )  # fmt: skip
        for lo in range(0, K + extra, size)
    ]


def _padded(segments: Segments, multiple: int) -> Segments:
    """``segments`` padded to a multiple of ``multiple`` segments with copies of the last one
    that weigh nothing (for an even split over devices)."""
    K = segments.ts.shape[0]
    extra = -K % multiple
    if not extra:
        return segments

    def pad(f):
        x = getattr(segments, f)
        tail = jnp.broadcast_to(x[-1:], (extra, *x.shape[1:]))
        return jnp.concatenate([x, jnp.zeros_like(tail) if f == "weights" else tail])

    # the zero weights by concatenation, not `.at[K:].set(0)`: under jit, XLA (jaxlib 0.10.2,
    # CPU) partitions that scatter wrongly when its result feeds the devices' shares: with
    # 3 segments padded to 4 on two devices and an odd number of samples, the first device's
    # second segment came out as a copy of the third (tests/test_output_error.py, sharded)
    return eqx.tree_at(
        lambda s: [getattr(s, f) for f in PER_SEGMENT], segments,
        [pad(f) for f in PER_SEGMENT],
    )  # fmt: skip


class OutputErrorResult(eqx.Module):
    """An output-error fit.

    Attributes:
        names: the identified selectors.
        theta: (P,) log-space estimates (value = reference * exp(theta); additive for a
            centre of mass, `HydraulicParameters`).
        values: ``{name: value}`` (SI).
        std: ``{name: one-sigma standard deviation}`` (SI, first order, from ``covariance``;
            infinite for a parameter the log does not determine, `theta_covariance`).
        plant: the plant with the estimates.
        cost, cost0: final and initial ``1/2 |r|^2``.
        cost_history: (E,) the cost at every residual evaluation, in order.
        residuals: (N,) at the optimum; jacobian: (N, P) at the optimum.
        sigma2: residual variance ``|r|^2 / (N_eff - P)``.
        covariance: (P, P) of theta, on the directions the residuals see: Newey & West's
            sandwich for residuals correlated in time (`theta_covariance`).
        bandwidth: its Bartlett bandwidth (residual samples; 0: the residuals taken white).
        n_evaluations, wall_time (s), success, message: of the solver.
    """

    names: tuple[str, ...] = eqx.field(static=True)
    theta: np.ndarray
    values: dict
    std: dict
    plant: HydraulicPlant
    cost: float
    cost0: float
    cost_history: np.ndarray
    residuals: np.ndarray
    jacobian: np.ndarray
    sigma2: float
    covariance: np.ndarray
    n_evaluations: int
    wall_time: float
    success: bool
    message: str
    bandwidth: int = 0


def _fit_start(
    plant: HydraulicPlant,
    spec: HydraulicParameters,
    segments: Segments,
    theta0,
    bound: float,
    max_evaluations: int,
    xtol: float,
    ftol: float,
    dt: float,
    columns: HydraulicParameters | None,
) -> tuple[HydraulicParameters, np.ndarray, Float[Array, " C"], Float[Array, " P"]]:
    """``(columns, index, active, theta0)`` of a `fit` whose arguments it checks: the columns
    of the compiled program (``spec`` by default), where ``spec`` sits among them and their
    mask (`embedding`), and the start (the nominal plant's theta by default)."""
    check_type(plant, HydraulicPlant, "fit: plant")
    check_type(spec, HydraulicParameters, "fit: spec")
    check_type(segments, Segments, "fit: segments (see make_segments)")
    cols = spec if columns is None else columns
    check_type(cols, HydraulicParameters, "fit: columns")
    index, active = embedding(spec, cols, "fit")
    check_number(bound, "fit: bound", above=0)
    check_number(max_evaluations, "fit: max_evaluations", integer=True, at_least=1)
    for name, x in (("xtol", xtol), ("ftol", ftol), ("dt", dt)):
        check_number(x, f"fit: {name}", above=0)
    # the plant's own theta, also when a start is given: it refuses a leaf at 0 without a
    # reference (which log-space theta would silently hold at 0)
    nominal = initial_theta(plant, spec)
    initial_theta(plant, cols)  # and the held columns' (a leaf at 0 needs its reference)
    th0 = nominal if theta0 is None else jnp.asarray(as_real_array(theta0, "fit: theta0"), float)
    if th0.shape != (len(spec),):
        raise ValueError(f"fit: theta0 must have shape ({len(spec)},), got {th0.shape}")
    return cols, index, active, th0


def _evaluated(
    x: Float[np.ndarray, " P"],
    cache: dict[bytes, tuple[np.ndarray, np.ndarray]],
    history: list[float],
    plant: HydraulicPlant,
    cols: HydraulicParameters,
    segments: Segments,
    dt: float,
    index: np.ndarray,
    active: Float[Array, " C"],
    verbose: bool,
) -> tuple[Float[np.ndarray, " N"], Float[np.ndarray, "N P"]]:
    """`fit`'s residuals and Jacobian at ``x`` (its columns ``index`` of ``cols``): from
    ``cache``, which keeps the last two points evaluated (the one accepted and the trial after
    it), or evaluated, its cost then appended to ``history``."""
    key = np.asarray(x, float).tobytes()
    if key not in cache:
        full = np.zeros(len(cols))
        full[index] = x
        r, J = residuals_and_jacobian(jnp.asarray(full), plant, cols, segments, dt, active)
        r, J = np.asarray(r), np.asarray(J)[:, index]
        if len(cache) == 2:
            del cache[next(iter(cache))]
        cache[key] = (r, J)
        history.append(0.5 * float(r @ r))
        fit_progress.evaluation(len(history), history[-1])
        if verbose:
            print(f"  evaluation {len(history)}: cost {history[-1]:.6g}", flush=True)
    return cache[key]


def _no_decrease_left(
    x: Float[np.ndarray, " P"],
    cache: dict[bytes, tuple[np.ndarray, np.ndarray]],
    lower: Float[np.ndarray, " P"],
    upper: Float[np.ndarray, " P"],
    ftol: float,
) -> bool:
    """Whether the linear model at the accepted point ``x`` lets no step lower the cost by
    ``ftol`` of it (`least_squares.model_decrease`); False where ``x`` has left the cache."""
    x = np.asarray(x, float)
    r, J = cache.get(x.tobytes(), (None, None))
    return bool(r is not None and model_decrease(r, J, x, lower, upper) < ftol * 0.5 * (r @ r))


def _trust_region(
    evaluate: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    cache: dict[bytes, tuple[np.ndarray, np.ndarray]],
    x0: Float[np.ndarray, " P"],
    bound: float,
    xtol: float,
    ftol: float,
    max_evaluations: int,
) -> tuple[scipy.optimize.OptimizeResult, bool]:
    """``(scipy's solution, whether the linear model stopped it)``: trust-region reflective
    least squares from ``x0`` within ``|x - x0| <= bound``, ``evaluate`` filling ``cache``."""
    lower, upper, stopped = x0 - bound, x0 + bound, []

    def converged(intermediate_result):  # scipy passes the result by this parameter's name
        # after each accepted step: once the linear model lets no step lower the cost by
        # ``ftol`` of it, stop without the evaluation that scipy's own test (on the decrease
        # a step achieved) would spend (measured on the 60 s crane log: two of the final
        # fit's four evaluations, one of each pilot's three)
        if _no_decrease_left(intermediate_result.x, cache, lower, upper, ftol):
            stopped.append(True)
            raise StopIteration

    sol = scipy.optimize.least_squares(
        lambda x: evaluate(x)[0],
        x0,
        jac=lambda x: evaluate(x)[1],
        bounds=(lower, upper),
        method="trf",
        x_scale=1.0,
        xtol=xtol,
        ftol=ftol,
        gtol=1e-10,
        max_nfev=max_evaluations,
        callback=converged,
    )
    return sol, bool(stopped)


def fit(
    plant: HydraulicPlant,
    spec: HydraulicParameters,
    segments: Segments,
    *,
    theta0=None,
    bound: float = 1.5,
    max_evaluations: int = 40,
    xtol: float = 1e-6,
    ftol: float = 1e-8,
    dt: float = 1e-3,
    columns: HydraulicParameters | None = None,
    verbose: bool = False,
) -> OutputErrorResult:
    """Least-squares output-error fit from ``theta0`` (default: the nominal plant,
    `initial_theta`) with ``|theta - theta0| <= bound`` (a factor e^1.5 ~ 4.5 either way; a
    centre coordinate +-0.15 m).

    `scipy.optimize.least_squares` (trust-region reflective) with the forward-mode Jacobian
    of `residuals_and_jacobian`, evaluated once per trial point (residual and Jacobian
    together, cached), stopped by scipy's ``ftol`` and ``xtol`` or once the linear model at
    an accepted point lets no step lower the cost by ``ftol`` of it
    (`least_squares.model_decrease`). Uncertainty (first order, `theta_covariance`): the
    sandwich ``(J^T J)^{-1} M (J^T J)^{-1}`` with ``M`` the scores' long-run covariance
    within each segment (``sigma^2 J^T J`` for white residuals), and
    ``std(value) = value * std(theta)`` (``additive_step * std(theta)`` for an additive one,
    `value_std`), infinite for a parameter the residuals do not see.

    ``columns``: a superset of ``spec`` whose compiled program serves this fit, the columns
    outside ``spec`` held at their nominal values by a mask (`embedding`): a choice among
    parameter sets (`model_choice`) compiles one program per segment shape instead of one per
    set and shape (30-50 s each on the crane), at the cost of computing the held columns too."""
    cols, index, active, th0 = _fit_start(
        plant, spec, segments, theta0, bound, max_evaluations, xtol, ftol, dt, columns
    )
    # a hydraulic identify runs several fits, each compiling its residual and Jacobian
    # program: keep the process below the kernel's limit on memory mappings
    compile_cache.relieve()
    plant = strong_types(plant)
    # the last two points evaluated: the one accepted and the trial after it (after two
    # refused trials in a row the accepted point is gone, and `_no_decrease_left` skips its test)
    cache: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
    history: list[float] = []
    evaluate = functools.partial(
        _evaluated, cache=cache, history=history, plant=plant, cols=cols, segments=segments,
        dt=dt, index=index, active=active, verbose=verbose,
    )  # fmt: skip
    t0 = time.perf_counter()
    x0 = np.asarray(th0, float)
    sol, stopped = _trust_region(evaluate, cache, x0, bound, xtol, ftol, max_evaluations)
    wall = time.perf_counter() - t0
    r, J = evaluate(sol.x)
    message = "the linear model's decrease below `ftol`" if stopped else str(sol.message)
    return fit_result(
        sol.x, plant, spec, r, J, segments.n_residuals, history, segments.targets.shape[:2],
        n_evaluations=int(sol.nfev), wall_time=wall, success=bool(sol.success or stopped),
        message=message,
    )  # fmt: skip


def fit_result(
    theta: Float[np.ndarray, " P"],
    plant: HydraulicPlant,
    spec: HydraulicParameters,
    r: Float[np.ndarray, " N"],
    J: Float[np.ndarray, "N P"],
    n_residuals: int,
    history: list[float],
    series: tuple[int, int] | None = None,
    **solver,
) -> OutputErrorResult:
    """The `OutputErrorResult` of a fit that ended at ``theta`` with residuals ``r`` and
    Jacobian ``J`` there (`theta_covariance`, the residuals ordered as ``series`` of time
    samples: its sandwich); ``solver``: its n_evaluations, wall_time, success and message."""
    sigma2, cov, undetermined, L = theta_covariance(J, r, n_residuals, series)
    vals = parameter_values(jnp.asarray(theta), plant, spec)
    sd = np.where(undetermined, np.inf, np.sqrt(np.clip(np.diag(cov), 0.0, None)))
    return OutputErrorResult(
        names=spec.names,
        theta=np.asarray(theta),
        values=vals,
        std=value_std(sd, spec, vals),
        plant=plant_with(jnp.asarray(theta), plant, spec),
        cost=0.5 * float(r @ r),
        cost0=history[0],
        cost_history=np.asarray(history),
        residuals=r,
        jacobian=J,
        sigma2=sigma2,
        covariance=cov,
        bandwidth=L,
        **solver,
    )


_NULL_RTOL = 1e-12  # an eigenvalue below this share of the largest: a null direction


def theta_covariance(
    J: Float[np.ndarray, "N P"],
    r: Float[np.ndarray, " N"],
    n_residuals: int,
    series: tuple[int, int] | None = None,
) -> tuple[float, Float[np.ndarray, "P P"], np.ndarray, int]:
    """``(sigma^2, cov, undetermined, bandwidth)`` of a least-squares fit with Jacobian ``J``
    and residuals ``r`` (first order): ``sigma^2 = |r|^2 / (N - P)`` over the ``n_residuals``
    residuals that count, and ``cov = sigma^2 (J^T J)^+`` on the directions the residuals
    see where they are white (``series`` None). Residuals ordered (series, sample, signal),
    ``series = (G, S)`` (G independent runs of S samples: segments, or chains of pieces),
    may be correlated in time: ``cov`` is then Newey & West's sandwich ``(J^T J)^+ M (J^T
    J)^+`` (`newey_west`; the same degrees-of-freedom factor ``N / (N - P)``), its
    ``bandwidth`` (samples) chosen from the scores; 0 for white residuals.

    A direction of theta that leaves every residual unchanged (an eigenvalue of ``J^T J``,
    its columns scaled to unit norm, below `_NULL_RTOL` of the largest: a parameter the log
    does not excite, or two that only act as a sum) has no finite variance; a pseudo-inverse
    would give it 0, i.e. known exactly. ``undetermined`` (P,) marks each parameter with a
    share of such a direction (its std is infinite); ``cov`` holds the determined part."""
    J = np.asarray(J, float)
    r = np.asarray(r, float)
    P = J.shape[1]
    sigma2 = float(r @ r) / max(n_residuals - P, 1)
    norm = np.linalg.norm(J, axis=0)
    norm = np.where(norm > 0, norm, 1.0)  # a zero column stays zero: a null direction
    Jn = J / norm
    w, V = np.linalg.eigh(Jn.T @ Jn)
    null = w <= _NULL_RTOL * max(float(w[-1]), np.finfo(float).tiny)
    inv = np.where(null, 0.0, 1.0 / np.where(null, 1.0, w))
    bread = (V * inv) @ V.T
    L = 0
    if series is None:
        cov_n = sigma2 * bread
    else:
        s = newey_west.scores(Jn, r, series)
        L = newey_west.bandwidth(s)
        dof = n_residuals / max(n_residuals - P, 1)
        cov_n = dof * bread @ newey_west.long_run_covariance(s, L) @ bread
        cov_n = 0.5 * (cov_n + cov_n.T)
    cov = cov_n / np.outer(norm, norm)
    undetermined = np.any(np.abs(V[:, null]) > 1e-6, axis=1)
    return sigma2, cov, undetermined, L


def residual_scales(res: OutputErrorResult, segments: Segments) -> Float[np.ndarray, " c"]:
    """Each signal's RMS residual of the fit ``res`` on ``segments`` (SI units), over the
    samples that enter the residual: the noise level each signal shows against the model."""
    r = np.asarray(res.residuals).reshape(segments.targets.shape) * np.asarray(segments.scale)
    used = np.asarray(segments.weights) > 0
    return np.sqrt(np.mean(r[used] ** 2, axis=0))


def with_scales(segments: Segments, scales: Float[np.ndarray, " c"]) -> Segments:
    """``segments`` with the per-signal residual scales ``scales`` (same shapes: the compiled
    residual and Jacobian serve both)."""
    sc = np.asarray(scales, float)
    if sc.shape != segments.scale.shape or not np.all(np.isfinite(sc) & (sc > 0)):
        raise ValueError(f"with_scales: expected {segments.scale.shape[0]} scales > 0, got {sc}")
    return eqx.tree_at(lambda s: s.scale, segments, jnp.asarray(sc))


def with_block(segments: Segments, block: int | None) -> Segments:
    """``segments`` evaluated in calls of ``block`` segments by `residuals_and_jacobian` (the
    same values: each segment's rows are its own). A compile of the crane's residual and
    Jacobian program costs 25-35 s; a fit whose pilots run half the segments
    (`pilot_segments`) and whose final fit runs all of them compiled it twice."""
    if block is not None:
        check_number(block, "with_block: block (segments per call)", integer=True, at_least=1)
    return dataclasses.replace(segments, block=None if block is None else int(block))


# pilots fit every other segment that enters the residual, if that leaves at least this many:
# half the simulation (a 60 s crane log: 31 s of pilots instead of 59 s) for scales whose
# sampling error is about 1 / sqrt(2 K) of a signal's RMS (9 % at K = 60, within the 10 % to
# which `noise_weighted` settles the scales). A quarter measured 5 s less but its scales came
# out 10-30 % apart from the whole log's.
_PILOT_MIN_SEGMENTS = 16


def pilot_segments(segments: Segments) -> Segments:
    """The segments a pilot fit of `noise_weighted.fit_noise_weighted` uses: ``ceil(K / 2)`` of the K,
    spread evenly over those that enter the residual (a held-out mask leaves some out), or all
    of them where that would be fewer than `_PILOT_MIN_SEGMENTS`. The count depends on K
    only, so a masked and an unmasked set share one compiled program."""
    K = int(segments.ts.shape[0])
    n = -(-K // 2)
    active = np.flatnonzero(np.any(np.asarray(segments.weights) > 0, axis=1))
    if n < _PILOT_MIN_SEGMENTS or active.size < n:
        return segments
    take = active[np.round(np.linspace(0, active.size - 1, n)).astype(int)]
    return eqx.tree_at(
        lambda s: [getattr(s, f) for f in PER_SEGMENT], segments,
        [getattr(segments, f)[take] for f in PER_SEGMENT],
    )  # fmt: skip


def free_run_segment(
    plant: HydraulicPlant,
    log: Mapping[str, np.ndarray],
    *,
    stride: int = 1,
    t_start: float | None = None,
    t_end: float | None = None,
    dt: float = 1e-3,
) -> Segments:
    """The whole log (or ``t_start`` .. ``t_end``) as one segment from its measured first
    state: what a free-run replay (single shooting) simulates, every ``stride``-th sample."""
    t = np.asarray(log["t"], float)
    lo = 0 if t_start is None else int(np.searchsorted(t, t_start - 1e-9))
    hi = t.size - 1 if t_end is None else int(np.searchsorted(t, t_end + 1e-9)) - 1
    hi = lo + ((hi - lo) // stride) * stride
    return make_segments(
        plant, log, segment_time=float(t[hi] - t[lo]), stride=stride, t_start=float(t[lo]),
        t_end=float(t[hi]), dt=dt,
    )  # fmt: skip


@saved
def simulate_segments_compiled(plant: HydraulicPlant, segments: Segments, dt: float):
    """`simulate_segments`, one compiled program per plant structure and segment shapes
    (`predict`, the long refit's held-out scores)."""
    return simulate_segments(plant, segments, dt=dt)


def predict(
    plant: HydraulicPlant,
    log: Mapping[str, np.ndarray],
    *,
    mode: str = "segments",
    segment_time: float = 0.5,
    stride: int = 10,
    t_start: float | None = None,
    t_end: float | None = None,
    dt: float = 1e-3,
) -> dict:
    """Predict a log's positions and pressures with ``plant`` driven by its commands.

    ``mode="segments"``: segment-wise, as in the fit (`make_segments`, `simulate_segments`);
    ``mode="free"``: single shooting, one open-loop run from the measured state at the first
    sample (RK4 with fixed step ``dt``); positions then drift by the integrated flow error,
    so this is the harder test of a model.

    Returns ``{"t": (M,), "predicted": {c: (M,)}, "measured": {c: (M,)}, "rmse": {c: float}}``
    (SI units; the segments' start samples are left out)."""
    check_type(plant, HydraulicPlant, "predict: plant")
    check_type(log, Mapping, "predict: log (columns by name; see hydraulic_route.log_columns)")
    if mode not in ("segments", "free"):
        raise ValueError(f"predict: mode must be 'segments' or 'free', got {mode!r}")
    if mode == "free":
        seg = free_run_segment(plant, log, stride=stride, t_start=t_start, t_end=t_end, dt=dt)
    else:
        seg = make_segments(
            plant, log, segment_time=segment_time, stride=stride, t_start=t_start, t_end=t_end,
            dt=dt,
        )  # fmt: skip
    y = np.asarray(simulate_segments_compiled(strong_types(plant), seg, dt))
    keep = np.asarray(seg.weights) > 0
    meas = np.asarray(seg.targets)[keep]
    pred = y[keep]
    names = seg.signal_names
    return {
        "t": np.asarray(seg.ts)[keep],
        "predicted": {c: pred[:, j] for j, c in enumerate(names)},
        "measured": {c: meas[:, j] for j, c in enumerate(names)},
        "rmse": {
            c: float(np.sqrt(np.mean((pred[:, j] - meas[:, j]) ** 2))) for j, c in enumerate(names)
        },  # fmt: skip
    }
