"""What the control commands write: each output file and each key of ``summary.json`` of a
``jaxmb simulate`` run (the arm's robust control, `report`: `ROBUST`; a machine file's VDC
closed loop or command-table replay, `machine_report`: `MACHINE`; the flexible 3-RPR's case
study, `rpr3_flexible`: `FOURTH_ORDER`), of ``jaxmb montecarlo`` (`montecarlo`, `mc_report`:
`MONTECARLO`) and of ``jaxmb tune`` (`tune_run`: `TUNE`), with what it holds; ``<NAME>_FILES``
are the files. The reference (``docs/reference.md``, `scripts/make_reference.py`) is generated
from these tables, and the end-to-end tests hold every written folder and summary to them, so
that the two cannot drift. A file's name may hold a placeholder (``<start>``); a name that
ends in ``/`` is a folder, described in its line. Units are SI unless stated."""

__all__ = [
    "ROBUST",
    "ROBUST_FILES",
    "MACHINE",
    "MACHINE_FILES",
    "FOURTH_ORDER",
    "FOURTH_ORDER_FILES",
    "MONTECARLO",
    "MONTECARLO_FILES",
    "TUNE",
    "TUNE_FILES",
]

# `jaxmb simulate` of the arm (Dastranj & Mattila (2026) Section IV): control.report
ROBUST: dict[str, str] = {
    "coordinates": "the coordinates' names, in order (phi, theta, delta)",
    "rmse": "per coordinate, the tracking error's RMSE over the run (rad, or m)",
    "max_abs_error_after_5s": "per coordinate, the largest |e| after the transient: from 5 s, "
    "or over the second half of a run shorter than 10 s",
    "max_abs_error_after_s": "where that window starts, s",
    "ultimate_bound_e": "per coordinate, the computed ultimate bound on |e| (eqs. (22)-(25))",
    "kappa_exceeds_dbar": "per coordinate, whether kappa_i > dbar_i (eq. (25)); where not, "
    "the bound is the K-based one",
    "dbar": "per coordinate, the largest |d| of the lumped uncertainty (eq. (19)) along the "
    "run (N m, or N)",
    "kappa": "per coordinate, the controller's kappa",
    "ultimate_bound_s": "the ultimate bound on |s|, the sliding variable's norm (eq. (23))",
    "gamma_min": "the least eigenvalue of the controller model's Gamma(q) over `workspace_box`",
    "gamma_max": "the largest, likewise",
    "workspace_box": "the box of coordinates the motion spans, 0.05 wider on each side "
    "(delta kept within the chain's domain): `lower`, `upper`, over which Gamma's eigenvalues "
    "are bounded",
    "paper_rmse_table_III": "the RMSE of Dastranj & Mattila (2026) Table III, for comparison",
    "stroke": "delta against its stroke: the range (m), the least and largest delta, the time "
    "outside the range (s) and the first exit (s, null if none)",
    "settle_time_s": "the same instant as `max_abs_error_after_s`, s",
    "solver_steps": "the solver's steps",
    "units": "each coordinate's unit",
}

ROBUST_FILES: dict[str, str] = {
    "summary.json": "the run's summary (its keys below)",
    "timeseries.csv": "every saved instant: `t` and per coordinate `q_`, `qd_`, desired `q_d_`, "
    "`qd_d_`, error `e_` and actuator force `u_` (N m, or N)",
    "rmse.csv": "per coordinate, its unit, the RMSE and Table III's",
    "bounds.csv": "per coordinate: dbar, kappa, whether kappa > dbar, the ultimate bound, the "
    "largest |e| after the transient and whether it is inside the bound",
    "tracking.png": "desired and actual coordinates, the disturbance's window shaded (absent "
    "with `--no-plots`)",
    "errors.png": "the tracking errors with the computed ultimate bound (absent with `--no-plots`)",
    "effort.png": "the actuator forces Q_a (absent with `--no-plots`)",
}

# `jaxmb simulate` of a machine file (the built-in crane's included): control.machine_report
MACHINE: dict[str, str] = {
    "t_final_s": "the run's last saved instant, s",
    "samples": "the saved rows",
    "solver_steps": "the solver's steps",
    "success": "whether the solve succeeded (false: the series stop where it failed)",
    "max_tool_position_error_m": "the largest distance between the tool's achieved and desired "
    "positions, m (the tool: the payload's link, else the model's last frame; closed loop "
    "only)",
    "max_tool_speed_m_s": "the tool's largest speed, m/s (closed loop only)",
    "rho_s": "the performance index rho = max tool position error / max tool speed, s "
    "(closed loop only)",
    "max_joint_error_rad": "per coordinate, the largest |q_d - q| (rad, or m for a prismatic "
    "joint; closed loop only)",
    "rmse_joint_rad": "per coordinate, the RMS of q_d - q, likewise (closed loop only)",
    "saturation_time_s": "per valve, the time its command spent at or beyond its range, s",
    "events": "per cylinder, `stroke_end_<a>`, `cavitation_<a>` and `overpressure_<a>`: "
    "`count`, `first_time` (s, null if none) and `duration` (s)",
    "pressure_range_bar": "each pressure signal's least and largest value, bar",
    "stroke_range_m": "per cylinder, the least and largest stroke, m",
    "machine": "the machine file's `[machine] name`",
    "mode": "what ran, in words: VDC on the file's `[task]`, or a command table's open-loop replay",
    "gains": "the VDC gains the controller ran with (the file's `[vdc]` over the defaults, "
    "then `--gains`; closed loop only)",
    "payload_kg": "the payload's mass, kg (where the machine has a payload)",
    "controller": "`sampled at <rate> Hz, zero-order hold` (the file's `[vdc] rate`) or "
    "`continuous` (closed loop only)",
    "solver": "the integrator: `rk4` at fixed steps (a sampled controller) or `tsit5`",
    "fixed_step_s": "the fixed step, s (a sampled controller only)",
    "rtol": "`tsit5`'s relative tolerance (a continuous controller, or a command table's replay)",
    "atol": "its absolute tolerance",
    "commands_clipped": "per command column, how many commands `--clip-commands` clipped to "
    "the valve's range (with `--clip-commands` only)",
}

