r"""The slider-crank of Aghili (2005) Section 8: crank and connecting rod of equal length ``l``,
each a point mass ``m`` at its far end (the two-link arm of Craig's textbook, Aghili's ref. [79]),
the loop cut at the slider C, whose vertical motion the constraint ``y_C = 0`` forbids.

Dependent coordinates ``q = [q1, q2]``: crank angle and rod angle relative to the crank (rad),
both about z; the mechanism moves in the xy-plane with y up. Singular configurations, where the
constraint Jacobian vanishes, at ``q1 = n pi / 2``, n odd (eq. (65)), with the rod folded back
onto the crank (``q2 = pi``): there the slider-crank branch ``q2 = -2 q1`` crosses the folded
branch ``q2 = pi`` on which C stays at the origin.
"""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from jaxmb.constraints.projection import AbstractConstraint, ConstrainedSystem
from jaxmb.constraints.pseudo_inverse import ATOL
from jaxmb.multibody.kinematics import frame_pose
from jaxmb.multibody.model import Body, Frame, Model

__all__ = ["SliderConstraint", "slider_crank"]


class SliderConstraint(AbstractConstraint):
    r"""$\Phi(q) = y_C(q) = l(s_1 + s_{12})$ (Aghili (2005) eqs. (66)-(67)), read from frame C."""

    def __call__(self, model: Model, q: Float[Array, " n"]) -> Float[Array, " m"]:
        return frame_pose(model, q, "C")[1:2, 3]


def slider_crank(
    m: Float[ArrayLike, ""] = 1.0,
    l: Float[ArrayLike, ""] = 1.0,
    g: Float[ArrayLike, ""] = 9.81,
    *,
    atol: float = ATOL,
) -> ConstrainedSystem:
    """The Section 8 slider-crank: point masses ``m`` (kg) at the ends of two links of length
    ``l`` (m), gravity ``g`` (m/s^2) along -y; ``atol`` is the singular-value floor (eq. (70)'s
    epsilon). ``m``, ``l``, ``g`` may be traced: gradients flow to them."""
    zero = jnp.zeros((3, 3))
    frames = [
        Frame("L1", joint="revolute", axis=[0, 0, 1], coordinate="q1"),
        Frame("L2", "L1", translation=[l, 0, 0], joint="revolute", axis=[0, 0, 1], coordinate="q2"),
        Frame("C", "L2", translation=[l, 0, 0]),
    ]
    bodies = [
        Body("crank", "L1", m, [l, 0, 0], zero),  # point mass at the crank pin
        Body("rod", "L2", m, [l, 0, 0], zero),  # point mass at the slider C
    ]
    model = Model(frames, bodies, gravity=[0.0, -g, 0.0])
    return ConstrainedSystem(model, SliderConstraint(), atol=atol)
