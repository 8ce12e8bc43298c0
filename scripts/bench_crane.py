"""The crane's third-order closed loop (mechanics, four chamber pressures, VDC valve control on
the 18 s A-B-C-D task): run time per simulated second after compilation next to Petrovic &
Mattila's figures (0.05 for their Simulink model with ode4 at 1 ms, 0.14 for Simscape with
ode45 at rtol 1e-7; aim 0.005), compile time, the solver comparison behind the defaults, the
cost of one vector-field evaluation, and throughput vmapped over perturbed plants. The loop
is the one `jaxmb simulate --machine crane` and the crane's studies run: the crane's machine
file, its controller on the bodies route (`jaxmb.vdc.bodies`), one kinematic pass a state for
both. (Before 2026-12-05 the solver table and the batch ran `crane_controller`'s segments route,
`crane_chain`, which no command runs: its controller costs 52 us an evaluation against the
bodies route's 38 us.)

The peer, run in the same process: the paper's own solver setting, classical RK4 at a fixed
1 ms step, on the same loop. Ratios are against it; the paper's figures are printed for
orientation only (other machine, other model).

    python scripts/bench_crane.py [--batch 1000] [--horizon 2] [--cores 2] [--repeats 3]
    python scripts/bench_crane.py --sweep        # the gain sweep behind control/vdc_control.GAINS
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import best_of, pin_cores  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--batch", type=int, default=1000, help="perturbed plants for the vmapped run")
parser.add_argument("--horizon", type=float, default=2.0, help="simulated s of the vmapped run")
parser.add_argument("--cores", type=int, default=2)
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--sweep", action="store_true", help="run the gain sweep instead")
parser.add_argument(
    "--implicit", action="store_true", help="add Kvaerno5 to the solver table (minutes to compile)"
)
parser.add_argument("--skip-solvers", action="store_true", help="skip the solver table")
args = parser.parse_args()
pin_cores(args.cores)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmb  # noqa: E402
from jaxmb.control.crane_run import crane_closed_loop, crane_controller  # noqa: E402
from jaxmb.control.machine_run import ATOL, RTOL, machine_closed_loop, machine_controller  # noqa: E402
from jaxmb.io.machine import load_machine  # noqa: E402
from jaxmb.models.crane import WAYPOINTS  # noqa: E402
from jaxmb.simulation import QuinticWaypoints  # noqa: E402

T_FINAL = 18.0
TS = jnp.linspace(0.0, T_FINAL, 181)


def timed(fn, *a):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*a))
    return time.perf_counter() - t0


def heavier(plant, lift=1.2, tilt=1.5):
    m = jaxmb.replace_body(plant.model, "T", mass=tilt * 157.871069)
    m = jaxmb.replace_body(m, "L", mass=lift * 143.66)
    return eqx.tree_at(lambda p: p.model, plant, m)


def solvers(plant, ctrl):
    """Accuracy and run time of solver settings against an rtol 1e-10 Tsit5 reference, each
    line printed as it is measured (the peer first, then the reference)."""
    cases = [
        ("rk4 fixed 1 ms (paper's ode4: the peer)", {"solver": "rk4", "fixed_step": 1e-3}),
        ("tsit5 rtol 1e-10 (reference)", {"rtol": 1e-10, "atol": 1e-12}),
        ("tsit5 rtol 1e-8 (library default)", {"rtol": 1e-8, "atol": 1e-10}),
        (f"tsit5 rtol {RTOL:g} (crane default)", {"rtol": RTOL, "atol": ATOL}),
        ("tsit5 rtol 1e-4", {"rtol": 1e-4, "atol": 1e-6}),
        ("bosh3 rtol 1e-6", {"solver": "bosh3", "rtol": 1e-6, "atol": 1e-8}),
    ]
    if args.implicit:
        cases.append(
            ("kvaerno5 rtol 1e-6 (implicit)", {"solver": "kvaerno5", "rtol": 1e-6, "atol": 1e-8})
        )
    head = f"{'setting':<40}{'run s':>8}{'/sim s':>9}{'x peer':>8}{'compile s':>11}{'steps':>8}"
    print(f"\nsolvers on the A-B-C-D closed loop ({T_FINAL:g} s simulated, {args.cores} core(s))")
    print(head + f"{'max|dq| rad':>13}{'max|dp| Pa':>12}", flush=True)
    ref = peer = peer_tr = None
    assert ctrl.plant is plant
    for name, opts in cases:
        # the plant handed over as the controller's, as `jaxmb simulate` does: its program
        # then knows and makes one kinematic pass a state (`pass_sharing`)
        run = eqx.filter_jit(
            lambda c, o=opts: machine_closed_loop(c.plant, c, TS, throw=False, **o)
        )
        first = timed(run, ctrl)
        slow = "1e-10" in name or "implicit" in name
        best = min(timed(run, ctrl) for _ in range(1 if slow else args.repeats))
        tr = run(ctrl)
        if peer is None:
            peer, peer_tr = best, tr
        if ref is None and "reference" in name:
            ref = tr
        rows = [(name, best, first - best, tr)]
        if ref is tr:  # now the peer's accuracy can be printed too
            rows.insert(0, ("  (peer, against the reference)", peer, float("nan"), peer_tr))
        for nm, b, comp, t in rows:
            if ref is not None:
                dq = float(jnp.abs(t.q - ref.q).max())
                keys = [k for k in ref.signals if k.startswith("p_")]
                dp = max(float(jnp.abs(t.signals[k] - ref.signals[k]).max()) for k in keys)
            else:
                dq = dp = float("nan")
            note = "" if bool(t.success) else "  solver failed"
            print(
                f"{nm:<40}{b:>8.3f}{b / T_FINAL:>9.4f}{b / peer:>8.2f}{comp:>11.1f}"
                f"{int(t.num_steps):>8}{dq:>13.2e}{dp:>12.3g}{note}",
                flush=True,
            )
    print("paper (other machine): 0.05 /sim s (Simulink, ode4 at 1 ms), 0.14 (Simscape); aim 0.005")


def sampled(plant, ctrl):
    """The loop as `jaxmb simulate --machine crane` runs it by default: VDC sampled at 1 kHz,
    its command held between samples (`jaxmb.simulation.zero_order_hold`), against the same
    sampled loop by Tsit5 at rtol 1e-10 with its steps clipped to the samples (reference);
    next to the continuous loop at the crane's former default and the paper's RK4 at 1 ms
    (the peer), with the sampled loop's distance from the continuous one."""
    h = 1e-3
    cases = [
        ("continuous rk4 fixed 1 ms (the peer)", {"solver": "rk4", "fixed_step": 1e-3}),
        (
            "sampled 1 kHz, tsit5 rtol 1e-10 (ref.)",
            {"sample_time": h, "solver": "tsit5", "fixed_step": None, "rtol": 1e-10, "atol": 1e-12},
        ),
        ("sampled 1 kHz, rk4 1 ms (default)", {"sample_time": h, "solver": "rk4", "fixed_step": h}),
        ("sampled 1 kHz, rk4 0.5 ms", {"sample_time": h, "solver": "rk4", "fixed_step": h / 2}),
        (f"continuous tsit5 rtol {RTOL:g}", {"rtol": RTOL, "atol": ATOL}),
    ]
    print(
        f"\nsampled VDC on the A-B-C-D closed loop ({T_FINAL:g} s simulated, {args.cores} core(s))"
    )
    print(f"{'setting':<42}{'run s':>8}{'/sim s':>9}{'x peer':>8}{'compile s':>11}{'steps':>8}"
          f"{'max|dq| rad':>13}{'max|dp| Pa':>12}")  # fmt: skip
    peer = ref = None
    for name, opts in cases:
        run = eqx.filter_jit(
            lambda c, o=opts: machine_closed_loop(c.plant, c, TS, throw=False, **o)
        )
        first = timed(run, ctrl)
        best = min(timed(run, ctrl) for _ in range(1 if "ref." in name else args.repeats))
        tr = run(ctrl)
        peer = best if peer is None else peer
        ref = tr if "ref." in name else ref
        dq = dp = float("nan")
        if ref is not None and "continuous" not in name:
            dq = float(jnp.abs(tr.q - ref.q).max())
            keys = [k for k in ref.signals if k.startswith("p_")]
            dp = max(float(jnp.abs(tr.signals[k] - ref.signals[k]).max()) for k in keys)
        note = "" if bool(tr.success) else "  solver failed"
        if "continuous tsit5" in name:
            gap = float(jnp.abs(tr.q - ref.q).max())
            note += f"  (sampled vs continuous: {gap:.2e} rad)"
        print(
            f"{name:<42}{best:>8.3f}{best / T_FINAL:>9.4f}{best / peer:>8.2f}{first - best:>11.1f}"
            f"{int(tr.num_steps):>8}{dq:>13.2e}{dp:>12.3g}{note}",
            flush=True,
        )
    print("paper (other machine): 0.05 /sim s (Simulink, ode4 at 1 ms); aim 0.05")


