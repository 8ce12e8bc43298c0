"""Files in and out: URDF (`urdf` reads through the strict `urdf_xml`, `urdf_write`
writes), the log format (`logs`), how a log is sampled and its resampling (`log_sampling`),
identified parameters as a file (`params_file`), and
hydraulic machines from a URDF and a machine file (`machine`)."""

from . import log_sampling as log_sampling
from . import logs as logs
from . import machine as machine
from . import params_file as params_file
from . import urdf as urdf
from . import urdf_write as urdf_write
from . import urdf_xml as urdf_xml
from .log_sampling import SamplingReport as SamplingReport
from .log_sampling import UniformSegments as UniformSegments
from .log_sampling import resample as resample
from .log_sampling import sampling_report as sampling_report
from .log_sampling import uniform_segments as uniform_segments
from .logs import KINDS as KINDS
from .logs import UNITS as UNITS
from .logs import Log as Log
from .logs import LogError as LogError
from .logs import LogSchema as LogSchema
from .logs import read_log as read_log
from .logs import schema_for as schema_for
from .logs import validate_log as validate_log
from .logs import with_note as with_note
from .logs import write_log as write_log
from .machine import BUILTIN as BUILTIN
from .machine import Machine as Machine
from .machine import MachineFileError as MachineFileError
from .machine import Task as Task
from .machine import check_reach as check_reach
from .machine import load_machine as load_machine
from .machine import machine_path as machine_path
from .params_file import FORMAT as FORMAT
from .params_file import apply_bodies as apply_bodies
from .params_file import apply_hydraulics as apply_hydraulics
from .params_file import json_safe as json_safe
from .params_file import read_params as read_params
from .params_file import write_params as write_params
from .urdf import MimicMap as MimicMap
from .urdf import UrdfWarning as UrdfWarning
from .urdf import load_urdf as load_urdf
from .urdf_write import DRAKE_NS as DRAKE_NS
from .urdf_write import model_urdf as model_urdf
from .urdf_write import rpy_from_rotation as rpy_from_rotation
from .urdf_write import with_parameters as with_parameters
from .urdf_xml import Document as Document
from .urdf_xml import Inertial as Inertial
from .urdf_xml import Joint as Joint
from .urdf_xml import UrdfError as UrdfError
from .urdf_xml import read_document as read_document
