"""A plant's physical parameters by name (selectors), the names that identification fits and
parameter files carry: ``valve.<actuator>.<field>``, ``cylinder.<actuator>.<field>``,
``friction.<actuator>.<field>``, ``sensor.<actuator>.<p_a|p_b>``,
``encoder.<coordinate>.offset`` and ``body.<body>.<field>`` (`HydraulicParameters`). Every
selected value stays a leaf of the plant, so what reads or sets it differentiates through it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from jaxmb.actuators.plant import HydraulicPlant

__all__ = [
    "COM_AXES",
    "COM_STEP",
    "ENCODER_STEP",
    "INERTIA_AXES",
    "SENSOR_STEP",
    "HydraulicParameters",
    "additive_step",
    "is_additive",
    "is_entry",
    "parameter_getter",
    "with_values",
]

_PARTS = ("valve", "cylinder", "friction", "sensor", "encoder", "body")
# the selector fields of a body's centre and inertia diagonal -> their index in the leaf
COM_AXES = {"com_x": 0, "com_y": 1, "com_z": 2}
INERTIA_AXES = {"I_xx": 0, "I_yy": 1, "I_zz": 2}
_BODY_FIELDS = ("mass", *COM_AXES, *INERTIA_AXES)
# a centre of mass moves by COM_STEP * theta (m): steps of O(1) in theta, as for the log leaves
COM_STEP = 0.1
# a pressure transducer's offset moves by SENSOR_STEP * theta (Pa): 1 bar, about the most a
# transducer's zero drifts
SENSOR_STEP = 1e5
# an encoder's offset moves by ENCODER_STEP * theta (rad, or m on a sliding coordinate):
# 0.57 deg, about the most an encoder's zero is off after a sensor is remounted; a fit moves
# theta by at most `output_error.fit`'s bound (1.5), so a smaller step would keep an offset
# of a few tenths of a degree out of a trial fit's reach
ENCODER_STEP = 1e-2


def is_entry(name: str) -> bool:
    """Whether selector ``name`` is one entry of an array leaf (a body's centre coordinate or
    inertia diagonal), which `plant_with` sets together with the leaf's other entries."""
    part, _, field = name.split(".")
    return part == "body" and (field in COM_AXES or field in INERTIA_AXES)


def is_additive(name: str) -> bool:
    """Whether selector ``name`` is additive (a centre-of-mass coordinate, a transducer's or
    an encoder's offset: either sign), not log-scaled."""
    part, _, field = name.split(".")
    return part in ("sensor", "encoder") or (part == "body" and field in COM_AXES)


def additive_step(name: str) -> float:
    """The change of an additive selector's value per unit of theta (`COM_STEP` m for a
    centre coordinate, `SENSOR_STEP` Pa for a transducer's offset, `ENCODER_STEP` for an
    encoder's)."""
    if not is_additive(name):
        raise ValueError(f"additive_step: {name!r} is log-scaled, not additive")
    return {"sensor": SENSOR_STEP, "encoder": ENCODER_STEP}.get(name.split(".")[0], COM_STEP)


