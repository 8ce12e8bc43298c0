"""The interface of a controller with its own integrated state (integral actions, filters,
observers), which `simulate` integrates with the plant."""

from __future__ import annotations

import abc

import equinox as eqx

__all__ = ["AbstractStatefulController"]


class AbstractStatefulController(eqx.Module):
    r"""A controller with its own integrated state ``c`` (integral actions, filters,
    observers), integrated by `simulate` together with the plant.

    ``init(t0, y0, desired0) -> c0`` gives the initial state and
    ``__call__(t, y, desired, c) -> (command, dc/dt)`` the command and the state's rate, with
    ``y`` the plant state as a dict (``{"q", "qd"}`` for a mechanical plant, plus
    ``"actuators"`` for an `AbstractPlant`) and ``desired = (q_d, qd_d, qdd_d)``."""

    @abc.abstractmethod
    def init(self, t0, y0: dict, desired0): ...

    @abc.abstractmethod
    def __call__(self, t, y: dict, desired, c): ...
