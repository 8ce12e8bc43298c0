"""Flexible-joint drives (Ider et al. (2019) eqs. (3)-(4)), particle impacts (eqs. (38)-(46))
and sampled-data simulation with zero-order hold and event-detected impacts, on the paper's
3-RPR (a closed chain in dependent coordinates) and on a one-coordinate mass."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmb.actuators.flexible import FlexibleJointPlant, rigid_limit
from jaxmb.algorithms.dynamics import kinetic_energy
from jaxmb.constraints.impact import (
    Contact,
    Particle,
    contact_jacobian,
    contact_normal,
    contact_point,
    gap,
    impact_jump,
)
from jaxmb.constraints.projection import assemble, constraint_jacobian, projector
from jaxmb.models.planar_rpr import ACTUATED, rpr3
from jaxmb.multibody.model import Body, Frame, Model
from jaxmb.simulation.integrate import simulate
from jaxmb.simulation.sampled import Impact, simulate_sampled

DEG = np.pi / 180
ALPHA, B7 = 60 * DEG, 0.15  # Section 6: angle FDE, DQ
SYSTEM = rpr3()
Q0 = assemble(
    SYSTEM,
    {"theta1": 45 * DEG, "theta3": 155 * DEG, "theta5": 255 * DEG},
    {"theta7": -5.38 * DEG, "xi2": 0.756, "xi4": 1.177, "xi6": 0.901},
)
# Q on DF, 0.15 m from D; the outward normal of edge DF (eq. (55)'s z is its opposite)
CONTACT = Contact(
    "L7", [B7 * np.cos(ALPHA), B7 * np.sin(ALPHA), 0.0], [-np.sin(ALPHA), np.cos(ALPHA), 0.0]
)


def paper_plant(stiffness=2500.0, damping=0.0):
    """Section 6's drives: rotor 2e-5 kg m^2, gear ratio 100, spring 2500 N m/rad."""
    return FlexibleJointPlant(
        SYSTEM, ACTUATED, rotor_inertia=2e-5, gear_ratio=100.0, stiffness=stiffness,
        damping=damping,
    )  # fmt: skip


def admissible_velocity(seed):
    v = np.random.default_rng(seed).normal(size=7)
    return projector(SYSTEM, Q0) @ v


# --------------------------------------------------------------------------------------------
# eq. (46)
# --------------------------------------------------------------------------------------------

_jump = eqx.filter_jit(impact_jump)


@pytest.mark.parametrize("e", [0.0, 0.9, 1.0])
def test_impact_balances_and_restitution(e):
    qd = admissible_velocity(0)
    m_P, v_P = 5.0, jnp.array([1.5, -1.0, 0.0])  # Section 6's particle
    J = _jump(SYSTEM, Q0, qd, CONTACT, m_P, v_P, e)
    M = np.asarray(
        jax.jit(jax.jacfwd(lambda v: jax.grad(kinetic_energy, 2)(SYSTEM.model, Q0, v)))(qd)
    )
    B = constraint_jacobian(SYSTEM, Q0)
    L = contact_jacobian(SYSTEM, Q0, CONTACT)
    z = contact_normal(SYSTEM, Q0, CONTACT)
    # eqs. (38), (40), (43) to round-off (M from the kinetic energy's Hessian, not mass_matrix)
    np.testing.assert_allclose(M @ J.dqd + B.T @ J.Lambda + L.T @ z * J.H, 0, atol=1e-12)
    np.testing.assert_allclose(m_P * J.dv_P - z * J.H, 0, atol=1e-12)
    np.testing.assert_allclose(B @ J.dqd, 0, atol=1e-13)
    # eq. (45): the relative normal velocity reverses, scaled by e
    before = z @ (L @ qd - v_P)
    after = z @ (L @ (qd + J.dqd) - (v_P + J.dv_P))
    assert before > 0  # closing: the particle moves against the outward normal, relative to Q
    np.testing.assert_allclose(after, -e * before, rtol=1e-12, atol=1e-14)
    # energy: conserved by an elastic impact (e = 1), lost otherwise; the impulse pushes the
    # particle out along the outward normal
    T0 = kinetic_energy(SYSTEM.model, Q0, qd) + 0.5 * m_P * v_P @ v_P
    T1 = kinetic_energy(SYSTEM.model, Q0, qd + J.dqd) + 0.5 * m_P * (v_P + J.dv_P) @ (v_P + J.dv_P)
    if e == 1.0:
        np.testing.assert_allclose(T1, T0, rtol=1e-12)
    else:
        assert T1 < T0
    assert J.H > 0


