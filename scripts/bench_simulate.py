"""Run time of the 20 s Section IV closed-loop scenario after compilation, as a fraction of the
simulated time (Petrovic & Mattila report 0.05 for their Simulink model and 0.14 for Simscape),
its compile time, and the cost of one gradient of the tracking RMSE with respect to all the
controller gains relative to one forward run, measured in the same process.

With ``--accuracy`` it also measures what the run buys: the largest error of its joint angles
and velocities over the 2001 saved times against a reference solve (Rodas4 at rtol 1e-11, atol
1e-13), next to the same for Petrovic & Mattila's own setting, the classical Runge-Kutta method
at a fixed step of 1 ms (Simulink's ode4, with which they report 0.05 of simulated time), run
in the same process. A faster run counts only at an accuracy at least that setting's.

    python scripts/bench_simulate.py [--repeats 5] [--solver tsit5] [--rtol 1e-8] [--atol 1e-10]
        [--accuracy]

The gradient is taken two ways in the same process: with diffrax's default binomial
checkpoints (`simulate`'s default, the peer) and with a checkpoint a step (`jaxmb tune`'s).
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import shipped_flags  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--repeats", type=int, default=5)
parser.add_argument("--solver", default="tsit5")
parser.add_argument("--rtol", type=float, default=1e-8)
parser.add_argument("--atol", type=float, default=1e-10)
parser.add_argument(
    "--accuracy",
    action="store_true",
    help="errors against a tight reference, and the RK4 1 ms peer",
)
args = parser.parse_args()
shipped_flags()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from jaxmb.control import section_iv  # noqa: E402
from jaxmb.simulation import simulate  # noqa: E402

MAX_STEPS = 200_000  # `simulate`'s default step budget


def timed(fn, *a):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*a))
    return time.perf_counter() - t0


def main():
    sc = section_iv()
    ts = jnp.linspace(0.0, sc.t_final, 2001)
    # differentiate with respect to the gains only (not the nominal model inside the controller)
    gain_leaves = ("Lambda", "K", "kappa", "eps")

    def with_gains(g):
        c = sc.controller
        for name in gain_leaves:
            c = eqx.tree_at(lambda c_, n=name: getattr(c_, n), c, g[name])
        return c

    g0 = {name: getattr(sc.controller, name) for name in gain_leaves}

    def rmse(g, adjoint=None):
        tr = simulate(sc.plant, with_gains(g), sc.reference, sc.q0, sc.qd0, ts,
                      disturbance=sc.disturbance, solver=args.solver, rtol=args.rtol, atol=args.atol,
                      adjoint=adjoint, max_steps=MAX_STEPS)  # fmt: skip
        return jnp.sqrt(jnp.mean(tr.e**2)), (tr.num_steps, tr.q, tr.qd)

    forward = jax.jit(rmse)
    compile_fwd = timed(forward, g0)
    run_fwd = min(timed(forward, g0) for _ in range(args.repeats))
    # reverse mode two ways: diffrax's default, O(sqrt(max_steps)) checkpoints with the steps
    # between them solved again (`simulate`'s default, the peer), and a checkpoint a step
    # (what `jaxmb tune` uses when its samples' steps fit in memory: control/tuning.py)
    adjoints = {
        "binomial checkpoints (simulate's default)": diffrax.RecursiveCheckpointAdjoint(),
        "a checkpoint a step (jaxmb tune's)": diffrax.RecursiveCheckpointAdjoint(MAX_STEPS),
    }
    grads = {}
    for name, adjoint in adjoints.items():
        gradient = jax.jit(jax.grad(lambda g, a=adjoint: rmse(g, a)[0]))
        first = timed(gradient, g0)
        run = min(timed(gradient, g0) for _ in range(args.repeats))
        grads[name] = (gradient, first - run, run)
    value, (steps, q, qd) = forward(g0)
    print(f"jaxmb bench_simulate: Section IV scenario, {sc.t_final:g} s simulated, solver {args.solver}, "
          f"rtol {args.rtol:g}, atol {args.atol:g}, {int(steps)} accepted steps, best of {args.repeats}")  # fmt: skip
    print(f"jax {jax.__version__}, devices {jax.devices()}")
    print(
        f"{'forward run (after compile)':<36}{run_fwd:>9.3f} s   fraction of simulated time "
        f"{run_fwd / sc.t_final:.4f}  (Simulink 0.05: x{0.05 / (run_fwd / sc.t_final):.1f}, "
        f"Simscape 0.14: x{0.14 / (run_fwd / sc.t_final):.1f}; aim 0.005)"
    )
    print(f"{'forward compile (first call - run)':<36}{compile_fwd - run_fwd:>9.3f} s")
    peer = None
    for name, (_, compile_grad, run_grad) in grads.items():
        print(f"gradient of RMSE w.r.t. 12 gains, {name}:")
        vs = (
            ""
            if peer is None
            else f", x{run_grad / peer[1]:.2f} the peer's run, x{compile_grad / peer[0]:.2f} its compile"
        )
        print(
            f"  {run_grad:.3f} s = {run_grad / run_fwd:.2f} forward runs; compile (first call - "
            f"run) {compile_grad:.3f} s{vs}"
        )
        peer = peer or (compile_grad, run_grad)
    work = {"tsit5": "6 vector-field evaluations", "dopri5": "6 vector-field evaluations",
            "rodas4": "6 vector-field evaluations, one Jacobian (n + 1 tangents) and one LU"}  # fmt: skip
    print(f"per step: {run_fwd / int(steps) * 1e6:.1f} us ({args.solver}: "
          f"{work.get(args.solver, 'see the solver')} a step)")  # fmt: skip
    dK = [grads[name][0](g0)["K"] for name in adjoints]
    print(f"RMSE {float(value):.5f}; dRMSE/dK = {dK[0]} (the two adjoints differ by "
          f"{float(jnp.max(jnp.abs(dK[0] - dK[1]))):.1e})")  # fmt: skip
    if args.accuracy:
        accuracy(sc, ts, run_fwd, q, qd)


def accuracy(sc, ts, run_fwd, q, qd):
    """Largest joint-angle and velocity errors of the timed run (``q``, ``qd``) and of RK4 at
    1 ms (Simulink's ode4, Petrovic & Mattila's setting) against a tight Rodas4 reference, and
    RK4's run time."""

    def solve(**options):
        def run():
            tr = simulate(sc.plant, sc.controller, sc.reference, sc.q0, sc.qd0, ts,
                          disturbance=sc.disturbance, max_steps=400_000, **options)  # fmt: skip
            return tr.q, tr.qd

        return jax.jit(run)

    ref = solve(solver="rodas4", rtol=1e-11, atol=1e-13)()
    rk4 = solve(solver="rk4", fixed_step=1e-3)
    timed(rk4)
    run_rk4 = min(timed(rk4) for _ in range(args.repeats))

    def errors(q, qd):
        return float(jnp.max(jnp.abs(q - ref[0]))), float(jnp.max(jnp.abs(qd - ref[1])))

    (eq, eqd), (rq, rqd) = errors(q, qd), errors(*rk4())
    print("largest error against Rodas4 at rtol 1e-11 over the saved times (q rad, qd rad/s):")
    print(f"  {args.solver} rtol {args.rtol:g}: {eq:.2e}, {eqd:.2e}; "
          f"fraction of simulated time {run_fwd / sc.t_final:.4f}")  # fmt: skip
    print(
        f"  rk4 at 1 ms (ode4):  {rq:.2e}, {rqd:.2e}; "
        f"fraction of simulated time {run_rk4 / sc.t_final:.4f} (x{run_rk4 / run_fwd:.2f} this run)"
    )
    verdict = "at least as accurate as" if eq <= rq and eqd <= rqd else "less accurate than"
    print(f"  this run is {verdict} the paper's setting")


if __name__ == "__main__":
    main()
