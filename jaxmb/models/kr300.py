r"""The KUKA KR300 R2500 ultra (Quantec) six-axis industrial robot: rigid-body model, drive data
and the coordinate conventions of Weigand et al.'s recordings.

Kinematics and inertias are the published Robotics-Toolbox model of Weigand, Ulmen, Janot and
Ruskowski (2021) (repository JonasWeigand/Robot_Identification, ``robot_model/``, MIT licence),
restated in ``../shared/data/real/kuka-kr300-weigand/KR300_MODEL.md``: standard (distal)
Denavit-Hartenberg links

    T_{i-1,i} = Rz(theta_i + offset_i) Tz(d_i) Tx(a_i) Rx(alpha_i),   base = Rx(180 deg),

with the world S z-up and gravity ``[0, 0, -9.81]``; the base rotation makes DH frame 0 point
z down, so positive A1 turns clockwise seen from above (KUKA's convention).

Mapping to jaxmb frames (a jaxmb `Frame` is a fixed placement *then* the joint motion):

- ``"A{i}"``: joint frame i, placement ``[DH link frame i-1] @ Rz(offset_i)``, revolute about z
  driven by coordinate ``q{i}`` (``Rz(offset)`` commutes with the joint rotation, so
  ``theta_i = q_i + offset_i`` as in the toolbox);
- ``"L{i}"``: DH link frame i, fixed child of ``A{i}`` with placement ``Tz(d_i) Tx(a_i) Rx(alpha_i)``;
  body ``link{i}`` (COM and inertia as published, in that frame) is attached to it;
- ``"base"`` (DH frame 0, ``Rx(pi)`` in S) and ``"tool"`` (``L6 @ Ry(-90 deg)``).

Coordinates: ``q1..q6`` are the toolbox's joint variables, which equal KUKA's axis angles
A1..A6 (the joint limits below are KUKA's, e.g. A2 in [-140, -5] deg). The recordings store
positions *relative to the home pose* ``KR300_HOME = [0, -90, 90, 0, 0, 0] deg`` (Weigand et al.,
``ident_functions/robot_dynamics.m``: ``q_global = q + qs``), with the same directions, so
``q_model = q_recorded + KR300_HOME``; see `from_recorded`.

Link 6 is not published (the authors only give 17.78 kg at -0.05 m plus a 200 kg payload at
+0.10 m on z6): `kr300` models it as a solid cylinder flange of 17.78 kg (radius 0.101 m, length
0.101 m, COM at z6 = -0.05 m) plus a point payload whose mass and COM are parameters. The
flange size reproduces the link-6 inertia implied by the authors' own model outputs (see
`kr300_authors`).

Axis 2 carries a hydro-pneumatic weight counterbalance; its torque is not part of the rigid-body
`Model` (it is an actuator); `KR300Counterbalance` gives the authors' model of it.
"""

from fractions import Fraction

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxmb.multibody.model import Body, Frame, Model, replace_body

__all__ = [
    "KR300_DH",
    "KR300_HOME",
    "KR300Drives",
    "DriveTerms",
    "GEAR_RATIOS",
    "KR300Counterbalance",
    "from_recorded",
    "kr300",
    "kr300_authors",
    "kr300_drives",
    "to_recorded",
]

_DEG = np.pi / 180.0

# Standard DH table (Weigand et al. (2021) robot_model/model_KUKA_Quantec_Ultra_KR300.m):
# columns d (m), a (m), alpha (rad), offset (rad).
KR300_DH: np.ndarray = np.array(
    [
        [-0.675, 0.350, np.pi / 2, 0.0],
        [-0.189, 1.150, 0.0, 0.0],
        [0.189, 0.041, -np.pi / 2, np.pi / 2],
        [-1.0, 0.0, np.pi / 2, 0.0],
        [0.0, 0.0, -np.pi / 2, 0.0],
        [-0.24, 0.0, np.pi, 0.0],
    ]
)

# Links 1-5: mass (kg), COM in DH link frame i (m), inertia about the COM in link frame i
# as [Ixx, Iyy, Izz, Ixy, Iyz, Ixz] (kg m^2), the toolbox's order.
_LINK_MASS = (395.40, 339.12, 105.21, 35.80, 31.46)
_LINK_COM = (
    (-0.353, 0.174, -0.004),
    (-0.709, -0.001, 0.023),
    (-0.018, -0.018, -0.076),
    (0.0, 0.236, 0.001),
    (0.0, -0.080, -0.009),
)
_LINK_INERTIA = (
    (16.733765, 29.799119, 32.814954, -1.703664, 0.129384, 4.404062),
    (7.507819, 88.886691, 88.673761, 0.430046, 0.173157, -4.396607),
    (10.783798, 10.186135, 1.943179, 0.118474, -0.606384, -0.101950),
    (0.425035, 0.217993, 0.428465, -0.000004, -0.011353, -0.000027),
    (0.283826, 0.229562, 0.258266, -0.000004, -0.019521, -0.000120),
)
# Link 6 (axis 6 flange): published mass and COM; the inertia is our assumption (module doc).
_FLANGE_MASS = 17.78
_FLANGE_COM = (0.0, 0.0, -0.050)
_FLANGE_RADIUS = 0.101  # reproduces the authors' link-6 inertia (kr300_authors)
_FLANGE_LENGTH = 0.101

