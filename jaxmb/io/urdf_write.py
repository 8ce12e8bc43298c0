"""URDF export: a `Model` written as a URDF, and identified parameters written into a URDF.

Two functions:

- `model_urdf` writes a model built in code (the KR300, a user's `Model`) as a new URDF: each
  frame a link, each frame's placement and joint a URDF joint (a `jaxmb.Frame` is exactly a
  URDF joint: the fixed ``<origin>``, then the motion about ``<axis>``), each frame's bodies
  one ``<inertial>``.
- `with_parameters` writes a model's inertias and its identified joint terms into a copy of a
  URDF that describes the same tree, keeping everything else (visuals, collisions, limits,
  transmissions, comments). A body of `load_urdf` is the composite of the links welded to a
  moving joint's child link (Pinocchio's lumping), so its inertia goes to that link and the
  welded links' own ``<inertial>`` are removed: loaded again, by jaxmb or Pinocchio, the file
  gives the same bodies. A model built in code goes through both: `model_urdf` of its
  nominal model, then `with_parameters` of the identified one.

Joint terms go where URDF readers look for them: viscous friction is ``<dynamics damping>``
and Coulomb friction ``<dynamics friction>`` (urdfdom, Pinocchio's ``model.damping`` and
``model.friction``); the armature (reflected rotor inertia, ``G^2 J_m``) is the rotor inertia
and gear ratio of a ``<transmission>`` actuator, Drake's ``drake:rotor_inertia`` and
``drake:gear_ratio`` (reflected inertia ``G^2 J_m``, Drake's `JointActuator`), with ROS's
``mechanicalReduction``. Terms URDF has no place for (Stribeck, a torque-sensor offset) and
forces outside the rigid-body model (a counterbalance spring) are written as XML comments that
name their values, so that nothing identified is silently lost.

Numbers are written with Python's shortest round-trip repr: reading the file back gives the
same float64 values (rotations to the rounding of their roll-pitch-yaw angles).
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from collections.abc import Mapping

import numpy as np

from jaxmb.io.urdf_xml import UrdfError, read_document
from jaxmb.multibody.model import WORLD, Model

__all__ = ["DRAKE_NS", "model_urdf", "with_parameters", "rpy_from_rotation"]

DRAKE_NS = "http://drake.mit.edu"
ET.register_namespace("drake", DRAKE_NS)


def _num(x) -> str:
    return repr(float(x) + 0.0)  # no "-0.0"


def _vec(v) -> str:
    return " ".join(_num(x) for x in np.asarray(v, dtype=float).ravel())


def rpy_from_rotation(R) -> np.ndarray:
    """URDF's roll-pitch-yaw of a rotation matrix: ``R = Rz(yaw) Ry(pitch) Rx(roll)`` (fixed
    axes x, y, z). At pitch +-90 deg (gimbal lock) the yaw is set to 0 and the roll carries the
    rest."""
    R = np.asarray(R, dtype=float)
    cp = np.hypot(R[0, 0], R[1, 0])
    pitch = np.arctan2(-R[2, 0], cp)
    if cp < 1e-12:  # R = Ry(+-pi/2) Rx(roll): R[1,1] = cos roll, R[1,2] = -sin roll
        return np.array([np.arctan2(-R[1, 2], R[1, 1]), pitch, 0.0])
    return np.array([np.arctan2(R[2, 1], R[2, 2]), pitch, np.arctan2(R[1, 0], R[0, 0])])


def _origin(parent: ET.Element, R, p) -> None:
    ET.SubElement(parent, "origin", xyz=_vec(p), rpy=_vec(rpy_from_rotation(R)))


def _inertial_element(mass, com, inertia) -> ET.Element:
    """``<inertial>`` of a body: COM ``com`` in the link frame, ``inertia`` about the COM in the
    link's axes (rpy 0)."""
    el = ET.Element("inertial")
    ET.SubElement(el, "origin", xyz=_vec(com), rpy="0.0 0.0 0.0")
    ET.SubElement(el, "mass", value=_num(mass))
    I = np.asarray(inertia, dtype=float)
    ET.SubElement(el, "inertia", ixx=_num(I[0, 0]), ixy=_num(I[0, 1]), ixz=_num(I[0, 2]),
                  iyy=_num(I[1, 1]), iyz=_num(I[1, 2]), izz=_num(I[2, 2]))  # fmt: skip
    return el


def _composite(bodies) -> tuple[float, np.ndarray, np.ndarray]:
    """Mass, COM and inertia about the COM of bodies on one frame (parallel axes)."""
    ms = [float(b.mass) for b in bodies]
    m = sum(ms)
    cs = [np.asarray(b.com, dtype=float) for b in bodies]
    c = sum(mk * ck for mk, ck in zip(ms, cs, strict=True)) / m if m > 0 else cs[0]
    I = np.zeros((3, 3))
    for b, mk, ck in zip(bodies, ms, cs, strict=True):
        d = ck - c
        I += np.asarray(b.inertia, dtype=float) + mk * (d @ d * np.eye(3) - np.outer(d, d))
    return m, c, 0.5 * (I + I.T)


