"""Hydraulic components (Petrovic & Mattila (2022) eqs. (79)-(85)) against the paper's formulas
written out here in numpy, the spec's numbers, and physical identities of the plant."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmb
from jaxmb.actuators.hydraulics import (
    Cylinder,
    CylinderMount,
    LuGreFriction,
    StribeckFriction,
    Valve,
    signed_sqrt,
)
from jaxmb.actuators.plant import limit_events

BAR = 1e5


def v_exact(dp):
    """sign(dp) sqrt(|dp|), eq. (85) unregularised."""
    return np.sign(dp) * np.sqrt(np.abs(dp))


def test_signed_sqrt_error_bound_and_finite_gradient():
    """The regularisation's stated bound: relative error <= (w/dp)^2 / 4, below 2.5e-5 for
    |dp| >= 1 bar at the default width 1e3 Pa; the slope at 0 is 1/sqrt(w), finite."""
    w = 1e3
    dp = np.concatenate([-np.logspace(5, 7.5, 200), np.logspace(5, 7.5, 200)])
    rel = np.abs(np.asarray(signed_sqrt(jnp.asarray(dp), w)) - v_exact(dp)) / np.sqrt(np.abs(dp))
    assert rel.max() <= 2.5e-5
    # the bound holds up to round-off of the difference of two nearly equal roots
    assert np.all(rel <= (w / dp) ** 2 / 4 + 1e-13)
    g0 = jax.grad(signed_sqrt)(0.0, w)
    np.testing.assert_allclose(g0, 1 / np.sqrt(w), rtol=1e-12)
    g = jax.vmap(jax.grad(signed_sqrt), in_axes=(0, None))(jnp.linspace(-1e3, 1e3, 101), w)
    assert np.all(np.isfinite(g))


def flows_reference(c, u, p_a, p_b, p_s, p_r):
    """Eqs. (82)-(84) with the unregularised root, per edge coefficients (c_p1, c_n1, c_p2, c_n2)."""
    c_p1, c_n1, c_p2, c_n2 = c
    S = float(u > 0)
    Q_a = c_p1 * v_exact(p_s - p_a) * u * S + c_n1 * v_exact(p_a - p_r) * u * (1 - S)
    Q_b = -c_n2 * v_exact(p_b - p_r) * u * S - c_p2 * v_exact(p_s - p_b) * u * (1 - S)
    return Q_a, Q_b


def test_valve_flows_match_eqs_82_85():
    rng = np.random.default_rng(0)
    c = rng.uniform(2e-8, 9e-8, 4)
    valve = Valve(c[0], c[1], c[2], c[3], 185 * BAR, 10 * BAR, dp_width=1.0)
    for _ in range(20):
        u = rng.uniform(-9.9, 9.9)
        p_a, p_b = rng.uniform(15, 180, 2) * BAR
        Q = valve.flows(u, p_a, p_b)
        ref = flows_reference(c, u, p_a, p_b, 185 * BAR, 10 * BAR)
        # width 1 Pa against |dp| >= 5 bar: relative error <= (1/5e5)^2/4
        np.testing.assert_allclose(Q, ref, rtol=1e-11)
    # saturation at +-10 V
    np.testing.assert_allclose(
        valve.flows(25.0, 50 * BAR, 50 * BAR), valve.flows(10.0, 50 * BAR, 50 * BAR)
    )
    np.testing.assert_allclose(
        valve.flows(-25.0, 50 * BAR, 50 * BAR), valve.flows(-10.0, 50 * BAR, 50 * BAR)
    )
    # u > 0 fills the piston side and drains the rod side (the cylinder extends)
    Q_a, Q_b = valve.flows(5.0, 50 * BAR, 50 * BAR)
    assert Q_a > 0 and Q_b < 0


def test_valve_from_datasheet_gives_the_spec_coefficients():
    """shared/specs/lift_tilt_crane.md: lift 3.563483e-8, tilt 8.908708e-8 m^3 s^-1 V^-1 Pa^-1/2."""
    lift = Valve.from_datasheet(40e-3 / 60, 35 * BAR, 185 * BAR, 10 * BAR)
    tilt = Valve.from_datasheet(100e-3 / 60, 35 * BAR, 185 * BAR, 10 * BAR)
    for v, ref in ((lift, 3.563483e-8), (tilt, 8.908708e-8)):
        for c in (v.c_pa, v.c_an, v.c_pb, v.c_bn):
            np.testing.assert_allclose(c, ref, rtol=1e-6)
    # at 10 V and 35 bar across one edge the flow is the rated one
    Q_a, _ = lift.flows(10.0, 150 * BAR, 100 * BAR)
    np.testing.assert_allclose(Q_a, 40e-3 / 60, rtol=1e-6)


def test_spool_overlap_meters_the_opening_past_the_band():
    """A valve with overlap ``u_db`` passes no flow inside the band and beyond it the flow of
    the zero-lapped valve (eqs. (82)-(85), `flows_reference`) at the opening ``|u| - u_db``;
    a datasheet's rated flow is reached at the rated command whatever the overlap; the
    deadband is a differentiable leaf (the slope of Q_a in u_db is -c_pa v(p_s - p_a)), and
    the controller's step over the band is the inverse of the effective opening."""
    rng = np.random.default_rng(1)
    c = rng.uniform(2e-8, 9e-8, 4)
    p_s, p_r = 185 * BAR, 10 * BAR
    valve = Valve(*c, p_s, p_r, dp_width=1.0, deadband=1.5)
    for u in (-1.4, -0.3, 0.0, 0.7, 1.49):
        np.testing.assert_array_equal(valve.flows(u, 80 * BAR, 60 * BAR), (0.0, 0.0))
    for _ in range(10):
        u = rng.uniform(1.6, 9.9) * rng.choice([-1, 1])
        p_a, p_b = rng.uniform(15, 180, 2) * BAR
        ref = flows_reference(c, u - 1.5 * np.sign(u), p_a, p_b, p_s, p_r)
        np.testing.assert_allclose(valve.flows(u, p_a, p_b), ref, rtol=1e-11)
    # saturation before the band: +-10 V meters 8.5 V
    np.testing.assert_allclose(valve.flows(25.0, 50 * BAR, 50 * BAR),
                               flows_reference(c, 8.5, 50 * BAR, 50 * BAR, p_s, p_r), rtol=1e-11)  # fmt: skip
    # the rated flow at the rated command and 35 bar across one edge, with 2 V overlap
    lift = Valve.from_datasheet(40e-3 / 60, 35 * BAR, p_s, p_r, deadband=2.0)
    np.testing.assert_allclose(lift.c_pa, 40e-3 / 60 / (8.0 * np.sqrt(35 * BAR)), rtol=1e-12)
    np.testing.assert_allclose(lift.flows(10.0, 150 * BAR, 100 * BAR)[0], 40e-3 / 60, rtol=1e-6)
    # d Q_a / d u_db at u = 5 V
    slope = jax.grad(lambda v: v.flows(5.0, 90 * BAR, 40 * BAR)[0])(valve).deadband
    np.testing.assert_allclose(slope, -c[0] * np.sqrt(p_s - 90 * BAR), rtol=1e-9)
    # step_over inverts the opening: a VDC law's opening reaches the edges unchanged
    u_e = jnp.linspace(-8.4, 8.4, 29)
    np.testing.assert_allclose(valve.opening(valve.step_over(u_e)), u_e, atol=1e-15)
    with pytest.raises(ValueError, match="deadband must be below the command range"):
        Valve(*c, p_s, p_r, deadband=10.0)
    with pytest.raises(ValueError, match="deadband must be >= 0"):
        Valve(*c, p_s, p_r, deadband=-0.1)
    with pytest.raises(ValueError, match="deadband must be below the rated command"):
        Valve.from_datasheet(40e-3 / 60, 35 * BAR, p_s, p_r, u_nom=5.0, deadband=5.0)


