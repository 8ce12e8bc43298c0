"""URDF import: a `Model` from a robot description, built the way Pinocchio builds its own.

Each link becomes a kinematic frame named after the link; each joint's ``<origin>`` is the
frame's fixed placement and its ``<axis>`` (in the joint frame) the joint axis, so a URDF joint
is exactly a `jaxmb.Frame`. Revolute and continuous joints are revolute (one angle: Pinocchio
writes a continuous joint's configuration as ``(cos, sin)``, its velocity as the same single
rate), prismatic joints prismatic, fixed joints fixed; floating and planar joints are refused.
The coordinates are the moving joints' names, depth-first (parents first, children in document
order), Pinocchio's order.

Inertia, as Pinocchio's parser: a link's ``<inertial>`` is expressed in the frame of the
nearest moving joint above it (through any chain of fixed joints) and added to that joint's
body, so every body of the model has mass and sits on a moving frame; links welded to the root
move with the world and are dropped. A body is named after the moving joint's child link, its
COM frame ``<link>_com``. An explicit ``<mass value="0">`` (sensor and tool frames) adds
nothing.

Published inertias are often not physically realisable (a negative principal moment, or one
larger than the other two together, typical of CAD exports of small parts). They load as
published, like Pinocchio loads them, with a `UrdfWarning` that names the link and the violated
condition; ``strict=True`` makes that an error. The test is absolute, in SI units: a principal
moment may be negative, and a triangle inequality ``I_a + I_b >= I_c`` may fail, by at most
``inertia_tolerance`` kg m^2 (default 1e-10) before it counts, so round-off in a published
file (iCub's -1e-20 kg m^2) is not flagged.

Mimic joints (``<mimic joint multiplier offset>``) are coupled by a linear coordinate map
``qhat = multiplier * q[source] + offset`` (`MimicMap`), so the model's coordinates are the
independent joints only (Pinocchio's ``mimic=True``); ``mimic=False`` makes them independent
joints, Pinocchio's default.
"""

from __future__ import annotations

import os
import warnings

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxmb.io.urdf_xml import Document, UrdfError, read_document
from jaxmb.multibody.model import INERTIA_ATOL, Body, CoordinateMap, Frame, Model

__all__ = ["load_urdf", "MimicMap", "UrdfError", "UrdfWarning"]

_MOVING = {"revolute": "revolute", "continuous": "revolute", "prismatic": "prismatic"}


class UrdfWarning(UserWarning):
    """A URDF loads, but something in it is not physical (see `load_urdf`)."""


class MimicMap(CoordinateMap):
    r"""Mimic joints as a coordinate map: ``qhat_k = multiplier_k * q[source_k] + offset_k``.

    Independent joints have multiplier 1 and offset 0; ``multiplier`` and ``offset`` are
    differentiable leaves."""

    names: tuple[str, ...] = eqx.field(static=True)
    source: tuple[int, ...] = eqx.field(static=True)  # index into q for each qhat entry
    multiplier: Float[Array, " nhat"]
    offset: Float[Array, " nhat"]

    def __call__(self, q: Float[Array, " n"]) -> Float[Array, " nhat"]:
        return self.multiplier * q[jnp.asarray(self.source)] + self.offset


def _source(path_or_xml) -> tuple[str, bytes]:
    """(a label for messages, the document's bytes)."""
    if isinstance(path_or_xml, bytes):
        return "<URDF bytes>", path_or_xml
    if isinstance(path_or_xml, os.PathLike) or (
        isinstance(path_or_xml, str) and not path_or_xml.lstrip().startswith("<")
    ):
        path = os.fspath(path_or_xml)
        if not os.path.isfile(path):
            raise UrdfError(f"URDF {path!r}: no such file")
        with open(path, "rb") as fh:
            return repr(path), fh.read()
    if not isinstance(path_or_xml, str):
        raise UrdfError(
            f"load_urdf: expected a path or URDF text, got {type(path_or_xml).__name__}"
        )
    return "<URDF string>", path_or_xml.encode()


