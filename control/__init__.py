"""jaxmb.control: controllers and their stability bounds, gain tuning and Monte Carlo
robustness studies (installed from the top-level control/ folder; not a top-level `control`
package, which would shadow python-control)."""

from .bounds import UltimateBounds as UltimateBounds
from .bounds import inertia_eigenvalue_bounds as inertia_eigenvalue_bounds
from .bounds import lumped_uncertainty as lumped_uncertainty
from .bounds import ultimate_bounds as ultimate_bounds
from .robust import RobustController as RobustController
from .robust import filtered_error as filtered_error
from .robust import sat as sat
from .scenario import PAPER_RMSE as PAPER_RMSE
from .scenario import Scenario as Scenario
from .scenario import section_iv as section_iv
