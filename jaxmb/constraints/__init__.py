"""Closed kinematic chains: the thresholded SVD pseudo-inverse (`pseudo_inverse`), constrained
dynamics by projection matrices (`projection`, Aghili (2005)) and impacts (`impact`)."""

from . import impact as impact
from . import projection as projection
from . import pseudo_inverse as pseudo_inverse
from .impact import Contact as Contact
from .impact import ImpactJump as ImpactJump
from .impact import Particle as Particle
from .impact import contact_jacobian as contact_jacobian
from .impact import contact_normal as contact_normal
from .impact import contact_point as contact_point
from .impact import gap as gap
from .impact import impact_jump as impact_jump
from .projection import INERTIA_FORMS as INERTIA_FORMS
from .projection import AbstractConstraint as AbstractConstraint
from .projection import ConstrainedSystem as ConstrainedSystem
from .projection import PointCoincidence as PointCoincidence
from .projection import ProjectedTerms as ProjectedTerms
from .projection import StackedConstraints as StackedConstraints
from .projection import assemble as assemble
from .projection import constraint_bias as constraint_bias
from .projection import constraint_force as constraint_force
from .projection import constraint_inertia as constraint_inertia
from .projection import constraint_jacobian as constraint_jacobian
from .projection import constraint_residual as constraint_residual
from .projection import correct as correct
from .projection import forward_dynamics as forward_dynamics
from .projection import lagrange_multipliers as lagrange_multipliers
from .projection import newton_projection as newton_projection
from .projection import projected_terms as projected_terms
from .projection import projector as projector
from .projection import unchecked_residual as unchecked_residual
from .pseudo_inverse import ATOL as ATOL
from .pseudo_inverse import pinv as pinv
from .pseudo_inverse import rank as rank
