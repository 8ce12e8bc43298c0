r"""Hydraulic machines from files: a URDF for the booms, a TOML machine file for the rest.

The URDF holds the open tree: links with their inertias, revolute and prismatic joints with
their axes, any orientation. The machine file beside it holds what a URDF cannot: the
cylinders that close loops between links, their valves, the supply, the payload, gravity and
the names of a log's columns. `load_machine` reads both and returns a `Machine` whose plant
(`jaxmb.actuators.plant.HydraulicPlant`) every workflow takes; the built-in crane ships as such a pair
(``data/machines/lift_tilt_crane``), so there is one code path for it and for a user's machine.

Every number becomes an array leaf of the plant (differentiable, vmappable); every bad entry is
refused here, before anything compiles, by a `MachineFileError` that names the file, the
table and key, and what was expected. SI units throughout (m, m^2, m^3, Pa, m^3/s, N, kg).

Machine file (all tables but ``[log]`` and ``[payload]`` required; ``#`` comments are free)::

    [machine]
    name = "my_crane"                 # names the identified parameter files
    urdf = "my_crane.urdf"            # relative to this file
    gravity = [0.0, 0.0, -9.81]       # m/s^2 in the URDF's root frame (default)

    [hydraulics]
    supply_pressure = 185e5           # Pa (a load-sensing pump's setting: what closed loops,
    return_pressure = 10e5            # Pa  studies and tuning take)
    bulk_modulus = 1.0e9              # Pa, effective; a cylinder may override it
    supply_from_log = false           # true: replays and identification take the supply
                                      # pressure from each log's signal p_s (a load-sensing
                                      # pump moves it), interpolated between samples; name its
                                      # column and unit in [log] columns and units
    return_from_log = false           # true: the return pressure likewise, signal p_r

    [payload]                         # optional: a point mass, a leaf even at 0 kg
    mass = 0.0                        # kg (a log's sidecar conditions.payload_kg overrides)
    link = "tool"                     # any URDF link
    com = [0.0, 0.0, 0.0]             # m, in that link's frame

    [cylinders.lift]                  # one table per cylinder; its name names the signals
    base = { link = "world", point = [0.17, 0.386, 0.0] }   # base pin A (tube side)
    rod = { link = "boom", point = [0.30, -0.105, 0.0] }    # rod pin B
    l_min = 0.82                      # m, pin distance |AB| at zero stroke
    stroke = 0.535                    # m
    bore = 0.100                      # m (or area_a, area_b in m^2)
    rod_diameter = 0.056              # m
    dead_volume = 1.9e-4              # m^3 per chamber (or dead_volume_a, dead_volume_b)
    leakage_internal = 0.0            # m^3/(s Pa), a -> b (optional)
    leakage_external = 0.0            # m^3/(s Pa), each chamber to tank (optional)
    friction = { model = "stribeck", F_c = 210.0, F_s = 300.0, v_s = 5e-3, sigma = 330.0, v_eps = 1e-3 }
    tube = { mass = 15.0, com = 0.30, length = 0.8 }        # optional: massless without
    piston = { mass = 8.0, com = 0.30, length = 0.8 }       # rod and piston, com from B
    pin_axis = [0.0, 0.0, 1.0]        # optional, base link frame (module cylinder_loops)

    [valves.lift_valve]               # one table per valve
    cylinder = "lift"
    rated_flow = 6.6667e-4            # m^3/s per metering edge at the rated pressure drop
    rated_pressure_drop = 35e5        # Pa, and at the full command
    # or the four edge coefficients c_pa, c_an, c_pb, c_bn (m^3 s^-1 V^-1 Pa^-1/2)
    command_max = 10.0                # saturation, in command_unit
    command_unit = "V"
    deadband = 0.0                    # spool overlap, in command_unit (0 <= deadband <
                                      # command_max): the edges meter sign(u) max(|u| - deadband, 0),
                                      # and the rated flow is reached at rated_command past it:
                                      # c = rated_flow / ((rated_command - deadband) sqrt(dp))
    delay = 0.0                       # s, command transport delay (bus, driver): replays of
                                      # logged commands take it, the sampled closed loop holds
                                      # the commands sent until they arrive; "continuous"
                                      # [vdc] rate refuses it
    spool = { model = "first", time_constant = 0.01 }   # or "none", or model = "second",
                                                        # frequency (rad/s), damping

    [task]                            # optional: the waypoint task `jaxmb simulate` runs VDC on
    waypoints = { q1 = [0.15, 0.95, 0.15], q2 = [-0.45, 0.25, -0.45] }  # rad or m, every
                                      # coordinate, rest-to-rest quintics between them
    segment_time = 2.0                # s per segment
    hold = 2.0                        # s at the last waypoint

    [vdc]                             # optional: VDC gains (jaxmb.control.vdc_control.GAINS
    lam = 10.0                        # for those not given); a number, or one per coordinate
    k_x = [3e-2, 3e-2]                # (lam) or cylinder (k_x, k_f); k_v, k_0 are numbers
    rate = 1000.0                     # Hz (default): the controller samples the state and
                                      # holds its command until the next sample (zero-order
                                      # hold), as on the machine; "continuous" for the
                                      # continuous-time loop of the papers

    [log]                             # optional: the log's names for the plant's signals
    columns = { q1 = "boom_angle", p_a_lift = "P1" }    # plant name = log column
    units = { p_a_lift = "bar" }      # non-SI units of the log's columns (see logs)
    offsets = { p_a_lift = 0.4 }      # known sensor offsets: what the sensor reads when the
                                      # signal is 0, in the column's unit (units, else SI);
                                      # subtracted from every log of this machine on reading
                                      # (`jaxmb identify --offsets` fits the unknown ones,
                                      # --encoder-offsets an angle's, e.g. q1 = 0.0064)

Friction models: ``"stribeck"`` (F_c, F_s, v_s, sigma, v_eps), ``"lugre"`` (sigma0, sigma1,
sigma2, F_c, F_s, v_s, optional v_eps), ``"viscous"`` (sigma), ``"none"``.
"""

