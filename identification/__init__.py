"""jaxmb.identification: identification of inertial, friction and hydraulic parameters from
logged experiment data (installed from the top-level identification/ folder).

Modules: `logs` (the log format, validation), `signals` (zero-phase filtering,
differentiation, decimation), `regressor` (drive and friction terms, base parameters),
`least_squares` (OLS/WLS and statistics), `consistent` (log-Cholesky physically consistent
fits), `rigid` (the regressor route), `output_error` and `hydraulic_route` (hydraulic
parameters by multiple shooting), `excitation` (optimal Fourier trajectories), `identify` (the
`jaxmb identify` workflow), `params_file` (identified parameters as a file), `drift` (a free
run's expected drift from the parameters' uncertainty)."""

from . import consistent as consistent
from . import drift as drift
from . import excitation as excitation
from . import least_squares as least_squares
from . import logs as logs
from . import output_error as output_error
from . import params_file as params_file
from . import regressor as regressor
from . import rigid as rigid
from . import signals as signals
from .logs import Log as Log
from .logs import read_log as read_log
from .logs import schema_for as schema_for
from .logs import validate_log as validate_log
from .logs import write_log as write_log
from .rigid import identify_rigid as identify_rigid
from .rigid import predict_torques as predict_torques
