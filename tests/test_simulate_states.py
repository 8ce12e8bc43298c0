"""`simulate` with states beyond (q, qd): controllers with their own integrated state, plants
with actuator states, named signals and open-loop command tables."""

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import jaxmb
from jaxmb.simulation import AbstractStatefulController, CommandTable, simulate

M, G = 2.0, 9.81
KP, KD, KI = 40.0, 12.0, 30.0


def lift_axis():
    """A 2 kg slider on a vertical prismatic joint, gravity along -z."""
    frames = [jaxmb.Frame("slider", joint="prismatic", axis=[0, 0, 1], coordinate="z")]
    bodies = [jaxmb.Body("mass", "slider", M, [0, 0, 0], np.eye(3) * 0.01)]
    return jaxmb.Model(frames, bodies, gravity=[0, 0, -G])


class PID(AbstractStatefulController):
    """u = -KP e - KD edot - KI c, dc/dt = e: the integral state is the controller's own."""

    def init(self, t0, y0, desired0):
        del t0, y0, desired0
        return jnp.zeros(1)

    def __call__(self, t, y, desired, c):
        del t
        e = y["q"] - desired[0]
        ed = y["qd"] - desired[1]
        return -KP * e - KD * ed - KI * c, e


def test_integral_state_of_a_controller_is_integrated():
    """Reference: the linear closed loop [e, edot, c]' = A [e, edot, c] + b, solved exactly by
    the matrix exponential (scipy), no code shared with jaxmb."""
    model = lift_axis()
    ts = jnp.linspace(0.0, 12.0, 121)
    tr = simulate(model, PID(), lambda t: jnp.zeros(1), jnp.array([0.3]), jnp.zeros(1), ts)
    # with the progress bar the solve runs in chunks, the controller's state carried across
    chunked = simulate(model, PID(), lambda t: jnp.zeros(1), jnp.array([0.3]), jnp.zeros(1), ts,
                       progress=True)  # fmt: skip
    A = np.array([[0, 1, 0], [-KP / M, -KD / M, -KI / M], [1, 0, 0]])
    b = np.array([0, -G, 0])
    x0 = np.array([0.3, 0.0, 0.0])
    # x' = A x + b: x(t) = e^{At} x0 + A^-1 (e^{At} - I) b
    ref = np.stack(
        [
            scipy.linalg.expm(A * t) @ x0
            + np.linalg.solve(A, (scipy.linalg.expm(A * t) - np.eye(3)) @ b)
            for t in ts
        ]
    )
    for r in (tr, chunked):
        np.testing.assert_allclose(r.q[:, 0], ref[:, 0], atol=1e-8)
        np.testing.assert_allclose(r.controller_state[:, 0], ref[:, 2], atol=1e-8)
    # the integral ends up holding the weight: KI c -> -M G
    np.testing.assert_allclose(KI * tr.controller_state[-1, 0], -M * G, rtol=1e-3)
    np.testing.assert_allclose(
        tr.u[:, 0], -KP * ref[:, 0] - KD * ref[:, 1] - KI * ref[:, 2], atol=1e-6
    )


def test_memoryless_controllers_keep_their_signature():
    """A plain ``controller(t, q, qd, desired)`` on a Model takes the unchanged path: no
    signals, no controller state."""
    model = lift_axis()
    tr = simulate(
        model,
        lambda t, q, qd, d: -KP * (q - d[0]) - KD * qd + M * G,
        lambda t: jnp.zeros(1),
        jnp.array([0.1]),
        jnp.zeros(1),
        jnp.linspace(0, 1, 11),
    )
    assert tr.signals is None and tr.controller_state is None and tr.command_names == ()


@pytest.fixture(scope="module")
def crane():
    return jaxmb.models.lift_tilt_crane_plant()