from __future__ import annotations

import math
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Float

from jaxmb.actuators.cylinder_loops import CylinderLoops, cylinder_frames, tube_rotation
from jaxmb.actuators.hydraulics import (
    Cylinder,
    CylinderMount,
    HydraulicActuator,
    LuGreFriction,
    StribeckFriction,
    Valve,
)
from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.io import machine_keys
from jaxmb.io.logs import KINDS, UNITS, read_log, schema_for
from jaxmb.io.urdf import UrdfError, load_urdf
from jaxmb.multibody.kinematics import world_transforms
from jaxmb.multibody.model import WORLD, Body, Model
from jaxmb.simulation import QuinticWaypoints

__all__ = [
    "Machine",
    "Task",
    "MachineFileError",
    "load_machine",
    "check_reach",
    "BUILTIN",
    "machine_path",
    "weigh_payload",
    "CONTROL_RATE",
]

# Hz: a machine's controller samples at this rate unless its file says otherwise (``[vdc]
# rate``), the usual rate of a mobile machine's controller and the step of Petrovic & Mattila's
# own fixed-step runs
CONTROL_RATE = 1000.0

# the machines that ship with jaxmb, as files in jaxmb/models/machines (loaded like any other)
BUILTIN = {"crane": "lift_tilt_crane.toml"}
_BUILTIN_FOLDER = Path(__file__).resolve().parents[1] / "models" / "machines"


def machine_path(name_or_path) -> Path:
    """The machine file of a built-in machine's name (`BUILTIN`), or the path given."""
    if isinstance(name_or_path, str) and name_or_path in BUILTIN:
        return _BUILTIN_FOLDER / BUILTIN[name_or_path]
    return Path(name_or_path)


# the keys each table may hold, with their meanings (`machine_keys`: the reference's source)
_TABLES = machine_keys.TABLES
_CYLINDER_KEYS = machine_keys.CYLINDER
_VALVE_KEYS = machine_keys.VALVE
_FRICTION = {
    "stribeck": ({"F_c", "F_s", "v_s", "sigma", "v_eps"}, set()),
    "lugre": ({"sigma0", "sigma1", "sigma2", "F_c", "F_s", "v_s"}, {"v_eps"}),
    "viscous": ({"sigma"}, set()),
    "none": (set(), set()),
}
_SPOOL = {
    "none": (set(), set()),
    "first": ({"time_constant"}, set()),
    "second": ({"frequency", "damping"}, set()),
}
AXIAL_INERTIA = 0.01  # kg m^2: a cylinder body's inertia about its own axis (small; default)


class MachineFileError(ValueError):
    """A machine file (or its URDF) that cannot describe a machine; the message names the file,
    the table and key, and what was expected."""


@dataclass(frozen=True)
class Payload:
    """A point mass: ``mass`` (kg) at ``com`` (m) in the frame of URDF link ``link``."""

    mass: float
    link: str
    com: tuple[float, float, float]


@dataclass(frozen=True)
class Task:
    """A waypoint task: ``waypoints`` (K, n) in the plant's coordinate order (rad, m), joined
    by rest-to-rest quintics of ``segment_time`` s each, then ``hold`` s at the last."""

    waypoints: tuple[tuple[float, ...], ...]
    segment_time: float
    hold: float

    @property
    def t_final(self) -> float:
        return (len(self.waypoints) - 1) * self.segment_time + self.hold

    def reference(self):
        """``q_d(t)`` (`jaxmb.simulation.QuinticWaypoints`)."""
        return QuinticWaypoints(self.waypoints, segment_time=self.segment_time)