def _violations(I: np.ndarray, tol: float) -> list[str]:
    """The physical-realisability conditions an inertia about the COM violates (absolute
    tolerance ``tol``, kg m^2)."""
    lam = np.linalg.eigvalsh(I)
    out = []
    if lam[0] < -tol:
        out.append(f"positive semidefinite (smallest principal moment {lam[0]:.3g} kg m^2)")
    gap = lam[0] + lam[1] - lam[2]
    if gap < -tol:
        out.append(
            f"triangle inequality (principal moments {lam[0]:.3g} + {lam[1]:.3g} < "
            f"{lam[2]:.3g} kg m^2)"
        )
    return out


def _not_physical(msg: str, strict: bool) -> None:
    """Refuse (``strict``) or warn, the warning pointing at `load_urdf`'s caller."""
    if strict:
        raise UrdfError(msg + " (strict=True)")
    warnings.warn(msg + "; loaded as published", UrdfWarning, stacklevel=4)


def _check_tree(doc: Document) -> tuple[dict[str, list], str]:
    """Children of every link and the root link; refuses two parents, self-loops, more or
    fewer than one root, and unreachable links."""
    parent_joint: dict[str, str] = {}
    children: dict[str, list] = {}
    for j in doc.joints:
        if j.parent == j.child:
            raise UrdfError(f"joint {j.name!r}: its parent and child are the same link {j.child!r}")
        if j.child in parent_joint:
            raise UrdfError(
                f"link {j.child!r} is the child of joints {parent_joint[j.child]!r} and "
                f"{j.name!r}: closed loops are not supported by load_urdf"
            )
        parent_joint[j.child] = j.name
        children.setdefault(j.parent, []).append(j)
        if j.type not in (*_MOVING, "fixed"):
            raise UrdfError(
                f"joint {j.name!r} has unsupported type {j.type!r}; supported are "
                f"{sorted((*_MOVING, 'fixed'))}"
            )
    roots = [n for n in doc.links if n not in parent_joint]
    if len(roots) != 1:
        what = "no root link (every link is some joint's child)" if not roots else roots
        raise UrdfError(f"the links must form one tree with exactly one root link; found {what}")
    root = roots[0]
    reached, stack = {root}, [root]
    while stack:
        for j in children.get(stack.pop(), []):
            reached.add(j.child)
            stack.append(j.child)
    lost = [n for n in doc.links if n not in reached]
    if lost:
        raise UrdfError(
            f"links {lost} cannot be reached from the root link {root!r} (their joints "
            "form a loop of their own)"
        )
    return children, root


def _mimic_map(doc: Document, coords: list[str]) -> MimicMap | None:
    """The coordinate map of the mimic joints, or None when there are none."""
    joints = {j.name: j for j in doc.joints}
    rule = {}
    for j in doc.joints:
        if j.mimic is None or j.name not in coords:
            continue
        if j.mimic[0] not in coords:  # urdfdom and Pinocchio load it as an independent joint
            why = "is not a moving joint" if j.mimic[0] in joints else "does not exist"
            warnings.warn(
                f"joint {j.name!r} <mimic joint={j.mimic[0]!r}>: that joint {why}; "
                f"{j.name!r} is kept independent",
                UrdfWarning,
                stacklevel=4,
            )
            continue
        rule[j.name] = j.mimic
    if not rule:
        return None

    def resolve(name, seen=()):  # a mimic of a mimic: compose the affine maps
        if name not in rule:
            return name, 1.0, 0.0
        target, a, b = rule[name]
        where = f"joint {name!r} <mimic joint={target!r}>"
        if target in seen or target == name:
            raise UrdfError(f"{where}: mimic joints form a cycle")
        root, a2, b2 = resolve(target, (*seen, name))
        return root, a * a2, a * b2 + b

    resolved = [resolve(c) for c in coords]
    independent = [c for c in coords if c not in rule]
    return MimicMap(
        names=tuple(independent),
        source=tuple(independent.index(r) for r, _, _ in resolved),
        multiplier=jnp.array([a for _, a, _ in resolved], dtype=float),
        offset=jnp.array([b for _, _, b in resolved], dtype=float),
    )