KR300_HOME: np.ndarray = np.array([0.0, -np.pi / 2, np.pi / 2, 0.0, 0.0, 0.0])
"""Home pose in model coordinates (rad); the recordings' positions are relative to it."""


def from_recorded(q_recorded: Float[ArrayLike, "*b 6"]) -> Float[Array, "*b 6"]:
    """Model coordinates (KUKA axis angles, rad) from the recordings' positions (rad, relative
    to the home pose): ``q = q_recorded + KR300_HOME``. Velocities need no mapping."""
    q = jnp.asarray(q_recorded)
    return q + jnp.broadcast_to(KR300_HOME, q.shape)  # explicit: rank promotion may be off


def to_recorded(q: Float[ArrayLike, "*b 6"]) -> Float[Array, "*b 6"]:
    """Inverse of `from_recorded`."""
    q = jnp.asarray(q)
    return q - jnp.broadcast_to(KR300_HOME, q.shape)


def _rx(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0, 0], [0, c, -s], [0, s, c]])


def _ry(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1.0, 0], [-s, 0, c]])


def _rz(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def _inertia_matrix(v) -> np.ndarray:
    """[Ixx, Iyy, Izz, Ixy, Iyz, Ixz] -> symmetric 3x3 (the toolbox's order)."""
    xx, yy, zz, xy, yz, xz = v
    return np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])


def _link6(payload_mass, payload_com) -> tuple[Array, Array, Array]:
    """Mass, COM and inertia about the COM of flange + point payload, in link frame 6.

    Flange: solid cylinder about z6, ``Izz = m r^2 / 2``, ``Ixx = Iyy = m (3 r^2 + h^2) / 12``;
    the two are combined by Steiner's parallel-axis theorem ``I_C += m (|r|^2 1 - r r^T)``."""
    m_f, r, h = _FLANGE_MASS, _FLANGE_RADIUS, _FLANGE_LENGTH
    I_f = jnp.diag(jnp.array([m_f * (3 * r**2 + h**2) / 12] * 2 + [m_f * r**2 / 2]))
    c_f = jnp.asarray(_FLANGE_COM)
    m_p = jnp.asarray(payload_mass, dtype=float)
    c_p = jnp.asarray(payload_com, dtype=float)
    m = m_f + m_p
    c = (m_f * c_f + m_p * c_p) / m

    def steiner(mass, d):
        return mass * (jnp.dot(d, d) * jnp.eye(3) - jnp.outer(d, d))

    I = I_f + steiner(m_f, c_f - c) + steiner(m_p, c_p - c)
    return m, c, I


def kr300(
    payload_mass: float | Float[Array, ""] = 200.0,
    payload_com: tuple[float, ...] | Float[ArrayLike, "3"] = (0.0, 0.0, 0.1),
    *,
    gravity: float | Float[Array, ""] = 9.81,
) -> Model:
    r"""The KR300 R2500 ultra rigid-body model (module doc): 6 revolute joints ``q1..q6``
    (KUKA axis angles A1..A6, rad), bodies ``link1..link6``, gravity ``-gravity`` along S's z.

    Args:
        payload_mass: point payload on the flange, kg (>= 0; the authors' file assumes 200).
        payload_com: its position in DH link frame 6, m (the authors' file: 0.1 m along z6).
        gravity: m/s^2.

    The model is pure rigid-body mechanics: motor armature, friction (`KR300Drives`) and the
    axis-2 counterbalance (`KR300Counterbalance`) are separate. ``payload_mass`` and
    ``payload_com`` may be traced (gradients flow to them)."""
    if not isinstance(payload_mass, jnp.ndarray) and not payload_mass >= 0:
        raise ValueError(f"payload_mass: expected >= 0 kg, got {payload_mass}")
    if np.shape(payload_com) != (3,):
        raise ValueError(f"payload_com: expected shape (3,), got {np.shape(payload_com)}")
    frames = [Frame("base", rotation=_rx(np.pi))]
    parent = "base"
    for i, (d, a, alpha, offset) in enumerate(KR300_DH, start=1):
        frames.append(
            Frame(
                f"A{i}",
                parent,
                rotation=_rz(offset),
                joint="revolute",
                axis=[0.0, 0.0, 1.0],
                coordinate=f"q{i}",
            )
        )
        # the fixed part Tz(d) Tx(a) Rx(alpha) of the DH transform: origin at (a, 0, d) in A_i
        frames.append(Frame(f"L{i}", f"A{i}", rotation=_rx(alpha), translation=[a, 0.0, d]))
        parent = f"L{i}"
    frames.append(Frame("tool", "L6", rotation=_ry(-np.pi / 2)))

    bodies = [
        Body(f"link{i}", f"L{i}", m, c, _inertia_matrix(I))
        for i, (m, c, I) in enumerate(zip(_LINK_MASS, _LINK_COM, _LINK_INERTIA, strict=True), 1)
    ]
    bodies.append(Body("link6", "L6", *_link6(payload_mass, payload_com)))
    g = jnp.asarray(gravity, dtype=float)
    return Model(frames, bodies, gravity=jnp.stack([0.0 * g, 0.0 * g, -g]))