def test_cylinder_pressure_dynamics_reduce_to_eqs_80_81():
    """With no dead volume and no leakage the rates are eqs. (80)-(81) as printed."""
    beta, A_a, A_b, s = 1.2e9, 7.853982e-3, 5.390973e-3, 0.535
    cyl = Cylinder(A_a, A_b, s, 1e-300, 1e-300, beta)
    x, xd, p_a, p_b, Q_a, Q_b = 0.2, 0.05, 80 * BAR, 60 * BAR, 3e-4, -2e-4
    dp_a = beta / A_a * (Q_a / x - A_a * xd / x)  # eq. (80)
    dp_b = beta / A_b * (Q_b / (s - x) + A_b * xd / (s - x))  # eq. (81)
    np.testing.assert_allclose(
        cyl.pressure_rates(x, xd, p_a, p_b, Q_a, Q_b), (dp_a, dp_b), rtol=1e-12
    )
    np.testing.assert_allclose(cyl.force(p_a, p_b), A_a * p_a - A_b * p_b, rtol=1e-15)  # eq. (79)
    # from_bore: the spec's areas for bore 100 mm, rod 56 mm
    c = Cylinder.from_bore(0.1, 0.056, s, 1.9e-4, beta)
    np.testing.assert_allclose([c.area_a, c.area_b], [7.853982e-3, 5.390973e-3], rtol=1e-6)


