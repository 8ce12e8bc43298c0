"""jaxmb.simulation.integrate against exact solutions, failure handling, gradients and batching."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmb
from jaxmb.control import RobustController
from jaxmb.simulation import Disturbance, SinusoidReference, WindowedWrench, simulate

M_SLIDER = 2.0


def slider():
    """One body on a prismatic joint along x; gravity along -z does no work on it."""
    frames = [jaxmb.Frame("P", joint="prismatic", axis=[1, 0, 0], coordinate="x")]
    return jaxmb.Model(frames, [jaxmb.Body("cart", "P", M_SLIDER, [0, 0, 0], 0.1 * np.eye(3))])


def pd(k, c):
    return lambda t, q, qd, desired: -k * q - c * qd


ZERO_REF = SinusoidReference([0.0], [0.0], [1.0])


def free_slider(ts, disturbance):
    """The slider without control under a disturbance, from rest, solved tightly."""
    zero = jnp.zeros(1)
    return simulate(slider(), pd(0.0, 0.0), ZERO_REF, zero, zero, ts, disturbance=disturbance,
                    rtol=1e-10, atol=1e-12)  # fmt: skip


def _check_damped_oscillator(tr, ts, k, c):
    """m x'' + c x' + k x = 0 from x(0) = 1 at rest: the underdamped closed form, and the PD
    force the trajectory reports."""
    zeta_w = c / (2 * M_SLIDER)
    wd = np.sqrt(k / M_SLIDER - zeta_w**2)
    t = np.asarray(ts)
    x = np.exp(-zeta_w * t) * (np.cos(wd * t) + zeta_w / wd * np.sin(wd * t))
    np.testing.assert_allclose(tr.q[:, 0], x, atol=1e-7)
    np.testing.assert_allclose(tr.u[:, 0], -k * tr.q[:, 0] - c * tr.qd[:, 0], rtol=1e-12)


@pytest.mark.parametrize("solver", ["tsit5", "kvaerno5"])
def test_damped_oscillator_matches_closed_form(solver):
    """m x'' + c x' + k x = 0 with x(0) = 1, x'(0) = 0: underdamped closed form."""
    k, c = 50.0, 2.0
    ts = jnp.linspace(0.0, 3.0, 31)
    tr = simulate(
        slider(),
        pd(k, c),
        ZERO_REF,
        jnp.array([1.0]),
        jnp.array([0.0]),
        ts,
        solver=solver,
        rtol=1e-10,
        atol=1e-12,
    )
    _check_damped_oscillator(tr, ts, k, c)
    assert tr.coordinate_names == ("x",) and bool(tr.success)


def test_the_controller_is_traced_once_per_simulation():
    """A simulation asks its controller through one jitted call
    (`jaxmb.simulation.controller.command`): diffrax's shape checks, its loop's state, the step
    and the commands at the saves all reuse one trace (the crane's VDC took a second a trace,
    five of them a closed loop), and the run is the same closed form."""
    k, c, calls = 50.0, 2.0, []

    def counted(t, q, qd, desired):
        calls.append(t)
        return -k * q - c * qd

    ts = jnp.linspace(0.0, 3.0, 31)
    tr = simulate(slider(), counted, ZERO_REF, jnp.array([1.0]), jnp.array([0.0]), ts,
                  rtol=1e-10, atol=1e-12)  # fmt: skip
    _check_damped_oscillator(tr, ts, k, c)
    assert len(calls) == 1


def test_the_progress_bar_runs_the_solve_in_chunks_to_the_same_solution(capsys):
    """``progress=True`` outside jit: the solve runs as `jaxmb.simulation.integrate.CHUNKS` calls of one
    compiled program with the bar moved between them (no host callback in the program, so the
    persistent compilation cache keeps it). The same closed form as the single solve; a failure
    mid-run (the controller gives NaN from t = 1 s on) fails it as the single solve fails: not
    successful, the rows before alike, the rows after not finite."""
    k, c = 50.0, 2.0
    ts = jnp.linspace(0.0, 3.0, 121)  # 120 intervals: 40 chunks of 3
    one = jnp.array([1.0])
    tr = simulate(slider(), pd(k, c), ZERO_REF, one, 0 * one, ts, rtol=1e-10, atol=1e-12,
                  progress=True)  # fmt: skip
    assert "simulate" in capsys.readouterr().err  # the bar, on stderr
    _check_damped_oscillator(tr, ts, k, c)
    assert bool(tr.success) and tr.t.shape == ts.shape

    def breaks(t, q, qd, desired):
        return jnp.where(t > 1.0, jnp.nan, -k * q - c * qd)

    with jaxmb.multibody.checks.failures_as_nan():  # the NaN force fails the solve, not a check
        runs = [simulate(slider(), breaks, ZERO_REF, one, 0 * one, ts, rtol=1e-10, atol=1e-12,
                         dtmin=1e-6, throw=False, progress=p) for p in (False, True)]  # fmt: skip
    t = np.asarray(ts)
    before, after = t < 0.99, t > 1.05
    for r in runs:
        assert not bool(r.success)
        assert not np.isfinite(np.asarray(r.q)[after]).any()
    np.testing.assert_allclose(runs[1].q[before], runs[0].q[before], atol=1e-8)


def test_windowed_wrench_gives_the_impulse():
    """A 3 N force on the cart's frame for 0.5 <= t < 1.25 s: velocity jumps by F dt / m."""
    dist = Disturbance(
        wrenches={"P": WindowedWrench([0, 0, 0, 3.0, 0, 0], 0.5, 1.25)}, jump_times=(0.5, 1.25)
    )
    ts = jnp.array([0.0, 0.4, 1.0, 2.0])
    tr = free_slider(ts, dist)
    np.testing.assert_allclose(
        tr.qd[:, 0], [0, 0, 3.0 * 0.5 / M_SLIDER, 3.0 * 0.75 / M_SLIDER], atol=1e-9
    )
    x_end = 0.5 * (3.0 / M_SLIDER) * 0.75**2 + 3.0 * 0.75 / M_SLIDER * 0.75  # ramp, then coast
    np.testing.assert_allclose(tr.q[-1, 0], x_end, rtol=1e-9)


