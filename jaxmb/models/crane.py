r"""The hydraulic lift/tilt crane, exactly as defined in shared/specs/lift_tilt_crane.md.

A planar two-boom crane (PATU 655 geometry and masses, Petrovic & Mattila (2022) Section 7
valves): the lift boom turns about O1 on the base, the tilt boom about O2 on the lift boom, and
each joint is driven by a hydraulic cylinder through a triangle, a revolute segment of
Petrovic & Mattila Figs. 4-5. World W is the model's inertial frame ``"S"``: x horizontal, y up,
z out of the plane, gravity ``[0, -9.81, 0]``.

Minimal coordinates ``q = [q1, q2]`` (rad). Frames: ``L`` (lift boom), ``T`` (tilt boom),
``tool``; with ``full=True`` also the cylinder tubes ``lift_tube``, ``tilt_tube`` (origin at the
base pin, x toward the rod pin) and rods ``lift_rod``, ``tilt_rod`` (origin at the rod pin,
axes of the tube). The full model's coordinate map ``Xi(q) -> [q1, q2, alpha_lift, s_lift,
alpha_tilt, s_tilt]`` carries each cylinder's angle (about z, relative to its base frame) and
pin distance ``s = |AB|``, as ``series_parallel_3dof(full=True)`` does for the arm.
"""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..model import Body, CoordinateMap, Frame, Model, _checked, runtime_check
from ..spatial import rot_z

__all__ = [
    "CraneLoops",
    "lift_tilt_crane",
    "lift_tilt_crane_plant",
    "abcd_reference",
    "WAYPOINTS",
    "GEOMETRY",
    "CYLINDERS",
]

# --- shared/specs/lift_tilt_crane.md, "Frames and conventions" ---
O1 = (-0.09, 1.4261, 0.0)  # lift joint in W
O2 = (2.881081, 0.021593, 0.0)  # tilt joint in L
TOOL = (2.58, 0.0, 0.0)  # tool frame origin in T
GRAVITY = (0.0, -9.81, 0.0)
WORKING_RANGE = {"q1": (-0.40, 1.40), "q2": (-0.75, 0.65)}

# "Bodies"
BOOM_INERTIA = (
    (1.055433, 1.442440, -0.000003),
    (1.442440, 66.577004, 0.0),
    (-0.000003, 0.0, 67.053707),
)
LIFT_BOOM = {"mass": 143.66, "com": (1.229248, 0.055596, 0.0)}
TILT_BOOM = {"mass": 157.871069, "com": (0.659935, 0.251085, 0.0)}

# "Cylinders": base pin (frame, point), rod pin (frame, point), l_min, stroke
CYLINDERS = {
    "lift": {
        "base": ("S", (0.17, 0.386113, 0.0)),
        "rod": ("L", (0.3025, -0.105, 0.0)),
        "l_min": 0.82,
        "stroke": 0.535,
    },
    "tilt": {
        "base": ("L", (1.263, 0.206702, 0.0)),
        "rod": ("T", (-0.30, 0.52, 0.0)),
        "l_min": 1.05,
        "stroke": 0.78,
    },
}
# cylinder bodies of the full plant: (mass kg, COM distance from its pin m, slender length m)
TUBE = (15.0, 0.30, 0.8)
ROD = (8.0, 0.30, 0.8)
AXIAL_INERTIA = 0.01  # kg m^2

GEOMETRY = {"O1": O1, "O2": O2, "tool": TOOL}

# "The A-B-C-D task": joint-space waypoints (q1, q2), rad
WAYPOINTS = {"A": (0.15, -0.45), "B": (0.95, -0.45), "C": (0.95, 0.25), "D": (0.15, 0.25)}


def abcd_reference():
    """The spec's A-B-C-D task: two loops A-B-C-D-A of quintic rest-to-rest segments in joint
    space, 2 s each (0-16 s), then holding A to 18 s (`jaxmb.simulate.QuinticWaypoints`)."""
    from ..simulate import QuinticWaypoints

    order = "ABCDABCDA"
    return QuinticWaypoints([WAYPOINTS[k] for k in order], segment_time=2.0)


T_FINAL_ABCD = 18.0  # s, the task's simulated time


def _slender(mass: float, length: float) -> Array:
    """Inertia at the COM of a slender cylinder body along x: axial 0.01 kg m^2, transverse
    ``m l^2 / 12`` (the spec's cylinder bodies)."""
    t = mass * length**2 / 12
    return jnp.diag(jnp.array([AXIAL_INERTIA, t, t]))


