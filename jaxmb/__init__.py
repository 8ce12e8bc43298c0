"""jaxmb: differentiable multibody dynamics for closed-chain hydraulic manipulators in JAX.

Pure functions over immutable `Model` pytrees: jit, vmap and grad compose with all of them.
Twists are [omega; v], wrenches [moment; force]; the equation of motion is
``Gamma(q) qdd + h(q, qd) = Q_e + Q_a`` (Dastranj & Mattila (2026) eq. (13))."""

from . import checks as checks
from . import hydraulics as hydraulics
from . import models as models
from . import plant as plant
from . import projection as projection
from . import spatial as spatial
from . import vdc as vdc
from .dynamics import bias_forces as bias_forces
from .dynamics import body_mass_matrices as body_mass_matrices
from .dynamics import coriolis_matrix as coriolis_matrix
from .dynamics import dynamics_terms as dynamics_terms
from .dynamics import external_forces as external_forces
from .dynamics import forward_dynamics as forward_dynamics
from .dynamics import gravity_forces as gravity_forces
from .dynamics import inertial_parameters as inertial_parameters
from .dynamics import inverse_dynamics as inverse_dynamics
from .dynamics import kinetic_energy as kinetic_energy
from .dynamics import mass_matrix as mass_matrix
from .dynamics import potential_energy as potential_energy
from .dynamics import regressor as regressor
from .dynamics import spatial_inertias as spatial_inertias
from .dynamics import spatial_inertias_from_parameters as spatial_inertias_from_parameters
from .dynamics import wrench_forces as wrench_forces
from .kinematics import augmented_coordinates as augmented_coordinates
from .kinematics import body_jacobians as body_jacobians
from .kinematics import coordinate_map_jacobian as coordinate_map_jacobian
from .kinematics import frame_jacobian as frame_jacobian
from .kinematics import frame_pose as frame_pose
from .model import Body as Body
from .model import CoordinateMap as CoordinateMap
from .model import Frame as Frame
from .model import Model as Model
from .model import replace_body as replace_body
from .model import replace_placement as replace_placement
from .models import load_urdf as load_urdf
from .projection import ConstrainedSystem as ConstrainedSystem
from .terms import DynamicsTerms as DynamicsTerms
from .terms import crba as crba
from .terms import rnea as rnea

__version__ = "0.1.0"
