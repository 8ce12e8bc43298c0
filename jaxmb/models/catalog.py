"""The built-in machines, in one table (`CATALOG`): every workflow looks a machine's name up here,
and none names a machine itself.

An entry says what a machine is and what each workflow does with it, by kind, not by name:

- ``load``: its model, a `jaxmb.multibody.model.Model` (a rigid robot: the regressor route of
  ``jaxmb identify``), a hydraulic machine file's `jaxmb.io.machine.Machine` (the output-error
  route; the built-in crane is a file in ``machines/``, loaded as a user's is), or a closed-chain
  system;
- ``control``: the kind of closed loop ``jaxmb simulate`` runs on it (``"robust"``: Dastranj &
  Mattila (2026) eq. (18) on the Section IV scenario; ``"vdc"``: virtual decomposition control
  on a machine file's ``[task]``, as for any user's file; ``"fourth_order"``: Ider et al.
  (2019) Section 6), or None;
- ``study``: the name a ``jaxmb montecarlo`` / ``jaxmb tune`` configuration gives its study
  (``[study] scenario``), or None;
- ``identify``: whether ``jaxmb identify`` takes it, with the rigid route's extras (gear ratios of
  motor-side logs, known generalized forces, joint limits for the URDF written out).

A user's machine file is the ``"vdc"`` kind and the hydraulic route with no entry here: the
workflows reach it by the same code as the built-in crane (`machine_file`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jaxmb.io.machine import BUILTIN, load_machine

__all__ = ["Builtin", "CATALOG", "machine_file"]


@dataclass(frozen=True)
class Builtin:
    """One built-in machine (module docstring).

    Attributes:
        summary: what it is, as help texts show it.
        load: ``() -> model``: its `Model`, machine file (`jaxmb.io.machine.Machine`) or system.
        folder: ``jaxmb simulate``'s default output folder, under ``out/``.
        control: its closed loop's kind (``"robust"``, ``"vdc"``, ``"fourth_order"``) or None.
        study: its control study's ``[study] scenario`` name, or None.
        identify: whether ``jaxmb identify`` takes it.
        hydraulic: whether it is a machine file (the output-error route) rather than a rigid
            model (the regressor route).
        gear_ratios: ``() -> {coordinate: ratio}`` of its motor-side logs, or None.
        known_forces: ``() -> {name: q -> generalized force}`` (springs, counterbalances), or
            None.
        limits: ``() -> {coordinate: (low, high)}``, for the URDF it is written as, or None.
    """

    summary: str
    load: Callable[[], Any]
    folder: str
    control: str | None = None
    study: str | None = None
    identify: bool = False
    hydraulic: bool = False
    gear_ratios: Callable[[], dict] | None = None
    known_forces: Callable[[], dict] | None = None
    limits: Callable[[], dict] | None = None


def machine_file(name: str, summary: str = "a hydraulic machine file") -> Builtin:
    """What a hydraulic machine file is to the workflows: VDC on its ``[task]``, the output-error
    route. ``name``: a bundled file's name (`jaxmb.io.machine.BUILTIN`) or a path."""
    folder = name if name in BUILTIN else "machine"
    return Builtin(summary, lambda: load_machine(name), folder, control="vdc",
                   study=name if name in BUILTIN else None, identify=True, hydraulic=True)  # fmt: skip


def _arm():
    from jaxmb.models.series_parallel import series_parallel_3dof

    return series_parallel_3dof()


def _kr300():
    from jaxmb.models.kr300 import kr300

    return kr300()


def _kr300_gears() -> dict:
    from jaxmb.models.kr300 import GEAR_RATIOS

    return {f"q{i + 1}": float(g) for i, g in enumerate(GEAR_RATIOS)}


def _kr300_forces() -> dict:
    """The KR300's axis-2 gas-spring counterbalance (`jaxmb.models.kr300.KR300Counterbalance`,
    the authors' CAD-based law) as a known generalized force. It is not scaled by the fit: the
    recordings move q2 over half a radian, where the spring and gravity are nearly collinear
    (a free scale came out anywhere between 0.1 and 2 depending on the friction terms)."""
    import jax.numpy as jnp

    from jaxmb.models.kr300 import KR300Counterbalance

    spring = KR300Counterbalance()
    return {"counterbalance": lambda q: jnp.zeros_like(q).at[1].set(spring(q[1]))}


def _kr300_limits() -> dict:
    from jaxmb.models.kr300 import kr300_drives

    d = kr300_drives()
    return {
        f"q{i + 1}": (float(lo), float(hi))
        for i, (lo, hi) in enumerate(zip(d.q_min, d.q_max, strict=True))
    }


def _rpr3():
    from jaxmb.models.planar_rpr import rpr3

    return rpr3()


# the one table; the bundled machine files (the crane) enter as any machine file does
CATALOG: dict[str, Builtin] = {
    "arm": Builtin("the 3-DoF series-parallel arm (Dastranj & Mattila Section IV)", _arm,
                   "section_iv", control="robust", study="section_iv", identify=True),
    **{name: machine_file(name, f"the built-in machine file {file}")
       for name, file in BUILTIN.items()},
    "rpr3-flexible": Builtin("the flexible-joint 3-RPR (Ider et al. Section 6)", _rpr3,
                             "rpr3_flexible", control="fourth_order"),
    "kr300": Builtin("the KUKA KR300 R2500 ultra (the bundled recordings)", _kr300, "kr300",
                     identify=True, gear_ratios=_kr300_gears, known_forces=_kr300_forces,
                     limits=_kr300_limits),
}  # fmt: skip
