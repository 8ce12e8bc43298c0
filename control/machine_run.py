"""Any hydraulic machine file's runs (the built-in crane's included): the VDC closed loop on its
waypoint task, with its controller (`machine_controller`), the run (`machine_closed_loop`) and
the report ``jaxmb simulate --machine FILE.toml`` writes (`run_machine`); and a command table's
open-loop replay from the task's first waypoint (`table_replay`, `run_table`).

The controller is `VDCController` over the decomposition of the machine's model into its
bodies (`jaxmb.vdc.bodies`): it needs no segment frames, so joint axes, cylinder mounts and
gravity may point wherever the files say. Gains: the file's ``[vdc]`` table over `GAINS`, then
those given (a tuned gains file). The controller runs as on the machine: sampled at the file's
rate (``[vdc] rate``, default 1 kHz) with its command held between samples, the plant
integrated by RK4 at fixed steps of at most 1 ms that land on every sample
(`jaxmb.simulation.zero_order_hold`). With ``rate = "continuous"`` it is the continuous-time
loop of the papers, Tsit5 at rtol 1e-6, atol 1e-8, as the crane's (`crane_run`, where the
choice is measured).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxmb.compile_cache import strong_types
from jaxmb.control.machine_report import write_machine_report
from jaxmb.control.vdc_control import GAINS, VDCController
from jaxmb.saved_programs import saved
from jaxmb.simulation import CommandTable, Trajectory, simulate, start_position
from jaxmb.simulation.integrate import refuse_delays
from jaxmb.simulation.zero_order_hold import (
    first_off_instant,
    hold_options,
    kept_commands,
    longest_delay,
)

__all__ = [
    "RTOL",
    "ATOL",
    "control_series",
    "machine_controller",
    "machine_closed_loop",
    "loop_options",
    "solver_note",
    "machine_gains",
    "tool_frame",
    "run_machine",
    "save_times",
    "refuse_off_samples",
    "table_replay",
    "run_table",
]

# the continuous loop's tolerances (`[vdc] rate = "continuous"`): as accurate as the paper's
# RK4 at 1 ms on the crane's task at a third of its cost (the table in `crane_run`)
RTOL, ATOL = 1e-6, 1e-8


def machine_gains(machine, gains: dict | None = None) -> dict:
    """`GAINS`, then the file's ``[vdc]`` table, then ``gains``."""
    return {**GAINS, **machine.gains, **(gains or {})}


def machine_controller(machine, plant=None, gains: dict | None = None) -> VDCController:
    """VDC on ``plant`` (default: the file's, as the controller's model) tracking the file's
    ``[task]``, with `machine_gains`.

    Raises ValueError naming the file when it has no ``[task]`` table."""
    if machine.task is None:
        raise ValueError(
            f"machine file {machine.path}: no [task] table: VDC needs a waypoint task "
            "(waypoints = {coordinate = [...]}, segment_time, hold; see jaxmb.io.machine)"
        )
    plant = machine.plant if plant is None else plant
    if machine.sample_time is None:  # a sampled loop holds the commands until they arrive
        refuse_delays(plant, f'machine file {machine.path} ([vdc] rate = "continuous")')
    return VDCController(plant, None, machine.task.reference(), **machine_gains(machine, gains))


def loop_options(sample_time: float | None) -> dict:
    """`simulate`'s options for a machine's loop: the controller sampled every ``sample_time``
    s (`hold_options`), or the continuous loop at the crane's tolerances (None)."""
    if sample_time is None:
        return {"rtol": RTOL, "atol": ATOL}
    return hold_options(sample_time)


def step_budget(ts, sample_time: float | None, least: int) -> int:
    """``max_steps`` for a machine's loop over ``ts``: ``least``, or what the sampled loop's
    fixed steps need where that is more (a long task; traced ``ts``: ``least``)."""
    if sample_time is None:
        return least
    try:
        t = np.asarray(ts)
    except jax.errors.TracerArrayConversionError:
        return least
    step = hold_options(sample_time)["fixed_step"]
    return max(least, int(np.ceil((t[-1] - t[0]) / step)) + 10)


def save_times(t_final: float, dt_save: float):
    """A machine run's saved rows: ``dt_save`` apart (to the nearest whole number of rows)
    from 0 to ``t_final``."""
    return jnp.linspace(0.0, t_final, int(round(t_final / dt_save)) + 1)


