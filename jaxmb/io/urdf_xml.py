"""Strict reading of a URDF document into plain records: what `load_urdf` builds a model from.

The rules are urdfdom's (the C++ parser ROS and Pinocchio use), so that a file urdfdom rejects
is rejected here too, with an error that names the element; where urdfdom silently keeps a
partial or default value for something the dynamics depend on, this reader rejects instead:

- numbers: decimal literals only (``nan``, ``inf``, ``1m``, ``1,2`` are errors, as urdfdom's
  ``strToDouble``); vectors exactly 3 numbers separated by spaces (``Vector3::init``);
- ``<robot>``: a ``name``; ``version`` absent or 1.0; at least one link; unique link, joint and
  top-level material names;
- ``<joint>``: ``name``; ``type`` one of revolute, continuous, prismatic, fixed, floating,
  planar; ``<parent link>``/``<child link>`` naming existing links; a well-formed ``<origin>``
  and ``<axis>``; ``<limit>`` required on revolute and prismatic joints, and with ``effort``
  and ``velocity`` wherever it appears; ``<dynamics>`` with damping or friction;
  ``<safety_controller>`` with ``k_velocity``; ``<mimic>`` with ``joint``;
- ``<inertial>`` (stricter than urdfdom, which keeps a truncated link): ``<mass value>`` and
  an ``<inertia>`` with all six of ``ixx ixy ixz iyy iyz izz``;
Visual and collision elements do not enter the dynamics and are not read (urdfdom, too, never
rejects a model for them). The tree (one root link, as urdfdom's ``initRoot``; no link with two
parent joints, no cycles, every link reachable from the root) is checked by `load_urdf`.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import NamedTuple

import numpy as np

__all__ = ["UrdfError", "Inertial", "Joint", "Document", "read_document"]

JOINT_TYPES = ("revolute", "continuous", "prismatic", "fixed", "floating", "planar")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_INERTIA_KEYS = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")


class UrdfError(ValueError):
    """A URDF document that cannot be read; the message names the element."""


class Inertial(NamedTuple):
    """A link's ``<inertial>``: mass (kg), its origin in the link frame, inertia about the COM in
    the origin's axes (kg m^2)."""

    mass: float
    origin: np.ndarray  # (4, 4) homogeneous transform
    inertia: np.ndarray  # (3, 3)


class Joint(NamedTuple):
    name: str
    type: str
    parent: str
    child: str
    origin: np.ndarray  # (4, 4)
    axis: np.ndarray  # (3,), in the joint frame; (1, 0, 0) when absent, as urdfdom
    mimic: tuple[str, float, float] | None  # (joint, multiplier, offset)


class Document(NamedTuple):
    name: str
    links: tuple[str, ...]  # in document order
    inertials: dict[str, Inertial]  # links with an <inertial>
    joints: tuple[Joint, ...]  # in document order


def _number(text: str | None, where: str) -> float:
    # strToDouble: stream extraction skips leading blanks and must then reach the end
    if text is None or not _NUMBER.fullmatch(text.lstrip()):
        raise UrdfError(f"{where}: expected a decimal number, got {text!r}")
    value = float(text)
    if not np.isfinite(value):  # 1e400 overflows, as strToDouble refuses it
        raise UrdfError(f"{where}: {text!r} is not a finite number")
    return value


def _vector3(text: str | None, where: str) -> np.ndarray:
    parts = [] if text is None else [p for p in text.split(" ") if p]
    if len(parts) != 3:
        raise UrdfError(f"{where}: expected 3 numbers separated by spaces, got {text!r}")
    return np.array([_number(p, where) for p in parts])


def _rpy_matrix(rpy: np.ndarray) -> np.ndarray:
    """URDF's fixed-axis roll, pitch, yaw: ``R = Rz(yaw) Ry(pitch) Rx(roll)``."""
    (cr, cp, cy), (sr, sp, sy) = np.cos(rpy), np.sin(rpy)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def _origin(parent: ET.Element, where: str) -> np.ndarray:
    T = np.eye(4)
    el = parent.find("origin")
    if el is None:
        return T
    if el.get("xyz") is not None:
        T[:3, 3] = _vector3(el.get("xyz"), f"{where} <origin xyz>")
    if el.get("rpy") is not None:
        T[:3, :3] = _rpy_matrix(_vector3(el.get("rpy"), f"{where} <origin rpy>"))
    return T


def _optional_numbers(el: ET.Element, keys, where: str) -> dict[str, float]:
    return {k: _number(el.get(k), f"{where} {k}") for k in keys if el.get(k) is not None}


