"""What drives a model: hydraulic cylinders, valves and friction (`hydraulics`), the
loops cylinder bodies close (`cylinder_loops`), plants that couple actuator states to the
mechanics (`plant`), a plant's parameters by name (`parameters`), flexible-joint drives
(`flexible`) and the actuated-coordinate reduction by Taylor jets (`reduced`)."""

from . import cylinder_loops as cylinder_loops
from . import flexible as flexible
from . import hydraulics as hydraulics
from . import parameters as parameters
from . import plant as plant
from . import reduced as reduced
from .cylinder_loops import CylinderLoops as CylinderLoops
from .cylinder_loops import cylinder_frames as cylinder_frames
from .cylinder_loops import pin_in_world as pin_in_world
from .cylinder_loops import tube_rotation as tube_rotation
from .flexible import FlexibleJointPlant as FlexibleJointPlant
from .flexible import RotorLoaded as RotorLoaded
from .flexible import rigid_limit as rigid_limit
from .hydraulics import BAR as BAR
from .hydraulics import AbstractFriction as AbstractFriction
from .hydraulics import Cylinder as Cylinder
from .hydraulics import CylinderMount as CylinderMount
from .hydraulics import HydraulicActuator as HydraulicActuator
from .hydraulics import LuGreFriction as LuGreFriction
from .hydraulics import PressureTransducers as PressureTransducers
from .hydraulics import StribeckFriction as StribeckFriction
from .hydraulics import Valve as Valve
from .hydraulics import signed_sqrt as signed_sqrt
from .parameters import COM_AXES as COM_AXES
from .parameters import COM_STEP as COM_STEP
from .parameters import ENCODER_STEP as ENCODER_STEP
from .parameters import INERTIA_AXES as INERTIA_AXES
from .parameters import SENSOR_STEP as SENSOR_STEP
from .parameters import HydraulicParameters as HydraulicParameters
from .parameters import additive_step as additive_step
from .parameters import is_additive as is_additive
from .parameters import is_entry as is_entry
from .parameters import parameter_getter as parameter_getter
from .parameters import with_values as with_values
from .plant import AbstractPlant as AbstractPlant
from .plant import ForceSensedPlant as ForceSensedPlant
from .plant import HydraulicPlant as HydraulicPlant
from .plant import MechanicsPass as MechanicsPass
from .plant import events_summary as events_summary
from .plant import finite_state as finite_state
from .plant import limit_events as limit_events
from .reduced import complete_jet as complete_jet
from .reduced import drive_torque as drive_torque
from .reduced import generalized_force_along_jet as generalized_force_along_jet
from .reduced import reduced_terms as reduced_terms
from .reduced import selection as selection
from .reduced import task_inverse_dynamics as task_inverse_dynamics
from .reduced import task_jacobian as task_jacobian
from .reduced import task_jet as task_jet
from .reduced import time_derivative as time_derivative
