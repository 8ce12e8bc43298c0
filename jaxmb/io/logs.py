r"""Experiment logs: the file format users keep, its loader and its validation.

Log format
==========
A log is a table, CSV with one header row (``run1.csv``) or Parquet (``run1.parquet``), chosen by
the file extension. It holds a time column ``t`` (s), strictly increasing, and one column per
signal, in SI units, named after the model's coordinates and actuators: every column, with its
unit and meaning, is in `COLUMNS` (``docs/reference.md`` lists it, generated from it).

Coordinate names are ``model.coordinate_names`` (``q1``, ``phi``, ``joint3``); actuator names are
those of a `jaxmb.actuators.plant.HydraulicPlant` (``lift``, ``tilt``). `schema_for` lists the columns a
model or plant allows, each with its physical kind. Every column is optional for the format;
a workflow states what it needs through ``required``.

Sidecar. An optional JSON object next to the table with the same stem (``run1.csv`` ->
``run1.json``) holds

- ``model``: the model's name (string);
- ``units``: ``{column: unit}`` for columns *not* in SI, e.g. ``{"q1": "deg", "p_a_lift":
  "bar"}``. The loader converts ``deg``, ``deg/s``, ``deg/s^2``, ``bar``, ``mm``, ``mm/s``,
  ``kN``, ``kN m`` (and ``ms`` for ``t``) to SI, removes the entry from ``units`` and records
  the original unit under ``converted_units``, so the loaded `Log` is all SI and writing it back
  stores SI values with a sidecar that says so. SI spellings (``rad``, ``Pa``, ``m``, ``N m``,
  ...) are accepted and left in place;
- ``sensors``: free-form notes (encoder resolution, transducer ranges, ...);
- ``provenance``: free-form (source, licence, synthetic or measured);
- ``synthetic``: bool.

Unknown sidecar keys are kept. The processing functions (`resample`, `jaxmb.identification.signals`)
append what they did to a ``processing`` list.

Validation (`validate_log`) raises `LogError` (a `ValueError`) whose message names the column and
what was expected, for a missing required column, an unknown column (with the closest allowed
name), a missing ``t``, time that is not strictly increasing (first bad index and times),
NaN or infinite values (count, first index and time), a constant column (it carries no
information), too few samples for the number of parameters, and values whose magnitude suggests
the wrong unit. The unit heuristics and their thresholds:

- revolute position (``angle``): ``max |q| > 4 pi`` (two turns) looks like degrees;
- angular velocity: ``max |qd| > 100 rad/s`` looks like deg/s;
- pressure: ``max |p| < 1000 Pa`` (0.01 bar) looks like bar;
- length (piston position, prismatic position): ``max |x| > 10 m`` looks like mm;
- linear velocity: ``max |v| > 10 m/s`` looks like mm/s.

They catch gross unit mistakes only (a degree log of a joint that moves less than 720 deg passes);
declaring the unit in the sidecar's ``units`` fixes a flagged column.

Sampling. Irregular sampling is accepted by the loader; `jaxmb.io.log_sampling` measures it
and puts a log on a uniform grid.
"""

from __future__ import annotations

import csv
import difflib
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import numpy as np
from jaxtyping import Float

from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.multibody.checks import as_real_array, check_type
from jaxmb.multibody.model import Model, coordinate_joint_types

__all__ = [
    "KINDS",
    "UNITS",
    "LogError",
    "Column",
    "COLUMNS",
    "Log",
    "LogSchema",
    "schema_for",
    "read_log",
    "write_log",
    "validate_log",
    "time_problems",
    "nonfinite_problem",
    "with_note",
]


class LogError(ValueError):
    """A malformed log: the message names the column (or sidecar key) and what was expected."""


# physical kind of a column -> its SI unit (for messages)
KINDS: dict[str, str] = {
    "time": "s",
    "angle": "rad",
    "length": "m",
    "angular_velocity": "rad/s",
    "linear_velocity": "m/s",
    "angular_acceleration": "rad/s^2",
    "linear_acceleration": "m/s^2",
    "torque": "N m",
    "force": "N",
    "motor_torque": "N m",
    "pressure": "Pa",
    "voltage": "V",
    "current": "A",
}