def test_closed_valves_hold_the_crane_and_signals_are_named(crane):
    """At rest at A with the computed holding pressures, zero commands keep it there; the
    trajectory names every actuator signal as the log format does."""
    from jaxmb.models.crane import WAYPOINTS

    q0 = jnp.asarray(WAYPOINTS["A"])
    table = CommandTable([0.0, 1.0], np.zeros((2, 2)), ("u_lift", "u_tilt"))
    tr = simulate(
        crane, table, None, q0, jnp.zeros(2), jnp.linspace(0, 1, 11), rtol=1e-6, atol=1e-8
    )
    np.testing.assert_allclose(tr.q, np.broadcast_to(q0, tr.q.shape), atol=1e-10)
    for name in (
        "p_a_lift",
        "p_b_lift",
        "p_a_tilt",
        "p_b_tilt",
        "x_lift",
        "x_tilt",
        "u_lift",
        "u_tilt",
    ):
        assert tr.signal(name).shape == (11,)
    np.testing.assert_allclose(tr.signal("p_b_tilt"), 40e5, rtol=1e-6)  # solver rtol 1e-6
    np.testing.assert_allclose(tr.signal("q2"), -0.45, atol=1e-10)
    assert tr.command_names == ("u_lift", "u_tilt")
    with pytest.raises(ValueError, match="unknown signal 'p_c_lift'"):
        tr.signal("p_c_lift")


def test_stroke_end_is_reported_not_hidden(crane):
    """Full opening of the lift valve drives the piston to the end of its 0.535 m stroke in
    about 2.5 s; the end stop holds it there (about 4 mm of overshoot, 1.5 mm at rest: the rod-side
    chamber keeps its volume) and the run reports when it got there."""
    from jaxmb.models.crane import WAYPOINTS

    ts = jnp.linspace(0, 3.0, 301)
    table = CommandTable([0.0, 3.0], [[10.0, 0.0], [10.0, 0.0]], ("u_lift", "u_tilt"))
    tr = simulate(
        crane, table, None, jnp.asarray(WAYPOINTS["A"]), jnp.zeros(2), ts, rtol=1e-6, atol=1e-8
    )
    ev = tr.events["stroke_end_lift"]
    x = np.asarray(tr.signal("x_lift"))
    assert 0.535 <= x.max() < 0.535 + 6e-3 and int(ev["count"]) == 1
    first = np.asarray(ts)[np.argmax(x >= 0.535)]
    np.testing.assert_allclose(ev["first_time"], first)
    assert int(tr.events["stroke_end_tilt"]["count"]) == 0


def test_controller_output_size_is_checked(crane):
    with pytest.raises(ValueError, match=r"controller returns shape \(3,\), expected \(2,\)"):
        simulate(
            crane,
            lambda t, y, d: jnp.zeros(3),
            None,
            jnp.array([0.15, -0.45]),
            jnp.zeros(2),
            jnp.linspace(0, 1, 3),
        )
    with pytest.raises(ValueError, match="actuator_state0 is only for plants with actuators"):
        simulate(
            lift_axis(),
            lambda t, q, qd, d: jnp.zeros(1),
            lambda t: jnp.zeros(1),
            jnp.zeros(1),
            jnp.zeros(1),
            jnp.linspace(0, 1, 3),
            actuator_state0={},
        )


