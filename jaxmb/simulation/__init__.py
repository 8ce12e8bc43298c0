"""Integrating a plant under a controller, as diffrax's modules: desired trajectories
(`references`), disturbances (`disturbances`), the stateful-controller interface
(`controller`), open-loop commands from a table (`command_table`), one solver per module
(`rk4`, `rosenbrock` (Rodas4), `projected` (drift-corrected steps)), `simulate` and its
saved `Trajectory` (`integrate`), and zero-order hold with impact events (`sampled`)."""

from . import command_table as command_table
from . import controller as controller
from . import disturbances as disturbances
from . import integrate as integrate
from . import projected as projected
from . import references as references
from . import rk4 as rk4
from . import rosenbrock as rosenbrock
from . import sampled as sampled
from .command_table import CommandTable as CommandTable
from .controller import AbstractStatefulController as AbstractStatefulController
from .disturbances import Disturbance as Disturbance
from .disturbances import WindowedWrench as WindowedWrench
from .integrate import ADAPTIVE_SOLVERS as ADAPTIVE_SOLVERS
from .integrate import Trajectory as Trajectory
from .integrate import simulate as simulate
from .projected import DEFAULT_CORRECTION as DEFAULT_CORRECTION
from .projected import DriftCorrection as DriftCorrection
from .projected import ProjectedSolver as ProjectedSolver
from .references import QuinticWaypoints as QuinticWaypoints
from .references import Reference as Reference
from .references import SinusoidReference as SinusoidReference
from .references import desired_state as desired_state
from .references import start_position as start_position
from .rk4 import RK4 as RK4
from .rosenbrock import Rodas4 as Rodas4
from .rosenbrock import RodasInterpolation as RodasInterpolation
from .sampled import Impact as Impact
from .sampled import SampledTrajectory as SampledTrajectory
from .sampled import simulate_sampled as simulate_sampled