def load_urdf(
    path_or_xml,
    *,
    mimic: bool = True,
    strict: bool = False,
    inertia_tolerance: float = INERTIA_ATOL,
) -> Model:
    """A `Model` from a URDF file path or XML text (see the module docstring).

    Args:
        path_or_xml: a path (str or `os.PathLike`), or the document as str or bytes.
        mimic: couple mimic joints to the joints they follow (True) or keep them independent.
        strict: refuse published inertias that are not physically realisable instead of
            warning.
        inertia_tolerance: kg m^2 by which a principal moment may be negative, or a triangle
            inequality fail, before the inertia counts as not realisable.

    Raises:
        UrdfError (a ValueError): whatever urdfdom refuses, plus an incomplete ``<inertial>``,
            negative mass, a zero joint axis, floating or planar joints, and links that are
            not one tree from the root; the message names the element.

    Warns:
        UrdfWarning: for a non-physical inertia (naming the link and the condition) and for
            joints that move no mass (their Gamma is singular)."""
    for name, flag in (("mimic", mimic), ("strict", strict)):
        if not isinstance(flag, bool):
            raise ValueError(f"load_urdf: {name} must be True or False, got {flag!r}")
    if not (isinstance(inertia_tolerance, int | float) and 0 <= inertia_tolerance < np.inf):
        raise ValueError(
            f"load_urdf: inertia_tolerance must be a finite number >= 0 (kg m^2), got "
            f"{inertia_tolerance!r}"
        )
    label, data = _source(path_or_xml)
    try:
        return _build(read_document(data), mimic, strict, inertia_tolerance)
    except UrdfError as err:
        raise UrdfError(f"URDF {label}: {err}") from None


def _build(doc: Document, mimic: bool, strict: bool, tol: float) -> Model:
    frames, coords, anchor, order = _frames(doc)
    parts = _inertia_parts(doc, anchor, order, strict, tol)
    bodies = _bodies(doc, frames, parts, strict, tol)
    massless = _massless_joints(frames, bodies)
    coordinate_map = _mimic_map(doc, coords) if mimic else None
    if coordinate_map is not None:  # a coordinate is massless when all its joints are
        followers = {c: [coords[k] for k, s in enumerate(coordinate_map.source) if s == i]
                     for i, c in enumerate(coordinate_map.names)}  # fmt: skip
        massless = [c for c, js in followers.items() if all(j in massless for j in js)]
    if massless:
        warnings.warn(
            f"URDF {doc.name!r}: joints {massless} move no mass, so Gamma(q) is singular and "
            "forward dynamics will fail; give the links below them an <inertial>",
            UrdfWarning,
            stacklevel=3,
        )
    return Model(
        frames,
        bodies,
        gravity=[0.0, 0.0, -9.81],
        coordinate_map=coordinate_map,
        augmented_names=tuple(coords),
    )