def test_contact_kinematics_match_eqs_54_55():
    L = contact_jacobian(SYSTEM, Q0, CONTACT)
    z = contact_normal(SYSTEM, Q0, CONTACT)
    t1, t7, x2 = (float(Q0[i]) for i in (0, 3, 4))
    eq54 = np.array(
        [
            [-x2 * np.sin(t1), 0, 0, -B7 * np.sin(t7 + ALPHA), np.cos(t1), 0, 0],
            [x2 * np.cos(t1), 0, 0, B7 * np.cos(t7 + ALPHA), np.sin(t1), 0, 0],
        ]
    )
    np.testing.assert_allclose(L[:2], eq54, atol=1e-14)
    np.testing.assert_allclose(L[2], 0, atol=1e-14)
    a = t7 + ALPHA + 270 * DEG  # eq. (55)
    np.testing.assert_allclose(z, -np.array([np.cos(a), np.sin(a), 0]), atol=1e-14)


def test_bad_impact_inputs():
    with pytest.raises(ValueError, match="Contact.normal: expected shape"):
        Contact("L7", [0, 0, 0], [1, 0])
    with pytest.raises(ValueError, match="Particle.mass"):
        Particle(-1.0, [0, 0, 0], [0, 0, 0])
    with pytest.raises(ValueError, match="e must be in"):
        impact_jump(SYSTEM, Q0, jnp.zeros(7), CONTACT, 1.0, jnp.zeros(3), 1.5)


# --------------------------------------------------------------------------------------------
# flexible drives
# --------------------------------------------------------------------------------------------


def test_flexible_plant_conserves_energy():
    """Undamped and unforced, links + rotors + springs keep their energy (eqs. (3)-(4) are a
    Hamiltonian system; a sign or a gear-ratio error in either breaks it)."""
    plant = paper_plant()
    qd0 = admissible_velocity(1)
    act = {j: {"phi": Q0[i] + 0.01 * (i + 1), "phid": -qd0[i]} for i, j in enumerate(ACTUATED)}
    tr = jax.jit(
        lambda: simulate_sampled(
            plant,
            lambda t, y, d: jnp.zeros(3),
            None,
            Q0,
            qd0,
            h=0.01,
            t_final=0.3,
            actuator_state0=act,
            rtol=1e-10,
            atol=1e-12,
        )  # fmt: skip
    )()
    assert bool(tr.success)
    E = jax.vmap(lambda y: plant.energy(y))(tr.y)
    assert float(jnp.max(jnp.abs(tr.y["q"][:, 0] - Q0[0]))) > 1e-3
    np.testing.assert_allclose(E, E[0], rtol=1e-7)
    spring = jax.vmap(lambda y: plant.signals(y, jnp.zeros(3))["deflection_theta1"])(tr.y)
    assert float(jnp.ptp(spring)) > 1e-3  # the springs oscillate


def test_flexible_drives_on_a_minimal_coordinate_model(arm):
    """The same drives on a `Model` (the series-parallel arm, whose closed chain is a
    coordinate map), through `simulate`: under gravity, unforced and undamped, the energy of
    links, rotors and springs is constant."""
    from jaxmb.simulation import simulate

    plant = FlexibleJointPlant(
        arm, arm.coordinate_names, rotor_inertia=1e-4, gear_ratio=50.0, stiffness=5000.0
    )
    q0, qd0 = jnp.array([0.1, 0.35, 0.1]), jnp.array([0.2, -0.1, 0.05])
    ts = jnp.linspace(0.0, 0.2, 21)
    tr = jax.jit(
        lambda: simulate(
            plant, lambda t, y, d: jnp.zeros(3), None, q0, qd0, ts, rtol=1e-10, atol=1e-12
        )  # fmt: skip
    )()
    ys = {"q": tr.q, "qd": tr.qd, "actuators": {
        j: {"phi": tr.signals[f"phi_{j}"], "phid": tr.signals[f"phid_{j}"]} for j in plant.joints
    }}  # fmt: skip
    E = jax.vmap(plant.energy)(ys)
    assert float(jnp.max(jnp.abs(tr.q - q0[None]))) > 1e-3  # it falls and swings
    assert float(jnp.ptp(tr.signals["deflection_theta"])) > 1e-5  # the springs work
    np.testing.assert_allclose(E, E[0], rtol=1e-8)


