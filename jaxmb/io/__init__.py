"""Files in and out: URDF (`urdf` reads through the strict `urdf_xml`, `urdf_write`
writes), hydraulic machines from a URDF and a machine file (`machine`), and the log format
(`logs`)."""

from . import logs as logs
from . import machine as machine
from . import urdf as urdf
from . import urdf_write as urdf_write
from . import urdf_xml as urdf_xml
from .logs import KINDS as KINDS
from .logs import UNITS as UNITS
from .logs import Log as Log
from .logs import LogError as LogError
from .logs import LogSchema as LogSchema
from .logs import SamplingReport as SamplingReport
from .logs import UniformSegments as UniformSegments
from .logs import read_log as read_log
from .logs import resample as resample
from .logs import sampling_report as sampling_report
from .logs import schema_for as schema_for
from .logs import uniform_segments as uniform_segments
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
