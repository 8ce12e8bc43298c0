"""Disturbances a closed loop is run under: wrenches on frames in time windows, and
generalized forces."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = ["WindowedWrench", "Disturbance"]


class WindowedWrench(eqx.Module):
    """A constant wrench ``[moment; force]`` (in the frame it is applied to) for
    ``t_start <= t < t_end``, zero otherwise."""

    wrench: Float[Array, 6]
    t_start: float = eqx.field(static=True)
    t_end: float = eqx.field(static=True)

    def __init__(self, wrench, t_start: float, t_end: float):
        self.wrench = jnp.asarray(wrench, dtype=float)
        if self.wrench.shape != (6,):
            raise ValueError(
                f"WindowedWrench: wrench must have shape (6,), got {self.wrench.shape}"
            )
        if not t_end > t_start:
            raise ValueError(f"WindowedWrench: need t_end > t_start, got [{t_start}, {t_end})")
        self.t_start, self.t_end = float(t_start), float(t_end)

    def __call__(self, t):
        on = (t >= self.t_start) & (t < self.t_end)
        return jnp.where(on, self.wrench, jnp.zeros_like(self.wrench))


class Disturbance(eqx.Module):
    """Time-dependent external loads on the plant: wrenches ``{frame: f(t) -> [moment; force]}``
    in that frame's coordinates and/or generalized forces ``g(t) -> (n,)``. ``jump_times`` lists
    the instants where they jump, so that the step-size controller lands on them."""

    wrenches: Mapping[str, Callable] | None = None
    forces: Callable | None = None
    jump_times: tuple[float, ...] = eqx.field(static=True, default=())

    def wrenches_at(self, t) -> dict[str, Array] | None:
        if not self.wrenches:
            return None
        return {name: f(t) for name, f in self.wrenches.items()}

    def forces_at(self, t, n: int):
        if self.forces is None:
            return jnp.zeros(n)
        return self.forces(t)
