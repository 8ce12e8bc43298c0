"""jaxmb.identification: identification of inertial, friction and hydraulic parameters from
logged experiment data (installed from the top-level identification/ folder).

Modules: `signals` (zero-phase filtering, differentiation, decimation), `regressor` (drive and
friction terms, base parameters), `least_squares` (OLS/WLS and statistics), `consistent`
(log-Cholesky physically consistent fits), `rigid` (the regressor route), `coulomb_width` and
`cutoff_choice` (settings chosen from the data), `excitation` (optimal Fourier trajectories),
`mechanics` and `payload` (a hydraulic machine's booms and payload by the regressor route),
`output_error`, `start_states`, `noise_weighted`, `model_choice` and `long_refit` (hydraulic
parameters by multiple shooting), `drift` (a free run's expected drift from the parameters'
uncertainty), `replay` (a free-run replay of a log), `hydraulic_route` and `identify` (the
`jaxmb identify` workflow), `report`. The log format and the parameter file are
`jaxmb.io.logs` and `jaxmb.io.params_file`; the log functions are re-exported here."""

from jaxmb.identification import consistent as consistent
from jaxmb.identification import drift as drift
from jaxmb.identification import excitation as excitation
from jaxmb.identification import least_squares as least_squares
from jaxmb.identification import output_error as output_error
from jaxmb.identification import regressor as regressor
from jaxmb.identification import rigid as rigid
from jaxmb.identification import signals as signals
from jaxmb.identification.rigid import identify_rigid as identify_rigid
from jaxmb.identification.rigid import predict_torques as predict_torques
from jaxmb.io.logs import Log as Log
from jaxmb.io.logs import read_log as read_log
from jaxmb.io.logs import schema_for as schema_for
from jaxmb.io.logs import validate_log as validate_log
from jaxmb.io.logs import write_log as write_log
