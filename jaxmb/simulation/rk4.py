"""The classical fourth-order Runge-Kutta method as a diffrax solver."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import diffrax
import numpy as np

__all__ = ["RK4"]


class RK4(diffrax.AbstractERK):
    """The classical fourth-order Runge-Kutta method (MATLAB's ode4), for fixed steps
    (``simulate(..., solver="rk4", fixed_step=h)``): it has no embedded error estimate, so an
    adaptive step-size controller cannot use it."""

    tableau: ClassVar[diffrax.ButcherTableau] = diffrax.ButcherTableau(
        a_lower=(np.array([0.5]), np.array([0.0, 0.5]), np.array([0.0, 0.0, 1.0])),
        b_sol=np.array([1 / 6, 1 / 3, 1 / 3, 1 / 6]),
        b_error=np.zeros(4),
        c=np.array([0.5, 0.5, 1.0]),
    )
    interpolation_cls: ClassVar[Callable] = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        del terms
        return 4
