"""Cost versus model size: compile time, per-state time batched and single-call latency of
jaxmb's mass matrix, bias forces and forward dynamics on every recursion path, next to
Pinocchio's crba, nonLinearEffects and aba on the same states, in one process.

The models are `jaxmb.models.random_tree_urdf` serial chains and branching trees of n moving
joints (1-DoF revolute or prismatic, plus fixed joints that Pinocchio merges), loaded by
`jaxmb.load_urdf` and `pinocchio.buildModelFromXML` from the same XML. Each jaxmb path is forced
through `jaxmb.algorithms.terms` (``unrolled``: Python loops over the frames; ``scan``: `jax.lax.scan`
sweeps; ``aba``: articulated-body forward dynamics, itself a scan), next to the public default
(``auto``, with its input checks) and the path that ``auto`` resolves to at that size. Every
path is checked against Pinocchio before it is timed.

Measured for each (tree, n, quantity, path), float64 on the same single core by default:

- compile: seconds to trace, lower and compile ``jax.jit(jax.vmap(f))`` for one batch;
- vmapped: microseconds per state of that executable on ``--batch`` states, best of repeats;
- single: microseconds of one jitted call on one state, best of many calls (dispatch included);
- Pinocchio: microseconds per state of a Python loop over the same states with a preallocated
  Data, raw, and net of the same loop calling the trivial ``pin.neutral(model)`` instead
  (Python iteration and one pybind11 call; what is left is argument conversion and the
  algorithm). Ratios are jaxmb vmapped / Pinocchio; below 1 means jaxmb is faster per state.

Then growth exponents b of ``time ~ n^b``, least squares in log-log over the sizes measured.
The model is baked into the compiled functions as constants (``--model const``, as in a control
loop) or passed as a traced argument (``--model arg``, as `scripts/bench_dynamics.py` does).

    python scripts/bench_scaling.py [--sizes 3,5,10,20,30,50,75,100] [--kinds serial,branching]
        [--quantities mass_matrix,bias,forward] [--batch 0] [--repeats 3] [--cores 1]
        [--unrolled-max 30] [--model const] [--json PATH]
"""

import argparse

from benchkit import best_of, pin_cores

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--sizes", default="3,5,10,20,30,50,75,100", help="moving joints n")
parser.add_argument("--kinds", default="serial,branching", help="serial and/or branching")
parser.add_argument("--quantities", default="mass_matrix,bias,forward")
parser.add_argument(
    "--batch",
    type=int,
    default=0,
    help="states per vmapped call; 0: by size, 8192 // n within [64, 1024] (large batches share "
    "the call's dispatch at small n, cache-sized ones are fastest at large n)",
)
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--cores", type=int, default=1, help="cores for both (process affinity)")
parser.add_argument("--unrolled-max", type=int, default=30, help="largest n for the unrolled paths")
parser.add_argument(
    "--model", choices=("const", "arg"), default="const", help="model baked in or traced"
)
parser.add_argument("--json", default=None, metavar="PATH", help="write every row here")
args = parser.parse_args()

pin_cores(args.cores)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import json  # noqa: E402
import time  # noqa: E402

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402

import jaxmb  # noqa: E402
from jaxmb.algorithms import terms  # noqa: E402
from jaxmb.models import random_tree_urdf  # noqa: E402


def _zeros(qd):
    return jnp.zeros_like(qd)


# quantity -> (Pinocchio peer, tolerance relative to the peer's largest entry, paths); each path
# is f(model, q, qd, tau). The bias forces are RNEA at qdd = 0 with gravity, h - Q_g, which is
# Pinocchio's nonLinearEffects (C qd + g); forward dynamics without external wrenches. Forward
# dynamics gets a looser tolerance: Gamma's condition number reaches ~1e6 on the 100-joint chains.
QUANTITIES = {
    "mass_matrix": (
        "crba",
        1e-9,
        {
            "unrolled": lambda m, q, qd, tau: terms.unchecked_crba(m, q, choice="unrolled"),
            "scan": lambda m, q, qd, tau: terms.unchecked_crba(m, q, choice="scan"),
            "auto": lambda m, q, qd, tau: jaxmb.mass_matrix(m, q),
        },
    ),
    "bias": (
        "nonLinearEffects",
        1e-9,
        {
            "unrolled": lambda m, q, qd, tau: terms.unchecked_rnea(
                m, q, qd, _zeros(qd), choice="unrolled"
            ),
            "scan": lambda m, q, qd, tau: terms.unchecked_rnea(m, q, qd, _zeros(qd), choice="scan"),
            "auto": lambda m, q, qd, tau: jaxmb.inverse_dynamics(m, q, qd, _zeros(qd)),
        },
    ),
    "forward": (
        "aba",
        1e-7,
        {
            "unrolled/cholesky": lambda m, q, qd, tau: terms.unchecked_forward(
                m, q, qd, tau, choice="unrolled", solve="cholesky"
            ),
            "scan/cholesky": lambda m, q, qd, tau: terms.unchecked_forward(
                m, q, qd, tau, choice="scan", solve="cholesky"
            ),
            "aba": lambda m, q, qd, tau: terms.unchecked_forward(
                m, q, qd, tau, choice="scan", solve="aba"
            ),
            "auto": lambda m, q, qd, tau: jaxmb.forward_dynamics(m, q, qd, tau),
        },
    ),
}


