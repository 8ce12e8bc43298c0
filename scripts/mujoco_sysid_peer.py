r"""MuJoCo's identification tool (`mujoco.sysid`, ``pip install "mujoco[sysid]"``) as the peer of
jaxmb's identification on the KUKA KR300 R2500 recordings of Weigand et al. (2021).

Benchmark-only: `mujoco` is not a jaxmb dependency. `scripts/bench_identify.py` imports
`kr300_mjcf`, `load_trajectory`, `identify` and `predict_torques`; ``python
scripts/mujoco_sysid_peer.py`` prints per-joint torque RMSE on A (fit), B and C (prediction) and
the identification wall time.

What `mujoco.sysid` is (mujoco 4.0.0, ``mujoco/sysid/_src``)
-----------------------------------------------------------
An *output-error* (simulation-error) identifier. A `ParameterDict` of `Parameter` s, each with a
``modifier(spec, param)`` that writes it into an `MjSpec`; `build_residual_fn` recompiles the
model for a candidate parameter vector, *rolls out* (forward-simulates, `mujoco.rollout`) each
measured sequence from its measured initial state under its measured controls, and returns
``measured - predicted`` sensor data (by default each column divided by its measured norm);
`optimize` minimises the sum of squares with a bounded Gauss-Newton / Levenberg-Marquardt
(`mujoco.minimize.least_squares`, or scipy's) whose Jacobian is by finite differences (one
rollout per parameter and iteration). Inertial parameters are supported by
`body_inertia_param`, as mass, mass + COM, or the 10 "pseudo-inertia" log-Cholesky parameters
(``InertiaType.Pseudo``: J = U U^T, physically consistent by construction, Rucker & Wensing
(2022)); joint armature, damping, friction loss, stiffness etc. by user modifiers. There is no
regressor / linear least-squares path and no torque (inverse dynamics) residual.

What is identified here
-----------------------
``method="rollout"`` (default, sysid's own pipeline): the six links' pseudo-inertias (60), and
per joint armature, viscous damping, Coulomb friction loss (18), plus the joint-2 counterbalance
as a linear joint spring (stiffness, spring reference; 2). Inputs: the measured joint torques as
``motor`` actuator controls; outputs: the simulated joint positions and velocities. The robot is
position-controlled, so a 10 s open-loop simulation under measured torques diverges (unstable
gravity-loaded chain, unmodelled effects): trajectory A is cut into windows of ``window`` s, each
a separate sequence starting at the measured state (multiple shooting without continuity
constraints). The residual is ``(measured - simulated) / scale`` per channel with fixed scales
(sysid's default per-window norm divides by |q| over the window, which is ~0 for joints near
zero): a custom ``modify_residual``.

``method="inverse"``: the same parameters and `sysid.optimize`, but the residual is the
equation error of MuJoCo's inverse dynamics (`mj_inverse`) against the measured torque at every
sample, the quantity the benchmark scores. This is not a sysid pipeline (sysid has none) but the
closest use of its parameter machinery and optimiser for inverse-dynamics identification.

Torque prediction (`predict_torques`) is `mj_inverse` of the identified model at the measured
q, qd and qdd: ``qfrc_inverse = M(q) qdd + c(q, qd) + damping qd + spring + friction``, armature
included in M. qdd is the zero-phase Savitzky-Golay derivative of the measured joint velocity,
window `SAVGOL_WINDOW` = 25 samples (0.1 s at 250 Hz), cubic.

Model (`kr300_mjcf`)
--------------------
KR300_MODEL.md: standard DH, ``T_i = Rz(theta_i + offset_i) Tz(d_i) Tx(a_i) Rx(alpha_i)``,
base ``Rx(180 deg)``. MuJoCo body ``link{i}`` is the DH joint frame rotated by ``Rz(offset_i)``
(hinge ``q{i}`` about its z, at its origin); the published COM and inertia (DH link frame i) are
moved into it by ``Tz(d) Tx(a) Rx(alpha)``. Link 6 is the axis-6 flange (17.78 kg solid
cylinder, radius and length 0.101 m, COM at z6 = -0.05 m) plus the 200 kg payload at z6 = +0.1 m
of the authors' file (their guess; the recordings do not state the payload), one body as in
`jaxmb.models.kr300`. Joint side drive terms: armature ``G^2 Jm``, damping ``G^2 B``, frictionloss
``G Tc``. Coordinates are KUKA axis angles (the recordings' positions plus the home pose
``[0, -90, 90, 0, 0, 0] deg``, Weigand et al. ``robot_dynamics.m``).
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.io
import scipy.signal

_DEG = np.pi / 180.0
_REPO = Path(__file__).resolve().parents[1]
MAT_DIR = _REPO.parent / "shared" / "data" / "real" / "kuka-kr300-weigand"
PARQUET_DIR = _REPO / "data" / "kr300"
JOINTS = tuple(f"q{i}" for i in range(1, 7))

# Standard DH (Weigand et al. (2021) robot_model/; KR300_MODEL.md): d, a, alpha, offset.
DH = np.array(
    [
        [-0.675, 0.350, np.pi / 2, 0.0],
        [-0.189, 1.150, 0.0, 0.0],
        [0.189, 0.041, -np.pi / 2, np.pi / 2],
        [-1.0, 0.0, np.pi / 2, 0.0],
        [0.0, 0.0, -np.pi / 2, 0.0],
        [-0.24, 0.0, np.pi, 0.0],
    ]
)
MASS = np.array([395.40, 339.12, 105.21, 35.80, 31.46])
COM = np.array(
    [
        [-0.353, 0.174, -0.004],
        [-0.709, -0.001, 0.023],
        [-0.018, -0.018, -0.076],
        [0.0, 0.236, 0.001],
        [0.0, -0.080, -0.009],
    ]
)
# [Ixx, Iyy, Izz, Ixy, Iyz, Ixz] about the COM in DH link frame i (the toolbox's order)
INERTIA = np.array(
    [
        [16.733765, 29.799119, 32.814954, -1.703664, 0.129384, 4.404062],
        [7.507819, 88.886691, 88.673761, 0.430046, 0.173157, -4.396607],
        [10.783798, 10.186135, 1.943179, 0.118474, -0.606384, -0.101950],
        [0.425035, 0.217993, 0.428465, -0.000004, -0.011353, -0.000027],
        [0.283826, 0.229562, 0.258266, -0.000004, -0.019521, -0.000120],
    ]
)
FLANGE_MASS, FLANGE_COM, FLANGE_R, FLANGE_H = 17.78, np.array([0.0, 0.0, -0.05]), 0.101, 0.101
PAYLOAD_MASS, PAYLOAD_COM = 200.0, np.array([0.0, 0.0, 0.1])
GEAR = np.array([1798 / 7, 1872 / 7, 757 / 3, 221.0, 5032 / 21, 206793 / 1340])
MOTOR_INERTIA = np.array([0.00923, 0.0118, 0.0118, 0.00173, 0.00173, 0.00173])
VISCOUS_MOTOR = np.array(
    [0.001476346, 0.010681832, 0.08398663, 0.001916077, 0.001629877, 0.002205322]
)
COULOMB_MOTOR = np.array(
    [0.73192436, 1.832264957, 1.862615588, 0.447963801, 0.413155803, 0.372594817]
)
Q_MIN = np.array([-147.0, -140.0, -112.0, -350.0, -122.5, -350.0]) * _DEG
Q_MAX = np.array([147.0, -5.0, 153.0, 350.0, 122.5, 350.0]) * _DEG
HOME = np.array([0.0, -90.0, 90.0, 0.0, 0.0, 0.0]) * _DEG

SAVGOL_WINDOW = 25  # samples (0.1 s at 250 Hz), zero-phase
SAVGOL_ORDER = 3


def _rx(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _rz(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _sym(v) -> np.ndarray:
    """[Ixx, Iyy, Izz, Ixy, Iyz, Ixz] -> symmetric 3x3."""
    xx, yy, zz, xy, yz, xz = v
    return np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])


def _steiner(m: float, d: np.ndarray) -> np.ndarray:
    """Parallel-axis term m (|d|^2 1 - d d^T)."""
    return m * (d @ d * np.eye(3) - np.outer(d, d))


def _link6() -> tuple[float, np.ndarray, np.ndarray]:
    """Flange cylinder (I_zz = m r^2/2, I_xx = I_yy = m (3 r^2 + h^2)/12) plus point payload:
    mass, COM and inertia about the COM in DH link frame 6."""
    m_f, r, h = FLANGE_MASS, FLANGE_R, FLANGE_H
    I_f = np.diag([m_f * (3 * r**2 + h**2) / 12] * 2 + [m_f * r**2 / 2])
    m = m_f + PAYLOAD_MASS
    c = (m_f * FLANGE_COM + PAYLOAD_MASS * PAYLOAD_COM) / m
    I = I_f + _steiner(m_f, FLANGE_COM - c) + _steiner(PAYLOAD_MASS, PAYLOAD_COM - c)
    return m, c, I


def counterbalance_torque(q2: np.ndarray) -> np.ndarray:
    """Torque of the axis-2 hydro-pneumatic weight counterbalance in Weigand et al.'s model
    (``ident_functions/hydraulic_weight_counterbalance.m``; it is *added* to their gravity load
    G(2), the torque the drive must supply), q2 the KUKA axis angle in rad.

    Cosine rule for the spring length, sine rule for its lever arm, real-gas law for the
    pressure. Used here only for the initial guess of the linear joint spring of `kr300_mjcf`."""
    D, k = 0.8, 0.2  # anchor distances from axis 2 on link 1 and link 2, m
    area = np.pi * (0.055**2 - 0.030**2) / 4  # annulus of piston minus rod, m^2
    gas = 1.01 * 296.8 * 328.0 * 2 * 0.0795  # Z R T m of the nitrogen charge, J
    v_max = 2 * 0.00048  # m^3
    delta = q2 + 95 * _DEG
    length = np.sqrt(D**2 + k**2 - 2 * D * k * np.cos(delta))
    dl = length - (D - k)
    lever = np.sin(delta) * D * k / length
    return lever * gas / (v_max - dl * area) * area


def _spring_guess() -> tuple[float, float]:
    """Linear spring ``k (q2 - q2_ref)`` fitted by least squares to `counterbalance_torque` over
    the recordings' q2 range ([-115, -61] deg): returns (stiffness, springref)."""
    q2 = np.linspace(-115, -61, 200) * _DEG
    slope, intercept = np.polyfit(q2, counterbalance_torque(q2), 1)
    return float(slope), float(-intercept / slope)


