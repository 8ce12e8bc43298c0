"""The boundary between a jaxmb `Model` and VDC: a frame's motion in VDC coordinates, and the
rigid bodies that a model carries on a frame, re-expressed for a segment."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxmb.multibody.checks import check_finite, finite_inputs
from jaxmb.multibody.kinematics import frame_jacobian, frame_pose
from jaxmb.multibody.model import Model
from jaxmb.vdc.rigid_body import RigidBody, U, combine_bodies, to_vdc, transform_body, zero_body

__all__ = [
    "driven_point_motion",
    "planar_angle",
    "frames_by_name",
    "fixed_placement",
    "rigid_bodies_on",
    "cylinder_bodies",
]

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


def planar_angle(v) -> Array:
    """Direction angle about z of a planar vector (x, y, ...)."""
    return jnp.arctan2(v[1], v[0])


def frames_by_name(model: Model) -> dict:
    """``{name: Frame}`` of ``model``'s frames."""
    return {f.name: f for f in model.frames}


def fixed_placement(model: Model, frame: str, ancestor: str):
    """(R, r) of ``frame`` in ``ancestor`` if only fixed frames lie between them, else None."""
    fr = frames_by_name(model)
    R, r = jnp.eye(3), jnp.zeros(3)
    name = frame
    while name != ancestor:
        f = fr.get(name)
        if f is None or f.joint != "fixed":
            return None
        R, r = f.rotation @ R, f.rotation @ r + f.translation
        name = f.parent
    return R, r


def rigid_bodies_on(model: Model, frame: str, R_AF, r_AF) -> RigidBody:
    """All bodies rigidly attached to ``frame`` (on it or on fixed descendants), lumped and
    expressed in frame A, where ``frame`` sits at ``(R_AF, r_AF)`` in A."""
    parts = []
    for b in model.bodies:
        P = fixed_placement(model, b.frame, frame)
        if P is None:
            continue
        R_FB, r_FB = P
        parts.append(transform_body(b, R_AF @ R_FB, R_AF @ r_FB + r_AF))
    return combine_bodies(*parts) if parts else zero_body()


def cylinder_bodies(model: Model, tube: str, rod: str, l_c):
    """Tube (its jaxmb frame is B_3j) and rod (its jaxmb frame is P_1j; B_4j = P_1j shifted by
    -l_c along x, so the COM moves by +l_c)."""
    names = model.body_names
    eye = jnp.eye(3)
    t = transform_body(model.body(tube), eye, jnp.zeros(3)) if tube in names else zero_body()
    p = (
        transform_body(model.body(rod), eye, jnp.stack([l_c, 0.0, 0.0]))
        if rod in names
        else zero_body()
    )
    return t, p
