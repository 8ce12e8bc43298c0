"""The Rosenbrock solver (`jaxmb.simulation.rosenbrock.Rodas4`): classical order against an exact solution,
L-stability on a stiff problem, adaptive accuracy, gradients, and the Section IV loop against a
tight explicit solve."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmb.control import section_iv
from jaxmb.simulation import simulate
from jaxmb.simulation.rosenbrock import Rodas4

SOLVERS = {"rodas4": (Rodas4(), 4)}


def exact(t):
    """The solution the test problems are built around: smooth and not polynomial."""
    return jnp.stack([jnp.sin(t), jnp.exp(-t) * jnp.cos(t)])


def exact_rate(t):
    return jax.jacfwd(exact)(t)


def problem(A):
    """``y' = A (y - y*(t)) + y*'(t)``: non-autonomous (``df/dt`` matters for the order),
    with ``y*`` its solution from ``y*(0)``, whatever the stiffness of ``A``."""
    A = jnp.asarray(A)
    return diffrax.ODETerm(lambda t, y, args: A @ (y - exact(t)) + exact_rate(t))


MILD = [[-2.0, 1.0], [1.0, -3.0]]
STIFF = [[-1e4, 10.0], [0.0, -1e5]]


def solve(solver, A, t1, *, dt=None, rtol=None, n_save=2):
    ctrl = diffrax.ConstantStepSize() if dt else diffrax.PIDController(rtol=rtol, atol=rtol)
    return diffrax.diffeqsolve(
        problem(A), solver, 0.0, t1, dt if dt else 1e-3, exact(0.0),
        saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, t1, n_save)), stepsize_controller=ctrl,
        max_steps=100_000,
    )  # fmt: skip


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_classical_order(name):
    """Fixed steps on a non-stiff problem: the error at t = 1 falls as h^p."""
    solver, p = SOLVERS[name]
    errs = []
    for h in (0.1, 0.05, 0.025):
        sol = jax.jit(lambda h=h: solve(solver, MILD, 1.0, dt=h))()
        errs.append(float(jnp.abs(sol.ys[-1] - exact(1.0)).max()))
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(np.abs(orders - p) < 0.3), (errs, orders)


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_stiff_problem_at_large_steps(name):
    """Eigenvalues -1e4 and -1e5 at h = 0.05 (h lambda = -5000): an explicit method diverges;
    the L-stable, stiffly accurate Rosenbrock methods stay on the smooth solution, and with
    adaptive steps they take a number of steps set by y*, not by the eigenvalues."""
    solver, _ = SOLVERS[name]
    fixed = jax.jit(lambda: solve(solver, STIFF, 2.0, dt=0.05, n_save=41))()
    ts = np.linspace(0.0, 2.0, 41)
    assert np.abs(np.asarray(fixed.ys) - np.asarray(jax.vmap(exact)(ts))).max() < 1e-6
    explicit = jax.jit(lambda: solve(diffrax.Tsit5(), STIFF, 2.0, dt=0.05))()
    assert not np.isfinite(np.asarray(explicit.ys[-1])).all() or (
        np.abs(np.asarray(explicit.ys[-1] - exact(2.0))).max() > 1.0
    )
    # adaptive: a few hundred steps (Tsit5 needs 57 000 at rtol 1e-7); the final value is a
    # step's own, the 21 saved values come from the third-order dense output over long steps
    adaptive = jax.jit(lambda: solve(solver, STIFF, 2.0, rtol=1e-8, n_save=21))()
    assert int(adaptive.stats["num_accepted_steps"]) < 600
    ts = np.linspace(0.0, 2.0, 21)
    err = np.abs(np.asarray(adaptive.ys) - np.asarray(jax.vmap(exact)(ts))).max(axis=1)
    assert err[-1] < 1e-7 and err.max() < 1e-4, err


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_adaptive_error_follows_tolerance(name):
    """The embedded estimate drives diffrax's PID controller: the global error, saved through
    the Hermite dense output between steps, shrinks with the tolerance and stays near it."""
    solver, _ = SOLVERS[name]
    ts = np.linspace(0.0, 3.0, 31)
    errors = []
    for rtol in (1e-5, 1e-8):
        sol = jax.jit(lambda r=rtol: solve(solver, MILD, 3.0, rtol=r, n_save=31))()
        errors.append(np.abs(np.asarray(sol.ys) - np.asarray(jax.vmap(exact)(ts))).max())
        assert errors[-1] < 50 * rtol, (rtol, errors[-1])
    assert errors[1] < errors[0] / 100


def test_gradient_through_the_solve():
    """Reverse and forward mode through the linearisation and the LU of every step:
    d y(T) / d a for ``y' = a y`` against its closed form ``T y0 exp(a T)``."""

    def final(a, adjoint=diffrax.RecursiveCheckpointAdjoint()):  # noqa: B008
        term = diffrax.ODETerm(lambda t, y, args: a * y)
        sol = diffrax.diffeqsolve(
            term, Rodas4(), 0.0, 2.0, 0.01, jnp.array([1.5]),
            stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12), adjoint=adjoint,
        )  # fmt: skip
        return sol.ys[-1, 0]

    a = -0.7
    grad = jax.jit(jax.grad(final))(a)
    assert abs(float(grad) - 2.0 * 1.5 * np.exp(2.0 * a)) < 1e-8
    forward = lambda a: final(a, diffrax.ForwardMode())  # noqa: E731
    fwd = jax.jit(lambda a: jax.jvp(forward, (a,), (1.0,))[1])(a)
    assert abs(float(fwd) - float(grad)) < 1e-9


def test_section_iv_against_a_tight_explicit_solve():
    """The Section IV closed loop: inside the boundary layer its Jacobian has an eigenvalue
    near -1500 1/s, which bounds Tsit5's step; Rodas4 takes accuracy-bound steps. At the
    shipped Monte Carlo settings (rtol 1e-6, atol 1e-8) it stays within 2e-6 rad (m) of a
    Tsit5 solve at rtol 1e-11 over the whole 20 s, push included, with the tracking RMSE to
    1e-5 of itself and the control input (re-evaluated at the save times, where the layer's
    gain kappa/eps magnifies any velocity error) to 1e-3 of its peak, in under a quarter of
    Tsit5's steps at the same tolerances."""
    sc = section_iv()
    ts = jnp.linspace(0.0, sc.t_final, 2001)

    def run(solver, rtol, atol):
        return simulate(
            sc.plant, sc.controller, sc.reference, sc.q0, sc.qd0, ts,
            disturbance=sc.disturbance, solver=solver, rtol=rtol, atol=atol,
        )  # fmt: skip

    ref = jax.jit(lambda: run("tsit5", 1e-11, 1e-13))()
    fast = jax.jit(lambda: run("rodas4", 1e-6, 1e-8))()
    assert bool(fast.success)
    assert np.abs(np.asarray(fast.q - ref.q)).max() < 2e-6
    rmse = lambda tr: np.sqrt(np.mean(np.asarray(tr.e) ** 2, axis=0))  # noqa: E731
    assert np.abs(rmse(fast) / rmse(ref) - 1).max() < 1e-5
    u_ref = np.asarray(ref.u)
    assert np.abs(np.asarray(fast.u) - u_ref).max() < 1e-3 * np.abs(u_ref).max()
    explicit = jax.jit(lambda: run("tsit5", 1e-6, 1e-8))()
    assert int(fast.num_steps) * 4 < int(explicit.num_steps)