class CraneLoops(CoordinateMap):
    r"""``Xi(q) = [q1, q2, alpha_lift, s_lift, alpha_tilt, s_tilt]``: each cylinder's direction
    angle about z in its base frame and its pin distance ``s = |AB|``, from planar geometry.

    Lift: ``d = O1 + Rz(q1) B1 - A1`` in W; tilt: ``d = O2 + Rz(q2) B2 - A2`` in L; then
    ``alpha = atan2(d_y, d_x)``, ``s = |d|``. The points are array leaves (differentiable);
    they must equal the frame placements of the model built with them (``lift_tilt_crane``
    guarantees it). Domain: ``s > 0`` (the pins never coincide in the working range)."""

    O1: Float[Array, "3"]
    O2: Float[Array, "3"]
    A1: Float[Array, "3"]
    B1: Float[Array, "3"]
    A2: Float[Array, "3"]
    B2: Float[Array, "3"]
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, O1=O1, O2=O2, A1=None, B1=None, A2=None, B2=None):
        c = CYLINDERS
        pts = {
            "O1": O1,
            "O2": O2,
            "A1": c["lift"]["base"][1] if A1 is None else A1,
            "B1": c["lift"]["rod"][1] if B1 is None else B1,
            "A2": c["tilt"]["base"][1] if A2 is None else A2,
            "B2": c["tilt"]["rod"][1] if B2 is None else B2,
        }
        for k, v in pts.items():
            setattr(
                self,
                k,
                _checked(v, lambda x: ~jnp.isfinite(x), f"CraneLoops: {k} must be finite", (3,)),
            )
        self.names = ("q1", "q2")

    def __call__(self, q: Float[Array, "2"]) -> Float[Array, "6"]:
        d1 = self.O1 + rot_z(q[0]) @ self.B1 - self.A1  # lift: in W
        d2 = self.O2 + rot_z(q[1]) @ self.B2 - self.A2  # tilt: in L
        s1 = jnp.hypot(d1[0], d1[1])
        s2 = jnp.hypot(d2[0], d2[1])
        s1 = runtime_check(s1, ~(s1 > 0), "lift_tilt_crane: lift cylinder pins coincide")
        s2 = runtime_check(s2, ~(s2 > 0), "lift_tilt_crane: tilt cylinder pins coincide")
        a1 = jnp.arctan2(d1[1], d1[0])
        a2 = jnp.arctan2(d2[1], d2[0])
        return jnp.stack([q[0], q[1], a1, s1, a2, s2])


def lift_tilt_crane(full: bool = False, *, payload: float = 0.0) -> Model:
    """The spec's lift/tilt crane mechanics.

    Args:
        full: False: the two booms alone, ``qhat = q = [q1, q2]`` (what a controller's model
            holds). True: the plant, which adds each cylinder's tube (15 kg) and rod with piston
            (8 kg) as bodies moved by the coordinate map `CraneLoops`.
        payload: a point mass at the tool frame origin, kg (0 nominal, 0-250 in experiments);
            with 0 no payload body is added.

    The hydraulics (cylinders, valves, pressures, friction) are added by
    `jaxmb.models.crane_hydraulics.lift_tilt_crane_plant`."""
    if not payload >= 0:
        raise ValueError(f"lift_tilt_crane: payload must be >= 0 kg, got {payload}")
    frames = [
        Frame("L", "S", translation=O1, joint="revolute", axis=[0, 0, 1], coordinate="q1"),
        Frame("T", "L", translation=O2, joint="revolute", axis=[0, 0, 1], coordinate="q2"),
        Frame("tool", "T", translation=TOOL),
    ]
    bodies = [
        Body("lift_boom", "L", LIFT_BOOM["mass"], LIFT_BOOM["com"], BOOM_INERTIA, "C_L"),
        Body("tilt_boom", "T", TILT_BOOM["mass"], TILT_BOOM["com"], BOOM_INERTIA, "C_T"),
    ]
    if payload > 0:
        bodies.append(Body("payload", "tool", payload, jnp.zeros(3), jnp.zeros((3, 3))))
    if not full:
        return Model(frames, bodies, gravity=GRAVITY)
    for name, coord_a, coord_s in (
        ("lift", "alpha_lift", "s_lift"),
        ("tilt", "alpha_tilt", "s_tilt"),
    ):
        base_frame, base_point = CYLINDERS[name]["base"]
        frames += [
            Frame(
                f"{name}_tube",
                base_frame,
                translation=base_point,
                joint="revolute",
                axis=[0, 0, 1],
                coordinate=coord_a,
            ),
            Frame(
                f"{name}_rod", f"{name}_tube", joint="prismatic", axis=[1, 0, 0], coordinate=coord_s
            ),
        ]
        m_t, c_t, l_t = TUBE
        m_r, c_r, l_r = ROD
        bodies += [
            Body(f"{name}_tube", f"{name}_tube", m_t, [c_t, 0, 0], _slender(m_t, l_t)),
            Body(f"{name}_rod", f"{name}_rod", m_r, [-c_r, 0, 0], _slender(m_r, l_r)),
        ]
    return Model(
        frames,
        bodies,
        gravity=GRAVITY,
        coordinate_map=CraneLoops(),
        augmented_names=("q1", "q2", "alpha_lift", "s_lift", "alpha_tilt", "s_tilt"),
    )


