"""Revolute and prismatic segments of Petrovic & Mattila (2022) (Figs. 4-5): loop closure,
velocities and force recursions. Frames and conventions: `jaxmb.vdc`."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxmb.multibody.checks import checked, not_finite, not_positive
from jaxmb.multibody.model import rotation_improper
from jaxmb.multibody.spatial import rot_z
from jaxmb.vdc.rigid_body import X_F, Y_F, Z_R, RigidBody, U_apply, UT_apply, zero_body

__all__ = [
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
    "revolute_rotations",
    "prismatic_rotations",
]

# --------------------------------------------------------------------------------------------
# revolute segment, eqs. (18)-(31), (38)-(45), (61)-(69), (76)-(77), Appendices A-B
# --------------------------------------------------------------------------------------------


def _positive(name: str):
    return lambda x: checked(x, not_positive, f"{name} must be > 0 and finite", ())


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
        self.link0 = zero_body() if link0 is None else link0
        self.link1 = zero_body() if link1 is None else link1
        self.tube = zero_body() if tube is None else tube
        self.piston = zero_body() if piston is None else piston


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


def revolute_placements(seg: RevoluteSegment, q):
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
    P, _ = revolute_placements(seg, q)
    xd, q1d, q2d = loop_closure_rates(seg, q, qd)
    ez = jnp.zeros(6, dtype=seg.L.dtype).at[Z_R].set(1.0)
    ex = jnp.zeros(6, dtype=seg.L.dtype).at[X_F].set(1.0)
    V0 = jnp.asarray(V_c)  # eq. (24): B_c = B_0 = B_2
    V1 = ez * qd + UT_apply(P["01"], V0)  # eq. (25)
    VTc = UT_apply(P["1Tc"], V1)  # eq. (26)
    V3 = ez * q1d + UT_apply(P["03"], V0)  # eq. (27)
    V4 = ex * xd + UT_apply(P["34"], V3)  # eq. (28)
    VT2 = ez * q2d + UT_apply(P["4T2"], V4)  # eq. (29)
    VE = UT_apply(P["TcE"], VTc)  # eq. (31)
    return {"B0": V0, "B1": V1, "Tc": VTc, "B3": V3, "B4": V4, "T2": VT2, "E1": VE}


def revolute_rotations(seg: RevoluteSegment, q, R_Wc):
    """World rotations of a revolute segment's frames (B0, B1, Tc, B3, B4, T2, E1) at angle ``q``,
    given the driven frame's ``R_Wc``: what a chain needs to express gravity in each frame."""
    P, _ = revolute_placements(seg, q)
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
    P, (x, _, q2) = revolute_placements(seg, q)
    F1s, F3s, F4s = jnp.asarray(F1s), jnp.asarray(F3s), jnp.asarray(F4s)
    l = x + seg.x0
    Z = (F1s + U_apply(P["1E"], jnp.asarray(F_E)))[Z_R]
    return (
        F4s[X_F]
        - Z / (seg.L1 * jnp.sin(q2))
        - (F3s[Z_R] + F4s[Z_R] + F4s[Y_F] * (l - seg.l_c)) / (l * jnp.tan(q2))
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
    P, (x, _, q2) = revolute_placements(seg, q)
    F1s, F3s, F4s = jnp.asarray(F1s), jnp.asarray(F3s), jnp.asarray(F4s)
    l = x + seg.x0
    fy = -(F3s[Z_R] + F4s[Z_R]) / l + F4s[Y_F] * seg.l_c / l  # eq. (A.14)
    Z = (F1s + U_apply(P["1E"], jnp.asarray(F_E)))[Z_R]
    fx = -Z / (seg.L1 * jnp.sin(q2)) + F4s[X_F] + (fy - F4s[Y_F]) / jnp.tan(q2)  # eq. (A.15)
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
    P, _ = revolute_placements(seg, q)
    # grouped as B0U1 (F1* + B1UE F_E) + B2U3 (F3* + B3U4 F4*): the same sum, fewer products
    F0s, F1s, F3s, F4s, F_E = (jnp.asarray(x) for x in (F0s, F1s, F3s, F4s, F_E))
    link = U_apply(P["01"], F1s + U_apply(P["1E"], F_E))
    cylinder = U_apply(P["03"], F3s + U_apply(P["34"], F4s))
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
        self.case = zero_body() if case is None else case
        self.piston = zero_body() if piston is None else piston
        self.load = zero_body() if load is None else load


def prismatic_placements(seg: PrismaticSegment, xt):
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
    P = prismatic_placements(seg, xt)
    ex = jnp.zeros(6, dtype=seg.x0.dtype).at[X_F].set(1.0)
    V2 = jnp.asarray(V_c)  # eq. (32): given by the preceding segment's E_1j
    V5 = ex * xtd + UT_apply(P["25"], V2)  # eq. (33)
    V3 = UT_apply(P["53"], V5)  # eq. (34)
    VE = UT_apply(P["3E"], V3)
    return {"P2": V2, "B5": V5, "P3": V3, "E2": VE}


def prismatic_rotations(seg: PrismaticSegment, xt, R_Wc):
    """World rotations of a prismatic segment's frames (P2, B5, P3, E2) given the case's
    ``R_Wc``; the stroke ``xt`` moves them without turning them."""
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
    P = prismatic_placements(seg, xt)
    FP3 = jnp.asarray(F3s) + U_apply(P["3E"], jnp.asarray(F_E))  # eq. (52)
    FB5 = jnp.asarray(F5s) + U_apply(P["53"], FP3)  # eq. (54)
    f_ct = FB5[X_F]  # eq. (55)
    FP2 = jnp.asarray(F2s) + U_apply(P["25"], FB5)  # eq. (56)
    return f_ct, FP2
