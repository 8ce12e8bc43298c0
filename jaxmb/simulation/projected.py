"""A diffrax solver whose every step ends on the constraint manifold (Aghili (2005) Section 6
drift correction)."""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax.numpy as jnp

from jaxmb.constraints import projection
from jaxmb.constraints.projection import ConstrainedSystem
from jaxmb.simulation.wrapped import Forwarding

__all__ = ["DriftCorrection", "ProjectedSolver", "DEFAULT_CORRECTION"]


class DriftCorrection(eqx.Module):
    """Constraint drift correction for `ConstrainedSystem` plants (Aghili (2005) Section 6): after
    every solver step, if ``max |Phi|`` or ``max |A qd|`` exceeds ``tol``, iterate eq. (39) at
    most ``max_iter`` times and project the velocity (`jaxmb.constraints.projection.correct`)."""

    tol: float = eqx.field(static=True, default=1e-12)
    max_iter: int = eqx.field(static=True, default=8)


# what `simulate` corrects with when it is given a ConstrainedSystem and no correction
DEFAULT_CORRECTION = DriftCorrection()


class ProjectedSolver(Forwarding):
    """A diffrax solver whose every step ends on the constraint manifold: ``y1`` of the wrapped
    solver is drift-corrected (`jaxmb.constraints.projection.correct`) before it is accepted. The error
    estimate is the wrapped solver's. A step after a correction re-evaluates its first stage
    (``made_jump``), since first-same-as-last solvers would reuse the vector field at the
    uncorrected point."""

    solver: diffrax.AbstractSolver
    system: ConstrainedSystem
    correction: DriftCorrection

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args), jnp.array(False)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        inner, corrected = solver_state
        y1, y_error, dense_info, inner, result = self.solver.step(
            terms, t0, t1, y0, args, inner, made_jump | corrected
        )
        if isinstance(y1[0], tuple):  # ((q, qd), controller state)
            q, qd, moved = self.correct(y1[0])
            return ((q, qd), y1[1]), y_error, dense_info, (inner, moved), result
        q, qd, moved = self.correct(y1)
        return (q, qd), y_error, dense_info, (inner, moved), result

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)

    def correct(self, y):
        q, qd = y
        c = self.correction
        return projection.correct(self.system, q, qd, tol=c.tol, max_iter=c.max_iter)