def resolved(model, quantity: str) -> str:
    """The path ``auto`` takes for this model."""
    rec = terms.recursion(model)
    if quantity != "forward":
        return rec
    return "aba" if terms.solver(model) == "aba" else f"{rec}/cholesky"


def pinocchio_peer(pm, q, qd, tau, perm):
    """Per quantity: (the call on one state, in jaxmb's coordinate order, a loop over the states,
    the same loop calling ``pin.neutral`` instead). Direct calls with bound locals, rows listed
    beforehand: the loops carry as little Python as a loop can. ``perm`` lists jaxmb's index of
    each Pinocchio joint (Pinocchio orders a branching tree depth first)."""
    pd = pm.createData()
    q, qd, tau = q[:, perm], qd[:, perm], tau[:, perm]

    def ours(v):
        out = np.empty_like(v)
        out[perm] = v
        return out

    crba, nle, aba, neutral = pin.crba, pin.nonLinearEffects, pin.aba, pin.neutral
    r1, r2, r3 = list(q), list(zip(q, qd, strict=True)), list(zip(q, qd, tau, strict=True))

    def mass_loop():
        for a in r1:
            crba(pm, pd, a)

    def mass_base():
        for _ in r1:
            neutral(pm)

    def bias_loop():
        for a, b in r2:
            nle(pm, pd, a, b)

    def bias_base():
        for _, _ in r2:
            neutral(pm)

    def forward_loop():
        for a, b, c in r3:
            aba(pm, pd, a, b, c)

    def forward_base():
        for _, _, _ in r3:
            neutral(pm)

    def mass_one(i):
        M = np.array(crba(pm, pd, q[i]))  # crba fills the upper triangle
        M = np.triu(M) + np.triu(M, 1).T
        out = np.empty_like(M)
        out[np.ix_(perm, perm)] = M
        return out

    return {
        "mass_matrix": (mass_one, mass_loop, mass_base),
        "bias": (lambda i: ours(np.array(nle(pm, pd, q[i], qd[i]))), bias_loop, bias_base),
        "forward": (
            lambda i: ours(np.array(aba(pm, pd, q[i], qd[i], tau[i]))),
            forward_loop,
            forward_base,
        ),
    }


def bind(fn, model):
    """``(f, extra)``: f(*extra, q, qd, tau) evaluates fn on the model, baked in as constants
    or passed in ``extra`` as a traced argument (``--model``)."""
    if args.model == "const":
        return (lambda q, qd, tau: fn(model, q, qd, tau)), ()
    params, static = eqx.partition(model, eqx.is_array)
    return (lambda p, q, qd, tau: fn(eqx.combine(p, static), q, qd, tau)), (params,)


def check(ours, ref, rtol: float, what: str) -> None:
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(np.asarray(ours), ref, rtol=0, atol=rtol * scale, err_msg=what)


def time_single(one, inputs, repeats: int) -> float:
    """Microseconds of one call of the jitted ``one``, blocking on each, best of repeats of a
    run of calls sized to about 20 ms."""
    jax.block_until_ready(one(*inputs))
    t0 = time.perf_counter()
    for _ in range(5):
        jax.block_until_ready(one(*inputs))
    reps = int(np.clip(0.02 / ((time.perf_counter() - t0) / 5), 10, 5000))

    def run():
        for _ in range(reps):
            jax.block_until_ready(one(*inputs))

    return best_of(run, repeats) / reps * 1e6