MACHINE_FILES: dict[str, str] = {
    "summary.json": "the run's summary (its keys below)",
    "timeseries.csv": "the run as a log (the log format, SI): `t`, each coordinate `<c>` and "
    "`qd_<c>`, each cylinder's `p_a_<a>`, `p_b_<a>`, `u_<a>` (as the valve receives it) and "
    "`x_<a>`",
    "control.csv": "the closed loop's controller: `t`, per cylinder the required and achieved "
    "piston force `f_r_<a>`, `f_p_<a>` and the required piston velocity `xd_r_<a>`, per "
    "coordinate the desired `<c>_d` (closed loop only)",
    "tool_path.png": "the tool's path, desired and achieved, in the two world axes it moves "
    "along most (absent with `--no-plots`)",
    "piston_forces.png": "each cylinder's required and achieved piston force (absent with "
    "`--no-plots`)",
    "pressures.png": "each cylinder's chamber pressures, with supply and return (absent with "
    "`--no-plots`)",
    "valve_voltages.png": "each valve's command, with its range (absent with `--no-plots`)",
}

# `jaxmb simulate` of the flexible 3-RPR (Ider et al. (2019) Section 6): control.rpr3_flexible
FOURTH_ORDER: dict[str, str] = {
    "machine": "the case study, in words",
    "success": "whether every step solved (false: the series stop where one failed)",
    "omega_rad_s": "the ITAE gains' bandwidth (`--omega`), rad/s",
    "model_error": "how much lower the controller model's link masses and inertias, rotor "
    "inertias and spring constants are (0.1: 10 %)",
    "sampling_interval_s": "the controller's sampling interval h, s",
    "solver_steps": "the solver's steps",
    "max_abs_error_after_1s": "per task coordinate (x_G, y_G in m; theta7 in rad), the largest "
    "|e| after 1 s",
    "max_abs_error_0p3_to_1s": "the same over 0.3-1 s",
    "final_error": "per task coordinate, e at the run's end",
    "units": "the task coordinates' units, and the error's sign (e = x_d - x)",
    "impact": "the particle's impact: its time (s), the jumps of the task and joint velocities "
    "and of the particle's velocity, the impulse H and the closure impulses (N s)",
    "stability": "the stability analysis along the run (Section 4): sigma0, Delta_M, m, "
    "Desoer's bound and whether eq. (27) holds, E's eigenvalue range and variation, Upsilon's "
    "largest real eigenvalue, and the norm they are in",
    "steady_state_estimate_eq31": "eq. (31)'s steady-state estimate of e against the simulated "
    "e over 0.6-0.95 s: each one's largest |e| and their largest difference",
    "paper": "what Ider et al. report, and what is computed here instead",
}

FOURTH_ORDER_FILES: dict[str, str] = {
    "summary.json": "the run's summary (its keys below)",
    "tracking_errors.csv": "per task coordinate: its unit, the largest |e| over 0-0.25 s, "
    "0.25-1 s and after 1 s, the RMS and the final e",
    "series.csv": "every sample: `t`, per task coordinate the actual, desired (`_d`) and "
    "rate (`_dot`), and the drives' signals (`phi_`, `phid_`, `deflection_`, "
    "`spring_torque_`, `motor_torque_` per joint, and the commands)",
    "fig2_positions.png": "the platform's position against the reference (absent with "
    "`--no-plots`)",
    "fig3_velocities.png": "its velocity against the reference (absent with `--no-plots`)",
    "fig4_deflections_torques.png": "the joints' elastic deflections and the actuator torques "
    "(absent with `--no-plots`)",
    "frozen_time_eigenvalues.png": "the largest and least real part of Upsilon's eigenvalues "
    "along the run (absent with `--no-plots`)",
}