def refuse_off_samples(machine, ts, where: str) -> None:
    """Refuse saved rows ``ts`` (concrete, from 0 s) off the controller's samples (the file's ``[vdc]
    rate``): there a row's command is the one held after the sample. ``where`` names the
    options that set them."""
    h = machine.sample_time
    if h is None:
        return
    i = first_off_instant(ts, h)
    if i is not None:
        t = np.asarray(ts)
        raise ValueError(
            f"{where}: the saved rows must fall on the controller's samples, multiples of "
            f"{h:g} s (machine file {machine.path}: [vdc] rate = {machine.rate:g} Hz); row {i} "
            f"is at {t[i]:.6g} s"
        )


def solver_note(sample_time: float | None) -> dict:
    """What a report says of the loop `loop_options` runs."""
    if sample_time is None:
        return {"controller": "continuous", "solver": "tsit5", "rtol": RTOL, "atol": ATOL}
    opts = hold_options(sample_time)
    return {"controller": f"sampled at {1.0 / sample_time:g} Hz, zero-order hold",
            "solver": "rk4", "fixed_step_s": opts["fixed_step"]}  # fmt: skip


def machine_closed_loop(
    plant,
    controller: VDCController,
    ts,
    *,
    q0=None,
    progress: bool = False,
    sample_time: float | None = None,
    **options,
) -> Trajectory:
    """Simulate ``plant`` under ``controller`` from rest at ``q0`` (default the task's first
    waypoint) with the pressures that hold it there, saving at ``ts``: the controller sampled
    every ``sample_time`` s (`loop_options`; ``ts`` on its instants), or continuous (None)."""
    q0 = start_position(controller.reference) if q0 is None else jnp.asarray(q0, dtype=float)
    opts = {**loop_options(sample_time), "max_steps": step_budget(ts, sample_time, 500_000),
            **options}  # fmt: skip
    return simulate(
        plant, controller, controller.reference, q0, jnp.zeros_like(q0), ts, progress=progress,
        **opts,
    )  # fmt: skip


def closed_loop_run(
    plant, controller: VDCController, ts, progress: bool = False, sample_time: float | None = None
) -> Trajectory:
    """`machine_closed_loop` compiled once for every plant, controller and save grid of the
    same shapes (all three are arguments; weak types made strong, `strong_types`, so that a
    file's payload and a sampled one share the program), solver failures returned, not
    raised."""
    # a plant that is the controller's model travels once, as the controller's (None here),
    # so that the program knows it is and makes one kinematic pass a state for both
    # (`jaxmb.simulation.controller.pass_sharing`); a flattened copy would be another object
    same = controller.plant is plant
    steps = step_budget(ts, sample_time, 500_000)  # concrete here, traced inside
    if sample_time is None:  # concrete here; inside, the traced delays would pass unseen
        refuse_delays(plant, "closed_loop_run")
    # whole sampling intervals: the program is keyed by it, not by each delay's value
    delay = None
    if sample_time is not None:
        if isinstance(getattr(plant, "command_delays", None), jax.core.Tracer):
            raise ValueError(
                "closed_loop_run: the plant's valve delays are traced, so the commands to keep "
                "are unknown; call it with a concrete plant, or simulate with max_delay"
            )
        delay = sample_time * kept_commands(longest_delay(plant), sample_time)
    plant, controller, ts = strong_types((None if same else plant, controller, ts))
    return _closed_loop_run(plant, controller, ts, progress, sample_time, steps, delay)


@saved
def _closed_loop_run(plant, controller, ts, progress, sample_time, max_steps, max_delay):
    plant = controller.plant if plant is None else plant
    options = {} if max_delay is None else {"max_delay": max_delay}
    return machine_closed_loop(plant, controller, ts, progress=progress, sample_time=sample_time,
                               throw=False, max_steps=max_steps, **options)  # fmt: skip


def _payload(plant) -> dict:
    """The summary's ``payload_kg``, where the plant has a payload."""
    if "payload" not in plant.model.body_names:
        return {}
    return {"payload_kg": float(plant.model.body("payload").mass)}


def tool_frame(machine) -> str:
    """The frame whose path a report follows: the payload's link, else the model's last frame."""
    if machine.payload is not None:
        return machine.payload.link
    return machine.model.frames[-1].name