def _fmt(x) -> str:
    return " ".join(f"{v:.10g}" for v in np.ravel(x))


def _quat(R: np.ndarray) -> np.ndarray:
    """Unit quaternion [w, x, y, z] of a rotation matrix (scipy's is scalar-last)."""
    from scipy.spatial.transform import Rotation

    x, y, z, w = Rotation.from_matrix(R).as_quat()
    return np.array([w, x, y, z])


def kr300_mjcf(*, timestep: float = 0.004, spring: tuple[float, float] | None = None) -> str:
    """MJCF of the KR300 R2500 ultra with the published parameters (module doc, "Model").

    Bodies ``link1..link6``, hinges ``q1..q6`` (KUKA axis angles, rad), ``motor`` actuators
    ``tau_q{i}`` (joint torque, N m, unlimited), sensors ``pos_q{i}`` / ``vel_q{i}``. Joint 2
    carries a linear spring for the counterbalance, ``-stiffness (q2 - springref)``, initialised
    by `_spring_guess` unless ``spring=(stiffness, springref)`` is given."""
    k_spring, q_ref = _spring_guess() if spring is None else spring
    links = [(MASS[i], COM[i], _sym(INERTIA[i])) for i in range(5)] + [_link6()]
    armature = GEAR**2 * MOTOR_INERTIA
    damping = GEAR**2 * VISCOUS_MOTOR
    friction = GEAR * COULOMB_MOTOR
    xml = []
    indent = "    "
    # Placement of body i in its parent: the parent's fixed DH part Tz(d) Tx(a) Rx(alpha)
    # (identity for link1, whose parent is the base Rx(pi)), then Rz(offset_i).
    R_fixed, p_fixed = _rx(np.pi), np.zeros(3)
    for i in range(6):
        d, a, alpha, offset = DH[i]
        R_place = R_fixed @ _rz(offset)
        m, c, I_c = links[i]
        # COM and inertia: DH link frame i -> body frame (= rotated joint frame) by Tz Tx Rx
        R_L, p_L = _rx(alpha), np.array([a, 0.0, d])
        c_body = R_L @ c + p_L
        I_body = R_L @ I_c @ R_L.T
        pad = indent * (i + 2)
        # MuJoCo's fullinertia order: M11 M22 M33 M12 M13 M23
        full = I_body[[0, 1, 2, 0, 0, 1], [0, 1, 2, 1, 2, 2]]
        spring_attr = f' stiffness="{k_spring:.10g}" springref="{q_ref:.10g}"' if i == 1 else ""
        xml.append(
            f'{pad}<body name="link{i + 1}" pos="{_fmt(p_fixed)}" quat="{_fmt(_quat(R_place))}">\n'
            f'{pad}{indent}<inertial pos="{_fmt(c_body)}" mass="{m:.10g}" fullinertia="'
            f'{_fmt(full)}"/>\n'
            f'{pad}{indent}<joint name="q{i + 1}" axis="0 0 1"'
            f' range="{Q_MIN[i]:.10g} {Q_MAX[i]:.10g}"'
            f' armature="{armature[i]:.10g}" damping="{damping[i]:.10g}"'
            f' frictionloss="{friction[i]:.10g}"{spring_attr}/>'
        )
        R_fixed, p_fixed = R_L, p_L
    body_xml = (
        "\n".join(xml) + "\n" + "".join(f"{indent * (i + 2)}</body>\n" for i in reversed(range(6)))
    )
    actuators = "\n".join(
        f'    <motor name="tau_{j}" joint="{j}" ctrllimited="false"/>' for j in JOINTS
    )
    sensors = "\n".join(
        [f'    <jointpos name="pos_{j}" joint="{j}"/>' for j in JOINTS]
        + [f'    <jointvel name="vel_{j}" joint="{j}"/>' for j in JOINTS]
    )
    return f"""<mujoco model="kr300_r2500_ultra">
  <compiler angle="radian" autolimits="true" inertiafromgeom="false"/>
  <option timestep="{timestep:.10g}" gravity="0 0 -9.81" integrator="implicitfast">
    <flag contact="disable"/>
  </option>
  <worldbody>
{body_xml}  </worldbody>
  <actuator>
{actuators}
  </actuator>
  <sensor>
{sensors}
  </sensor>
</mujoco>
"""


