r"""Virtual decomposition of hydraulic manipulators in series (Petrovic & Mattila (2022)).

A manipulator is a chain of *segments*, base to tip. A revolute segment (Figs. 4, 5a) is a passive
revolute joint ``q_j`` driven by a hydraulic cylinder through a triangle: the link ``L_j`` from the
cylinder's base pin ``q_j1`` to the joint, the link ``L_j1`` from the joint to the rod pin ``q_j2``,
the cylinder tube and the piston with its rod. A prismatic segment (Figs. 5b-c) is a cylinder case,
a piston and a mass object ``O_2j`` driven along the case's x axis. Every segment is cut from its
predecessor at its *driven* point (``B_cj`` or ``P_2j``) and drives its successor through ``E_1j``
(or ``E_2j``), eqs. (16)-(17); the last segment's ``E`` frame is the end effector ``D_1n``.

Conventions, *inside this module only* (Petrovic & Mattila (2022) eqs. (1)-(2)):

- velocities are ``V = [v; omega]`` and forces ``F = [f; m]`` in body-fixed coordinates, as the
  paper writes them. The rest of jaxmb uses ``[omega; v]`` and ``[m; f]``: convert with `to_vdc`
  and `from_vdc` at the boundary and nowhere else.
- ``^A U_B`` of eqs. (5)-(6) maps forces ``^A F = ^A U_B ^B F`` and velocities
  ``^B V = ^A U_B^T ^A V`` (eqs. (3)-(4)).
- ``^A F`` at a cut is the force exerted *on* the subsystem downstream of the cut (on the body
  whose frame is A), so ``^{E_1j}F`` is what link ``L_j1`` exerts on its successor, and at the
  tip ``^{D_1n}F`` is what the end effector exerts on its surroundings: an external wrench ``W``
  acting *on* the tool enters as ``F_D = -W``.
- ``F*`` is the net force of eq. (7) *without* gravity: ``G_A`` is minus the weight wrench.
- All joint axes are z; the frames of one segment share the plane of its triangle.

Frames of a revolute segment (Section 3.1): ``B_0j = B_2j = B_cj`` at ``q_j1`` with x toward
``q_j``; ``B_1j`` at ``q_j`` with x toward ``q_j2``; ``T_1j = T_2j = T_cj`` at ``q_j2``, oriented
as ``B_1j``; ``B_3j`` at ``q_j1`` with x toward ``q_j2``; ``B_4j`` on the piston, x toward
``q_j2``, at ``l_cj`` before the rod pin; ``P_1j`` at ``q_j2`` oriented as ``B_4j``. The segment
angles are rotations about z: ``q_j`` (B0 -> B1), ``q_j1`` (B0 -> B3), ``q_j2`` (B4 -> T2), so
``q_j = q_j1 + q_j2``.

Accelerations ``d/dt(^A V)`` are forward-mode derivatives (`jax.jvp`) of the same velocity
recursion, never hand derivatives. The chain's coordinates are the segments' main joints
(``q_j`` for a revolute segment, the stroke ``x_tj`` for a prismatic one), plus a constant
``q_offset`` so that a model's own joint angles can be used (``q_vdc = q + q_offset``).

References:
    Petrovic, G. & Mattila, J. (2022). Mathematical modelling and virtual decomposition control
    of heavy-duty parallel-serial hydraulic manipulators. Mechanism and Machine Theory 170.
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .checks import check_finite, checked, finite_inputs, not_finite
from .kinematics import frame_jacobian, frame_pose
from .model import Body, Model, inertia_unrealisable, rotation_improper
from .spatial import rot_z, skew

__all__ = [
    "to_vdc",
    "from_vdc",
    "U",
    "RigidBody",
    "transform_body",
    "combine_bodies",
    "M_A",
    "C_A",
    "G_A",
    "net_force",
    "required_net_force",
    "accompanying_function",
    "RevoluteSegment",
    "loop_closure",
    "loop_closure_rates",
    "angle_from_stroke",
    "revolute_velocities",
    "revolute_actuator_force",
    "revolute_actuator_force_appendix",
    "revolute_driven_force",
    "PrismaticSegment",
    "prismatic_velocities",
    "prismatic_forces",
    "VDCChain",
    "ChainMotion",
    "VDCForces",
    "RequiredForces",
    "chain_motion",
    "stability_frames",
    "chain_bodies",
    "actuator_forces",
    "required_forces",
    "driven_point_motion",
    "crane_chain",
    "arm_elbow_segment",
    "arm_elbow_chain",
    "arm_elbow_drive",
    "rigid_body_unchecked",
]

# unit vectors of eqs. (25)-(29) and (A.6)-(A.8), [v; omega] order
_X_F = 0  # x_f = (1 0 0 0 0 0)^T
_Y_F = 1  # y_f = (0 1 0 0 0 0)^T
_Z_R = 5  # z_r = (0 0 0 0 0 1)^T


# --------------------------------------------------------------------------------------------
# boundary and 6D algebra
# --------------------------------------------------------------------------------------------


def to_vdc(X: Float[ArrayLike, "6 ..."]) -> Float[Array, "6 ..."]:
    r"""jaxmb ``[omega; v]`` / ``[m; f]`` to VDC ``[v; omega]`` / ``[f; m]`` (Petrovic & Mattila
    (2022) eqs. (1)-(2)): swaps the two 3-blocks (of a vector, or of the rows of a 6 x k matrix).
    The one place where the two conventions meet."""
    X = jnp.asarray(X)
    return jnp.concatenate([X[3:], X[:3]], axis=0)


def from_vdc(X: Float[ArrayLike, "6 ..."]) -> Float[Array, "6 ..."]:
    r"""VDC ``[v; omega]`` / ``[f; m]`` back to jaxmb ``[omega; v]`` / ``[m; f]`` (the same swap)."""
    return to_vdc(X)


def U(R_AB: Float[ArrayLike, "3 3"], r_AB: Float[ArrayLike, "3"]) -> Float[Array, "6 6"]:
    r"""Force/moment transformation ${}^A U_B = [[R, 0], [(r\times) R, R]]$ (Petrovic & Mattila
    (2022) eqs. (5)-(6)): ${}^A F = {}^A U_B {}^B F$ and ${}^B V = {}^A U_B^\top {}^A V$ (eqs. (3)-(4)).

    Args:
        R_AB: rotation from A to B (columns: B's axes in A).
        r_AB: origin of B in A coordinates, m."""
    R, r = jnp.asarray(R_AB), jnp.asarray(r_AB)
    return jnp.block([[R, jnp.zeros_like(R)], [skew(r) @ R, R]])


def _U_apply(P, F):
    """``^A U_B F`` for ``P = (R_AB, r_AB)`` without forming U (eq. (4)): [R f; r x R f + R m]."""
    R, r = P
    f = R @ F[:3]
    return jnp.concatenate([f, jnp.cross(r, f) + R @ F[3:]])


def _UT_apply(P, V):
    """``^A U_B^T V`` for ``P = (R_AB, r_AB)`` without forming U (eq. (3)): [R^T(v + w x r); R^T w]."""
    R, r = P
    w = V[3:]
    return jnp.concatenate([R.T @ (V[:3] + jnp.cross(w, r)), R.T @ w])


# --------------------------------------------------------------------------------------------
# rigid bodies, eqs. (7)-(8), (96)
# --------------------------------------------------------------------------------------------


class RigidBody(eqx.Module):
    r"""A rigid body in its own VDC frame A (the frame in which eq. (7) is written).

    Attributes:
        mass: kg, >= 0 (0: a massless placeholder, e.g. a virtual part of a link).
        com: ``^A r``, the centre of mass in A coordinates, m.
        inertia: inertia about the COM in A's axes, kg m^2 (symmetric positive semidefinite)."""

    mass: Float[Array, ""]
    com: Float[Array, "3"]
    inertia: Float[Array, "3 3"]

    def __init__(self, mass=0.0, com=(0.0, 0.0, 0.0), inertia=None):
        self.mass = checked(mass, lambda m: ~(m >= 0), "RigidBody: mass must be >= 0", ())
        self.com = checked(com, not_finite, "RigidBody: com must be finite", (3,))
        self.inertia = checked(
            jnp.zeros((3, 3)) if inertia is None else inertia,
            inertia_unrealisable,
            "RigidBody: inertia must be finite, symmetric, positive semidefinite and satisfy the "
            "triangle inequalities of its principal moments",
            (3, 3),
        )


def transform_body(
    body: RigidBody | Body, R_AF: Float[ArrayLike, "3 3"], r_AF: Float[ArrayLike, "3"]
) -> RigidBody:
    r"""The body given in frame F (a `RigidBody`, or a jaxmb `Body` on its frame), expressed in
    frame A, with F placed at ``(R_AF, r_AF)`` in A: ``com_A = R c_F + r``, ``I_A = R I_F R^T``."""
    R, r = jnp.asarray(R_AF), jnp.asarray(r_AF)
    return rigid_body_unchecked(body.mass, R @ body.com + r, R @ body.inertia @ R.T)


def rigid_body_unchecked(mass, com, inertia) -> RigidBody:
    """A RigidBody from (possibly traced) derived values, skipping the constructor's checks."""
    b = object.__new__(RigidBody)
    object.__setattr__(b, "mass", jnp.asarray(mass))
    object.__setattr__(b, "com", jnp.asarray(com))
    object.__setattr__(b, "inertia", jnp.asarray(inertia))
    return b


def combine_bodies(*bodies: RigidBody) -> RigidBody:
    r"""Bodies rigidly joined, all given in the same frame: total mass, mass-weighted COM and
    the parallel-axis sum $\sum_i I_i + m_i(|d_i|^2 1 - d_i d_i^\top)$, $d_i = c_i - c$.

    Lumping is exact for eq. (7): M_A, C_A and G_A are linear in the ten inertial parameters."""
    m = sum(b.mass for b in bodies)
    safe = jnp.where(m > 0, m, 1.0)  # double where: an all-massless lump has its COM at 0
    c = jnp.where(m > 0, sum(b.mass * b.com for b in bodies) / safe, 0.0)
    eye = jnp.eye(3, dtype=c.dtype)
    I = sum(
        b.inertia + b.mass * ((b.com - c) @ (b.com - c) * eye - jnp.outer(b.com - c, b.com - c))
        for b in bodies
    )
    return rigid_body_unchecked(m, c, I)


def _inertia_at_origin(body: RigidBody) -> Array:
    """I_A = I_C + m [r]^T [r], the inertia about the frame origin."""
    S = skew(body.com)
    return body.inertia + body.mass * (S.T @ S)


def M_A(body: RigidBody) -> Float[Array, "6 6"]:
    r"""Mass matrix of eq. (7) for ``V = [v; omega]`` (Petrovic & Mattila (2022) eq. (7); Zhu's
    VDC book): $M_A = [[m 1, -m (r\times)], [m (r\times), I_A]]$, $I_A = I_C - m (r\times)^2$
    the inertia about A's origin. Symmetric; positive definite for a body with mass and a
    non-degenerate inertia."""
    m = body.mass
    S = skew(body.com)
    eye = jnp.eye(3, dtype=S.dtype)
    return jnp.block([[m * eye, -m * S], [m * S, _inertia_at_origin(body)]])


def C_A(body: RigidBody, omega: Float[ArrayLike, "3"]) -> Float[Array, "6 6"]:
    r"""Coriolis/centrifugal matrix of eq. (7), in the skew-symmetric form

    $C_A = [[m (\omega\times), -m (\omega\times)(r\times)], [m (r\times)(\omega\times), -((I_A\omega)\times)]]$

    so that $x^\top C_A x = 0$ for every x (used by the virtual-stability proof, eq. (99)).
    $C_A V$ equals the Newton-Euler terms $[\omega \times p;\; \omega \times h_A + v \times p]$
    with $p = m(v + \omega \times r)$ and $h_A = I_A\omega + m\, r \times v$."""
    m = body.mass
    W = skew(jnp.asarray(omega))
    S = skew(body.com)
    return jnp.block(
        [[m * W, -m * (W @ S)], [m * (S @ W), -skew(_inertia_at_origin(body) @ omega)]]
    )


def G_A(
    body: RigidBody, R_WA: Float[ArrayLike, "3 3"], g_W: Float[ArrayLike, "3"]
) -> Float[Array, "6"]:
    r"""Gravity term of eq. (7): minus the weight wrench at A's origin,
    $G_A = -[m g_A;\; m\, r \times g_A]$ with $g_A = R_{WA}^\top g_W$, so that ${}^A F^*$ is the
    net force of everything but gravity.

    Args:
        R_WA: orientation of A in the inertial frame W.
        g_W: gravity vector in W, m/s^2 (e.g. ``[0, -9.81, 0]``)."""
    g_A = jnp.asarray(R_WA).T @ jnp.asarray(g_W)
    f = body.mass * g_A
    return -jnp.concatenate([f, jnp.cross(body.com, f)])


def _MC_apply(body: RigidBody, omega, Xd, X):
    """``M_A Xd + C_A(omega) X`` with the products written out (cross products instead of 6 x 6
    matrices: the same numbers, a smaller graph to compile)."""
    m, r = body.mass, body.com
    I_A = _inertia_at_origin(body)
    vd, wd, v, w = Xd[:3], Xd[3:], X[:3], X[3:]
    top = m * (vd - jnp.cross(r, wd)) + m * jnp.cross(omega, v - jnp.cross(r, w))
    bottom = (
        m * jnp.cross(r, vd)
        + I_A @ wd
        + m * jnp.cross(r, jnp.cross(omega, v))
        - jnp.cross(I_A @ omega, w)
    )
    return jnp.concatenate([top, bottom])


def net_force(
    body: RigidBody,
    V: Float[ArrayLike, "6"],
    Vd: Float[ArrayLike, "6"],
    R_WA: Float[ArrayLike, "3 3"],
    g_W: Float[ArrayLike, "3"],
) -> Float[Array, "6"]:
    r"""${}^A F^* = M_A \frac{d}{dt}({}^A V) + C_A({}^A\omega)\, {}^A V + G_A$ (Petrovic & Mattila (2022) eq. (7)).

    Args:
        V: ``[v; omega]`` of frame A in A coordinates, m/s and rad/s.
        Vd: the time derivative of V's components, m/s^2 and rad/s^2."""
    V, Vd = jnp.asarray(V), jnp.asarray(Vd)
    return _MC_apply(body, V[3:], Vd, V) + G_A(body, R_WA, g_W)  # eq. (7)


def required_net_force(
    body: RigidBody,
    V_r: Float[ArrayLike, "6"],
    Vd_r: Float[ArrayLike, "6"],
    V: Float[ArrayLike, "6"],
    R_WA: Float[ArrayLike, "3 3"],
    g_W: Float[ArrayLike, "3"],
    K: Float[ArrayLike, "6 6"],
) -> Float[Array, "6"]:
    r"""${}^A F_r^* = M_A \frac{d}{dt}({}^A V_r) + C_A({}^A\omega)\, {}^A V_r + G_A + K_A({}^A V_r - {}^A V)$
    (Petrovic & Mattila (2022) eq. (8)); C_A takes the *measured* angular velocity.

    Args:
        K: the positive-definite gain K_A, N s/m and N m s/rad blocks."""
    V_r, Vd_r, V = jnp.asarray(V_r), jnp.asarray(Vd_r), jnp.asarray(V)
    return (
        _MC_apply(body, V[3:], Vd_r, V_r) + G_A(body, R_WA, g_W) + jnp.asarray(K) @ (V_r - V)
    )  # eq. (8)


def accompanying_function(
    body: RigidBody, V_r: Float[ArrayLike, "6"], V: Float[ArrayLike, "6"]
) -> Float[Array, ""]:
    r"""$v_A = \tfrac12 ({}^A V_r - {}^A V)^\top M_A ({}^A V_r - {}^A V)$ (Petrovic & Mattila (2022) eq. (96)), J."""
    e = jnp.asarray(V_r) - jnp.asarray(V)
    return 0.5 * e @ M_A(body) @ e


# --------------------------------------------------------------------------------------------
# revolute segment, eqs. (18)-(31), (38)-(45), (61)-(69), (76)-(77), Appendices A-B
# --------------------------------------------------------------------------------------------


def _positive(name: str):
    return lambda x: checked(x, lambda v: ~(v > 0), f"{name} must be > 0 and finite", ())


def _zero_body() -> RigidBody:
    return RigidBody(0.0, jnp.zeros(3), jnp.zeros((3, 3)))


class RevoluteSegment(eqx.Module):
    r"""A revolute segment of Petrovic & Mattila (2022) Figs. 4-5a (frames: module docstring).

    Attributes:
        L: ``L_j``, distance from the cylinder base pin ``q_j1`` to the main joint ``q_j``, m.
        L1: ``L_j1``, distance from the main joint to the rod pin ``q_j2``, m.
        x0: ``x_j0``, pin distance at zero stroke (``l_min``), m; the stroke is ``x_j``.
        l_c: ``l_cj``, distance of the piston frame ``B_4j`` before the rod pin, m (any value: the
            actuator force does not depend on it once the piston body is expressed in B_4j).
        R_B1E, r_B1E: placement of ``E_1j`` in ``B_1j`` (the next driven point or the tool).
        link0: link ``L_j`` (driven-point side), in ``B_0j``; massless for a virtual cut.
        link1: link ``L_j1`` and everything rigidly attached (payload), in ``B_1j``.
        tube: the cylinder tube, in ``B_3j``.
        piston: the piston with its rod, in ``B_4j``."""

    L: Float[Array, ""]
    L1: Float[Array, ""]
    x0: Float[Array, ""]
    l_c: Float[Array, ""]
    R_B1E: Float[Array, "3 3"]
    r_B1E: Float[Array, "3"]
    link0: RigidBody
    link1: RigidBody
    tube: RigidBody
    piston: RigidBody

    def __init__(
        self,
        L,
        L1,
        x0,
        l_c,
        R_B1E=None,
        r_B1E=None,
        link0: RigidBody | None = None,
        link1: RigidBody | None = None,
        tube: RigidBody | None = None,
        piston: RigidBody | None = None,
    ):
        self.L = _positive("RevoluteSegment: L")(L)
        self.L1 = _positive("RevoluteSegment: L1")(L1)
        self.x0 = _positive("RevoluteSegment: x0")(x0)
        self.l_c = checked(l_c, not_finite, "RevoluteSegment: l_c must be finite", ())
        self.R_B1E = checked(
            jnp.eye(3) if R_B1E is None else R_B1E,
            rotation_improper,
            "RevoluteSegment: R_B1E must be a proper rotation",
            (3, 3),
        )
        self.r_B1E = checked(
            jnp.zeros(3) if r_B1E is None else r_B1E,
            not_finite,
            "RevoluteSegment: r_B1E must be finite",
            (3,),
        )
        self.link0 = _zero_body() if link0 is None else link0
        self.link1 = _zero_body() if link1 is None else link1
        self.tube = _zero_body() if tube is None else tube
        self.piston = _zero_body() if piston is None else piston


def loop_closure(
    seg: RevoluteSegment, q: Float[ArrayLike, ""]
) -> tuple[Float[Array, ""], Float[Array, ""], Float[Array, ""]]:
    r"""Loop-closure functions: stroke $x_j$ and the triangle angles $q_{j1}, q_{j2}$.

    $x_j = \sqrt{L_j^2 + L_{j1}^2 + 2 L_j L_{j1}\cos q_j} - x_{j0}$ (Petrovic & Mattila (2022) eq. (18)).
    The angles are the directions of the cylinder in B0 and of B1's x axis relative to it:

    $q_{j1} = \operatorname{atan2}(L_{j1}\sin q_j,\; L_j + L_{j1}\cos q_j)$,
    $q_{j2} = \operatorname{atan2}(L_j \sin q_j,\; L_{j1} + L_j\cos q_j)$,

    so $q_{j1} + q_{j2} = q_j$ and both carry the sign of $\sin q_j$. For $\sin q_j < 0$ they equal
    the printed forms $-\arccos(\cdot)$ of eqs. (19)-(20); for $\sin q_j > 0$ (the other hand of
    the triangle, e.g. the crane's tilt segment) the printed forms have the wrong sign.
    Singular when the triangle is flat ($\sin q_j = 0$)."""
    q = jnp.asarray(q)
    s, c = jnp.sin(q), jnp.cos(q)
    l = jnp.sqrt(seg.L**2 + seg.L1**2 + 2 * seg.L * seg.L1 * c)  # eq. (18)
    q1 = jnp.arctan2(seg.L1 * s, seg.L + seg.L1 * c)  # eq. (19), either hand
    q2 = jnp.arctan2(seg.L * s, seg.L1 + seg.L * c)  # eq. (20), either hand
    return l - seg.x0, q1, q2


def loop_closure_rates(
    seg: RevoluteSegment, q: Float[ArrayLike, ""], qd: Float[ArrayLike, ""]
) -> tuple[Float[Array, ""], Float[Array, ""], Float[Array, ""]]:
    r"""$(\dot x_j, \dot q_{j1}, \dot q_{j2})$ from $\dot q_j$ by Petrovic & Mattila (2022) eqs. (21)-(23).

    Valid for either hand of the triangle (they are the derivatives of `loop_closure`); singular
    when the triangle is flat."""
    x, q1, q2 = loop_closure(seg, q)
    l = x + seg.x0
    xd = -seg.L * seg.L1 * jnp.sin(q) / l * qd  # eq. (21)
    q1d = -(l - seg.L * jnp.cos(q1)) / (l * seg.L * jnp.sin(q1)) * xd  # eq. (22)
    q2d = -(l - seg.L1 * jnp.cos(q2)) / (l * seg.L1 * jnp.sin(q2)) * xd  # eq. (23)
    return xd, q1d, q2d


def angle_from_stroke(
    seg: RevoluteSegment, x: Float[ArrayLike, ""], branch: int = -1
) -> Float[Array, ""]:
    r"""Inverse of eq. (18): $q_j = \pm\arccos\big(((x_j + x_{j0})^2 - L_j^2 - L_{j1}^2) / (2 L_j L_{j1})\big)$.

    Args:
        branch: the sign of $\sin q_j$ (static): -1 for the printed hand of eqs. (19)-(20)."""
    if branch not in (-1, 1):
        raise ValueError(f"angle_from_stroke: branch must be -1 or +1, got {branch!r}")
    l = jnp.asarray(x) + seg.x0
    return branch * jnp.arccos((l**2 - seg.L**2 - seg.L1**2) / (2 * seg.L * seg.L1))


def _revolute_placements(seg: RevoluteSegment, q):
    """Placements (R, r) of the segment's frames in their recursion parents, and x_j, q_j1, q_j2."""
    x, q1, q2 = loop_closure(seg, q)
    zero = jnp.zeros_like(seg.L)
    ex = lambda a: jnp.stack([a, zero, zero])  # noqa: E731
    eye = jnp.eye(3, dtype=seg.L.dtype)
    P = {
        "01": (rot_z(q), ex(seg.L)),  # B0 -> B1
        "1Tc": (eye, ex(seg.L1)),  # B1 -> T1 = Tc
        "03": (rot_z(q1), ex(zero)),  # B2 = B0 -> B3
        "34": (eye, ex(x + seg.x0 - seg.l_c)),  # B3 -> B4 (eq. (A.9))
        "4T2": (rot_z(q2), ex(seg.l_c)),  # B4 -> T2 (P1 = B4 shifted by l_c, eq. (A.5))
        "TcE": (seg.R_B1E, seg.r_B1E - ex(seg.L1)),  # Tc -> E1
        "1E": (seg.R_B1E, seg.r_B1E),  # B1 -> E1
    }
    return P, (x, q1, q2)


def revolute_velocities(
    seg: RevoluteSegment,
    q: Float[ArrayLike, ""],
    qd: Float[ArrayLike, ""],
    V_c: Float[ArrayLike, "6"],
) -> dict[str, Float[Array, "6"]]:
    r"""Velocities ``[v; omega]`` of the segment's frames, Petrovic & Mattila (2022) eqs. (24)-(31)
    (required velocities: pass $\dot q_{jr}$ and ${}^{B_{cj}}V_r$, eqs. (38)-(45)).

    Args:
        q, qd: the main joint angle q_j (rad) and its rate.
        V_c: ${}^{B_{cj}}V$, the driven point's velocity.

    Returns ``{"B0", "B1", "Tc", "B3", "B4", "T2", "E1"}``; ``Tc`` (from the link side,
    eq. (26)) and ``T2`` (from the cylinder side, eq. (29)) agree by the loop closure (eq. (30))."""
    P, _ = _revolute_placements(seg, q)
    xd, q1d, q2d = loop_closure_rates(seg, q, qd)
    ez = jnp.zeros(6, dtype=seg.L.dtype).at[_Z_R].set(1.0)
    ex = jnp.zeros(6, dtype=seg.L.dtype).at[_X_F].set(1.0)
    V0 = jnp.asarray(V_c)  # eq. (24): B_c = B_0 = B_2
    V1 = ez * qd + _UT_apply(P["01"], V0)  # eq. (25)
    VTc = _UT_apply(P["1Tc"], V1)  # eq. (26)
    V3 = ez * q1d + _UT_apply(P["03"], V0)  # eq. (27)
    V4 = ex * xd + _UT_apply(P["34"], V3)  # eq. (28)
    VT2 = ez * q2d + _UT_apply(P["4T2"], V4)  # eq. (29)
    VE = _UT_apply(P["TcE"], VTc)  # eq. (31)
    return {"B0": V0, "B1": V1, "Tc": VTc, "B3": V3, "B4": V4, "T2": VT2, "E1": VE}


def _revolute_rotations(seg: RevoluteSegment, q, R_Wc):
    P, _ = _revolute_placements(seg, q)
    R0 = R_Wc
    R1 = R0 @ P["01"][0]
    R3 = R0 @ P["03"][0]
    return {"B0": R0, "B1": R1, "Tc": R1, "B3": R3, "B4": R3, "T2": R1, "E1": R1 @ seg.R_B1E}


def revolute_actuator_force(
    seg: RevoluteSegment,
    q: Float[ArrayLike, ""],
    F1s: Float[ArrayLike, "6"],
    F3s: Float[ArrayLike, "6"],
    F4s: Float[ArrayLike, "6"],
    F_E: Float[ArrayLike, "6"],
) -> Float[Array, ""]:
    r"""Actuator force of Theorem 3 (Petrovic & Mattila (2022) eq. (68); eq. (76) with required forces):

    $f_{cj} = x_f^\top F_4^* - \frac{z_r^\top(F_1^* + {}^{B_1}U_{E_1} F_E)}{L_{j1}\sin q_{j2}}
    - \frac{z_r^\top F_3^* + z_r^\top F_4^* + y_f^\top F_4^* (x_j + x_{j0} - l_{cj})}{(x_j + x_{j0})\tan q_{j2}}$

    with $F_1^*, F_3^*, F_4^*$ the net forces of link L_j1, tube and piston in B1, B3, B4 and
    $F_E = {}^{E_{1j}}F$. N, positive when it pushes the pins apart. Assumes frictionless pins
    (eqs. (57)-(59)); singular when the triangle is flat ($\sin q_{j2} = 0$)."""
    P, (x, _, q2) = _revolute_placements(seg, q)
    F1s, F3s, F4s = jnp.asarray(F1s), jnp.asarray(F3s), jnp.asarray(F4s)
    l = x + seg.x0
    Z = (F1s + _U_apply(P["1E"], jnp.asarray(F_E)))[_Z_R]
    return (
        F4s[_X_F]
        - Z / (seg.L1 * jnp.sin(q2))
        - (F3s[_Z_R] + F4s[_Z_R] + F4s[_Y_F] * (l - seg.l_c)) / (l * jnp.tan(q2))
    )  # eq. (68)


def revolute_actuator_force_appendix(
    seg: RevoluteSegment,
    q: Float[ArrayLike, ""],
    F1s: Float[ArrayLike, "6"],
    F3s: Float[ArrayLike, "6"],
    F4s: Float[ArrayLike, "6"],
    F_E: Float[ArrayLike, "6"],
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    r"""$({}^{B_4}f_x, {}^{B_4}f_y)$, the piston's in-plane force from the tube, by the two steps of
    Appendix A: eq. (A.14) for ${}^{B_4}f_y$, then eq. (A.15) for ${}^{B_4}f_x = f_{cj}$ (eq. (67))."""
    P, (x, _, q2) = _revolute_placements(seg, q)
    F1s, F3s, F4s = jnp.asarray(F1s), jnp.asarray(F3s), jnp.asarray(F4s)
    l = x + seg.x0
    fy = -(F3s[_Z_R] + F4s[_Z_R]) / l + F4s[_Y_F] * seg.l_c / l  # eq. (A.14)
    Z = (F1s + _U_apply(P["1E"], jnp.asarray(F_E)))[_Z_R]
    fx = -Z / (seg.L1 * jnp.sin(q2)) + F4s[_X_F] + (fy - F4s[_Y_F]) / jnp.tan(q2)  # eq. (A.15)
    return fx, fy


def revolute_driven_force(
    seg: RevoluteSegment,
    q: Float[ArrayLike, ""],
    F0s: Float[ArrayLike, "6"],
    F1s: Float[ArrayLike, "6"],
    F3s: Float[ArrayLike, "6"],
    F4s: Float[ArrayLike, "6"],
    F_E: Float[ArrayLike, "6"],
) -> Float[Array, "6"]:
    r"""Force at the driven point, Theorem 4 (Petrovic & Mattila (2022) eq. (69); eq. (77) required):

    ${}^{B_c}F = F_0^* + {}^{B_0}U_{B_1} F_1^* + {}^{B_2}U_{B_3} F_3^* + {}^{B_2}U_{B_3}{}^{B_3}U_{B_4} F_4^*
    + {}^{B_0}U_{B_1}{}^{B_1}U_{E_1} F_E$, free of internal forces."""
    P, _ = _revolute_placements(seg, q)
    # grouped as B0U1 (F1* + B1UE F_E) + B2U3 (F3* + B3U4 F4*): the same sum, fewer products
    F0s, F1s, F3s, F4s, F_E = (jnp.asarray(x) for x in (F0s, F1s, F3s, F4s, F_E))
    link = _U_apply(P["01"], F1s + _U_apply(P["1E"], F_E))
    cylinder = _U_apply(P["03"], F3s + _U_apply(P["34"], F4s))
    return F0s + link + cylinder  # eq. (69)


# --------------------------------------------------------------------------------------------
# prismatic segment, eqs. (32)-(34), (46)-(48), (51)-(56), (71)-(74)
# --------------------------------------------------------------------------------------------


class PrismaticSegment(eqx.Module):
    r"""A prismatic segment of Petrovic & Mattila (2022) Figs. 5b-c: a cylinder case (frame
    ``P_2j``, the driven point, rigid with the preceding link), a piston (``B_5j``, sliding along
    ``P_2j``'s x axis by the stroke ``x_tj``) and a mass object ``O_2j`` (``P_3j``, rigid with the
    piston's rod). Its coordinate is the stroke.

    Attributes:
        x0: distance of ``B_5j``'s origin from ``P_2j``'s along x at zero stroke, m.
        R_B5P3, r_B5P3: placement of ``P_3j`` in ``B_5j``.
        R_P3E, r_P3E: placement of ``E_2j`` (next driven point or the tool) in ``P_3j``.
        case: the cylinder case, in ``P_2j``; piston: in ``B_5j``; load: ``O_2j``, in ``P_3j``."""

    x0: Float[Array, ""]
    R_B5P3: Float[Array, "3 3"]
    r_B5P3: Float[Array, "3"]
    R_P3E: Float[Array, "3 3"]
    r_P3E: Float[Array, "3"]
    case: RigidBody
    piston: RigidBody
    load: RigidBody

    def __init__(
        self,
        x0=0.0,
        R_B5P3=None,
        r_B5P3=None,
        R_P3E=None,
        r_P3E=None,
        case: RigidBody | None = None,
        piston: RigidBody | None = None,
        load: RigidBody | None = None,
    ):
        self.x0 = checked(x0, not_finite, "PrismaticSegment: x0 must be finite", ())
        rot = lambda R, n: checked(  # noqa: E731
            jnp.eye(3) if R is None else R, rotation_improper, f"PrismaticSegment: {n}", (3, 3)
        )
        vec = lambda r, n: checked(  # noqa: E731
            jnp.zeros(3) if r is None else r, not_finite, f"PrismaticSegment: {n}", (3,)
        )
        self.R_B5P3, self.r_B5P3 = rot(R_B5P3, "R_B5P3"), vec(r_B5P3, "r_B5P3")
        self.R_P3E, self.r_P3E = rot(R_P3E, "R_P3E"), vec(r_P3E, "r_P3E")
        self.case = _zero_body() if case is None else case
        self.piston = _zero_body() if piston is None else piston
        self.load = _zero_body() if load is None else load


def _prismatic_placements(seg: PrismaticSegment, xt):
    zero = jnp.zeros_like(seg.x0)
    eye = jnp.eye(3, dtype=seg.x0.dtype)
    return {
        "25": (eye, jnp.stack([seg.x0 + xt, zero, zero])),  # P2 -> B5
        "53": (seg.R_B5P3, seg.r_B5P3),  # B5 -> P3
        "3E": (seg.R_P3E, seg.r_P3E),  # P3 -> E2
    }


def prismatic_velocities(
    seg: PrismaticSegment,
    xt: Float[ArrayLike, ""],
    xtd: Float[ArrayLike, ""],
    V_c: Float[ArrayLike, "6"],
) -> dict[str, Float[Array, "6"]]:
    r"""Velocities of ``P2`` (the driven point, eq. (32)), ``B5`` (eq. (33)), ``P3`` (eq. (34)) and
    ``E2``; with required rates they are eqs. (46)-(48)."""
    P = _prismatic_placements(seg, xt)
    ex = jnp.zeros(6, dtype=seg.x0.dtype).at[_X_F].set(1.0)
    V2 = jnp.asarray(V_c)  # eq. (32): given by the preceding segment's E_1j
    V5 = ex * xtd + _UT_apply(P["25"], V2)  # eq. (33)
    V3 = _UT_apply(P["53"], V5)  # eq. (34)
    VE = _UT_apply(P["3E"], V3)
    return {"P2": V2, "B5": V5, "P3": V3, "E2": VE}


def _prismatic_rotations(seg: PrismaticSegment, xt, R_Wc):
    R3 = R_Wc @ seg.R_B5P3
    return {"P2": R_Wc, "B5": R_Wc, "P3": R3, "E2": R3 @ seg.R_P3E}


def prismatic_forces(
    seg: PrismaticSegment,
    xt: Float[ArrayLike, ""],
    F2s: Float[ArrayLike, "6"],
    F5s: Float[ArrayLike, "6"],
    F3s: Float[ArrayLike, "6"],
    F_E: Float[ArrayLike, "6"],
) -> tuple[Float[Array, ""], Float[Array, "6"]]:
    r"""$(f_{ctj}, {}^{P_2}F)$ by the recursion of Petrovic & Mattila (2022) eqs. (51)-(56)
    (eqs. (71)-(74) with required forces), from the net forces of case, piston and mass object
    and $F_E = {}^{E_{2j}}F$. $f_{ctj}$ (N) pushes the piston out of the case along +x."""
    P = _prismatic_placements(seg, xt)
    FP3 = jnp.asarray(F3s) + _U_apply(P["3E"], jnp.asarray(F_E))  # eq. (52)
    FB5 = jnp.asarray(F5s) + _U_apply(P["53"], FP3)  # eq. (54)
    f_ct = FB5[_X_F]  # eq. (55)
    FP2 = jnp.asarray(F2s) + _U_apply(P["25"], FB5)  # eq. (56)
    return f_ct, FP2


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
            Rs = _revolute_rotations(seg, q[j], R)
            R = Rs["E1"]
        else:
            Rs = _prismatic_rotations(seg, q[j], R)
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


# --------------------------------------------------------------------------------------------
# boundary with jaxmb models, and builders
# --------------------------------------------------------------------------------------------


@finite_inputs
@eqx.filter_jit
def driven_point_motion(
    model: Model,
    frame: str,
    q: Float[ArrayLike, " m"],
    qd: Float[ArrayLike, " m"],
    qdd: Float[ArrayLike, " m"],
    R_FC: Float[ArrayLike, "3 3"] | None = None,
    r_FC: Float[ArrayLike, "3"] | None = None,
) -> tuple[Float[Array, "3 3"], Float[Array, "6"], Float[Array, "6"]]:
    r"""``(R_WC, ^C V, d/dt ^C V)`` of a frame C placed at ``(R_FC, r_FC)`` in a jaxmb frame F.

    The body twist ``J_F(q) qd`` ([omega; v], `jaxmb.frame_jacobian`) and its derivative (`jax.jvp`
    along ``(qd, qdd)``) are converted with `to_vdc` and moved to C by eq. (3),
    ``^C V = ^F U_C^T ^F V`` (C is rigid with F, so U is constant)."""
    q = jnp.asarray(q)
    qd, qdd = check_finite(qd, "qd"), check_finite(qdd, "qdd")
    R_FC = jnp.eye(3, dtype=q.dtype) if R_FC is None else check_finite(R_FC, "R_FC")
    r_FC = jnp.zeros(3, dtype=q.dtype) if r_FC is None else check_finite(r_FC, "r_FC")
    V_F, Vd_F = jax.jvp(
        lambda a, b: frame_jacobian(model, a, frame) @ b, (q, qd), (qd, qdd)
    )  # twist and d/dt(J qd) = J qdd + Jdot qd
    U_FC = U(R_FC, r_FC)
    R_WC = frame_pose(model, q, frame)[:3, :3] @ R_FC
    return R_WC, U_FC.T @ to_vdc(V_F), U_FC.T @ to_vdc(Vd_F)  # eq. (3)


def _angle(v) -> Array:
    """Direction angle about z of a planar vector (x, y, ...)."""
    return jnp.arctan2(v[1], v[0])


def _frames(model: Model) -> dict:
    return {f.name: f for f in model.frames}


def _fixed_placement(model: Model, frame: str, ancestor: str):
    """(R, r) of ``frame`` in ``ancestor`` if only fixed frames lie between them, else None."""
    fr = _frames(model)
    R, r = jnp.eye(3), jnp.zeros(3)
    name = frame
    while name != ancestor:
        f = fr.get(name)
        if f is None or f.joint != "fixed":
            return None
        R, r = f.rotation @ R, f.rotation @ r + f.translation
        name = f.parent
    return R, r


def _rigid_bodies_on(model: Model, frame: str, R_AF, r_AF) -> RigidBody:
    """All bodies rigidly attached to ``frame`` (on it or on fixed descendants), lumped and
    expressed in frame A, where ``frame`` sits at ``(R_AF, r_AF)`` in A."""
    parts = []
    for b in model.bodies:
        P = _fixed_placement(model, b.frame, frame)
        if P is None:
            continue
        R_FB, r_FB = P
        parts.append(transform_body(b, R_AF @ R_FB, R_AF @ r_FB + r_AF))
    return combine_bodies(*parts) if parts else _zero_body()


def _cylinder_bodies(model: Model, tube: str, rod: str, l_c):
    """Tube (its jaxmb frame is B_3j) and rod (its jaxmb frame is P_1j; B_4j = P_1j shifted by
    -l_c along x, so the COM moves by +l_c)."""
    names = model.body_names
    eye = jnp.eye(3)
    t = transform_body(model.body(tube), eye, jnp.zeros(3)) if tube in names else _zero_body()
    p = (
        transform_body(model.body(rod), eye, jnp.stack([l_c, 0.0, 0.0]))
        if rod in names
        else _zero_body()
    )
    return t, p


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
    from .models.crane import CYLINDERS
    from .models.cylinder_loops import CylinderLoops

    fr = _frames(model)
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
    a1, a2 = _angle(O1 - A1), _angle(O2 - A2)  # B_0j's x: base pin -> joint
    b1, b2 = _angle(B1), _angle(B2)  # B_1j's x: joint -> rod pin
    g1, g2 = _angle(Lf.rotation[:, 0]), _angle(Tf.rotation[:, 0])  # fixed placements about z
    R_1L, R_2T = rot_z(-b1), rot_z(-b2)  # jaxmb boom frame in B_1j
    # E_11 = B_c2: origin A2 in L, x toward O2
    R_B11E, r_B11E = rot_z(a2 - b1), R_1L @ A2
    tool = _fixed_placement(model, "tool", "T")
    R_T_tool, r_T_tool = tool
    lift_tube, lift_rod = _cylinder_bodies(model, "lift_tube", "lift_rod", l_c)
    tilt_tube, tilt_rod = _cylinder_bodies(model, "tilt_tube", "tilt_rod", l_c)
    lift = RevoluteSegment(
        L=jnp.linalg.norm(O1 - A1),
        L1=jnp.linalg.norm(B1),
        x0=CYLINDERS["lift"]["l_min"],
        l_c=l_c,
        R_B1E=R_B11E,
        r_B1E=r_B11E,
        link0=_zero_body(),
        link1=_rigid_bodies_on(model, "L", R_1L, jnp.zeros(3)),
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
        link0=_zero_body(),
        link1=_rigid_bodies_on(model, "T", R_2T, jnp.zeros(3)),
        tube=tilt_tube,
        piston=tilt_rod,
    )
    offset = jnp.stack([g1 + b1 - a1, g2 + b2 - a2])
    return VDCChain((lift, tilt), model.gravity, q_offset=offset, R_WC=rot_z(a1))


def _arm_pins(model: Model):
    """Cylinder base pin A and elbow J in B2 coordinates. B_0j (x from A toward J) is taken
    parallel to B2, as in the spec, where A and J both lie on B2's x axis."""
    fr = _frames(model)
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
    tube, piston = _cylinder_bodies(model, "cylinder", "piston", l_c)
    R_tool, r_tool = _fixed_placement(model, "F3", "B3")
    return RevoluteSegment(
        L=jnp.linalg.norm(J - A),
        L1=cmap.L0,
        x0=cmap.l0,
        l_c=l_c,
        R_B1E=R_tool,
        r_B1E=r_tool,
        link0=_zero_body(),
        link1=_rigid_bodies_on(model, "B3", jnp.eye(3), jnp.zeros(3)),
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