# "Cylinders" (hydraulics): bore 100 mm, rod 56 mm, dead volume, bulk modulus, pressures, valves
AREA_A = 7.853982e-3  # m^2
AREA_B = 5.390973e-3  # m^2
DEAD_VOLUME = 1.9e-4  # m^3 per chamber
BETA = 1.0e9  # Pa
P_SUPPLY = 185e5  # Pa
P_RETURN = 10e5  # Pa
VALVE_RATING = {"lift": (40e-3 / 60, 35e5), "tilt": (100e-3 / 60, 35e5)}  # (m^3/s, Pa) per notch
FRICTION = {"F_c": 210.0, "F_s": 300.0, "v_s": 5e-3, "sigma": 330.0, "v_eps": 1e-3}
# LuGre with the same Coulomb/static/viscous levels; bristle stiffness and damping are this
# project's choice (the spec gives the static curve only): sigma0 1e6 N/m, sigma1 ~ critical
LUGRE = {"sigma0": 1e6, "sigma1": 2e3, "sigma2": 330.0, "F_c": 210.0, "F_s": 300.0, "v_s": 5e-3}


def lift_tilt_crane_plant(
    full: bool = True,
    *,
    payload: float = 0.0,
    friction: str = "stribeck",
    spool: str = "none",
    beta=BETA,
    **valve_options,
):
    """The spec's crane with its hydraulics: a `jaxmb.plant.HydraulicPlant` with actuators
    ``lift`` and ``tilt`` (commands ``u_lift``, ``u_tilt`` in V; signals ``p_a_lift``, ...,
    ``x_tilt``).

    Args:
        full: mechanics with the cylinder bodies (the plant) or without (a model's view).
        payload: point mass at the tool, kg.
        friction: ``"stribeck"`` (the spec's smooth law), ``"lugre"`` (same levels, with a
            bristle state) or ``"none"``.
        spool: valve spool lag, ``"none"``, ``"first"`` or ``"second"`` (`jaxmb.hydraulics.Valve`).
        beta: effective bulk modulus, Pa.
        valve_options: passed to `Valve.from_datasheet` (``dp_width``, ``tau``, ...).

    Valves: flow coefficients from the datasheet rating (NG6 40 l/min and NG10 100 l/min at
    35 bar per notch at 10 V), lift ``3.563483e-8``, tilt ``8.908708e-8`` m^3 s^-1 V^-1 Pa^-1/2."""
    from ..hydraulics import (
        Cylinder,
        CylinderMount,
        HydraulicActuator,
        LuGreFriction,
        StribeckFriction,
        Valve,
    )
    from ..plant import HydraulicPlant

    if friction not in ("stribeck", "lugre", "none"):
        raise ValueError(
            f"lift_tilt_crane_plant: friction must be 'stribeck', 'lugre' or 'none', got {friction!r}"
        )
    model = lift_tilt_crane(full=full, payload=payload)
    actuators = []
    for name in ("lift", "tilt"):
        c = CYLINDERS[name]
        mount = CylinderMount(c["base"][0], c["base"][1], c["rod"][0], c["rod"][1], c["l_min"])
        cyl = Cylinder(AREA_A, AREA_B, c["stroke"], DEAD_VOLUME, DEAD_VOLUME, beta)
        valve = Valve.from_datasheet(
            *VALVE_RATING[name], P_SUPPLY, P_RETURN, spool=spool, **valve_options
        )
        fr = {
            "stribeck": lambda: StribeckFriction(**FRICTION),
            "lugre": lambda: LuGreFriction(**LUGRE),
            "none": lambda: None,
        }[friction]()
        actuators.append(HydraulicActuator(name, mount, cyl, valve, fr))
    return HydraulicPlant(model, actuators)
