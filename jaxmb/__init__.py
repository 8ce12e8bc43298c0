"""jaxmb: differentiable multibody dynamics for closed-chain hydraulic manipulators in JAX.

Pure functions over immutable `Model` pytrees: jit, vmap and grad compose with all of them.
Twists are [omega; v], wrenches [moment; force]; the equation of motion is
``Gamma(q) qdd + h(q, qd) = Q_e + Q_a`` (Dastranj & Mattila (2026) eq. (13)).

Subpackages, bottom to top (each imports only those before it): `multibody`, `algorithms`,
`constraints`, `actuators`, `simulation`, `vdc`, `io`, `models`; above them the workflows
`jaxmb.identification` and `jaxmb.control`, and the command line (`jaxmb.cli`)."""

from . import actuators as actuators
from . import algorithms as algorithms
from . import constraints as constraints
from . import io as io
from . import models as models
from . import multibody as multibody
from . import simulation as simulation
from . import vdc as vdc
from .algorithms.dynamics import bias_forces as bias_forces
from .algorithms.dynamics import body_mass_matrices as body_mass_matrices
from .algorithms.dynamics import coriolis_matrix as coriolis_matrix
from .algorithms.dynamics import dynamics_terms as dynamics_terms
from .algorithms.dynamics import external_forces as external_forces
from .algorithms.dynamics import forward_dynamics as forward_dynamics
from .algorithms.dynamics import gravity_forces as gravity_forces
from .algorithms.dynamics import inertial_parameters as inertial_parameters
from .algorithms.dynamics import inverse_dynamics as inverse_dynamics
from .algorithms.dynamics import kinetic_energy as kinetic_energy
from .algorithms.dynamics import mass_matrix as mass_matrix
from .algorithms.dynamics import potential_energy as potential_energy
from .algorithms.dynamics import regressor as regressor
from .algorithms.dynamics import spatial_inertias as spatial_inertias
from .algorithms.dynamics import (
    spatial_inertias_from_parameters as spatial_inertias_from_parameters,
)
from .algorithms.dynamics import wrench_forces as wrench_forces
from .algorithms.terms import DynamicsTerms as DynamicsTerms
from .algorithms.terms import crba as crba
from .algorithms.terms import rnea as rnea
from .constraints.projection import ConstrainedSystem as ConstrainedSystem
from .io.urdf import load_urdf as load_urdf
from .multibody.kinematics import augmented_coordinates as augmented_coordinates
from .multibody.kinematics import body_jacobians as body_jacobians
from .multibody.kinematics import coordinate_map_jacobian as coordinate_map_jacobian
from .multibody.kinematics import frame_jacobian as frame_jacobian
from .multibody.kinematics import frame_pose as frame_pose
from .multibody.model import Body as Body
from .multibody.model import CoordinateMap as CoordinateMap
from .multibody.model import Frame as Frame
from .multibody.model import Model as Model
from .multibody.model import replace_body as replace_body
from .multibody.model import replace_placement as replace_placement
from .version import __version__ as __version__