def _savgol(x: np.ndarray, dt: float, deriv: int) -> np.ndarray:
    """Zero-phase Savitzky-Golay smoothing (deriv=0) or derivative along time (axis 0)."""
    return scipy.signal.savgol_filter(
        x, SAVGOL_WINDOW, SAVGOL_ORDER, deriv=deriv, delta=dt, axis=0, mode="interp"
    )


def _from_mat(name: str) -> dict[str, np.ndarray]:
    """Trajectory ``name`` (A, B or C) from Weigand et al.'s .mat (SOURCE.md): positions are
    relative to the home pose, deg -> KUKA axis angles in rad; velocities deg/s -> rad/s; joint
    torque = G x measured motor torque ``act_torque_abs_nm`` (same direction: the fit of
    `check_gravity` gives positive gains on all axes)."""
    path = MAT_DIR / f"recorded_traj_{name}.mat"
    rec = scipy.io.loadmat(path, squeeze_me=True, struct_as_record=False)["rec"]
    return {
        "t": np.asarray(rec.time_cont, dtype=float),
        "q": np.asarray(rec.act_pos_mot_deg, dtype=float).T * _DEG + HOME,
        "qd": np.asarray(rec.act_vel_mot_deg_per_s, dtype=float).T * _DEG,
        "tau": np.asarray(rec.act_torque_abs_nm, dtype=float).T * GEAR,
    }