@dataclass(frozen=True)
class Machine:
    """A hydraulic machine read by `load_machine`.

    Attributes:
        name: ``[machine] name``.
        path: the machine file.
        plant: mechanics, cylinders, valves and friction (`jaxmb.actuators.plant.HydraulicPlant`); with a
            ``[payload]`` table the payload is a body named ``"payload"`` (a leaf at any mass).
        payload: the file's payload (None without one).
        columns: ``{plant signal: log column}`` for signals the log names otherwise.
        units: ``{plant signal: unit}`` of the log's non-SI columns.
        offsets: ``{plant signal: offset}`` (SI) that `read_log` subtracts: a sensor's known
            reading at zero.
        command_units: ``{actuator: unit}`` of each valve command.
        task: the file's waypoint task (None without ``[task]``).
        gains: the file's VDC gains (``[vdc]``), as given.
        rate: the controller's sampling rate (Hz, ``[vdc] rate``, default `CONTROL_RATE`), or
            None for the continuous-time loop (``rate = "continuous"``).
        urdf_path: the URDF beside it.
    """

    name: str
    path: Path
    plant: object
    payload: Payload | None
    columns: Mapping[str, str] = field(default_factory=dict)
    units: Mapping[str, str] = field(default_factory=dict)
    offsets: Mapping[str, float] = field(default_factory=dict)
    command_units: Mapping[str, str] = field(default_factory=dict)
    task: Task | None = None
    gains: Mapping[str, object] = field(default_factory=dict)
    urdf_path: Path | None = None
    rate: float | None = CONTROL_RATE

    @property
    def sample_time(self) -> float | None:
        """The controller's sampling interval (s), None for the continuous loop."""
        return None if self.rate is None else 1.0 / self.rate

    @property
    def model(self) -> Model:
        return self.plant.model

    @property
    def names(self) -> tuple[str, ...]:
        """``[machine] name`` and, for a built-in machine, its short name (``"crane"``): the
        names its identified parameter files may carry."""
        short = [k for k in BUILTIN if machine_path(k).resolve() == self.path.resolve()]
        return (self.name, *short)

    def digest(self) -> str:
        """SHA-256 of the machine file and its URDF together: what a study's rows were run on."""
        import hashlib

        h = hashlib.sha256(self.path.read_bytes())
        h.update(self.urdf_path.read_bytes())
        return h.hexdigest()

    def read_log(self, path, *, required=()):
        """A log of this machine (`jaxmb.io.logs.read_log`), its columns renamed
        and converted as the file's ``[log]`` table says, checked against the plant's signals,
        and the known sensor ``offsets`` subtracted."""
        required = (*required, *(c for c in self.plant.logged if c not in required))
        log = read_log(
            path, schema_for(self.plant), required=required, columns=self.columns, units=self.units
        )
        if self.offsets:
            signals = {k: log[k] - self.offsets.get(k, 0.0) for k in log.names}
            log = type(log)(log.t, signals, log.sidecar)
        _check_supply(self, log, Path(path).name)
        return log

    def with_payload(self, mass: Float[ArrayLike, ""], com: Float[ArrayLike, 3] | None = None):
        """The plant with the payload's mass (kg) and centre (m, in its link) replaced."""
        if self.payload is None:
            raise ValueError(f"machine {self.name!r}: its file {self.path} has no [payload] table")
        j = self.model.body_names.index("payload")
        plant = eqx.tree_at(
            lambda p: p.model.bodies[j].mass, self.plant, jnp.asarray(mass, dtype=float)
        )
        if com is not None:
            plant = eqx.tree_at(
                lambda p: p.model.bodies[j].com, plant, jnp.asarray(com, dtype=float)
            )
        return plant


def weigh_payload(plant, mass):
    """``plant`` with its payload weighing ``mass`` (kg): the same load weighed, its centre
    kept and its inertia about it scaled with the mass (a load named empty has none). How a
    log's named payload, or ``--payload``, enters a plant whose payload was identified."""
    j = plant.model.body_names.index("payload")
    body = plant.model.bodies[j]
    scale = jnp.where(body.mass > 0, mass / jnp.where(body.mass > 0, body.mass, 1.0), 1.0)
    return eqx.tree_at(
        lambda p: (p.model.bodies[j].mass, p.model.bodies[j].inertia), plant,
        (jnp.asarray(mass, dtype=float), body.inertia * scale),
    )  # fmt: skip


