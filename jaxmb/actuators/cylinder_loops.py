r"""Cylinder bodies on any open tree: the loop each cylinder closes, as a coordinate map.

A hydraulic cylinder joins two bodies of a tree: its tube turns about the base pin A (on the
base link), its rod slides in the tube and is pinned at B (on the rod link). With the tube and
rod as bodies the machine is a closed chain, which jaxmb models by a coordinate map (Dastranj &
Mattila (2026), before eq. (26)): each cylinder adds two augmented coordinates, the tube's angle
``alpha`` about its pin axis and the pin distance ``s = |AB|``, both functions of the tree's
coordinates ``q`` through its kinematics. Frames (`cylinder_frames`):

- ``<c>_tube``: on the base link at A, rotated by ``R0`` (its z the pin axis,
  `tube_rotation`), then a revolute joint about z by ``alpha_<c>``;
- ``<c>_rod``: on the tube, a prismatic joint along x by ``s_<c>``, so its origin is B.

This is the revolute segment of Petrovic & Mattila (2022) Figs. 4-5 (cylinder in a triangle
about a joint) and, with the cylinder parallel to a sliding joint, their prismatic segment: in
both the two pins move in a plane normal to the pin axis. ``Xi(q)`` is exact there; a mount
whose pins leave that plane is refused by the machine-file loader.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxmb.multibody.kinematics import frame_transforms, xi
from jaxmb.multibody.model import WORLD, CoordinateMap, Frame, Model
from jaxmb.multibody.spatial import small_matmul

__all__ = ["CylinderLoops", "cylinder_frames", "pin_in_world", "tube_rotation"]


def pin_in_world(transforms, names: tuple[str, ...], frame: str, point) -> Array:
    """A point given in ``frame``'s coordinates, in the inertial frame S."""
    if frame == WORLD:
        return point
    R, p = transforms[names.index(frame)]
    return small_matmul(R, point) + p


class CylinderLoops(CoordinateMap):
    r"""``Xi(q) = [qhat_tree(q), alpha_1, s_1, alpha_2, s_2, ...]`` for the cylinders of a tree.

    ``tree`` is the open tree alone (its frames and its own coordinate map, e.g. mimic joints;
    no bodies): it places the pins. Per cylinder c, ``d = R_base^T (B - A)`` in the base link
    and ``e = R0_c^T d`` in the tube's joint frame; then ``alpha_c = atan2(e_y, e_x)`` and
    ``s_c = hypot(e_x, e_y)``. The pins, ``R0`` and the tree's placements are array leaves
    (differentiable); they must equal those of the model built with them (`cylinder_frames`
    and the machine-file loader guarantee it). Domain: ``s > 0``."""

    tree: Model
    base_points: Float[Array, "m 3"]
    rod_points: Float[Array, "m 3"]
    R0: Float[Array, "m 3 3"]
    base_frames: tuple[str, ...] = eqx.field(static=True)
    rod_frames: tuple[str, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, tree: Model, base_frames, base_points, rod_frames, rod_points, R0):
        self.tree = tree
        self.base_frames, self.rod_frames = tuple(base_frames), tuple(rod_frames)
        self.base_points = jnp.asarray(base_points, float).reshape(-1, 3)
        self.rod_points = jnp.asarray(rod_points, float).reshape(-1, 3)
        self.R0 = jnp.asarray(R0, float).reshape(-1, 3, 3)
        self.names = tree.coordinate_names

    def pin_vectors(self, qhat: Float[Array, " nt"]) -> Float[Array, "m 3"]:
        """``e_c``, the vector from base pin to rod pin in each tube's joint frame (m), at the
        tree's augmented coordinates ``qhat``."""
        T = frame_transforms(self.tree, qhat, fused=True)
        names = tuple(f.name for f in self.tree.frames)
        out = []
        for k, (fa, fb) in enumerate(zip(self.base_frames, self.rod_frames, strict=True)):
            A = pin_in_world(T, names, fa, self.base_points[k])
            B = pin_in_world(T, names, fb, self.rod_points[k])
            R_base = jnp.eye(3) if fa == WORLD else T[names.index(fa)][0]
            out.append(small_matmul(self.R0[k].T, small_matmul(R_base.T, B - A)))
        return jnp.stack(out)

    def __call__(self, q: Float[Array, " n"]) -> Float[Array, " nhat"]:
        qhat = xi(self.tree, q)  # once: the tree's own map (mimic joints) or q itself
        e = self.pin_vectors(qhat)
        alpha = jnp.arctan2(e[:, 1], e[:, 0])
        # the pins never meet (s is at least the cylinder's closed length), so hypot's guards
        # (overflow, zero) buy nothing here; under the two forward-mode passes of every plant
        # evaluation they cost 150 operations a pass, against 6
        s = jnp.sqrt(e[:, 0] ** 2 + e[:, 1] ** 2)
        extra = jnp.stack([alpha, s], axis=1).reshape(-1)
        return jnp.concatenate([qhat, extra])


def tube_rotation(axis: np.ndarray) -> np.ndarray:
    """``R0``: the smallest rotation that takes the base link's z onto the pin ``axis`` (the
    identity for a pin along z, so a planar machine's ``alpha`` is the cylinder's angle from the
    base link's x axis, as Petrovic & Mattila (2022) measure it)."""
    z = np.asarray(axis, float) / np.linalg.norm(axis)
    c = z[2]  # cos of the angle between e_z and the axis
    if c > 1 - 1e-12:
        return np.eye(3)
    if c < -1 + 1e-12:
        return np.diag([1.0, -1.0, -1.0])  # half a turn about x
    k = np.cross([0.0, 0.0, 1.0], z)
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + K + K @ K / (1 + c)  # Rodrigues for unit vectors e_z -> z


def cylinder_frames(name: str, base_frame: str, base_point, R0) -> list[Frame]:
    """The tube and rod frames of cylinder ``name`` (module docstring)."""
    return [
        Frame(
            f"{name}_tube",
            base_frame,
            rotation=R0,
            translation=base_point,
            joint="revolute",
            axis=[0.0, 0.0, 1.0],
            coordinate=f"alpha_{name}",
        ),
        Frame(
            f"{name}_rod",
            f"{name}_tube",
            joint="prismatic",
            axis=[1.0, 0.0, 0.0],
            coordinate=f"s_{name}",
        ),  # fmt: skip
    ]
