"""What `jaxmb identify` writes on each route, and a log's free-run replay (``jaxmb simulate
--machine FILE.toml --commands LOG``, `replay`): each output file (`HYDRAULIC_FILES`,
`RIGID_FILES`, `REPLAY_FILES`) and each key of its ``summary.json`` (`HYDRAULIC`, `RIGID`,
`REPLAY`), with what it holds. The reference (``docs/reference.md``, `scripts/make_reference.py`)
is generated from these tables, and the end-to-end tests hold every written folder and summary
to them, so that the two cannot drift. A file's name may hold a placeholder: ``<log>`` is a
log file's name without its extension. Units are SI in ``summary.json`` (rad, m, Pa, kg);
``validation.csv``, the plots and the printed report show degrees, millimetres and bar."""

__all__ = ["HYDRAULIC", "RIGID", "REPLAY", "HYDRAULIC_FILES", "RIGID_FILES", "REPLAY_FILES"]

HYDRAULIC: dict[str, str] = {
    "model": "the machine: the name given to `--model` (a built-in one), or its file's "
    "`[machine] name`",
    "log": "the fit log's path, or the fit logs' paths of a campaign",
    "validation_logs": "the `--validate` logs' paths",
    "route": '"output error": the hydraulic route (stage 1 on the pressure forces, then output '
    "error through the simulation)",
    "method": "how stage 2 fitted, in words: solver, step, Jacobian, segments, start states, "
    "weights, and how its covariance counts residuals correlated in time",
    "method_key": "the method's short name",
    "machine_file": "the machine file's path",
    "condition_number": "condition number of stage 2's Jacobian, its columns scaled to unit "
    "norm: large means some "
    "parameters trade against others (see `poorly_identified`)",
    "parameters": "each fitted parameter's value by its name (`valve.<v>.c_pa`, "
    "`cylinder.<c>.beta`, `friction.<c>.F_c`, `sensor.<c>.p_a`, `encoder.<coordinate>.offset`, "
    "`body.<link>.mass`, ...); std and 95 % interval in `parameters.csv`",
    "poorly_identified": "parameters whose relative std exceeds 20 % (an offset's: whose std "
    "exceeds its step): the logs hardly determine them",
    "cost_initial": "the last fit's least-squares cost 1/2 |r|^2 at its start",
    "cost_final": "the same at the estimate",
    "evaluations": "residual-and-Jacobian evaluations of the last fit",
    "conditions": "the fit's payload where one log names it or the payload was identified: "
    "`payload_kg`, and `payload_source` when identified (empty for a campaign whose logs all "
    "name theirs: see `fit_logs`)",
    "payload": "the identified payload: mass, its std and 95 % interval, centre of mass and its "
    "std, which coordinates of it the logs do not determine, and how it was found",
    "mechanics": "stage 1: method, its fit's statistics, bodies, friction, what the prior determined, "
    "(`stage2`) whether stage 2 kept the mechanics fixed or refined the masses, with the "
    "held-out costs that chose it",
    "leakage": "internal leakage: `choice` (none / fitted), the held-out costs of both, the gain "
    "and its standard error, the parameters",
    "valve_effects": "per effect group (`overlap`, `dynamics`: delay and spool lag): held or "
    "fitted, with the held-out costs, gain and standard error (held, with no parameters, where "
    "the file declares none)",
    "offsets": "the pressure transducers' offsets: none or fitted in stage 2, with the held-out "
    "costs, gain and standard error; `stage1`: the cylinders' pressure-force offsets stage 1 "
    "kept",
    "encoder_offsets": "the encoders' offsets: none or fitted, likewise",
    "long_refit": "the refit on long segments: `choice` (yes / no), the held-out costs that "
    "chose it, the parameters it fits and holds, its segments and their pieces",
    "fit_rmse": "each signal's RMSE over the fit logs' segments, predicted by the identified plant "
    "from each segment's start state (SI)",
    "fit_rmse_nominal": "the same by the machine file's plant",
    "fit_logs": "each fit log: its payload and where it came from, duration, and its own "
    "`fit_rmse`",
    "segment_time_s": "stage 2's multiple-shooting segment length (`--segment-time`), s",
    "residual_scales": "each signal's noise level against the model (SI): the weights of the fit",
    "samples": "residual samples per signal in stage 2",
    "validation": "what validation is: a free-run replay from the measured start",
    "validation_failed": "validation logs whose replay failed, with the error: the fit is "
    "written regardless (present only when one failed)",
    "model_misfit": "validation signals whose replay misses by more than "
    "`model_misfit_threshold` times what the noise and the parameters' spread explain",
    "model_misfit_threshold": "that multiple (3)",
    "validation_rmse": "per validation log, each signal's free-run RMSE (SI)",
    "validation_rmse_nominal": "the same by the machine file's plant",
    "validation_fit_percent": "per validation log, each signal's NRMSE fit % (MATLAB's `compare`: "
    "100 (1 - |y - y_hat| / |y - mean y|))",
    "validation_fit_percent_nominal": "the same by the machine file's plant",
    "validation_rmse_segments": "per validation log, the RMSE predicted segment-wise (restarting "
    "every `segment_time_s` from the measured state), as `fit_rmse` for the fit logs",
    "validation_drift_std": "per validation log, each signal's replay spread that the "
    "parameters' covariance implies",
    "validation_rmse_expected": "per validation log, the RMSE the noise and that spread let one "
    "expect; `model_misfit` compares against it",
    "plots": "the figures written: fits, validation replays and their residuals",
    "params_file": '"params.json": the identified parameters, which `simulate`, `montecarlo` '
    "and `tune` take (`--params`, a study's `params`)",
    "time_s": "the command's wall time, s",
}

