"""Virtual decomposition (Petrovic & Mattila (2022)) against the Lagrangian minimal-coordinate
models of jaxmb, Newton-Euler sums by jaxmb.multibody.spatial, and the paper's own identities."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import SPEC_CRANE, spec_crane_loops

import jaxmb
from jaxmb import vdc
from jaxmb.models.crane import crane_chain
from jaxmb.models.series_parallel import arm_elbow_chain, arm_elbow_drive, arm_elbow_segment
from jaxmb.multibody.spatial import (
    adjoint,
    compose,
    inverse,
    rot_z,
    spatial_cross_force,
    spatial_inertia,
    wrench_transform,
)

N_STATES = 6
# float64 between two exact formulations of the same dynamics (forces ~1e4 N): round-off only
RTOL = 1e-9


def crane_states(seed, n=N_STATES):
    rng = np.random.default_rng(seed)
    q = np.column_stack([rng.uniform(-0.4, 1.4, n), rng.uniform(-0.75, 0.65, n)])
    qd = rng.normal(size=(n, 2)) * 0.5
    qdd = rng.normal(size=(n, 2))
    return jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)


def arm_states(seed, n=N_STATES):
    rng = np.random.default_rng(seed)
    q = np.column_stack(
        [rng.uniform(-np.pi, np.pi, n), rng.uniform(-1.0, 1.5, n), rng.uniform(0.02, 0.18, n)]
    )
    qd = rng.normal(size=(n, 3)) * np.array([1.0, 1.0, 0.1])
    qdd = rng.normal(size=(n, 3)) * np.array([1.0, 1.0, 0.1])
    return jnp.asarray(q), jnp.asarray(qd), jnp.asarray(qdd)


def random_body(rng):
    """A physically realisable body: principal moments a+b, b+c, c+a, random axes."""
    a, b, c = rng.uniform(0.1, 2.0, 3)
    axis = rng.normal(size=3)
    R = jaxmb.multibody.spatial.rot_axis_angle(axis / np.linalg.norm(axis), rng.uniform(-3, 3))
    inertia = R @ jnp.diag(jnp.array([a + b, b + c, c + a])) @ R.T
    return vdc.RigidBody(rng.uniform(1, 10), rng.normal(size=3), 0.5 * (inertia + inertia.T))


# ---------------------------------------------------------------------------------------------
# Lagrangian references (jaxmb) and the VDC side, vmapped over states
# ---------------------------------------------------------------------------------------------


def pin_distance_jacobian(model, pins, q):
    """J_x = d x / d q with x_i = |rod pin - base pin| from jaxmb frame poses (jacfwd)."""

    def x_of_q(q_):
        out = []
        for base, rod in pins:
            A = jaxmb.frame_pose(model, q_, base)[:3, 3]
            B = jaxmb.frame_pose(model, q_, rod)[:3, 3]
            out.append(jnp.linalg.norm(B - A))
        return jnp.stack(out)

    return jax.jacfwd(x_of_q)(q)


CRANE_PINS = (("lift_tube", "lift_rod"), ("tilt_tube", "tilt_rod"))


@eqx.filter_jit
def crane_reference(model, q, qd, qdd, W_tool):
    """Cylinder forces f with J_x^T f = Q, Q = Gamma qdd + h - Q_e (jaxmb.inverse_dynamics)."""

    def one(q, qd, qdd):
        Q = jaxmb.inverse_dynamics(model, q, qd, qdd, {"tool": W_tool})
        return jnp.linalg.solve(pin_distance_jacobian(model, CRANE_PINS, q).T, Q)

    return jax.vmap(one)(q, qd, qdd)


@eqx.filter_jit
def crane_vdc(chain, q, qd, qdd, W_tool):
    F_D = -vdc.to_vdc(W_tool)  # the tool exerts -W on its surroundings (eq. (60), D_1n)
    return jax.vmap(lambda a, b, c: vdc.actuator_forces(chain, a, b, c, F_D=F_D))(q, qd, qdd)


@pytest.fixture(scope="module")
def crane():
    return jaxmb.models.lift_tilt_crane(full=True)


@pytest.fixture(scope="module")
def crane_payload():
    return jaxmb.models.lift_tilt_crane(full=True, payload=200.0)


W_TOOL = jnp.array(
    [30.0, -20.0, 150.0, 400.0, -900.0, 50.0]
)  # [m; f] on the tool, in the tool frame


@pytest.mark.parametrize(
    "which, seed, wrench",
    [("crane", 0, False), ("crane_payload", 1, False), ("crane_payload", 2, True)],
)
def test_crane_actuator_forces_match_lagrangian(which, seed, wrench, request):
    """Theorem 3 (eq. (68)) over two segments equals the full Lagrangian plant's cylinder forces."""
    model = request.getfixturevalue(which)
    chain = crane_chain(model)
    q, qd, qdd = crane_states(seed)
    W = W_TOOL if wrench else jnp.zeros(6)
    f_ref = crane_reference(model, q, qd, qdd, W)
    out = crane_vdc(chain, q, qd, qdd, W)
    np.testing.assert_allclose(out.f_c, f_ref, rtol=RTOL, atol=1e-9 * np.abs(f_ref).max())
    assert np.all(np.abs(f_ref) > 100.0)  # non-trivial forces, kN range


