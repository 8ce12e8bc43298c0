r"""Sampled-data closed loops with impacts: a digital controller that samples the state every
``h`` seconds and holds its command (zero-order hold) while diffrax integrates the continuous
plant, and a particle whose impact on the mechanism is found by event detection and applied as
a velocity reset (Ider et al. (2019) Sections 5-6: sampling at h = 0.002 s, a particle hitting
the platform).

Between two sampling instants the command is constant, so each interval is one adaptive diffrax
solve from ``t_k`` to ``t_{k+1}``: the steps land on the sampling instants, where the controller
runs, and no step straddles a change of the command. The intervals are a `jax.lax.scan`: one
compiled loop, jittable, vmappable and differentiable.

An armed impact adds the gap ``z^T (r_P - r_Q)`` (`jaxmb.constraints.impact.gap`) as a diffrax event to
each interval's solve. When it crosses zero the solve stops at the root (found by Newton's
method on the dense solution, not on a step boundary), the link velocities and the particle's
velocity jump by eq. (46) (`jaxmb.constraints.impact.impact_jump`; rotor velocities are kept, eq. (39)),
and a second solve finishes the interval from the impact time. The impact disarms itself: the
particle leaves and is not followed further.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, Float

from jaxmb.actuators.plant import AbstractPlant
from jaxmb.algorithms.dynamics import forward_dynamics
from jaxmb.compile_cache import strong_types
from jaxmb.constraints import projection
from jaxmb.constraints.impact import Contact, Particle, gap, impact_jump
from jaxmb.constraints.projection import ConstrainedSystem
from jaxmb.multibody.model import Model
from jaxmb.saved_programs import keyable, saved, saved_shape
from jaxmb.simulation.controller import command
from jaxmb.simulation.integrate import call_compiled, start_arrays, start_state
from jaxmb.simulation.references import desired_state

__all__ = ["Impact", "SampledTrajectory", "simulate_sampled"]


class Impact(eqx.Module):
    """A particle that may hit ``contact`` with coefficient of restitution ``restitution``."""

    particle: Particle
    contact: Contact
    restitution: Float[Array, ""]

    def __init__(self, particle: Particle, contact: Contact, restitution):
        self.particle, self.contact = particle, contact
        self.restitution = jnp.asarray(restitution, dtype=float)


class SampledTrajectory(eqx.Module):
    """The states at the sampling instants and the commands held after them.

    Attributes:
        t: (K + 1,) sampling instants ``k h``.
        y: the plant state at them (``{"q", "qd", "actuators"}``, leading axis K + 1).
        u: (K + 1, m) the command computed at ``t_k`` and held until ``t_{k+1}`` (the last row
            is the command at the final instant, never applied).
        q_d, qd_d: (K + 1, r) the reference and its rate at ``t_k``.
        impact_time: when the particle hit (s); NaN if it never did.
        impact: the `jaxmb.constraints.impact.ImpactJump` of that impact (zeros if none).
        impact_state: the plant state just before the impact.
        num_steps: accepted solver steps in all.
        success: every interval's solve succeeded.
        coordinate_names, command_names: static names.
    """

    t: Float[Array, " K1"]
    y: dict
    u: Float[Array, "K1 m"]
    q_d: Array
    qd_d: Array
    impact_time: Float[Array, ""]
    impact: object | None
    impact_state: dict | None
    num_steps: Array
    success: Array
    coordinate_names: tuple[str, ...] = eqx.field(static=True)
    command_names: tuple[str, ...] = eqx.field(static=True)

    @property
    def q(self) -> Array:
        return self.y["q"]

    @property
    def qd(self) -> Array:
        return self.y["qd"]


def _system(plant):
    """The mechanics an impact acts on."""
    if isinstance(plant, AbstractPlant):
        return getattr(plant, "system", plant.model)
    return plant


def simulate_sampled(
    plant: Model | ConstrainedSystem | AbstractPlant,
    controller: Callable,
    reference: Callable | None,
    q0: Float[Array, " n"],
    qd0: Float[Array, " n"],
    *,
    h: float,
    t_final: float,
    impact: Impact | None = None,
    actuator_state0=None,
    solver: diffrax.AbstractSolver | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int = 4096,
    event_tol: float = 1e-12,
    progress: bool = False,
) -> SampledTrajectory:
    r"""Simulate ``plant`` under a controller sampled every ``h`` s with zero-order hold.

    Args:
        plant: a `Model`, a `ConstrainedSystem` (drift-corrected at every sampling instant,
            `jaxmb.constraints.projection.correct`) or an `AbstractPlant` (e.g. a
            `jaxmb.actuators.flexible.FlexibleJointPlant`).
        controller: ``command = controller(t_k, y, desired)`` with ``y`` the state dict and
            ``desired = (q_d, qd_d, qdd_d)`` at ``t_k``; for a mechanical plant the command is
            the generalized force (n,).
        reference: ``q_d(t)`` (its derivatives by autodiff), or None.
        q0, qd0: the initial state (with the plant's default actuator states, or
            ``actuator_state0``).
        h: sampling interval, s; ``t_final`` must be a whole number of them.
        impact: a particle that may hit the mechanism (module docstring).
        solver: diffrax solver of each interval (default Tsit5), with a PID step controller at
            ``rtol``/``atol``; ``max_steps`` per interval.
        event_tol: tolerance (s and m) of the impact's root find.
        progress: one progress bar over the sampling intervals, updated in place (tqdm; not
            under vmap). Called outside any trace, the scan runs in chunks of one compiled
            program (`_scan_in_chunks`), the same intervals in the same order.
    """
    steps, q0, qd0 = _checked_inputs(plant, controller, q0, qd0, h, t_final)
    actuated = isinstance(plant, AbstractPlant)
    if actuated:
        y0, scale = start_state(plant, q0, qd0, actuator_state0)
        scale = jax.lax.stop_gradient(scale)
    else:
        y0 = {"q": q0, "qd": qd0, "actuators": {}}
        scale = jax.tree.map(jnp.ones_like, y0)
    ts = jnp.arange(steps + 1, dtype=float) * h
    zero_jump = None
    if impact is not None:
        zero_jump = jax.tree.map(
            jnp.zeros_like, saved_shape(_zero_jump, _system(plant), q0, qd0, impact)
        )
    loop = _SampledLoop(
        plant, controller, reference, scale, diffrax.Tsit5() if solver is None else solver,
        impact, zero_jump, None, rtol, atol, max_steps, event_tol, steps,
    )  # fmt: skip

    _check_command(plant, saved_shape(_command_shape, loop, ts[0], y0))

    chunked = progress and not _traced(q0, qd0, ts)
    if progress and not chunked:  # inside a trace: the bar is a host callback in the loop
        loop = dataclasses.replace(loop, tick=_progress_bar(steps))

    nan = jnp.asarray(np.nan)
    record0 = (nan, zero_jump, y0) if impact is not None else None
    particle0 = impact.particle if impact is not None else None
    # strong types: the chunks' carry after the first call comes back strongly typed, and a
    # weak type is part of the program's key (`jaxmb.compile_cache.strong_types`)
    carry0 = strong_types((loop.correct(y0), jnp.array(impact is not None), particle0, record0,
                           jnp.array(0), jnp.array(True)))  # fmt: skip
    xs = (jnp.arange(steps + 1), ts, jnp.concatenate([ts[1:], ts[-1:]]))

    if chunked:  # the chunks ran eagerly: the rest as one compiled program, not op by op
        carry, outs = _scan_in_chunks(loop.interval, carry0, xs, steps + 1)
        args = (carry, outs, carry0, ts, impact, plant, actuated)
        if keyable(*args):
            return _finish_saved(*args)

        def finish(carry, outs):
            return _finish(carry, outs, carry0, ts, impact, plant, actuated)

        return call_compiled(eqx.filter_closure_convert(finish, carry, outs), carry, outs)
    carry, outs = jax.lax.scan(lambda c, x: loop.interval(c, x), carry0, xs)  # not hashable
    return _finish(carry, outs, carry0, ts, impact, plant, actuated)


def _checked_inputs(plant, controller, q0, qd0, h: float, t_final: float):
    """``(steps, q0, qd0)`` of `simulate_sampled`: a whole number of sampling intervals, a
    plant and controller of the kinds it takes, the start state as float arrays of the
    plant's shape; refused by name otherwise."""
    steps = int(round(t_final / h))
    if not (h > 0 and steps >= 1 and abs(steps * h - t_final) <= 1e-9 * max(t_final, 1.0)):
        raise ValueError(
            f"simulate_sampled: t_final ({t_final} s) must be a positive whole number of "
            f"sampling intervals h ({h} s)"
        )
    if not isinstance(plant, AbstractPlant | Model | ConstrainedSystem):
        raise TypeError(
            "simulate_sampled: plant: expected a Model, a ConstrainedSystem or an "
            f"AbstractPlant, got {type(plant).__name__}"
        )
    if not callable(controller):
        raise TypeError(
            f"simulate_sampled: controller: expected a callable, got {type(controller).__name__}"
        )
    return (steps, *start_arrays(plant, q0, qd0, "simulate_sampled"))


