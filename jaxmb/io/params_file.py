"""Identified parameters as a file users keep (DESIGN.md "Files users keep"): one JSON file per
identified model, naming the model and the jaxmb version, read back by `jaxmb simulate --params`
and the control tools.

Layout (SI units throughout)::

    {"format": "jaxmb-params", "version": 1, "jaxmb": "0.1.0",
     "model": "kr300", "method": "consistent", "source": {"log": ..., ...},
     (a machine's "source" also holds "machine_files_sha256": the files it was identified on)
     "bodies": {"<body>": {"mass": kg, "com": [m x3], "inertia": [[kg m^2 x3] x3]}},
     "joints": {"<coordinate>": {"armature": ..., "viscous": ..., "coulomb": ..., ...}},
     "joint_model": {"coulomb_width": rad/s, "stribeck_velocity": rad/s},
     "hydraulics": {"<selector>": value},
     "forces": {"<known force>": scale},
     "uncertainty": {"<parameter>": {"value": ..., "std": ...}},
     "covariance": "covariance.json"}

``covariance`` names the file beside it with the parameters' joint covariance
(`jaxmb.io.covariance_file`), where the identification wrote one.

``inertia`` is about the COM in body-frame axes, as in `jaxmb.Body`.
"""

from __future__ import annotations

import json
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from jaxmb.actuators.parameters import HydraulicParameters, is_entry, with_values
from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.multibody.model import Model, replace_body
from jaxmb.version import __version__

__all__ = ["FORMAT", "json_safe", "write_params", "read_params", "apply_bodies", "apply_hydraulics"]

FORMAT = "jaxmb-params"
# the machine file and URDF an identification ran on (`jaxmb.io.machine.Machine.digest`)
DIGEST = "machine_files_sha256"
KEYS = ("format", "version", "jaxmb", "model", "method", "source", "bodies", "joints",
        "joint_model", "hydraulics", "forces", "payload", "uncertainty",
        "covariance")  # fmt: skip
"""The top-level keys `write_params` writes: `read_params` refuses any other (a misspelt
``"bodys"`` would otherwise be ignored)."""


def json_safe(x):
    """``x`` with non-finite floats as the strings ``"inf"``, ``"-inf"``, ``"nan"`` (strict
    JSON has no such numbers; an infinite standard deviation means "not identifiable")."""
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    if isinstance(x, float | np.floating) and not np.isfinite(x):
        return str(float(x))
    if isinstance(x, np.floating | np.integer | np.bool_):
        return x.item()
    return x


def _bodies(model: Model) -> dict:
    return {
        b.name: {
            "mass": float(b.mass),
            "com": np.asarray(b.com).tolist(),
            "inertia": np.asarray(b.inertia).tolist(),
        }
        for b in model.bodies
    }


def write_params(
    path,
    *,
    model_name: str,
    method: str,
    model: Model | None = None,
    joints: dict | None = None,
    joint_model: dict | None = None,
    hydraulics: dict | None = None,
    payload: dict | None = None,
    forces: dict | None = None,
    uncertainty: dict | None = None,
    source: dict | None = None,
    covariance: str | None = None,
) -> Path:
    """Write the parameter file; returns its path. ``covariance``: the name of the covariance
    file written beside it (`jaxmb.io.covariance_file`)."""
    doc = {
        "format": FORMAT,
        "version": 1,
        "jaxmb": __version__,
        "model": model_name,
        "method": method,
        "source": source or {},
        "bodies": _bodies(model) if model is not None else {},
        "joints": joints or {},
        "joint_model": joint_model or {},
        "hydraulics": hydraulics or {},
        "forces": forces or {},
        **({"payload": payload} if payload else {}),
        "uncertainty": uncertainty or {},
        **({"covariance": covariance} if covariance else {}),
    }
    path = Path(path)
    path.write_text(json.dumps(json_safe(doc), indent=1, allow_nan=False) + "\n")
    return path