def measure(model, fn, states, refs, rtol, what):
    """compile s, vmapped us/state, single us and single compile s of one path on one model."""
    f, extra = bind(fn, model)
    B = states[0].shape[0]
    jax.clear_caches()  # time a cold compile; XLA's CPU JIT maps memory per executable
    t0 = time.perf_counter()
    batched = jax.jit(jax.vmap(f, in_axes=(None,) * len(extra) + (0, 0, 0)))
    compiled = batched.lower(*extra, *states).compile()
    compile_s = time.perf_counter() - t0
    out = np.asarray(compiled(*extra, *states))
    for i, ref in refs.items():  # never time wrong numbers
        check(out[i], ref, rtol, f"{what}, vmapped, state {i}")
    vmapped = best_of(lambda: jax.block_until_ready(compiled(*extra, *states)), args.repeats)

    jax.clear_caches()
    one = jax.jit(f)
    inputs = (*extra, *(x[0] for x in states))
    t0 = time.perf_counter()
    out = one(*inputs)  # the first call compiles
    jax.block_until_ready(out)
    compile_single_s = time.perf_counter() - t0
    check(out, refs[0], rtol, f"{what}, single state")
    single = time_single(one, inputs, args.repeats)
    jax.clear_caches()
    return compile_s, vmapped / B * 1e6, single, compile_single_s


def growth(ns, ts) -> tuple[float, int]:
    """Exponent b of t ~ n^b by least squares in log-log, and the number of points used."""
    pts = [(n, t) for n, t in zip(ns, ts, strict=True) if t is not None and t > 0]
    if len(pts) < 2:
        return float("nan"), len(pts)
    x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(x, y, 1)[0]), len(pts)


