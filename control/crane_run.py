"""The crane's runs in the paper's form: the VDC closed loop over the segment recursion of
Petrovic & Mattila (2022) on the spec's A-B-C-D task, and open-loop replays of command tables,
as pure functions (`crane_closed_loop`, `crane_replay`): the reference the machine-file path
(`machine_run`, which ``jaxmb simulate --machine crane`` takes, as any machine file) is tested
against, and where the VDC gains and tolerances every machine starts from were chosen
(`jaxmb.control.vdc_control.GAINS`, `jaxmb.control.machine_run.RTOL`).

Solver and tolerances, chosen on evidence (``python scripts/bench_crane.py`` prints the
comparison): the loop is mildly stiff, its fastest mode about -1.6e3 1/s from the smooth
friction law's slope ``F_s / v_eps`` at rest and the hydraulic modes near 40 rad/s, so an
explicit method is stability-limited to steps of a few ms, which accuracy needs anyway. On the
18 s A-B-C-D loop, against a Tsit5 run at rtol 1e-10 (pressures integrated in bar,
`jaxmb.actuators.plant.HydraulicPlant.state_scale`):

    setting                           steps   max |dq| rad   max |dp| Pa   run time (x RK4 1 ms)
    RK4, fixed 1 ms (the paper's)     18000   1.2e-7         1050          1.00
    Tsit5 rtol 1e-8 (library)          9036   2.8e-9           23          0.80
    Tsit5 rtol 1e-6 (chosen)           5003   1.9e-7         1680          0.30
    Tsit5 rtol 1e-4                    3700   3.3e-6         8020          0.26
    Bosh3 rtol 1e-6                   10158   3.3e-8          230          0.32

(measured 2026-11-24, after the VDC's friction at the required velocity). Tsit5 at
``rtol = 1e-6, atol = 1e-8`` is about as accurate as the paper's fixed-step RK4 (within 1.6x, in
positions and pressures) at a third of its cost (a test checks it against the tight run).
The implicit Kvaerno5 needs the Jacobian of the whole closed loop (VDC recursion included) in
its Newton iterations: compiling and running it had not finished after 6 minutes
(``--implicit`` adds it to the table). The tighter library default (1e-8/1e-10) is for
gradients.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxmb.control.machine_run import ATOL, RTOL
from jaxmb.control.vdc_control import GAINS, VDCController
from jaxmb.models.crane import (
    WAYPOINTS,
    abcd_reference,
    crane_chain,
    lift_tilt_crane_plant,
)
from jaxmb.simulation import CommandTable, Trajectory, simulate

__all__ = [
    "crane_controller",
    "crane_closed_loop",
    "crane_replay",
]


def crane_controller(plant=None, reference=None, **gains) -> VDCController:
    """The VDC controller on a crane model (default: the spec's plant as the controller's
    model) tracking ``reference`` (default the A-B-C-D task) with `GAINS` unless overridden."""
    plant = lift_tilt_crane_plant() if plant is None else plant
    reference = abcd_reference() if reference is None else reference
    return VDCController(plant, crane_chain(plant.model), reference, **{**GAINS, **gains})


def crane_closed_loop(
    plant, controller: VDCController, ts, *, q0=None, progress: bool = False, **options
) -> Trajectory:
    """Simulate ``plant`` under ``controller`` from rest at ``q0`` (default waypoint A) with the
    pressures that hold it there (rod sides 40 bar), saving at ``ts``."""
    q0 = jnp.asarray(WAYPOINTS["A"] if q0 is None else q0, dtype=float)
    opts = {"rtol": RTOL, "atol": ATOL, "max_steps": 500_000, **options}
    return simulate(
        plant, controller, controller.reference, q0, jnp.zeros(2), ts, progress=progress, **opts
    )


def crane_replay(
    plant, table: CommandTable, ts, *, q0=None, progress: bool = False, **options
) -> Trajectory:
    """Replay logged commands open loop (the output-error identification path): from rest at
    ``q0`` (default waypoint A) with the holding pressures."""
    q0 = jnp.asarray(WAYPOINTS["A"] if q0 is None else q0, dtype=float)
    opts = {"rtol": RTOL, "atol": ATOL, "max_steps": 500_000, **options}
    return simulate(plant, table, None, q0, jnp.zeros(2), ts, progress=progress, **opts)
