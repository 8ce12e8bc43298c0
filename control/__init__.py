"""jaxmb.control: controllers and their stability bounds, gain tuning and Monte Carlo
robustness studies (installed from the top-level control/ folder; not a top-level `control`
package, which would shadow python-control)."""

from .bounds import UltimateBounds as UltimateBounds
from .bounds import inertia_eigenvalue_bounds as inertia_eigenvalue_bounds
from .bounds import lumped_uncertainty as lumped_uncertainty
from .bounds import ultimate_bounds as ultimate_bounds
from .pidc import HybridForceControl as HybridForceControl
from .pidc import ProjectedInverseDynamics as ProjectedInverseDynamics
from .pidc import force_auxiliary as force_auxiliary
from .pidc import hybrid_motion_force as hybrid_motion_force
from .pidc import independent_velocity_map as independent_velocity_map
from .pidc import metric_weights as metric_weights
from .pidc import passive_joint_map as passive_joint_map
from .pidc import pidc_force as pidc_force
from .robust import RobustController as RobustController
from .robust import filtered_error as filtered_error
from .robust import sat as sat
from .scenario import PAPER_RMSE as PAPER_RMSE
from .scenario import Scenario as Scenario
from .scenario import section_iv as section_iv
from .vdc_control import VDCController as VDCController
from .vdc_control import virtual_stability as virtual_stability
