"""jaxmb.control: controllers and their stability bounds, gain tuning and Monte Carlo
robustness studies (installed from the top-level control/ folder; not a top-level `control`
package, which would shadow python-control)."""

from jaxmb.control.bounds import UltimateBounds as UltimateBounds
from jaxmb.control.bounds import inertia_eigenvalue_bounds as inertia_eigenvalue_bounds
from jaxmb.control.bounds import lumped_uncertainty as lumped_uncertainty
from jaxmb.control.bounds import ultimate_bounds as ultimate_bounds
from jaxmb.control.pidc import HybridForceControl as HybridForceControl
from jaxmb.control.pidc import ProjectedInverseDynamics as ProjectedInverseDynamics
from jaxmb.control.pidc import force_auxiliary as force_auxiliary
from jaxmb.control.pidc import hybrid_motion_force as hybrid_motion_force
from jaxmb.control.pidc import independent_velocity_map as independent_velocity_map
from jaxmb.control.pidc import metric_weights as metric_weights
from jaxmb.control.pidc import passive_joint_map as passive_joint_map
from jaxmb.control.pidc import pidc_force as pidc_force
from jaxmb.control.robust import RobustController as RobustController
from jaxmb.control.robust import filtered_error as filtered_error
from jaxmb.control.robust import sat as sat
from jaxmb.control.scenario import PAPER_RMSE as PAPER_RMSE
from jaxmb.control.scenario import Scenario as Scenario
from jaxmb.control.scenario import section_iv as section_iv
from jaxmb.control.vdc_control import VDCController as VDCController
from jaxmb.control.vdc_control import virtual_stability as virtual_stability
