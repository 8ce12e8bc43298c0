r"""The `Model`: rigid bodies on a kinematic tree over augmented coordinates, an optional
coordinate map closing the loops, and gravity. An immutable equinox pytree.

Structure (names, parents, joint types, which coordinate drives which joint) is static; every
number (masses, COMs, inertias, placements, joint axes, gravity, the coordinate map's lengths) is
an array leaf, so identification and gain tuning can differentiate with respect to the model and
Monte Carlo studies can `vmap` over perturbed models.

Kinematic tree (Dastranj & Mattila (2026) Section II-A): each `Frame` hangs from a parent frame
(``"S"`` is the inertial frame) by a fixed placement ``T_parent,J = (rotation, translation)``
followed by a joint motion about a unit ``axis`` of J:

    T_parent,frame(qhat) = T_parent,J @ exp(axis * qhat[k])  (revolute: rotation; prismatic: translation)

so that a joint is exactly a URDF ``<joint>`` (origin, then motion) and a chain such as
``T_B1,F1 T_F1,B2`` of the specs is a fixed frame F1 followed by a revolute frame B2.

Closed chains: a `CoordinateMap` ``Xi(q) -> qhat`` (eq. before (26)) maps the minimal
coordinates ``q`` to the augmented ones; ``E = dXi/dq`` is obtained by autodiff.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxmb.multibody.checks import (
    array_namespace,
    checked,
    describe,
    not_finite,
    not_nonnegative,
    not_positive,
)

__all__ = [
    "WORLD",
    "coordinate_joint_types",
    "JOINT_TYPES",
    "Body",
    "Frame",
    "CoordinateMap",
    "Model",
    "replace_body",
    "replace_placement",
    "INERTIA_ATOL",
    "inertia_unrealisable",
    "rotation_improper",
]

WORLD = "S"
JOINT_TYPES = ("fixed", "revolute", "prismatic")


def _tol(x) -> float:
    """Relative round-off allowance of x's dtype for structural checks."""
    return 1e-9 if x.dtype == np.float64 else 1e-6


INERTIA_ATOL = 1e-10
"""kg m^2: how far a principal moment may be negative, or a triangle inequality fail, before an
inertia counts as not physically realisable (absolute, on top of the dtype's round-off)."""


def _inertia_asymmetric(I):
    """True unless I is finite and symmetric (to round-off). In NumPy or JAX, as ``I`` is
    (`array_namespace`), as are the checks below."""
    xp = array_namespace(I)
    finite = xp.isfinite(I).all()
    Is = xp.where(finite, I, xp.eye(3, dtype=I.dtype))
    scale = xp.maximum(xp.abs(Is).max(), 1e-30)
    return ~(finite & (xp.abs(Is - Is.T).max() <= 1e3 * _tol(Is) * scale))


def inertia_unrealisable(I):
    """True unless I is finite, symmetric, positive semidefinite and obeys the triangle
    inequalities of its principal moments (a physically realisable rigid-body inertia about the
    COM; zero for a point mass, singular for a thin rod), within `INERTIA_ATOL`."""
    xp = array_namespace(I)
    finite = xp.isfinite(I).all()
    Is = xp.where(finite, I, xp.eye(3, dtype=I.dtype))  # keep eigvalsh away from NaN/inf
    scale = xp.maximum(xp.abs(Is).max(), 1e-30)
    sym = xp.abs(Is - Is.T).max() <= 1e3 * _tol(Is) * scale
    lam = xp.linalg.eigvalsh(0.5 * (Is + Is.T))
    slack = (1e-9 if Is.dtype == np.float64 else 1e-5) * scale + INERTIA_ATOL
    pd = (lam >= -slack).all()
    tri = (lam[0] + lam[1] >= lam[2] - slack) & (lam[1] + lam[2] >= lam[0] - slack)
    tri = tri & (lam[0] + lam[2] >= lam[1] - slack)
    return ~(finite & sym & pd & tri)