class _Where:
    """Names a place in a machine file for error messages."""

    def __init__(self, path: Path):
        self.path = path

    def error(self, table: str, key: str | None, what: str) -> MachineFileError:
        at = f"[{table}]" + (f" key {key!r}" if key else "")
        return MachineFileError(f"machine file {self.path}: {at}: {what}")

    def table(self, doc: Mapping, name: str, keys: Collection[str] | None, required: bool = True):
        if name not in doc:
            if required:
                raise self.error(name, None, "missing table")
            return None
        t = doc[name]
        if not isinstance(t, Mapping):
            raise self.error(name, None, f"expected a table, got {type(t).__name__}")
        if keys is not None:
            self.known(t, name, keys)
        return t

    def known(self, t: Mapping, table: str, keys: Collection[str]) -> None:
        for k in t:
            if k not in keys:
                raise self.error(table, k, f"unknown key; expected one of {sorted(keys)}")

    def number(
        self,
        t: Mapping,
        table: str,
        key: str,
        *,
        default=None,
        low=None,
        strict=True,
        unit: str = "",
    ) -> float:
        if key not in t:
            if default is None:
                raise self.error(table, key, f"missing; expected a number{_unit(unit)}")
            return float(default)
        v = t[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.error(table, key, f"expected a finite number{_unit(unit)}, got {v!r}")
        if low is not None and (v <= low if strict else v < low):
            rel = ">" if strict else ">="
            raise self.error(table, key, f"expected a number {rel} {low:g}{_unit(unit)}, got {v!r}")
        return float(v)

    def vector(self, t: Mapping, table: str, key: str, *, default=None, unit: str = "") -> tuple:
        if key not in t:
            if default is None:
                raise self.error(table, key, f"missing; expected 3 numbers{_unit(unit)}")
            return tuple(float(x) for x in default)
        v = t[key]
        ok = (
            isinstance(v, list)
            and len(v) == 3
            and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
            and all(math.isfinite(x) for x in v)
        )
        if not ok:
            raise self.error(table, key, f"expected 3 finite numbers{_unit(unit)}, got {v!r}")
        return tuple(float(x) for x in v)

    def flag(self, t: Mapping, table: str, key: str, *, default: bool = False) -> bool:
        v = t.get(key, default)
        if not isinstance(v, bool):
            raise self.error(table, key, f"expected true or false, got {v!r}")
        return v

    def string(self, t: Mapping, table: str, key: str, *, default=None, choices=None) -> str:
        if key not in t:
            if default is None:
                raise self.error(table, key, "missing; expected a string")
            return default
        v = t[key]
        if not isinstance(v, str) or not v:
            raise self.error(table, key, f"expected a non-empty string, got {v!r}")
        if choices is not None and v not in choices:
            raise self.error(table, key, f"expected one of {sorted(choices)}, got {v!r}")
        return v


def _unit(unit: str) -> str:
    return f" ({unit})" if unit else ""


def _urdf_root(path: Path) -> str:
    """The URDF's root link (the one no joint has as child); it is the model's frame S."""
    root = ET.parse(path).getroot()
    links = [el.get("name") for el in root.findall("link")]
    children = {
        el.find("child").get("link") for el in root.findall("joint") if el.find("child") is not None
    }
    roots = [name for name in links if name not in children]
    return roots[0] if len(roots) == 1 else WORLD


def load_machine(path, *, payload: float | None = None, cylinder_bodies: bool = True) -> Machine:
    """Read a machine file (module docstring) and its URDF.

    Args:
        path: the ``.toml`` machine file.
        payload: kg, overriding ``[payload] mass`` (needs a ``[payload]`` table).
        cylinder_bodies: False drops the tube and piston bodies (a controller's view of the
            machine: the booms alone).

    Raises:
        MachineFileError: naming the file, table and key (module docstring)."""
    path = machine_path(path)
    where = _Where(path)
    doc = _document(path, where)
    name, urdf_path, tree, link = _machine_table(path, where, doc)
    p_s, p_r, beta, logged = _hydraulics_table(where, doc)
    cyl_doc = where.table(doc, "cylinders", None)
    if not cyl_doc:
        raise where.error("cylinders", None, "expected at least one cylinder table")
    valves_doc = where.table(doc, "valves", None)
    cylinders = {
        c: _cylinder(where, f"cylinders.{c}", t, link, beta)
        for c, t in _tables(where, cyl_doc, "cylinders")
    }
    valves = _valves(where, valves_doc, cylinders, p_s, p_r)
    payload_info = _payload_table(where, doc, link, payload)
    model = _mechanics(where, tree, cylinders, payload_info, cylinder_bodies)

    actuators = [
        HydraulicActuator(c, spec["mount"], spec["cylinder"], valves[c][0], spec["friction"])
        for c, spec in cylinders.items()
    ]
    plant = HydraulicPlant(model, actuators, logged=logged)
    columns, units, offsets = _log_tables(where, doc, plant)
    task = _task(where, doc, plant)
    gains, rate = _gains(where, doc, plant)
    return Machine(
        name=name,
        path=path,
        plant=plant,
        payload=payload_info,
        columns=columns,
        units=units,
        offsets=offsets,
        command_units={c: valves[c][1] for c in cylinders},
        task=task,
        gains=gains,
        urdf_path=urdf_path,
        rate=rate,
    )


def _document(path: Path, where: _Where) -> dict:
    """The machine file's TOML document, its tables known ones."""
    if path.suffix.lower() != ".toml":
        raise MachineFileError(f"machine file {path}: expected a .toml file")
    if not path.is_file():
        raise MachineFileError(f"machine file {path}: no such file")
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise MachineFileError(f"machine file {path}: not valid TOML: {e}") from None
    for k in doc:
        if k not in _TABLES:
            raise where.error(k, None, f"unknown table; expected {sorted(_TABLES)}")
    return doc


def _machine_table(path: Path, where: _Where, doc: dict):
    """``(name, URDF path, tree, link)`` of ``[machine]``: the URDF's tree under the file's
    gravity, and ``link(table, key, value)``, a link name checked against the URDF (its root
    is the world)."""
    m = where.table(doc, "machine", _TABLES["machine"])
    name = where.string(m, "machine", "name")
    urdf_path = path.parent / where.string(m, "machine", "urdf")
    if not urdf_path.is_file():
        raise where.error("machine", "urdf", f"no such file {str(urdf_path)!r}")
    gravity = where.vector(m, "machine", "gravity", default=(0.0, 0.0, -9.81), unit="m/s^2")
    try:
        tree = load_urdf(urdf_path, mimic=True)
    except UrdfError as e:
        raise MachineFileError(f"machine file {path}: [machine] key 'urdf': {e}") from None
    tree = Model(tree.frames, tree.bodies, gravity, tree.coordinate_map, tree.augmented_names)
    root = _urdf_root(urdf_path)
    links = {f.name for f in tree.frames} | {root, WORLD}

    def link(table: str, key: str, value) -> str:
        if not isinstance(value, str) or value not in links:
            raise where.error(
                table, key, f"no link {value!r} in {urdf_path.name}; links are {sorted(links)}"
            )
        return WORLD if value == root else value

    return name, urdf_path, tree, link


def _hydraulics_table(where: _Where, doc: dict):
    """``(supply pressure, return pressure, bulk modulus, pressures read from the log)`` of
    ``[hydraulics]``."""
    h = where.table(doc, "hydraulics", _TABLES["hydraulics"])
    p_s = where.number(h, "hydraulics", "supply_pressure", low=0, unit="Pa")
    p_r = where.number(h, "hydraulics", "return_pressure", low=0, strict=False, unit="Pa")
    if not p_s > p_r:
        raise where.error(
            "hydraulics",
            "supply_pressure",
            f"must exceed return_pressure ({p_r:g} Pa), got {p_s:g}",
        )
    beta = where.number(h, "hydraulics", "bulk_modulus", low=0, unit="Pa")
    logged = tuple(
        name
        for name, key in (("p_s", "supply_from_log"), ("p_r", "return_from_log"))
        if where.flag(h, "hydraulics", key)
    )
    return p_s, p_r, beta, logged


def _payload_table(where: _Where, doc: dict, link, payload: float | None) -> Payload | None:
    """``[payload]``: a point mass body on a moving link, a leaf at any mass; ``payload``
    (kg) overrides its mass (and needs the table)."""
    pay = where.table(doc, "payload", _TABLES["payload"], required=False)
    payload_info = None
    if pay is not None:
        mass = where.number(pay, "payload", "mass", low=0, strict=False, unit="kg")
        plink = link("payload", "link", pay.get("link"))
        com = where.vector(pay, "payload", "com", default=(0.0, 0.0, 0.0), unit="m")
        if plink == WORLD:
            raise where.error("payload", "link", "the payload must ride on a moving link")
        payload_info = Payload(mass, plink, com)
    elif payload is not None:
        raise where.error("payload", None, "missing table; the payload option needs one")
    if payload is not None:
        if not (isinstance(payload, int | float) and math.isfinite(payload) and payload >= 0):
            raise ValueError(f"load_machine: payload must be a number >= 0 kg, got {payload!r}")
        payload_info = Payload(float(payload), payload_info.link, payload_info.com)
    return payload_info


def _task(where: _Where, doc: Mapping, plant) -> Task | None:
    t = where.table(doc, "task", _TABLES["task"], required=False)
    if t is None:
        return None
    names = plant.coordinate_names
    wp = t.get("waypoints")
    if not isinstance(wp, Mapping):
        raise where.error(
            "task", "waypoints", f"expected a table {{coordinate = [values]}} over {list(names)}"
        )
    if set(wp) != set(names):
        raise where.error(
            "task", "waypoints", f"expected one list per coordinate {list(names)}, got {sorted(wp)}"
        )
    cols = []
    for c in names:
        v = wp[c]
        ok = (
            isinstance(v, list)
            and len(v) >= 2
            and all(
                isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
                for x in v
            )
        )
        if not ok:
            raise where.error(
                "task",
                "waypoints",
                f"{c}: expected a list of >= 2 finite numbers (rad or m), got {v!r}",
            )
        cols.append([float(x) for x in v])
    if len({len(c) for c in cols}) != 1:
        raise where.error(
            "task",
            "waypoints",
            "every coordinate needs the same number of waypoints, got "
            + ", ".join(f"{c} {len(v)}" for c, v in zip(names, cols, strict=True)),
        )
    return Task(
        waypoints=tuple(zip(*cols, strict=True)),
        segment_time=where.number(t, "task", "segment_time", unit="s"),
        hold=where.number(t, "task", "hold", default=0.0, low=0, strict=False, unit="s"),
    )


def _gains(where: _Where, doc: Mapping, plant) -> tuple[dict, float | None]:
    """The ``[vdc]`` table's gains and its controller's rate (Hz; None: continuous)."""
    t = dict(where.table(doc, "vdc", _TABLES["vdc"], required=False) or {})
    rate = t.pop("rate", CONTROL_RATE)
    if rate == "continuous":
        rate = None
    elif not (
        isinstance(rate, int | float) and not isinstance(rate, bool) and math.isfinite(rate)
        and rate > 0
    ):  # fmt: skip
        raise where.error(
            "vdc", "rate", f'expected a sampling rate in Hz > 0 or "continuous", got {rate!r}'
        )
    else:
        rate = float(rate)
    sizes = {
        "lam": plant.n,
        "k_v": 0,
        "k_0": 0,
        "k_x": len(plant.actuators),
        "k_f": len(plant.actuators),
    }
    out = {}
    for k, v in t.items():
        vals = v if isinstance(v, list) else [v]
        ok = all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0
            for x in vals
        )
        n = sizes[k]
        if not ok or (isinstance(v, list) and len(v) != n):
            want = "a number > 0" + (f" or {n} of them" if n else "")
            raise where.error("vdc", k, f"expected {want}, got {v!r}")
        out[k] = [float(x) for x in v] if isinstance(v, list) else float(v)
    return out, rate


