"""What a solver that wraps another (a step's extra work around the wrapped solver's step) takes
from it unchanged: the terms it accepts, its interpolation and its orders."""

from __future__ import annotations

import diffrax

__all__ = ["Forwarding"]


class Forwarding(diffrax.AbstractWrappedSolver):
    """A `diffrax.AbstractWrappedSolver` whose term structure, interpolation and orders are its
    ``solver``'s (`jaxmb.simulation.projected.ProjectedSolver`,
    `jaxmb.simulation.zero_order_hold.ZeroOrderHold`); subclasses define ``solver``, ``init``,
    ``step`` and ``func``."""

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)
