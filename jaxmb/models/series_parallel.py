r"""The 3-DoF series-parallel manipulator of Dastranj & Mattila (2026) Section IV, exactly as
defined in shared/specs/series_parallel_3dof.md (this project's reconstruction of the paper's
frames, which reproduces eqs. (26)-(28) and Table I).

Minimal coordinates ``q = [phi, theta, delta]`` (rad, rad, m). A triangular closed chain (two
sides ``L0``, the cylinder ``l0 + delta``) fixes the relative angle ``zeta(delta)`` between the
links (eq. (28)); the coordinate map ``Xi`` carries it, so the dynamics stay in minimal
coordinates without constraint forces.

The arm's elbow as a VDC revolute segment (Petrovic & Mattila (2022); `arm_elbow_segment`,
`arm_elbow_chain`, `arm_elbow_drive`) is built here from the same model.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxmb.constraints.projection import ConstrainedSystem, PointCoincidence
from jaxmb.multibody.checks import checked, not_positive, runtime_check
from jaxmb.multibody.model import Body, CoordinateMap, Frame, Model
from jaxmb.multibody.spatial import rot_x
from jaxmb.vdc.chain import VDCChain
from jaxmb.vdc.from_model import (
    cylinder_bodies,
    driven_point_motion,
    fixed_placement,
    frames_by_name,
    rigid_bodies_on,
)
from jaxmb.vdc.rigid_body import zero_body
from jaxmb.vdc.segments import RevoluteSegment, angle_from_stroke

__all__ = [
    "arm_elbow_segment",
    "arm_elbow_chain",
    "arm_elbow_drive",
    "TriangleLoop",
    "series_parallel_3dof",
    "series_parallel_3dof_dependent",
    "zeta_of_delta",
    "dzeta_ddelta",
]

# Table II and the spec
L_LINK = 2.0  # m, link length L
L0 = 0.35  # m, the two equal sides of the triangle
l0 = 0.425  # m, cylinder length at delta = 0
STROKE = (0.0, 0.2)  # m, 0 <= delta <= 0.2


def zeta_of_delta(delta, L0=L0, l0=l0):
    r"""$\zeta(\delta) = -\arccos\big((\delta + l_0)^2 / (2 L_0^2) - 1\big)$ (Dastranj & Mattila (2026) eq. (28))."""
    return -jnp.arccos((delta + l0) ** 2 / (2 * L0**2) - 1)


def dzeta_ddelta(delta, L0=L0, l0=l0):
    r"""$\partial\zeta/\partial\delta = (\delta + l_0) / (L_0^2 \sqrt{1 - c^2})$, $c = (\delta+l_0)^2/(2L_0^2) - 1$,
    the closed form of Dastranj & Mattila (2026) eq. (28) (used to check autodiff)."""
    c = (delta + l0) ** 2 / (2 * L0**2) - 1
    return (delta + l0) / (L0**2 * jnp.sqrt(1 - c**2))


class TriangleLoop(CoordinateMap):
    r"""``Xi(q)`` of the triangular chain: ``[phi, theta, zeta]`` (nominal) or
    ``[phi, theta, zeta, zeta/2, l0 + delta]`` (full model: cylinder angle and length).

    Domain: ``-l0 < delta < 2 L0 - l0`` (the triangle exists and zeta lies in (-pi, 0)); at the
    upper end the links line up (zeta = 0) and dzeta/ddelta is infinite. Outside it, evaluation
    raises through `equinox.error_if` instead of returning NaN."""

    L0: Float[Array, ""]
    l0: Float[Array, ""]
    full: bool = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, L0=L0, l0=l0, full: bool = False):
        self.L0 = checked(L0, not_positive, "TriangleLoop: L0 must be > 0 and finite", ())
        self.l0 = checked(l0, not_positive, "TriangleLoop: l0 must be > 0 and finite", ())
        self.full = full
        self.names = ("phi", "theta", "delta")

    def __call__(self, q: Float[Array, "3"]) -> Float[Array, " nhat"]:
        phi, theta, delta = q[0], q[1], q[2]
        c = (delta + self.l0) ** 2 / (2 * self.L0**2) - 1
        c = runtime_check(  # delta + l0 > 0 too: the triangle's side is a length
            c,
            ~((jnp.abs(c) < 1) & (delta + self.l0 > 0)),
            "series_parallel_3dof: delta is outside the triangle's domain "
            "-l0 < delta < 2 L0 - l0 (links aligned at the upper end, zeta = 0)",
        )
        zeta = -jnp.arccos(c)  # eq. (28)
        if not self.full:
            return jnp.stack([phi, theta, zeta])
        return jnp.stack([phi, theta, zeta, 0.5 * zeta, self.l0 + delta])


def _tree(full: bool) -> tuple[list[Frame], list[Body], tuple[str, ...]]:
    """Frames, bodies and augmented coordinate names of the spec's kinematic tree."""
    frames = [
        Frame("B1", "S", joint="revolute", axis=[0, 0, 1], coordinate="phi"),
        Frame("F1", "B1", rotation=rot_x(jnp.pi / 2), translation=[0, -0.075, 0.206]),
        Frame("B2", "F1", joint="revolute", axis=[0, 0, 1], coordinate="theta"),
        Frame("F2", "B2", translation=[L_LINK, 0, 0]),
        Frame("B3", "F2", joint="revolute", axis=[0, 0, 1], coordinate="zeta"),
        Frame("F3", "B3", translation=[L_LINK, 0, 0]),
    ]
    bodies = [
        Body("base", "B1", 30.0, [0, 0, 0.103], jnp.diag(jnp.array([0.804, 0.831, 1.18])), "C1"),
        Body(
            "link1",
            "B2",
            60.0,
            [0.959, 0.001, -0.077],
            [[0.311, -0.065, 0.098], [-0.065, 22.7, -0.003], [0.098, -0.003, 22.8]],
            "C2",
        ),
        Body(
            "link2",
            "B3",
            60.0,
            [1.041, 0.001, -0.077],
            [[0.311, 0.065, -0.098], [0.065, 22.7, -0.003], [-0.098, -0.003, 22.8]],
            "C3",
        ),
    ]
    augmented = ("phi", "theta", "zeta")
    if full:
        frames += [
            # T_B2,K = (Rz(zeta/2), [2 - L0, 0, 0]): x_K points from A to B
            Frame(
                "K",
                "B2",
                translation=[L_LINK - L0, 0, 0],
                joint="revolute",
                axis=[0, 0, 1],
                coordinate="alpha",
            ),
            # T_K,P = (I, [l0 + delta, 0, 0]): P's origin is B
            Frame("P", "K", joint="prismatic", axis=[1, 0, 0], coordinate="s"),
        ]
        bodies += [
            Body("cylinder", "K", 1.5, [0.2, 0, 0], jnp.diag(jnp.array([0.002, 0.02, 0.02])), "C4"),
            Body(
                "piston",
                "P",
                1.0,
                [-0.2, 0, 0],
                jnp.diag(jnp.array([0.001, 0.01333, 0.01333])),
                "C5",
            ),
        ]
        augmented = ("phi", "theta", "zeta", "alpha", "s")
    return frames, bodies, augmented