def test_rigid_limit_convergence():
    """As K grows the link motion under the same drive torques converges to the rigid 3-RPR
    with the reduced rotor inertias on the driven joints (`rigid_limit`, integrated by the
    Lagrangian route), at the rate 1/K."""
    ts = jnp.linspace(0.0, 0.3, 31)

    def torque(t):
        return jnp.array([4.0, -3.0, 2.0]) * jnp.sin(jnp.pi * t / 0.3) ** 2

    def flexible(K):
        plant = FlexibleJointPlant(
            SYSTEM, ACTUATED, rotor_inertia=2e-5, gear_ratio=100.0, stiffness=K, damping=0.0
        )
        y0 = plant.initial_state(Q0, jnp.zeros(7))
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, a: plant.vector_field(t, y, torque(t))),
            diffrax.Tsit5(), 0.0, 0.3, None, y0, saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12), max_steps=100_000,
        )  # fmt: skip
        return sol.ys["q"]

    rigid = rigid_limit(paper_plant())

    def f(t, y, a):
        q, qd = y
        Q = jnp.zeros(7).at[:3].set(torque(t))
        return qd, rigid.accelerations(q, qd, Q)

    ref = diffrax.diffeqsolve(
        diffrax.ODETerm(f), diffrax.Tsit5(), 0.0, 0.3, None, (Q0, jnp.zeros(7)),
        saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.PIDController(rtol=1e-11, atol=1e-13), max_steps=100_000,
    ).ys[0]  # fmt: skip
    Ks = jnp.array([1e4, 1e5, 1e6])
    q = jax.jit(jax.vmap(flexible))(Ks)
    err = np.asarray(jnp.max(jnp.abs(q - ref[None]), axis=(1, 2)))
    assert float(jnp.max(jnp.abs(ref - Q0[None]))) > 0.02  # it moves
    assert err[-1] < 2e-5
    ratios = err[:-1] / err[1:]
    assert np.all(ratios > 5), err  # about 10 per decade of K


def test_bad_flexible_inputs():
    with pytest.raises(ValueError, match="not coordinates of the system"):
        FlexibleJointPlant(SYSTEM, ["nope"], rotor_inertia=1, gear_ratio=1, stiffness=1)
    with pytest.raises(ValueError, match="stiffness must be > 0"):
        FlexibleJointPlant(SYSTEM, ACTUATED, rotor_inertia=1, gear_ratio=1, stiffness=0.0)
    with pytest.raises(ValueError, match="damping must be >= 0"):
        FlexibleJointPlant(SYSTEM, ACTUATED, rotor_inertia=1, gear_ratio=1, stiffness=1, damping=-1)
    with pytest.raises(ValueError, match="no state for"):
        paper_plant().initial_state(Q0, jnp.zeros(7), {"theta1": {"phi": 0, "phid": 0}})


# --------------------------------------------------------------------------------------------
# sampled-data simulation
# --------------------------------------------------------------------------------------------


def test_zero_order_hold_matches_exact_discretisation():
    """A sampled PD on a free mass: the simulation equals the exact zero-order-hold
    discretisation x_{k+1} = A_d x_k + B_d u_k (computed here by hand)."""
    m, kp, kd, h = 2.0, 50.0, 5.0, 0.01
    model = Model(
        [Frame("b", joint="prismatic", axis=[1, 0, 0], coordinate="x")],
        [Body("b", "b", m, [0, 0, 0], np.eye(3) * 0.1)],
        gravity=[0, 0, -9.81],
    )
    tr = jax.jit(
        lambda: simulate_sampled(
            model,
            lambda t, q, qd, d: -kp * q - kd * qd,
            None,
            jnp.array([0.3]),
            jnp.array([0.0]),
            h=h,
            t_final=1.0,
        )  # fmt: skip
    )()
    Ad = np.array([[1, h], [0, 1]])
    Bd = np.array([h**2 / (2 * m), h / m])
    s, xs = np.array([0.3, 0.0]), []
    for _ in range(101):
        xs.append(s)
        s = Ad @ s + Bd * (-kp * s[0] - kd * s[1])
    xs = np.array(xs)
    # with the progress bar, outside jit: the scan's 101 iterations (100 intervals and the final
    # instant's command) run as 34 calls of one compiled program over three iterations each, the
    # last padded, the bar moved between them; the same exact discretisation
    chunked = simulate_sampled(model, lambda t, q, qd, d: -kp * q - kd * qd, None,
                               jnp.array([0.3]), jnp.array([0.0]), h=h, t_final=1.0,
                               progress=True)  # fmt: skip
    for r in (tr, chunked):
        np.testing.assert_allclose(r.t, np.arange(101) * h, atol=1e-15)
        np.testing.assert_allclose(r.q[:, 0], xs[:, 0], atol=1e-12)
        np.testing.assert_allclose(r.qd[:, 0], xs[:, 1], atol=1e-12)
        # every row, the last too: the command at the final instant, never applied
        np.testing.assert_allclose(r.u[:, 0], -kp * xs[:, 0] - kd * xs[:, 1], atol=1e-10)
    with pytest.raises(ValueError, match="whole number of sampling intervals"):
        simulate_sampled(model, lambda t, q, qd, d: -q, None, jnp.zeros(1), jnp.zeros(1),
                         h=0.3, t_final=1.0)  # fmt: skip