def test_generalized_force_disturbance():
    dist = Disturbance(forces=lambda t: jnp.array([2.0 * t]))  # x'' = t  =>  x = t^3 / 6
    ts = jnp.linspace(0, 1.0, 5)
    tr = free_slider(ts, dist)
    np.testing.assert_allclose(tr.q[:, 0], np.asarray(ts) ** 3 / 6, atol=1e-10)


def test_exhausted_solver_raises_or_reports():
    args = (
        slider(),
        pd(50.0, 0.1),
        ZERO_REF,
        jnp.array([1.0]),
        jnp.array([0.0]),
        jnp.linspace(0, 10, 3),
    )
    with pytest.raises(RuntimeError, match="maximum number of solver steps"):
        jax.block_until_ready(simulate(*args, max_steps=8).q)
    tr = simulate(*args, max_steps=8, throw=False)
    assert not bool(tr.success)
    assert np.isnan(np.asarray(tr.u[-1])).all()  # failed rows are marked, not passed off as data


def test_a_fixed_step_solve_through_nan_is_not_a_success():
    """Inside `failures_as_nan` (as the commands and batched studies run) a failed check is
    NaN, and a fixed step does not notice it: the rows it saves from there on are not finite,
    and the trajectory says it failed (the rows before stay data)."""
    from jaxmb.multibody.checks import failures_as_nan

    def breaks(t, q, qd, desired):  # the controller's law fails from t = 0.5 s on
        return jnp.where(t < 0.5, -q, jnp.nan)

    ts = jnp.linspace(0.0, 1.0, 11)
    with failures_as_nan():
        tr = simulate(slider(), breaks, ZERO_REF, jnp.ones(1), jnp.zeros(1), ts, solver="rk4",
                      fixed_step=1e-2)  # fmt: skip
    assert not bool(tr.success)
    assert np.isfinite(np.asarray(tr.q[:5])).all() and np.isnan(np.asarray(tr.q[-1])).all()
    ok = simulate(slider(), pd(1.0, 1.0), ZERO_REF, jnp.ones(1), jnp.zeros(1), ts, solver="rk4",
                  fixed_step=1e-2)  # fmt: skip
    assert bool(ok.success)


def test_a_controller_returning_a_list_is_refused_by_what_it_returns():
    with pytest.raises(ValueError, match=r"controller returns a list, expected \(1,\)"):
        simulate(slider(), lambda t, q, qd, d: [q[0]], ZERO_REF, jnp.zeros(1), jnp.zeros(1),
                 jnp.linspace(0, 1, 3))  # fmt: skip
    with pytest.raises(ValueError, match="solver must be one of"):  # before the reference
        simulate(slider(), pd(1, 1), lambda t: 1 / 0, jnp.zeros(1), jnp.zeros(1),
                 jnp.linspace(0, 1, 3), solver="rk45")  # fmt: skip


