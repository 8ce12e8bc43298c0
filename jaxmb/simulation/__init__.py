"""Integrating a plant under a controller: references, disturbances, the controller
interface, the command table, `simulate` and its solvers (`integrate`), the Rodas4 solver
(`rosenbrock`), and zero-order hold with impact events (`sampled`)."""

from . import integrate as integrate
from . import rosenbrock as rosenbrock
from . import sampled as sampled
from .integrate import AbstractStatefulController as AbstractStatefulController
from .integrate import CommandTable as CommandTable
from .integrate import Disturbance as Disturbance
from .integrate import DriftCorrection as DriftCorrection
from .integrate import ProjectedSolver as ProjectedSolver
from .integrate import QuinticWaypoints as QuinticWaypoints
from .integrate import Reference as Reference
from .integrate import SinusoidReference as SinusoidReference
from .integrate import Trajectory as Trajectory
from .integrate import WindowedWrench as WindowedWrench
from .integrate import desired_state as desired_state
from .integrate import simulate as simulate
from .rosenbrock import Rodas4 as Rodas4
from .rosenbrock import RodasInterpolation as RodasInterpolation
from .sampled import Impact as Impact
from .sampled import SampledTrajectory as SampledTrajectory
from .sampled import simulate_sampled as simulate_sampled
