"""Several experiments of one machine fitted together (a campaign): the empty bucket, then an
unknown load; other excitations; other days.

The machine's parameters are shared; each log keeps its own start states (every segment
starts from its own, `start_states`) and its own payload: a payload its sidecar names
(``"conditions": {"payload_kg": ...}``, 0 kg included) is known, and the logs that name none
carry one unknown load, fitted (`mechanics.identify_mechanics` fits it from their rows, and
output error through the plant's payload leaf). A known payload in one log pins the booms'
masses, which one loaded log alone hardly tells from its load.

The logs are laid end to end on one time axis, each shifted to start `GAP` s after the one
before ends: every segment is cut from its own log and runs on its own times, and the valve
commands of all logs form one table (`output_error.join_segments`), so one compiled program
serves the campaign as it serves one log. Within `GAP` before a log starts its first command
is held, as a single log's is before its first sample, so a spool's start state and a
delayed command read that log alone."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.identification import output_error as oe
from jaxmb.io.logs import Log
from jaxmb.simulation import CommandTable

__all__ = ["GAP", "Campaign", "check_campaign", "payload_body"]

GAP = 1.0  # s between one log's end and the next one's start on the joined time axis
_HOLD = 0.5  # s before a log's start from which its first command is held


@dataclass(frozen=True)
class Campaign:
    """The fit logs of one identification (module docstring).

    Attributes:
        names: each log's name (its file's stem).
        columns: each log's columns (`hydraulic_route.log_columns`), its time shifted onto the
            joined axis (the first log's unchanged).
        payloads: each log's payload mass (kg) as its sidecar names it, None where unknown.
        body: the machine file's payload body, centre (m) and inertia about it (kg m^2,
            row-major), (12,): a named load is that body at the named mass (as
            `jaxmb.io.machine.Machine.with_payload` makes it); None: no payload.
    """

    names: tuple[str, ...]
    columns: tuple[Mapping[str, np.ndarray], ...]
    payloads: tuple[float | None, ...]
    body: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        names: Sequence[str],
        columns: Sequence[Mapping[str, np.ndarray]],
        payloads,
        body: np.ndarray | None = None,
    ) -> Campaign:
        """The logs ``columns`` (each on its own time axis) laid end to end (module
        docstring); ``body`` the file's payload body (`Campaign.body`)."""
        shifted, end = [], None
        for cols in columns:
            t = np.asarray(cols["t"], float)
            shift = 0.0 if end is None else end + GAP - float(t[0])
            shifted.append({**cols, "t": t + shift})
            end = float(t[-1]) + shift
        return cls(tuple(names), tuple(shifted), tuple(payloads), body)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def unknown(self) -> tuple[str, ...]:
        """The logs whose payload is unknown: they carry the one load the fit identifies."""
        return tuple(n for n, p in zip(self.names, self.payloads, strict=True) if p is None)

    def commands(self, plant: HydraulicPlant) -> CommandTable:
        """The logs' commands (and logged supply pressures) on the joined time axis, each
        log's first sample held from `_HOLD` s before its start."""
        names = tuple(plant.input_names)
        ts, rows = [], []
        for k, cols in enumerate(self.columns):
            t = np.asarray(cols["t"], float)
            v = np.stack([np.asarray(cols[c], float) for c in names], axis=1)
            if k:
                t, v = np.concatenate([[t[0] - _HOLD], t]), np.concatenate([v[:1], v])
            ts.append(t)
            rows.append(v)
        return CommandTable(np.concatenate(ts), np.concatenate(rows), names)

    def scales(self, plant: HydraulicPlant) -> dict[str, float]:
        """Each residual signal's standard deviation over every log: the scales the fit
        starts from (one log: its own, as `output_error.make_segments` takes them)."""
        names = tuple(plant.coordinate_names) + tuple(
            f"{c}_{a}" for a in plant.actuator_names for c in ("p_a", "p_b")
        )
        return {c: float(np.std(np.concatenate([cols[c] for cols in self.columns])))
                for c in names}  # fmt: skip

    def join(self, plant: HydraulicPlant, parts: Sequence[oe.Segments]) -> oe.Segments:
        """Each log's segments (``parts``, in the logs' order) as one set, each segment with
        its log's payload (`output_error.Segments.payload`: the file's body at the named
        mass; NaN: the plant's, the unknown load's)."""
        marked = [
            _with_payload(p, None if m is None or self.body is None else [m, *self.body])
            for p, m in zip(parts, self.payloads, strict=True)
        ]
        if len(parts) == 1:
            return marked[0]
        return oe.join_segments(marked, self.commands(plant))

    def cut(self, plant: HydraulicPlant, make: Callable[[Mapping], oe.Segments]) -> oe.Segments:
        """``make`` (a log's columns -> its segments) on every log, joined (`join`)."""
        return self.join(plant, [make(cols) for cols in self.columns])


def _with_payload(seg: oe.Segments, row) -> oe.Segments:
    """``seg`` with every segment's payload body ``row`` (13,) (None: the plant's)."""
    row = np.full(13, np.nan) if row is None else np.asarray(row, float)
    return eqx.tree_at(lambda s: s.payload, seg, jnp.asarray(np.tile(row, (seg.ts.shape[0], 1))))


def payload_body(plant: HydraulicPlant) -> np.ndarray | None:
    """``plant``'s payload body as `Campaign.body` takes it (None: no payload body)."""
    if "payload" not in plant.model.body_names:
        return None
    b = plant.model.bodies[plant.model.body_names.index("payload")]
    return np.concatenate([np.asarray(b.com, float), np.asarray(b.inertia, float).ravel()])


def check_campaign(logs: Mapping[str, Log]) -> None:
    """Refuse fit logs that cannot be one machine's campaign, naming them: sidecars that name
    different machines, other columns, another sample rate."""
    (first, log0), *rest = logs.items()
    model0 = log0.meta.get("model")
    h0 = float(np.median(np.diff(log0.t)))
    for name, log in rest:
        model = log.meta.get("model")
        if model0 is not None and model is not None and model != model0:
            raise ValueError(
                f"fit logs {first} and {name}: their sidecars name different machines "
                f"({model0!r}, {model!r}); a campaign is one machine's logs"
            )
        if set(log.names) != set(log0.names):
            only = sorted(set(log.names) ^ set(log0.names))
            raise ValueError(
                f"fit logs {first} and {name}: different columns ({only} in one only); a "
                "campaign's logs are one logger's, with the same columns"
            )
        h = float(np.median(np.diff(log.t)))
        if abs(h - h0) > 1e-6 * h0:
            raise ValueError(
                f"fit logs {first} and {name}: sampled at {1 / h0:g} Hz and {1 / h:g} Hz; a "
                "campaign's logs share one sample rate (resample one of them)"
            )
