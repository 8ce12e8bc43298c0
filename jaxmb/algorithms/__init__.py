"""Dynamics algorithms, one per module (as Pinocchio's ``algorithm/``): the public
functions of the equation of motion (`dynamics`), every term of a state from one pass and the
choice of recursion (`terms`), unrolled CRBA/RNEA (`recursive`), scan sweeps in S coordinates
(`tree_dynamics`), the articulated-body algorithm (`aba`) and the module-level U D U^T
factorisation (`udut`)."""

from . import aba as aba
from . import dynamics as dynamics
from . import recursive as recursive
from . import terms as terms
from . import tree_dynamics as tree_dynamics
from . import udut as udut
from .aba import ArticulatedInertias as ArticulatedInertias
from .aba import aba_accelerations as aba_accelerations
from .aba import articulated_inertias as articulated_inertias
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
from .recursive import body_spatial_inertias as body_spatial_inertias
from .recursive import crba_augmented as crba_augmented
from .recursive import frame_wrenches as frame_wrenches
from .recursive import inertia_to_parent as inertia_to_parent
from .recursive import rnea_augmented as rnea_augmented
from .terms import ABA_MIN_COORDINATES as ABA_MIN_COORDINATES
from .terms import UNROLL_MAX_FRAMES as UNROLL_MAX_FRAMES
from .terms import DynamicsTerms as DynamicsTerms
from .terms import cholesky_solve as cholesky_solve
from .terms import crba as crba
from .terms import gamma_and_rest as gamma_and_rest
from .terms import recursion as recursion
from .terms import rnea as rnea
from .terms import solver as solver
from .terms import unchecked_crba as unchecked_crba
from .terms import unchecked_forward as unchecked_forward
from .terms import unchecked_rnea as unchecked_rnea
from .terms import unchecked_terms as unchecked_terms
from .tree_dynamics import AugmentedState as AugmentedState
from .tree_dynamics import TreeForces as TreeForces
from .tree_dynamics import TreeKinematics as TreeKinematics
from .tree_dynamics import augmented_state as augmented_state
from .tree_dynamics import crba_world as crba_world
from .tree_dynamics import gravity_acceleration as gravity_acceleration
from .tree_dynamics import gravity_world as gravity_world
from .tree_dynamics import joint_forces as joint_forces
from .tree_dynamics import per_frame as per_frame
from .tree_dynamics import rnea_world as rnea_world
from .tree_dynamics import tree_forces as tree_forces
from .tree_dynamics import tree_kinematics as tree_kinematics
from .udut import ModuleFactor as ModuleFactor
from .udut import modules as modules
from .udut import udut_forward_dynamics as udut_forward_dynamics
from .udut import udut_inverse_dynamics as udut_inverse_dynamics