def test_leakage_moves_oil_from_a_to_b_and_to_tank():
    cyl = Cylinder(1e-3, 5e-4, 0.5, 1e-4, 1e-4, 1e9, c_int=1e-12, c_ext=1e-13)
    dp_a, dp_b = cyl.pressure_rates(0.25, 0.0, 100 * BAR, 50 * BAR, 0.0, 0.0)
    V_a, V_b = cyl.volumes(0.25)
    np.testing.assert_allclose(dp_a, 1e9 / V_a * (-1e-12 * 50 * BAR - 1e-13 * 100 * BAR))
    np.testing.assert_allclose(dp_b, 1e9 / V_b * (1e-12 * 50 * BAR - 1e-13 * 50 * BAR))


def test_stribeck_friction_values_and_symmetry():
    p = {"F_c": 210.0, "F_s": 300.0, "v_s": 5e-3, "sigma": 330.0, "v_eps": 1e-3}
    fr = StribeckFriction(**p)
    for v in (-0.2, -3e-3, 1e-4, 2e-3, 0.05):
        g = p["F_c"] + (p["F_s"] - p["F_c"]) * np.exp(-((v / p["v_s"]) ** 2))
        ref = g * np.tanh(v / p["v_eps"]) + p["sigma"] * v
        np.testing.assert_allclose(fr.force(v), ref, rtol=1e-13)
        np.testing.assert_allclose(fr.force(-v), -ref, rtol=1e-13)
    assert float(fr.force(0.0)) == 0.0
    # differentiable in its parameters
    g = jax.grad(lambda f: f.force(0.01))(fr)
    assert all(np.isfinite(x) for x in jax.tree.leaves(g))


def test_lugre_steady_state_is_the_stribeck_curve():
    """At constant v the bristle state settles to z = g(v) sign(v) / sigma0, so
    f = g(v) sign(v) + sigma2 v (up to the |v| smoothing, 1e-6 m/s)."""
    fr = LuGreFriction(sigma0=1e6, sigma1=2e3, sigma2=330.0, F_c=210.0, F_s=300.0, v_s=5e-3)

    def settle(v):
        z, _ = jax.lax.scan(lambda z, _: (_implicit(fr, v, z), None), jnp.asarray(0.0), None, 4000)
        return z

    for v in (0.002, 0.02, -0.01):
        g = 210 + 90 * np.exp(-((v / 5e-3) ** 2))
        z = settle(v)
        np.testing.assert_allclose(fr.force(v, z), np.sign(v) * g + 330 * v, rtol=1e-3)
        # the closed form a replay starts its bristles at (`steady_z`) is where they settle
        np.testing.assert_allclose(fr.steady_z(jnp.asarray(v)), z, rtol=1e-9)
        np.testing.assert_allclose(fr.stribeck(v), g, rtol=1e-13)
    assert float(fr.steady_z(jnp.asarray(0.0))) == 0.0


def _implicit(fr, v, z0, h=1e-3):
    """One implicit Euler step of the bristle equation at constant v (linear in z, and stiff:
    sigma0 |v| / g reaches 1e5 1/s)."""
    abs_v = jnp.sqrt(v * v + fr.v_eps**2) - fr.v_eps
    a = fr.sigma0 * abs_v / fr.stribeck(v)
    return (z0 + h * v) / (1 + h * a)


def test_cylinder_mount_positions_match_the_spec_along_the_task():
    """Spec: along the A-B-C-D path lift x spans 0.163-0.405 m, tilt x 0.173-0.578 m."""
    plant = jaxmb.models.lift_tilt_crane_plant()
    model = plant.model
    lift, tilt = plant.actuators
    from jaxmb.models.crane import WAYPOINTS

    xs = {
        k: [float(a.mount.position(model, jnp.asarray(w))) for a in (lift, tilt)]
        for k, w in WAYPOINTS.items()
    }
    lifts = [v[0] for v in xs.values()]
    tilts = [v[1] for v in xs.values()]
    np.testing.assert_allclose([min(lifts), max(lifts)], [0.163, 0.405], atol=6e-4)
    np.testing.assert_allclose([min(tilts), max(tilts)], [0.173, 0.578], atol=6e-4)
    # J_x against central differences
    q = jnp.array([0.3, -0.2])
    for a in (lift, tilt):
        _, J = a.mount.position_and_jacobian(model, q)
        fd = [
            (a.mount.position(model, q + 1e-6 * e) - a.mount.position(model, q - 1e-6 * e)) / 2e-6
            for e in jnp.eye(2)
        ]
        np.testing.assert_allclose(J, fd, rtol=1e-7, atol=1e-9)  # central differences, h = 1e-6
    # extension raises the lift boom; on its lever, extension of the tilt cylinder lowers the tilt boom
    assert lift.mount.position_and_jacobian(model, q)[1][0] > 0
    assert tilt.mount.position_and_jacobian(model, q)[1][1] < 0