def test_spool_lag_follows_its_first_order_law():
    """A 4 V step on the lift valve with a 20 ms first-order spool: the saved spool position is
    4 (1 - exp(-t / tau)) (closed form), and the LuGre friction state is carried along."""
    from jaxmb.models.crane import WAYPOINTS

    plant = jaxmb.models.lift_tilt_crane_plant(spool="first", friction="lugre", tau=0.02)
    y0 = plant.initial_state(jnp.asarray(WAYPOINTS["A"]), jnp.zeros(2))
    assert set(y0["actuators"]["lift"]) == {"p_a", "p_b", "spool", "z"}
    ts = jnp.linspace(0, 0.2, 41)
    table = CommandTable([0.0, 0.2], [[4.0, 0.0], [4.0, 0.0]], ("u_lift", "u_tilt"))
    tr = simulate(plant, table, None, y0["q"], y0["qd"], ts, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(
        tr.signal("spool_lift"), 4 * (1 - np.exp(-np.asarray(ts) / 0.02)), atol=1e-6
    )
    np.testing.assert_allclose(tr.signal("spool_tilt"), 0.0, atol=1e-12)
    assert tr.signal("x_lift")[-1] > tr.signal("x_lift")[0]


def _replay_final_q1(plant):
    from jaxmb.models.crane import WAYPOINTS

    table = CommandTable(
        [0.0, 0.3, 0.6], [[0.0, 0.0], [3.0, -2.0], [3.0, -2.0]], ("u_lift", "u_tilt")
    )
    tr = simulate(
        plant, table, None, jnp.asarray(WAYPOINTS["A"]), jnp.zeros(2), jnp.linspace(0, 0.6, 7)
    )
    return tr.q[-1, 0]


def test_gradient_through_the_hydraulic_simulation_matches_finite_differences(crane):
    """d q1(0.6 s) / d(lift valve coefficient) and d / d(bulk modulus) by reverse mode through
    diffrax against central differences (the default tight tolerances; the project's rule for
    anything that identifies or tunes through simulate)."""
    import equinox as eqx
    import jax

    def loss(c, beta):
        p = eqx.tree_at(
            lambda p: (p.actuators[0].valve.c_pa, p.actuators[0].cylinder.beta), crane, (c, beta)
        )
        return _replay_final_q1(p)

    c0, b0 = crane.actuators[0].valve.c_pa, crane.actuators[0].cylinder.beta
    g_c, g_b = eqx.filter_jit(jax.grad(loss, argnums=(0, 1)))(c0, b0)
    f = eqx.filter_jit(loss)
    # beta moves q1(0.6) by only ~2.5e-7 rad per 0.1 %: its differences carry the adaptive
    # solver's ~1e-10 noise, hence the looser tolerance there
    cases = ((g_c, (c0, 1e-3 * c0, 0), 1e-5), (g_b, (b0, 3e-3 * b0, 1), 1e-3))
    for g, (x0, h, which), rtol in cases:
        args_p = [c0, b0]
        args_m = [c0, b0]
        args_p[which] = x0 + h
        args_m[which] = x0 - h
        fd = (f(*args_p) - f(*args_m)) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=rtol)
    assert float(g_c) > 0  # more flow at the same command raises the boom faster


def test_vmap_over_perturbed_plants(crane):
    """One compiled replay, vmapped over bulk moduli, equals the runs one by one."""
    import equinox as eqx
    import jax

    betas = jnp.array([0.6e9, 1.0e9, 1.6e9])

    def run(beta):
        p = eqx.tree_at(lambda p: p.actuators[0].cylinder.beta, crane, beta)
        return _replay_final_q1(p)

    batched = eqx.filter_jit(jax.vmap(run))(betas)
    single = [eqx.filter_jit(run)(b) for b in betas]
    np.testing.assert_allclose(batched, single, rtol=1e-9)
    assert len(set(np.round(np.asarray(batched), 9))) == 3


def test_rk4_at_a_fixed_step_converges_at_fourth_order():
    """x'' = -4 x from x = 1: the error at t = 2 against cos(4) falls 16x per halving."""
    model = jaxmb.Model(
        [jaxmb.Frame("s", joint="prismatic", axis=[0, 0, 1], coordinate="z")],
        [jaxmb.Body("b", "s", 1.0, [0, 0, 0], np.eye(3) * 0.01)],
        gravity=[0, 0, 0],
    )
    errs = []
    for h in (0.1, 0.05, 0.025):
        tr = simulate(
            model,
            lambda t, q, qd, d: -4.0 * q,
            lambda t: jnp.zeros(1),
            jnp.array([1.0]),
            jnp.zeros(1),
            jnp.linspace(0, 2, 3),
            solver="rk4",
            fixed_step=h,
        )
        assert int(tr.num_steps) == round(2 / h)
        errs.append(abs(float(tr.q[-1, 0]) - np.cos(4.0)))
    orders = np.log2(np.asarray(errs[:-1]) / np.asarray(errs[1:]))
    np.testing.assert_allclose(orders, 4.0, atol=0.15)
    with pytest.raises(ValueError, match="'rk4' has no error estimate; give fixed_step"):
        simulate(
            model,
            lambda t, q, qd, d: -q,
            lambda t: jnp.zeros(1),
            jnp.ones(1),
            jnp.zeros(1),
            jnp.linspace(0, 1, 3),
            solver="rk4",
        )