def main():
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = args.kinds.split(",")
    quantities = args.quantities.split(",")
    for k in kinds:
        if k not in ("serial", "branching"):
            raise SystemExit(f"--kinds: expected serial and/or branching, got {k!r}")
    for qn in quantities:
        if qn not in QUANTITIES:
            raise SystemExit(f"--quantities: expected some of {list(QUANTITIES)}, got {qn!r}")
    print(
        f"jaxmb bench_scaling: sizes {sizes}, batch {args.batch or '8192 // n in [64, 1024]'}, "
        f"{args.cores} core(s), best of "
        f"{args.repeats}, model {args.model}, unrolled up to n = {args.unrolled_max}"
    )
    print(f"jax {jax.__version__}, pinocchio {pin.__version__}, devices {jax.devices()}")
    print(
        "quantities: mass_matrix vs pin.crba; bias = RNEA at qdd = 0 with gravity (h - Q_g; "
        "auto = jaxmb.inverse_dynamics(q, qd, 0)) vs pin.nonLinearEffects; forward vs pin.aba"
    )
    print(
        "compile s: jit(vmap) trace+lower+compile; vmap/single us: per state in a batch / one "
        "jitted call with dispatch; pin raw/net us: Python loop, net of a pin.neutral loop"
    )
    header = (
        f"{'n':>4} {'kind':<9} {'quantity':<11} {'path':<26} {'compile s':>9} "
        f"{'vmap us':>10} {'single us':>10} {'pin raw':>9} {'pin net':>9} "
        f"{'/raw':>7} {'/net':>7}"
    )
    print(header)
    print("-" * len(header), flush=True)
    rows, pins = [], []
    for kind in kinds:
        for n in sizes:
            B = args.batch or max(64, min(1024, 8192 // n))
            xml = random_tree_urdf(n, seed=n, branching=kind == "branching")
            model, pm = jaxmb.load_urdf(xml), pin.buildModelFromXML(xml)
            # the same joints, matched by name: the comparison is honest
            assert pm.nq == pm.nv == model.n
            names = [pm.names[i] for i in range(1, pm.njoints)]
            perm = np.array([model.coordinate_names.index(nm) for nm in names])
            assert sorted(perm.tolist()) == list(range(n))
            rng = np.random.default_rng(n)
            q = rng.uniform(-3, 3, (B, n))
            qd = rng.normal(size=(B, n)) * 0.5
            tau = rng.normal(size=(B, n)) * 10
            states = tuple(jnp.asarray(x) for x in (q, qd, tau))
            peers = pinocchio_peer(pm, q, qd, tau, perm)
            for quantity in quantities:
                peer, rtol, paths = QUANTITIES[quantity]
                one_pin, loop, base = peers[quantity]
                refs = {i: one_pin(i) for i in sorted({0, B // 2, B - 1})}
                raw = best_of(loop, args.repeats) / B * 1e6
                over = best_of(base, args.repeats) / B * 1e6
                net = raw - over if raw > over else None
                pins.append(
                    dict(
                        kind=kind,
                        n=n,
                        quantity=quantity,
                        peer=peer,
                        raw_us=raw,
                        overhead_us=over,
                        net_us=net,
                    )
                )
                for path, fn in paths.items():
                    if path.startswith("unrolled") and n > args.unrolled_max:
                        continue
                    label = f"auto ({resolved(model, quantity)})" if path == "auto" else path
                    what = f"{kind} n={n} {quantity} {label} vs pinocchio {peer}"
                    c, v, s, cs = measure(model, fn, states, refs, rtol, what)
                    row = dict(
                        kind=kind,
                        n=n,
                        frames=len(model.frames),
                        quantity=quantity,
                        path=path,
                        resolved=resolved(model, quantity) if path == "auto" else path,
                        compile_s=c,
                        vmapped_us=v,
                        single_us=s,
                        compile_single_s=cs,
                        pin_peer=peer,
                        pin_raw_us=raw,
                        pin_net_us=net,
                        ratio_raw=v / raw,
                        ratio_net=v / net if net else None,
                    )
                    rows.append(row)
                    net_s = f"{net:>9.3f}" if net else f"{'-':>9}"
                    rnet_s = f"{v / net:>7.2f}" if net else f"{'-':>7}"
                    print(
                        f"{n:>4} {kind:<9} {quantity:<11} {label:<26} {c:>9.2f} "
                        f"{v:>10.3f} {s:>10.2f} {raw:>9.3f} {net_s} {v / raw:>7.2f} {rnet_s}",
                        flush=True,
                    )

    print("\ngrowth exponents b, time ~ n^b (least squares in log-log over the sizes measured)")
    print("auto changes path with n; its exponent spans the switch")
    head = (
        f"{'kind':<9} {'quantity':<11} {'path':<26} {'points':>6} "
        f"{'vmap b':>7} {'single b':>9} {'compile b':>10}"
    )
    print(head)
    print("-" * len(head))
    fits = []
    keys = dict.fromkeys((r["kind"], r["quantity"], r["path"]) for r in rows)
    for kind, quantity, path in keys:
        sel = [r for r in rows if (r["kind"], r["quantity"], r["path"]) == (kind, quantity, path)]
        ns = [r["n"] for r in sel]
        bv, npts = growth(ns, [r["vmapped_us"] for r in sel])
        bs, _ = growth(ns, [r["single_us"] for r in sel])
        bc, _ = growth(ns, [r["compile_s"] for r in sel])
        fits.append(
            dict(
                kind=kind,
                quantity=quantity,
                path=path,
                points=npts,
                vmapped_b=bv,
                single_b=bs,
                compile_b=bc,
            )
        )
        print(f"{kind:<9} {quantity:<11} {path:<26} {npts:>6} {bv:>7.2f} {bs:>9.2f} {bc:>10.2f}")
    for kind in kinds:
        for quantity in quantities:
            sel = [p for p in pins if (p["kind"], p["quantity"]) == (kind, quantity)]
            ns = [p["n"] for p in sel]
            br, npts = growth(ns, [p["raw_us"] for p in sel])
            bn, _ = growth(ns, [p["net_us"] for p in sel])
            peer = QUANTITIES[quantity][0]
            fits.append(
                dict(
                    kind=kind,
                    quantity=quantity,
                    path=f"pinocchio {peer}",
                    points=npts,
                    raw_b=br,
                    net_b=bn,
                )
            )
            label = f"pinocchio {peer}"
            print(f"{kind:<9} {quantity:<11} {label:<26} {npts:>6} raw {br:.2f}, net {bn:.2f}")

    if args.json:
        meta = dict(
            jax=jax.__version__,
            pinocchio=pin.__version__,
            args=vars(args),
            unroll_max_frames=terms.UNROLL_MAX_FRAMES,
            aba_min_coordinates=terms.ABA_MIN_COORDINATES,
        )
        fits = [{k: None if v != v else v for k, v in f.items()} for f in fits]  # NaN: null
        with open(args.json, "w") as fh:
            json.dump(dict(meta=meta, rows=rows, pinocchio=pins, fits=fits), fh, indent=1)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
