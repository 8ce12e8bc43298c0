r"""Closed-loop simulation with diffrax: a plant `Model`, a controller, an optional disturbance.

The plant obeys ``Gamma(q) qdd + h(q, qd) = Q_e(q, qd, t) + Q_a`` (Dastranj & Mattila (2026)
eq. (13)) with ``Q_e`` its gravity plus the disturbance's wrenches and generalized forces, and
``Q_a = controller(t, q, qd, desired)``. The state ``(q, qd)`` (a plant's with actuators: its
state dict; a stateful controller's state beside it) is integrated by diffrax;
the control input and the desired values are re-evaluated at the save times from the saved
states (the controller is a pure function, so they are exactly what the solver used).

Everything is a pure function of pytrees: gradients flow to controller gains and plant
parameters (diffrax's checkpointed reverse mode), and `jax.vmap` batches over initial states,
gains or models without recompiling per element.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Bool, Float

from jaxmb.actuators.plant import AbstractPlant, HydraulicPlant, limit_events
from jaxmb.algorithms.dynamics import forward_dynamics
from jaxmb.constraints import projection
from jaxmb.constraints.projection import ConstrainedSystem
from jaxmb.multibody.checks import (
    as_real_array,
    check_finite,
    checked,
    not_finite,
    runtime_check,
)
from jaxmb.multibody.model import Model
from jaxmb.saved_programs import keyable, saved, saved_shape
from jaxmb.simulation.command_table import CommandTable
from jaxmb.simulation.controller import (
    AbstractStatefulController,
    command,
    one_pass_field,
    pass_sharing,
)
from jaxmb.simulation.disturbances import Disturbance
from jaxmb.simulation.projected import DEFAULT_CORRECTION, DriftCorrection, ProjectedSolver
from jaxmb.simulation.references import desired_state
from jaxmb.simulation.rk4 import RK4
from jaxmb.simulation.rosenbrock import Rodas4
from jaxmb.simulation.sensitivities import SharedJacobianForwardMode, plant_field
from jaxmb.simulation.zero_order_hold import (
    SNAP,
    ZeroOrderHold,
    first_off_instant,
    kept_commands,
    longest_delay,
)

__all__ = ["Trajectory", "simulate", "ADAPTIVE_SOLVERS"]


_SOLVERS = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "bosh3": diffrax.Bosh3,
    "kvaerno5": diffrax.Kvaerno5,
    "rodas4": Rodas4,
    "rk4": RK4,
}
# the names a study may choose: every one with an error estimate for the adaptive controller
ADAPTIVE_SOLVERS = tuple(name for name in _SOLVERS if name != "rk4")


class Trajectory(eqx.Module):
    """A simulated closed loop at the save times.

    Attributes:
        t: save times, s, shape (T,).
        q, qd: plant coordinates and velocities, (T, n), SI units (for a `ConstrainedSystem`
            its dependent coordinates, drift-corrected).
        u: control input Q_a, (T, n) (N m or N per coordinate).
        q_d, qd_d: the reference and its velocity, (T, k): k = n for references in the plant's
            coordinates, otherwise whatever the reference gives (e.g. a task of a PIDC).
        success: True where the solve succeeded and every saved row is finite (False
            only with ``throw=False``, or a fixed-step solve that met a state outside the model).
        coordinate_names: the plant's minimal coordinates (static).
        num_steps: accepted solver steps.
        command_names: names of ``u``'s columns for a plant with actuators (``u_lift``, ...);
            empty for a mechanical plant, whose ``u`` is Q_a in coordinate order.
        signals: named (T,) series of a plant with actuators (``p_a_lift``, ``x_tilt``,
            ``u_lift``, ...; `jaxmb.actuators.plant.HydraulicPlant.signals`), else None.
        events: pressure-range and stroke-end events (`jaxmb.actuators.plant.limit_events`), else None.
        controller_state: the controller's own integrated state at the save times (a pytree
            with a leading T axis) for an `AbstractStatefulController`, else None.
    """

    t: Float[Array, " T"]
    q: Float[Array, "T n"]
    qd: Float[Array, "T n"]
    u: Float[Array, "T n"]
    q_d: Float[Array, "T k"]
    qd_d: Float[Array, "T k"]
    success: Bool[Array, ""]
    num_steps: Array
    coordinate_names: tuple[str, ...] = eqx.field(static=True)
    command_names: tuple[str, ...] = eqx.field(static=True, default=())
    signals: dict | None = None
    events: dict | None = None
    controller_state: object = None

    def signal(self, name: str) -> Array:
        """A named series: a coordinate (``q1``), its velocity (``qd_q1``), a command or an
        actuator signal (``p_a_lift``)."""
        if name in self.coordinate_names:
            return self.q[:, self.coordinate_names.index(name)]
        if name.startswith("qd_") and name[3:] in self.coordinate_names:
            return self.qd[:, self.coordinate_names.index(name[3:])]
        if self.signals is not None and name in self.signals:
            return self.signals[name]
        have = list(self.coordinate_names) + list(self.signals or {})
        raise ValueError(f"Trajectory.signal: unknown signal {name!r}; have {have}")

    @property
    def e(self) -> Float[Array, "T n"]:
        """Tracking error ``q - q_d`` (Dastranj & Mattila (2026) eq. (14))."""
        if self.q_d.shape != self.q.shape:
            raise ValueError(
                f"Trajectory.e: the reference has shape {self.q_d.shape[1:]}, not the plant's "
                f"{self.q.shape[1:]}; compare it with the task it describes instead"
            )
        return self.q - self.q_d


def simulate(
    plant: Model | ConstrainedSystem | AbstractPlant,
    controller: Callable,
    reference: Callable | None,
    q0: Float[ArrayLike, " n"],
    qd0: Float[ArrayLike, " n"],
    ts: Float[ArrayLike, " T"],
    *,
    disturbance: Disturbance | None = None,
    solver: str | diffrax.AbstractSolver = "tsit5",
    rtol: float | Float[ArrayLike, ""] = 1e-8,
    atol: float | Float[ArrayLike, ""] = 1e-10,
    dt0: float | None = None,
    max_steps: int = 200_000,
    throw: bool = True,
    progress: bool = False,
    adjoint: diffrax.AbstractAdjoint | None = None,
    correction: DriftCorrection | None = DEFAULT_CORRECTION,
    inertia: str = "nonsymmetric",
    actuator_state0: Mapping | None = None,
    fixed_step: float | None = None,
    dtmin: float | None = None,
    sample_time: float | None = None,
    max_delay: float | None = None,
) -> Trajectory:
    r"""Integrate the closed loop from ``(q0, qd0)`` at ``ts[0]`` and save at ``ts``.

    Args:
        plant: the simulated system: a jaxmb `Model` (minimal coordinates), or a
            `ConstrainedSystem` in dependent coordinates, integrated by Aghili (2005)'s
            projection forward dynamics (`jaxmb.constraints.projection.forward_dynamics`). Then ``q0``,
            ``qd0`` must satisfy the constraints (`jaxmb.constraints.projection.assemble`), and the saved
            states are drift-corrected. Or a plant with actuator states
            (`jaxmb.actuators.plant.AbstractPlant`, e.g. `jaxmb.actuators.plant.HydraulicPlant`): its state
            ``{"q", "qd", "actuators"}`` starts from ``actuator_state0`` or, by default, from
            the plant's ``initial_state(q0, qd0)`` (for a hydraulic plant the pressures that
            hold it at rest at ``q0``); the trajectory then carries named ``signals`` and
            ``events``.
        controller: for a mechanical plant ``Q_a = controller(t, q, qd, (q_d, qd_d, qdd_d))``;
            for a plant with actuators ``command = controller(t, y, desired)`` with ``y`` the
            state dict and the command ordered as ``plant.command_names``. A pure function
            or an equinox module (its array fields are differentiable leaves). An
            `AbstractStatefulController` carries its own state, integrated with the plant's;
            a `CommandTable` replays logged commands open loop.
        reference: ``q_d(t)``; its derivatives come by autodiff (`desired_state`). None for an
            open-loop replay (``desired`` is then three empty arrays). It returns a 1-D array:
            ``(n,)``, or the desired values of the coordinates the controller tracks, exactly
            ``(controller.reference_size,)`` where the controller declares it
            (`jaxmb.control.ProjectedInverseDynamics`); a single value for several
            coordinates is refused (it would broadcast).
        disturbance: external wrenches and generalized forces on the plant.
        solver: ``"tsit5"`` (default, adaptive explicit), ``"dopri5"``, ``"bosh3"``,
            ``"rodas4"`` (linearly implicit, `jaxmb.simulation.rosenbrock.Rodas4`: for stiff loops, whose
            explicit steps are bounded by stability, such as a thin boundary layer kappa/eps;
            measured on the Section IV loop at rtol 1e-6: 1344 steps against Tsit5's 7493, and
            more accurate; batched over plants it runs 7x faster, one trajectory alone 1.6x
            (0.22 s for the 20 s against 0.34 s), ``"kvaerno5"``
            (implicit, Newton iterations), ``"rk4"`` (with ``fixed_step`` only), or any
            diffrax solver.
        rtol, atol: tolerances of the PID step-size controller (floats, or scalar arrays to
            reuse one compiled simulation across tolerances). The defaults are tight on
            purpose: gradients are those of the discrete solve, and through a thin boundary
            layer (kappa/eps large, steps limited by stability) a looser solve can give
            gradients of the wrong sign. Measured on the Section IV scenario: at 1e-7/1e-9
            dRMSE/dK_theta came out +0.0027 against -0.00132 by finite differences, at
            1e-6/1e-8 -8e58 and at 1e-5/1e-7 NaN (Tsit5 steps at the edge of its stability
            region there: the error control holds the solution's stiff component down, but
            nothing holds its derivative's, which grows a little at each step); at 1e-8/1e-10
            and tighter, and with the implicit "kvaerno5", they agree. The L-stable
            ``"rodas4"`` gives -0.00132 at 1e-6/1e-8 and at 1e-5/1e-7.
        max_steps: solver step budget; exhausting it is an error.
        throw: raise (through `equinox.error_if`) when the solve fails; with ``False`` the
            trajectory's ``success`` is False instead (for batched studies).
        progress: show a progress bar that updates in place (tqdm; not under vmap). Called
            outside any trace, the solve then runs as `CHUNKS` calls of one compiled program
            (`_solve_in_chunks`: no host callback, so the persistent compilation cache keeps
            it); the result agrees with ``progress=False`` to the tolerances, and
            ``max_steps`` bounds each chunk. Inside jit the bar is diffrax's host callback.
        adjoint: how reverse mode differentiates the solve; default diffrax's
            ``RecursiveCheckpointAdjoint()`` (binomial checkpointing, memory ~ log(max_steps)).
            ``RecursiveCheckpointAdjoint(checkpoints=max_steps)`` stores every step: on the
            Section IV gradient 0.6x the compile and 0.8x the run, for about
            ``8 (2 n_state + 4)`` bytes a step (133 measured for the arm's six states: 27 MB at
            the default ``max_steps``), times the batch under vmap; see
            scripts/bench_simulate.py and `jaxmb.control.tuning.tuning_adjoint`). ``diffrax.ForwardMode()``
            for forward mode (`jax.jacfwd`); for a plant with actuators
            `jaxmb.simulation.sensitivities.SharedJacobianForwardMode()` shares one state
            Jacobian among the tangents (faster for many tangents and wide batches).
        correction: drift correction of a `ConstrainedSystem` plant after every step and at
            the save times; None integrates eq. (25) alone, so the drift shows.
        inertia: the constraint inertia matrix of a `ConstrainedSystem` plant
            (`jaxmb.constraints.projection.INERTIA_FORMS`).
        actuator_state0: initial actuator states ``{name: {"p_a": ..., "p_b": ...}}`` of a
            plant with actuators.
        fixed_step: integrate with this constant step (s) instead of the adaptive PID
            controller, e.g. ``solver="rk4", fixed_step=1e-3`` (Petrovic & Mattila's ode4
            setting); ``rtol``/``atol`` are then unused and ``ts`` should be multiples of it.
        dtmin: smallest step (s) the adaptive controller may take; a solve that needs a
            smaller one fails at once instead of spending ``max_steps`` on rejected steps, as it
            does when the state leaves the model's domain inside `jaxmb.multibody.checks.failures_as_nan`
            (batched studies). None: no minimum.
        sample_time: run the controller as a digital one, sampled every ``sample_time`` s
            from ``ts[0]`` with its command held in between (zero-order hold,
            `jaxmb.simulation.zero_order_hold`), as a machine's controller runs at a fixed
            rate; None (default): the continuous loop, the controller evaluated at every
            stage. Steps land on every sampling instant: ``fixed_step`` must divide
            ``sample_time``; adaptive steps are clipped to the instants (``ts`` concrete
            then). ``ts`` must lie on instants, where the saved ``u`` is the command held
            after them. A feedback controller without its own state only. A plant whose
            valves delay their commands (``delay`` > 0) needs it: the hold keeps the commands
            sent until they arrive (`jaxmb.simulation.zero_order_hold`); the saved ``u`` is the
            command sent, as a logger records it.
        max_delay: the longest command delay (s) the plant's traced delays may take (a
            batch's), for which the sampled loop keeps past commands; default the plant's own
            delays where they are concrete. A delay beyond it fails the solve (NaN command).

    Raises:
        ValueError: bad shapes or options, at trace time.
        RuntimeError (equinox): a failed solve, e.g. ``max_steps`` exhausted or a state outside
            the plant's coordinate map.
    """
    _check_parts(plant, controller, reference, inertia)
    q0, qd0, ts = _checked_start(plant, q0, qd0, ts)
    solver, rtol, atol = _checked_solver(solver, rtol, atol, max_steps, fixed_step)
    actuated = isinstance(plant, AbstractPlant)
    if actuator_state0 is not None and not actuated:
        raise ValueError("simulate: actuator_state0 is only for plants with actuators")
    if isinstance(controller, CommandTable) and actuated:
        controller = controller.for_plant(plant)
    elif actuated and sample_time is None:
        refuse_delays(plant, "simulate")
    dist = disturbance if disturbance is not None else Disturbance()
    if reference is not None:
        _check_reference(plant, controller, reference, ts)
    solve = _solve_options(
        solver, rtol, atol, dt0, max_steps, throw, progress, adjoint, fixed_step, dtmin,
        sample_time, ts, controller, dist,
    )  # fmt: skip
    return _simulate_loop(
        plant, controller, reference, q0, qd0, ts, dist, solve,
        correction=correction, inertia=inertia, actuator_state0=actuator_state0,
        sample_time=sample_time, max_delay=max_delay,
    )  # fmt: skip


def _check_parts(plant, controller, reference, inertia: str) -> None:
    """Refuse a plant, controller, reference or inertia form of the wrong kind, by name."""
    if not isinstance(plant, AbstractPlant | ConstrainedSystem | Model):
        raise TypeError(
            "simulate: plant: expected a Model, a ConstrainedSystem or an AbstractPlant, got "
            f"{type(plant).__name__}"
        )
    if not callable(controller):
        raise TypeError(
            "simulate: controller: expected a callable (a function, an equinox module or a "
            f"CommandTable), got {type(controller).__name__}"
        )
    if reference is not None and not callable(reference):
        raise TypeError(
            f"simulate: reference: expected a callable t -> q_d or None, got {type(reference).__name__}"
        )
    if inertia not in projection.INERTIA_FORMS:
        raise ValueError(
            f"simulate: inertia must be one of {projection.INERTIA_FORMS}, got {inertia!r}"
        )


def _checked_start(plant, q0, qd0, ts):
    """``(q0, qd0, ts)`` as float arrays of the plant's shapes, finite, the times increasing."""
    q0, qd0 = start_arrays(plant, q0, qd0, "simulate")
    ts = jnp.asarray(as_real_array(ts, "simulate: ts"), dtype=float)
    if ts.ndim != 1 or ts.shape[0] < 2:
        raise ValueError(f"simulate: ts must be 1-D with at least 2 times, got shape {ts.shape}")
    q0, qd0 = check_finite(q0, "simulate: q0"), check_finite(qd0, "simulate: qd0")
    return q0, qd0, _checked_times(ts)


def start_arrays(plant, q0, qd0, who: str):
    """``(q0, qd0)`` as float arrays of shape ``(plant.n,)``, refused by name (``who`` is the
    function the user called) otherwise; one check for every simulation entry point."""
    n = plant.n
    q0, qd0 = (
        jnp.asarray(as_real_array(x, f"{who}: {k}"), dtype=float)
        for k, x in (("q0", q0), ("qd0", qd0))
    )
    for name, x in (("q0", q0), ("qd0", qd0)):
        if x.shape != (n,):
            raise ValueError(
                f"{who}: {name} must have shape ({n},) for {plant.coordinate_names}, got {x.shape}"
            )
    return q0, qd0


def _check_reference(plant, controller, reference, ts) -> None:
    """Refuse a reference whose output the controller cannot track, before anything is
    integrated: q_d of the coordinates, or of the coordinates the controller tracks. A
    controller that declares ``reference_size`` gets exactly that; otherwise any 1-D array
    but a single value for several coordinates (it would broadcast silently)."""
    n = plant.n
    out = jax.eval_shape(reference, ts[0])
    shape = getattr(out, "shape", None)
    size = getattr(controller, "reference_size", None)
    if size is not None and shape != (size,):
        raise ValueError(
            f"simulate: the reference returns {_shape_of(out)}, expected shape ({size},): "
            f"the {size} coordinates {type(controller).__name__} tracks"
        )
    if size is None and (shape is None or len(shape) != 1 or (shape == (1,) and n > 1)):
        raise ValueError(
            f"simulate: the reference returns {_shape_of(out)}, expected shape ({n},) (q_d "
            f"for {plant.coordinate_names}) or the 1-D desired values of the coordinates "
            "the controller tracks (declare them with a reference_size attribute)"
        )


def _checked_solver(solver, rtol, atol, max_steps, fixed_step):
    """``(solver, rtol, atol)``: the solver by name or a diffrax solver, the tolerances > 0
    (a traced tolerance checked in the program), ``max_steps`` a positive int."""
    if fixed_step is None:

        def positive(name, tol):
            ok = checked(tol, lambda x: not_finite(x) | ~(x > 0), f"simulate: {name} must be > 0")
            return ok if isinstance(tol, jax.core.Tracer) else tol  # a traced check is kept

        rtol, atol = positive("rtol", rtol), positive("atol", atol)
    if not isinstance(max_steps, int | np.integer):
        raise ValueError(f"simulate: max_steps must be an int, got {type(max_steps).__name__}")
    if isinstance(solver, str):
        if solver not in _SOLVERS:
            raise ValueError(
                f"simulate: solver must be one of {sorted(_SOLVERS)} or a diffrax solver, got {solver!r}"
            )
        solver = _SOLVERS[solver]()
    if max_steps < 1:
        raise ValueError(f"simulate: max_steps must be >= 1, got {max_steps}")
    return solver, rtol, atol


def _solve_options(
    solver, rtol, atol, dt0, max_steps, throw, progress, adjoint, fixed_step, dtmin,
    sample_time, ts, controller, dist,
) -> _Solve:  # fmt: skip
    """`simulate`'s solver options (`_checked_solver`'s) made diffrax's: a constant step or
    the PID controller (clipped to the sampling instants of a sampled loop, landing on the
    disturbance's jumps)."""
    if isinstance(solver, RK4) and fixed_step is None:
        raise ValueError("simulate: solver 'rk4' has no error estimate; give fixed_step")
    if sample_time is not None:
        stateful = isinstance(controller, AbstractStatefulController)
        _check_sampling(sample_time, fixed_step, ts, controller, stateful)
    if fixed_step is not None:
        if not (fixed_step > 0 and np.isfinite(fixed_step)):
            raise ValueError(f"simulate: fixed_step must be > 0 s and finite, got {fixed_step}")
        step_controller = diffrax.ConstantStepSize()
        dt0 = fixed_step
    else:
        if dtmin is not None and not (dtmin > 0 and np.isfinite(dtmin)):
            raise ValueError(f"simulate: dtmin must be > 0 s and finite, got {dtmin}")
        jump_ts = jnp.asarray(dist.jump_times, dtype=float) if dist.jump_times else None
        step_controller = diffrax.PIDController(
            rtol=rtol, atol=atol, jump_ts=jump_ts, dtmin=dtmin, force_dtmin=dtmin is None
        )
        if sample_time is not None:  # no step straddles a sampling instant
            t = np.asarray(ts)
            k = int(round((t[-1] - t[0]) / sample_time))
            instants = t[0] + sample_time * np.arange(1, k + 1)
            step_controller = diffrax.ClipStepSizeController(step_controller, step_ts=instants)
            dt0 = sample_time if dt0 is None else dt0
    adjoint = adjoint or diffrax.RecursiveCheckpointAdjoint()
    return _Solve(solver, step_controller, dt0, max_steps, throw, progress, adjoint)


def _longest_delay(plant, max_delay) -> float:
    """The longest command delay a sampled loop must hold: ``max_delay`` where given, else the
    plant's concrete delays' (traced ones without a bound: 0, their commands then NaN)."""
    if max_delay is None:
        return longest_delay(plant)
    if not (max_delay >= 0 and np.isfinite(max_delay)):
        raise ValueError(f"simulate: max_delay must be >= 0 s and finite, got {max_delay}")
    return float(max_delay)


def refuse_delays(plant, where: str) -> None:
    """Refuse a plant whose valves delay their commands (``delay > 0``, where the values are
    known at trace time) for a continuous feedback loop: it cannot hold the commands its
    controller sent, and ignoring the delay would be silent. A sampled loop holds them
    (``sample_time``); a replay of logged commands (`CommandTable`) takes the delay exactly."""
    delays = getattr(plant, "command_delays", None)
    if delays is None or isinstance(delays, jax.core.Tracer):
        return
    late = [n for n, d in zip(plant.command_names, np.asarray(delays), strict=True) if d > 0]
    if late:
        raise ValueError(
            f"{where}: the valves of {late} have a command delay (valve key 'delay'), which a "
            "continuous feedback loop cannot hold: run the controller sampled (simulate's "
            "sample_time; a machine file's [vdc] rate), or set the delay to 0"
        )


def _checked_times(ts):
    """``ts`` refused unless finite and strictly increasing: concrete now (naming the first bad
    index), traced at run time."""
    msg = "simulate: ts must be finite and strictly increasing (s)"
    if isinstance(ts, jax.core.Tracer):
        return runtime_check(ts, ~(jnp.isfinite(ts).all() & (jnp.diff(ts) > 0).all()), msg)
    t = np.asarray(ts)
    bad = np.flatnonzero(~np.isfinite(t))
    if bad.size:
        raise ValueError(f"{msg}; ts[{bad[0]}] = {t[bad[0]]}")
    back = np.flatnonzero(np.diff(t) <= 0)
    if back.size:
        k = back[0]
        raise ValueError(f"{msg}; ts[{k}] = {t[k]} is followed by ts[{k + 1}] = {t[k + 1]}")
    return ts


def _check_sampling(sample_time, fixed_step, ts, controller, stateful: bool) -> None:
    """Refuse a ``sample_time`` that `simulate` cannot hold exactly, naming the option."""
    if isinstance(sample_time, bool) or not isinstance(sample_time, int | float | np.floating):
        raise ValueError(
            f"simulate: sample_time must be a number of seconds, got {type(sample_time).__name__}"
        )
    if not (sample_time > 0 and np.isfinite(sample_time)):
        raise ValueError(f"simulate: sample_time must be > 0 s and finite, got {sample_time}")
    if stateful or isinstance(controller, CommandTable):
        what = "a stateful controller" if stateful else "a replay of logged commands"
        raise ValueError(
            f"simulate: sample_time: {what} is not sampled (it is a feedback controller without "
            "its own state that runs at a rate)"
        )
    if fixed_step is not None:
        ratio = sample_time / fixed_step
        if not (ratio >= 1 - SNAP and abs(ratio - round(ratio)) <= SNAP * ratio):
            raise ValueError(
                f"simulate: fixed_step ({fixed_step} s) must divide sample_time "
                f"({sample_time} s): no step may straddle a sampling instant"
            )
    try:
        t = np.asarray(ts)
    except jax.errors.TracerArrayConversionError:
        if fixed_step is None:
            raise ValueError(
                "simulate: sample_time with adaptive steps clips them to the sampling instants, "
                "which needs concrete ts; give fixed_step (dividing sample_time) inside a trace"
            ) from None
        return
    i = first_off_instant(t, sample_time)
    if i is not None:
        raise ValueError(
            f"simulate: ts must lie on the sampling instants ts[0] + k * sample_time "
            f"({sample_time} s): ts[{i}] = {t[i]} does not"
        )


def _controller_output(shape_of_output, desired_at, t0):
    """``shape_of_output()``, the shape of the controller's output at t0, or a clear error when
    the controller cannot be evaluated on the reference's output (the usual cause: they
    disagree in size)."""
    try:
        return shape_of_output()
    except (TypeError, ValueError, IndexError) as err:
        q_d = jax.eval_shape(desired_at, t0)[0]
        raise ValueError(
            f"simulate: the controller fails on the initial state and the reference's output "
            f"(q_d of {_shape_of(q_d)}) at ts[0]: {type(err).__name__}: "
            f"{str(err).splitlines()[0]}"
        ) from err


def _shape_of(out) -> str:
    shape = getattr(out, "shape", None)
    return f"shape {shape}" if shape is not None else f"a {type(out).__name__}"


class _Solve(NamedTuple):
    """The diffrax options `simulate` passes to every solve."""

    solver: diffrax.AbstractSolver
    step_controller: diffrax.AbstractStepSizeController
    dt0: float | None
    max_steps: int
    throw: bool
    progress: bool
    adjoint: diffrax.AbstractAdjoint
    # the field's ``args``: None, or a sampled loop's command shape (zeros), which diffrax's
    # own look at the field sees; each step's is the held command (`ZeroOrderHold`)
    args: object = None

    def chunked(self, y0, ts) -> bool:
        """Whether this solve runs in chunks with its progress bar drawn from Python: asked for
        a bar, called outside any trace (`equinox`'s test: an op on a constant is a tracer
        inside jit). Inside a trace the bar is diffrax's, a host callback in the program."""
        if not self.progress:
            return False
        traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((y0, ts)))
        return not traced and not isinstance(jnp.array(1) + 1, jax.core.Tracer)

    @staticmethod
    def finish(trajectory, sol):
        """``trajectory(sol)``: traced with the solve, or compiled on its own after a chunked
        solve (which runs eagerly), so that it is one program, not op by op: a saved one
        where ``trajectory`` is a key (`_ClosedLoop.trajectory`), else ``trajectory``
        closure-converted."""
        if not isinstance(sol, _Chunks):
            return trajectory(sol)
        if keyable(trajectory, sol):
            return _call_saved(trajectory, sol)
        return call_compiled(eqx.filter_closure_convert(trajectory, sol), sol)

    def __call__(self, vector_field, y0, ts, saveat, solver=None):
        solver = self.solver if solver is None else solver
        if self.chunked(y0, ts):
            return _solve_in_chunks(self, vector_field, y0, ts, saveat.subs.fn, solver)
        meter = diffrax.TqdmProgressMeter() if self.progress else diffrax.NoProgressMeter()
        return diffrax.diffeqsolve(
            diffrax.ODETerm(vector_field),
            solver,
            t0=ts[0],
            t1=ts[-1],
            dt0=_landing_step(self, ts[0], ts[-1]),
            y0=y0,
            saveat=saveat,
            stepsize_controller=self.step_controller,
            max_steps=self.max_steps,
            throw=self.throw,
            progress_meter=meter,
            adjoint=self.adjoint,
            args=self.args,
        )