def _tables(where: _Where, doc: Mapping, name: str):
    for k, t in doc.items():
        if not isinstance(t, Mapping):
            raise where.error(f"{name}.{k}", None, f"expected a table, got {type(t).__name__}")
        if not k.isidentifier():
            raise where.error(
                f"{name}.{k}", None, "the name must be an identifier (letters, digits, _)"
            )
        yield k, t


def _cylinder(where: _Where, table: str, t: Mapping, link, beta: float) -> dict:
    where.known(t, table, _CYLINDER_KEYS)
    pins = {}
    for side in ("base", "rod"):
        pin = t.get(side)
        if not isinstance(pin, Mapping):
            raise where.error(table, side, "expected a table { link = ..., point = [x, y, z] }")
        where.known(pin, f"{table}.{side}", {"link", "point"})
        pins[side] = (
            link(table, side, pin.get("link")),
            where.vector(pin, f"{table}.{side}", "point", unit="m"),
        )
    l_min = where.number(t, table, "l_min", low=0, unit="m")
    stroke = where.number(t, table, "stroke", low=0, unit="m")
    if "area_a" in t or "area_b" in t:
        if "bore" in t or "rod_diameter" in t:
            raise where.error(
                table, "area_a", "give either area_a and area_b or bore and rod_diameter"
            )
        A_a = where.number(t, table, "area_a", low=0, unit="m^2")
        A_b = where.number(t, table, "area_b", low=0, unit="m^2")
        if not A_b < A_a:
            raise where.error(table, "area_b", f"must be < area_a ({A_a:g} m^2), got {A_b:g}")
    else:
        bore = where.number(t, table, "bore", low=0, unit="m")
        rod = where.number(t, table, "rod_diameter", low=0, unit="m")
        if not rod < bore:
            raise where.error(table, "rod_diameter", f"must be < bore ({bore:g} m), got {rod:g}")
        A_a = math.pi * bore**2 / 4
        A_b = A_a - math.pi * rod**2 / 4
    if "dead_volume" in t:
        V0_a = V0_b = where.number(t, table, "dead_volume", low=0, unit="m^3")
    else:
        V0_a = where.number(t, table, "dead_volume_a", low=0, unit="m^3")
        V0_b = where.number(t, table, "dead_volume_b", low=0, unit="m^3")
    cyl = Cylinder(
        A_a,
        A_b,
        stroke,
        V0_a,
        V0_b,
        where.number(t, table, "bulk_modulus", default=beta, low=0, unit="Pa"),
        c_int=where.number(t, table, "leakage_internal", default=0.0, low=0, strict=False),
        c_ext=where.number(t, table, "leakage_external", default=0.0, low=0, strict=False),
        k_stop=where.number(t, table, "end_stop_stiffness", default=1e8, low=0, strict=False),
        c_stop=where.number(t, table, "end_stop_damping", default=2e6, low=0, strict=False),
    )
    mount = CylinderMount(pins["base"][0], pins["base"][1], pins["rod"][0], pins["rod"][1], l_min)
    bodies = {}
    for part in ("tube", "piston"):
        if part in t:
            b = t[part]
            if not isinstance(b, Mapping):
                raise where.error(table, part, "expected a table { mass, com, length }")
            sub = f"{table}.{part}"
            where.known(b, sub, {"mass", "com", "length", "axial_inertia"})
            bodies[part] = (
                where.number(b, sub, "mass", low=0, unit="kg"),
                where.number(b, sub, "com", low=0, strict=False, unit="m"),
                where.number(b, sub, "length", low=0, unit="m"),
                where.number(b, sub, "axial_inertia", default=AXIAL_INERTIA, low=0, unit="kg m^2"),
            )
    axis = None
    if "pin_axis" in t:
        axis = np.array(where.vector(t, table, "pin_axis"))
        if not np.linalg.norm(axis) > 0:
            raise where.error(table, "pin_axis", "expected a non-zero vector")
    return {
        "mount": mount,
        "cylinder": cyl,
        "friction": _friction(where, table, t.get("friction", {"model": "none"})),
        "bodies": bodies,
        "pin_axis": axis,
        "table": table,
    }


