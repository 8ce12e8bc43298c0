r"""The hydraulic lift/tilt crane, exactly as defined in shared/specs/lift_tilt_crane.md.

A planar two-boom crane (PATU 655 geometry and masses, Petrovic & Mattila (2022) Section 7
valves): the lift boom turns about O1 on the base, the tilt boom about O2 on the lift boom, and
each joint is driven by a hydraulic cylinder through a triangle, a revolute segment of
Petrovic & Mattila Figs. 4-5. World W is the model's inertial frame ``"S"``: x horizontal, y up,
z out of the plane, gravity ``[0, -9.81, 0]``.

The crane is a pair of machine files, ``machines/lift_tilt_crane.urdf`` (booms, joints) and
``machines/lift_tilt_crane.toml`` (cylinders, valves, supply, payload), read by
`jaxmb.io.machine.load_machine` exactly as a user's machine is; the constants below are the
spec's numbers for the controllers' and tasks' use (the A-B-C-D task, the VDC chain).

Minimal coordinates ``q = [q1, q2]`` (rad). Frames: ``L`` (lift boom), ``T`` (tilt boom),
``tool``; with ``full=True`` also the cylinder tubes ``lift_tube``, ``tilt_tube`` (origin at the
base pin, x toward the rod pin) and rods ``lift_rod``, ``tilt_rod`` (origin at the rod pin,
axes of the tube). The full model's coordinate map ``Xi(q) -> [q1, q2, alpha_lift, s_lift,
alpha_tilt, s_tilt]`` carries each cylinder's angle and pin distance ``s = |AB|``
(`jaxmb.actuators.cylinder_loops.CylinderLoops`).
"""

import equinox as eqx
import jax.numpy as jnp

from jaxmb.actuators.cylinder_loops import CylinderLoops
from jaxmb.actuators.hydraulics import HydraulicActuator, LuGreFriction, Valve
from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.io.machine import load_machine
from jaxmb.multibody.model import Model
from jaxmb.multibody.spatial import rot_z
from jaxmb.simulation import QuinticWaypoints
from jaxmb.vdc.chain import VDCChain
from jaxmb.vdc.from_model import (
    cylinder_bodies,
    fixed_placement,
    frames_by_name,
    planar_angle,
    rigid_bodies_on,
)
from jaxmb.vdc.rigid_body import zero_body
from jaxmb.vdc.segments import RevoluteSegment