def test_the_arms_elbow_cylinder_is_the_same_mount():
    """The arm's elbow (Dastranj & Mattila Fig. 2): x = |AB| - l0 = delta exactly."""
    arm = jaxmb.models.series_parallel_3dof(full=True)
    mount = CylinderMount("B2", [2 - 0.35, 0, 0], "B3", [0.35, 0, 0], 0.425)
    for delta in (0.01, 0.1, 0.19):
        q = jnp.array([0.3, 0.4, delta])
        x, J = mount.position_and_jacobian(arm, q)
        np.testing.assert_allclose(x, delta, atol=1e-13)
        np.testing.assert_allclose(J, [0, 0, 1], atol=1e-12)


def test_a_pin_on_a_com_frame_is_placed_as_frame_pose_places_it():
    """Mounts read pins from one pass of frame transforms; a COM frame (parallel to its body's
    frame, offset by the COM) is placed there as the public `frame_pose` places it."""
    arm = jaxmb.models.series_parallel_3dof(full=True)
    mount = CylinderMount("C2", [0.1, 0.2, 0.0], "C3", [-0.3, 0.05, 0.1], 0.2)
    q = jnp.array([0.3, 0.4, 0.1])
    T_a, T_b = jaxmb.frame_pose(arm, q, "C2"), jaxmb.frame_pose(arm, q, "C3")
    A = T_a[:3, :3] @ mount.base_point + T_a[:3, 3]
    B = T_b[:3, :3] @ mount.rod_point + T_b[:3, 3]
    np.testing.assert_allclose(mount.length(arm, q), jnp.linalg.norm(B - A), rtol=0, atol=1e-13)


@pytest.fixture(scope="module")
def crane_plant():
    return jaxmb.models.lift_tilt_crane_plant()


def test_piston_kinematics_refuse_bad_coordinates(crane_plant):
    """The plant's public kinematics check their input as every public function does: a wrong
    shape or a NaN raises and names the argument (the vector field checks its state itself)."""
    with pytest.raises(ValueError, match=r"q: expected shape \(2,\)"):
        crane_plant.input_matrix(jnp.zeros(3))
    with pytest.raises(ValueError, match=r"qd: expected shape \(2,\)"):
        crane_plant.piston_kinematics(jnp.zeros(2), jnp.zeros(1))
    with pytest.raises(ValueError, match="q"):
        crane_plant.piston_kinematics(jnp.array([0.1, jnp.nan]), jnp.zeros(2))
    mount = crane_plant.actuators[0].mount
    with pytest.raises(TypeError, match="model"):  # by the annotation here, else by the check
        mount.length("crane", jnp.zeros(2))
    with pytest.raises(ValueError, match=r"q: expected shape \(2,\)"):
        mount.position(crane_plant.model, jnp.zeros(1))


def test_static_pressures_hold_the_crane_still(crane_plant):
    """The default initial state at rest at A: rod sides 40 bar, piston sides computed; with
    closed valves every derivative vanishes (the Lagrangian static balance, J_x^T f = -Q_g)."""
    from jaxmb.models.crane import WAYPOINTS

    for payload in (0.0, 150.0):
        plant = jaxmb.models.lift_tilt_crane_plant(payload=payload)
        y = plant.initial_state(jnp.asarray(WAYPOINTS["A"]), jnp.zeros(2))
        for a in plant.actuators:
            np.testing.assert_allclose(y["actuators"][a.name]["p_b"], 40 * BAR)
        dy = plant.vector_field(0.0, y, jnp.zeros(2))
        np.testing.assert_allclose(dy["qd"], 0.0, atol=1e-12)
        for a in plant.actuators:
            np.testing.assert_allclose(dy["actuators"][a.name]["p_a"], 0.0, atol=1e-9)
            np.testing.assert_allclose(dy["actuators"][a.name]["p_b"], 0.0, atol=1e-9)
        Q_g = jaxmb.gravity_forces(plant.model, y["q"])
        f = jnp.stack(
            [
                plant.actuators[i].cylinder.force(**y["actuators"][a])
                for i, a in enumerate(("lift", "tilt"))
            ]
        )
        _, _, J = plant.piston_kinematics(y["q"], y["qd"])
        np.testing.assert_allclose(J.T @ f, -Q_g, rtol=1e-12)


