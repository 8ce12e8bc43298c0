"""Open-loop commands from a table (a log's valve commands): linear interpolation between
samples, held constant outside."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

__all__ = ["CommandTable"]


class CommandTable(eqx.Module):
    """Open-loop commands given as a table: times ``t`` (T,), strictly increasing, and values
    (T, m) named ``names``, linearly interpolated in between and held constant outside.

    Used as the controller of a plant with actuators (``simulate(plant, CommandTable(...),
    None, ...)``) to replay logged commands: the same code path as output-error
    identification. Columns are matched to ``plant.command_names`` by name (`for_plant`),
    which also takes the plant's command delays (a valve's ``delay``, s): column ``j`` at time
    ``t`` is then the logged command at ``t - delay_j``, interpolated between samples, so a
    delay shorter than a sample moves the replay too, and differentiably."""

    t: Float[Array, " T"]
    values: Float[Array, "T m"]
    names: tuple[str, ...] = eqx.field(static=True)
    delays: Float[Array, " m"] | None = None
    supply: Float[Array, "T k"] | None = None
    supply_names: tuple[str, ...] = eqx.field(static=True, default=())

    def __init__(self, t, values, names):
        t = np.asarray(t, dtype=float)
        values = np.asarray(values, dtype=float)
        names = tuple(names)
        if t.ndim != 1 or t.shape[0] < 2:
            raise ValueError(
                f"CommandTable: t must be 1-D with at least 2 samples, got shape {t.shape}"
            )
        if not np.all(np.isfinite(t)) or not np.all(np.diff(t) > 0):
            raise ValueError("CommandTable: t must be finite and strictly increasing")
        if values.ndim == 1:
            values = values[:, None]
        if values.shape != (t.shape[0], len(names)):
            raise ValueError(
                f"CommandTable: values must have shape ({t.shape[0]}, {len(names)}) for "
                f"{names}, got {values.shape}"
            )
        bad = [n for j, n in enumerate(names) if not np.all(np.isfinite(values[:, j]))]
        if bad:
            raise ValueError(f"CommandTable: column(s) {bad} hold NaN or inf")
        self.t, self.values, self.names = jnp.asarray(t), jnp.asarray(values), names
        self.delays, self.supply, self.supply_names = None, None, ()

    def for_plant(self, plant) -> CommandTable:
        """The table with its columns in ``plant.command_names`` order, the plant's
        ``command_delays`` and its ``logged`` supply pressures' columns (where it has them)."""
        want = tuple(plant.command_names)
        logged = tuple(getattr(plant, "logged", ()))
        missing = [n for n in want if n not in self.names]
        if missing:
            raise ValueError(f"CommandTable: no column for command(s) {missing} of the plant")
        missing = [n for n in logged if n not in self.names]
        if missing:
            raise ValueError(
                f"CommandTable: no column for the logged supply pressure(s) {missing} the "
                "plant takes from its log"
            )
        delays = getattr(plant, "command_delays", None)
        if want == self.names and delays is None:
            return self

        def columns(names):
            return self.values[:, jnp.asarray([self.names.index(n) for n in names])]

        # a reordering of a checked table: no new values to check (and they may be traced)
        out = object.__new__(CommandTable)
        for k, v in (("t", self.t), ("values", self.values if want == self.names else columns(want)),
                     ("names", want), ("delays", delays),
                     ("supply", columns(logged) if logged else None),
                     ("supply_names", logged)):  # fmt: skip
            object.__setattr__(out, k, v)
        return out

    def supply_at(self, t) -> dict[str, Array]:
        """The logged supply pressures at ``t`` (`for_plant`), interpolated: ``{name: Pa}``."""
        if not self.supply_names:
            return {}
        values = jax.vmap(lambda v: jnp.interp(t, self.t, v), in_axes=1)(self.supply)
        return dict(zip(self.supply_names, values, strict=True))

    def supplied(self, plant, t):
        """``plant`` with its valves' supply pressures at ``t`` as logged (no logged supply:
        the plant itself)."""
        return plant.with_supply(self.supply_at(t)) if self.supply_names else plant

    def __call__(self, t, y=None, desired=None):
        del y, desired
        if self.delays is None:
            return jax.vmap(lambda v: jnp.interp(t, self.t, v), in_axes=1)(self.values)
        return jax.vmap(lambda d, v: jnp.interp(t - d, self.t, v), in_axes=(0, 1))(
            self.delays, self.values
        )