__all__ = [
    "crane_chain",
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

GEOMETRY = {"O1": O1, "O2": O2, "tool": TOOL}

# "The A-B-C-D task": joint-space waypoints (q1, q2), rad
WAYPOINTS = {"A": (0.15, -0.45), "B": (0.95, -0.45), "C": (0.95, 0.25), "D": (0.15, 0.25)}


def abcd_reference():
    """The spec's A-B-C-D task: two loops A-B-C-D-A of quintic rest-to-rest segments in joint
    space, 2 s each (0-16 s), then holding A to 18 s (`jaxmb.simulation.QuinticWaypoints`)."""
    order = "ABCDABCDA"
    return QuinticWaypoints([WAYPOINTS[k] for k in order], segment_time=2.0)


T_FINAL_ABCD = 18.0  # s, the task's simulated time


def lift_tilt_crane(full: bool = False, *, payload: float = 0.0) -> Model:
    """The spec's lift/tilt crane mechanics, read from its machine files like any user's
    machine (``jaxmb/models/machines/lift_tilt_crane.{urdf,toml}``, `jaxmb.io.machine`).

    Args:
        full: False: the two booms alone, ``qhat = q = [q1, q2]`` (what a controller's model
            holds). True: the plant, which adds each cylinder's tube (15 kg) and rod with piston
            (8 kg) as bodies moved by the cylinder loops
            (`jaxmb.actuators.cylinder_loops.CylinderLoops`).
        payload: the point mass ``"payload"`` at the tool frame origin, kg (0 nominal, 0-250 in
            experiments); a body (a leaf) at every value, 0 included.

    Bodies: ``L`` (lift boom), ``T`` (tilt boom), ``payload``; with ``full`` also ``lift_tube``,
    ``lift_rod``, ``tilt_tube``, ``tilt_rod``. The hydraulics (cylinders, valves, pressures,
    friction) come with `lift_tilt_crane_plant`."""
    return lift_tilt_crane_plant(full, payload=payload).model


BETA = 1.0e9  # Pa, the file's bulk modulus (the default of lift_tilt_crane_plant's beta)
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
    """The spec's crane with its hydraulics: a `jaxmb.actuators.plant.HydraulicPlant` with actuators
    ``lift`` and ``tilt`` (commands ``u_lift``, ``u_tilt`` in V; signals ``p_a_lift``, ...,
    ``x_tilt``).

    Args:
        full: mechanics with the cylinder bodies (the plant) or without (a model's view).
        payload: point mass at the tool, kg.
        friction: ``"stribeck"`` (the spec's smooth law), ``"lugre"`` (same levels, with a
            bristle state) or ``"none"``.
        spool: valve spool lag, ``"none"``, ``"first"`` or ``"second"`` (`jaxmb.actuators.hydraulics.Valve`).
        beta: effective bulk modulus, Pa.
        valve_options: passed to `jaxmb.actuators.hydraulics.Valve` (``dp_width``, ``tau``, ...).

    Valves: flow coefficients from the datasheet rating (NG6 40 l/min and NG10 100 l/min at
    35 bar per notch at 10 V), lift ``3.563483e-8``, tilt ``8.908708e-8`` m^3 s^-1 V^-1 Pa^-1/2."""
    if friction not in ("stribeck", "lugre", "none"):
        raise ValueError(
            f"lift_tilt_crane_plant: friction must be 'stribeck', 'lugre' or 'none', got {friction!r}"
        )
    plant = load_machine("crane", payload=payload, cylinder_bodies=full).plant
    actuators = []
    for a in plant.actuators:  # the file's valves and friction, varied as asked
        v = a.valve
        if spool != "none" or valve_options:
            edges = (v.c_pa, v.c_an, v.c_pb, v.c_bn)
            valve_options = {"deadband": v.deadband, "delay": v.delay, **valve_options}
            v = Valve(*edges, v.p_s, v.p_r, u_max=v.u_max, spool=spool, **valve_options)
        fr = {"stribeck": a.friction, "lugre": LuGreFriction(**LUGRE), "none": None}[friction]
        actuators.append(HydraulicActuator(a.name, a.mount, a.cylinder, v, fr))
    plant = HydraulicPlant(plant.model, actuators)
    if beta is not BETA:
        plant = eqx.tree_at(
            lambda p: [a.cylinder.beta for a in p.actuators],
            plant,
            [jnp.asarray(beta, dtype=float)] * len(actuators),
        )
    return plant


def crane_chain(model: Model, l_c: float = 0.30) -> VDCChain:
    r"""The lift/tilt crane (shared/specs/lift_tilt_crane.md) as two revolute segments.

    Segment 1 (lift): ``q_11`` = lift base pin A1 (ground), ``q_1`` = O1, ``q_12`` = rod pin B1;
    ``L_1`` is the ground (massless, fixed: its velocity is zero), ``L_11`` the lift boom.
    Segment 2 (tilt): driven point ``B_c2`` at the tilt base pin A2 on the lift boom
    (``E_11 = B_c2``), ``q_2`` = O2, ``q_22`` = B2; ``L_2`` is massless (the lift boom is
    wholly in ``L_11``: a virtual cut through one rigid body), ``L_21`` the tilt boom with the
    payload, ``E_21 = D_12`` the tool frame. Bodies are read from ``model``
    (`jaxmb.models.lift_tilt_crane`, ``full=True`` for the cylinder bodies; without them the
    cylinders are massless) and re-expressed in their VDC frames.

    The chain takes the crane's ``q = [q1, q2]``: ``q_offset`` holds the constant differences
    ``q_j - q_i`` (angle from B_0j's x to B_1j's x minus the crane angle)."""
    fr = frames_by_name(model)
    Lf, Tf = fr["L"], fr["T"]
    cmap = model.coordinate_map
    if isinstance(cmap, CylinderLoops):  # the pins are the plant's leaves (lift, then tilt)
        A1, A2 = cmap.base_points[0], cmap.base_points[1]
        B1, B2 = cmap.rod_points[0], cmap.rod_points[1]
    else:
        A1, B1, A2, B2 = (
            jnp.asarray(CYLINDERS[c][p][1])
            for c, p in (("lift", "base"), ("lift", "rod"), ("tilt", "base"), ("tilt", "rod"))
        )
    O1, O2 = Lf.translation, Tf.translation
    a1, a2 = planar_angle(O1 - A1), planar_angle(O2 - A2)  # B_0j's x: base pin -> joint
    b1, b2 = planar_angle(B1), planar_angle(B2)  # B_1j's x: joint -> rod pin
    g1, g2 = (
        planar_angle(Lf.rotation[:, 0]),
        planar_angle(Tf.rotation[:, 0]),
    )  # fixed placements about z
    R_1L, R_2T = rot_z(-b1), rot_z(-b2)  # jaxmb boom frame in B_1j
    # E_11 = B_c2: origin A2 in L, x toward O2
    R_B11E, r_B11E = rot_z(a2 - b1), R_1L @ A2
    tool = fixed_placement(model, "tool", "T")
    R_T_tool, r_T_tool = tool
    lift_tube, lift_rod = cylinder_bodies(model, "lift_tube", "lift_rod", l_c)
    tilt_tube, tilt_rod = cylinder_bodies(model, "tilt_tube", "tilt_rod", l_c)
    lift = RevoluteSegment(
        L=jnp.linalg.norm(O1 - A1),
        L1=jnp.linalg.norm(B1),
        x0=CYLINDERS["lift"]["l_min"],
        l_c=l_c,
        R_B1E=R_B11E,
        r_B1E=r_B11E,
        link0=zero_body(),
        link1=rigid_bodies_on(model, "L", R_1L, jnp.zeros(3)),
        tube=lift_tube,
        piston=lift_rod,
    )
    tilt = RevoluteSegment(
        L=jnp.linalg.norm(O2 - A2),
        L1=jnp.linalg.norm(B2),
        x0=CYLINDERS["tilt"]["l_min"],
        l_c=l_c,
        R_B1E=R_2T @ R_T_tool,
        r_B1E=R_2T @ r_T_tool,
        link0=zero_body(),
        link1=rigid_bodies_on(model, "T", R_2T, jnp.zeros(3)),
        tube=tilt_tube,
        piston=tilt_rod,
    )
    offset = jnp.stack([g1 + b1 - a1, g2 + b2 - a2])
    return VDCChain((lift, tilt), model.gravity, q_offset=offset, R_WC=rot_z(a1))