def test_power_balance_of_the_hydraulic_plant(crane_plant):
    """d/dt (T + V) of the mechanics equals the power the cylinders deliver, sum_i f_i xdot_i
    (the generalized force J_x^T f does the virtual work f dx)."""
    plant = crane_plant
    rng = np.random.default_rng(3)
    for _ in range(3):
        q = jnp.asarray(rng.uniform([-0.3, -0.6], [1.3, 0.5]))
        qd = jnp.asarray(rng.normal(size=2) * 0.3)
        acts = {
            a: {"p_a": rng.uniform(20, 150) * BAR, "p_b": rng.uniform(20, 150) * BAR}
            for a in ("lift", "tilt")
        }
        y = {"q": q, "qd": qd, "actuators": jax.tree.map(jnp.asarray, acts)}
        dy = plant.vector_field(0.0, y, jnp.array([2.0, -3.0]))

        def energy(q_, qd_):
            m = plant.model
            return jaxmb.kinetic_energy(m, q_, qd_) + jaxmb.potential_energy(m, q_)

        dE = jax.jvp(energy, (q, qd), (dy["q"], dy["qd"]))[1]
        _, xd, _ = plant.piston_kinematics(q, qd)
        power = sum(
            a.force(xd[i], y["actuators"][a.name]) * xd[i] for i, a in enumerate(plant.actuators)
        )
        np.testing.assert_allclose(dE, power, rtol=1e-9)


def test_limit_events_count_first_time_and_duration():
    plant = jaxmb.models.lift_tilt_crane_plant()
    t = jnp.linspace(0, 1, 11)
    sig = {
        "p_a_lift": jnp.full(11, 50 * BAR).at[3:5].set(0.1 * BAR),
        "p_b_lift": jnp.full(11, 50 * BAR).at[8].set(200 * BAR),
        "x_lift": jnp.full(11, 0.2).at[6:].set(0.6),
        "p_a_tilt": jnp.full(11, 50 * BAR),
        "p_b_tilt": jnp.full(11, 50 * BAR),
        "x_tilt": jnp.full(11, 0.3),
    }
    ev = limit_events(plant, t, sig)
    assert int(ev["cavitation_lift"]["count"]) == 1
    np.testing.assert_allclose(ev["cavitation_lift"]["first_time"], 0.3)
    np.testing.assert_allclose(ev["cavitation_lift"]["duration"], 0.2)  # trapezoid on the grid
    assert int(ev["overpressure_lift"]["count"]) == 1  # 200 bar > 185 + 10
    np.testing.assert_allclose(ev["overpressure_lift"]["first_time"], 0.8)
    assert int(ev["stroke_end_lift"]["count"]) == 1
    np.testing.assert_allclose(ev["stroke_end_lift"]["first_time"], 0.6)
    for k in ("cavitation_tilt", "overpressure_tilt", "stroke_end_tilt"):
        assert int(ev[k]["count"]) == 0 and np.isnan(ev[k]["first_time"])


def test_bad_parameters_are_named():
    with pytest.raises(ValueError, match="Cylinder: area_a must be > 0"):
        Cylinder(-1e-3, 5e-4, 0.5, 1e-4, 1e-4, 1e9)
    with pytest.raises(ValueError, match="Cylinder: beta"):
        Cylinder(1e-3, 5e-4, 0.5, 1e-4, 1e-4, float("nan"))
    with pytest.raises(ValueError, match="p_s must exceed return"):
        Valve(1e-8, 1e-8, 1e-8, 1e-8, 10 * BAR, 20 * BAR)
    with pytest.raises(ValueError, match="spool must be"):
        Valve(1e-8, 1e-8, 1e-8, 1e-8, 100 * BAR, 2 * BAR, spool="third")
    with pytest.raises(ValueError, match="StribeckFriction: v_eps"):
        StribeckFriction(210, 300, 5e-3, 330, 0.0)
    with pytest.raises(ValueError, match="base_frame 'nowhere' is not a frame"):
        from jaxmb.actuators.hydraulics import HydraulicActuator
        from jaxmb.actuators.plant import HydraulicPlant

        p = jaxmb.models.lift_tilt_crane_plant()
        a = p.actuators[0]
        mount = CylinderMount("nowhere", a.mount.base_point, "L", a.mount.rod_point, 0.82)
        bad = HydraulicActuator("x", mount, a.cylinder, a.valve)
        HydraulicPlant(p.model, [bad])


