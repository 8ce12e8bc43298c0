"""A digital controller inside a diffrax solve: sampled every ``h`` seconds, its command held
between samples (zero-order hold), as a machine's controller runs at a fixed rate.

`ZeroOrderHold` wraps any diffrax solver. At the start of a step that begins on a sampling
instant ``t_start + k h`` it evaluates the controller on the state there and keeps the command
in its solver state; every stage of that step, and of any further step before the next instant,
sees the held command as the vector field's ``args``. So the controller runs once per sample,
not at every stage of every step (six times a Tsit5 step in the continuous loop), and no step
may straddle an instant: fixed steps must divide ``h``, adaptive ones are clipped to the
instants (`simulate`'s ``sample_time`` arranges both). A rejected step leaves the solver state
as it was (diffrax keeps an accepted step's state only), so the held command is the one
sampled at the instant.

A command may reach its actuator late (a valve's ``delay`` d, s: bus and driver). The hold then
keeps the last commands sent: the command sampled at ``t_k`` acts from ``t_k + d`` to
``t_{k+1} + d``, so inside an interval each delayed command switches once, at ``d mod h`` past
the instant. A step sees each command's mean over the step: exactly the held one where the
switch falls on a step's boundary (a fixed step dividing ``d mod h``), else a blend of the two
on the one step that holds the switch, whose error is first order in the step and only there.
The blend also keeps the loop differentiable in ``d`` (the derivative of the switching time,
spread over that step). Before the first command arrives, a delayed actuator receives the first
command, as if the loop had run at the start state before ``t_start``.

Everything stays a pure, differentiable function of the plant's and controller's leaves: the
commands are a carry of the solve, not a host-side buffer, so reverse mode, forward mode and
`jax.vmap` go through it as through any solver.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxmb.simulation.wrapped import Forwarding

__all__ = [
    "ZeroOrderHold",
    "on_instant",
    "first_off_instant",
    "hold_options",
    "kept_commands",
    "longest_delay",
    "MAX_STEP",
]

# s: the longest step `hold_options` takes, Petrovic & Mattila's own (RK4 at a fixed 1 ms, as
# their Simulink model's ode4). Inside an interval the field is smooth (the command is held),
# so RK4 there errs far less than across the continuous loop's command (scripts/bench_crane.py)
MAX_STEP = 1e-3

# how far (in sampling intervals) a step's start may sit from an instant and still be on it:
# steps accumulate rounding (18 000 fixed steps of 1 ms end about 1e-11 s off), far below this
SNAP = 1e-6


def hold_options(sample_time: float) -> dict:
    """`jaxmb.simulation.simulate`'s options for a controller sampled every ``sample_time`` s:
    classical RK4 at fixed steps of at most `MAX_STEP` that divide the interval. Fixed steps
    keep the loop one program for any ``ts`` (adaptive steps clipped to the instants need
    concrete ones) and its gradients those of one discrete map at any tolerance."""
    steps = max(1, math.ceil(sample_time / MAX_STEP - 1e-9))
    return {"solver": "rk4", "fixed_step": sample_time / steps, "sample_time": sample_time}


def kept_commands(max_delay: float, h: float) -> int:
    """How many past commands a hold keeps for delays up to ``max_delay`` s at interval ``h``:
    0 without delay, else the whole intervals a delay spans plus one."""
    if not max_delay > 0:
        return 0
    return int(math.floor(max_delay / h + SNAP)) + 1


def longest_delay(plant) -> float:
    """The plant's longest command delay (s; its valves' ``delay``) where it is concrete: 0
    without valves or where the delays are traced, as they are inside any trace of the plant
    (the plant stacks them): a caller inside one passes a bound instead
    (`jaxmb.simulation.simulate`'s ``max_delay``)."""
    delays = getattr(plant, "command_delays", None)
    if delays is None or isinstance(delays, jax.core.Tracer):
        return 0.0
    return float(np.max(np.asarray(delays), initial=0.0))


def first_off_instant(ts, h: float) -> int | None:
    """The index of the first of the concrete times ``ts`` off the sampling instants
    ``ts[0] + k h`` (to `SNAP` of an interval), None where all are on them."""
    t = np.asarray(ts)
    k = (t - t[0]) / h
    off = np.flatnonzero(np.abs(k - np.round(k)) > SNAP)
    return int(off[0]) if off.size else None


def on_instant(t, t_start, h: float):
    """Whether ``t`` is a sampling instant ``t_start + k h`` (to `SNAP` of an interval)."""
    k = (t - t_start) / h
    return jnp.abs(k - jnp.round(k)) <= SNAP


class ZeroOrderHold(Forwarding):
    """``solver``'s steps with the vector field's ``args`` the command ``command(t_k, y_k)``
    sampled at the last instant ``t_k = t_start + k h`` and held (module docstring).

    Attributes:
        solver: the wrapped diffrax solver.
        command: ``u = command(t, y)`` on the solver's state ``y``.
        h: sampling interval (s).
        t_start: the first sampling instant (s; the solve's start).
        delays: each command's delay (s), or None: none delayed. Differentiable leaves.
        keep: past commands kept (`kept_commands` of the longest delay the values may take).
            A delay beyond ``keep`` intervals, or negative, makes its command NaN (the solve
            then fails), never a silently other delay.
    """

    solver: diffrax.AbstractSolver
    command: Callable
    h: float
    t_start: jax.Array
    delays: jax.Array | None = None
    keep: int = eqx.field(static=True, default=0)

    @property
    def scan_kind(self):
        # diffrax's forward mode asks a Runge-Kutta solver for it (the wrapper answers
        # isinstance checks as its solver, `diffrax.AbstractWrappedSolver`); `simulate` sets
        # the wrapped solver's to "lax" under forward mode before wrapping it
        return getattr(self.solver, "scan_kind", None)

    def init(self, terms, t0, t1, y0, args):
        del args
        u = self.command(t0, y0)
        held = u if self.keep == 0 else jnp.broadcast_to(u, (self.keep + 1, *u.shape))
        return self.solver.init(terms, t0, t1, y0, u), held

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del args
        inner, held = solver_state
        sample = on_instant(t0, self.t_start, self.h)
        # a branch, so that steps between instants (adaptive sub-steps) skip the controller;
        # under vmap both run, which costs what the continuous loop's every stage did
        if self.keep == 0:
            held = jax.lax.cond(sample, lambda: self.command(t0, y0), lambda: held)
            u = held if self.delays is None else jnp.where(self.delays != 0, jnp.nan, held)
            jump = made_jump | sample
        else:  # the newest command first, the oldest kept last
            held = jax.lax.cond(
                sample,
                lambda: jnp.concatenate([self.command(t0, y0)[None], held[:-1]]),
                lambda: held,
            )
            u = self._delayed(held, t0, t1)
            jump = jnp.asarray(True)  # a delayed command may switch between any two steps
        # a new command changes the field at t0: a first-same-as-last solver must not reuse
        # the last stage of the step before, which saw the previous one
        y1, y_error, dense_info, inner, result = self.solver.step(terms, t0, t1, y0, u, inner, jump)
        return y1, y_error, dense_info, (inner, held), result

    def _delayed(self, held, t0, t1):
        """Each command's mean over the step ``[t0, t1]`` (module docstring): sampled ``whole``
        intervals plus ``rest`` s before it acts, it is ``held[whole + 1]`` until ``rest``
        past the interval's instant and ``held[whole]`` after."""
        t_n = self.t_start + jnp.floor((t0 - self.t_start) / self.h + SNAP) * self.h
        whole = jnp.floor(self.delays / self.h + SNAP)
        rest = self.delays - whole * self.h  # differentiable: the switching time moves with d
        # the one step whose span [t0, t1) holds the switch (snapped, half-open: a switch on a
        # boundary belongs to the step it starts) sees the mean; before it the older command,
        # after it the newer. So the derivative in d is the same whatever the rounding
        lo, hi, tol = t0 - t_n, t1 - t_n, SNAP * self.h
        inside = (rest >= lo - tol) & (rest < hi - tol)
        after = jnp.where(inside, (hi - rest) / (hi - lo), jnp.where(rest < lo, 1.0, 0.0))
        whole = whole.astype(int)
        fits = (whole >= 0) & (whole < self.keep)  # a negative delay is none either
        whole = jnp.clip(whole, 0, self.keep - 1)
        cols = jnp.arange(held.shape[1])
        new, old = held[whole, cols], held[whole + 1, cols]
        return jnp.where(fits, old + after * (new - old), jnp.nan)

    def func(self, terms, t0, y0, args):
        del args
        return self.solver.func(terms, t0, y0, self.command(t0, y0))
