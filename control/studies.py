r"""The scenarios a Monte Carlo study runs: one sample is a perturbed plant (`sampling`), an
initial error and a disturbance level, simulated in closed loop and reduced to fixed-size
figures (`SampleFigures`), so that a batch of samples is one vmapped, jitted computation.

- `ArmStudy`: Dastranj & Mattila (2026) Section IV (`section_iv`): the full arm under the robust
  controller of eq. (18) on the nominal model. Besides the errors and efforts, every sample gets
  its own ``dbar`` (eq. (19) along its run, `lumped_uncertainty`) and the ultimate bounds of
  eqs. (22)-(25) it implies, and whether its measured errors stayed within them.
- `MachineStudy`: a hydraulic machine file (the built-in crane's, on the A-B-C-D task, or a
  user's) under VDC (Petrovic & Mattila (2022) eqs. (90)-(91)) on the file's ``[task]``, with
  valve saturation and pressure-limit figures. VDC's stability result is virtual stability
  (L2/L-infinity, Theorem 5), not an ultimate bound, so its rows carry none.

Scenario-level leaves a study adds to the plant's (`sampling.leaf_getter`):
``initial_error.<coordinate>`` (q0 - q_d(0) for the arm, q0 - the task's first waypoint for a
machine),
``disturbance.scale`` (a factor on the arm's push) and ``body.payload.mass`` (a point mass at
the tool, kg, that the controller does not know).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxmb.control.bounds import inertia_eigenvalue_bounds, lumped_uncertainty, ultimate_bounds
from jaxmb.control.machine_run import (
    ATOL,
    RTOL,
    loop_options,
    machine_controller,
    refuse_off_samples,
    save_times,
    step_budget,
)
from jaxmb.control.robust import RobustController
from jaxmb.control.sampling import (
    Distribution,
    leaf_getter,
    nominal_value,
    with_leaves,
    with_point_mass,
)
from jaxmb.control.scenario import Scenario, section_iv
from jaxmb.control.vdc_control import VDCController
from jaxmb.models.series_parallel import STROKE
from jaxmb.simulation import ADAPTIVE_SOLVERS, simulate, start_position
from jaxmb.simulation.zero_order_hold import longest_delay

__all__ = ["SolverOptions", "ArmStudy", "MachineStudy", "arm_study", "machine_study"]


@dataclass(frozen=True)
class SolverOptions:
    """diffrax options of every sample's solve (``max_steps`` exhausted = a failed sample)."""

    rtol: float = 1e-6
    atol: float = 1e-8
    max_steps: int = 200_000
    dt_save: float = 0.01
    dtmin: float = 1e-9
    method: str = "tsit5"  # a solver name of `jaxmb.simulation.simulate`

    def __post_init__(self):
        if self.method not in ADAPTIVE_SOLVERS:
            raise ValueError(
                f"solver.method: must be one of {sorted(ADAPTIVE_SOLVERS)}, got {self.method!r}"
            )
        for k in ("rtol", "atol", "dt_save", "dtmin"):
            v = getattr(self, k)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"solver.{k}: must be a finite number > 0, got {v}")
        if not (isinstance(self.max_steps, int) and self.max_steps >= 1):
            raise ValueError(f"solver.max_steps: must be an integer >= 1, got {self.max_steps}")


def _excursion_time(bad, dt):
    """Seconds during which ``bad`` holds, on a save grid of step ``dt``."""
    return jnp.sum(bad, axis=0) * dt


def _solve_figures(tr) -> dict:
    """The figures every study's row ends with: the solver's step count and whether it failed."""
    return {"num_steps": tr.num_steps, "failed": ~tr.success}


class _Study(eqx.Module):
    """What both studies share: the distribution and the nominal values of its parameters."""

    distribution: Distribution = eqx.field(static=True)
    nominal_values: Float[Array, " P"]
    seed: int = eqx.field(static=True)
    options: SolverOptions = eqx.field(static=True)
    settle: float = eqx.field(static=True)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return self.distribution.names

    def check_controller(self, controller) -> None:
        """Refuse, before anything compiles, a controller this study cannot run (none here)."""

    def values(self, indices) -> np.ndarray:
        """The parameter values of samples ``indices``, ``(len, P)`` (host arrays; a sample's
        values depend on the seed and its index alone)."""
        return self.distribution.sample(self.nominal_values, self.seed, indices)

    def _scenario_value(self, values, key: str, default):
        names = self.parameter_names
        return values[names.index(key)] if key in names else default

    def _plant_values(self, values) -> dict:
        return {
            n: values[i]
            for i, n in enumerate(self.parameter_names)
            if n.split(".")[0] not in ("initial_error", "disturbance")
        }