def test_second_order_spool_and_lugre_are_differentiable():
    """The second-order spool's rates are s' = sd, sd' = w^2 (sat(u) - s) - 2 zeta w sd
    (written out), saturation included; LuGre's force has finite parameter gradients at rest
    and in sliding."""
    v = Valve(1e-8, 1e-8, 1e-8, 1e-8, 185 * BAR, 10 * BAR, spool="second", omega=120.0, zeta=0.6)
    s = jnp.array([2.0, -30.0])
    for u in (5.0, 14.0, -20.0):
        ref = [-30.0, 120.0**2 * (np.clip(u, -10, 10) - 2.0) - 2 * 0.6 * 120.0 * -30.0]
        np.testing.assert_allclose(v.spool_rates(s, u), ref, rtol=1e-14)
    fr = LuGreFriction(sigma0=1e6, sigma1=2e3, sigma2=330.0, F_c=210.0, F_s=300.0, v_s=5e-3)
    for vel, z in ((0.0, 1e-5), (0.03, 2e-4)):
        g = jax.grad(lambda f, v=vel, z=z: f.force(v, z))(fr)
        assert all(np.isfinite(x) for x in jax.tree.leaves(g))


def test_a_plant_with_direct_joint_torques_and_a_hydraulic_elbow():
    """The arm with a valve-driven elbow cylinder and electric phi, theta: the static solution
    (piston force and the two torques together, B [f; tau] = -Q_g) holds it still."""
    from jaxmb.actuators.hydraulics import HydraulicActuator
    from jaxmb.actuators.plant import HydraulicPlant

    arm = jaxmb.models.series_parallel_3dof(full=True)
    elbow = HydraulicActuator(
        "elbow",
        CylinderMount("B2", [2 - 0.35, 0, 0], "B3", [0.35, 0, 0], 0.425),
        Cylinder.from_bore(0.05, 0.028, 0.2, 5e-5, 1e9),
        Valve.from_datasheet(10e-3 / 60, 35 * BAR, 160 * BAR, 5 * BAR),
        StribeckFriction(50.0, 80.0, 5e-3, 100.0, 1e-3),
    )
    plant = HydraulicPlant(arm, [elbow], direct=("phi", "theta"))
    assert plant.command_names == ("u_elbow", "tau_phi", "tau_theta")
    q = jnp.array([0.2, 0.5, 0.1])
    y = plant.initial_state(q, jnp.zeros(3), p_b=30 * BAR)
    _, _, sol = plant.static_pressures(q, p_b=30 * BAR)
    command = jnp.concatenate([jnp.zeros(1), sol[1:]])
    dy = plant.vector_field(0.0, y, command)
    np.testing.assert_allclose(dy["qd"], 0.0, atol=1e-10)
    np.testing.assert_allclose(
        sol[0], -jaxmb.gravity_forces(arm, q)[2], rtol=1e-12
    )  # f = -Q_g,delta
    with pytest.raises(ValueError, match="unknown coordinate 'psi'"):
        HydraulicPlant(arm, [elbow], direct=("psi",))