def _check_command(plant, u0) -> None:
    """Refuse a controller whose command has not the plant's shape: its commands, or the
    generalized forces of a mechanical plant."""
    n, actuated = plant.n, isinstance(plant, AbstractPlant)
    if actuated and u0.shape != (len(plant.command_names),):
        raise ValueError(
            f"simulate_sampled: the controller returns shape {u0.shape}, expected "
            f"({len(plant.command_names)},) (commands {plant.command_names})"
        )
    if not actuated and u0.shape != (n,):
        raise ValueError(
            f"simulate_sampled: the controller returns shape {u0.shape}, expected ({n},)"
        )


class _SampledLoop(eqx.Module):
    """`simulate_sampled`'s loop as a pytree: plant, controller, reference and state scale are
    its fields, one sampling interval a bound method. The progress bar's chunks
    (`_scan_in_chunks`) then take it as an argument of one compiled scan, its arrays traced,
    and `jaxmb.saved_programs` keeps that program across processes (a closure is no key)."""

    plant: object  # a Model, a ConstrainedSystem or an AbstractPlant
    controller: Callable
    reference: Callable | None
    scale: dict  # of the plant state (`AbstractPlant.state_scale`; ones for the mechanics)
    solver: diffrax.AbstractSolver
    impact: Impact | None
    zero_jump: object | None  # an impact's jump of zeros: the record before any impact
    tick: Callable | None  # the progress bar as a host callback, inside a trace only
    rtol: float
    atol: float
    max_steps: int = eqx.field(static=True)
    event_tol: float
    steps: int = eqx.field(static=True)  # sampling intervals

    @property
    def actuated(self) -> bool:
        return isinstance(self.plant, AbstractPlant)

    @property
    def system(self):
        return _system(self.plant)

    def desired_at(self, t):
        if self.reference is None:
            z = jnp.zeros((0,))
            return z, z, z
        return desired_state(self.reference, t)

    def command(self, t, y):
        # one traced controller for the shape check, the loop and its last iteration
        t = jnp.asarray(t, dtype=float)
        desired = self.desired_at(t)
        # no controller state: the empty array `simulate` passes, so that a process running
        # both traces the controller once
        none = jnp.zeros(0)
        if self.actuated:
            u, _ = command(self.controller, "actuated", t, y, desired, none)
        else:
            u, _ = command(self.controller, "mechanical", t, (y["q"], y["qd"]), desired, none)
        return jnp.asarray(u, dtype=float), desired

    def field(self, t, ys, u):
        plant = self.plant
        y = jax.tree.map(jnp.multiply, ys, self.scale)
        if self.actuated:
            dy = plant.vector_field(t, y, u)
        elif isinstance(self.system, ConstrainedSystem):
            dy = {"q": y["qd"], "qd": projection.forward_dynamics(plant, y["q"], y["qd"], u),
                  "actuators": {}}  # fmt: skip
        else:
            dy = {"q": y["qd"], "qd": forward_dynamics(plant, y["q"], y["qd"], u), "actuators": {}}
        return jax.tree.map(jnp.divide, dy, self.scale)

    def solve(self, t0, t1, y, u, event=None):
        scale = self.scale
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(self.field),
            self.solver,
            t0=t0,
            t1=t1,
            dt0=None,
            y0=jax.tree.map(jnp.divide, y, scale),
            args=u,
            saveat=diffrax.SaveAt(t1=True),
            stepsize_controller=diffrax.PIDController(rtol=self.rtol, atol=self.atol),
            max_steps=self.max_steps,
            event=event,
            throw=False,
        )
        y1 = jax.tree.map(lambda x, s: x[-1] * s, sol.ys, scale)
        # a solve that stops at the impact has ended as it should
        ok = (sol.result == diffrax.RESULTS.successful) | (
            sol.result == diffrax.RESULTS.event_occurred
        )
        return sol.ts[-1], y1, sol.stats["num_accepted_steps"], ok, sol.event_mask

    def correct(self, y):
        system = self.system
        if not isinstance(system, ConstrainedSystem):
            return y
        q, qd, _ = projection.correct(system, y["q"], y["qd"])
        return {**y, "q": q, "qd": qd}

    def gap_of(self, t, ys, particle):
        y = jax.tree.map(jnp.multiply, ys, self.scale)
        r_P, _ = particle.at(t)
        return gap(self.system, y["q"], self.impact.contact, r_P)

    def advance(self, carry, k, t0, t1, u):
        """One sampling interval under the held command ``u``: the new carry and state."""
        y, armed, particle, record, n_steps, ok = carry
        impact, system = self.impact, self.system
        if self.tick is not None:
            jax.debug.callback(self.tick, k, ordered=True)
        if impact is None:
            _, y1, taken, ok1, _ = self.solve(t0, t1, y, u)
            y1 = self.correct(y1)
            return (y1, armed, particle, record, n_steps + taken, ok & ok1), y1

        def cond_fn(t, y, args, **kwargs):
            del args, kwargs
            return jnp.where(armed, self.gap_of(t, y, particle), 1.0)

        root = optx.Newton(rtol=self.event_tol, atol=self.event_tol)
        te, ye, taken, ok1, mask = self.solve(t0, t1, y, u, diffrax.Event(cond_fn, root))
        hit = jnp.asarray(jax.tree.leaves(mask)[0]) & armed

        def after_impact(_):
            r_P, v_P = particle.at(te)
            jump = impact_jump(system, ye["q"], ye["qd"], impact.contact, particle.mass, v_P,
                               impact.restitution)  # fmt: skip
            y_plus = {**ye, "qd": ye["qd"] + jump.dqd}  # rotors keep their speed (eq. (39))
            moved = Particle(particle.mass, r_P, v_P + jump.dv_P, te, particle.gravity)
            _, y2, k2, ok2, _ = self.solve(te, t1, y_plus, u)
            return y2, moved, (te, jump, ye), k2, ok2

        def no_impact(_):
            return ye, particle, record, jnp.zeros_like(taken), jnp.array(True)

        y1, particle1, record1, k2, ok2 = jax.lax.cond(hit, after_impact, no_impact, None)
        y1 = self.correct(y1)
        carry = (y1, armed & ~hit, particle1, record1, n_steps + taken + k2, ok & ok1 & ok2)
        return carry, y1

    def interval(self, carry, xs):
        # K + 1 iterations: the last (k = K) only evaluates the command at the final instant, so
        # that the program holds one copy of the controller (the fourth-order controller of
        # Section 6 is 27 000 lines of StableHLO, more than the rest of the loop), not a second
        # one after the scan; `k` is never batched, so the cond stays a branch under vmap
        k, t0, t1 = xs
        u, desired = self.command(t0, carry[0])
        carry1, y1 = jax.lax.cond(
            k < self.steps,
            lambda c: self.advance(c, k, t0, t1, u),
            lambda c: (c, c[0]),
            carry,
        )
        return carry1, (u, desired, y1)