def test_bad_options_are_named():
    m = slider()
    with pytest.raises(ValueError, match="solver must be one of"):
        simulate(
            m, pd(1, 1), ZERO_REF, jnp.zeros(1), jnp.zeros(1), jnp.linspace(0, 1, 3), solver="rk45"
        )
    with pytest.raises(ValueError, match=r"q0 must have shape \(1,\)"):
        simulate(m, pd(1, 1), ZERO_REF, jnp.zeros(2), jnp.zeros(2), jnp.linspace(0, 1, 3))
    with pytest.raises(ValueError, match="ts must be 1-D"):
        simulate(m, pd(1, 1), ZERO_REF, jnp.zeros(1), jnp.zeros(1), jnp.array([0.0]))
    with pytest.raises(ValueError, match="t_end > t_start"):
        WindowedWrench(jnp.zeros(6), 2.0, 1.0)


# --- the arm: gradients and batching -------------------------------------------------------

ARM = jaxmb.models.series_parallel_3dof()
REF = SinusoidReference([0.0, 0.35, 0.10], [0.6, 0.25, 0.06], [10.0, 8.0, 5.0])
Q0 = REF(0.0) + jnp.array([0.05, -0.05, 0.01])
TS = jnp.linspace(0.0, 1.0, 21)


def rmse(K, link2_mass):
    """Tracking RMSE of a short run; the plant's link-2 mass differs from the controller's."""
    plant = eqx.tree_at(lambda m: m.bodies[2].mass, ARM, link2_mass)
    ctrl = RobustController(ARM, 2.0, K, 20.0, 0.05)  # a wide boundary layer keeps it smooth
    tr = simulate(plant, ctrl, REF, Q0, jnp.zeros(3), TS, rtol=1e-10, atol=1e-12)
    return jnp.sqrt(jnp.mean(tr.e**2))


def test_gradients_wrt_gains_and_plant_parameters_match_finite_differences():
    K0, m0 = jnp.array([30.0, 30.0, 30.0]), jnp.asarray(66.0)
    gK, gm = jax.jit(jax.grad(rmse, argnums=(0, 1)))(K0, m0)
    f = jax.jit(rmse)
    for i in range(3):
        h = 1e-3
        fd = (f(K0.at[i].add(h), m0) - f(K0.at[i].add(-h), m0)) / (2 * h)
        np.testing.assert_allclose(gK[i], fd, rtol=2e-4, atol=1e-9)  # FD error ~ h^2 and tol
    fd_m = (f(K0, m0 + 1e-3) - f(K0, m0 - 1e-3)) / 2e-3
    np.testing.assert_allclose(gm, fd_m, rtol=2e-4)
    assert abs(float(gm)) > 1e-6  # the mismatch matters


def test_vmap_over_initial_states_and_gains():
    ctrl = RobustController(ARM, 1.0, 30.0, 50.0, 0.01)
    q0s = Q0[None, :] + jnp.array([[0.0, 0.0, 0.0], [0.02, -0.03, 0.005]])

    def run(q0, K):
        c = eqx.tree_at(lambda c: c.K, ctrl, K)
        return simulate(ARM, c, REF, q0, jnp.zeros(3), TS[:6]).q

    Ks = jnp.array([[30.0] * 3, [60.0] * 3])
    batched = jax.jit(jax.vmap(run))(q0s, Ks)
    for i in range(2):
        np.testing.assert_allclose(batched[i], run(q0s[i], Ks[i]), rtol=1e-9, atol=1e-12)


def test_trajectory_fields_and_desired_values():
    ctrl = RobustController(ARM, 1.0, 30.0, 50.0, 0.01)
    tr = simulate(ARM, ctrl, REF, Q0, jnp.zeros(3), TS[:5], solver=diffrax.Dopri5())
    np.testing.assert_allclose(tr.q_d, jax.vmap(REF)(TS[:5]), rtol=1e-14)
    w = 2 * np.pi / np.array([10.0, 8.0, 5.0])
    qd_ref = np.array([0.6, 0.25, 0.06]) * w * np.cos(np.outer(np.asarray(TS[:5]), w))
    np.testing.assert_allclose(tr.qd_d, qd_ref, rtol=1e-12, atol=1e-14)
    assert tr.q.shape == tr.u.shape == (5, 3)