def _nominal_values(system, distribution, scenario_defaults) -> np.ndarray:
    out = []
    for n in distribution.names:
        if n in scenario_defaults:
            out.append(scenario_defaults[n])
        elif n.split(".")[0] in ("initial_error", "disturbance"):
            raise ValueError(
                f"parameter {n!r}: unknown scenario parameter; this study has "
                f"{sorted(scenario_defaults)}"
            )
        else:
            out.append(nominal_value(system, n))
    return np.asarray(out, dtype=float)


class ArmStudy(_Study):
    """The Section IV scenario over perturbed plants (see the module docstring).

    Attributes:
        scenario: the nominal scenario (its controller is the default; `run` takes any).
        ts: save times, s.
        gamma: bounds of the nominal Gamma's eigenvalues over the workspace (eq. (23)).
        torque_limit: |Q_a| limits per coordinate (N m, N m, N) the saturation time refers to.
    """

    scenario: Scenario
    ts: Float[Array, " T"]
    gamma: tuple[Array, Array]
    torque_limit: Float[Array, " n"]

    @property
    def coordinate_names(self) -> tuple[str, ...]:
        return self.scenario.plant.coordinate_names

    def realise(self, values):
        """``(plant, q0, disturbance)`` of a sample."""
        sc = self.scenario
        plant = with_leaves(sc.plant, self._plant_values(values))
        e0 = jnp.stack(
            [
                self._scenario_value(values, f"initial_error.{c}", sc.q0[i] - sc.reference(0.0)[i])
                for i, c in enumerate(self.coordinate_names)
            ]
        )
        scale = self._scenario_value(values, "disturbance.scale", 1.0)
        dist = jax.tree.map(lambda x: x * scale, sc.disturbance, is_leaf=eqx.is_array)
        return plant, sc.reference(0.0) + e0, dist

    def trajectory(self, controller: RobustController, values, options=None, adjoint=None):
        """``(trajectory, dbar)`` of a sample: its closed loop (``throw=False``) and the
        largest |d_i| of eq. (19) along it (`lumped_uncertainty` at the save times).
        ``adjoint`` as `simulate`'s."""
        plant, q0, dist = self.realise(values)
        o = self.options if options is None else options
        tr = simulate(
            plant, controller, self.scenario.reference, q0, self.scenario.qd0, self.ts,
            disturbance=dist, throw=False, rtol=o.rtol, atol=o.atol, max_steps=o.max_steps,
            dtmin=o.dtmin, solver=o.method, adjoint=adjoint,
        )  # fmt: skip
        d = jax.vmap(
            lambda t_, q, qd, u: lumped_uncertainty(
                controller.model, plant, t_, q, qd, u, wrenches=dist.wrenches_at
            )
        )(tr.t, tr.q, tr.qd, tr.u)
        return tr, jnp.max(jnp.abs(d), axis=0)

    def run(self, controller: RobustController, values) -> dict[str, Array]:
        """One sample's figures (scalars, NaN where the solve failed: see `failed`)."""
        o = self.options
        tr, dbar = self.trajectory(controller, values)
        b = ultimate_bounds(
            controller.K, controller.kappa, controller.eps, controller.Lambda, dbar, *self.gamma
        )
        e = tr.e
        after = (tr.t >= self.settle)[:, None]
        max_err = jnp.max(jnp.where(after, jnp.abs(e), 0.0), axis=0)
        delta = tr.q[:, 2]
        out = {
            "rmse": jnp.sqrt(jnp.mean(e**2, axis=0)),
            "max_error": max_err,
            "peak_effort": jnp.max(jnp.abs(tr.u), axis=0),
            "effort_limit_time": _excursion_time(
                jnp.abs(tr.u) > self.torque_limit[None, :], o.dt_save
            ),
            "dbar": dbar,
            "bound_e": b.e,
            "kappa_exceeds_dbar": b.kappa_exceeds_dbar,
        }
        flat = {
            f"{k}_{c}": v[i] for k, v in out.items() for i, c in enumerate(self.coordinate_names)
        }
        flat["bound_held"] = jnp.all(max_err <= b.e)
        flat["stroke_exit_time"] = _excursion_time(
            (delta < STROKE[0]) | (delta > STROKE[1]), o.dt_save
        )
        return flat | _solve_figures(tr)