def _tree_only(model: Model, what: str) -> None:
    cmap = model.coordinate_map
    if cmap is not None and type(cmap).__name__ != "MimicMap":
        raise ValueError(
            f"{what}: the model has a coordinate map ({type(cmap).__name__}: closed kinematic "
            "loops or coupled joints), which a URDF tree cannot describe"
        )


def model_urdf(
    model: Model,
    *,
    name: str = "robot",
    limits: Mapping[str, tuple[float, float]] | None = None,
) -> str:
    """``model`` (an open tree) as URDF text: link ``world`` for the world frame ``S``, a link
    per frame, a joint per frame named after its coordinate (``<frame>_joint`` when fixed), the
    bodies of each frame as its link's ``<inertial>``.

    ``limits`` ``{coordinate: (lower, upper)}`` makes a revolute joint ``revolute`` with that
    ``<limit>``; without one it is ``continuous``. A prismatic joint needs its limits. Effort and
    velocity limits are not part of a `Model` and are written as 0, the URDF convention for
    "not given" that urdfdom accepts. Raises for a model with closed loops or coupled
    coordinates (a coordinate map other than URDF mimic joints, which it does not write)."""
    _tree_only(model, "model_urdf")
    if model.coordinate_map is not None:
        raise ValueError("model_urdf: mimic joints are not written; export from the source URDF")
    limits = dict(limits or {})
    unknown = sorted(set(limits) - set(model.coordinate_names))
    if unknown:
        raise ValueError(f"model_urdf: limits for unknown coordinates {unknown}")
    names = {f.name for f in model.frames}
    root_name = "world" if "world" not in names else "world_link"
    robot = ET.Element("robot", name=name)
    robot.append(ET.Comment(" written by jaxmb (jaxmb.io.urdf_write.model_urdf) "))
    ET.SubElement(robot, "link", name=root_name)
    on_frame: dict[str, list] = {}
    for b in model.bodies:
        on_frame.setdefault(b.frame, []).append(b)
    for f in model.frames:
        link = ET.SubElement(robot, "link", name=f.name)
        if f.name in on_frame:
            link.append(_inertial_element(*_composite(on_frame[f.name])))
    for f in model.frames:
        kind = f.joint
        if kind == "revolute" and f.coordinate not in limits:
            kind = "continuous"
        jname = f.coordinate if f.coordinate is not None else f"{f.name}_joint"
        joint = ET.SubElement(robot, "joint", name=jname, type=kind)
        _origin(joint, f.rotation, f.translation)
        ET.SubElement(joint, "parent", link=root_name if f.parent == WORLD else f.parent)
        ET.SubElement(joint, "child", link=f.name)
        if f.joint != "fixed":
            ET.SubElement(joint, "axis", xyz=_vec(f.axis))
        if f.coordinate in limits:
            lo, hi = limits[f.coordinate]
            ET.SubElement(joint, "limit", lower=_num(lo), upper=_num(hi), effort="0",
                          velocity="0")  # fmt: skip
        elif f.joint == "prismatic":
            raise ValueError(f"model_urdf: prismatic joint {f.coordinate!r} needs limits")
    return _text(robot)


def _text(root: ET.Element) -> str:
    for el in root.iter():  # the source's layout, where elements were removed, is re-indented
        if el.text is not None and not el.text.strip():
            el.text = None
        if el.tail is not None and not el.tail.strip():
            el.tail = None
    ET.indent(root, space="  ")
    buf = io.StringIO()
    ET.ElementTree(root).write(buf, encoding="unicode", xml_declaration=False)
    return '<?xml version="1.0"?>\n' + buf.getvalue() + "\n"


def _welded_to(doc) -> dict[str, str | None]:
    """Each link's moving frame: itself for a moving joint's child link, the nearest such link
    above it through fixed joints, None for links welded to the root."""
    parent = {j.child: j for j in doc.joints}
    out: dict[str, str | None] = {}
    for link in doc.links:
        cur = link
        while cur in parent and parent[cur].type == "fixed":
            cur = parent[cur].parent
        out[link] = cur if cur in parent else None
    return out