def rotation_improper(R):
    """True unless R is a finite proper rotation (orthonormal to round-off, det +1)."""
    xp = array_namespace(R)
    finite = xp.isfinite(R).all()
    Rs = xp.where(finite, R, xp.eye(3, dtype=R.dtype))
    orth = xp.abs(Rs.T @ Rs - xp.eye(3, dtype=R.dtype)).max() <= 1e3 * _tol(R)
    proper = xp.linalg.det(Rs) > 0
    return ~(finite & orth & proper)


def _axis_bad(a):
    """True unless a joint axis is finite and non-zero."""
    xp = array_namespace(a)
    return ~(xp.isfinite(a).all() & (xp.linalg.norm(a) > 1e-12))


class Body(eqx.Module):
    r"""One rigid body with its spatial inertia $M_i$ (Dastranj & Mattila (2026) after eq. (8)).

    Attributes:
        name: the body's name (static).
        frame: the kinematic frame ``B_i`` the body is rigidly attached to (static).
        com_frame: name of the frame ``C_i`` at the COM, parallel to ``B_i``; None for no name.
        mass: kg, > 0.
        com: ``p_{B_i C_i}``, the centre of mass in ``B_i`` coordinates, m.
        inertia: ``I_{C_i}``, inertia about the COM in axes parallel to ``B_i``, kg m^2;
            symmetric positive semidefinite (zero: a point mass) and physically realisable
            (triangle inequalities), within `INERTIA_ATOL`.

    ``physical=False`` (keyword) accepts a published inertia that is not realisable and a zero
    mass, checking only that the numbers are finite and the inertia symmetric; `load_urdf` uses
    it, with a warning, for files other tools load as they are.
    """

    name: str = eqx.field(static=True)
    frame: str = eqx.field(static=True)
    com_frame: str | None = eqx.field(static=True)
    physical: bool = eqx.field(static=True)
    mass: Float[Array, ""]
    com: Float[Array, 3]
    inertia: Float[Array, "3 3"]

    def __init__(
        self,
        name: str,
        frame: str,
        mass,
        com,
        inertia,
        com_frame: str | None = None,
        *,
        physical: bool = True,
    ):
        if not isinstance(name, str) or not name:
            raise ValueError(f"body name must be a non-empty string, got {name!r}")
        for field, value in (("frame", frame), ("com_frame", com_frame)):
            if not (isinstance(value, str) and value) and not (
                field == "com_frame" and value is None
            ):
                raise TypeError(
                    f"body {name!r}: {field}: expected a frame name (a non-empty string), got "
                    f"{describe(value, None)}"
                )
        self.name = name
        self.frame = frame
        self.com_frame = com_frame
        self.physical = physical
        if physical:
            self.mass = checked(
                mass, not_positive, f"body {name!r}: mass must be > 0 and finite", ()
            )
        else:
            self.mass = checked(
                mass, not_nonnegative, f"body {name!r}: mass must be >= 0 and finite", ()
            )
        self.com = checked(com, not_finite, f"body {name!r}: com must be finite", (3,))
        if physical:
            self.inertia = checked(
                inertia,
                inertia_unrealisable,
                f"body {name!r}: inertia must be finite, symmetric, positive semidefinite and "
                "satisfy the triangle inequalities of its principal moments",
                (3, 3),
            )
        else:
            self.inertia = checked(
                inertia,
                _inertia_asymmetric,
                f"body {name!r}: inertia must be finite and symmetric",
                (3, 3),
            )