def arm_study(
    distribution: Distribution,
    *,
    seed: int = 0,
    t_final: float = 20.0,
    options: SolverOptions = SolverOptions(),
    settle: float = 5.0,
    torque_limit=(np.inf, np.inf, np.inf),
    payload: float = 0.0,
    **gains,
) -> tuple[ArmStudy, RobustController]:
    """The Section IV study and its default controller (Table II gains unless given).

    With a ``body.payload.mass`` parameter the plant carries a point mass at the tool frame F3
    (nominal ``payload`` kg) that the controller's model does not have."""
    limit = np.asarray(torque_limit, dtype=float)
    if limit.shape not in ((), (3,)) or not np.all(limit > 0):
        raise ValueError(f"limits.torque: expected 3 values > 0 (N m, N m, N), got {limit}")
    limit = np.broadcast_to(limit, (3,))
    sc = section_iv(t_final=t_final, **gains)
    if "body.payload.mass" in distribution.names or payload > 0:
        sc = eqx.tree_at(lambda s: s.plant, sc, with_point_mass(sc.plant, "payload", "F3", payload))
    e0 = np.asarray(sc.q0 - sc.reference(0.0))
    defaults = {f"initial_error.{c}": float(e0[i]) for i, c in enumerate(sc.plant.coordinate_names)}
    defaults["disturbance.scale"] = 1.0
    nominal = _nominal_values(sc.plant, distribution, defaults)
    ts = jnp.linspace(0.0, t_final, int(round(t_final / options.dt_save)) + 1)
    # the workspace box of eq. (23): the reference's range plus the initial errors and a margin,
    # inside the chain's domain in delta, (-l0, 2 L0 - l0)
    ref = np.asarray(jax.vmap(sc.reference)(ts))
    lo = ref.min(axis=0) - np.abs(e0) - 0.05
    hi = ref.max(axis=0) + np.abs(e0) + 0.05
    lo[2], hi[2] = max(lo[2], -0.4), min(hi[2], 0.27)
    # rounded: the search's last bit varies with the device layout, and a sample's figures
    # must not (the bounds are estimates to a few digits anyway)
    gamma = tuple(
        jnp.asarray(float(f"{float(g):.12g}"))
        for g in inertia_eigenvalue_bounds(sc.nominal, lo, hi)
    )
    study = ArmStudy(
        distribution=distribution,
        nominal_values=jnp.asarray(nominal),
        seed=int(seed),
        options=options,
        settle=min(float(settle), 0.5 * t_final),
        scenario=sc,
        ts=ts,
        gamma=gamma,
        torque_limit=jnp.asarray(limit),
    )
    return study, sc.controller


