r"""The 3-DoF series-parallel manipulator of Dastranj & Mattila (2026) Section IV, exactly as
defined in shared/specs/series_parallel_3dof.md (this project's reconstruction of the paper's
frames, which reproduces eqs. (26)-(28) and Table I).

Minimal coordinates ``q = [phi, theta, delta]`` (rad, rad, m). A triangular closed chain (two
sides ``L0``, the cylinder ``l0 + delta``) fixes the relative angle ``zeta(delta)`` between the
links (eq. (28)); the coordinate map ``Xi`` carries it, so the dynamics stay in minimal
coordinates without constraint forces.
"""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..checks import checked, runtime_check
from ..model import Body, CoordinateMap, Frame, Model
from ..projection import ConstrainedSystem, PointCoincidence
from ..spatial import rot_x

__all__ = [
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
        self.L0 = checked(L0, lambda x: ~(x > 0), "TriangleLoop: L0 must be > 0 and finite", ())
        self.l0 = checked(l0, lambda x: ~(x > 0), "TriangleLoop: l0 must be > 0 and finite", ())
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
