"""A controller sampled inside `simulate` (``sample_time``, `jaxmb.simulation.zero_order_hold`):
against the exact discretisation of a sampled PD loop on a mass, by fixed and adaptive steps
and in the progress bar's chunks; its distance to the continuous loop, first order in the
sampling interval; the gradient through it against central differences; bad options."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmb import Body, Frame, Model
from jaxmb.simulation import AbstractStatefulController, CommandTable, simulate
from jaxmb.simulation.zero_order_hold import (
    MAX_STEP,
    first_off_instant,
    hold_options,
    longest_delay,
)

M, KP, KD = 2.0, 40.0, 3.0


@pytest.fixture(scope="module")
def mass():
    return Model(
        [Frame("b", joint="prismatic", axis=[1, 0, 0], coordinate="x")],
        [Body("b", "b", M, [0, 0, 0], np.eye(3) * 0.1)],
        gravity=[0, 0, 0],
    )


def pd(t, q, qd, desired):
    return -KP * q - KD * qd


def exact(h: float, steps: int, x0=0.3, kp=KP):
    """The sampled PD loop's exact discretisation: between samples x'' = u / M with u held."""
    Ad = np.array([[1.0, h], [0.0, 1.0]])
    Bd = np.array([h**2 / (2 * M), h / M])
    s, xs = np.array([x0, 0.0]), []
    for _ in range(steps + 1):
        xs.append(s)
        s = Ad @ s + Bd * (-kp * s[0] - KD * s[1])
    return np.array(xs)


def run(model, ts, **opts):
    return simulate(model, pd, None, jnp.array([0.3]), jnp.zeros(1), ts, **opts)


def test_sampled_loop_is_the_exact_discretisation(mass):
    """RK4 is exact on the held command's quadratic, so every way of integrating between the
    samples gives the closed form: fixed steps of h and h / 4, adaptive Tsit5 steps clipped to
    the instants, and the progress bar's chunks; ``u`` is the command held after each row."""
    h = 0.01
    ts = jnp.arange(101) * h
    xs = exact(h, 100)
    runs = {
        "rk4 h": run(mass, ts, solver="rk4", fixed_step=h, sample_time=h),
        "rk4 h/4": run(mass, ts, solver="rk4", fixed_step=h / 4, sample_time=h),
        "tsit5 clipped": run(mass, ts, sample_time=h, rtol=1e-10, atol=1e-12),
        "chunks": run(mass, ts, solver="rk4", fixed_step=h, sample_time=h, progress=True),
    }
    for name, tr in runs.items():
        assert bool(tr.success), name
        np.testing.assert_allclose(tr.q[:, 0], xs[:, 0], atol=1e-10, err_msg=name)
        np.testing.assert_allclose(tr.qd[:, 0], xs[:, 1], atol=1e-10, err_msg=name)
        np.testing.assert_allclose(tr.u[:, 0], -KP * xs[:, 0] - KD * xs[:, 1], atol=1e-9)
    assert int(runs["rk4 h/4"].num_steps) == 400
    # saved every fifth sample: the same rows
    sparse = run(mass, ts[::5], solver="rk4", fixed_step=h, sample_time=h)
    np.testing.assert_allclose(sparse.q[:, 0], xs[::5, 0], atol=1e-10)
    # chunks of eight intervals, whose spans are a few ulps off eight steps: each still takes
    # eight steps on the instants (diffrax would take nine shorter ones, across the instants)
    long = run(mass, jnp.arange(401) * h, solver="rk4", fixed_step=h, sample_time=h, progress=True)
    np.testing.assert_allclose(long.q[:, 0], exact(h, 400)[:, 0], atol=1e-10)
    assert int(long.num_steps) == 400


def test_sampled_loop_tends_to_the_continuous_one_at_first_order(mass):
    """The hold delays the command by h / 2 on average: the distance to the continuous loop
    halves with h (ratios 2 within 10 %)."""
    ts = jnp.linspace(0.0, 1.0, 41)
    cont = run(mass, ts, rtol=1e-11, atol=1e-13)
    gaps = []
    for h in (0.025, 0.0125, 0.00625):
        tr = run(mass, ts, sample_time=h, **{k: v for k, v in hold_options(h).items()
                                             if k != "sample_time"})  # fmt: skip
        gaps.append(float(jnp.max(jnp.abs(tr.q - cont.q))))
    assert gaps[0] > 1e-3  # the hold is seen
    np.testing.assert_allclose(np.array(gaps[:-1]) / np.array(gaps[1:]), 2.0, rtol=0.1)


def test_gradient_through_the_sampled_loop_matches_central_differences(mass):
    """d/dkp of the final position, reverse mode through the held commands, against central
    differences of the exact discretisation (independent of the solver)."""
    h, steps = 0.01, 50
    ts = jnp.arange(steps + 1) * h

    def final(kp):
        tr = simulate(mass, lambda t, q, qd, d: -kp * q - KD * qd, None, jnp.array([0.3]),
                      jnp.zeros(1), ts, **hold_options(h))  # fmt: skip
        return tr.q[-1, 0]

    grad = float(jax.grad(final)(KP))
    eps = 1e-4
    fd = (exact(h, steps, kp=KP + eps)[-1, 0] - exact(h, steps, kp=KP - eps)[-1, 0]) / (2 * eps)
    assert grad == pytest.approx(fd, rel=1e-6)


