r"""Virtual decomposition of hydraulic manipulators in series (Petrovic & Mattila (2022)).

A manipulator is a chain of *segments*, base to tip. A revolute segment (Figs. 4, 5a) is a passive
revolute joint ``q_j`` driven by a hydraulic cylinder through a triangle: the link ``L_j`` from the
cylinder's base pin ``q_j1`` to the joint, the link ``L_j1`` from the joint to the rod pin ``q_j2``,
the cylinder tube and the piston with its rod. A prismatic segment (Figs. 5b-c) is a cylinder case,
a piston and a mass object ``O_2j`` driven along the case's x axis. Every segment is cut from its
predecessor at its *driven* point (``B_cj`` or ``P_2j``) and drives its successor through ``E_1j``
(or ``E_2j``), eqs. (16)-(17); the last segment's ``E`` frame is the end effector ``D_1n``.

Modules: `rigid_body` (eqs. (1)-(8), (96)), `segments` (revolute and prismatic segments),
`chain` (chains of segments), `from_model` (a `Model`'s frames and bodies in VDC terms) and
`bodies` (the per-body form of the required forces, for any tree of a `Model`).

Conventions, *inside this package only* (Petrovic & Mattila (2022) eqs. (1)-(2)):

- velocities are ``V = [v; omega]`` and forces ``F = [f; m]`` in body-fixed coordinates, as the
  paper writes them. The rest of jaxmb uses ``[omega; v]`` and ``[m; f]``: convert with `to_vdc`
  and `from_vdc` at the boundary and nowhere else.
- ``^A U_B`` of eqs. (5)-(6) maps forces ``^A F = ^A U_B ^B F`` and velocities
  ``^B V = ^A U_B^T ^A V`` (eqs. (3)-(4)).
- ``^A F`` at a cut is the force exerted *on* the subsystem downstream of the cut (on the body
  whose frame is A), so ``^{E_1j}F`` is what link ``L_j1`` exerts on its successor, and at the
  tip ``^{D_1n}F`` is what the end effector exerts on its surroundings: an external wrench ``W``
  acting *on* the tool enters as ``F_D = -W``.
- ``F*`` is the net force of eq. (7) *without* gravity: ``G_A`` is minus the weight wrench.
- All joint axes are z; the frames of one segment share the plane of its triangle.

Frames of a revolute segment (Section 3.1): ``B_0j = B_2j = B_cj`` at ``q_j1`` with x toward
``q_j``; ``B_1j`` at ``q_j`` with x toward ``q_j2``; ``T_1j = T_2j = T_cj`` at ``q_j2``, oriented
as ``B_1j``; ``B_3j`` at ``q_j1`` with x toward ``q_j2``; ``B_4j`` on the piston, x toward
``q_j2``, at ``l_cj`` before the rod pin; ``P_1j`` at ``q_j2`` oriented as ``B_4j``. The segment
angles are rotations about z: ``q_j`` (B0 -> B1), ``q_j1`` (B0 -> B3), ``q_j2`` (B4 -> T2), so
``q_j = q_j1 + q_j2``.

Accelerations ``d/dt(^A V)`` are forward-mode derivatives (`jax.jvp`) of the same velocity
recursion, never hand derivatives. The chain's coordinates are the segments' main joints
(``q_j`` for a revolute segment, the stroke ``x_tj`` for a prismatic one), plus a constant
``q_offset`` so that a model's own joint angles can be used (``q_vdc = q + q_offset``).

References:
    Petrovic, G. & Mattila, J. (2022). Mathematical modelling and virtual decomposition control
    of heavy-duty parallel-serial hydraulic manipulators. Mechanism and Machine Theory 170.
"""

from . import bodies as bodies
from . import chain as chain
from . import from_model as from_model
from . import rigid_body as rigid_body
from . import segments as segments
from .bodies import BodyRequiredForces as BodyRequiredForces
from .bodies import body_gains as body_gains
from .bodies import body_required_forces as body_required_forces
from .bodies import vdc_bodies as vdc_bodies
from .chain import ChainMotion as ChainMotion
from .chain import RequiredForces as RequiredForces
from .chain import VDCChain as VDCChain
from .chain import VDCForces as VDCForces
from .chain import actuator_forces as actuator_forces
from .chain import chain_bodies as chain_bodies
from .chain import chain_motion as chain_motion
from .chain import required_forces as required_forces
from .chain import stability_frames as stability_frames
from .from_model import cylinder_bodies as cylinder_bodies
from .from_model import driven_point_motion as driven_point_motion
from .from_model import fixed_placement as fixed_placement
from .from_model import frames_by_name as frames_by_name
from .from_model import planar_angle as planar_angle
from .from_model import rigid_bodies_on as rigid_bodies_on
from .rigid_body import C_A as C_A
from .rigid_body import G_A as G_A
from .rigid_body import M_A as M_A
from .rigid_body import X_F as X_F
from .rigid_body import Y_F as Y_F
from .rigid_body import Z_R as Z_R
from .rigid_body import RigidBody as RigidBody
from .rigid_body import U as U
from .rigid_body import U_apply as U_apply
from .rigid_body import UT_apply as UT_apply
from .rigid_body import accompanying_function as accompanying_function
from .rigid_body import combine_bodies as combine_bodies
from .rigid_body import from_vdc as from_vdc
from .rigid_body import net_force as net_force
from .rigid_body import required_net_force as required_net_force
from .rigid_body import rigid_body_unchecked as rigid_body_unchecked
from .rigid_body import to_vdc as to_vdc
from .rigid_body import transform_body as transform_body
from .rigid_body import zero_body as zero_body
from .segments import PrismaticSegment as PrismaticSegment
from .segments import RevoluteSegment as RevoluteSegment
from .segments import angle_from_stroke as angle_from_stroke
from .segments import loop_closure as loop_closure
from .segments import loop_closure_rates as loop_closure_rates
from .segments import prismatic_forces as prismatic_forces
from .segments import prismatic_rotations as prismatic_rotations
from .segments import prismatic_velocities as prismatic_velocities
from .segments import revolute_actuator_force as revolute_actuator_force
from .segments import revolute_actuator_force_appendix as revolute_actuator_force_appendix
from .segments import revolute_driven_force as revolute_driven_force
from .segments import revolute_rotations as revolute_rotations
from .segments import revolute_velocities as revolute_velocities