class HydraulicParameters(eqx.Module):
    """Which plant leaves are identified, by selector name:

    - ``"valve.<actuator>.<field>"``: a `jaxmb.actuators.hydraulics.Valve` leaf (``c_pa``, ``c_an``,
      ``c_pb``, ``c_bn``, ``tau``, ...);
    - ``"cylinder.<actuator>.<field>"``: a `Cylinder` leaf (``beta``, ``c_int``, ``c_ext``, ...);
    - ``"friction.<actuator>.<field>"``: the actuator's friction law (Stribeck ``F_c``, ``F_s``,
      ``v_s``, ``sigma``; LuGre ``sigma0``, ``sigma1``, ``sigma2``, ``F_c``, ``F_s``, ``v_s``);
    - ``"sensor.<actuator>.p_a"`` (``p_b``): the offset of a chamber's pressure transducer
      (`jaxmb.actuators.hydraulics.PressureTransducers`), additive (`SENSOR_STEP`);
    - ``"encoder.<coordinate>.offset"``: the offset of a coordinate's position sensor
      (`jaxmb.actuators.plant.HydraulicPlant`'s ``encoders``), additive (`ENCODER_STEP`);
    - ``"body.<body>.mass"``: a body's mass (e.g. an unknown payload);
    - ``"body.<body>.com_x"`` (``_y``, ``_z``): a coordinate of its centre of mass in its
      frame, additive (`COM_STEP`): a centre may sit at 0 or below it;
    - ``"body.<body>.I_xx"`` (``I_yy``, ``I_zz``): a diagonal entry of its inertia about its
      centre.

    Each positive value is ``reference * exp(theta)``: ``reference`` defaults to the value in
    the (nominal) plant the functions are given; a leaf whose nominal is 0 (leakage) needs an
    entry in ``reference`` (then theta starts at 0, i.e. at that reference). An additive
    selector's value is ``nominal + additive_step(name) * theta``."""

    names: tuple[str, ...] = eqx.field(static=True)
    reference: tuple[tuple[str, float], ...] = eqx.field(static=True)

    def __init__(self, names: Sequence[str], reference: Mapping[str, float] | None = None):
        names = tuple(names)
        if not names:
            raise ValueError("HydraulicParameters: names must hold at least one selector")
        if len(set(names)) != len(names):
            raise ValueError(f"HydraulicParameters: duplicate names in {names}")
        for n in names:
            parts = n.split(".")
            if len(parts) != 3 or parts[0] not in _PARTS:
                raise ValueError(
                    f"HydraulicParameters: selector {n!r} must read '<part>.<name>.<field>' "
                    f"with part one of {_PARTS}"
                )
            if parts[0] == "encoder" and parts[2] != "offset":
                raise ValueError(f"HydraulicParameters: {n!r}: an encoder's field is 'offset'")
            if parts[0] == "body" and parts[2] not in _BODY_FIELDS:
                raise ValueError(
                    f"HydraulicParameters: {n!r}: a body's field is one of {_BODY_FIELDS}"
                )
        reference = dict(reference or {})
        unknown = sorted(set(reference) - set(names))
        if unknown:
            raise ValueError(f"HydraulicParameters: reference for unknown names {unknown}")
        for k, v in reference.items():
            if is_additive(k):
                raise ValueError(f"HydraulicParameters: {k!r} is additive: it takes no reference")
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"HydraulicParameters: reference[{k!r}] must be > 0, got {v}")
        self.names = names
        self.reference = tuple((k, float(v)) for k, v in reference.items())

    def __len__(self) -> int:
        return len(self.names)


def parameter_getter(plant: HydraulicPlant, name: str):
    """A function ``plant -> value`` for selector ``name`` (checked against ``plant``): a leaf,
    or for a body's centre coordinate or inertia diagonal an entry of one (read-only: not a
    `equinox.tree_at` target; `plant_with` sets entries)."""
    part, who, field = name.split(".")
    if part == "body":
        if who not in plant.model.body_names:
            raise ValueError(
                f"parameter {name!r}: no body {who!r}; bodies are {plant.model.body_names}"
            )
        j = plant.model.body_names.index(who)
        if field in COM_AXES:
            k = COM_AXES[field]
            return lambda p: p.model.bodies[j].com[k]
        if field in INERTIA_AXES:
            k = INERTIA_AXES[field]
            return lambda p: p.model.bodies[j].inertia[k, k]
        return lambda p: p.model.bodies[j].mass
    if part == "encoder":
        if who not in plant.coordinate_names or field != "offset":
            raise ValueError(
                f"parameter {name!r}: expected 'encoder.<coordinate>.offset' with a coordinate "
                f"of {plant.coordinate_names}"
            )
        k = plant.coordinate_names.index(who)
        return lambda p: p.encoders[k]
    if who not in plant.actuator_names:
        raise ValueError(
            f"parameter {name!r}: no actuator {who!r}; actuators are {plant.actuator_names}"
        )
    i = plant.actuator_names.index(who)
    owner = getattr(plant.actuators[i], part)
    if owner is None or not hasattr(owner, field) or not eqx.is_array(getattr(owner, field)):
        kind = type(owner).__name__
        raise ValueError(f"parameter {name!r}: {kind} of actuator {who!r} has no leaf {field!r}")
    return lambda p: getattr(getattr(p.actuators[i], part), field)


def with_values(plant: HydraulicPlant, values: Mapping[str, float]) -> HydraulicPlant:
    """``plant`` with each selector of ``values`` (a leaf: a valve's, cylinder's or friction
    law's parameter, a body's mass) set to its value, strongly typed (`strong_types`)."""
    getters = [parameter_getter(plant, n) for n in values]
    return eqx.tree_at(
        lambda p: [g(p) for g in getters], plant,
        [jnp.asarray(float(v), dtype=float) for v in values.values()],
    )  # fmt: skip