def _friction(where: _Where, table: str, f):
    sub = f"{table}.friction"
    if not isinstance(f, Mapping):
        raise where.error(table, "friction", "expected a table { model = ..., ... }")
    model = where.string(f, sub, "model", choices=set(_FRICTION))
    need, optional = _FRICTION[model]
    where.known(f, sub, need | optional | {"model"})
    v = {k: where.number(f, sub, k, low=0, strict=k in ("v_s", "v_eps", "sigma0")) for k in need}
    v.update({k: where.number(f, sub, k, low=0) for k in optional if k in f})
    if model == "stribeck":
        return StribeckFriction(**v)
    if model == "lugre":
        return LuGreFriction(**v)
    if model == "viscous":  # the Stribeck law with no Coulomb or static level
        return StribeckFriction(0.0, 0.0, 1.0, v["sigma"], 1.0)
    return None


def _valves(where: _Where, doc, cylinders: Mapping, p_s: float, p_r: float) -> dict:
    out: dict[str, tuple] = {}
    for vname, t in _tables(where, doc or {}, "valves"):
        table = f"valves.{vname}"
        where.known(t, table, _VALVE_KEYS)
        cyl = where.string(t, table, "cylinder")
        if cyl not in cylinders:
            raise where.error(
                table, "cylinder", f"no cylinder {cyl!r}; cylinders are {sorted(cylinders)}"
            )
        if cyl in out:
            raise where.error(table, "cylinder", f"cylinder {cyl!r} already has a valve")
        u_max = where.number(t, table, "command_max", default=10.0, low=0)
        unit = where.string(t, table, "command_unit", default="V")
        spool = t.get("spool", "none")
        if isinstance(spool, str):
            spool = {"model": spool}
        if not isinstance(spool, Mapping):
            raise where.error(table, "spool", "expected 'none' or a table { model = ..., ... }")
        smodel = where.string(spool, f"{table}.spool", "model", choices=set(_SPOOL))
        where.known(spool, f"{table}.spool", _SPOOL[smodel][0] | {"model"})
        u_db = where.number(t, table, "deadband", default=0.0, low=0, strict=False, unit=unit)
        if not u_db < u_max:
            raise where.error(
                table, "deadband", f"expected an overlap below command_max = {u_max:g} {unit} "
                f"(the command range), got {u_db:g}"
            )  # fmt: skip
        delay = where.number(t, table, "delay", default=0.0, low=0, strict=False, unit="s")
        opts = {"spool": smodel, "u_max": u_max, "deadband": u_db, "delay": delay}
        keys = {"time_constant": "tau", "frequency": "omega", "damping": "zeta"}
        for k in _SPOOL[smodel][0]:
            opts[keys[k]] = where.number(spool, f"{table}.spool", k, low=0)
        if "dp_width" in t:
            opts["dp_width"] = where.number(t, table, "dp_width", low=0, unit="Pa")
        edges = ("c_pa", "c_an", "c_pb", "c_bn")
        if any(e in t for e in edges):
            if "rated_flow" in t:
                raise where.error(
                    table, "rated_flow", "give either rated_flow or c_pa, c_an, c_pb, c_bn"
                )
            c = [
                where.number(
                    t, table, e, low=0, strict=False, unit="m^3 s^-1 per command unit Pa^-1/2"
                )
                for e in edges
            ]
            valve = Valve(*c, p_s, p_r, **opts)
        else:
            q_nom = where.number(t, table, "rated_flow", low=0, unit="m^3/s")
            dp_nom = where.number(t, table, "rated_pressure_drop", low=0, unit="Pa")
            u_nom = where.number(t, table, "rated_command", default=u_max, low=0)
            if not u_db < u_nom:
                raise where.error(
                    table, "deadband", f"expected an overlap below rated_command = {u_nom:g} "
                    f"{unit} (the rated flow is metered past it), got {u_db:g}"
                )  # fmt: skip
            valve = Valve.from_datasheet(q_nom, dp_nom, p_s, p_r, u_nom=u_nom, **opts)
        out[cyl] = (valve, unit)
    missing = [c for c in cylinders if c not in out]
    if missing:
        c = missing[0]
        raise where.error(
            f"cylinders.{c}",
            None,
            f"no valve drives cylinder {c!r}; add a [valves.<name>] table with cylinder = {c!r}",
        )
    return out


