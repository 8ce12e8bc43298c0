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

Everything stays a pure, differentiable function of the plant's and controller's leaves: the
command is a carry of the solve, not a host-side buffer, so reverse mode, forward mode and
`jax.vmap` go through it as through any solver.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import diffrax
import jax
import jax.numpy as jnp

__all__ = ["ZeroOrderHold", "on_instant", "hold_options", "MAX_STEP"]

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


def on_instant(t, t_start, h: float):
    """Whether ``t`` is a sampling instant ``t_start + k h`` (to `SNAP` of an interval)."""
    k = (t - t_start) / h
    return jnp.abs(k - jnp.round(k)) <= SNAP


class ZeroOrderHold(diffrax.AbstractWrappedSolver):
    """``solver``'s steps with the vector field's ``args`` the command ``command(t_k, y_k)``
    sampled at the last instant ``t_k = t_start + k h`` and held (module docstring).

    Attributes:
        solver: the wrapped diffrax solver.
        command: ``u = command(t, y)`` on the solver's state ``y``.
        h: sampling interval (s).
        t_start: the first sampling instant (s; the solve's start).
    """

    solver: diffrax.AbstractSolver
    command: Callable
    h: float
    t_start: jax.Array

    @property
    def scan_kind(self):
        # diffrax's forward mode asks a Runge-Kutta solver for it (the wrapper answers
        # isinstance checks as its solver, `diffrax.AbstractWrappedSolver`); `simulate` sets
        # the wrapped solver's to "lax" under forward mode before wrapping it
        return getattr(self.solver, "scan_kind", None)

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        del args
        u = self.command(t0, y0)
        return self.solver.init(terms, t0, t1, y0, u), u

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del args
        inner, held = solver_state
        sample = on_instant(t0, self.t_start, self.h)
        # a branch, so that steps between instants (adaptive sub-steps) skip the controller;
        # under vmap both run, which costs what the continuous loop's every stage did
        u = jax.lax.cond(sample, lambda: self.command(t0, y0), lambda: held)
        # a new command changes the field at t0: a first-same-as-last solver must not reuse
        # the last stage of the step before, which saw the previous one
        y1, y_error, dense_info, inner, result = self.solver.step(
            terms, t0, t1, y0, u, inner, made_jump | sample
        )
        return y1, y_error, dense_info, (inner, u), result

    def func(self, terms, t0, y0, args):
        del args
        return self.solver.func(terms, t0, y0, self.command(t0, y0))