RIGID: dict[str, str] = {
    "model": "the robot: the name given to `--model` (a built-in one), or its URDF's path",
    "log": "the fit log's path, or the fit logs' paths",
    "validation_logs": "the `--validate` logs' paths",
    "route": '"regressor": the rigid route (inverse dynamics linear in the parameters, on '
    "low-passed positions and their derivatives)",
    "method": "how it fitted, in words",
    "method_key": "`consistent` (the default: base parameters by WLS, then a physically "
    "consistent fit), `wls` or `ols` (`--method`)",
    "known_forces": "generalized forces the model carries as known (a built-in robot's "
    "counterbalance), not fitted",
    "cutoff_hz": "the low-pass cutoff, Hz, given or chosen",
    "cutoff_choice": "how the cutoff was chosen from the fit logs' motion: each joint's "
    "velocity bandwidth and the rule (null where `--cutoff` was given)",
    "coulomb_width_choice": "how the Coulomb sign's width was chosen: each joint's filtered "
    "velocity noise and the rule (null where `--coulomb-width` was given)",
    "settings": "each setting with its value and whether it was given, chosen from the data or "
    "a default, and why",
    "condition_number": "condition number of the base regressor, its columns scaled to unit norm",
    "n_base_parameters": "the number of base parameters (the combinations the motion determines)",
    "n_standard_parameters": "the number of standard parameters (10 per body and each joint's "
    "terms)",
    "unidentifiable": "standard parameters that no base parameter contains: the motion does not "
    "determine them",
    "weak_directions": "combinations of base parameters the motion hardly excites",
    "physically_consistent": "per body, whether its identified inertia is physically consistent "
    "(positive mass, inertia satisfying the triangle inequalities)",
    "samples": "filtered samples the fit used",
    "sampling": "per log: its sample interval, the jitter and gaps found and what was done "
    "(`--resample`)",
    "fit_rmse": "each joint's torque RMSE on the fit logs (N m or N)",
    "fit_rmse_per_log": "the same per fit log",
    "wls_sigma_per_log": "per fit log, each joint's noise level: the weights of the fit",
    "payloads": "per fit log, the known payload it carried (mass, centre, frame)",
    "validation_rmse": "per validation log, each joint's torque RMSE on the samples "
    "`validation_edge_s` in from each end",
    "validation_fit_percent": "per validation log, each joint's NRMSE fit % (MATLAB's `compare`)",
    "validation_rmse_every_sample": "per validation log, the RMSE on every sample",
    "validation_edge_s": "the edge the filter spoils at each end, s (3 / cutoff)",
    "plots": "the figures written: the fit and each validation log, measured and predicted",
    "urdf": "`identified.urdf`: the file written and the known forces it cannot hold "
    "(`not_in_file`), or why none was written",
    "params_file": '"params.json": the identified bodies and joint terms, which `simulate '
    "--params` takes",
    "time_s": "the command's wall time, s",
}