def series_parallel_3dof(full: bool = False) -> Model:
    """The 3-DoF series-parallel arm of the spec.

    ``full=False``: the nominal three-body model the paper's controller uses.
    ``full=True``: the plant, which adds the cylinder (frame K, body 4) and the piston with its
    rod (frame P, body 5); augmented coordinates ``[phi, theta, zeta, alpha, s]`` with
    ``alpha = zeta/2`` the cylinder angle and ``s = l0 + delta`` its length.

    Frames: B1, F1, B2, F2, B3, F3 (tool), and with ``full`` K and P; COM frames C1..C5.
    Gravity ``[0, 0, -9.81]`` in S (z up)."""
    frames, bodies, augmented = _tree(full)
    return Model(
        frames,
        bodies,
        gravity=[0.0, 0.0, -9.81],
        coordinate_map=TriangleLoop(full=full),
        augmented_names=augmented,
    )


def series_parallel_3dof_dependent() -> ConstrainedSystem:
    """The full arm in dependent coordinates ``q = [phi, theta, zeta, alpha, s]`` (Aghili (2005)'s
    formulation): the open tree of the full model without the coordinate map, and the loop
    closed at the cylinder's rod end B: P's origin coincides with ``[L0, 0, 0]`` of B3.

    The closure is written in B2's axes, all three rows: the loop is planar, so the z row is
    identically zero, a redundant constraint that the pseudo-inverse's relative tolerance drops
    (rank 2, five coordinates, three degrees of freedom). The input ``f`` is
    ``[tau_phi, tau_theta, 0, 0, f_delta]``: the cylinder force acts along s."""
    frames, bodies, augmented = _tree(full=True)
    model = Model(frames, bodies, gravity=[0.0, 0.0, -9.81], augmented_names=augmented)
    closure = PointCoincidence("P", jnp.zeros(3), "B3", jnp.array([L0, 0.0, 0.0]), express_in="B2")
    return ConstrainedSystem(model, closure)