def test_hold_options_step_within_a_millisecond_and_dividing_the_interval():
    assert hold_options(1e-3) == {"solver": "rk4", "fixed_step": 1e-3, "sample_time": 1e-3}
    o = hold_options(2.5e-3)
    assert o["fixed_step"] <= MAX_STEP and 2.5e-3 / o["fixed_step"] == pytest.approx(3.0)
    assert hold_options(2e-4)["fixed_step"] == 2e-4


class _Integrating(AbstractStatefulController):
    def init(self, t0, y0, desired0):
        return jnp.zeros(1)

    def __call__(self, t, y, desired, c):
        return -y["q"], y["q"]


@pytest.mark.parametrize(
    "opts, match",
    [
        ({"sample_time": -1e-3}, "sample_time must be > 0"),
        ({"sample_time": float("nan")}, "sample_time must be > 0"),
        ({"sample_time": 1e-2, "solver": "rk4", "fixed_step": 3e-3}, "must divide sample_time"),
        ({"sample_time": 1e-2, "solver": "rk4", "fixed_step": 2e-2}, "must divide sample_time"),
        ({"sample_time": 0.03, "solver": "rk4", "fixed_step": 0.01}, r"ts\[1\] = 0.05"),
    ],
)
def test_bad_sampling_options_are_named(mass, opts, match):
    with pytest.raises(ValueError, match=match):
        run(mass, jnp.arange(11) * 0.05, **opts)


def test_a_sampling_interval_that_is_no_number_is_refused_by_its_annotation(mass):
    with pytest.raises(TypeError, match="sample_time"):
        run(mass, jnp.arange(11) * 0.05, sample_time="1ms")


def test_a_stateful_controller_or_a_replay_is_not_sampled(mass):
    ts = jnp.linspace(0.0, 0.1, 11)
    with pytest.raises(ValueError, match="sample_time: a stateful controller is not sampled"):
        simulate(mass, _Integrating(), None, jnp.zeros(1), jnp.zeros(1), ts, sample_time=0.01)
    table = CommandTable(ts, jnp.zeros((11, 1)), ("x",))
    with pytest.raises(ValueError, match="sample_time: a replay of logged commands"):
        simulate(mass, table, None, jnp.zeros(1), jnp.zeros(1), ts, sample_time=0.01)


def test_a_long_sampled_task_gets_the_steps_it_needs():
    """A machine's sampled loop takes a fixed step a millisecond: a 600 s task needs 600 000,
    more than the default budget, and gets them; the continuous loop and a traced grid keep
    the budget given."""
    from jaxmb.control.machine_run import step_budget

    long = jnp.linspace(0.0, 600.0, 601)
    assert step_budget(long, 1e-3, 500_000) == 600_010
    assert step_budget(long[:19], 1e-3, 500_000) == 500_000
    assert step_budget(long, None, 500_000) == 500_000
    assert jax.jit(lambda t: jnp.asarray(step_budget(t, 1e-3, 7)))(long) == 7


# --- a command that arrives late (a valve's delay): the hold keeps the commands sent ---


def exact_delayed(h: float, steps: int, d: float, x0=0.3):
    """The sampled PD loop on the mass, its command arriving ``d`` s late, by its exact
    discretisation: the command sampled at ``t_k`` acts from ``t_k + d``, so inside each
    interval the force is the older command for ``d mod h`` s, the newer for the rest (before
    the first arrives, the first: the loop ran at rest before t = 0)."""
    m = int(np.floor(d / h + 1e-9))
    r = d - m * h

    def hold(s, u, tau):  # x'' = u / M for tau s
        return np.array([s[0] + s[1] * tau + u * tau**2 / (2 * M), s[1] + u * tau / M])

    s, xs, us = np.array([x0, 0.0]), [], []
    for n in range(steps + 1):
        xs.append(s)
        us.append(-KP * s[0] - KD * s[1])
        s = hold(hold(s, us[max(n - m - 1, 0)], r), us[max(n - m, 0)], h - r)
    return np.array(xs)


def delayed(h, steps, d, step, longest=None):
    """The same loop by `ZeroOrderHold` around RK4 at fixed ``step``s, keeping the commands of
    delays up to ``longest`` (default ``d``)."""
    from jaxmb.simulation.rk4 import RK4
    from jaxmb.simulation.zero_order_hold import ZeroOrderHold, kept_commands

    ts = jnp.arange(steps + 1) * h
    keep = kept_commands(float(d) if longest is None else longest, h)
    hold = ZeroOrderHold(RK4(), lambda t, y: jnp.stack([-KP * y[0] - KD * y[1]]), h, ts[0],
                         jnp.reshape(d, (1,)), keep)  # fmt: skip
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, u: jnp.stack([y[1], u[0] / M])), hold, ts[0], ts[-1], step,
        jnp.array([0.3, 0.0]), args=jnp.zeros(1), saveat=diffrax.SaveAt(ts=ts),
        stepsize_controller=diffrax.ConstantStepSize(), max_steps=100_000,
    )  # fmt: skip
    return sol.ys