class MachineStudy(_Study):
    """A hydraulic machine file's VDC closed loop on its waypoint task over perturbed plants
    (`machine_study`): the built-in crane's on the A-B-C-D task, or a user's.

    Attributes:
        plant: the nominal plant (with the file's ``payload`` point mass, if it has one: 0 kg
            nominal for the crane).
        ts: save times, s.
        q0: the nominal initial position (the task's first waypoint), rad or m.
        kinematics_fixed: no sampled parameter is geometry, so every sample's plant has the
            nominal kinematics, the controller's model's (`controller_on`).
        sample_time: the controller's sampling interval (s; the machine file's ``[vdc]
            rate``), or None for the continuous loop, which the ``[solver]`` options run.
        max_delay: the longest command delay (s) any sample's valves may have (the nominal
            ones, and sampled ones to `Distribution.upper_bounds`): the sampled loop keeps
            the commands that long (`jaxmb.simulation.zero_order_hold`).
    """

    plant: object
    ts: Float[Array, " T"]
    q0: Float[Array, " n"]
    # no sampled parameter is geometry (`HydraulicPlant.kinematic_nodes`): every sample's
    # plant has the nominal plant's kinematics, which are the controller's model's
    kinematics_fixed: bool = eqx.field(static=True, default=False)
    sample_time: float | None = eqx.field(static=True, default=None)
    max_delay: float = eqx.field(static=True, default=0.0)

    def solve_options(self, options: SolverOptions) -> dict:
        """`simulate`'s options of a sample's loop: the machine's sampled controller at fixed
        steps (`machine_run.loop_options`), or ``options``' adaptive solve where it is
        continuous; ``max_steps`` from ``options`` either way."""
        if self.sample_time is not None:
            return {**loop_options(self.sample_time), "max_steps": options.max_steps,
                    "max_delay": self.max_delay}  # fmt: skip
        return {"rtol": options.rtol, "atol": options.atol, "max_steps": options.max_steps,
                "dtmin": options.dtmin, "solver": options.method}  # fmt: skip

    @property
    def coordinate_names(self) -> tuple[str, ...]:
        return self.plant.coordinate_names

    def realise(self, values):
        plant = with_leaves(self.plant, self._plant_values(values))
        q0 = self.q0
        e0 = jnp.stack(
            [self._scenario_value(values, f"initial_error.{c}", 0.0) for c in self.coordinate_names]
        )
        return plant, q0 + e0

    def controller_on(self, controller: VDCController, plant) -> VDCController:
        """``controller`` (a VDC on the study's nominal plant, `machine_study`) for a sample's
        ``plant``: where the study samples no geometry, its model reads the sample's very
        geometry arrays, the same values, so that the closed loop makes one kinematic pass a
        state for both (`jaxmb.simulation.controller.pass_sharing`); otherwise unchanged."""
        if not self.kinematics_fixed:
            return controller
        self.check_controller(controller)
        return eqx.tree_at(lambda c: c.plant.kinematic_nodes(), controller, plant.kinematic_nodes())

    def check_controller(self, controller: VDCController) -> None:
        """Refuse a controller whose model has another geometry than the study's nominal plant
        (`controller_on` would hand it the samples'); traced arrays pass (the study's runners
        check their controller before they compile: `montecarlo.chunk_runner`, the tuning)."""
        if not self.kinematics_fixed:
            return
        (mine, structure), (nominal, expected) = (
            jax.tree.flatten(p.kinematic_nodes()) for p in (controller.plant, self.plant)
        )
        if any(isinstance(x, jax.core.Tracer) for x in mine + nominal):
            return
        if structure != expected or not all(
            np.array_equal(a, b) for a, b in zip(mine, nominal, strict=True)
        ):
            raise ValueError(
                "machine study: the controller's model has another geometry (frames, mounts, "
                "coordinate map) than the study's plant; a study's controller is a VDC on its "
                "nominal plant, with any gains"
            )

    def trajectory(self, controller: VDCController, values, adjoint=None):
        """``(plant, trajectory)`` of the sample ``values``' closed loop; ``adjoint``: how the
        solve differentiates (`jaxmb.simulation.simulate`; `uncertainty_ranking` runs it in
        forward mode)."""
        plant, q0 = self.realise(values)
        controller = self.controller_on(controller, plant)
        o = self.options
        tr = simulate(
            plant, controller, controller.reference, q0, jnp.zeros_like(q0), self.ts, throw=False,
            adjoint=adjoint, **self.solve_options(o),
        )  # fmt: skip
        return plant, tr

    def run(self, controller: VDCController, values) -> dict[str, Array]:
        plant, tr = self.trajectory(controller, values)
        o = self.options
        e = tr.e
        after = (tr.t >= self.settle)[:, None]
        flat = {}
        for i, c in enumerate(self.coordinate_names):
            flat[f"rmse_{c}"] = jnp.sqrt(jnp.mean(e[:, i] ** 2))
            flat[f"max_error_{c}"] = jnp.max(jnp.where(after[:, 0], jnp.abs(e[:, i]), 0.0))
        for j, a in enumerate(plant.actuators):
            u = tr.u[:, j]
            flat[f"peak_effort_{a.name}"] = jnp.max(jnp.abs(u))
            flat[f"peak_pressure_{a.name}"] = jnp.max(
                jnp.maximum(tr.signal(f"p_a_{a.name}"), tr.signal(f"p_b_{a.name}"))
            )
            flat[f"valve_saturation_time_{a.name}"] = _excursion_time(
                jnp.abs(u) >= a.valve.u_max, o.dt_save
            )
            for kind in ("cavitation", "overpressure", "stroke_end"):
                ev = tr.events[f"{kind}_{a.name}"]
                flat[f"{kind}_time_{a.name}"] = ev["duration"]
        flat["pressure_limits_hit"] = (
            sum(
                (tr.events[f"{k}_{a.name}"]["count"] > 0).astype(int)
                for k in ("cavitation", "overpressure")
                for a in plant.actuators
            )
            > 0
        )
        return flat | _solve_figures(tr)


