"""URDF import (open kinematic trees) through the maintained parser `yourdfpy`.

Each link becomes a kinematic frame named after the link; each joint's ``<origin>`` is the
frame's fixed placement and its ``<axis>`` (in the joint frame) the joint axis, so a URDF joint
is exactly a `jaxmb.Frame`. Revolute and continuous joints are revolute, prismatic joints
prismatic, fixed joints fixed; the minimal coordinates are the non-fixed joints' names in
depth-first order (parents first). A link's ``<inertial>`` becomes a body on that frame (its
name is the link's; its COM frame is ``<link>_com``), rotated inertial frames included
(``I = R I' R^T``); links without one are massless frames. Gravity is ``[0, 0, -9.81]``.
"""

import io
import os
import xml.etree.ElementTree as ET

import numpy as np

from ..model import Body, Frame, Model

__all__ = ["load_urdf"]

_SUPPORTED = {
    "revolute": "revolute",
    "continuous": "revolute",
    "prismatic": "prismatic",
    "fixed": "fixed",
}


def _source(path_or_xml) -> tuple[str, bytes]:
    """(a label for messages, the document's bytes)."""
    if isinstance(path_or_xml, os.PathLike) or (
        isinstance(path_or_xml, str) and not path_or_xml.lstrip().startswith("<")
    ):
        path = os.fspath(path_or_xml)
        if not os.path.isfile(path):
            raise ValueError(f"URDF {path!r}: no such file")
        with open(path, "rb") as fh:
            return path, fh.read()
    if isinstance(path_or_xml, bytes):
        return "<URDF bytes>", path_or_xml
    return "<URDF string>", str(path_or_xml).encode()


def load_urdf(path_or_xml) -> Model:
    """A `Model` from a URDF file path or an XML string.

    Raises:
        ValueError: for malformed XML, unsupported joint types (floating, planar), a link with
            two parent joints (a loop), missing links, or non-physical inertials; the message
            names the URDF element."""
    import yourdfpy  # imported here: it pulls in trimesh, which only URDF users need

    label, data = _source(path_or_xml)
    try:
        root = ET.fromstring(data)
    except ET.ParseError as err:
        raise ValueError(f"URDF {label}: malformed XML ({err})") from None
    if root.tag != "robot":
        raise ValueError(f"URDF {label}: the root element must be <robot>, got <{root.tag}>")
    for j in root.findall("joint"):
        name, jtype = j.get("name"), j.get("type")
        if jtype not in _SUPPORTED:
            raise ValueError(
                f"URDF {label}: joint {name!r} has unsupported type {jtype!r}; "
                f"supported are {sorted(_SUPPORTED)}"
            )
        for tag in ("parent", "child"):
            el = j.find(tag)
            if el is None or not el.get("link"):
                raise ValueError(f"URDF {label}: joint {name!r} has no <{tag} link=...>")
    try:
        robot = yourdfpy.URDF.load(
            io.BytesIO(data), build_scene_graph=False, load_meshes=False
        ).robot
    except Exception as err:  # the parser's own exceptions are not part of our API
        raise ValueError(f"URDF {label}: could not be parsed ({err})") from None

    links = {link.name: link for link in robot.links}
    children: dict[str, list] = {}
    parent_of: dict[str, str] = {}
    for j in robot.joints:
        for end in (j.parent, j.child):
            if end not in links:
                raise ValueError(f"URDF {label}: joint {j.name!r} names unknown link {end!r}")
        if j.child in parent_of:
            raise ValueError(
                f"URDF {label}: link {j.child!r} is the child of joints {parent_of[j.child]!r} "
                f"and {j.name!r}: closed loops are not supported by load_urdf"
            )
        parent_of[j.child] = j.name
        children.setdefault(j.parent, []).append(j)
    roots = [name for name in links if name not in parent_of]
    if len(roots) != 1:
        raise ValueError(f"URDF {label}: expected exactly one root link, found {roots}")
    root_link = roots[0]

    frames, bodies, coords = [], [], []

    def add_body(link, frame_name):
        inertial = link.inertial
        if inertial is None or inertial.mass is None:
            return
        origin = np.eye(4) if inertial.origin is None else np.asarray(inertial.origin)
        R, c = origin[:3, :3], origin[:3, 3]
        I = np.zeros((3, 3)) if inertial.inertia is None else np.asarray(inertial.inertia)
        try:
            bodies.append(
                Body(link.name, frame_name, inertial.mass, c, R @ I @ R.T, f"{link.name}_com")
            )
        except ValueError as err:
            raise ValueError(f"URDF {label}: link {link.name!r} <inertial>: {err}") from None

    # the root link is the inertial frame S: a body on it cannot move and is dropped
    stack = list(reversed(children.get(root_link, [])))
    visited = {root_link}
    while stack:  # depth-first, parents first, children in document order
        j = stack.pop()
        if j.child in visited:
            raise ValueError(f"URDF {label}: joint {j.name!r} closes a loop at link {j.child!r}")
        visited.add(j.child)
        parent_frame = "S" if j.parent == root_link else j.parent
        T = np.eye(4) if j.origin is None else np.asarray(j.origin)
        kind = _SUPPORTED[j.type]
        axis = None if kind == "fixed" else (np.array([1.0, 0, 0]) if j.axis is None else j.axis)
        try:
            frames.append(
                Frame(
                    j.child,
                    parent_frame,
                    rotation=T[:3, :3],
                    translation=T[:3, 3],
                    joint=kind,
                    axis=axis,
                    coordinate=None if kind == "fixed" else j.name,
                )
            )
        except ValueError as err:
            raise ValueError(f"URDF {label}: joint {j.name!r}: {err}") from None
        if kind != "fixed":
            coords.append(j.name)
        add_body(links[j.child], j.child)
        stack.extend(reversed(children.get(j.child, [])))
    return Model(frames, bodies, gravity=[0.0, 0.0, -9.81], augmented_names=tuple(coords))
