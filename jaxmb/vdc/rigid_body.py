"""Rigid bodies in VDC's conventions (Petrovic & Mattila (2022) eqs. (1)-(8), (96)): the
force/velocity transformation ``^A U_B``, mass, Coriolis and gravity matrices, net and required
net forces. Conventions: `jaxmb.vdc`."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxmb.multibody.checks import checked, not_finite, not_nonnegative
from jaxmb.multibody.model import Body, inertia_unrealisable
from jaxmb.multibody.spatial import skew

__all__ = [
    "to_vdc",
    "from_vdc",
    "U",
    "RigidBody",
    "transform_body",
    "rigid_body_unchecked",
    "zero_body",
    "U_apply",
    "UT_apply",
    "X_F",
    "Y_F",
    "Z_R",
    "combine_bodies",
    "M_A",
    "C_A",
    "G_A",
    "net_force",
    "required_net_force",
    "accompanying_function",
]

# unit vectors of eqs. (25)-(29) and (A.6)-(A.8), [v; omega] order
X_F = 0  # x_f = (1 0 0 0 0 0)^T
Y_F = 1  # y_f = (0 1 0 0 0 0)^T
Z_R = 5  # z_r = (0 0 0 0 0 1)^T


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


def U_apply(P, F):
    """``^A U_B F`` for ``P = (R_AB, r_AB)`` without forming U (eq. (4)): [R f; r x R f + R m]."""
    R, r = P
    f = R @ F[:3]
    return jnp.concatenate([f, jnp.cross(r, f) + R @ F[3:]])


def UT_apply(P, V):
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
        self.mass = checked(mass, not_nonnegative, "RigidBody: mass must be >= 0 and finite", ())
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


def MC_apply(body: RigidBody, omega, Xd, X):
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
    return MC_apply(body, V[3:], Vd, V) + G_A(body, R_WA, g_W)  # eq. (7)


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
        MC_apply(body, V[3:], Vd_r, V_r) + G_A(body, R_WA, g_W) + jnp.asarray(K) @ (V_r - V)
    )  # eq. (8)


def accompanying_function(
    body: RigidBody, V_r: Float[ArrayLike, "6"], V: Float[ArrayLike, "6"]
) -> Float[Array, ""]:
    r"""$v_A = \tfrac12 ({}^A V_r - {}^A V)^\top M_A ({}^A V_r - {}^A V)$ (Petrovic & Mattila (2022) eq. (96)), J."""
    e = jnp.asarray(V_r) - jnp.asarray(V)
    return 0.5 * e @ M_A(body) @ e


def zero_body() -> RigidBody:
    """A massless body (a link that only transmits forces)."""
    return RigidBody(0.0, jnp.zeros(3), jnp.zeros((3, 3)))