def vector_field_cost(plant, ctrl):
    """Seconds per evaluation of the plant's vector field and of the controller inside one
    compiled loop (no dispatch)."""
    from jaxmb.models.crane import WAYPOINTS as W
    from jaxmb.multibody.checks import failures_as_nan
    from jaxmb.simulation.controller import one_pass_field
    from jaxmb.vdc.bodies import body_required_forces, body_required_forces_by_jacobians

    y0 = plant.initial_state(jnp.asarray(W["A"]), jnp.zeros(2))
    # the shipped controller (bodies route) and, for comparison, the segments route
    bodies, segments = ctrl, crane_controller(plant, ctrl.reference)
    p, s = eqx.partition((segments, bodies, plant), eqx.is_array)
    K = bodies.body_gains()
    r = (jnp.asarray([0.2, -0.1]), jnp.asarray([0.1, 0.3]))

    def forces(route):
        return lambda c, b, pl, y: route(pl.model, y["q"], y["qd"], *r, K).tau_r

    N = 2000
    out = {}
    for name, fn in (
        ("plant vector field", lambda c, b, pl, y: pl.vector_field(0.3, y, jnp.ones(2))),
        ("VDC controller, segments (crane_chain)", lambda c, b, pl, y: c(0.3, y)),
        ("VDC controller, bodies (machine files)", lambda c, b, pl, y: b(0.3, y)),
        (
            "closed loop, bodies: one pass",
            lambda c, b, pl, y: one_pass_field(pl, b, 0.3, y, jnp.zeros(2), None, "whole"),
        ),  # fmt: skip
        (
            "  the same, two passes (the peer)",
            lambda c, b, pl, y: pl.vector_field(0.3, y, b(0.3, y)),
        ),  # fmt: skip
        ("bodies' required forces: O(n) pass", forces(body_required_forces)),
        ("  the same by Jacobians (the peer)", forces(body_required_forces_by_jacobians)),
    ):

        def body(i, acc, fn=fn):
            c, b, pl = eqx.combine(p, s)
            y = jax.tree.map(lambda x: x + 1e-12 * acc, y0)
            leaves = jax.tree.leaves(fn(c, b, pl, y))
            return acc + 1e-30 * sum(jnp.sum(x) for x in leaves)

        with failures_as_nan():  # no run-time checks in the loop, as in the workflows
            f = jax.jit(lambda p, body=body: jax.lax.fori_loop(0, N, body, 0.0))
            out[name] = best_of(lambda f=f: jax.block_until_ready(f(p)), args.repeats) / N
    print("\ncost of one evaluation inside a compiled loop:")
    for k, v in out.items():
        print(f"  {k:<40}{v * 1e6:8.1f} us")
    ratio = out["bodies' required forces: O(n) pass"] / out["  the same by Jacobians (the peer)"]
    print(f"  O(n) pass / Jacobians: {ratio:.2f}")
    ratio = out["closed loop, bodies: one pass"] / out["  the same, two passes (the peer)"]
    print(f"  one pass / two passes: {ratio:.2f}")