def _from_parquet(path: Path) -> dict[str, np.ndarray]:
    """A converted log (columns t, q1..q6 rad, qd_q1..qd_q6 rad/s, tau_q1..tau_q6 N m joint
    side). Positions must be KUKA axis angles (model coordinates), checked on axis 2."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    cols = set(table.column_names)
    need = ["t", *JOINTS, *(f"qd_{j}" for j in JOINTS), *(f"tau_{j}" for j in JOINTS)]
    missing = [c for c in need if c not in cols]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}")

    def stack(names):
        return np.column_stack([table.column(c).to_numpy() for c in names]).astype(float)

    log = {
        "t": table.column("t").to_numpy().astype(float),
        "q": stack(JOINTS),
        "qd": stack([f"qd_{j}" for j in JOINTS]),
        "tau": stack([f"tau_{j}" for j in JOINTS]),
    }
    if not np.all((log["q"][:, 1] > Q_MIN[1]) & (log["q"][:, 1] < Q_MAX[1])):
        raise ValueError(
            f"{path}: column q2 outside axis 2's range [-140, -5] deg; expected "
            "KUKA axis angles (recorded positions + home pose)"
        )
    return log


def load_trajectory(name: str, *, source: str = "auto") -> dict[str, np.ndarray]:
    """Trajectory ``name`` in {"A", "B", "C"} as ``{"t": (T,), "q", "qd", "qdd", "tau": (T, 6)}``
    (rad, rad/s, rad/s^2, joint-side N m). ``source``: "parquet" (data/kr300, the jaxmb side's
    conversion), "mat" (the raw recording) or "auto" (parquet if present). ``qdd`` is the
    Savitzky-Golay derivative of ``qd`` (module doc)."""
    if name not in ("A", "B", "C"):
        raise ValueError(f"name: expected 'A', 'B' or 'C', got {name!r}")
    if source not in ("auto", "parquet", "mat"):
        raise ValueError(f"source: expected 'auto', 'parquet' or 'mat', got {source!r}")
    pq_path = PARQUET_DIR / f"kr300_traj_{name}.parquet"
    if source == "parquet" or (source == "auto" and pq_path.exists()):
        log = _from_parquet(pq_path)
        log["source"] = str(pq_path)
    else:
        log = _from_mat(name)
        log["source"] = str(MAT_DIR / f"recorded_traj_{name}.mat")
    dt = float(np.median(np.diff(log["t"])))
    log["qdd"] = _savgol(log["qd"], dt, 1)
    return log


@dataclass(frozen=True)
class SysidResult:
    """What `identify` returns: the identified model and how it was found.

    Attributes:
        model: the identified `mujoco.MjModel`.
        mjcf: its MJCF (``MjSpec.to_xml``), to save or diff against `kr300_mjcf`.
        params: the identified `mujoco.sysid.ParameterDict` (``params.save_to_disk`` writes YAML).
        initial_params: the starting `ParameterDict` (the published values).
        method: "rollout" or "inverse" (module doc).
        seconds: wall time of `mujoco.sysid.optimize` (model building included), s.
        cost0, cost: half the sum of squared (scaled) residuals before and after.
        n_residuals: length of the residual vector.
        log: `mujoco.minimize.least_squares`'s messages (empty when run verbose).
    """

    model: object
    mjcf: str
    params: object
    initial_params: object
    method: str
    seconds: float
    cost0: float
    cost: float
    n_residuals: int
    log: str


def _joint_modifier(joint: str, attr: str):
    """A sysid modifier writing a scalar joint attribute; damping and stiffness are arrays in
    MuJoCo 4 (polynomial coefficients), of which the linear one is set."""

    def modify(spec, param):
        j = spec.joint(joint)
        if attr in ("damping", "stiffness"):
            getattr(j, attr)[0] = param.value[0]
        else:
            setattr(j, attr, param.value[0])

    return modify


def _pseudo_inertia_modifier(body_name: str):
    """Writes a body's pseudo-inertia parameters theta into the spec, as sysid's
    `apply_body_theta_inertia` does (theta -> pi by sysid's `pi_from_theta`, Rucker & Wensing
    (2022)), but as ``fullinertia`` about the COM with an identity ``iquat``: sysid's own sets
    ``iquat`` to NaN, which MuJoCo 4.0.0's compiler rejects ("mass and inertia of moving bodies
    must be larger than mjMINVAL"). It also skips sysid's recompilation per body."""
    from mujoco.sysid._src.model_modifier import pi_from_theta

    def modify(spec, param):
        pi = pi_from_theta(param.value)
        m, c = pi[0], pi[1:4] / pi[0]
        # inertia about the body origin -> about the COM (parallel-axis theorem)
        I_c = pi[4:].reshape(3, 3) - _steiner(m, c)
        body = spec.body(body_name)
        body.explicitinertial = True
        body.mass = m
        body.ipos = c
        body.inertia[:] = 0.0
        body.iquat = np.array([1.0, 0.0, 0.0, 0.0])
        body.fullinertia = I_c[[0, 1, 2, 0, 0, 1], [0, 1, 2, 1, 2, 2]]

    return modify