@pytest.mark.parametrize("d", [0.004, 0.024, 0.03])
def test_a_delayed_command_is_the_exact_discretisation_where_steps_meet_its_switch(d):
    """Delays of 0.4, 2.4 and 3 intervals: at steps that land on each switch (``d mod h`` a
    whole number of them), RK4 gives the closed form, as without delay."""
    h = 0.01
    xs = exact_delayed(h, 100, d)
    assert np.max(np.abs(xs[:, 0] - exact(h, 100)[:, 0])) > 1e-3  # the delay is seen
    for step in (h / 5, h / 10):
        ys = delayed(h, 100, jnp.asarray(d), step)
        np.testing.assert_allclose(ys, xs, atol=1e-12, err_msg=f"step {step}")


def test_a_switch_inside_a_step_is_its_mean_there_and_converges():
    """A switch 0.7 ms past the instant, inside a step: that step sees the two commands' mean
    over it. The error stays small and falls as the step shrinks (measured 2.3e-5, 7.5e-6,
    2.4e-6, 1.0e-6 m at h/2 .. h/10, against the 0.06 m the delay moves the mass)."""
    h, d = 0.01, 0.0237
    xs = exact_delayed(h, 100, d)
    errs = [float(np.max(np.abs(delayed(h, 100, jnp.asarray(d), h / k)[:, 0] - xs[:, 0])))
            for k in (2, 4, 5, 10)]  # fmt: skip
    assert errs[0] < 5e-5 and all(b < a for a, b in zip(errs, errs[1:], strict=False))
    assert errs[-1] < 0.06 * errs[0]


def test_gradient_in_the_delay_matches_central_differences():
    """d/d(delay) of the final position, reverse mode through the hold (the switching time
    moves with the delay, spread over its step), against central differences of the exact
    discretisation: within 0.5 % at steps of h/4 .. h/16 (measured 0.02-0.2 %); where the
    switch falls on a step's boundary, whatever the rounding, within 1 %."""
    h, eps = 0.01, 1e-6
    # a switch inside a step; one on every instant (whole intervals), where the derivative is
    # the step after the switch's alone (one-sided, measured 0.6 % off at h/16)
    for d, rel in ((0.0237, 5e-3), (0.02, 1e-2)):
        fd = (exact_delayed(h, 50, d + eps)[-1, 0] - exact_delayed(h, 50, d - eps)[-1, 0]) / (
            2 * eps
        )
        assert abs(fd) > 0.1
        for k in (4, 16):
            grad = jax.grad(lambda d, k=k: delayed(h, 50, d, h / k, longest=0.03)[-1, 0])
            assert float(grad(jnp.asarray(d))) == pytest.approx(fd, rel=rel), (d, k)


def test_a_delay_beyond_the_kept_commands_or_negative_fails_the_solve():
    """A traced delay longer than the commands kept, or negative, gives NaN states (a failed
    solve in `simulate`), never a shorter delay; one within them, the same rows whatever is
    kept."""
    h = 0.01
    assert np.isnan(np.asarray(delayed(h, 10, jnp.asarray(0.05), h, longest=0.03))[-1]).all()
    assert np.isnan(np.asarray(delayed(h, 10, jnp.asarray(-0.002), h, longest=0.03))[-1]).all()
    np.testing.assert_allclose(delayed(h, 30, jnp.asarray(0.02), h, longest=0.02),
                               delayed(h, 30, jnp.asarray(0.02), h, longest=0.06), atol=0)  # fmt: skip


def test_longest_delay_and_the_first_time_off_the_instants():
    """`longest_delay` reads a plant's concrete valve delays (0 without valves, or inside a
    trace, where a caller passes a bound); `first_off_instant` names the first time off
    ``ts[0] + k h``, None where all are on them (rounding of 1e-12 s is on)."""
    from jaxmb.io.machine import load_machine

    mobile = load_machine("data/machines/mobile_knuckle/mobile_knuckle.toml").plant
    assert longest_delay(mobile) == pytest.approx(0.015)  # the file's valves: 15 ms each
    assert longest_delay(load_machine("crane").plant) == 0.0
    assert longest_delay(object()) == 0.0  # no valves
    seen = []
    jax.jit(lambda p: seen.append(longest_delay(p)) or 0.0)(mobile)
    assert seen == [0.0]
    assert first_off_instant(np.arange(101) * 1e-3 + 1e-12, 1e-3) is None
    assert first_off_instant(0.5 + np.arange(5) * 2e-3, 1e-3) is None  # from ts[0]
    assert first_off_instant(np.array([0.0, 1e-3, 2.5e-3, 3.5e-3]), 1e-3) == 2