def machine_study(
    machine,
    distribution: Distribution,
    *,
    seed: int = 0,
    t_final: float | None = None,
    options: SolverOptions = SolverOptions(rtol=RTOL, atol=ATOL, dt_save=1e-3),  # noqa: B008
    settle: float = 0.0,
    payload: float | None = None,
    plant=None,
    **gains,
) -> tuple[MachineStudy, VDCController]:
    """A machine file's study: VDC (`machine_run.machine_controller`, the file's gains unless
    given) on the file's ``[task]`` (``t_final`` default the task's), over plants perturbed as
    ``distribution`` says. ``plant`` (default the file's; e.g. with identified parameters) is
    both the nominal plant and the controller's model. ``payload`` (kg) replaces the simulated
    plant's payload (needs a ``[payload]`` table); the controller keeps its own."""
    plant = machine.plant if plant is None else plant
    delays = [n for n in distribution.names if n.startswith("valve.") and n.endswith(".delay")]
    if delays and machine.sample_time is None:
        raise ValueError(
            f"[study] parameters {delays}: a valve's command delay needs the sampled loop, "
            f"which holds the commands until they arrive (machine file {machine.path}: [vdc] "
            'rate = "continuous")'
        )
    controller = machine_controller(machine, plant, gains=gains)
    if payload is not None:
        if machine.payload is None:
            raise ValueError(f"[study] payload: machine file {machine.path} has no [payload]")
        j = plant.model.body_names.index("payload")
        plant = eqx.tree_at(lambda p: p.model.bodies[j].mass, plant, jnp.asarray(float(payload)))
    t_final = machine.task.t_final if t_final is None else t_final
    q0 = start_position(controller.reference)
    defaults = {f"initial_error.{c}": 0.0 for c in plant.coordinate_names}
    nominal = _nominal_values(plant, distribution, defaults)
    # every plant parameter's leaf (a wrong name is refused here), to see whether any is geometry
    sampled = {id(leaf_getter(plant, n)(plant)) for n in distribution.names
               if n.split(".")[0] != "initial_error"}  # fmt: skip
    geometry = {id(x) for x in jax.tree.leaves(plant.kinematic_nodes())}
    ts = save_times(t_final, options.dt_save)
    refuse_off_samples(machine, ts, f"[solver] dt_save = {options.dt_save:g} s over {t_final:g} s")
    h = machine.sample_time
    if h is not None:  # fixed steps: a long task needs more than the default budget
        options = replace(options, max_steps=step_budget(ts, h, options.max_steps))
    study = MachineStudy(
        distribution=distribution,
        nominal_values=jnp.asarray(nominal),
        seed=int(seed),
        options=options,
        settle=min(float(settle), 0.5 * t_final),
        plant=plant,
        ts=ts,
        q0=q0,
        kinematics_fixed=geometry.isdisjoint(sampled),
        sample_time=h,
        max_delay=min(_longest_sampled_delay(plant, distribution, nominal), float(t_final)),
    )
    return study, controller


def _longest_sampled_delay(plant, distribution: Distribution, nominal) -> float:
    """The longest command delay (s) of the nominal plant or of any sample's (`MachineStudy`;
    the caller caps it at the horizon, beyond which no command arrives)."""
    longest = longest_delay(plant)
    bounds = distribution.upper_bounds(nominal)
    for name, bound in zip(distribution.names, bounds, strict=True):
        if name.startswith("valve.") and name.endswith(".delay"):
            longest = max(longest, float(bound))
    return longest