def sysid_parameters(spec, model):
    """The `ParameterDict` identified: per link a pseudo-inertia (`InertiaType.Pseudo`, 10
    log-Cholesky parameters, mass within [0.3, 3] x and COM within +-0.5 m of the published, the
    principal stretches within [0.5, 2] x, shears +-0.5, sysid's defaults); per joint armature
    [0.3, 3] x, damping [0, 50] x and friction loss [0, 5] x the drive table's (its viscous
    values are far below what the data show: a linear fit gives ~20 x on axis 1); the spring
    on q2: stiffness [0, 4] x and reference +-30 deg of `_spring_guess`."""
    from mujoco import sysid

    params = sysid.ParameterDict()
    for i in range(1, 7):
        params.add(
            sysid.body_inertia_param(
                spec,
                model,
                f"link{i}",
                inertia_type=sysid.InertiaType.Pseudo,
                mass_bound_mult=np.array([0.3, 3.0]),
                modifier=_pseudo_inertia_modifier(f"link{i}"),
            )
        )
    for i, j in enumerate(JOINTS):
        for attr, value, lo, hi in (
            ("armature", model.dof_armature[i], 0.3, 3.0),
            ("damping", model.dof_damping[i], 0.0, 50.0),
            ("frictionloss", model.dof_frictionloss[i], 0.0, 5.0),
        ):
            params.add(
                sysid.Parameter(
                    f"{j}_{attr}",
                    value,
                    lo * value,
                    hi * value,
                    modifier=_joint_modifier(j, attr),
                )
            )
    k, ref = model.jnt_stiffness[1], model.qpos_spring[1]
    params.add(
        sysid.Parameter(
            "q2_stiffness", k, 0.0, 4.0 * k, modifier=_joint_modifier("q2", "stiffness")
        )
    )
    params.add(
        sysid.Parameter(
            "q2_springref",
            ref,
            ref - 30 * _DEG,
            ref + 30 * _DEG,
            modifier=_joint_modifier("q2", "springref"),
        )
    )
    return params