def _command_shape(loop: _SampledLoop, t0, y0):
    """The controller's command at ``t0``, for its shape (`saved_shape`: a second run checks
    it without tracing the controller)."""
    return loop.command(t0, y0)[0]


def _zero_jump(system, q0, qd0, impact: Impact):
    """An impact's jump at the start state, for its shapes (the record before any impact)."""
    p = impact.particle
    return impact_jump(system, q0, qd0, impact.contact, p.mass, p.velocity, impact.restitution)


def _traced(*trees) -> bool:
    """Inside a trace (jit, vmap, grad)? Then the progress bar is a host callback in the loop;
    outside, the loop runs in chunks (`_scan_in_chunks`) and the bar moves from Python."""
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(trees)):
        return True
    return isinstance(jnp.array(1) + 1, jax.core.Tracer)  # equinox's test: jit stages ops


def _scan_in_chunks(interval, carry0, xs, n: int):
    """``lax.scan(interval, carry0, xs)`` over its ``n`` iterations as up to 50 calls of one
    compiled scan over equal runs, with a progress bar moved between calls: no host callback
    in the program, so the persistent compilation cache keeps it (`jaxmb.compile_cache`). The
    last run is padded with copies of the final iteration (``k = K``, which holds the state:
    `simulate_sampled`'s ``interval``), whose outputs are dropped: the same iterations in the
    same order, so the same result."""
    from tqdm.auto import tqdm

    m = -(-n // min(50, n))  # iterations a call
    calls = -(-n // m)
    pad = jnp.minimum(jnp.arange(calls * m), n - 1)
    xs = jax.tree.map(lambda a: a[pad], xs)
    # the closure's arrays (plant, controller) become arguments of the compiled scan, not
    # constants in it: XLA's constant folding over a whole plant takes minutes
    if keyable(interval, carry0, xs):  # a bound method of `_SampledLoop`: kept on disk
        scan = _scan_saved
    else:
        first = jax.tree.map(lambda a: a[0], xs)
        interval = eqx.filter_closure_convert(interval, carry0, first)
        scan = _scan
    bar = tqdm(total=n - 1, desc="simulate", unit="sample", leave=False)
    outs, carry = [], carry0
    try:
        for j in range(calls):
            carry, out = scan(
                interval, carry, jax.tree.map(lambda a, j=j: a[j * m : (j + 1) * m], xs)
            )
            outs.append(out)
            bar.update(min(m, n - 1 - bar.n))
    finally:
        bar.close()
    return carry, jax.tree.map(lambda *a: jnp.concatenate(a)[:n], *outs)


def _scan_solve(interval, carry, xs):
    return jax.lax.scan(lambda c, x: interval(c, x), carry, xs)  # a module is not hashable


_scan = eqx.filter_jit(_scan_solve)
_scan_saved = saved(_scan_solve)


def _finish(carry, outs, carry0, ts, impact, plant, actuated) -> SampledTrajectory:
    """The trajectory from the scan's last carry and its outputs at the K + 1 instants (the
    state after each interval, the command and reference at its start)."""
    (_, _, _, record, n_steps, ok), (u, desired, ys) = carry, outs
    y = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b[:-1]]), carry0[0], ys)
    q_d, qd_d = desired[0], desired[1]
    if impact is None:
        t_hit, jump, y_hit = jnp.asarray(np.nan), None, None
    else:
        t_hit, jump, y_hit = record
    return SampledTrajectory(
        t=ts,
        y=y,
        u=u,
        q_d=q_d,
        qd_d=qd_d,
        impact_time=t_hit,
        impact=jump,
        impact_state=y_hit,
        num_steps=n_steps,
        success=ok,
        coordinate_names=plant.coordinate_names,
        command_names=plant.command_names if actuated else (),
    )


_finish_saved = saved(_finish)


def _progress_bar(total: int):
    """A host callback that opens a tqdm bar at the first interval, moves it as intervals end
    and closes it after the last: each run of the compiled loop gets its own bar."""
    holder = {}

    def tick(k):
        k = int(k)
        if k == 0 or "bar" not in holder:
            from tqdm.auto import tqdm

            holder["bar"] = tqdm(total=total, desc="simulate", unit="sample", leave=False)
        bar = holder["bar"]
        bar.update(k + 1 - bar.n)
        if k + 1 >= total:
            bar.close()
            holder.pop("bar")

    return tick
