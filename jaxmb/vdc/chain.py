"""Chains of VDC segments (Petrovic & Mattila (2022)), base to tip: motion, actuator forces and
required forces. Conventions: `jaxmb.vdc`."""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxmb.multibody.checks import check_finite, checked, finite_inputs, not_finite
from jaxmb.multibody.model import rotation_improper
from jaxmb.vdc.rigid_body import accompanying_function, net_force, required_net_force
from jaxmb.vdc.segments import (
    PrismaticSegment,
    RevoluteSegment,
    prismatic_forces,
    prismatic_rotations,
    prismatic_velocities,
    revolute_actuator_force,
    revolute_driven_force,
    revolute_rotations,
    revolute_velocities,
)

__all__ = [
    "VDCChain",
    "ChainMotion",
    "VDCForces",
    "RequiredForces",
    "stability_frames",
    "chain_bodies",
    "chain_motion",
    "actuator_forces",
    "required_forces",
]

# --------------------------------------------------------------------------------------------
# chains of segments
# --------------------------------------------------------------------------------------------

_REV_BODIES = (("B0", "link0"), ("B1", "link1"), ("B3", "tube"), ("B4", "piston"))
_PRI_BODIES = (("P2", "case"), ("B5", "piston"), ("P3", "load"))


class VDCChain(eqx.Module):
    r"""Segments in series, base to tip: segment j+1's driven point is segment j's E frame
    (``E_1j`` of a revolute, ``E_2j`` of a prismatic segment, eqs. (16)-(17)), the last E frame is
    the end effector ``D_1n``/``D_2n``.

    Attributes:
        segments: `RevoluteSegment` / `PrismaticSegment`, base to tip (static structure).
        gravity: gravity in the inertial frame W, m/s^2.
        q_offset: ``q_vdc = q + q_offset``: segment coordinates from the model's, rad or m.
        R_WC: orientation of segment 1's driven frame in W when the base is fixed (the default
            of the chain functions' ``R_WC`` argument)."""

    segments: tuple[RevoluteSegment | PrismaticSegment, ...]
    gravity: Float[Array, "3"]
    q_offset: Float[Array, " n"]
    R_WC: Float[Array, "3 3"]

    def __init__(self, segments, gravity, q_offset=None, R_WC=None):
        self.segments = tuple(segments)
        for s in self.segments:
            if not isinstance(s, RevoluteSegment | PrismaticSegment):
                raise ValueError(
                    f"VDCChain: segments must be RevoluteSegment or PrismaticSegment, got "
                    f"{type(s).__name__}"
                )
        n = len(self.segments)
        self.gravity = checked(gravity, not_finite, "VDCChain: gravity must be finite", (3,))
        self.q_offset = checked(
            jnp.zeros(n) if q_offset is None else q_offset,
            not_finite,
            "VDCChain: q_offset must be finite",
            (n,),
        )
        self.R_WC = checked(
            jnp.eye(3) if R_WC is None else R_WC,
            rotation_improper,
            "VDCChain: R_WC must be a proper rotation",
            (3, 3),
        )

    @property
    def n(self) -> int:
        return len(self.segments)


class ChainMotion(NamedTuple):
    """Velocities, their time derivatives and orientations of every frame of a chain, keyed
    ``"<frame>_<j>"`` (e.g. ``"B4_2"``, j from 1): ``V`` and ``Vd`` are ``[v; omega]`` (6,) in
    the frame's coordinates, ``R`` (3, 3) its orientation in W."""

    V: dict[str, Array]
    Vd: dict[str, Array]
    R: dict[str, Array]


class VDCForces(NamedTuple):
    """Result of `actuator_forces`.

    Fields:
        f_c: (n,) actuator force of every segment (f_cj of eq. (68), f_ctj of eq. (55)), N.
        F_c: (6,) ``[f; m]`` at segment 1's driven point (eq. (69) / (56)), N and N m.
        F_seg: (n, 6) the driven-point force of every segment.
        F_net: net forces F* (eq. (7)) of every body, keyed as in `ChainMotion`."""

    f_c: Array
    F_c: Array
    F_seg: Array
    F_net: dict[str, Array]