class Frame(eqx.Module):
    r"""A frame of the kinematic tree: fixed placement, then a joint motion.

    ``T_parent,frame = (rotation, translation) @ motion``, with ``motion`` the identity for a
    ``"fixed"`` frame, ``(rot_axis_angle(axis, qhat[k]), 0)`` for ``"revolute"`` and
    ``(I, axis * qhat[k])`` for ``"prismatic"``, ``k`` the index of ``coordinate`` in the model's
    augmented coordinates. The axis is normalised here.
    """

    name: str = eqx.field(static=True)
    parent: str = eqx.field(static=True)
    joint: str = eqx.field(static=True)
    coordinate: str | None = eqx.field(static=True)
    rotation: Float[Array, "3 3"]
    translation: Float[Array, 3]
    axis: Float[Array, 3]

    def __init__(
        self,
        name: str,
        parent: str = WORLD,
        *,
        rotation=None,
        translation=None,
        joint: str = "fixed",
        axis=None,
        coordinate: str | None = None,
    ):
        if not isinstance(name, str) or not name:
            raise ValueError(f"frame name must be a non-empty string, got {name!r}")
        if name == WORLD:
            raise ValueError(
                f"frame {name!r}: the name {WORLD!r} is reserved for the inertial frame"
            )
        if not isinstance(parent, str) or not parent:
            raise TypeError(
                f"frame {name!r}: parent: expected a frame name (a non-empty string), got "
                f"{describe(parent, None)}"
            )
        if joint not in JOINT_TYPES:
            raise ValueError(f"frame {name!r}: joint must be one of {JOINT_TYPES}, got {joint!r}")
        if joint == "fixed" and coordinate is not None:
            raise ValueError(
                f"frame {name!r}: a fixed frame takes no coordinate, got {coordinate!r}"
            )
        if joint != "fixed" and not coordinate:
            raise ValueError(f"frame {name!r}: a {joint} joint needs a coordinate name")
        self.name, self.parent, self.joint, self.coordinate = name, parent, joint, coordinate
        self.rotation = checked(
            np.eye(3) if rotation is None else rotation,
            rotation_improper,
            f"frame {name!r}: rotation must be a finite proper rotation matrix",
            (3, 3),
        )
        self.translation = checked(
            np.zeros(3) if translation is None else translation,
            not_finite,
            f"frame {name!r}: translation must be finite",
            (3,),
        )
        if joint == "fixed":
            self.axis = checked(
                np.zeros(3) if axis is None else axis, not_finite, f"frame {name!r}: axis", (3,)
            )
        else:
            if axis is None:
                raise ValueError(f"frame {name!r}: a {joint} joint needs an axis")
            a = checked(
                axis,
                _axis_bad,
                f"frame {name!r}: axis must be finite and non-zero",
                (3,),
            )
            if isinstance(a, jax.core.Tracer):
                self.axis = a / jnp.linalg.norm(a)
            else:  # in NumPy: a frame is built eagerly, where each JAX operation compiles
                host = np.asarray(a)
                with np.errstate(all="ignore"):  # as JAX: an overflowing norm gives zeros
                    self.axis = jnp.asarray(host / np.linalg.norm(host))


class CoordinateMap(eqx.Module):
    r"""Abstract ``Xi: q -> qhat`` from minimal to augmented coordinates (Dastranj & Mattila
    (2026), before eq. (26)). Concrete maps hold their lengths as array leaves and raise through
    `equinox.error_if` for ``q`` outside their domain."""

    names: eqx.AbstractVar[tuple[str, ...]]

    @abc.abstractmethod
    def __call__(self, q: Float[Array, " n"]) -> Float[Array, " nhat"]: ...