def read_params(
    path,
    *,
    model_name: str | tuple[str, ...] | None = None,
    machine_digest: str | None = None,
) -> dict:
    """Read and check a parameter file. With ``model_name`` (a name, or the names one model
    goes by, as `jaxmb.io.machine.Machine.names`: the first is shown), refuse a file for
    another model; with ``machine_digest`` (`jaxmb.io.machine.Machine.digest`), refuse a file
    identified on other machine files (its ``source.machine_files_sha256``, where it has
    one: the same name, other cylinders, valves or bodies)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"--params: no such file {str(path)!r}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"--params: {path} is not JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"--params: {path} is not a jaxmb parameter file (format != {FORMAT!r})")
    if doc.get("version") != 1:
        raise ValueError(f"--params: {path}: unsupported version {doc.get('version')!r}")
    names = (model_name,) if isinstance(model_name, str) else model_name
    if names is not None and doc.get("model") not in names:
        raise ValueError(
            f"--params: {path} holds parameters of model {doc.get('model')!r}, not {names[0]!r}"
        )
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise ValueError(
            f"--params: {path}: unknown key(s) {unknown}; a parameter file has {sorted(KEYS)}"
        )
    source = doc.get("source", {})
    held = source.get(DIGEST) if isinstance(source, dict) else None
    if machine_digest is not None and held is not None and held != machine_digest:
        raise ValueError(
            f"--params: {path} was identified on other machine files than these (its "
            f"source.{DIGEST} {str(held)[:12]}..., these {machine_digest[:12]}...): the "
            "machine file or its URDF changed since; identify the machine again"
        )
    for key in ("bodies", "joints", "hydraulics"):
        if not isinstance(doc.get(key, {}), dict):
            raise ValueError(f"--params: {path}: field {key!r} must be a mapping")
    return doc


def apply_bodies(model: Model, doc: dict) -> Model:
    """``model`` with the bodies of a parameter file (validated by `jaxmb.Body`; unknown body
    names raise)."""
    for name, b in doc.get("bodies", {}).items():
        if name not in model.body_names:
            raise ValueError(
                f"--params: body {name!r} is not in the model; bodies are {list(model.body_names)}"
            )
        for key in ("mass", "com", "inertia"):
            if key not in b:
                raise ValueError(f"--params: body {name!r} lacks {key!r}")
        model = replace_body(
            model,
            name,
            mass=np.asarray(b["mass"], float),
            com=np.asarray(b["com"], float),
            inertia=np.asarray(b["inertia"], float),
        )
    return model


def apply_hydraulics(plant: HydraulicPlant, doc: dict) -> HydraulicPlant:
    """``plant`` with a parameter file's ``hydraulics`` entries, each a selector of
    `jaxmb.actuators.parameters.HydraulicParameters` (a body's mass, not its centre or inertia)
    and its value (SI: positive, a mass >= 0, a transducer's or encoder's offset of either
    sign), its
    identified ``bodies`` (`apply_bodies`) and its ``payload`` (mass, kg; centre, m) where
    the plant has a payload body."""
    if doc.get("bodies"):
        plant = eqx.tree_at(lambda p: p.model, plant, apply_bodies(plant.model, doc))
    pay = doc.get("payload")
    if pay and "payload" in plant.model.body_names:
        m, c = pay.get("mass"), pay.get("com")
        ok = isinstance(m, int | float) and np.isfinite(m) and m >= 0
        ok &= isinstance(c, list) and len(c) == 3 and all(isinstance(x, int | float) for x in c)
        if not ok:
            raise ValueError(
                f"--params: payload: expected mass >= 0 (kg) and com [x, y, z] (m), got {pay!r}"
            )
        j = plant.model.body_names.index("payload")
        plant = eqx.tree_at(
            lambda p: (p.model.bodies[j].mass, p.model.bodies[j].com),
            plant,
            (jnp.asarray(float(m)), jnp.asarray(c, dtype=float)),
        )
    values = doc.get("hydraulics", {})
    if not values:
        return plant
    for k, v in values.items():
        if len(k.split(".")) == 3 and is_entry(k):
            raise ValueError(
                f"--params: hydraulics[{k!r}]: a body's centre or inertia belongs in the file's "
                "'bodies' (or 'payload') entry; 'hydraulics' takes a body's mass only"
            )
        # a mass may be 0 (no payload), a transducer's or an encoder's offset either sign
        what = ("a finite number" if k.startswith(("sensor.", "encoder."))
                else "a number >= 0" if k.startswith("body.") else "a positive number")  # fmt: skip
        ok = isinstance(v, int | float) and np.isfinite(v)
        ok = ok and (what == "a finite number" or (v >= 0 if k.startswith("body.") else v > 0))
        if not ok:
            raise ValueError(f"--params: hydraulics[{k!r}]: expected {what}, got {v!r}")
    try:
        spec = HydraulicParameters(tuple(values))  # checks the selector names
        return with_values(plant, {k: values[k] for k in spec.names})  # the plant's leaves
    except ValueError as err:
        raise ValueError(f"--params: hydraulics: {err}") from None
