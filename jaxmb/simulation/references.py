"""Desired trajectories ``q_d(t)``: a reference defines positions only; velocities and
accelerations come by autodiff (`desired_state`)."""

from __future__ import annotations

import abc
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxmb.multibody.checks import checked, not_finite, not_positive

__all__ = ["Reference", "SinusoidReference", "QuinticWaypoints", "desired_state", "start_position"]


class Reference(eqx.Module):
    r"""Abstract desired trajectory ``q_d(t)``; velocity and acceleration come by autodiff
    (`desired_state`), so a concrete reference only defines positions. Any callable of t works
    where a reference is expected; this interface is for references that carry parameters."""

    @abc.abstractmethod
    def __call__(self, t: Float[ArrayLike, ""]) -> Float[Array, " n"]: ...


class SinusoidReference(Reference):
    r"""$q_{d,i}(t) = o_i + a_i \sin(2\pi t / T_i + \varphi_i)$, componentwise (SI units, s)."""

    offset: Float[Array, " n"]
    amplitude: Float[Array, " n"]
    period: Float[Array, " n"]
    phase: Float[Array, " n"]

    def __init__(self, offset, amplitude, period, phase=None):
        self.offset = jnp.asarray(offset, dtype=float)
        self.amplitude = jnp.asarray(amplitude, dtype=float)
        self.period = jnp.asarray(period, dtype=float)
        self.phase = jnp.zeros_like(self.offset) if phase is None else jnp.asarray(phase, float)
        shapes = {x.shape for x in (self.offset, self.amplitude, self.period, self.phase)}
        if len(shapes) != 1 or len(next(iter(shapes))) != 1:
            raise ValueError(
                f"SinusoidReference: offset, amplitude, period, phase must be equal 1-D shapes, got {shapes}"
            )
        if not np.all(np.asarray(self.period) > 0):
            raise ValueError(
                f"SinusoidReference: period must be > 0, got {np.asarray(self.period)}"
            )

    def __call__(self, t):
        return self.offset + self.amplitude * jnp.sin(2 * jnp.pi * t / self.period + self.phase)


class QuinticWaypoints(Reference):
    r"""Rest-to-rest quintic segments through waypoints, then a hold at the last one:

    $q(t) = q_k + (q_{k+1} - q_k)(10 s^3 - 15 s^4 + 6 s^5)$, $s = (t - t_k) / T$,

    each segment lasting ``segment_time`` T (s), from ``t_start``; before ``t_start`` the
    reference rests at the first waypoint, after the last segment at the last one. Velocity
    and acceleration are zero at every waypoint, so the reference is C^2 (the jerk jumps
    there, which the adaptive step-size controller resolves). Times are array leaves, so a
    reference of another pace reuses the compiled simulation.

    Attributes:
        waypoints: (k, n) joint-space waypoints, visited in order (SI units).
        segment_time: duration of each segment, s.
        t_start: start of the first segment, s."""

    waypoints: Float[Array, "k n"]
    segment_time: Float[Array, ""]
    t_start: Float[Array, ""]

    def __init__(self, waypoints, segment_time, t_start=0.0):
        w = np.asarray(waypoints, dtype=float)
        if w.ndim != 2 or w.shape[0] < 2 or not np.all(np.isfinite(w)):
            raise ValueError(
                f"QuinticWaypoints: waypoints must be a finite (k >= 2, n) array, got shape {w.shape}"
            )
        self.waypoints = jnp.asarray(w)
        self.segment_time = checked(
            segment_time,
            not_positive,
            "QuinticWaypoints: segment_time must be > 0 s and finite",
            (),
        )
        self.t_start = checked(t_start, not_finite, "QuinticWaypoints: t_start must be finite", ())

    @property
    def t_end(self) -> Array:
        """End of the last segment, s."""
        return self.t_start + self.segment_time * (self.waypoints.shape[0] - 1)

    def __call__(self, t):
        k_last = self.waypoints.shape[0] - 2
        tau = (t - self.t_start) / self.segment_time
        k = jnp.clip(jnp.floor(tau), 0, k_last).astype(int)
        s = jnp.clip(tau - k, 0.0, 1.0)
        blend = s**3 * (10 - 15 * s + 6 * s**2)
        return self.waypoints[k] + (self.waypoints[k + 1] - self.waypoints[k]) * blend


@eqx.filter_jit
def start_position(reference: Callable) -> Array:
    """``q_d(0)``, as one compiled program: a workflow reads it before anything else runs, where
    each of the reference's operations would compile on its own (some 25 for a
    `QuinticWaypoints`, 0.3 s of every run)."""
    return reference(jnp.zeros(()))


def desired_state(reference: Callable, t) -> tuple[Array, Array, Array]:
    """``(q_d, qd_d, qdd_d)`` at time t, the derivatives by forward-mode autodiff."""
    t = jnp.asarray(t, dtype=float)

    def velocity(t_):
        return jax.jvp(reference, (t_,), (jnp.ones_like(t_),))

    (q_d, qd_d), (_, qdd_d) = jax.jvp(velocity, (t,), (jnp.ones_like(t),))
    return q_d, qd_d, qdd_d