class Model(eqx.Module):
    r"""A multibody system: frames, bodies, gravity and an optional coordinate map.

    Attributes:
        frames: the kinematic tree, parents before children (sorted at construction).
        bodies: rigid bodies, each attached to one frame.
        gravity: gravity vector in S, m/s^2 (``[0, 0, -9.81]`` for z up).
        coordinate_map: ``Xi(q) -> qhat`` or None (then ``qhat = q``).
        augmented_names: the augmented coordinates ``qhat`` in order (static).
        coordinate_names: the minimal coordinates ``q`` in order (static); logs, plots and the
            CLI address coordinates by these names.
    """

    frames: tuple[Frame, ...]
    bodies: tuple[Body, ...]
    gravity: Float[Array, 3]
    coordinate_map: CoordinateMap | None
    augmented_names: tuple[str, ...] = eqx.field(static=True)
    coordinate_names: tuple[str, ...] = eqx.field(static=True)
    # derived static topology, filled at construction
    parent_index: tuple[int, ...] = eqx.field(static=True)
    coordinate_index: tuple[int, ...] = eqx.field(static=True)
    body_frame_index: tuple[int, ...] = eqx.field(static=True)

    def __init__(
        self,
        frames,
        bodies,
        gravity=(0.0, 0.0, -9.81),
        coordinate_map: CoordinateMap | None = None,
        augmented_names: tuple[str, ...] | None = None,
    ):
        frames = _instances("frames", frames, Frame)
        bodies = _instances("bodies", bodies, Body)
        self.frames = _topological(frames)
        names = [f.name for f in self.frames]
        self.bodies = bodies
        self.gravity = checked(gravity, not_finite, "model: gravity must be finite", (3,))
        self.augmented_names = _augmented_names(self.frames, augmented_names)
        _check_bodies(bodies, names)
        self.parent_index = tuple(
            -1 if f.parent == WORLD else names.index(f.parent) for f in self.frames
        )
        self.coordinate_index = tuple(
            -1 if f.coordinate is None else self.augmented_names.index(f.coordinate)
            for f in self.frames
        )
        self.body_frame_index = tuple(names.index(b.frame) for b in bodies)
        self.coordinate_map = coordinate_map
        self.coordinate_names = _coordinate_names(
            coordinate_map, self.augmented_names, self.gravity.dtype
        )

    @property
    def n(self) -> int:
        """Number of minimal coordinates (degrees of freedom)."""
        return len(self.coordinate_names)

    @property
    def n_augmented(self) -> int:
        """Number of augmented coordinates ``qhat``."""
        return len(self.augmented_names)

    @property
    def frame_names(self) -> tuple[str, ...]:
        """All named frames: the kinematic frames, then the named COM frames."""
        return tuple(f.name for f in self.frames) + tuple(
            b.com_frame for b in self.bodies if b.com_frame is not None
        )

    @property
    def body_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.bodies)

    def body(self, name: str) -> Body:
        """The body called ``name``."""
        for b in self.bodies:
            if b.name == name:
                return b
        raise ValueError(f"model: unknown body {name!r}; bodies are {list(self.body_names)}")

    def coordinate(self, name: str) -> int:
        """Index of the minimal coordinate called ``name``."""
        if name not in self.coordinate_names:
            raise ValueError(
                f"model: unknown coordinate {name!r}; coordinates are {self.coordinate_names}"
            )
        return self.coordinate_names.index(name)


def _instances(what: str, items, cls: type) -> tuple:
    """``items`` as a tuple, refused by name unless it is a sequence of ``cls``."""
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise TypeError(
            f"model: {what}: expected a sequence of {cls.__name__}, got {describe(items, None)}"
        )
    items = tuple(items)
    for x in items:
        if not isinstance(x, cls):
            raise TypeError(
                f"model: {what}: expected {cls.__name__} instances, got {describe(x, None)}"
            )
    return items


def _augmented_names(frames: tuple[Frame, ...], given) -> tuple[str, ...]:
    """The augmented coordinates: ``given`` in its order, or the joints' coordinates in order of
    first appearance in the tree; each must drive a joint and every joint's must be among them."""
    used = [f.coordinate for f in frames if f.coordinate is not None]
    names = tuple(dict.fromkeys(used)) if given is None else tuple(given)
    if len(set(names)) != len(names):
        raise ValueError(f"model: duplicate augmented coordinate names in {names}")
    for f in frames:
        if f.coordinate is not None and f.coordinate not in names:
            raise ValueError(
                f"frame {f.name!r}: coordinate {f.coordinate!r} is not among the augmented "
                f"coordinates {names}"
            )
    for c in names:
        if c not in used:
            raise ValueError(f"model: augmented coordinate {c!r} drives no joint")
    return names


def _check_bodies(bodies: tuple[Body, ...], frame_names: list[str]) -> None:
    """Unique body names, unique frame names (COM frames included), each body on a known frame."""
    body_names = [b.name for b in bodies]
    dup = {n for n in body_names if body_names.count(n) > 1}
    if dup:
        raise ValueError(f"model: duplicate body names {sorted(dup)}")
    extra = [b.com_frame for b in bodies if b.com_frame is not None]
    all_frames = frame_names + extra
    dup = {n for n in all_frames if all_frames.count(n) > 1}
    if dup or WORLD in extra:
        raise ValueError(f"model: duplicate frame names {sorted(dup or {WORLD})}")
    for b in bodies:
        if b.frame not in frame_names:
            raise ValueError(
                f"body {b.name!r}: unknown frame {b.frame!r}; frames are {frame_names}"
            )