def test_impact_found_by_event_and_applied_as_reset():
    """The particle reaches Q between two sampling instants; the event puts the impact at the
    gap's root (not on a step or sampling instant), the link velocities jump by eq. (46) at the
    state found there and the rotor velocities do not (eq. (39))."""
    plant = paper_plant()
    v = jnp.array([1.5, -1.0, 0.0])
    t_hit = 0.2507  # not a multiple of h = 0.002
    Q_point = contact_point(SYSTEM, Q0, CONTACT)
    impact = Impact(Particle(5.0, Q_point - t_hit * v, v), CONTACT, 0.9)
    qa0 = Q0[:3]

    def hold(t, y, desired):  # a sampled PD holding the drives: the platform stays still
        phi, phid = plant.drive_states(y)
        return -2000.0 * (phi - qa0) - 100.0 * phid

    tr = jax.jit(
        lambda: simulate_sampled(
            plant, hold, None, Q0, jnp.zeros(7), h=0.002, t_final=0.3, impact=impact
        )  # fmt: skip
    )()
    assert bool(tr.success)
    np.testing.assert_allclose(tr.impact_time, t_hit, atol=1e-10)
    ye = tr.impact_state
    r_P, v_P = impact.particle.at(tr.impact_time)
    assert abs(float(gap(SYSTEM, ye["q"], CONTACT, r_P))) < 1e-10
    J = _jump(SYSTEM, ye["q"], ye["qd"], CONTACT, 5.0, v_P, 0.9)
    np.testing.assert_allclose(tr.impact.dqd, J.dqd, rtol=1e-10)
    assert float(jnp.max(jnp.abs(J.dqd))) > 0.1
    k = int(np.floor(t_hit / 0.002))
    qd = tr.qd
    # before the impact nothing moves; after it the links do
    assert float(jnp.max(jnp.abs(qd[: k + 1]))) < 1e-12
    assert float(jnp.max(jnp.abs(qd[k + 1]))) > 0.05
    _, phid = jax.vmap(plant.drive_states)(tr.y)
    assert float(jnp.max(jnp.abs(phid[k + 1]))) < 0.05 * float(jnp.max(jnp.abs(qd[k + 1])))


def test_one_trace_of_a_controller_for_simulate_and_simulate_sampled():
    """A memoryless controller is traced once in a process that runs it under `simulate` and
    `simulate_sampled`: both pass it the same (empty) controller state."""
    model = Model(
        [Frame("b", joint="prismatic", axis=[1, 0, 0], coordinate="x")],
        [Body("b", "b", 2.0, [0, 0, 0], np.eye(3) * 0.1)],
        gravity=[0, 0, -9.81],
    )
    traces = []

    def pd(t, q, qd, d):
        traces.append(t)
        return -50.0 * q - 5.0 * qd

    q0, qd0 = jnp.array([0.3]), jnp.array([0.0])
    simulate(model, pd, None, q0, qd0, jnp.linspace(0.0, 1.0, 11))
    once = len(traces)
    sampled = simulate_sampled(model, pd, None, q0, qd0, h=0.01, t_final=1.0)
    assert once == 1 and len(traces) == once
    assert np.isfinite(np.asarray(sampled.q)).all()