class RequiredForces(NamedTuple):
    """Result of `required_forces`.

    Fields:
        f_cr: (n,) required actuator forces (eqs. (76), (73)), N; the required piston force of
            eq. (90) is this plus the cylinder's friction model.
        F_cr: (6,) required force at segment 1's driven point (eq. (77) / (74)).
        dV: (k, 6) ``V_r - V`` for the frames of eq. (94), in `stability_frames` order.
        dF: (k, 6) ``F*_r - F*`` for the same frames, or None when ``qdd`` is not given.
        v: (k,) the accompanying functions v_A of eq. (96), J."""

    f_cr: Array
    F_cr: Array
    dV: Array
    dF: Array | None
    v: Array


def stability_frames(chain: VDCChain) -> tuple[str, ...]:
    """Names of the frames of eq. (94) (one per body) in the order `required_forces` uses."""
    out = []
    for j, seg in enumerate(chain.segments, start=1):
        pairs = _REV_BODIES if isinstance(seg, RevoluteSegment) else _PRI_BODIES
        out += [f"{f}_{j}" for f, _ in pairs]
    return tuple(out)


def _check_n(chain: VDCChain, x, name: str) -> Array:
    if jnp.shape(x) != (chain.n,):
        raise ValueError(
            f"{name}: expected shape ({chain.n},) for {chain.n} segments, got {jnp.shape(x)}"
        )
    return check_finite(x, name)


def _velocities(chain: VDCChain, q, qd, V_c) -> dict[str, Array]:
    """All frames' velocities, base to tip (eqs. (24)-(34)); q already offset."""
    out = {}
    V = V_c
    for j, seg in enumerate(chain.segments):
        if isinstance(seg, RevoluteSegment):
            Vs = revolute_velocities(seg, q[j], qd[j], V)
            V = Vs["E1"]
        else:
            Vs = prismatic_velocities(seg, q[j], qd[j], V)
            V = Vs["E2"]
        out.update({f"{k}_{j + 1}": v for k, v in Vs.items()})
    return out


def _rotations(chain: VDCChain, q, R_WC) -> dict[str, Array]:
    out = {}
    R = R_WC
    for j, seg in enumerate(chain.segments):
        if isinstance(seg, RevoluteSegment):
            Rs = revolute_rotations(seg, q[j], R)
            R = Rs["E1"]
        else:
            Rs = prismatic_rotations(seg, q[j], R)
            R = Rs["E2"]
        out.update({f"{k}_{j + 1}": v for k, v in Rs.items()})
    return out


def _defaults(chain, V_c, Vd_c, R_WC, F_D, names=("V_c", "Vd_c", "R_WC", "F_D")):
    z = jnp.zeros(6, dtype=chain.gravity.dtype)

    def given(x, name, shape, default):
        if x is None:
            return default
        if jnp.shape(x) != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {jnp.shape(x)}")
        return check_finite(x, name)

    return (
        given(V_c, names[0], (6,), z),
        given(Vd_c, names[1], (6,), z),
        given(R_WC, names[2], (3, 3), chain.R_WC),
        given(F_D, names[3], (6,), z),
    )


def _tip_to_base(chain: VDCChain, q, F_net, F_D):
    """Actuator forces and driven-point forces, tip to base (eqs. (50), (60), (51)-(56), (68), (69))."""
    n = chain.n
    f = [None] * n
    Fc = [None] * n
    F_E = F_D  # eq. (60) / (50): the end effector's D frame
    for j in reversed(range(n)):
        seg = chain.segments[j]
        k = lambda name: F_net[f"{name}_{j + 1}"]  # noqa: B023, E731
        if isinstance(seg, RevoluteSegment):
            f[j] = revolute_actuator_force(seg, q[j], k("B1"), k("B3"), k("B4"), F_E)  # eq. (68)
            Fc[j] = revolute_driven_force(seg, q[j], k("B0"), k("B1"), k("B3"), k("B4"), F_E)
        else:
            f[j], Fc[j] = prismatic_forces(seg, q[j], k("P2"), k("B5"), k("P3"), F_E)
        F_E = Fc[j]  # eq. (60): E_1,j-1 = B_c,j (or P_2,j-1)
    return jnp.stack(f), jnp.stack(Fc)