def _frames(doc: Document):
    """``(frames, coordinates, anchor, order)``: a frame per joint, depth-first, parents
    first, children in document order; each moving joint a coordinate; ``anchor`` each link's
    body frame (its own for a moving joint, the parent's for a welded one, None on the world)
    with the link's placement in it; ``order`` the links as visited."""
    children, root = _check_tree(doc)
    frames, coords = [], []
    anchor: dict[str, tuple[str | None, np.ndarray]] = {root: (None, np.eye(4))}
    order = [root]
    stack = list(reversed(children.get(root, [])))
    while stack:
        j = stack.pop()
        order.append(j.child)
        kind = _MOVING.get(j.type, "fixed")
        try:
            frames.append(
                Frame(
                    j.child,
                    "S" if j.parent == root else j.parent,
                    rotation=j.origin[:3, :3],
                    translation=j.origin[:3, 3],
                    joint=kind,
                    axis=None if kind == "fixed" else j.axis,
                    coordinate=None if kind == "fixed" else j.name,
                )
            )
        except ValueError as err:
            raise UrdfError(f"joint {j.name!r}: {err}") from None
        if kind == "fixed":  # welded: the body frame is the parent's, placed through j.origin
            frame, T = anchor[j.parent]
            anchor[j.child] = (frame, T @ j.origin)
        else:
            coords.append(j.name)
            anchor[j.child] = (j.child, np.eye(4))
        stack.extend(reversed(children.get(j.child, [])))
    return frames, coords, anchor, order


def _inertia_parts(doc: Document, anchor, order, strict: bool, tol: float) -> dict:
    """``{body frame: [(mass, centre, inertia at the centre), ...]}``: every link's
    ``<inertial>`` in the frame of the body it is welded to (Pinocchio appends fixed children's
    inertias), each checked; the world's and massless links' left out."""
    parts: dict[str, list] = {}
    for link in order:
        inertial = doc.inertials.get(link)
        if inertial is None:
            continue
        where = f"link {link!r} <inertial>"
        if inertial.mass < 0:
            raise UrdfError(f"{where}: mass must be >= 0 kg, got {inertial.mass}")
        bad = _violations(inertial.inertia, tol)
        if inertial.mass == 0 and np.any(inertial.inertia):
            bad.append("mass > 0 (its mass is 0 but its rotational inertia is not)")
        if bad:
            _not_physical(f"{where}: inertia violates {' and '.join(bad)}", strict)
        frame, T = anchor[link]
        if frame is None or (inertial.mass == 0 and not np.any(inertial.inertia)):
            continue  # welded to the world, or a massless frame
        T_FC = T @ inertial.origin
        R = T_FC[:3, :3]
        parts.setdefault(frame, []).append((inertial.mass, T_FC[:3, 3], R @ inertial.inertia @ R.T))
    return parts


def _bodies(doc: Document, frames, parts: dict, strict: bool, tol: float) -> list[Body]:
    """Each moving frame's composite body: the mass, centre and inertia (parallel axes to the
    composite centre) of the parts welded to it, checked where several make it."""
    names = set(doc.links)
    bodies = []
    for frame in [f.name for f in frames if f.name in parts]:
        m = sum(p[0] for p in parts[frame])
        c = sum(p[0] * p[1] for p in parts[frame]) / m if m > 0 else parts[frame][0][1]
        I = np.zeros((3, 3))
        for mk, ck, Ik in parts[frame]:  # parallel axes to the composite COM
            d = ck - c
            I += Ik + mk * (d @ d * np.eye(3) - np.outer(d, d))
        I = 0.5 * (I + I.T)
        com_frame = f"{frame}_com" if f"{frame}_com" not in names else None
        bad = _violations(I, tol) + ([] if m > 0 else ["mass > 0"])
        if bad and len(parts[frame]) > 1:  # a single part was reported above
            _not_physical(
                f"link {frame!r}: the composite inertia of the links welded to it violates "
                f"{' and '.join(bad)}",
                strict,
            )
        bodies.append(Body(frame, frame, m, c, I, com_frame, physical=not bad))
    return bodies


def _massless_joints(frames: list[Frame], bodies: list[Body]) -> list[str]:
    """Moving joints with no body on their frame or below it."""
    loaded = {b.frame for b in bodies}
    parent = {f.name: f.parent for f in frames}
    carrying = set()
    for name in loaded:
        while name != "S" and name not in carrying:
            carrying.add(name)
            name = parent[name]
    return [f.coordinate for f in frames if f.coordinate is not None and f.name not in carrying]
