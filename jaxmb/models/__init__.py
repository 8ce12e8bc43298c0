"""The systems of the papers and of the project's specs, and random trees; each module holds what
only its machine needs (the crane's VDC chain, the arm's elbow segment). `load_urdf` is
`jaxmb.io.urdf`'s, re-exported."""

from jaxmb.io.urdf import load_urdf as load_urdf
from jaxmb.models.crane import lift_tilt_crane as lift_tilt_crane
from jaxmb.models.crane import lift_tilt_crane_plant as lift_tilt_crane_plant
from jaxmb.models.crank import slider_crank as slider_crank
from jaxmb.models.kr300 import kr300 as kr300
from jaxmb.models.planar_rpr import rpr3 as rpr3
from jaxmb.models.random_tree import random_tree_urdf as random_tree_urdf
from jaxmb.models.random_tree import serial_chain as serial_chain
from jaxmb.models.series_parallel import TriangleLoop as TriangleLoop
from jaxmb.models.series_parallel import series_parallel_3dof as series_parallel_3dof
from jaxmb.models.series_parallel import (
    series_parallel_3dof_dependent as series_parallel_3dof_dependent,
)