# unit -> (dimension, factor to SI). A dimension is a kind, except that motor_torque is a torque.
UNITS: dict[str, tuple[str, float]] = {
    "s": ("time", 1.0),
    "ms": ("time", 1e-3),
    "rad": ("angle", 1.0),
    "deg": ("angle", math.pi / 180.0),
    "rad/s": ("angular_velocity", 1.0),
    "deg/s": ("angular_velocity", math.pi / 180.0),
    "rad/s^2": ("angular_acceleration", 1.0),
    "deg/s^2": ("angular_acceleration", math.pi / 180.0),
    "m": ("length", 1.0),
    "mm": ("length", 1e-3),
    "m/s": ("linear_velocity", 1.0),
    "mm/s": ("linear_velocity", 1e-3),
    "m/s^2": ("linear_acceleration", 1.0),
    "N": ("force", 1.0),
    "kN": ("force", 1e3),
    "N m": ("torque", 1.0),
    "kN m": ("torque", 1e3),
    "Pa": ("pressure", 1.0),
    "bar": ("pressure", 1e5),
    "V": ("voltage", 1.0),
    "A": ("current", 1.0),
}


class Column(NamedTuple):
    """One kind of log column (`COLUMNS`): its name with ``{c}`` a coordinate's or ``{a}`` an
    actuator's name, whose names it takes (``per``: "coordinate", "motor" (a coordinate a
    motor drives: every one of a robot, a plant's direct-drive ones), "actuator" or
    "machine": once), its kind for a revolute and a prismatic coordinate (`KINDS`), and what
    it holds."""

    name: str
    per: str
    kinds: tuple[str, str]
    meaning: str


# every column a log may hold (`schema_for` builds a model's from it; docs/reference.md lists it)
COLUMNS: tuple[Column, ...] = (
    Column("{c}", "coordinate", ("angle", "length"), "position of coordinate `<c>` (its encoder's reading)"),
    Column("qd_{c}", "coordinate", ("angular_velocity", "linear_velocity"), "its velocity"),
    Column("qdd_{c}", "coordinate", ("angular_acceleration", "linear_acceleration"), "its acceleration"),
    Column("tau_{c}", "coordinate", ("torque", "force"), "joint-side generalized force on `<c>` "
           "(a hydraulic machine: a direct-drive joint's command)"),
    Column("tau_motor_{c}", "motor", ("motor_torque",) * 2, "motor-side drive torque (a geared "
           "electric joint; with the gear ratio)"),
    Column("i_{c}", "motor", ("current",) * 2, "motor current (with the torque constant)"),
    Column("p_a_{a}", "actuator", ("pressure",) * 2, "cylinder `<a>`'s piston-side chamber pressure"),
    Column("p_b_{a}", "actuator", ("pressure",) * 2, "its rod-side chamber pressure"),
    Column("x_{a}", "actuator", ("length",) * 2, "its piston position"),
    Column("u_{a}", "actuator", ("voltage",) * 2, "its valve's command"),
    Column("f_{a}", "actuator", ("force",) * 2, "its piston force"),
    Column("xd_{a}", "actuator", ("linear_velocity",) * 2, "its piston velocity"),
    Column("p_s", "machine", ("pressure",) * 2, "the supply pressure, where logged (a "
           "load-sensing pump: the machine file's `supply_from_log`)"),
    Column("p_r", "machine", ("pressure",) * 2, "the return pressure, where logged"),
)  # fmt: skip

# magnitude heuristics (module docstring): kind -> (test, what it looks like, threshold text)
_DEG_LIMIT = 4 * math.pi  # rad: two turns
_DEG_RATE_LIMIT = 100.0  # rad/s
_BAR_LIMIT = 1000.0  # Pa (0.01 bar)
_MM_LIMIT = 10.0  # m, and m/s for velocities


def _dimension(kind: str) -> str:
    return "torque" if kind == "motor_torque" else kind