def chain_bodies(chain: VDCChain):
    """(frame key, body) for every body of the chain, in `stability_frames` order."""
    out = []
    for j, seg in enumerate(chain.segments, start=1):
        pairs = _REV_BODIES if isinstance(seg, RevoluteSegment) else _PRI_BODIES
        out += [(f"{f}_{j}", getattr(seg, b)) for f, b in pairs]
    return out


@finite_inputs
@eqx.filter_jit
def chain_motion(
    chain: VDCChain,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qdd: Float[ArrayLike, " n"],
    *,
    V_c: Float[ArrayLike, "6"] | None = None,
    Vd_c: Float[ArrayLike, "6"] | None = None,
    R_WC: Float[ArrayLike, "3 3"] | None = None,
) -> ChainMotion:
    r"""Every frame's velocity (Petrovic & Mattila (2022) eqs. (24)-(34), base to tip), its time
    derivative (`jax.jvp` of the same recursion along $(\dot q, \ddot q, {}^{B_{c1}}\dot V)$) and
    its orientation in W.

    Args:
        q, qd, qdd: the chain's coordinates (model convention, ``q_offset`` is added), rad or m.
        V_c, Vd_c: ``[v; omega]`` of segment 1's driven frame and its derivative (default 0:
            a fixed base).
        R_WC: orientation of segment 1's driven frame in W (default ``chain.R_WC``)."""
    q = _check_n(chain, q, "q") + chain.q_offset
    qd, qdd = _check_n(chain, qd, "qd"), _check_n(chain, qdd, "qdd")
    V_c, Vd_c, R_WC, _ = _defaults(chain, V_c, Vd_c, R_WC, None)
    V, Vd = jax.jvp(lambda a, b, c: _velocities(chain, a, b, c), (q, qd, V_c), (qd, qdd, Vd_c))
    return ChainMotion(V, Vd, _rotations(chain, q, R_WC))


@finite_inputs
@eqx.filter_jit
def actuator_forces(
    chain: VDCChain,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qdd: Float[ArrayLike, " n"],
    *,
    V_c: Float[ArrayLike, "6"] | None = None,
    Vd_c: Float[ArrayLike, "6"] | None = None,
    R_WC: Float[ArrayLike, "3 3"] | None = None,
    F_D: Float[ArrayLike, "6"] | None = None,
) -> VDCForces:
    r"""Inverse dynamics by virtual decomposition (Petrovic & Mattila (2022) Section 6, Fig. 8):
    velocities base to tip (eqs. (24)-(34)), net forces of every body (eq. (7)), then forces tip
    to base through the E frames (eqs. (50), (60)): eqs. (51)-(56) for a prismatic segment and
    Theorems 3-4, eqs. (68)-(69), for a revolute one.

    Args:
        q, qd, qdd: see `chain_motion`; V_c, Vd_c, R_WC: segment 1's driven frame (default fixed).
        F_D: ``[f; m]`` the end effector exerts on its surroundings, in the tip frame (default 0;
            an external wrench W acting on the tool is ``F_D = -W``).

    Frictionless pins (eqs. (57)-(59)); cylinder friction is not included."""
    motion = chain_motion(chain, q, qd, qdd, V_c=V_c, Vd_c=Vd_c, R_WC=R_WC)
    _, _, _, F_D = _defaults(chain, None, None, None, F_D)
    F_net = {
        k: net_force(b, motion.V[k], motion.Vd[k], motion.R[k], chain.gravity)  # eq. (7)
        for k, b in chain_bodies(chain)
    }
    f, Fc = _tip_to_base(chain, _check_n(chain, q, "q") + chain.q_offset, F_net, F_D)
    return VDCForces(f, Fc[0], Fc, F_net)