class _Chunks(NamedTuple):
    """What `simulate` reads of a diffrax solution, for a solve run in chunks."""

    ts: Array
    ys: object
    result: diffrax.RESULTS
    stats: dict


CHUNKS = 50  # a progress bar's steps: chunks of the save times, one compiled program for all


def _solve_in_chunks(opts: _Solve, vector_field, y0, ts, save_fn, solver) -> _Chunks:
    """The solve as `CHUNKS` calls of one compiled program, each integrating the next run of
    save times from where the last ended, with a progress bar that moves between calls.

    Why: a progress meter inside the program is a host callback, and JAX writes no program
    that holds one to its persistent compilation cache (`jaxmb.compile_cache`): the default,
    progress-showing run would compile afresh every time. Each chunk starts its step-size
    control afresh and ends exactly on its last save time, so the result agrees with the
    single solve (``progress=False``) to the solver's tolerance, not bit for bit. The chunks
    have equal lengths, the last one padded by repeating its final save time."""
    from tqdm.auto import tqdm

    t = np.asarray(ts)
    n_int = t.shape[0] - 1
    per = -(-n_int // min(CHUNKS, n_int))  # save intervals per chunk
    k = -(-n_int // per)
    idx = np.minimum(np.arange(k)[:, None] * per + np.arange(per + 1)[None, :], n_int)
    opts = opts._replace(progress=False, throw=False)
    if keyable(opts, vector_field, save_fn, solver):
        # a pytree (`_ClosedLoop`): its arrays are the program's arguments, and the program
        # is saved for later processes (`jaxmb.saved_programs`)
        run = _chunk_saved
    else:
        # the closures' arrays (plant, controller, ...) become arguments of the compiled
        # chunk, not constants in it: XLA's constant folding over a whole plant takes
        # minutes, and the cached program then serves any parameters of the same shapes
        t0 = jnp.asarray(t[0])
        vector_field = eqx.filter_closure_convert(vector_field, t0, y0, opts.args)
        if save_fn is not None:
            save_fn = eqx.filter_closure_convert(save_fn, t0, y0, opts.args)
        run = _chunk
    bar = tqdm(total=float(t[-1] - t[0]), desc="simulate", unit="s", leave=False,
               bar_format="{l_bar}{bar}| {n:.3g}/{total:.3g} s [{elapsed}<{remaining}]")  # fmt: skip
    # a hold of delayed commands keeps them in its solver state: each chunk goes on from the
    # state the last left (its first from the solver's own start), not from a fresh hold
    state = None
    if isinstance(solver, ZeroOrderHold) and solver.keep > 0:
        init = _call_saved if run is _chunk_saved else call_compiled
        state = init(_solver_start, solver, vector_field, y0, ts[idx[0]], opts.args)
    rows, steps, result, y = [], 0, diffrax.RESULTS.successful, y0
    try:
        for j in range(k):
            ys, y_end, res, n, end = run(opts, vector_field, save_fn, solver, y, ts[idx[j]], state)
            state = None if state is None else end
            rows.append(ys if j == 0 else jax.tree.map(lambda a: a[1:], ys))
            steps += int(n)
            bar.update(float(t[idx[j, -1]] - t[idx[j, 0]]))
            if res != diffrax.RESULTS.successful:  # the rest stays inf, as diffrax leaves it
                result = res
                rest = n_int - int(idx[j, -1])
                rows.append(
                    jax.tree.map(lambda a, r=rest: jnp.full((r, *a.shape[1:]), jnp.inf), ys)
                )
                break
            y = y_end
    finally:
        bar.close()
    ys = jax.tree.map(lambda *a: jnp.concatenate(a)[: n_int + 1], *rows)
    return _Chunks(ts, ys, result, {"num_accepted_steps": jnp.asarray(steps)})


def _call(fn, *args):
    return fn(*args)


def _chunk_solve(opts: _Solve, vector_field, save_fn, solver, y0, ts, state=None):
    """One chunk of `_solve_in_chunks`: the saves at ``ts``, the state at ``ts[-1]``, the
    result, the accepted steps and the solver's state there (``state``: the one to start
    from; None: the solver's own start)."""
    save = diffrax.SubSaveAt(ts=ts, fn=save_fn)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field),
        solver,
        t0=ts[0],
        t1=ts[-1],
        dt0=_landing_step(opts, ts[0], ts[-1]),
        y0=y0,
        saveat=diffrax.SaveAt(
            subs=[save, diffrax.SubSaveAt(t1=True)], solver_state=state is not None
        ),
        stepsize_controller=opts.step_controller,
        max_steps=opts.max_steps,
        throw=False,
        adjoint=opts.adjoint,
        args=opts.args,
        solver_state=state,
    )
    ys, y_end = sol.ys
    y_end = jax.tree.map(lambda a: a[0], y_end)
    return ys, y_end, sol.result, sol.stats["num_accepted_steps"], sol.solver_state