# `jaxmb montecarlo`: control.montecarlo (the study's files), control.mc_report (the report)
MONTECARLO: dict[str, str] = {
    "samples": "the study's samples",
    "failed": "how many failed (the solve failed, or a figure came out NaN or inf)",
    "failed_samples": "the first 50 failed samples' indices",
    "percentiles": "the percentiles each figure reports (5, 50, 95, 99)",
    "figures": "per figure (a column of `results.parquet`: `rmse_<c>`, `max_error_<c>`, ...), "
    "over the samples that succeeded: `mean`, `max` and `p5` ... `p99`",
    "fraction_within_bound": "the fraction of successful samples whose errors after the "
    "transient stayed within the computed ultimate bound (robust control only; null if none "
    "succeeded)",
    "fraction_kappa_exceeds_dbar": "per coordinate, the fraction of successful samples with "
    "kappa_i > dbar_i (eq. (25); robust control only)",
    "worst": "the 10 worst samples, worst first (a failed one first, then by the largest "
    "error after the transient against its median over the study): `sample`, `failed`, "
    "`max_error` per coordinate and the drawn `parameters`",
    "nominal_parameters": "each drawn parameter's nominal value",
    "uncertainty_ranking": "which drawn parameter's uncertainty moves each outcome most: `how` "
    "(in words) and per outcome its nominal value, first-order std and leading parameters' "
    "effects (a study over an `[identified]` distribution, unless its `rank = false`)",
}

MONTECARLO_FILES: dict[str, str] = {
    "summary.json": "the study's summary once every sample is done (its keys below)",
    "study.json": "what identifies the study (its configuration, the drawn parameters' names, "
    "samples, lanes): a run in the same folder resumes it, and a different study is refused",
    "chunks/part-<start>-<stop>.parquet": "the rows of samples `<start>` to `<stop>` - 1, "
    "written as each chunk finishes, with hashes of the configuration and of the drawn values "
    "in the file's metadata (what a resume checks)",
    "results.parquet": "one row per sample, in order: `sample`, each drawn parameter, the "
    "study's figures (null for a failed sample) and `failed`",
    "chunks/part-<start>-<stop>.tmp": "a chunk being written, renamed to its `.parquet` once "
    "whole (a killed run may leave one behind; it is never read)",
    "results.parquet.tmp": "`results.parquet` being written, likewise",
    "error_distributions.png": "histograms of each coordinate's RMSE and largest error after "
    "the transient (absent with `--no-plots`)",
    "errors_vs_bounds.png": "each sample's largest error against its computed ultimate bound "
    "(robust control only; absent with `--no-plots`)",
    "worst_cases.png": "the worst samples' parameters against their nominal values (absent "
    "with `--no-plots`)",
    "uncertainty_ranking.csv": "per outcome, every drawn parameter ranked by its uncertainty's "
    "first-order effect: rank, effect, share of the variance, std, and the outcome's nominal "
    "value and std (where the summary has `uncertainty_ranking`)",
}

# `jaxmb tune`: control.tune_run
TUNE: dict[str, str] = {
    "scenario": "the configuration's `[study] scenario`",
    "tuning": "the tuning: its samples, horizon `t_final` (s), Adam `steps`, the "
    "`chosen_step` and its `final_loss`, the chosen step's figures (robust control: `dbar`, "
    "`kappa_exceeds_dbar`, `peak_over_limit`, `ultimate_bound_e`; VDC: "
    "`peak_command_over_u_max`, `pressure_excess_over_band`) and the `conflicts` left, in "
    "words",
    "gains": "`tuned` (as `gains.json` reads back) and `given` (the configuration's) gains",
    "validation_tuned": "the tuned gains on the fresh validation samples, with `samples` and "
    "`failed`: robust control, per coordinate kappa, the largest dbar, eq. (25), the ultimate "
    "bound and the measured error's p95 and max; VDC, per coordinate the RMSE and error after "
    "the transient (p50, p95, max) with their unit, per valve its range, peak command and "
    "saturation time, and `pressure_limits_hit_fraction`",
    "validation_given": "the same for the given gains",
    "changed": "what tuning changed on the validation samples: per gains the fraction of "
    "samples whose RMSE is within `[tune] tolerated_error` on every coordinate and each "
    "coordinate's worst error (with `tolerated_error` only)",
}

TUNE_FILES: dict[str, str] = {
    "summary.json": "the tuning's summary (its keys below)",
    "gains.json": "the tuned gains, for `jaxmb simulate --gains` and `jaxmb montecarlo --gains`",
    "history.csv": "one row per Adam step: the loss and its terms, whether feasible, the "
    "step's figures and gains",
    "tune_state.json": "the optimiser's state and the history, with the hashes of the "
    "configuration and samples: a run in the same folder resumes from it, another "
    "configuration's is refused",
    "tune_state.json.tmp": "`tune_state.json` being written, renamed to it once whole (a "
    "killed run may leave one behind; it is never read)",
    "validation_tuned/": "a Monte Carlo study of the tuned gains on fresh samples: the files "
    "of `jaxmb montecarlo`, without `uncertainty_ranking.csv`",
    "validation_given/": "the same for the given gains",
    "loss_history.png": "the loss and its terms over the Adam steps (absent with `--no-plots`)",
    "comparison.png": "the given and tuned gains' figures on the validation samples (absent "
    "with `--no-plots`)",
}