def _inertial(link: ET.Element, where: str) -> Inertial | None:
    el = link.find("inertial")
    if el is None:
        return None
    where = f"{where} <inertial>"
    mass = el.find("mass")
    if mass is None:
        raise UrdfError(f"{where}: has no <mass>")
    m = _number(mass.get("value"), f"{where} <mass value>")
    inertia = el.find("inertia")
    if inertia is None:
        raise UrdfError(f"{where}: has no <inertia>")
    missing = [k for k in _INERTIA_KEYS if inertia.get(k) is None]
    if missing:
        raise UrdfError(f"{where} <inertia>: missing attribute(s) {missing}; all six of "
                        f"{list(_INERTIA_KEYS)} are required")  # fmt: skip
    v = {k: _number(inertia.get(k), f"{where} <inertia {k}>") for k in _INERTIA_KEYS}
    I = np.array(
        [
            [v["ixx"], v["ixy"], v["ixz"]],
            [v["ixy"], v["iyy"], v["iyz"]],
            [v["ixz"], v["iyz"], v["izz"]],
        ]
    )
    return Inertial(m, _origin(el, where), I)


def _joint(el: ET.Element) -> Joint:
    name = el.get("name")
    if not name:
        raise UrdfError("<joint>: has no name attribute")
    where = f"joint {name!r}"
    jtype = el.get("type")
    if jtype not in JOINT_TYPES:
        raise UrdfError(f"{where}: type must be one of {list(JOINT_TYPES)}, got {jtype!r}")
    ends = []
    for tag in ("parent", "child"):
        end = el.find(tag)
        if end is None or not end.get("link"):
            raise UrdfError(f"{where}: has no <{tag} link=...>")
        ends.append(end.get("link"))
    origin = _origin(el, where)
    axis = np.array([1.0, 0.0, 0.0])
    ax = el.find("axis")
    if ax is not None and jtype not in ("fixed", "floating"):
        # urdfdom: <axis> without xyz is the zero vector (refused by load_urdf for moving joints)
        axis = _vector3(ax.get("xyz", "0 0 0"), f"{where} <axis xyz>")
    limit = el.find("limit")
    if limit is None and jtype in ("revolute", "prismatic"):
        raise UrdfError(f"{where}: a {jtype} joint needs a <limit> (effort, velocity)")
    if limit is not None:
        for key in ("effort", "velocity"):
            if limit.get(key) is None:
                raise UrdfError(f"{where} <limit>: has no {key} attribute")
        _optional_numbers(limit, ("lower", "upper", "effort", "velocity"), f"{where} <limit>")
    dyn = el.find("dynamics")
    if dyn is not None:
        if dyn.get("damping") is None and dyn.get("friction") is None:
            raise UrdfError(f"{where} <dynamics>: needs damping and/or friction")
        _optional_numbers(dyn, ("damping", "friction"), f"{where} <dynamics>")
    safety = el.find("safety_controller")
    if safety is not None:
        if safety.get("k_velocity") is None:
            raise UrdfError(f"{where} <safety_controller>: has no k_velocity attribute")
        keys = ("soft_lower_limit", "soft_upper_limit", "k_position", "k_velocity")
        _optional_numbers(safety, keys, f"{where} <safety_controller>")
    calibration = el.find("calibration")
    if calibration is not None:
        _optional_numbers(calibration, ("rising", "falling"), f"{where} <calibration>")
    mimic = None
    mi = el.find("mimic")
    if mi is not None:
        if not mi.get("joint"):
            raise UrdfError(f"{where} <mimic>: has no joint attribute")
        factors = _optional_numbers(mi, ("multiplier", "offset"), f"{where} <mimic>")
        mimic = (mi.get("joint"), factors.get("multiplier", 1.0), factors.get("offset", 0.0))
    return Joint(name, jtype, ends[0], ends[1], origin, axis, mimic)


def _unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise UrdfError(f"{what} {n!r} is defined twice; names must be unique")
        seen.add(n)


def read_document(data: bytes) -> Document:
    """The records of a URDF document (bytes), checked as the module docstring says."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as err:
        raise UrdfError(f"malformed XML ({err})") from None
    if root.tag != "robot":
        raise UrdfError(f"the root element must be <robot>, got <{root.tag}>")
    name = root.get("name")
    if name is None:
        raise UrdfError("<robot>: has no name attribute")
    version = root.get("version")
    if version is not None and not re.fullmatch(r"1\.0+", version):
        raise UrdfError(f"<robot version>: only URDF 1.0 is defined, got {version!r}")
    _unique([m.get("name", "") for m in root.findall("material")], "<material>")
    link_els = root.findall("link")
    if not link_els:
        raise UrdfError("<robot>: has no <link>")
    for el in link_els:
        if not el.get("name"):
            raise UrdfError("<link>: has no name attribute")
    links = [el.get("name") for el in link_els]
    _unique(links, "link")
    inertials = {}
    for el in link_els:
        inertial = _inertial(el, f"link {el.get('name')!r}")
        if inertial is not None:
            inertials[el.get("name")] = inertial
    joints = [_joint(el) for el in root.findall("joint")]
    _unique([j.name for j in joints], "joint")
    known = set(links)
    for j in joints:
        for end in (j.parent, j.child):
            if end not in known:
                raise UrdfError(f"joint {j.name!r} names unknown link {end!r}")
    return Document(name, tuple(links), inertials, tuple(joints))