REPLAY: dict[str, str] = {
    "machine": "the machine file's `[machine] name`",
    "machine_file": "the machine file's path",
    "log": "the replayed log's path (`--commands`)",
    "params": "the parameter file's path (`--params`), or null: the machine file's plant",
    "mode": "what ran, in words: the free-run replay of the logged commands from the measured "
    "initial state",
    "solver": "the integrator: RK4 at a fixed 1 ms",
    "payload_kg": "the payload's mass, kg (`--payload`, else the log sidecar's, else the "
    "parameter file's or the machine file's); null where the machine has no payload",
    "t_span_s": "the first and last instant replayed, s (`--t-final` cuts the log short)",
    "rmse": "each signal's free-run RMSE (SI)",
    "rmse_display": "the same in `display_units`",
    "display_units": "each signal's display unit (deg, mm, bar), as in the plots",
    "fit_percent": "each signal's NRMSE fit % (MATLAB's `compare`: 100 (1 - |y - y_hat| / "
    "|y - mean y|))",
    "plots": "the figures written (absent with `--no-plots`)",
}

HYDRAULIC_FILES: dict[str, str] = {
    "summary.json": "the run's summary (its keys below): written once the fit is done, "
    "then again once the validation logs have replayed",
    "parameters.csv": "each parameter stage 2 fitted or held: value, std, relative std %, 95 % "
    "interval, the machine file's value (`nominal`) and stage 1's (`stage1`)",
    "mechanics.csv": "each stage-1 parameter (the bodies' inertial parameters, the cylinders' "
    "friction and pressure-force offsets): value, std, 95 % interval, the machine file's "
    "value, and whether the log or the prior determines it",
    "base_parameters.csv": "stage 1's base parameters (the combinations the motion "
    "determines): WLS value, std and 95 % interval",
    "covariance.json": "the parameters' joint covariance (stage 2's, the long refit's held "
    "parameters' and stage 1's), which a study's `[identified]` draws from",
    "params.json": "the identified model: hydraulic parameters, payload and their "
    "uncertainty, for `jaxmb simulate --params` and a study's `params`",
    "validation.csv": "per validation log and signal: the free-run RMSE (deg, mm, bar) of the "
    "identified plant, of the machine file's and the expected one, and both fit % (empty "
    "without `--validate`)",
    "fit_<log>.png": "per fit log, each signal measured and predicted segment-wise from each "
    "segment's start state",
    "residuals_fit_<log>.png": "its residuals over time, and their histogram",
    "validation_<log>.png": "per validation log, each signal measured and replayed free-run "
    "by the identified plant",
    "residuals_validation_<log>.png": "its residuals over time, and their histogram",
    "validation_<log>_nominal.png": "the same replay by the machine file's plant",
    "residuals_validation_<log>_nominal.png": "its residuals over time, and their histogram",
}

RIGID_FILES: dict[str, str] = {
    "summary.json": "the run's summary (its keys below)",
    "parameters.csv": "each base parameter (the combination of standard parameters it is): "
    "value, std, relative std % and 95 % interval",
    "covariance.json": "the base parameters' joint covariance (for the low-passed noise)",
    "params.json": "the identified bodies and joint terms, for `jaxmb simulate --params`",
    "identified.urdf": "the input URDF (or the built-in model's) with the identified inertias, "
    "damping, friction and armature: only for a physically consistent fit (`--method "
    "consistent`) of a model without closed loops (the summary's `urdf` says why not)",
    "fit_<log>.png": "per fit log, each generalized force measured and predicted (N m or N)",
    "residuals_fit_<log>.png": "its residuals over time, and their histogram",
    "validation_<log>.png": "per validation log, the same",
    "residuals_validation_<log>.png": "its residuals over time, and their histogram",
}

REPLAY_FILES: dict[str, str] = {
    "summary.json": "the replay's summary (its keys below)",
    "replay.csv": "a log of the replay (the log format): each signal as replayed (`<signal>`) "
    "and as measured (`measured_<signal>`), SI",
    "replay.json": "its sidecar: the machine's name",
    "replay.png": "each signal measured and replayed (deg, mm, bar; absent with `--no-plots`)",
    "residuals_replay.png": "its residuals over time, and their histogram (absent with "
    "`--no-plots`)",
}