def test_crane_nominal_model_has_massless_cylinders(crane):
    """crane_chain of the nominal model (booms only, no coordinate map: pins from the spec's
    constants) is the full model's chain with massless tubes and rods."""
    nominal = crane_chain(jaxmb.models.lift_tilt_crane())
    full = crane_chain(crane)
    for j in range(2):
        full = eqx.tree_at(
            lambda c, j=j: (c.segments[j].tube, c.segments[j].piston),
            full,
            (vdc.RigidBody(), vdc.RigidBody()),
        )
    q, qd, qdd = crane_states(17)
    a = crane_vdc(nominal, q, qd, qdd, W_TOOL)
    b = crane_vdc(full, q, qd, qdd, W_TOOL)
    np.testing.assert_allclose(a.f_c, b.f_c, rtol=1e-12)


def test_crane_geometry_and_offsets(crane):
    """Segment strokes equal the plant's pin distances; the tool and the segment-2 driven point
    move as jaxmb's frames do (eqs. (24)-(31) against body Jacobians)."""
    chain = crane_chain(crane)
    q, qd, qdd = crane_states(3, 3)
    loops = spec_crane_loops()
    for k in range(3):
        s_ref = loops(q[k])[jnp.array([3, 5])]
        qv = q[k] + chain.q_offset
        for j, seg in enumerate(chain.segments):
            x, _, _ = vdc.loop_closure(seg, qv[j])
            np.testing.assert_allclose(x + seg.x0, s_ref[j], rtol=1e-13)
        m = vdc.chain_motion(chain, q[k], qd[k], qdd[k])
        V_tool = vdc.to_vdc(jaxmb.frame_jacobian(crane, q[k], "tool") @ qd[k])
        np.testing.assert_allclose(m.V["E1_2"], V_tool, rtol=1e-12, atol=1e-12)
        # B_c2 = E_11: tilt base pin A2 on the lift boom, x toward O2
        R_WC2, V_c2, Vd_c2 = vdc.driven_point_motion(
            crane, "L", q[k], qd[k], qdd[k], _R_L_Bc2(), _A2()
        )
        np.testing.assert_allclose(m.V["B0_2"], V_c2, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(m.Vd["B0_2"], Vd_c2, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(m.R["B0_2"], R_WC2, atol=1e-13)
        # tool orientation
        np.testing.assert_allclose(
            m.R["E1_2"], jaxmb.frame_pose(crane, q[k], "tool")[:3, :3], atol=1e-13
        )


def _A2():
    return jnp.asarray(jaxmb.models.crane.CYLINDERS["tilt"]["base"][1])


def _R_L_Bc2():
    d = jnp.asarray(jaxmb.models.crane.O2) - _A2()
    return rot_z(jnp.arctan2(d[1], d[0]))


def test_crane_l_c_does_not_change_forces(crane_payload):
    """l_cj (where B_4j sits on the piston) is a modelling choice: eq. (68) must not see it."""
    q, qd, qdd = crane_states(4)
    ref = crane_vdc(crane_chain(crane_payload, l_c=0.30), q, qd, qdd, W_TOOL)
    for l_c in (0.05, -0.4):
        out = crane_vdc(crane_chain(crane_payload, l_c=l_c), q, qd, qdd, W_TOOL)
        np.testing.assert_allclose(out.f_c, ref.f_c, rtol=1e-11)
        np.testing.assert_allclose(out.F_c, ref.F_c, rtol=1e-11, atol=1e-8)


def newton_euler_base_wrench(model, q, qd, qdd, T_SC, W_tool):
    """[m; f] the ground exerts on the whole machine at frame C: the sum over bodies of
    (M a + V x* M V - weight), moved to C, minus the tool wrench (jaxmb.multibody.spatial only)."""
    # body twists V = J qd and accelerations a = J qdd + Jdot qd (jvp along (qd, qdd))
    V, a = jax.jvp(lambda q_, qd_: jaxmb.body_jacobians(model, q_) @ qd_, (q, qd), (qd, qdd))
    total = jnp.zeros(6)
    for i, b in enumerate(model.bodies):
        T_SB = jaxmb.frame_pose(model, q, b.frame)
        R_SB, p_SB = T_SB[:3, :3], T_SB[:3, 3]
        M = spatial_inertia(b.mass, b.com, b.inertia)
        f_w = b.mass * (R_SB.T @ model.gravity)
        weight = jnp.concatenate([jnp.cross(b.com, f_w), f_w])
        W_B = M @ a[i] + spatial_cross_force(V[i], M @ V[i]) - weight
        R_BC, p_BC = compose(inverse((R_SB, p_SB)), T_SC)
        total = total + wrench_transform(R_BC, p_BC, W_B)
    T_tool = jaxmb.frame_pose(model, q, "tool")
    R_tC, p_tC = compose(inverse((T_tool[:3, :3], T_tool[:3, 3])), T_SC)
    return total - wrench_transform(R_tC, p_tC, W_tool)


def test_theorem_4_driven_point_force_is_newton_euler_sum(crane_payload):
    """Eq. (69) at segment 1 (the ground's force on the crane, at A1) equals the rate of change
    of every body's momentum minus its weight and the tool wrench, summed by jaxmb.multibody.spatial."""
    chain = crane_chain(crane_payload)
    q, qd, qdd = crane_states(5, 3)
    A1 = jnp.asarray(jaxmb.models.crane.CYLINDERS["lift"]["base"][1])
    out = crane_vdc(chain, q, qd, qdd, W_TOOL)
    for k in range(3):
        ref = newton_euler_base_wrench(crane_payload, q[k], qd[k], qdd[k], (chain.R_WC, A1), W_TOOL)
        np.testing.assert_allclose(
            out.F_c[k], vdc.to_vdc(ref), rtol=RTOL, atol=1e-9 * np.abs(ref).max()
        )


def test_appendix_a_form_equals_eq_68(crane_payload):
    """Eq. (68) and its two-step form (A.14)-(A.15) agree, for the crane's both segments."""
    chain = crane_chain(crane_payload)
    q, qd, qdd = crane_states(6, 2)
    for k in range(2):
        out = vdc.actuator_forces(chain, q[k], qd[k], qdd[k], F_D=-vdc.to_vdc(W_TOOL))
        qv = q[k] + chain.q_offset
        F_E = [out.F_seg[1], -vdc.to_vdc(W_TOOL)]
        for j, seg in enumerate(chain.segments):
            Fs = [out.F_net[f"{f}_{j + 1}"] for f in ("B1", "B3", "B4")]
            fx, _ = vdc.revolute_actuator_force_appendix(seg, qv[j], *Fs, F_E[j])
            np.testing.assert_allclose(fx, out.f_c[j], rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# the arm's elbow: a revolute segment whose driven point moves in 3D
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def arm_full():
    return jaxmb.models.series_parallel_3dof(full=True)


@eqx.filter_jit
def arm_both(model, q, qd, qdd, W):
    chain = arm_elbow_chain(model)

    def one(q, qd, qdd):
        ref = jaxmb.inverse_dynamics(model, q, qd, qdd, {"F3": W})[2]
        z, zd, zdd, R_WC, V_c, Vd_c = arm_elbow_drive(model, q, qd, qdd)
        out = vdc.actuator_forces(
            chain, z, zd, zdd, V_c=V_c, Vd_c=Vd_c, R_WC=R_WC, F_D=-vdc.to_vdc(W)
        )
        zeta = jaxmb.augmented_coordinates(model, q)[2]
        return ref, out.f_c[0], z[0] - zeta

    return jax.vmap(one)(q, qd, qdd)


@pytest.mark.parametrize("wrench", [False, True])
def test_arm_elbow_force_matches_lagrangian(arm_full, wrench):
    """The delta component of the full arm's inverse dynamics is exactly the cylinder force."""
    q, qd, qdd = arm_states(7 + wrench)
    W = (
        jnp.array([0.0, 0.0, 0.0, 0.0, -25.0, 0.0]) if wrench else jnp.zeros(6)
    )  # spec's disturbance
    ref, f, dzeta = arm_both(arm_full, q, qd, qdd, W)
    np.testing.assert_allclose(dzeta, 0.0, atol=1e-13)  # angle_from_stroke = eq. (28)
    np.testing.assert_allclose(f, ref, rtol=RTOL, atol=1e-9 * np.abs(ref).max())
    assert np.all(np.abs(ref) > 10.0)


# ---------------------------------------------------------------------------------------------
# loop closure, velocities, rigid-body identities
# ---------------------------------------------------------------------------------------------


def test_loop_closure_signs_rates_and_printed_forms(crane, arm_full):
    """atan2 angles add up (q_j = q_j1 + q_j2); they equal the printed -arccos of eqs. (19)-(20)
    where sin q_j < 0 (crane lift, arm elbow) and +arccos where sin q_j > 0 (crane tilt); the
    rates of eqs. (21)-(23) are the derivatives (jax.jvp)."""
    chain = crane_chain(crane)
    segs = [(chain.segments[0], 0, chain.q_offset[0]), (chain.segments[1], 1, chain.q_offset[1])]
    segs.append((arm_elbow_segment(arm_full), None, 0.0))
    q, _, _ = crane_states(9, 4)
    for seg, i, off in segs:
        qs = q[:, i] + off if i is not None else jnp.linspace(-2.4, -0.8, 4)
        for qj in qs:
            x, q1, q2 = vdc.loop_closure(seg, qj)
            np.testing.assert_allclose(q1 + q2, qj, atol=1e-13)
            l = x + seg.x0
            L, L1 = seg.L, seg.L1
            sign = -1.0 if np.sin(qj) < 0 else 1.0
            q1_printed = -jnp.arccos((L1**2 - l**2 - L**2) / (-2 * l * L))  # eq. (19)
            q2_printed = -jnp.arccos((L**2 - l**2 - L1**2) / (-2 * l * L1))  # eq. (20)
            np.testing.assert_allclose(q1, -sign * q1_printed, atol=1e-12)
            np.testing.assert_allclose(q2, -sign * q2_printed, atol=1e-12)
            np.testing.assert_allclose(vdc.angle_from_stroke(seg, x, int(sign)), qj, atol=1e-10)
            rates = vdc.loop_closure_rates(seg, qj, 0.7)
            tangents = jax.jvp(lambda a, s=seg: vdc.loop_closure(s, a), (qj,), (0.7,))[1]
            np.testing.assert_allclose(jnp.stack(rates), jnp.stack(tangents), rtol=1e-12)
    assert np.sin(q[0, 1] + chain.q_offset[1]) > 0 > np.sin(q[0, 0] + chain.q_offset[0])


def test_driving_point_velocity_is_consistent(crane_payload):
    """Eq. (30): T_1j V from the link (eq. (26)) equals T_2j V from the cylinder (eq. (29))."""
    chain = crane_chain(crane_payload)
    rng = np.random.default_rng(10)
    for seg, qj in zip(chain.segments, [-2.0, 2.3], strict=True):
        V_c = jnp.asarray(rng.normal(size=6))
        V = vdc.revolute_velocities(seg, qj, 0.8, V_c)
        np.testing.assert_allclose(V["Tc"], V["T2"], rtol=1e-12, atol=1e-12)


def test_U_matches_jaxmb_adjoint_and_boundary_roundtrip():
    rng = np.random.default_rng(11)
    R = np.asarray(jaxmb.multibody.spatial.rot_axis_angle(np.array([0.6, 0.0, 0.8]), 0.9))
    r = rng.normal(size=3)
    V_A, F_B = jnp.asarray(rng.normal(size=6)), jnp.asarray(rng.normal(size=6))
    Ad_BA = adjoint(*inverse((R, r)))  # twists from A to B coordinates, jaxmb [omega; v]
    np.testing.assert_allclose(
        vdc.U(R, r).T @ V_A, vdc.to_vdc(Ad_BA @ vdc.from_vdc(V_A)), atol=1e-13
    )  # eq. (3)
    F_A = vdc.U(R, r) @ F_B  # eq. (4); power is invariant
    np.testing.assert_allclose(F_A @ V_A, F_B @ (vdc.U(R, r).T @ V_A), rtol=1e-12)
    np.testing.assert_allclose(vdc.from_vdc(vdc.to_vdc(V_A)), V_A)
    np.testing.assert_allclose(vdc.to_vdc(jnp.arange(6.0)), [3, 4, 5, 0, 1, 2])


def test_rigid_body_identities_and_newton_euler():
    """M_A SPD, C_A skew (x^T C x = 0), and eq. (7) equals jaxmb.multibody.spatial's Newton-Euler
    (M a + V x* M V - weight) for a random body, state and orientation."""
    rng = np.random.default_rng(12)
    g_W = jnp.array([0.0, -9.81, 0.0])
    for _ in range(3):
        b = random_body(rng)
        M = vdc.M_A(b)
        np.testing.assert_allclose(M, M.T, atol=1e-12)
        assert np.linalg.eigvalsh(M).min() > 0
        w = jnp.asarray(rng.normal(size=3))
        C = vdc.C_A(b, w)
        np.testing.assert_allclose(C, -C.T, atol=1e-12)
        x = jnp.asarray(rng.normal(size=6))
        np.testing.assert_allclose(x @ C @ x, 0.0, atol=1e-11)
        V, Vd = jnp.asarray(rng.normal(size=6)), jnp.asarray(rng.normal(size=6))
        R_WA = jaxmb.multibody.spatial.rot_axis_angle(
            jnp.array([0.0, 0.6, 0.8]), rng.uniform(-3, 3)
        )
        Msp = spatial_inertia(b.mass, b.com, b.inertia)  # jaxmb order [omega; v]
        Vj, aj = vdc.from_vdc(V), vdc.from_vdc(Vd)
        f_w = b.mass * (R_WA.T @ g_W)
        weight = jnp.concatenate([jnp.cross(b.com, f_w), f_w])
        ref = Msp @ aj + spatial_cross_force(Vj, Msp @ Vj) - weight
        F = vdc.net_force(b, V, Vd, R_WA, g_W)
        np.testing.assert_allclose(F, vdc.to_vdc(ref), rtol=1e-12, atol=1e-11)
        F_matrices = M @ Vd + vdc.C_A(b, V[3:]) @ V + vdc.G_A(b, R_WA, g_W)  # eq. (7) literally
        np.testing.assert_allclose(F, F_matrices, rtol=1e-12, atol=1e-11)
        # eq. (8) with K = 0 and V_r = V is eq. (7); C_A takes the measured omega
        V_r = jnp.asarray(rng.normal(size=6))
        F_r = vdc.required_net_force(b, V_r, Vd, V, R_WA, g_W, jnp.eye(6))
        F_r_ref = M @ Vd + vdc.C_A(b, V[3:]) @ V_r + vdc.G_A(b, R_WA, g_W) + (V_r - V)
        np.testing.assert_allclose(F_r, F_r_ref, rtol=1e-12, atol=1e-11)


def test_rigid_body_rejects_bad_numbers():
    with pytest.raises(ValueError, match="RigidBody: mass"):
        vdc.RigidBody(-1.0, jnp.zeros(3), jnp.eye(3))
    with pytest.raises(ValueError, match="RigidBody: inertia"):
        vdc.RigidBody(1.0, jnp.zeros(3), -jnp.eye(3))
    with pytest.raises(ValueError, match="RevoluteSegment: L "):
        vdc.RevoluteSegment(0.0, 1.0, 1.0, 0.1)
    chain = crane_chain(jaxmb.models.lift_tilt_crane(full=True))
    with pytest.raises(ValueError, match="q: expected shape"):
        vdc.actuator_forces(chain, jnp.zeros(3), jnp.zeros(3), jnp.zeros(3))


# ---------------------------------------------------------------------------------------------
# prismatic segments, eqs. (32)-(34), (51)-(56)
# ---------------------------------------------------------------------------------------------

R_INC = rot_z(1.1)  # an inclined actuator axis (63 deg from horizontal)
PRI = {
    "x0": 0.4,
    "R_B5P3": rot_z(-0.3),
    "r_B5P3": jnp.array([0.5, 0.05, 0.02]),
    "R_P3E": rot_z(0.2),
    "r_P3E": jnp.array([0.3, -0.1, 0.0]),
}


def prismatic_bodies(rng):
    return {k: random_body(rng) for k in ("case", "piston", "load")}


def prismatic_frames(parent, R0, p0, extra_name=""):
    """jaxmb frames of a prismatic segment: case (fixed), rod (prismatic x), obj, tip."""
    return [
        jaxmb.Frame("case", parent, rotation=R0, translation=p0),
        jaxmb.Frame(
            "rod",
            "case",
            translation=[PRI["x0"], 0, 0],
            joint="prismatic",
            axis=[1, 0, 0],
            coordinate="xt",
        ),
        jaxmb.Frame("obj", "rod", rotation=PRI["R_B5P3"], translation=PRI["r_B5P3"]),
        jaxmb.Frame("tip", "obj", rotation=PRI["R_P3E"], translation=PRI["r_P3E"]),
    ]


def prismatic_jaxmb_bodies(bodies):
    out = []
    for name, frame in (("case", "case"), ("piston", "rod"), ("load", "obj")):
        b = bodies[name]
        out.append(jaxmb.Body(name, frame, b.mass, b.com, b.inertia))
    return out


def prismatic_segment(bodies):
    return vdc.PrismaticSegment(**PRI, **bodies)


def test_prismatic_segment_on_fixed_base_matches_lagrangian():
    """f_ct of eq. (55) equals the generalized force of the prismatic coordinate in an equivalent
    jaxmb Model (a Frame with joint="prismatic"), with a tip wrench."""
    rng = np.random.default_rng(13)
    bodies = prismatic_bodies(rng)
    g = [0.0, -9.81, 0.0]
    model = jaxmb.Model(
        prismatic_frames("S", R_INC, [0.3, 0.2, 0.0]), prismatic_jaxmb_bodies(bodies), g
    )
    chain = vdc.VDCChain((prismatic_segment(bodies),), g, R_WC=R_INC)
    W = jnp.asarray(rng.normal(size=6)) * 50
    for _ in range(3):
        x, xd, xdd = (jnp.asarray([v]) for v in rng.normal(size=3) * [0.2, 0.3, 1.0])
        ref = jaxmb.inverse_dynamics(model, x, xd, xdd, {"tip": W})
        out = vdc.actuator_forces(chain, x, xd, xdd, F_D=-vdc.to_vdc(W))
        np.testing.assert_allclose(out.f_c, ref, rtol=RTOL)
        m = vdc.chain_motion(chain, x, xd, xdd)
        np.testing.assert_allclose(
            m.V["E2_1"], vdc.to_vdc(jaxmb.frame_jacobian(model, x, "tip") @ xd), atol=1e-12
        )


class LiftTelescope(jaxmb.CoordinateMap):
    """q = [q1, xt] -> [q1, alpha_lift, s_lift, xt]: the crane's lift loop plus a telescope."""

    loops: jaxmb.CoordinateMap
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(self):
        self.loops = spec_crane_loops()
        self.names = ("q1", "xt")

    def __call__(self, q):
        lift = self.loops(jnp.stack([q[0], jnp.zeros_like(q[0])]))
        return jnp.stack([q[0], lift[2], lift[3], q[1]])


def test_revolute_then_prismatic_chain_matches_lagrangian(crane):
    """A telescopic lift boom: the crane's lift segment with a prismatic segment on the boom
    (E_11 = P_21, eq. (16)); both cylinder forces against the Lagrangian full model."""
    rng = np.random.default_rng(14)
    bodies = prismatic_bodies(rng)
    R_LP, p_LP = rot_z(0.15), jnp.array([2.0, 0.2, 0.0])  # case placement on the lift boom
    keep = [b for b in crane.bodies if b.name in ("L", "lift_tube", "lift_rod")]
    frames = [f for f in crane.frames if f.name in ("L", "lift_tube", "lift_rod")]
    model = jaxmb.Model(
        frames + prismatic_frames("L", R_LP, p_LP),
        keep + prismatic_jaxmb_bodies(bodies),
        crane.gravity,
        coordinate_map=LiftTelescope(),
        augmented_names=("q1", "alpha_lift", "s_lift", "xt"),
    )
    lift = crane_chain(crane).segments[0]
    b1 = jnp.arctan2(SPEC_CRANE["B1"][1], SPEC_CRANE["B1"][0])  # B_11 is L turned by b1
    lift = eqx.tree_at(lambda s: (s.R_B1E, s.r_B1E), lift, (rot_z(-b1) @ R_LP, rot_z(-b1) @ p_LP))
    base = crane_chain(crane)
    chain = vdc.VDCChain(
        (lift, prismatic_segment(bodies)),
        crane.gravity,
        q_offset=jnp.stack([base.q_offset[0], 0.0]),
        R_WC=base.R_WC,
    )
    W = jnp.asarray(rng.normal(size=6)) * 100
    pins = (("lift_tube", "lift_rod"), ("case", "rod"))
    for _ in range(3):
        q = jnp.array([rng.uniform(-0.4, 1.4), rng.uniform(0.0, 0.5)])
        qd, qdd = jnp.asarray(rng.normal(size=2)), jnp.asarray(rng.normal(size=2))
        Q = jaxmb.inverse_dynamics(model, q, qd, qdd, {"tip": W})
        f_ref = jnp.linalg.solve(pin_distance_jacobian(model, pins, q).T, Q)
        out = vdc.actuator_forces(chain, q, qd, qdd, F_D=-vdc.to_vdc(W))
        np.testing.assert_allclose(out.f_c, f_ref, rtol=RTOL, atol=1e-9 * np.abs(f_ref).max())


# ---------------------------------------------------------------------------------------------
# required forces and virtual stability, eqs. (8), (38)-(48), (76)-(77), (94)-(96)
# ---------------------------------------------------------------------------------------------


def test_required_forces_reduce_to_actual_and_virtual_stability(crane_payload):
    """With required = actual, eqs. (76)-(77) return eq. (68)-(69) and all errors vanish; in
    general dv_A/dt = (V_r - V)^T (F*_r - F*) - (V_r - V)^T K_A (V_r - V) for every frame of
    eq. (94) (C_A skew-symmetric), the identity behind eq. (99)."""
    chain = crane_chain(crane_payload)
    q, qd, qdd = crane_states(15, 3)
    rng = np.random.default_rng(15)
    qd_r = qd + jnp.asarray(rng.normal(size=qd.shape)) * 0.2
    qdd_r = jnp.asarray(rng.normal(size=qd.shape))
    frames = vdc.stability_frames(chain)
    assert frames == ("B0_1", "B1_1", "B3_1", "B4_1", "B0_2", "B1_2", "B3_2", "B4_2")
    K = jnp.diag(jnp.array([1e3, 1e3, 1e3, 2e2, 2e2, 2e2]))
    F_D = -vdc.to_vdc(W_TOOL)

    @eqx.filter_jit
    @jax.vmap
    def run(q, qd, qdd, qd_r, qdd_r):
        same = vdc.required_forces(chain, q, qd, qd, qdd, K, F_D, qdd=qdd)
        req = vdc.required_forces(chain, q, qd, qd_r, qdd_r, K, F_D, qdd=qdd)

        def v_of(q_, qd_, qd_r_):
            return vdc.required_forces(chain, q_, qd_, qd_r_, qdd_r, K, F_D).v

        vdot = jax.jvp(v_of, (q, qd, qd_r), (qd, qdd, qdd_r))[1]
        power = jnp.einsum("ki,ki->k", req.dV, req.dF) - jnp.einsum(
            "ki,ij,kj->k", req.dV, K, req.dV
        )
        return same, req, vdot, power

    same, req, vdot, power = run(q, qd, qdd, qd_r, qdd_r)
    act = crane_vdc(chain, q, qd, qdd, W_TOOL)
    np.testing.assert_allclose(same.f_cr, act.f_c, rtol=1e-12)
    np.testing.assert_allclose(same.F_cr, act.F_c, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(same.dV, 0.0, atol=1e-14)
    np.testing.assert_allclose(same.dF, 0.0, atol=1e-9)
    np.testing.assert_allclose(same.v, 0.0, atol=1e-20)
    assert np.all(req.v >= 0) and np.all(req.v.max(axis=1) > 0)
    np.testing.assert_allclose(vdot, power, rtol=1e-9, atol=1e-9 * np.abs(power).max())


# ---------------------------------------------------------------------------------------------
# transforms: jit, vmap, grad with respect to the model
# ---------------------------------------------------------------------------------------------


def test_grad_wrt_body_mass_matches_finite_differences(crane):
    """d f_lift / d m_L (the lift boom) through crane_chain (built from the jaxmb model) is finite and
    equals central differences."""
    q, qd, qdd = (x[0] for x in crane_states(16, 1))

    def with_mass(m):
        return eqx.tree_at(lambda mo: mo.bodies[0].mass, crane, m)

    def f_vdc(m):
        return vdc.actuator_forces(crane_chain(with_mass(m)), q, qd, qdd).f_c[0]

    m0 = crane.bodies[0].mass
    f_vdc = jax.jit(f_vdc)
    g = jax.jit(jax.grad(f_vdc))(m0)
    assert np.isfinite(g) and abs(g) > 1.0
    h = 1e-3
    fd = (f_vdc(m0 + h) - f_vdc(m0 - h)) / (2 * h)
    # f is affine in the mass, so central differences are exact up to round-off (~1e-13 / h)
    np.testing.assert_allclose(g, fd, rtol=1e-6)