def _arm_pins(model: Model):
    """Cylinder base pin A and elbow J in B2 coordinates. B_0j (x from A toward J) is taken
    parallel to B2, as in the spec, where A and J both lie on B2's x axis."""
    fr = frames_by_name(model)
    J = fr["F2"].translation
    A = fr["K"].translation if "K" in fr else J - jnp.stack([model.coordinate_map.L0, 0.0, 0.0])
    return A, J


def arm_elbow_segment(model: Model, l_c: float = 0.20) -> RevoluteSegment:
    r"""The elbow of the 3-DoF arm (shared/specs/series_parallel_3dof.md) as a revolute segment.

    ``q_j1`` = cylinder base A (``[2 - L0, 0, 0]`` in B2), ``q_j`` = the elbow (origin of B3),
    ``q_j2`` = rod pin B (``[L0, 0, 0]`` in B3): ``L_j = L_j1 = L0``, ``x_j0 = l0``, ``q_j = zeta``
    and ``x_j = delta``. ``B_0j`` has B2's axes at A; ``B_1j`` is B3. ``L_j`` is a massless virtual
    part of link 1 (link 1's dynamics belong to the motor-driven joints), ``L_j1`` is link 2, the
    tube is the cylinder K (``B_3j`` = K), the piston is P (``P_1j`` = P); ``E_1j = D_1n`` = F3.
    Needs ``series_parallel_3dof(full=True)`` for the cylinder bodies (else they are massless)."""
    A, J = _arm_pins(model)
    cmap = model.coordinate_map
    tube, piston = cylinder_bodies(model, "cylinder", "piston", l_c)
    R_tool, r_tool = fixed_placement(model, "F3", "B3")
    return RevoluteSegment(
        L=jnp.linalg.norm(J - A),
        L1=cmap.L0,
        x0=cmap.l0,
        l_c=l_c,
        R_B1E=R_tool,
        r_B1E=r_tool,
        link0=zero_body(),
        link1=rigid_bodies_on(model, "B3", jnp.eye(3), jnp.zeros(3)),
        tube=tube,
        piston=piston,
    )


def arm_elbow_chain(model: Model, l_c: float = 0.20) -> VDCChain:
    """The one-segment chain of `arm_elbow_segment`; its coordinate is ``zeta`` (rad), its driven
    frame moves with link 1 (pass `arm_elbow_drive`'s ``R_WC, V_c, Vd_c``)."""
    return VDCChain((arm_elbow_segment(model, l_c),), model.gravity)


@eqx.filter_jit
def arm_elbow_drive(
    model: Model,
    q: Float[ArrayLike, "3"],
    qd: Float[ArrayLike, "3"],
    qdd: Float[ArrayLike, "3"],
) -> tuple[
    Float[Array, "1"],
    Float[Array, "1"],
    Float[Array, "1"],
    Float[Array, "3 3"],
    Float[Array, "6"],
    Float[Array, "6"],
]:
    r"""Inputs of `arm_elbow_chain` from the arm's ``(q, qd, qdd)`` (``q = [phi, theta, delta]``):
    ``(zeta, zetad, zetadd, R_WC, V_c, Vd_c)``. zeta is the inverse of eq. (18) on the printed
    branch (``sin zeta < 0``), its rates by `jax.jvp`; the driven frame B_0j (B2's axes at A) moves
    with link 1 (`driven_point_motion` of B2)."""
    seg = arm_elbow_segment(model)
    q, qd, qdd = jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)

    def zeta(d):
        return angle_from_stroke(seg, d, branch=-1)

    def zeta_rate(d, dd):
        return jax.jvp(zeta, (d,), (dd,))

    (z, zd), (_, zdd) = jax.jvp(zeta_rate, (q[2], qd[2]), (qd[2], qdd[2]))
    A, _ = _arm_pins(model)
    R_WC, V_c, Vd_c = driven_point_motion(model, "B2", q, qd, qdd, jnp.eye(3), A)
    return z[None], zd[None], zdd[None], R_WC, V_c, Vd_c