def with_parameters(
    urdf: str | bytes,
    model: Model,
    joint: Mapping[str, Mapping[str, float]] | None = None,
    *,
    gear_ratio: Mapping[str, float] | None = None,
    notes: Mapping[str, str] | None = None,
) -> str:
    """A copy of ``urdf`` carrying ``model``'s bodies and the joint terms ``joint``
    ``{coordinate: {term: value}}`` (`jaxmb.identification.rigid`'s terms: ``viscous``,
    ``coulomb``, ``armature``, ``stribeck``, ``offset``); see the module docstring.

    ``model`` must be the URDF's tree: each body is written to the link its frame names (as
    `load_urdf` builds them, a moving joint's child link; as `model_urdf` writes them, the
    frame's own link), and every other link welded to the same moving joint loses its
    ``<inertial>``, which the body's composite replaces. ``gear_ratio`` ``{coordinate: G}``
    splits an armature into rotor inertia ``armature / G^2`` and gear ratio ``G`` (default the
    joint's transmission's own ratio, else 1). A body on a link welded to the world does not
    move and is left as the URDF has it.
    ``notes`` ``{title: text}`` become comments at the top of the robot (what the file does
    not hold, where it came from).
    Raises naming the body or coordinate the URDF lacks."""
    _tree_only(model, "with_parameters")
    data = urdf.encode() if isinstance(urdf, str) else urdf
    doc = read_document(data)
    root = ET.fromstring(data, parser=ET.XMLParser(target=ET.TreeBuilder(insert_comments=True)))
    links = {el.get("name"): el for el in root.findall("link")}
    joints = {el.get("name"): el for el in root.findall("joint")}
    welded = _welded_to(doc)
    on_link: dict[str, list] = {}
    for b in model.bodies:
        if b.frame not in links:
            raise UrdfError(f"with_parameters: body {b.name!r} sits on frame {b.frame!r}, "
                            "which the URDF has no link of")  # fmt: skip
        on_link.setdefault(b.frame, []).append(b)
    carried = {welded[k] for k in on_link}
    for link, el in links.items():
        if welded[link] is None or welded[link] not in carried:
            continue  # welded to the world, or on a moving frame the model leaves massless
        old = el.find("inertial")
        at = list(el).index(old) if old is not None else 0
        if old is not None:
            el.remove(old)
        if link in on_link:  # each body on its own link; the others welded to it lose theirs
            el.insert(at, _inertial_element(*_composite(on_link[link])))
    for c, terms in (joint or {}).items():
        if c not in joints:
            raise UrdfError(f"with_parameters: the URDF has no joint {c!r}")
        _joint_terms(root, joints[c], c, terms, (gear_ratio or {}).get(c))
    for title, text in reversed(list((notes or {}).items())):
        root.insert(0, ET.Comment(f" {title}: {text} ".replace("--", "- -")))
    return _text(root)


def _joint_terms(root: ET.Element, el: ET.Element, c: str, terms: Mapping, G) -> None:
    dyn_keys = {"viscous": "damping", "coulomb": "friction"}
    if any(k in terms for k in dyn_keys):
        dyn = el.find("dynamics")
        if dyn is None:
            dyn = ET.SubElement(el, "dynamics")
        for term, key in dyn_keys.items():
            if term in terms:
                dyn.set(key, _num(terms[term]))
    rest = {k: v for k, v in terms.items() if k not in dyn_keys and k != "armature"}
    if rest:
        el.append(ET.Comment(
            " jaxmb identify, terms URDF has no place for: "
            + ", ".join(f"{k} = {_num(v)}" for k, v in rest.items()) + " "
        ))  # fmt: skip
    if "armature" in terms:
        _armature(root, c, float(terms["armature"]), G)


def _armature(root: ET.Element, c: str, armature: float, G: float | None) -> None:
    """The joint's transmission (an existing one naming it, else a new SimpleTransmission) with
    the rotor inertia ``armature / G^2`` and gear ratio ``G``: the given one, else the
    transmission's own (``drake:gear_ratio``, then ``mechanicalReduction``), else 1. Its
    ``mechanicalReduction`` is set to the same ``G``."""
    trans = next(
        (t for t in root.findall("transmission")
         if any(j.get("name") == c for j in t.findall("joint"))),
        None,
    )  # fmt: skip
    if trans is None:
        trans = ET.SubElement(root, "transmission", name=f"{c}_transmission",
                              type="SimpleTransmission")  # fmt: skip
        ET.SubElement(trans, "type").text = "transmission_interface/SimpleTransmission"
        j = ET.SubElement(trans, "joint", name=c)
        ET.SubElement(j, "hardwareInterface").text = "hardware_interface/EffortJointInterface"
    act = trans.find("actuator")
    if act is None:
        act = ET.SubElement(trans, "actuator", name=f"{c}_motor")
    # the reduction sits in the actuator, or (the older format) in the transmission itself
    red = act.find("mechanicalReduction")
    red = red if red is not None else trans.find("mechanicalReduction")
    if G is None:
        old = act.find(f"{{{DRAKE_NS}}}gear_ratio")
        text = old.get("value") if old is not None else red.text if red is not None else "1"
        try:
            G = float(text)
        except (TypeError, ValueError):
            G = float("nan")
        if not (np.isfinite(G) and G > 0):
            raise UrdfError(f"with_parameters: the transmission of joint {c!r} has gear ratio "
                            f"{text!r}; expected a number > 0 (or give the gear ratio)")  # fmt: skip
    G = float(G)
    for tag, value in (("rotor_inertia", armature / G**2), ("gear_ratio", G)):
        old = act.find(f"{{{DRAKE_NS}}}{tag}")
        if old is not None:
            act.remove(old)
        ET.SubElement(act, f"{{{DRAKE_NS}}}{tag}", value=_num(value))
    if red is None:
        red = ET.SubElement(act, "mechanicalReduction")
    red.text = _num(G)