def _canonical(meta: Mapping[str, Any]) -> str:
    """Canonical JSON text of a sidecar (sorted keys, strict JSON: no NaN)."""
    if not isinstance(meta, Mapping):
        raise LogError(f"sidecar: expected a JSON object (mapping), got {type(meta).__name__}")
    try:
        return json.dumps(dict(meta), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise LogError(f"sidecar: not representable as strict JSON ({e})") from None


def _frozen(x, what: str) -> np.ndarray:
    a = np.array(as_real_array(x, f"column {what!r}", host=True), copy=True)
    if a.ndim != 1:
        raise LogError(f"column {what!r}: expected a 1-D array, got shape {a.shape}")
    a.flags.writeable = False  # logs are immutable data
    return a


class Log(eqx.Module):
    """A logged experiment: time ``t`` (s), named SI signals and the sidecar.

    Attributes:
        t: sample times (T,), s.
        signals: ``{name: (T,) float64}`` (read-only numpy arrays: logs are host data).
        names: the signal names in file order (static; pytree operations sort dict keys).
        sidecar: the sidecar as canonical JSON text (static, hashable); see `meta`.
    """

    t: Float[np.ndarray, " T"]
    signals: dict[str, Float[np.ndarray, " T"]]
    names: tuple[str, ...] = eqx.field(static=True)
    sidecar: str = eqx.field(static=True)

    def __init__(self, t, signals: Mapping[str, Any], sidecar: str | Mapping | None = None):
        self.t = _frozen(t, "t")
        if not isinstance(signals, Mapping):
            raise TypeError(
                f"Log: signals: expected a mapping name -> array, got {type(signals).__name__}"
            )
        out = {}
        for name, x in signals.items():
            if not isinstance(name, str) or not name:
                raise LogError(f"signals: column names must be non-empty strings, got {name!r}")
            if name == "t":
                raise LogError("signals: 't' is the time column, not a signal")
            a = _frozen(x, name)
            if a.shape != self.t.shape:
                raise LogError(
                    f"column {name!r}: expected {self.t.shape[0]} samples (as 't'), got {a.shape[0]}"
                )
            out[name] = a
        self.signals = out
        self.names = tuple(out)
        if sidecar is None:
            sidecar = {}
        self.sidecar = _canonical(json.loads(sidecar) if isinstance(sidecar, str) else sidecar)

    @property
    def meta(self) -> dict:
        """The sidecar as a dict (a fresh copy)."""
        return json.loads(self.sidecar)

    @property
    def n(self) -> int:
        """Number of samples."""
        return int(self.t.shape[0])

    @property
    def dt(self) -> float:
        """Median sample interval, s."""
        if self.n < 2:
            raise LogError(f"column 't': a sample interval needs >= 2 samples, got {self.n}")
        return float(np.median(np.diff(self.t)))

    def has(self, name: str) -> bool:
        return name == "t" or name in self.signals

    def __getitem__(self, name: str) -> np.ndarray:
        if name == "t":
            return self.t
        try:
            return self.signals[name]
        except KeyError:
            close = difflib.get_close_matches(name, self.names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise LogError(
                f"log: no column {name!r}{hint}; columns are {['t', *self.names]}"
            ) from None

    def stack(self, names: Sequence[str]) -> Float[np.ndarray, "T k"]:
        """Columns ``names`` side by side, (T, k)."""
        if isinstance(names, str):
            raise LogError(f"stack: expected a sequence of column names, got the string {names!r}")
        return np.stack([self[c] for c in names], axis=1).reshape(self.n, len(names))

    def window(self, t0: float, t1: float) -> Log:
        """The samples with ``t0 <= t <= t1``."""
        if not t0 <= t1:
            raise LogError(f"window: expected t0 <= t1, got t0={t0}, t1={t1}")
        keep = (self.t >= t0) & (self.t <= t1)
        if not keep.any():
            raise LogError(
                f"window: no samples in [{t0}, {t1}] s; the log spans "
                f"[{float(self.t[0])}, {float(self.t[-1])}] s"
            )
        return Log(self.t[keep], {k: v[keep] for k, v in self.signals.items()}, self.sidecar)

    def with_signals(self, new: Mapping[str, Any] | None = None, /, **more) -> Log:
        """The log with columns added (at the end) or replaced (in place)."""
        upd = {**(new or {}), **more}
        sig = {k: upd.pop(k, v) for k, v in self.signals.items()}
        sig.update(upd)
        return Log(self.t, sig, self.sidecar)

    def with_meta(self, **entries) -> Log:
        """The log with sidecar entries set."""
        return Log(self.t, self.signals, {**self.meta, **entries})


def with_note(log: Log, note: Mapping[str, Any]) -> Log:
    """Append a processing step to the sidecar's ``processing`` list."""
    meta = log.meta
    meta["processing"] = [*meta.get("processing", []), dict(note)]
    return Log(log.t, log.signals, meta)


# ------------------------------------------------------------------------------------------ schema


class LogSchema(eqx.Module):
    """The columns a log may hold, each with its physical kind (a key of `KINDS`).

    Attributes:
        columns: ``((name, kind), ...)`` in a canonical order; ``t`` is implied.
        coordinates: the model's coordinate names.
        actuators: hydraulic actuator names (empty for a bare model).
    """

    columns: tuple[tuple[str, str], ...] = eqx.field(static=True)
    coordinates: tuple[str, ...] = eqx.field(static=True, default=())
    actuators: tuple[str, ...] = eqx.field(static=True, default=())

    def __check_init__(self):
        seen = set()
        for name, kind in self.columns:
            if kind not in KINDS or kind == "time":
                raise ValueError(
                    f"LogSchema: column {name!r}: kind must be one of "
                    f"{[k for k in KINDS if k != 'time']}, got {kind!r}"
                )
            if name in seen or name == "t":
                raise ValueError(f"LogSchema: column {name!r} is declared twice (or is 't')")
            seen.add(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.columns)

    @property
    def kinds(self) -> dict[str, str]:
        return dict(self.columns)

    def kind(self, name: str) -> str:
        if name == "t":
            return "time"
        kinds = self.kinds
        if name not in kinds:
            raise LogError(_unknown_message(name, self))
        return kinds[name]


def schema_for(
    model_or_plant,
    *,
    joint_types: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> LogSchema:
    """The columns a log of ``model_or_plant`` may hold (module docstring's table).

    Args:
        model_or_plant: a `jaxmb.Model` (columns ``<c>``, ``qd_<c>``, ``qdd_<c>``, ``tau_<c>``,
            ``tau_motor_<c>``, ``i_<c>`` for each coordinate) or a `jaxmb.actuators.plant.HydraulicPlant`
            (its model's coordinate columns ``<c>``, ``qd_<c>``, ``qdd_<c>``, ``tau_<c>``;
            ``p_a_<a>``, ``p_b_<a>``, ``x_<a>``, ``u_<a>``, ``f_<a>``, ``xd_<a>`` per actuator;
            ``tau_motor_<c>`` and ``i_<c>`` for its direct-drive coordinates only).
        joint_types: ``{coordinate: "revolute" | "prismatic"}`` overriding what is read from the
            model (below).
        extra: additional allowed columns ``{name: kind}``.

    A coordinate's joint type is that of the frame its name drives. With a coordinate map,
    a minimal coordinate that is also an augmented coordinate is taken to drive that frame
    (every map of `jaxmb.models` passes such coordinates through, e.g. the crane's ``q1``); one
    that is not (the 3-DoF arm's ``delta``, a cylinder extension in m) cannot be told from the
    map and is treated as revolute unless ``joint_types`` says otherwise. Revolute or prismatic
    only chooses the kind (and so the unit checks) of the position, velocity, acceleration and
    force columns.
    """
    if isinstance(model_or_plant, HydraulicPlant):
        model, plant = model_or_plant.model, model_or_plant
    elif isinstance(model_or_plant, Model):
        model, plant = model_or_plant, None
    else:
        raise ValueError(
            "schema_for: expected a jaxmb.Model or a jaxmb.actuators.plant.HydraulicPlant, got "
            f"{type(model_or_plant).__name__}"
        )
    types = coordinate_joint_types(model)
    for c, jt in (joint_types or {}).items():
        if c not in types:
            raise ValueError(
                f"schema_for: joint_types: unknown coordinate {c!r}; coordinates are "
                f"{model.coordinate_names}"
            )
        if jt not in ("revolute", "prismatic"):
            raise ValueError(
                f"schema_for: joint_types[{c!r}]: expected 'revolute' or 'prismatic', got {jt!r}"
            )
        types[c] = jt
    actuators = () if plant is None else plant.actuator_names
    motor = model.coordinate_names if plant is None else plant.direct
    cols: list[tuple[str, str]] = []
    for per, names in (
        ("coordinate", model.coordinate_names),
        ("motor", motor),
        ("actuator", actuators),
        ("machine", ("",) if plant is not None else ()),
    ):
        for x in names:  # each name's columns together, in `COLUMNS`' order
            for col in (col for col in COLUMNS if col.per == per):
                prismatic = per in ("coordinate", "motor") and types[x] == "prismatic"
                kind = col.kinds[prismatic]
                cols.append((col.name.format(c=x, a=x), kind))
    cols += list((extra or {}).items())
    return LogSchema(
        columns=tuple(cols), coordinates=tuple(model.coordinate_names), actuators=actuators
    )


# ------------------------------------------------------------------------------------------ files


def _format(path: Path) -> str:
    ext = path.suffix.lower()
    if ext not in (".csv", ".parquet"):
        raise ValueError(f"log path {str(path)!r}: expected a .csv or .parquet file, got {ext!r}")
    return ext[1:]


def _check_header(names: Sequence[str], where: str) -> None:
    for i, n in enumerate(names):
        if not isinstance(n, str) or not n.strip():
            raise LogError(f"{where}: column #{i + 1} has an empty name")
    dup = sorted({n for n in names if list(names).count(n) > 1})
    if dup:
        raise LogError(f"{where}: duplicated column names {dup}")


_PARQUET_MAGIC = b"PAR1"  # a Parquet file begins and ends with these four bytes


def _check_content(path: Path, fmt: str) -> None:
    """Refuse a file whose content is not the format its name claims, naming both."""
    with open(path, "rb") as fh:
        head = fh.read(4096)
    if fmt == "csv" and head.startswith(_PARQUET_MAGIC):
        raise LogError(
            f"the file is Parquet (it begins with {_PARQUET_MAGIC!r}), not CSV as its name says; "
            f"rename it to {path.with_suffix('.parquet').name!r}"
        )
    if fmt == "csv" and b"\0" in head:
        raise LogError("expected a CSV text file, but it holds binary data")
    if fmt == "parquet" and not head.startswith(_PARQUET_MAGIC):
        text = "CSV text" if head and b"\0" not in head else "not Parquet"
        raise LogError(
            f"expected a Parquet file (beginning with {_PARQUET_MAGIC!r}); the file is {text}"
            + ("; rename it to .csv" if text == "CSV text" else "")
        )


def _read_table(path: Path) -> dict[str, np.ndarray]:
    import pyarrow as pa

    _check_content(path, _format(path))
    if _format(path) == "csv":
        import pyarrow.csv as pcsv

        with open(path, newline="") as fh:
            header = next(csv.reader(fh), None)
        if not header:
            raise LogError(f"{path.name}: empty file; expected a header row with 't' and signals")
        _check_header(header, path.name)
        try:
            table = pcsv.read_csv(
                path,
                convert_options=pcsv.ConvertOptions(column_types={n: pa.float64() for n in header}),
            )
        except pa.ArrowInvalid as e:
            # arrow says "In CSV column #k: ... invalid value 'x'": name the column
            msg = str(e)
            col = None
            if "column #" in msg:
                k = int(msg.split("column #")[1].split(":")[0])
                col = header[k] if 0 <= k < len(header) else None
            what = f"column {col!r}" if col is not None else path.name
            raise LogError(f"{what}: expected numbers (float, SI units); {msg}") from None
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        _check_header(table.column_names, path.name)
    out = {}
    for name in table.column_names:
        col = table.column(name)
        if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
            raise LogError(f"column {name!r}: expected numbers (float, SI units), got {col.type}")
        # nulls (empty CSV cells) become NaN, and are then reported by validation
        out[name] = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
    return out


def _sidecar_path(path: Path) -> Path:
    return path.with_suffix(".json")


def _read_sidecar(path: Path) -> dict:
    side = _sidecar_path(path)
    if not side.exists():
        return {}
    try:
        meta = json.loads(side.read_text())
    except json.JSONDecodeError as e:
        raise LogError(f"sidecar {side.name}: not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise LogError(f"sidecar {side.name}: expected a JSON object, got {type(meta).__name__}")
    if "model" in meta and not isinstance(meta["model"], str):
        raise LogError(f"sidecar {side.name}: 'model' must be a string, got {meta['model']!r}")
    if "synthetic" in meta and not isinstance(meta["synthetic"], bool):
        raise LogError(
            f"sidecar {side.name}: 'synthetic' must be true or false, got {meta['synthetic']!r}"
        )
    units = meta.get("units", {})
    if not isinstance(units, dict) or not all(isinstance(v, str) for v in units.values()):
        raise LogError(
            f"sidecar {side.name}: 'units' must map column names to unit strings, got {units!r}"
        )
    return meta


def _rename(cols: dict, meta: dict, columns: dict, units: dict) -> tuple[dict, dict]:
    """Columns renamed to the signals they hold (``columns``: signal -> column), and the
    given ``units`` (signal -> unit) under any the sidecar declares."""
    raw_to_signal = {raw: sig for sig, raw in columns.items()}
    for sig, raw in columns.items():
        if sig in cols and raw in cols and sig != raw:
            raise LogError(
                f"both column {raw!r} (named for {sig!r} by the machine file's [log] columns) "
                f"and a column {sig!r} are present; keep one"
            )
    cols = {raw_to_signal.get(k, k): v for k, v in cols.items()}
    declared = {raw_to_signal.get(k, k): u for k, u in meta.get("units", {}).items()}
    # a column the sidecar records as converted is SI already (a log read and written back):
    # the machine file's unit for it would convert it a second time
    done = {raw_to_signal.get(k, k) for k in meta.get("converted_units", {})}
    merged = {k: u for k, u in units.items() if k in cols and k not in done}
    merged.update(declared)
    meta = dict(meta)
    if merged:
        meta["units"] = merged
    return cols, meta


def _convert_units(
    cols: dict[str, np.ndarray], meta: dict, schema: LogSchema | None
) -> tuple[dict[str, np.ndarray], dict]:
    """Apply the sidecar's ``units`` (module docstring); returns SI columns and updated meta."""
    units = dict(meta.get("units", {}))
    converted = dict(meta.get("converted_units", {}))
    for name, unit in list(units.items()):
        if name not in cols:
            raise LogError(
                f"sidecar 'units': column {name!r} is not in the table; columns are {list(cols)}"
            )
        if unit not in UNITS:
            raise LogError(
                f"sidecar 'units': column {name!r}: unknown unit {unit!r}; known units are "
                f"{list(UNITS)}"
            )
        dim, factor = UNITS[unit]
        if schema is not None and (name == "t" or name in schema.kinds):
            kind = schema.kind(name)
            if _dimension(kind) != dim:
                raise LogError(
                    f"sidecar 'units': column {name!r} is a {kind} (SI unit {KINDS[kind]}), "
                    f"but its unit is declared as {unit!r} (a {dim})"
                )
        if name == "t" and dim != "time":
            raise LogError(f"sidecar 'units': column 't' is time, got unit {unit!r}")
        if factor != 1.0:
            cols[name] = cols[name] * factor
            converted[name] = unit
            del units[name]
    meta = dict(meta)
    if units:
        meta["units"] = units
    else:
        meta.pop("units", None)
    if converted:
        meta["converted_units"] = converted
    return cols, meta


def read_log(
    path: str | os.PathLike,
    schema: LogSchema | None = None,
    *,
    required: Sequence[str] = (),
    n_parameters: int | None = None,
    columns: Mapping[str, str] | None = None,
    units: Mapping[str, str] | None = None,
) -> Log:
    """Read a log (CSV or Parquet by extension) and its JSON sidecar, convert declared non-SI
    units to SI, and validate it against ``schema`` if one is given (`validate_log`).

    ``columns`` (``{signal: column}``) names the log's columns for signals it calls otherwise,
    and ``units`` (``{signal: unit}``) gives their units where the sidecar does not: a machine
    file's ``[log]`` table (`jaxmb.io.machine`). The sidecar's ``units`` may name a column
    by either name.

    Raises `LogError` (a `ValueError`) naming the file and the column; `FileNotFoundError` for a
    missing table."""
    check_type(path, (str, os.PathLike), "read_log: path")
    check_type(schema, (LogSchema, type(None)), "read_log: schema")
    path = Path(path)
    _format(path)
    if not path.is_file():
        raise FileNotFoundError(f"log: no such file {str(path)!r}")
    try:
        cols = _read_table(path)
        if "t" not in cols:
            raise LogError(
                f"no 't' column (time, s); columns are {list(cols)}. A log needs its time "
                "stamps in a column named 't' (seconds, or a sidecar unit 'ms')"
            )
        meta = _read_sidecar(path)
        if columns or units:
            cols, meta = _rename(cols, meta, dict(columns or {}), dict(units or {}))
            for sig in required:
                if sig not in cols and sig in (columns or {}):
                    raise LogError(
                        f"missing column {columns[sig]!r} (the machine file's [log] columns name "
                        f"it for {sig!r}); columns are {list(cols)}"
                    )
        cols, meta = _convert_units(cols, meta, schema)
        t = cols.pop("t")
        log = Log(t, cols, meta)
        if schema is not None:
            validate_log(log, schema, required=required, n_parameters=n_parameters)
    except LogError as e:
        raise LogError(f"{path.name}: {e}") from None
    return log


def write_log(
    path: str | os.PathLike,
    log_or_t,
    signals: Mapping[str, Any] | None = None,
    *,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write a log (CSV or Parquet by extension) and its sidecar (``<stem>.json``, always
    written, so that no stale sidecar is picked up); returns ``path``.

    ``write_log(path, log)`` or ``write_log(path, t, {name: values}, meta=...)``. Values are
    written as given: a ``meta["units"]`` entry declares the unit they are in. CSV numbers are
    written with the shortest representation that parses back to the same float64 (pyarrow), so
    `read_log` returns exactly what was written."""
    import pyarrow as pa

    path = Path(path)
    fmt = _format(path)
    if isinstance(log_or_t, Log):
        if signals is not None:
            raise ValueError("write_log: pass either a Log or (t, signals), not both")
        log = log_or_t if meta is None else Log(log_or_t.t, log_or_t.signals, meta)
    else:
        if signals is None:
            raise ValueError("write_log: signals (a mapping name -> values) is required with t")
        log = Log(log_or_t, signals, meta)
    table = pa.table({"t": log.t, **{k: log.signals[k] for k in log.names}})
    if fmt == "csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, path)
    else:
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    _sidecar_path(path).write_text(json.dumps(log.meta, indent=2, sort_keys=True) + "\n")
    return path


# ------------------------------------------------------------------------------------- validation


def _unknown_message(name: str, schema: LogSchema) -> str:
    close = difflib.get_close_matches(name, ["t", *schema.names], n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return (
        f"unknown column {name!r}.{hint} Allowed columns are {['t', *schema.names]} "
        "(see jaxmb.io.logs for the format)"
    )


def time_problems(t: np.ndarray) -> list[str]:
    """What is wrong with time stamps ``t`` (fewer than two, non-finite, not strictly
    increasing), as messages naming the first index; empty if nothing."""
    if t.shape[0] < 2:
        return [f"column 't': expected at least 2 samples, got {t.shape[0]}"]
    bad = ~np.isfinite(t)
    if bad.any():
        i = int(np.argmax(bad))
        return [f"column 't': {int(bad.sum())} non-finite time stamps, first at index {i}"]
    d = np.diff(t)
    if (d > 0).all():
        return []
    i = int(np.argmax(d <= 0)) + 1
    if d[i - 1] == 0:
        return [
            f"column 't': duplicated time stamp at index {i}: t[{i - 1}] = t[{i}] = {float(t[i])!r} s; "
            "time must increase strictly"
        ]
    return [
        f"column 't': time is not monotonic at index {i}: t[{i - 1}] = {float(t[i - 1])!r} s, "
        f"t[{i}] = {float(t[i])!r} s; time must increase strictly (are the rows sorted?)"
    ]


def nonfinite_problem(name: str, x: np.ndarray, t: np.ndarray) -> str | None:
    """A message counting column ``name``'s NaN and infinite values with the first one's time,
    or None if all are finite."""
    nan, inf = np.isnan(x), np.isinf(x)
    parts = []
    for mask, what in ((nan, "NaN"), (inf, "infinite")):
        if mask.any():
            i = int(np.argmax(mask))
            parts.append(
                f"{int(mask.sum())} {what} values (first at index {i}, t = {float(t[i])!r} s)"
            )
    if not parts:
        return None
    return f"column {name!r}: {' and '.join(parts)}; expected finite numbers (gaps are not allowed)"


def _unit_problem(name: str, kind: str, x: np.ndarray) -> str | None:
    peak = float(np.max(np.abs(x)))
    fix = f'declare its unit in the sidecar, e.g. {{"units": {{"{name}": "%s"}}}}, or convert to SI'
    if kind == "angle" and peak > _DEG_LIMIT:
        return (
            f"column {name!r}: max |value| = {peak:.6g} > 4 pi (two turns) for a revolute position "
            f"in rad; this looks like degrees: " + fix % "deg"
        )
    if kind == "angular_velocity" and peak > _DEG_RATE_LIMIT:
        return (
            f"column {name!r}: max |value| = {peak:.6g} > {_DEG_RATE_LIMIT:g} rad/s; this looks "
            "like deg/s: " + fix % "deg/s"
        )
    if kind == "pressure" and peak < _BAR_LIMIT:
        return (
            f"column {name!r}: max |value| = {peak:.6g} < {_BAR_LIMIT:g} Pa (0.01 bar) for a "
            "pressure in Pa; this looks like bar: " + fix % "bar"
        )
    if kind == "length" and peak > _MM_LIMIT:
        return (
            f"column {name!r}: max |value| = {peak:.6g} > {_MM_LIMIT:g} m for a length in m; this "
            "looks like mm: " + fix % "mm"
        )
    if kind == "linear_velocity" and peak > _MM_LIMIT:
        return (
            f"column {name!r}: max |value| = {peak:.6g} > {_MM_LIMIT:g} m/s for a velocity in m/s; "
            "this looks like mm/s: " + fix % "mm/s"
        )
    return None


def _is_equation(name: str) -> bool:
    return name.startswith(("tau_", "f_", "p_"))


def validate_log(
    log: Log,
    schema: LogSchema,
    *,
    required: Sequence[str] = (),
    n_parameters: int | None = None,
) -> Log:
    """Check ``log`` against ``schema`` and return it unchanged; raise one `LogError` listing
    every problem found (module docstring), each naming its column and what was expected.

    Args:
        required: columns that must be present.
        n_parameters: if given, require ``n_samples * n_equations >= n_parameters``, with
            ``n_equations`` the number of ``tau_``, ``f_`` and ``p_`` columns (each sample of
            each gives one equation of a regressor or output-error fit).
    """
    check_type(log, Log, "validate_log: log")
    check_type(schema, LogSchema, "validate_log: schema (see schema_for)")
    if isinstance(required, str):
        raise ValueError(f"validate_log: required must be a sequence of names, got {required!r}")
    problems: list[str] = []
    kinds = schema.kinds
    for name in required:
        if name != "t" and name not in log.signals:
            kind = kinds.get(name)
            what = f" ({kind}, {KINDS[kind]})" if kind else ""
            problems.append(f"missing required column {name!r}{what}")
    for name in log.names:
        if name not in kinds:
            problems.append(_unknown_message(name, schema))
    problems += time_problems(log.t)
    for name in log.names:
        x = log.signals[name]
        p = nonfinite_problem(name, x, log.t)
        if p is not None:
            problems.append(p)
            continue  # the value checks below need finite numbers
        if x.size and np.all(x == x[0]):
            problems.append(
                f"column {name!r} is constant (= {float(x[0])!r}); a constant signal carries no "
                "information for identification: drop the column or log an excited run"
            )
        if name in kinds and x.size:
            p = _unit_problem(name, kinds[name], x)
            if p is not None:
                problems.append(p)
    if n_parameters is not None:
        n_eq = sum(_is_equation(n) for n in log.names)
        if log.n * n_eq < n_parameters:
            problems.append(
                f"too few samples: {log.n} samples x {n_eq} equation columns (tau_, f_, p_) = "
                f"{log.n * n_eq} equations < {n_parameters} parameters"
            )
    if problems:
        head = "1 problem" if len(problems) == 1 else f"{len(problems)} problems"
        raise LogError(f"log has {head}:\n- " + "\n- ".join(problems))
    return log