@finite_inputs
@eqx.filter_jit
def required_forces(
    chain: VDCChain,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qd_r: Float[ArrayLike, " n"],
    qdd_r: Float[ArrayLike, " n"],
    K: Float[ArrayLike, "... 6 6"],
    F_D_r: Float[ArrayLike, "6"] | None = None,
    *,
    qdd: Float[ArrayLike, " n"] | None = None,
    V_c: Float[ArrayLike, "6"] | None = None,
    Vd_c: Float[ArrayLike, "6"] | None = None,
    V_cr: Float[ArrayLike, "6"] | None = None,
    Vd_cr: Float[ArrayLike, "6"] | None = None,
    R_WC: Float[ArrayLike, "3 3"] | None = None,
) -> RequiredForces:
    r"""Required forces of the VDC control law (Petrovic & Mattila (2022) Section 6, Fig. 9).

    Required velocities ${}^A V_r$ by eqs. (38)-(48) (the velocity recursion with $\dot q_r$ and
    ${}^{B_{c1}}V_r$, at the measured q), their derivatives by `jax.jvp` along
    $(\dot q, \ddot q_r, {}^{B_{c1}}\dot V_r)$, required net forces by eq. (8), then eqs. (71)-(77)
    tip to base: the required actuator forces $f_{cjr}$ (eq. (76)) and $f_{ctjr}$ (eq. (73)).

    Args:
        q, qd: measured coordinates and rates (model convention).
        qd_r, qdd_r: required rates (eqs. (35)-(37)) and their time derivatives.
        K: K_A of eq. (8), one (6, 6) for every frame or (k, 6, 6) in `stability_frames` order.
        F_D_r: required ``[f; m]`` the end effector exerts (eq. (75)); default 0.
        qdd: measured accelerations; when given, ``dF = F*_r - F*`` (eqs. (7)-(8)) is returned
            too, for checking the virtual stability of every body (eq. (99)).
        V_c, Vd_c, V_cr, Vd_cr, R_WC: segment 1's driven frame, measured and required."""
    q = _check_n(chain, q, "q")
    qd, qd_r, qdd_r = (
        _check_n(chain, x, n) for x, n in ((qd, "qd"), (qd_r, "qd_r"), (qdd_r, "qdd_r"))
    )
    V_c, Vd_c, R_WC, F_D_r = _defaults(
        chain, V_c, Vd_c, R_WC, F_D_r, names=("V_c", "Vd_c", "R_WC", "F_D_r")
    )
    V_cr, Vd_cr, _, _ = _defaults(chain, V_cr, Vd_cr, None, None, names=("V_cr", "Vd_cr", "", ""))
    qv = q + chain.q_offset
    V = _velocities(chain, qv, qd, V_c)
    V_r, Vd_r = jax.jvp(
        lambda a, b, c: _velocities(chain, a, b, c), (qv, qd_r, V_cr), (qd, qdd_r, Vd_cr)
    )  # eqs. (38)-(48) and their time derivatives
    R = _rotations(chain, qv, R_WC)
    bodies = chain_bodies(chain)
    K = jnp.asarray(K)
    Ks = [K] * len(bodies) if K.ndim == 2 else list(K)
    if len(Ks) != len(bodies):
        raise ValueError(f"K: expected (6, 6) or ({len(bodies)}, 6, 6), got {K.shape}")
    F_r = {
        k: required_net_force(b, V_r[k], Vd_r[k], V[k], R[k], chain.gravity, Kk)  # eq. (8)
        for (k, b), Kk in zip(bodies, Ks, strict=True)
    }
    f_r, Fc_r = _tip_to_base(chain, qv, F_r, F_D_r)  # eqs. (71)-(77)
    dV = jnp.stack([V_r[k] - V[k] for k, _ in bodies])
    v = jnp.stack([accompanying_function(b, V_r[k], V[k]) for k, b in bodies])  # eq. (96)
    dF = None
    if qdd is not None:
        m = chain_motion(chain, q, qd, qdd, V_c=V_c, Vd_c=Vd_c, R_WC=R_WC)
        dF = jnp.stack(
            [F_r[k] - net_force(b, m.V[k], m.Vd[k], m.R[k], chain.gravity) for k, b in bodies]
        )
    return RequiredForces(f_r, Fc_r[0], dV, dF, v)
