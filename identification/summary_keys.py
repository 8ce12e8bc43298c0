"""What each key of `jaxmb identify`'s ``summary.json`` means on each route: the tables
the reference (``docs/reference.md``, `scripts/make_reference.py`) is generated from, and the
end-to-end tests hold every written summary to it, so that the two cannot drift. Units are SI
in ``summary.json`` (rad, m, Pa, kg); ``validation.csv`` and the printed report show degrees,
millimetres and bar."""

__all__ = ["HYDRAULIC", "RIGID"]

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