def _slender(mass: float, length: float, axial: float) -> np.ndarray:
    """A slender body along x: axial inertia given, transverse ``m l^2 / 12`` (at its COM)."""
    t = mass * length**2 / 12
    return np.diag([axial, t, t])


def _mechanics(where: _Where, tree: Model, cylinders: Mapping, payload, with_bodies: bool) -> Model:
    """The tree, plus each cylinder's tube and piston bodies through `CylinderLoops`, plus the
    payload point mass."""
    bodies = list(tree.bodies)
    if payload is not None:
        pb = Body("payload", payload.link, 1.0, payload.com, np.zeros((3, 3)))
        bodies.append(pb)
    heavy = {c: s for c, s in cylinders.items() if s["bodies"]} if with_bodies else {}
    if not heavy:
        model = Model(tree.frames, bodies, tree.gravity, tree.coordinate_map, tree.augmented_names)
    else:
        frames = list(tree.frames)
        skeleton = Model(tree.frames, (), tree.gravity, tree.coordinate_map, tree.augmented_names)
        q0 = np.zeros(tree.n)
        names, R0s = [], []
        for c, spec in heavy.items():
            mount = spec["mount"]
            R0 = _tube_rotation(where, spec, skeleton, q0)
            R0s.append(R0)
            frames += cylinder_frames(c, mount.base_frame, mount.base_point, R0)
            names += [f"alpha_{c}", f"s_{c}"]
            # bodies named after their frames: <c>_tube (COM toward B), <c>_rod (toward A)
            for part, frame, sign in (("tube", f"{c}_tube", 1.0), ("piston", f"{c}_rod", -1.0)):
                if part in spec["bodies"]:
                    m, d, length, axial = spec["bodies"][part]
                    bodies.append(
                        Body(
                            frame,
                            frame,
                            m,
                            [sign * d, 0.0, 0.0],
                            _slender(m, length, axial),
                        )
                    )
        cmap = CylinderLoops(
            skeleton,
            [s["mount"].base_frame for s in heavy.values()],
            np.stack([np.asarray(s["mount"].base_point) for s in heavy.values()]),
            [s["mount"].rod_frame for s in heavy.values()],
            np.stack([np.asarray(s["mount"].rod_point) for s in heavy.values()]),
            np.stack(R0s),
        )
        model = Model(frames, bodies, tree.gravity, cmap, tree.augmented_names + tuple(names))
    if payload is not None:
        j = model.body_names.index("payload")
        model = eqx.tree_at(lambda mm: mm.bodies[j].mass, model, jnp.asarray(payload.mass))
    return model


# every frame's pose at q0 as one compiled program (op by op, some fifteen compiles)
_transforms_at = eqx.filter_jit(world_transforms)


def _tube_rotation(where: _Where, spec: Mapping, skeleton: Model, q0) -> np.ndarray:
    """``R0`` of a cylinder's tube (`cylinder_loops.tube_rotation`): the pin axis given, or the
    axis of the one revolute joint between the cylinder's links, or (no revolute joint: a
    cylinder along a sliding joint) any normal to the cylinder."""
    mount, table = spec["mount"], spec["table"]
    T = _transforms_at(skeleton, jnp.asarray(q0, float))
    names = tuple(f.name for f in skeleton.frames)

    def pose(frame):
        if frame == WORLD:
            return np.eye(3), np.zeros(3)
        R, p = T[names.index(frame)]
        return np.asarray(R), np.asarray(p)

    Ra, pa = pose(mount.base_frame)
    Rb, pb = pose(mount.rod_frame)
    d = Ra.T @ (Rb @ np.asarray(mount.rod_point) + pb - (Ra @ np.asarray(mount.base_point) + pa))
    if not np.linalg.norm(d) > 1e-9:
        raise where.error(table, "rod", "the pins coincide at q = 0")
    axis = spec["pin_axis"]
    if axis is None:
        path = _joints_between(skeleton, mount.base_frame, mount.rod_frame)
        revolute = [k for k in path if skeleton.frames[k].joint == "revolute"]
        if len(revolute) > 1:
            raise where.error(
                table, "pin_axis", "required: the cylinder spans more than one revolute joint"
            )
        if revolute:
            f = skeleton.frames[revolute[0]]
            Rj, _ = pose(f.name)
            axis = Ra.T @ Rj @ np.asarray(f.axis)
        else:
            trial = np.eye(3)[np.argmin(np.abs(d))]
            axis = np.cross(d, trial)
    axis = axis / np.linalg.norm(axis)
    if abs(axis @ d) > 1e-6 * np.linalg.norm(d):
        raise where.error(
            table,
            "pin_axis",
            f"the pins must lie in a plane normal to the pin axis {axis.round(6).tolist()} "
            f"(base link frame), but AB has {axis @ d:.3g} m along it at q = 0; give the "
            "cylinder no tube or piston body (massless) or mount it in that plane",
        )
    return tube_rotation(axis)