def batched(plant, ctrl):
    """vmap over perturbed plants (booms, payload-free masses, bulk modulus, valve coefficients,
    friction levels: +-10 % uniform) on a short horizon. The perturbed plants keep the
    controller's geometry arrays, so each loop shares its kinematic pass (`pass_sharing`)."""
    n = args.batch
    ts = jnp.linspace(0.0, args.horizon, 21)
    key = jax.random.key(0)
    u = jax.random.uniform(key, (n, 6), minval=0.9, maxval=1.1)

    def perturbed(f):
        p = heavier(plant, f[0], f[1])
        p = eqx.tree_at(
            lambda p: [a.cylinder.beta for a in p.actuators],
            p,
            [a.cylinder.beta * f[2] for a in p.actuators],
        )
        p = eqx.tree_at(
            lambda p: [a.valve.c_pa for a in p.actuators],
            p,
            [a.valve.c_pa * f[3] for a in p.actuators],
        )
        p = eqx.tree_at(
            lambda p: [a.friction.F_c for a in p.actuators],
            p,
            [a.friction.F_c * f[4] for a in p.actuators],
        )
        return eqx.tree_at(
            lambda p: [a.friction.sigma for a in p.actuators],
            p,
            [a.friction.sigma * f[5] for a in p.actuators],
        )

    def one(f):
        # the controller sampled at 1 kHz, as the crane's studies run it
        tr = machine_closed_loop(perturbed(f), ctrl, ts, sample_time=1e-3, throw=False)
        return jnp.abs(tr.e).max(), tr.success

    single = eqx.filter_jit(lambda f: one(f))
    many = eqx.filter_jit(jax.vmap(one))
    c1 = timed(single, u[0])
    r1 = best_of(lambda: jax.block_until_ready(single(u[0])), args.repeats)
    cn = timed(many, u)
    rn = best_of(lambda: jax.block_until_ready(many(u)), 1)
    err, ok = many(u)
    print(
        f"\nvmapped over {n} perturbed plants (+-10 %), {args.horizon:g} s each, {args.cores} core(s):"
    )
    print(
        f"  one plant:   {r1:.3f} s  ({args.horizon / r1:.2f} simulated s per wall s), compile {c1 - r1:.1f} s"
    )
    print(
        f"  {n} plants: {rn:.3f} s  ({n * args.horizon / rn:.1f} simulated s per wall s, "
        f"x{n * r1 / rn:.1f} the one-by-one rate), compile {cn - rn:.1f} s"
    )
    print(f"  all succeeded: {bool(np.all(ok))}; max |e| over the batch {float(err.max()):.4g} rad")


