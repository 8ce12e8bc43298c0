r"""Impact of a particle on a point of a (constrained) mechanism: Ider et al. (2019) Section 5,
eqs. (32)-(46).

A particle P of mass ``m_P`` hits the point Q of a link. Over the short impact the positions
do not change and every bounded force integrates to nothing, so the equations of motion
integrate to impulse-momentum balances (eqs. (38)-(40)):

    M dqd + B^T Lambda + L_Q^T z H = 0        the mechanism (eq. (38))
    I^r dphid = 0                              its rotors keep their speed (eq. (39))
    m_P dv_P - z H = 0                         the particle (eq. (40))

with the velocity constraints kept (``B dqd = 0``, eq. (43)) and Newton's restitution law
along the contact normal ``z`` (eqs. (44)-(45)):

    z^T (L_Q dqd - dv_P) = -(1 + e) z^T (L_Q qd - v_P).

Together they are the linear system of eq. (46) for ``(dqd, dv_P, Lambda, H)``; ``Lambda`` is
the impulse of the loop-closure reactions and ``H`` that of the contact force, positive when it
pushes the particle along ``z``. (Eq. (46) prints ``-B^T Lambda`` in its first row, eq. (38)
``+B^T Lambda``: the two differ only in the sign of ``Lambda``; this module follows eq. (38).)
``L_Q = d v_Q / d qd`` (eq. (32)) is the Jacobian of Q's position in the world frame, by
autodiff through the system's kinematics (and coordinate map).

Everything here is three-dimensional: a planar mechanism (the 3-RPR) has normals and
velocities with zero z components.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxmb.algorithms.dynamics import mass_matrix
from jaxmb.constraints.projection import ConstrainedSystem, constraint_jacobian
from jaxmb.multibody.checks import check_finite, checked, not_positive
from jaxmb.multibody.kinematics import frame_pose
from jaxmb.multibody.model import Model

__all__ = [
    "Contact",
    "Particle",
    "ImpactJump",
    "contact_point",
    "contact_jacobian",
    "contact_normal",
    "gap",
    "impact_jump",
]


def _model(system) -> Model:
    return system.model if isinstance(system, ConstrainedSystem) else system


class Contact(eqx.Module):
    """The point Q a particle may hit: ``point`` in the coordinates of ``frame``, and the
    surface's outward unit normal there, ``normal`` (same coordinates; it turns with the link).
    """

    point: Float[Array, 3]
    normal: Float[Array, 3]
    frame: str = eqx.field(static=True)

    def __init__(self, frame: str, point, normal):
        self.frame = frame
        self.point = check_finite(jnp.asarray(point, dtype=float), "Contact.point")
        if self.point.shape != (3,):
            raise ValueError(f"Contact.point: expected shape (3,), got {self.point.shape}")
        n = check_finite(jnp.asarray(normal, dtype=float), "Contact.normal")
        if n.shape != (3,):
            raise ValueError(f"Contact.normal: expected shape (3,), got {n.shape}")
        norm = jnp.linalg.norm(n)
        self.normal = checked(n / norm, lambda _: ~(norm > 0), "Contact.normal: must be nonzero")


class Particle(eqx.Module):
    """A free particle: mass (kg), position and velocity (m, m/s, world frame) at time ``t0``,
    moving under ``gravity`` alone until it hits (default: no gravity, as in a horizontal
    plane)."""

    mass: Float[Array, ""]
    position: Float[Array, 3]
    velocity: Float[Array, 3]
    t0: Float[Array, ""]
    gravity: Float[Array, 3]

    def __init__(self, mass, position, velocity, t0=0.0, gravity=(0.0, 0.0, 0.0)):
        self.mass = checked(
            jnp.asarray(mass, dtype=float),
            not_positive,
            "Particle.mass: must be > 0 kg and finite",
            (),
        )
        for name in ("position", "velocity", "gravity"):
            x = check_finite(jnp.asarray(locals()[name], dtype=float), f"Particle.{name}")
            if x.shape != (3,):
                raise ValueError(f"Particle.{name}: expected shape (3,), got {x.shape}")
            setattr(self, name, x)
        self.t0 = jnp.asarray(t0, dtype=float)

    def at(self, t) -> tuple[Array, Array]:
        """``(position, velocity)`` at time ``t`` (ballistic)."""
        dt = t - self.t0
        return (
            self.position + self.velocity * dt + 0.5 * self.gravity * dt**2,
            self.velocity + self.gravity * dt,
        )


def contact_point(system, q: Float[ArrayLike, " n"], contact: Contact) -> Float[Array, 3]:
    """Q in the world frame."""
    T = frame_pose(_model(system), q, contact.frame)
    return T[:3, :3] @ contact.point + T[:3, 3]


def contact_normal(system, q: Float[ArrayLike, " n"], contact: Contact) -> Float[Array, 3]:
    """``z`` of eq. (44) in the world frame."""
    return frame_pose(_model(system), q, contact.frame)[:3, :3] @ contact.normal


def contact_jacobian(system, q: Float[ArrayLike, " n"], contact: Contact) -> Float[Array, "3 n"]:
    """``L_Q = d v_Q / d qd = d r_Q / d q`` (eq. (32)), by forward-mode autodiff."""
    return jax.jacfwd(lambda q_: contact_point(system, q_, contact))(jnp.asarray(q, dtype=float))


def gap(system, q, contact: Contact, r_P) -> Float[Array, ""]:
    """``z^T (r_P - r_Q)``: positive while the particle is on the outer side of the surface at
    Q, zero at contact (the event function of a simulation with an impact)."""
    return contact_normal(system, q, contact) @ (r_P - contact_point(system, q, contact))


class ImpactJump(NamedTuple):
    """The solution of eq. (46)."""

    dqd: Float[Array, " n"]  # jump of the generalized velocities
    dv_P: Float[Array, 3]  # jump of the particle's velocity
    Lambda: Float[Array, " k"]  # impulses of the loop-closure reactions (eq. (42))
    H: Float[Array, ""]  # impulse of the contact force (eq. (41)), on the particle along z


def impact_jump(
    system: Model | ConstrainedSystem,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    contact: Contact,
    m_P: Float[ArrayLike, ""],
    v_P: Float[ArrayLike, 3],
    e: Float[ArrayLike, ""],
) -> ImpactJump:
    r"""Velocity jumps and impulses of a particle's impact (Ider et al. (2019) eq. (46)).

    Args:
        system: a `Model` (no loop constraints) or a `ConstrainedSystem` (its constraint
            Jacobian is eq. (2)'s B).
        q, qd: the state at the instant of impact ($\tau_1$).
        contact: the point Q and its normal.
        m_P, v_P: the particle's mass and velocity before impact.
        e: coefficient of restitution, 0 (plastic, object capture) to 1 (elastic).

    The rotors of flexible-joint drives keep their velocities (eq. (39)); apply ``dqd`` to the
    link velocities alone."""
    q, qd = jnp.asarray(q, dtype=float), jnp.asarray(qd, dtype=float)
    v_P = jnp.asarray(v_P, dtype=float)
    m_P = jnp.asarray(m_P, dtype=float)
    e = checked(jnp.asarray(e, dtype=float), lambda x: ~((x >= 0) & (x <= 1)),
                 "impact_jump: e must be in [0, 1]", ())  # fmt: skip
    model = _model(system)
    n = model.n
    M = mass_matrix(model, q)
    if isinstance(system, ConstrainedSystem):
        B = constraint_jacobian(system, q)
    else:
        B = jnp.zeros((0, n), dtype=M.dtype)
    k = B.shape[0]
    L = contact_jacobian(system, q, contact)
    z = contact_normal(system, q, contact)
    Lz = L.T @ z  # (n,)
    I3 = jnp.eye(3, dtype=M.dtype)
    zeros = jnp.zeros
    # unknowns [dqd (n), dv_P (3), Lambda (k), H (1)]; rows eqs. (38), (40), (43), (45)
    A = jnp.block(
        [
            [M, zeros((n, 3)), B.T, Lz[:, None]],
            [zeros((3, n)), m_P * I3, zeros((3, k)), -z[:, None]],
            [B, zeros((k, 3)), zeros((k, k)), zeros((k, 1))],
            [Lz[None, :], -z[None, :], zeros((1, k)), zeros((1, 1))],
        ]
    )
    approach = z @ (L @ qd - v_P)  # z^T (v_Q - v_P) before impact: > 0 while P closes on Q
    rhs = jnp.concatenate([zeros(n + 3 + k), (-(1 + e) * approach)[None]])
    x = jnp.linalg.solve(A, rhs)
    return ImpactJump(x[:n], x[n : n + 3], x[n + 3 : n + 3 + k], x[-1])