def _landing_step(opts: _Solve, t0, t1):
    """``opts.dt0``; a fixed step that nearly divides ``t1 - t0`` made to divide it exactly.
    diffrax's constant steps are ``(t1 - t0) / ceil((t1 - t0) / dt0)``: a span a few ulps
    longer than a whole number of steps (a chunk's, or 17 s of 1 ms steps) would take one step
    more, every step shorter, and a sampled loop's steps would straddle its instants."""
    if not isinstance(opts.step_controller, diffrax.ConstantStepSize):
        return opts.dt0
    span = t1 - t0
    n = jnp.maximum(jnp.round(span / opts.dt0), 1.0)
    return jnp.where(jnp.abs(n * opts.dt0 - span) <= 1e-9 * span, span / n, opts.dt0)


def _solver_start(solver, vector_field, y0, ts, args):
    """``solver``'s state at the start of a solve over ``ts`` (`_solve_in_chunks`)."""
    return solver.init(diffrax.ODETerm(vector_field), ts[0], ts[-1], y0, args)


def _command_shape(loop: _ClosedLoop, t0, yp0, c0):
    """The controller's command at ``t0``, for its shape (`saved_shape`: a second run of the
    same loop checks it without tracing the controller, 1.5 s for the crane's VDC)."""
    t = jnp.asarray(t0, dtype=float)
    kind = "stateful" if loop.stateful else "actuated" if loop.actuated else "mechanical"
    y = loop.as_dict(yp0) if loop.stateful else yp0
    return command(loop.controller, kind, t, y, loop.desired_at(t), c0)[0]  # as it returns it