def test_a_valves_command_delay_replays_the_log_shifted_in_time(crane_plant):
    """A valve's ``delay`` d: a replay of logged commands drives its spool with the command
    logged d earlier, interpolated between samples (0.4 ms here, under the 1 ms sample): the
    same trajectory as the undelayed plant under the table shifted by d by hand, and the
    command's slope in d is minus its slope in t. A feedback loop refuses the delay, by name."""
    import equinox as eqx

    from jaxmb.simulation import CommandTable, simulate

    rng = np.random.default_rng(3)
    t = np.arange(0.0, 0.301, 1e-3)
    u = np.stack([3 * np.sin(9 * t) + 0.3 * rng.normal(size=t.size),
                  -2 * np.sin(7 * t + 1) + 0.3 * rng.normal(size=t.size)], 1)  # fmt: skip
    delays = {"lift": 0.0004, "tilt": 0.0123}
    late = eqx.tree_at(lambda p: [a.valve.delay for a in p.actuators], crane_plant,
                       [jnp.asarray(delays[a.name]) for a in crane_plant.actuators])  # fmt: skip
    names = crane_plant.command_names
    table = CommandTable(t, u, names).for_plant(late)
    for tk in (0.0, 0.0101, 0.1505, 0.3):
        want = [np.interp(tk - delays[n[2:]], t, u[:, j]) for j, n in enumerate(names)]
        np.testing.assert_allclose(table(tk), want, rtol=1e-14, atol=1e-14)
    tk = 0.1505  # between samples: d/dd u(t - d) = -du/dt
    slope = jax.jacfwd(lambda d: eqx.tree_at(lambda c: c.delays, table, d)(tk))(table.delays)
    k = [int((tk - delays[n[2:]]) / 1e-3) for n in names]  # the sample interval each reads
    du = [(u[k[j] + 1, j] - u[k[j], j]) / 1e-3 for j in range(2)]
    np.testing.assert_allclose(np.diag(slope), -np.asarray(du), rtol=1e-9)
    q0 = jnp.array([0.45, -0.15])
    run = eqx.filter_jit(lambda p, tab: simulate(p, tab, None, q0, jnp.zeros(2), jnp.asarray(t),
                                                   solver="rk4", fixed_step=1e-3))  # fmt: skip
    # the table shifted by hand, as a logger that stamped every command d late would have
    # written it: on a grid holding every column's shifted sample times, so that its linear
    # interpolation is each shifted column's exactly
    grid = np.unique(np.concatenate([t] + [t + d for d in delays.values()]))
    by_hand = CommandTable(
        grid, np.stack([np.interp(grid, t + delays[n[2:]], u[:, j]) for j, n in enumerate(names)], 1),
        names,
    )  # fmt: skip
    a, b = run(late, CommandTable(t, u, names)), run(crane_plant, by_hand)
    np.testing.assert_allclose(a.q, b.q, rtol=0, atol=1e-12)
    for k in ("p_a_lift", "p_b_tilt"):
        np.testing.assert_allclose(a.signals[k], b.signals[k], rtol=1e-12)
    assert float(jnp.abs(a.q - run(crane_plant, CommandTable(t, u, names)).q).max()) > 1e-5
    with pytest.raises(ValueError, match=r"simulate: the valves of \['u_lift', 'u_tilt'\] have a "
                       "command delay"):  # fmt: skip
        simulate(late, lambda t, y, d: jnp.zeros(2), None, q0, jnp.zeros(2), jnp.asarray(t[:3]),
                 solver="rk4", fixed_step=1e-3)  # fmt: skip


def test_a_sampled_loop_holds_the_commands_until_they_arrive(crane_plant):
    """A feedback loop on delayed valves (2.5 ms and 1.5 ms), sampled at 1 kHz: the hold keeps
    the commands sent until each arrives. Its trajectory is the replay of the very commands
    it sent (held, then delayed by the replay's own rule, integrated adaptively at 1e-11):
    1e-7 rad and 100 Pa at steps that land on every switch (0.5 ms; measured 8e-9 rad and
    11 Pa), 1e-6 rad at the default 1 ms, where a switch falls inside a step (1.6e-7); the
    undelayed loop is 5e-4 rad away. The progress bar's chunks give the single solve's rows."""
    import equinox as eqx

    from jaxmb.simulation import CommandTable, simulate

    delays = {"lift": 0.0025, "tilt": 0.0015}
    late = eqx.tree_at(lambda p: [a.valve.delay for a in p.actuators], crane_plant,
                       [jnp.asarray(delays[a.name]) for a in crane_plant.actuators])  # fmt: skip
    q0 = jnp.array([0.45, -0.15])

    def track(t, y, desired):  # P control of a slow sine, well inside the valves' range
        return 20.0 * (q0 + 0.05 * jnp.sin(3 * t) - y["q"])

    ts = jnp.arange(1001) * 1e-3

    def loop(plant, step, progress=False):
        return simulate(plant, track, None, q0, jnp.zeros(2), ts, solver="rk4", fixed_step=step,
                        sample_time=1e-3, progress=progress)  # fmt: skip

    fine, default = loop(late, 5e-4), loop(late, 1e-3)
    assert bool(fine.success) and bool(default.success)
    # the progress bar's chunks carry the commands on their way from one chunk to the next
    np.testing.assert_allclose(loop(late, 1e-3, progress=True).q, default.q, rtol=0, atol=1e-12)
    # the commands sent, held: each sample's value until just before the next
    t, u = np.asarray(ts), np.asarray(fine.u)
    held = CommandTable(np.stack([t, np.append(t[1:] - 1e-9, t[-1] + 1.0)], 1).ravel(),
                        np.repeat(u, 2, axis=0), late.command_names)  # fmt: skip
    replay = simulate(late, held, None, q0, jnp.zeros(2), ts, rtol=1e-11, atol=1e-12,
                      max_steps=100_000)  # fmt: skip
    np.testing.assert_allclose(fine.q, replay.q, rtol=0, atol=1e-7)
    for k in ("p_a_lift", "p_b_lift", "p_a_tilt", "p_b_tilt"):
        np.testing.assert_allclose(fine.signals[k], replay.signals[k], rtol=0, atol=100.0)
    np.testing.assert_allclose(default.q, replay.q, rtol=0, atol=1e-6)
    assert float(jnp.abs(loop(crane_plant, 1e-3).q - replay.q).max()) > 1e-4


