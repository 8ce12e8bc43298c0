r"""The 3-RPR planar parallel manipulator of Ider et al., Section 6 (rigid joints; its flexible
drives are `jaxmb.actuators.flexible.FlexibleJointPlant` on this system, and the whole case study is
`jaxmb.control.rpr3_flexible`).

Three legs, each a revolute base joint (actuated: theta1, theta3, theta5 at A, B, C), a prismatic
joint (xi2, xi4, xi6) and a revolute joint to the moving platform, a triangle DEF. The loops are cut
at E and F, leaving a 7-DoF open tree: leg 1 carries the platform at D. Coordinates as in eq. (47),
angles absolute from the x-axis:

    q = [theta1, theta3, theta5, theta7, xi2, xi4, xi6]     (rad, m)

with theta7 the direction of DE. Constraints: E and F on the platform coincide with the ends of
legs 2 and 3 (eq. (50), four equations). The mechanism lies in the horizontal xy-plane, so gravity
(along -z) does no work. Link data as printed in Section 6; each link's inertia about its COM is
``diag(I_z/2, I_z/2, I_z)`` (only I_z enters planar motion).
"""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxmb.constraints.projection import ConstrainedSystem, PointCoincidence, StackedConstraints
from jaxmb.multibody.kinematics import frame_pose
from jaxmb.multibody.model import Body, CoordinateMap, Frame, Model

__all__ = [
    "RPR3_COORDINATES",
    "ACTUATED",
    "rpr3",
    "end_effector",
    "deployment_reference",
]

RPR3_COORDINATES = ("theta1", "theta3", "theta5", "theta7", "xi2", "xi4", "xi6")  # eq. (47)
ACTUATED = ("theta1", "theta3", "theta5")  # eq. (48)

# Section 6
L = 2.0  # m, AB = AC = CB
L7 = 0.4  # m, DE = DF
ALPHA = float(np.deg2rad(60.0))  # angle FDE
BETA = float(np.deg2rad(30.0))  # angle GDE
G7 = 0.231  # m, DG
A_COM = 0.3  # m, a_i: AG1, DG2, BG3, EG4, CG5, FG6
M_LEG, I_LEG = 5.0, 0.15  # kg, kg m^2 (links 1-6)
M_PLATFORM, I_PLATFORM = 7.0, 0.23  # kg, kg m^2 (link 7)


class _AbsolutePlatformAngle(CoordinateMap):
    """Eq. (47)'s coordinates to the tree's joint values: the platform joint on leg 1 turns by
    ``theta7 - theta1``; every other joint value is a coordinate itself."""

    names: tuple[str, ...] = eqx.field(static=True, default=RPR3_COORDINATES)

    def __call__(self, q: Float[Array, "7"]) -> Float[Array, "7"]:
        t1, t3, t5, t7, x2, x4, x6 = q
        return jnp.stack([t1, x2, t7 - t1, t3, x4, t5, x6])


def _planar_link(name, frame, com, mass, Iz, com_frame):
    return Body(name, frame, mass, com, jnp.diag(jnp.array([Iz / 2, Iz / 2, Iz])), com_frame)


def rpr3() -> ConstrainedSystem:
    """The Section 6 manipulator as a `ConstrainedSystem` over eq. (47)'s coordinates.

    Frames: L1..L6 (leg links), L7 (platform, origin D, x along DE), E7 and F7 (the platform's
    corners), COM frames C1..C7 (C7 is the platform's mass centre G)."""
    z = [0, 0, 1]
    x = [1, 0, 0]
    frames = [
        Frame("L1", joint="revolute", axis=z, coordinate="theta1"),  # base joint at A
        Frame("L2", "L1", joint="prismatic", axis=x, coordinate="xi2"),  # origin D
        Frame("L7", "L2", joint="revolute", axis=z, coordinate="phi7"),  # platform
        Frame("E7", "L7", translation=[L7, 0, 0]),
        Frame("F7", "L7", translation=[L7 * jnp.cos(ALPHA), L7 * jnp.sin(ALPHA), 0]),
        Frame("L3", translation=[L, 0, 0], joint="revolute", axis=z, coordinate="theta3"),  # B
        Frame("L4", "L3", joint="prismatic", axis=x, coordinate="xi4"),  # origin: leg 2's end
        # C as eq. (50) prints it: (0.5 L, 0.866 L)
        Frame(
            "L5", translation=[0.5 * L, 0.866 * L, 0], joint="revolute", axis=z, coordinate="theta5"
        ),
        Frame("L6", "L5", joint="prismatic", axis=x, coordinate="xi6"),  # origin: leg 3's end
    ]
    # COMs: AG1, BG3, CG5 = a_i from the base joints; DG2, EG4, FG6 = a_i back from the leg ends
    bodies = [
        _planar_link(f"link{i}", f"L{i}", [sign * A_COM, 0, 0], M_LEG, I_LEG, f"C{i}")
        for i, sign in zip(range(1, 7), (1, -1, 1, -1, 1, -1), strict=True)
    ]
    G = [G7 * jnp.cos(BETA), G7 * jnp.sin(BETA), 0]  # DG = g7 at angle GDE = beta
    bodies.append(_planar_link("platform", "L7", G, M_PLATFORM, I_PLATFORM, "C7"))
    model = Model(
        frames,
        bodies,
        gravity=[0.0, 0.0, -9.81],
        coordinate_map=_AbsolutePlatformAngle(),
        augmented_names=("theta1", "xi2", "phi7", "theta3", "xi4", "theta5", "xi6"),
    )
    origin = jnp.zeros(3)
    closure = StackedConstraints(
        (
            PointCoincidence("E7", origin, "L4", origin, axes=(0, 1)),  # eq. (50) g1, g2
            PointCoincidence("F7", origin, "L6", origin, axes=(0, 1)),  # eq. (50) g3, g4
        )
    )
    return ConstrainedSystem(model, closure)


def end_effector(system: ConstrainedSystem, q: Float[Array, "7"]) -> Float[Array, "3"]:
    """``x = [x_G, y_G, theta7]`` (eq. (51)): the platform's mass centre G and its angle."""
    T = frame_pose(system.model, q, "C7")
    return jnp.stack([T[0, 3], T[1, 3], q[3]])


def deployment_reference(t, T: float = 1.0) -> Float[Array, "3"]:
    r"""The cycloidal deployment motion of eq. (53): from (0.70 m, 0.60 m, 0 deg) to
    (1.05 m, 0.80 m, 25 deg) in ``T`` seconds, then at rest; theta7 in rad.

    $x = x_0 + \Delta\,[\tau - \sin(2\pi\tau)/(2\pi)]$, $\tau = \min(t/T, 1)$: velocity and
    acceleration vanish at both ends; the jerk jumps there."""
    tau = jnp.clip(t / T, 0.0, 1.0)
    s = tau - jnp.sin(2 * jnp.pi * tau) / (2 * jnp.pi)
    start = jnp.array([0.70, 0.60, 0.0])
    delta = jnp.array([0.35, 0.20, jnp.deg2rad(25.0)])
    return start + delta * s