def run_machine(
    machine,
    out: Path,
    *,
    plant=None,
    gains: dict | None = None,
    t_final: float | None = None,
    dt_save: float = 1e-3,
    progress: bool = True,
    plots: bool = True,
) -> dict:
    """Run VDC on the file's task (``t_final`` default: the task's) on ``plant`` (default the
    file's; e.g. with identified parameters, which the controller then uses as its model too)
    and write the report into ``out``; returns the summary."""
    plant = machine.plant if plant is None else plant
    controller = machine_controller(machine, plant, gains)
    t_final = machine.task.t_final if t_final is None else t_final
    ts = save_times(t_final, dt_save)
    refuse_off_samples(machine, ts, f"dt_save = {dt_save:g} s over {t_final:g} s")
    h = machine.sample_time
    # quiet: one compiled program, reused by every later run of the same shapes in this
    # process (plant, controller and grid are its arguments); with the bar, `simulate`'s
    # chunks (see control.crane_run)
    if progress:
        tr = machine_closed_loop(plant, controller, ts, progress=True, sample_time=h, throw=False)
    else:
        tr = closed_loop_run(plant, controller, ts, sample_time=h)
    extra = {
        "machine": machine.name,
        "mode": "closed loop: VDC (Petrovic & Mattila eqs. (90)-(91), required forces by virtual "
        "power over the bodies) on the machine file's [task]",
        "gains": {k: jnp.asarray(getattr(controller, k)).tolist() for k in GAINS},
        **_payload(plant),
        **solver_note(h),
    }
    tool = tool_frame(machine)
    return write_machine_report(
        out, plant, tr, control=control_series(controller, tr), extra=extra, plots=plots,
        tool=tool,
    )  # fmt: skip


@saved
def table_replay(plant, table: CommandTable, q0, ts, progress: bool = False) -> Trajectory:
    """``table``'s commands replayed open loop on ``plant`` from rest at ``q0`` with the
    pressures that hold it there, saving at ``ts`` (compiled once for every plant, table and
    grid of the same shapes; solver failures returned, not raised)."""
    opts = {"rtol": RTOL, "atol": ATOL, "max_steps": 500_000}
    return simulate(plant, table, None, q0, jnp.zeros_like(q0), ts, progress=progress,
                    throw=False, **opts)  # fmt: skip


def run_table(
    machine,
    table: CommandTable,
    out: Path,
    *,
    plant=None,
    t_final: float,
    dt_save: float = 1e-3,
    notes: dict | None = None,
    progress: bool = True,
    plots: bool = True,
) -> dict:
    """Replay a command table open loop on ``plant`` (default the file's) from the task's
    first waypoint at rest and write the report into ``out``; returns the summary. ``notes``
    go into the summary as they are (e.g. the commands the replay clipped)."""
    plant = machine.plant if plant is None else plant
    q0 = machine.task.reference()(jnp.zeros(()))
    ts = jnp.linspace(0.0, t_final, int(round(t_final / dt_save)) + 1)
    if progress:  # `simulate`'s chunks move the bar (see control.crane_run)
        tr = table_replay.__wrapped__(plant, table, q0, ts, progress=True)
    else:
        tr = table_replay(plant, table, q0, ts)
    extra = {
        "machine": machine.name,
        "mode": "open-loop replay of a command table from the task's first waypoint at rest",
        "rtol": RTOL,
        "atol": ATOL,
        "solver": "tsit5",
        **_payload(plant),
        **(notes or {}),
    }
    return write_machine_report(out, plant, tr, extra=extra, plots=plots, tool=tool_frame(machine))


@saved
def _terms_along(controller: VDCController, t, q, qd, acts):
    """`VDCController.terms` at every saved state (compiled once per controller layout, and
    kept for later runs: `jaxmb.saved_programs`)."""
    return jax.vmap(
        lambda t_, q_, qd_, a: controller.terms(t_, {"q": q_, "qd": qd_, "actuators": a})
    )(t, q, qd, acts)


def control_series(controller: VDCController, tr: Trajectory) -> dict[str, np.ndarray]:
    """Required piston forces and piston velocities along a closed-loop run (for the report)."""
    acts = {
        a.name: {"p_a": tr.signals[f"p_a_{a.name}"], "p_b": tr.signals[f"p_b_{a.name}"]}
        for a in controller.plant.actuators
    }
    T = _terms_along(controller, tr.t, tr.q, tr.qd, acts)
    out = {}
    for i, a in enumerate(controller.plant.actuators):
        out[f"f_r_{a.name}"] = np.asarray(T.f_pr[:, i])
        out[f"f_p_{a.name}"] = np.asarray(T.f_p[:, i])
        out[f"xd_r_{a.name}"] = np.asarray(T.xd_r[:, i])
    for i, nm in enumerate(tr.coordinate_names):
        out[f"{nm}_d"] = np.asarray(tr.q_d[:, i])
    return out