def _coordinate_names(
    coordinate_map: CoordinateMap | None, augmented_names: tuple[str, ...], dtype
) -> tuple[str, ...]:
    """The minimal coordinates: the map's names, once its output shape is checked by
    `jax.eval_shape` (nothing is computed), or the augmented ones where there is no map."""
    if coordinate_map is None:
        return augmented_names
    if not isinstance(coordinate_map, CoordinateMap):
        raise TypeError(
            f"model: coordinate_map must be a CoordinateMap, got {type(coordinate_map).__name__}"
        )
    names = tuple(coordinate_map.names)
    out = jax.eval_shape(coordinate_map, jax.ShapeDtypeStruct((len(names),), dtype))
    if out.shape != (len(augmented_names),):
        raise ValueError(
            f"model: coordinate_map returns shape {out.shape}, expected "
            f"({len(augmented_names)},) for augmented coordinates {augmented_names}"
        )
    return names


def _topological(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """Parents before children; raises for duplicates, unknown parents and cycles."""
    names = [f.name for f in frames]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"model: duplicate frame names {sorted(dup)}")
    by_name = {f.name: f for f in frames}
    for f in frames:
        if f.parent != WORLD and f.parent not in by_name:
            raise ValueError(f"frame {f.name!r}: unknown parent {f.parent!r}; frames are {names}")
    order: list[Frame] = []
    placed: set[str] = {WORLD}
    pending = list(frames)
    while pending:
        ready = [f for f in pending if f.parent in placed]
        if not ready:
            raise ValueError(f"model: the frames {[f.name for f in pending]} form a loop")
        for f in ready:
            order.append(f)
            placed.add(f.name)
        pending = [f for f in pending if f.name not in placed]
    return tuple(order)


def replace_body(model: Model, name: str, *, mass=None, com=None, inertia=None) -> Model:
    """Reconfiguration: the model with body ``name``'s mass, COM and/or inertia replaced.

    The body is rebuilt through its constructor, so the new values are validated. Only that
    body's Gamma_i changes (Dastranj & Mattila (2026) Section II-B, inertia partitioning)."""
    old = model.body(name)
    new = Body(
        name,
        old.frame,
        old.mass if mass is None else mass,
        old.com if com is None else com,
        old.inertia if inertia is None else inertia,
        com_frame=old.com_frame,
        physical=old.physical,
    )
    i = model.body_names.index(name)
    return eqx.tree_at(lambda m: m.bodies[i], model, new)


def replace_placement(model: Model, frame: str, *, rotation=None, translation=None) -> Model:
    """Reconfiguration: the model with frame ``frame``'s fixed placement replaced (validated).

    Only the bodies on and below that frame see their Jacobians, hence their Gamma_i, change."""
    names = [f.name for f in model.frames]
    if frame not in names:
        raise ValueError(f"model: unknown frame {frame!r}; frames are {names}")
    i = names.index(frame)
    old = model.frames[i]
    new = Frame(
        old.name,
        old.parent,
        rotation=old.rotation if rotation is None else rotation,
        translation=old.translation if translation is None else translation,
        joint=old.joint,
        axis=old.axis,
        coordinate=old.coordinate,
    )
    return eqx.tree_at(lambda m: m.frames[i], model, new)


def coordinate_joint_types(model: Model) -> dict[str, str]:
    """``{coordinate: "revolute" | "prismatic"}``: the joint of the frame a minimal coordinate
    drives. With a coordinate map, a minimal coordinate that is also an augmented one drives
    that frame (every map of `jaxmb.models` passes such coordinates through); one that is not
    (the 3-DoF arm's ``delta``) cannot be told from the map and is taken as revolute."""
    by_aug: dict[str, str] = {}
    for f in model.frames:
        if f.coordinate is not None:
            by_aug.setdefault(f.coordinate, f.joint)
    return {c: by_aug.get(c, "revolute") for c in model.coordinate_names}