class DriveTerms(eqx.Module):
    """Joint-side drive terms per axis: ``tau_drive = armature qdd + viscous qd
    + coulomb sign(qd)`` (N m, with qd in rad/s)."""

    armature: Float[Array, " 6"]  # G^2 Jm, kg m^2
    viscous: Float[Array, " 6"]  # G^2 B, N m s/rad
    coulomb: Float[Array, " 6"]  # G Tc, N m


class KR300Drives(eqx.Module):
    r"""Gear ratios, motor data and joint limits of the six axes (Weigand et al. (2021) model
    file, in the Robotics Toolbox's motor-referred convention).

    Attributes:
        gear_ratio: G = motor angle / joint angle (exact fractions in `GEAR_RATIOS`).
        motor_inertia: rotor inertia Jm, kg m^2, motor side.
        viscous: motor-side viscous coefficient B, N m s/rad (motor torque per motor speed).
        coulomb: motor-side Coulomb torque Tc, N m.
        q_min, q_max: joint limits, rad (KUKA axis angles, the model's coordinates).

    Motor-side torque tau_m and joint-side torque tau relate by ``tau = G tau_m`` and
    ``qd_motor = G qd``: a motor-side viscous torque ``B qd_motor`` is ``G^2 B qd`` at the joint,
    a Coulomb torque Tc is ``G Tc``, and the rotor's inertia appears as the armature ``G^2 Jm``
    (the toolbox's `rne` adds exactly these). See `joint_side_drive_terms`."""

    gear_ratio: Float[Array, " 6"]
    motor_inertia: Float[Array, " 6"]
    viscous: Float[Array, " 6"]
    coulomb: Float[Array, " 6"]
    q_min: Float[Array, " 6"]
    q_max: Float[Array, " 6"]

    def joint_side_drive_terms(self) -> DriveTerms:
        """Armature ``G^2 Jm``, viscous ``G^2 B`` and Coulomb ``G Tc`` at the joint."""
        G = self.gear_ratio
        return DriveTerms(
            armature=G**2 * self.motor_inertia,
            viscous=G**2 * self.viscous,
            coulomb=G * self.coulomb,
        )


GEAR_RATIOS: tuple[Fraction, ...] = (
    Fraction(1798, 7),
    Fraction(1872, 7),
    Fraction(757, 3),
    Fraction(221),
    Fraction(5032, 21),
    Fraction(206793, 1340),
)


def kr300_drives() -> KR300Drives:
    """The published drive data of the KR300 (module doc; KR300_MODEL.md)."""
    return KR300Drives(
        gear_ratio=jnp.array([float(g) for g in GEAR_RATIOS]),
        motor_inertia=jnp.array([0.00923, 0.0118, 0.0118, 0.00173, 0.00173, 0.00173]),
        viscous=jnp.array(
            [0.001476346, 0.010681832, 0.08398663, 0.001916077, 0.001629877, 0.002205322]
        ),
        coulomb=jnp.array(
            [0.73192436, 1.832264957, 1.862615588, 0.447963801, 0.413155803, 0.372594817]
        ),
        q_min=jnp.array([-147.0, -140.0, -112.0, -350.0, -122.5, -350.0]) * _DEG,
        q_max=jnp.array([147.0, -5.0, 153.0, 350.0, 122.5, 350.0]) * _DEG,
    )