def _joints_between(model: Model, a: str, b: str) -> list[int]:
    """Indices of the frames on the tree path between frames a and b (their joints)."""
    names = [f.name for f in model.frames]

    def up(frame):
        out = []
        k = -1 if frame == WORLD else names.index(frame)
        while k >= 0:
            out.append(k)
            k = model.parent_index[k]
        return out

    ua, ub = up(a), up(b)
    common = set(ua) & set(ub)
    return [k for k in ua + ub if k not in common]


def _log_tables(where: _Where, doc: Mapping, plant) -> tuple[dict, dict, dict]:
    """``[log]``'s ``columns``, ``units`` and ``offsets`` (converted to SI), checked."""
    log = where.table(doc, "log", _TABLES["log"], required=False) or {}
    schema = schema_for(plant)
    known = set(schema.names)
    columns = log.get("columns", {})
    units = log.get("units", {})
    offsets = log.get("offsets", {})
    for key, table in (("columns", columns), ("units", units), ("offsets", offsets)):
        if not isinstance(table, Mapping):
            raise where.error("log", key, "expected a table { signal = value }")
        for k, v in table.items():
            if k not in known:
                raise where.error(
                    "log",
                    key,
                    f"{k!r} is not a signal of this machine; signals are {sorted(known)}",
                )
            if key == "offsets":
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                    unit = units.get(k, KINDS.get(schema.kinds[k], "SI"))
                    raise where.error("log", key, f"{k!r}: expected a finite number ({unit}), "
                                      f"the sensor's reading at zero, got {v!r}")  # fmt: skip
                continue
            if not isinstance(v, str) or not v:
                raise where.error("log", key, f"{k!r}: expected a non-empty string, got {v!r}")
    for k, u in units.items():
        kind = schema.kinds[k]
        dim = "torque" if kind == "motor_torque" else kind
        if u not in UNITS or UNITS[u][0] != dim:
            ok = sorted(n for n, (kk, _) in UNITS.items() if kk == dim)
            raise where.error(
                "log",
                "units",
                f"{k!r}: unit {u!r} is not a unit of {KINDS.get(kind, kind)}; expected one of {ok}",
            )
    raw = list(columns.values())
    dup = sorted({c for c in raw if raw.count(c) > 1})
    if dup:
        raise where.error("log", "columns", f"log columns {dup} are named for two signals")
    si = {k: float(v) * (UNITS[units[k]][1] if k in units else 1.0) for k, v in offsets.items()}
    return dict(columns), dict(units), si


def _check_supply(machine: Machine, log, source: str) -> None:
    """Refuse a logged supply (``p_s``) or return (``p_r``) pressure that is NaN, not positive
    (a return pressure may be 0), or a supply not above the return pressure (the logged one,
    or the valves' own), naming the log, the signal and the first sample."""
    logged = machine.plant.logged
    if not logged:
        return
    valve = machine.plant.actuators[0].valve
    p = {n: np.asarray(log[n]) if n in logged else np.full(log.t.shape, float(getattr(valve, n)))
         for n in ("p_s", "p_r")}  # fmt: skip
    col = {n: machine.columns.get(n, n) for n in logged}
    for name, bad, what in (
        ("p_s", ~(np.isfinite(p["p_s"]) & (p["p_s"] > 0)), "a finite pressure > 0 Pa"),
        ("p_r", ~(np.isfinite(p["p_r"]) & (p["p_r"] >= 0)), "a finite pressure >= 0 Pa"),
        (
            "p_s" if "p_s" in logged else "p_r",
            ~(p["p_s"] > p["p_r"]),
            "a supply above the return pressure",
        ),
    ):
        if name in logged and bad.any():
            k = int(np.argmax(bad))
            raise ValueError(
                f"log {source}: column {col[name]!r} (the logged "
                f"{'supply' if name == 'p_s' else 'return'} pressure {name}, machine file "
                f"{machine.path.name} [hydraulics]): expected {what}, got {float(p[name][k])!r} Pa at "
                f"t = {float(log.t[k]):g} s (sample {k})"
            )


def check_reach(machine: Machine, q: np.ndarray, *, source: str = "log", t=None) -> None:
    """Refuse angles at which a cylinder cannot reach its mount points: a piston position
    ``x(q)`` outside ``[0, stroke]`` by more than 1 % of the stroke (the end stops give a few
    mm; more means the geometry, the log's coordinates or their units are wrong).

    ``q``: (N, n) samples of the machine's coordinates; ``t`` their times for the message."""
    import jax

    plant = machine.plant
    q = np.asarray(q, float)
    x = np.asarray(
        jax.jit(jax.vmap(lambda qq: plant.piston_kinematics(qq, jnp.zeros_like(qq))[0]))(q)
    )
    for i, a in enumerate(plant.actuators):
        stroke = float(a.cylinder.stroke)
        bad = (x[:, i] < -0.01 * stroke) | (x[:, i] > 1.01 * stroke)
        if bad.any():
            k = int(np.argmax(bad))
            when = f"t = {t[k]:g} s" if t is not None else f"sample {k}"
            raise MachineFileError(
                f"machine file {machine.path}: [cylinders.{a.name}]: the cylinder cannot reach its "
                f"mount points at the {source}'s angles: at {when} (q = {q[k].round(4).tolist()}) "
                f"its piston position would be {x[k, i]:.4g} m, outside its stroke [0, {stroke:g}] m; "
                f"{int(bad.sum())} of {len(bad)} samples are out of reach. Check the mount points, "
                "l_min and stroke, and the log's coordinates (angles in rad, zero as in the URDF)"
            )