def _start(plant: AbstractPlant, q0, qd0, actuator_state0):
    """A plant's state at ``ts[0]`` and its scale: one program, not a few hundred operations
    compiled one by one (the hydraulic plants' holding pressures take a least-squares solve
    over the cylinder kinematics' Jacobian, `HydraulicPlant.static_pressures`)."""
    yp0 = plant.initial_state(q0, qd0, actuator_state0)
    return yp0, plant.state_scale(yp0)


# ``fn(*args)`` compiled, ``fn`` a closure-converted function (its arrays arguments)
call_compiled = eqx.filter_jit(_call)
_chunk = eqx.filter_jit(_chunk_solve)
# the same for a pytree's bound methods (`_ClosedLoop`), their programs kept across processes
_call_saved = saved(_call)
_chunk_saved = saved(_chunk_solve)
# a plant's start state and its scale as one saved program (`simulate`, `simulate_sampled`)
start_state = saved(_start)


class _ClosedLoop(eqx.Module):
    """The closed loop `simulate` integrates, as a pytree: plant, controller,
    reference, disturbance and state scale are its fields, its vector field and its trajectory
    bound methods. A chunked solve (`_solve_in_chunks`) then hands them to its compiled
    programs as arguments, arrays traced, so that one program serves every loop of the same
    shapes in a process and `jaxmb.saved_programs` can key it across processes (a closure is
    no key).

    The ODE state is ``(plant state, controller state)``: the plant state is the
    `AbstractPlant`'s dict, or ``(q, qd)`` for a mechanical plant; the controller state is
    an empty array for a memoryless controller (diffrax's stage buffers need array leaves).
    The plant state is integrated in scaled units (pressures in bar, ...): one pair of
    tolerances then fits every entry."""

    plant: object
    controller: object
    reference: object  # None: an open-loop replay (``desired`` three empty arrays)
    dist: Disturbance
    scale: object  # of the plant state, as `AbstractPlant.state_scale` gives it
    yp0: object  # the plant state at ts[0], where a failed solve's rows are evaluated
    c0: Array
    corrector: ProjectedSolver | None  # a `ConstrainedSystem`'s drift correction at the saves
    inertia: str = eqx.field(static=True)
    shared: bool = eqx.field(static=True)  # the plant's field under `plant_field`
    sharing: str | None = eqx.field(
        static=True, default=None
    )  # `jaxmb.simulation.controller.pass_sharing`
    sampled: bool = eqx.field(static=True, default=False)  # the command held: the field's args

    @property
    def actuated(self) -> bool:
        return isinstance(self.plant, AbstractPlant)

    @property
    def stateful(self) -> bool:
        return isinstance(self.controller, AbstractStatefulController)

    def as_dict(self, yp):
        return yp if self.actuated else {"q": yp[0], "qd": yp[1]}

    def desired_at(self, t):
        if self.reference is None:
            z = jnp.zeros((0,), dtype=float)
            return z, z, z
        return desired_state(self.reference, t)

    def command_at(self, t, yp, c):
        # t as a float64 array, so that every caller (diffrax's shape checks at a Python t0,
        # the step, the saves) meets one signature of the traced `command`, desired included
        t = jnp.asarray(t, dtype=float)
        desired = self.desired_at(t)
        kind = "stateful" if self.stateful else "actuated" if self.actuated else "mechanical"
        u, dc = command(self.controller, kind, t, self.as_dict(yp) if self.stateful else yp,
                        desired, c)  # fmt: skip
        return jnp.asarray(u), dc, desired

    def vector_field(self, t, y, args):
        plant, n = self.plant, self.plant.n
        yp, c = y
        yp = jax.tree.map(jnp.multiply, yp, self.scale)
        forces = self.dist.forces_at(t, n)
        wrenches = self.dist.wrenches_at(t)
        if self.sharing is not None:  # one kinematic pass for the plant and the controller
            t = jnp.asarray(t, dtype=float)  # one signature, as `command_at`'s
            dyp, _ = one_pass_field(plant, self.controller, t, yp, forces, wrenches, self.sharing)
            return jax.tree.map(jnp.divide, dyp, self.scale), c
        if self.sampled:  # held by `ZeroOrderHold` since the last sampling instant
            u, dc = args, jnp.zeros_like(c)
        else:
            u, dc, _ = self.command_at(t, yp, c)
        if isinstance(self.controller, CommandTable):  # a replay: the log's supply, if it has it
            plant = self.controller.supplied(plant, t)
        if self.actuated:
            field = plant_field if self.shared else type(plant).vector_field
            dyp = field(plant, t, yp, u, wrenches, forces)
        else:
            q, qd = yp
            tau = u + forces
            if isinstance(plant, ConstrainedSystem):
                qdd = projection.forward_dynamics(plant, q, qd, tau, wrenches, inertia=self.inertia)
            else:
                qdd = forward_dynamics(plant, q, qd, tau, wrenches)
            dyp = (qd, qdd)
        return jax.tree.map(jnp.divide, dyp, self.scale), dc

    def held(self, t, y):
        """The command a sampled controller sends at an instant, from the solver's (scaled)
        state (`ZeroOrderHold`)."""
        yp, c = y
        return self.command_at(t, jax.tree.map(jnp.multiply, yp, self.scale), c)[0]

    def corrected(self, t, y, args):
        """The saved state on the constraint manifold (a mechanical plant: scale 1)."""
        (q, qd), c = y
        return self.corrector.correct((q, qd))[:2], c

    def trajectory(self, sol) -> Trajectory:
        plant, stateful = self.plant, self.stateful
        yp, c = sol.ys
        yp = jax.tree.map(lambda x, sc: x * sc[None], yp, self.scale)  # saved rows: T first
        yd = self.as_dict(yp)
        # rows after a failed solve (throw=False) hold inf: NaN their outputs (success is False)
        finite = jax.tree.map(
            lambda x: jnp.isfinite(x).reshape(x.shape[0], -1).all(axis=1), (yp, c)
        )
        ok = jnp.stack(jax.tree.leaves(finite)).all(axis=0)

        def safe(x, x0):
            return jnp.where(ok.reshape((-1,) + (1,) * (x.ndim - 1)), x, x0)

        yp0 = jax.tree.map(lambda x: jnp.broadcast_to(x, x.shape), self.yp0)
        yp_eval = jax.tree.map(safe, yp, yp0)
        c_eval = jax.tree.map(safe, c, self.c0) if stateful else c
        u, _, (q_d, qd_d, _) = jax.vmap(self.command_at)(sol.ts, yp_eval, c_eval)
        u = jnp.where(ok[:, None], u, jnp.nan)
        signals = events = None
        if self.actuated:
            signals = jax.vmap(plant.signals)(yp_eval, u)
            if isinstance(self.controller, CommandTable):  # the logged supply pressures
                signals.update(jax.vmap(self.controller.supply_at)(sol.ts))
            signals = {k: jnp.where(ok, v, jnp.nan) for k, v in signals.items()}
            if isinstance(plant, HydraulicPlant):
                events = limit_events(plant, sol.ts, signals)
        return Trajectory(
            t=sol.ts,
            q=yd["q"],
            qd=yd["qd"],
            u=u,
            q_d=q_d,
            qd_d=qd_d,
            # a fixed-step solve goes on through a state outside the model (NaN inside
            # `failures_as_nan`): its rows say it failed, not diffrax's result alone
            success=(sol.result == diffrax.RESULTS.successful) & ok.all(),
            num_steps=sol.stats["num_accepted_steps"],
            coordinate_names=plant.coordinate_names,
            command_names=plant.command_names if self.actuated else (),
            signals=signals,
            events=events,
            controller_state=c if stateful else None,
        )