def test_a_logged_supply_pressure_drives_the_replay(crane_plant):
    """A plant whose supply pressure comes from the log (``logged=("p_s",)``, a load-sensing
    pump): a replay takes the table's ``p_s`` column, interpolated. A logged constant 150 bar
    replays as the plant whose valves were built for 150 bar; a moving supply moves the
    replay, is reported as the signal ``p_s``, and sets the overpressure limit of the events.
    A feedback loop, with no log, keeps the valves' own supply."""
    import equinox as eqx

    from jaxmb.actuators.hydraulics import HydraulicActuator
    from jaxmb.actuators.plant import HydraulicPlant
    from jaxmb.simulation import CommandTable, simulate

    logged = HydraulicPlant(crane_plant.model, crane_plant.actuators, logged=("p_s",))
    assert logged.input_names == ("u_lift", "u_tilt", "p_s")

    def rebuilt(p_s):  # every valve made anew for the supply p_s
        acts = []
        for a in crane_plant.actuators:
            v = a.valve
            valve = Valve(v.c_pa, v.c_an, v.c_pb, v.c_bn, p_s, v.p_r, u_max=v.u_max)
            acts.append(HydraulicActuator(a.name, a.mount, a.cylinder, valve, a.friction))
        return HydraulicPlant(crane_plant.model, acts)

    t = np.arange(0.0, 0.201, 1e-3)
    u = np.stack([4 * np.sin(11 * t), -3 * np.sin(8 * t + 1)], 1)
    q0 = jnp.array([0.45, -0.15])
    run = eqx.filter_jit(lambda p, tab: simulate(p, tab, None, q0, jnp.zeros(2), jnp.asarray(t),
                                                   solver="rk4", fixed_step=1e-3))  # fmt: skip
    flat = CommandTable(t, np.column_stack([u, np.full(t.size, 150 * BAR)]), logged.input_names)
    a, b = run(logged, flat), run(rebuilt(150 * BAR), CommandTable(t, u, ("u_lift", "u_tilt")))
    np.testing.assert_allclose(a.q, b.q, rtol=0, atol=1e-13)
    np.testing.assert_allclose(a.signals["p_a_lift"], b.signals["p_a_lift"], rtol=1e-12)
    np.testing.assert_allclose(a.signals["p_s"], 150 * BAR)
    moving = np.full(t.size, 150 * BAR) + 40 * BAR * t / t[-1]
    c = run(logged, CommandTable(t, np.column_stack([u, moving]), logged.input_names))
    np.testing.assert_allclose(c.signals["p_s"], moving, rtol=1e-12)
    assert float(jnp.abs(c.q - a.q).max()) > 1e-5
    # the events' overpressure limit follows the logged supply
    sig = {k: c.signals[k] for k in ("p_a_lift", "p_b_lift", "x_lift", "p_a_tilt", "p_b_tilt",
                                     "x_tilt", "p_s")}  # fmt: skip
    sig["p_a_lift"] = jnp.asarray(moving) + 5 * BAR  # above the supply, within the margin
    assert int(limit_events(logged, jnp.asarray(t), sig)["overpressure_lift"]["count"]) == 0
    sig["p_s"] = jnp.full(t.size, 140 * BAR)
    assert int(limit_events(logged, jnp.asarray(t), sig)["overpressure_lift"]["count"]) == 1
    with pytest.raises(
        ValueError, match=r"no column for the logged supply pressure\(s\) \['p_s'\]"
    ):
        CommandTable(t, u, ("u_lift", "u_tilt")).for_plant(logged)
    # a feedback loop: the valves' own supply (185 bar), as the unlogged plant
    hold = lambda t, y, d: jnp.array([1.0, -1.0])  # noqa: E731
    fb = [simulate(p, hold, None, q0, jnp.zeros(2), jnp.asarray(t[:21]), solver="rk4",
                   fixed_step=1e-3) for p in (logged, crane_plant)]  # fmt: skip
    np.testing.assert_allclose(fb[0].q, fb[1].q, rtol=0, atol=1e-14)