def sweep(plant):
    """The gain sweep behind control/vdc_control.GAINS (max joint error, rad)."""
    run = eqx.filter_jit(lambda p, c: crane_closed_loop(p, c, TS, throw=False))
    slow = QuinticWaypoints([WAYPOINTS[k] for k in "ABCDABCDA"], segment_time=4.0)
    fast = QuinticWaypoints([WAYPOINTS[k] for k in "ABCDABCDA"], segment_time=2.0)
    heavy = heavier(plant)
    print(
        f"{'lambda':>7}{'k_v':>6}{'k_x':>8}{'k_f':>8}{'heavy, 4 s':>12}{'nominal, 2 s':>14}{'heavy, 2 s':>12}"
    )
    for lam, kv, kx, kf in [
        (5, 10, 1e-3, 1e-7),
        (10, 10, 1e-3, 1e-7),
        (10, 50, 1e-3, 1e-7),
        (10, 50, 1e-2, 1e-7),
        (10, 50, 3e-2, 1e-7),
        (10, 50, 1e-1, 1e-7),
        (20, 20, 1e-2, 1e-7),
        (10, 50, 1e-2, 3e-7),
    ]:
        errs = []
        for p, ref in ((heavy, slow), (plant, fast), (heavy, fast)):
            tr = run(p, crane_controller(plant, ref, lam=lam, k_v=kv, k_x=kx, k_f=kf))
            errs.append(float(jnp.abs(tr.e).max()) if bool(tr.success) else float("nan"))
        print(f"{lam:>7g}{kv:>6g}{kx:>8g}{kf:>8g}{errs[0]:>12.4g}{errs[1]:>14.4g}{errs[2]:>12.4g}")


def main():
    print(f"jaxmb bench_crane: jax {jax.__version__}, devices {jax.devices()}")
    if args.sweep:
        sweep(jaxmb.models.lift_tilt_crane_plant())
        return
    # what `jaxmb simulate --machine crane` runs: the file's plant as the controller's model
    ctrl = machine_controller(load_machine("crane"))
    plant = ctrl.plant
    sampled(plant, ctrl)
    if not args.skip_solvers:
        solvers(plant, ctrl)
    vector_field_cost(plant, ctrl)
    batched(plant, ctrl)


if __name__ == "__main__":
    main()