def inverse_torques(model, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> np.ndarray:
    """`mj_inverse` along a trajectory: (T, 6) joint torques the actuators must supply,
    rigid body + armature + damping + spring + MuJoCo's soft Coulomb friction (which saturates
    at ``frictionloss`` with the sign of ``qdd + qd / (solref time constant / 2)``)."""
    import mujoco

    data = mujoco.MjData(model)
    out = np.empty_like(q)
    for k in range(q.shape[0]):
        data.qpos[:], data.qvel[:], data.qacc[:] = q[k], qd[k], qdd[k]
        mujoco.mj_inverse(model, data)
        out[k] = data.qfrc_inverse
    return out


def _windows(train: dict, model, window: float):
    """Trajectory ``train`` cut into consecutive windows of ``window`` s, each a sysid sequence:
    measured initial state, measured joint torques as controls (zero-order hold), measured
    positions and velocities as sensor data at the following samples."""
    from mujoco import sysid

    t, q, qd, tau = train["t"], train["q"], train["qd"], train["tau"]
    dt = float(np.median(np.diff(t)))
    n = max(int(round(window / dt)) + 1, 3)
    states, controls, sensors = [], [], []
    for s in range(0, len(t) - n + 1, n - 1):
        sl = slice(s, s + n)
        tt = t[sl] - t[s]  # each window's clock starts at 0, as the rollout's does
        states.append(sysid.create_initial_state(model, q[s], qd[s]))
        controls.append(sysid.TimeSeries.from_control_names(tt, tau[sl], model))
        sensors.append(sysid.TimeSeries.from_names(tt[1:], np.hstack([q[sl], qd[sl]])[1:], model))
    return states, controls, sensors


def identify(
    train: dict[str, np.ndarray],
    *,
    method: str = "rollout",
    window: float = 0.2,
    max_iters: int = 30,
    verbose: bool = False,
) -> SysidResult:
    """Identify the KR300 with `mujoco.sysid` on one trajectory (module doc).

    Args:
        train: ``{"t": (T,), "q", "qd", "tau": (T, 6)}`` (rad, rad/s, joint-side N m), and for
            ``method="inverse"`` also ``"qdd"``; see `load_trajectory`.
        method: "rollout" (sysid's simulation-error pipeline on windows) or "inverse"
            (sysid's parameters and optimiser on `mj_inverse`'s torque error).
        window: rollout window length, s.
        max_iters: Gauss-Newton iterations of `mujoco.minimize.least_squares`.
    """
    import mujoco
    from mujoco import sysid

    if method not in ("rollout", "inverse"):
        raise ValueError(f"method: expected 'rollout' or 'inverse', got {method!r}")
    for key in ("t", "q", "qd", "tau") + (("qdd",) if method == "inverse" else ()):
        if key not in train:
            raise ValueError(f"train: missing {key!r}")
        if key != "t" and np.shape(train[key]) != (len(train["t"]), 6):
            raise ValueError(f"train[{key!r}]: expected shape (T, 6), got {np.shape(train[key])}")
    spec = mujoco.MjSpec.from_string(kr300_mjcf(timestep=float(np.median(np.diff(train["t"])))))
    model0 = spec.compile()
    params = sysid_parameters(spec, model0)
    initial = params.copy()

    if method == "rollout":
        states, controls, sensors = _windows(train, model0, window)
        # Fixed per-channel scales (std over the trajectory), not sysid's per-window norms.
        scale = np.hstack([train["q"], train["qd"]]).std(axis=0)

        def modify_residual(params_, pred, meas, model_, return_pred_all, state=None):
            del params_, model_, return_pred_all, state
            if pred.data.shape != meas.data.shape:
                raise ValueError(f"rollout gave {pred.data.shape}, measurement {meas.data.shape}")
            return (meas.data - pred.data) / scale, pred, meas

        sequences = sysid.ModelSequences(
            "kr300", spec, [f"w{k}" for k in range(len(states))], states, controls, sensors
        )
        residual_fn = sysid.build_residual_fn(
            models_sequences=[sequences], modify_residual=modify_residual
        )
    else:
        scale = train["tau"].std(axis=0)
        q, qd, qdd, tau = train["q"], train["qd"], train["qdd"], train["tau"]

        def residual_fn(x, params_):
            x2 = x.reshape(len(x), -1)
            cols = []
            for c in range(x2.shape[1]):  # finite-difference columns
                params_.update_from_vector(x2[:, c])
                model_ = sysid.apply_param_modifiers(params_, spec)
                cols.append(((tau - inverse_torques(model_, q, qd, qdd)) / scale).ravel())
            r = cols[0] if x.ndim == 1 else np.stack(cols, axis=1)
            return [r], None, None

    x0 = params.as_vector()
    r0 = np.concatenate(residual_fn(x0, params.copy())[0])
    t0 = time.perf_counter()
    log = sys.stdout if verbose else io.StringIO()  # mujoco.minimize's iteration messages
    opt, _ = sysid.optimize(
        params, residual_fn, optimizer="mujoco", verbose=False, max_iters=max_iters, output=log
    )
    seconds = time.perf_counter() - t0
    r = np.concatenate(residual_fn(opt.as_vector(), opt.copy())[0])
    model = sysid.apply_param_modifiers(opt, spec)
    return SysidResult(
        model=model,
        mjcf=spec.to_xml(),
        params=opt,
        initial_params=initial,
        method=method,
        seconds=seconds,
        cost0=0.5 * float(r0 @ r0),
        cost=0.5 * float(r @ r),
        n_residuals=r.size,
        log="" if verbose else log.getvalue(),
    )


def predict_torques(result: SysidResult, log: dict[str, np.ndarray]) -> np.ndarray:
    """Joint torques (T, 6), N m, of the identified model along a measured trajectory:
    `inverse_torques` at ``log["q"], log["qd"], log["qdd"]`` (module doc)."""
    for key in ("q", "qd", "qdd"):
        if key not in log:
            raise ValueError(f"log: missing {key!r}")
    return inverse_torques(result.model, log["q"], log["qd"], log["qdd"])


def rmse(pred: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Per-joint root-mean-square error, N m."""
    return np.sqrt(np.mean((pred - tau) ** 2, axis=0))


def check_model(logs: dict[str, dict]) -> None:
    """Print the checks of `kr300_mjcf`: (1) its rigid-body inverse dynamics against jaxmb's
    independent `jaxmb.models.kr300` at random states (armature, damping, friction and spring
    off); (2) at the recordings' slow samples (|qd| < 0.05 rad/s), the measured joint torque
    beside the published model's gravity and counterbalance torques."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(kr300_mjcf())
    data = mujoco.MjData(model)
    off = mujoco.mjtDisableBit
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        import jaxmb
        from jaxmb.models.kr300 import kr300

        rigid = mujoco.MjModel.from_xml_string(kr300_mjcf())
        rigid.opt.disableflags |= (
            off.mjDSBL_SPRING | off.mjDSBL_DAMPER | off.mjDSBL_FRICTIONLOSS | off.mjDSBL_LIMIT
        )
        rigid.dof_armature[:] = 0.0
        rng = np.random.default_rng(0)
        q = rng.uniform(Q_MIN, Q_MAX, (20, 6))
        qd, qdd = rng.normal(size=(20, 6)), rng.normal(size=(20, 6))
        tau_mj = inverse_torques(rigid, q, qd, qdd)
        tau_jx = np.stack(
            [np.asarray(jaxmb.inverse_dynamics(kr300(), *x)) for x in zip(q, qd, qdd, strict=True)]
        )
        print(
            f"MJCF vs jaxmb kr300 inverse dynamics, 20 random states: max |diff| "
            f"{np.abs(tau_mj - tau_jx).max():.2e} N m (max |tau| {np.abs(tau_jx).max():.0f})"
        )
    except ImportError as err:
        print(f"jaxmb not importable ({err}); skipped the MJCF vs jaxmb check")
    rigid_g = mujoco.MjModel.from_xml_string(kr300_mjcf())
    rigid_g.opt.disableflags |= off.mjDSBL_SPRING | off.mjDSBL_FRICTIONLOSS | off.mjDSBL_LIMIT
    for name, log in logs.items():
        slow = np.linalg.norm(log["qd"], axis=1) < 0.05
        z = np.zeros((int(slow.sum()), 6))
        g = inverse_torques(rigid_g, log["q"][slow], z, z)
        cb = counterbalance_torque(log["q"][slow, 1])
        print(
            f"{name}: {slow.sum()} slow samples; mean joint torque measured "
            f"{np.round(log['tau'][slow].mean(0))}, gravity {np.round(g.mean(0))}, "
            f"+ counterbalance on q2 {cb.mean():.0f}"
        )
    del data


def main(argv: list[str] | None = None) -> None:
    """Identify on A with `mujoco.sysid`, print per-joint torque RMSE on A (fit), B and C
    (prediction), and the identification wall time."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", choices=["rollout", "inverse", "both"], default="both")
    ap.add_argument("--window", type=float, default=0.2, help="rollout window, s")
    ap.add_argument("--max-iters", type=int, default=30)
    ap.add_argument("--source", choices=["auto", "parquet", "mat"], default="auto")
    ap.add_argument("--check", action="store_true", help="run `check_model` first")
    ap.add_argument("--save", type=Path, help="folder for the identified MJCF and parameters")
    args = ap.parse_args(argv)

    import mujoco

    logs = {n: load_trajectory(n, source=args.source) for n in "ABC"}
    print(f"mujoco {mujoco.__version__}; data: {logs['A']['source']} (and B, C)")
    if args.check:
        check_model(logs)
    header = "      " + " ".join(f"{j:>8}" for j in JOINTS) + "   (torque RMSE, N m)"
    print("published model:\n" + header)
    m0 = mujoco.MjModel.from_xml_string(kr300_mjcf())
    for n, log in logs.items():
        e = rmse(inverse_torques(m0, log["q"], log["qd"], log["qdd"]), log["tau"])
        print(f"{n:<6}" + " ".join(f"{v:8.1f}" for v in e))
    methods = ["rollout", "inverse"] if args.method == "both" else [args.method]
    for method in methods:
        res = identify(logs["A"], method=method, window=args.window, max_iters=args.max_iters)
        last = [ln for ln in res.log.splitlines() if ln.strip()][-2:]
        print(
            f"mujoco.sysid, method={method}"
            + (f" (windows of {args.window} s)" if method == "rollout" else "")
            + f": identification {res.seconds:.1f} s wall, {res.params.size} parameters, "
            f"{res.n_residuals} residuals, cost {res.cost0:.4g} -> {res.cost:.4g}"
        )
        print("  " + " | ".join(last))
        print(header)
        for n, log in logs.items():
            e = rmse(predict_torques(res, log), log["tau"])
            label = f"{n} fit" if n == "A" else f"{n} new"
            print(f"{label:<6}" + " ".join(f"{v:8.1f}" for v in e))
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"kr300_sysid_{method}.xml").write_text(res.mjcf)
            res.params.save_to_disk(args.save / f"kr300_sysid_{method}_params.yaml")


if __name__ == "__main__":
    main()