class KR300Counterbalance(eqx.Module):
    r"""The hydro-pneumatic weight counterbalance of axis 2, as modelled by Weigand et al. (2021)
    (``ident_functions/hydraulic_weight_counterbalance.m``; their geometry is read from CAD and
    the piston diameter estimated, so treat the numbers as nominal).

    A gas spring joins an anchor on link 1 at distance ``D`` from axis 2 to an anchor on link 2
    at distance ``k``. With ``delta = q2 - q2_neutral`` the spring length is (law of cosines)
    ``s = sqrt(D^2 + k^2 - 2 D k cos(delta))``, its extension from the shortest length is
    ``x = s - (D - k)``, and extending it compresses the gas isothermally:
    ``p = c_gas / (V_max - A x)`` with ``c_gas = Z R_s T m_gas`` (real-gas law). The spring
    force ``p A`` acts along the spring, at lever ``h = D k sin(delta) / s`` (law of sines), so
    its generalized force on q2 is

        Q_cb(q2) = -h p A = -dU/dq2,   U = c_gas ln(V_max / (V_max - A x)).

    Sign: jaxmb's right-hand side (like gravity, `jaxmb.gravity_forces`); the authors add
    ``+h p A`` to the toolbox's gravity *load* ``G = -Q_g``. The recordings' ``tau_g_all`` is
    ``-Q_g - Q_cb`` (verified in tests/test_kr300.py).

    Attributes:
        D, k: anchor distances from axis 2, m.
        area: annular piston area, m^2.
        c_gas: ``Z R_s T m_gas``, J (N m).
        V_max: gas volume at the shortest spring length, m^3.
        q2_neutral: q2 at the shortest spring length (zero torque), rad.
    """

    D: Float[Array, ""]
    k: Float[Array, ""]
    area: Float[Array, ""]
    c_gas: Float[Array, ""]
    V_max: Float[Array, ""]
    q2_neutral: Float[Array, ""]

    def __init__(
        self,
        D=0.8,
        k=0.2,
        area=np.pi * (0.055**2 - 0.030**2) / 4,  # piston 55 mm, rod 30 mm
        c_gas=1.01 * 296.8 * 328.0 * 2 * 0.0795,  # Z(176 bar) R_N2 T_max m_N2
        V_max=2 * 0.00048,
        q2_neutral=-95.0 * _DEG,
    ):
        for name, v in (("D", D), ("k", k), ("area", area), ("c_gas", c_gas), ("V_max", V_max)):
            if not isinstance(v, jnp.ndarray) and not v > 0:
                raise ValueError(f"KR300Counterbalance: {name} must be > 0, got {v}")
        self.D, self.k, self.area = jnp.asarray(D), jnp.asarray(k), jnp.asarray(area)
        self.c_gas, self.V_max = jnp.asarray(c_gas), jnp.asarray(V_max)
        self.q2_neutral = jnp.asarray(q2_neutral)

    def extension(self, q2: Float[ArrayLike, "*b"]) -> Float[Array, "*b"]:
        """Spring extension x from its shortest length, m."""
        delta = jnp.asarray(q2) - self.q2_neutral
        s = jnp.sqrt(self.D**2 + self.k**2 - 2 * self.D * self.k * jnp.cos(delta))
        return s - (self.D - self.k)

    def pressure(self, q2: Float[ArrayLike, "*b"]) -> Float[Array, "*b"]:
        """Gas pressure, Pa (about 170-200 bar over the workspace, as the authors measured)."""
        return self.c_gas / (self.V_max - self.area * self.extension(q2))

    def __call__(self, q2: Float[ArrayLike, "*b"]) -> Float[Array, "*b"]:
        """Generalized force ``Q_cb`` on q2, N m (right-hand side of the equation of motion)."""
        delta = jnp.asarray(q2) - self.q2_neutral
        s = self.extension(q2) + (self.D - self.k)
        h = self.D * self.k * jnp.sin(delta) / s
        return -h * self.pressure(q2) * self.area


def kr300_authors(
    link6_mass: float | Float[Array, ""] = 150.0, link6_com_z: float | Float[Array, ""] = 0.1
) -> Model:
    """The rigid-body model with which Weigand et al. computed the recordings' ``tau_g_all``,
    ``tau_a_all``, ``tau_c_all`` and ``m_all``: `kr300` with link 6 lumped into one body of
    ``link6_mass`` kg (flange plus payload) with its COM ``link6_com_z`` m along z6 and the
    flange cylinder's inertia about that COM. For the recordings: 150 kg at 0.1 m; their
    published file has 217.78 kg at (200 * 0.1 - 17.78 * 0.05) / 217.78 m.

    Found by fitting, see data/kr300/README.md: with 150 kg at 0.1 m the stored gravity,
    coupling and Coriolis torques and inertia diagonal are reproduced to 2e-4 N m / kg m^2."""
    m = kr300(0.0)
    inertia = m.body("link6").inertia  # payload 0: the flange cylinder alone, about its COM
    z = jnp.asarray(link6_com_z, dtype=float)
    com = jnp.stack([0.0 * z, 0.0 * z, z])
    return replace_body(m, "link6", mass=link6_mass, com=com, inertia=inertia)