def _simulate_loop(
    plant, controller, reference, q0, qd0, ts, dist, solve: _Solve, *,
    correction, inertia, actuator_state0, sample_time=None, max_delay=None,
):  # fmt: skip
    """`simulate`'s closed loop (`_ClosedLoop`) integrated: one loop for every plant and
    controller, mechanical or actuated, memoryless or stateful, continuous or sampled."""
    actuated = isinstance(plant, AbstractPlant)
    constrained = isinstance(plant, ConstrainedSystem)
    stateful = isinstance(controller, AbstractStatefulController)
    if actuated:
        yp0, scale = start_state(plant, q0, qd0, actuator_state0)
    else:
        yp0 = (q0, qd0)
        scale = jax.tree.map(jnp.ones_like, yp0)
    # forward-mode sensitivities that share one state Jacobian among their columns, where the
    # adjoint asks for them (`jaxmb.simulation.sensitivities`)
    shared_jacobian = actuated and isinstance(solve.adjoint, SharedJacobianForwardMode)
    loop = _ClosedLoop(
        plant, controller, reference, dist, jax.lax.stop_gradient(scale), yp0, jnp.zeros(0),
        None, inertia,
        shared_jacobian,
        None if stateful or shared_jacobian or sample_time is not None
        else pass_sharing(plant, controller, dist),
        sample_time is not None,
    )  # fmt: skip
    if stateful:
        c0 = controller.init(ts[0], loop.as_dict(yp0), loop.desired_at(ts[0]))
        loop = dataclasses.replace(loop, c0=c0)
    u0 = _controller_output(
        lambda: saved_shape(_command_shape, loop, ts[0], yp0, loop.c0), loop.desired_at, ts[0]
    )
    m = len(plant.command_names) if actuated else plant.n
    if getattr(u0, "shape", None) != (m,):
        what = (
            f"commands {plant.command_names}" if actuated else f"Q_a for {plant.coordinate_names}"
        )
        raise ValueError(
            f"simulate: the controller returns {_shape_of(u0)}, expected ({m},) ({what})"
        )

    saveat, solver = diffrax.SaveAt(ts=ts), None
    if constrained and correction is not None:
        solver = ProjectedSolver(solve.solver, plant, correction)
        loop = dataclasses.replace(loop, corrector=solver)
        saveat = diffrax.SaveAt(ts=ts, fn=loop.corrected)

    if sample_time is not None:
        inner = solve.solver if solver is None else solver
        if (
            isinstance(solve.adjoint, diffrax.ForwardMode)
            and getattr(inner, "scan_kind", 0) is None
        ):
            # what diffrax's forward mode does to a bare Runge-Kutta solver (its stages then
            # a plain scan, which forward mode differentiates), done here to the wrapped one
            inner = eqx.tree_at(lambda s: s.scan_kind, inner, "lax", is_leaf=lambda x: x is None)
        delays = getattr(plant, "command_delays", None) if actuated else None
        keep = 0 if delays is None else kept_commands(_longest_delay(plant, max_delay), sample_time)
        solver = ZeroOrderHold(inner, loop.held, float(sample_time), ts[0], delays, keep)
        solve = solve._replace(args=jnp.zeros(u0.shape))
    y0 = (jax.tree.map(jnp.divide, yp0, loop.scale), loop.c0)
    return solve.finish(loop.trajectory, solve(loop.vector_field, y0, ts, saveat, solver))
