"""Identification benchmarks, each against a peer run in the same process:

1. regressor route on a 60 s, 1 kHz log of a 6-joint robot (random URDF, Fourier excitation,
   noisy torques): jaxmb's whole route (filtering, regressor, base parameters, WLS, the
   physically consistent fit) next to the bare minimum a user could hand-write with Pinocchio
   (`computeJointTorqueRegressor` at every sample, then one numpy least-squares solve);
2. a 60 s, 1 kHz synthetic crane log (scripts/make_crane_logs.py's excitation, made longer):
   stage 1 (the mechanics by the regressor route, the payload not told), then the output-error
   route: jaxmb's fit (forward-mode Jacobian, one pass per evaluation) next
   to the same fit with a finite-difference Jacobian (P + 1 simulations per evaluation, what
   rollout-based tools such as mujoco.sysid do);
3. the replay's sensitivity that the validation's drift needs (the crane's 20 s validation log,
   16 parameters): jaxmb's chained pieces (`drift.chained_sensitivity`) next to the single
   20 s forward-mode run (`drift.replay_sensitivity`), and their largest difference;
4. the KR300 recordings (real): identify from trajectory A, predict B and C; jaxmb next to
   `mujoco.sysid` (`pip install "mujoco[sysid]"`; scripts/mujoco_sysid_peer.py) and the
   authors' own model: joint-torque RMSE per joint and wall time;
5. a campaign of a three-cylinder machine with a real valve's effects (the mobile example of
   data/machines/mobile_knuckle: overlap, delay, spool lag, a load-sensing supply, transducer
   offsets): `jaxmb identify` of one 40 s log next to two (the empty bucket, then an unknown
   load; scripts/make_machine_logs.py's machine and experiments), each run twice in the
   process, so the second is the run after compiling; the structure given (every effect and
   the transducers' offsets fitted, no leakage, no encoder offsets, mechanics fixed, no long
   refit), the programs each compiled (over 1 s) counted.

    python scripts/bench_identify.py [--skip regressor,output_error,drift,kr300,campaign]
                                     [--rollout]
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import pin_cores  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--skip", default="", help="comma-separated parts to skip")
parser.add_argument("--cores", type=int, default=2)
parser.add_argument("--seconds", type=float, default=60.0, help="log length of parts 1-2")
parser.add_argument("--rollout", action="store_true", help="also mujoco.sysid's rollout fit")
args = parser.parse_args()
skip = set(filter(None, args.skip.split(",")))
pin_cores(args.cores)
# one XLA device per core, as `jaxmb identify` splits the CPU: the output error's segments are
# shared among them
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={args.cores}"
).strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmb  # noqa: E402
from jaxmb.identification import output_error as oe  # noqa: E402
from jaxmb.identification import rigid  # noqa: E402
from jaxmb.identification.excitation import FourierTrajectory  # noqa: E402
from jaxmb.identification.hydraulic_route import _plant_for, hydraulic_selectors  # noqa: E402
from jaxmb.io.logs import Log, read_log, schema_for  # noqa: E402
from jaxmb.multibody.checks import failures_as_nan  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def regressor_route():
    import pinocchio as pin

    from jaxmb.models import random_tree_urdf

    urdf = random_tree_urdf(6, 7, prismatic_every=0, fixed_every=0)
    model = jaxmb.load_urdf(urdf)
    rng = np.random.default_rng(0)
    fs, n = 1000.0, model.n
    traj = FourierTrajectory(rng.uniform(-0.5, 0.5, n), rng.normal(0, 0.5, (n, 5)),
                             rng.normal(0, 0.5, (n, 5)), 2 * np.pi / 10)  # fmt: skip
    t = np.arange(0.0, args.seconds, 1 / fs)
    q, qd, qdd = (np.asarray(x) for x in traj.sample(jnp.asarray(t)))
    tau = np.asarray(jax.vmap(lambda a, b, c: jaxmb.inverse_dynamics(model, a, b, c))(q, qd, qdd))
    tau = tau + 2.0 * qd + 0.05 * rng.normal(size=tau.shape)  # viscous friction and noise
    names = model.coordinate_names
    log = Log(t, {**{c: q[:, i] for i, c in enumerate(names)},
                  **{f"tau_{c}": tau[:, i] for i, c in enumerate(names)}})  # fmt: skip
    print(f"\n1. regressor route: 6 joints, {args.seconds:g} s at 1 kHz ({t.size} samples)")
    for method in ("wls", "consistent"):
        t0 = time.perf_counter()
        rigid.identify_rigid(model, log, method=method, cutoff=10.0, terms=("viscous",))
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        res = rigid.identify_rigid(model, log, method=method, cutoff=10.0, terms=("viscous",))
        again = time.perf_counter() - t0
        print(f"   jaxmb {method:>10}: {first:6.2f} s first call (with compilation), "
              f"{again:6.2f} s again; cond {res.fit.condition:.3g}")  # fmt: skip
    # the peer: Pinocchio's regressor at every sample (derivatives given, no filtering), lstsq
    pmodel = pin.buildModelFromXML(urdf)
    data = pmodel.createData()
    t0 = time.perf_counter()
    rows = [pin.computeJointTorqueRegressor(pmodel, data, q[k], qd[k], qdd[k]).copy()
            for k in range(t.size)]  # fmt: skip
    W = np.concatenate(rows)
    W = np.concatenate([W, np.kron(np.ones((t.size, 1)), np.eye(n)) * qd.reshape(-1, 1)], 1)
    np.linalg.lstsq(W, tau.reshape(-1), rcond=None)
    peer = time.perf_counter() - t0
    print(f"   peer (Pinocchio regressor + numpy lstsq, no filtering, no base parameters, no "
          f"statistics): {peer:.2f} s; jaxmb consistent / peer = {again / peer:.2f}")  # fmt: skip


def output_error_route():
    import make_crane_logs as mk

    print(f"\n2. output-error route: the crane, {args.seconds:g} s at 1 kHz, 12 parameters")
    rng = np.random.default_rng([0, 9])
    ref, _ = mk.multisine(rng, args.seconds, mk.Q0, [[0.20, 0.08, 0.03], [0.25, 0.10, 0.04]],
                          [[0.07, 0.23, 0.53], [0.11, 0.31, 0.71]])  # fmt: skip
    ctrl = mk.make_controller(rng, 0.4)
    true = mk.true_plant()
    tr, u, _ = mk.run_experiment(true, ref, ctrl, args.seconds, mk.Q0)
    cols = mk.sensor_columns(rng, true, tr, u)
    # stage 1: the mechanics (booms, cylinder bodies, payload not told) from the pressures
    from jaxmb.identification.hydraulic_route import refined_selectors
    from jaxmb.identification.long_refit import refit_long
    from jaxmb.identification.mechanics import identify_mechanics
    from jaxmb.identification.model_choice import choose_and_fit
    from jaxmb.identification.start_states import head_segments
    from jaxmb.io.machine import load_machine

    log = Log(cols["t"], {k: v for k, v in cols.items() if k != "t"}, {})
    crane = load_machine("crane")

    def both_stages():
        """What `jaxmb identify --mechanics fixed --leakage none --long-refit yes` computes:
        stage 1, then the output-error fit of the default selectors from stage 1's plant,
        weighted by each signal's noise, the segments' start states estimated after each
        pilot (`model_choice.choose_and_fit` with nothing to choose), then the refit on long
        segments (`long_refit`)."""
        t0 = time.perf_counter()
        st1 = identify_mechanics(crane, log)
        t1 = time.perf_counter()
        plant = _plant_for(crane, log, st1)
        seg = oe.make_segments(plant, cols)
        heads = head_segments(plant, cols, seg)
        res, spec, seg, _ = choose_and_fit(
            plant, hydraulic_selectors(plant), (), (), seg, heads=heads, max_evaluations=20
        )
        t2 = time.perf_counter()
        refine = refined_selectors(plant, st1)
        long = refit_long(plant, res, spec, cols, np.asarray(seg.scale), refine, choice="yes")
        t3 = time.perf_counter()
        return st1, plant, spec, seg, res, t1 - t0, t2 - t1, t3 - t2, long[0]

    t0 = time.perf_counter()
    both_stages()
    first = time.perf_counter() - t0
    st1, plant, spec, seg, res, s1, s2, s3, long = both_stages()
    print(f"   {len(jax.devices())} XLA device(s); first run {first:.1f} s (with compilation)")
    print(
        f"   stage 1 (mechanics, {len(st1.names)} parameters): {s1:.1f} s; payload "
        f"{st1.payload_mass:.2f} kg (true {mk.PAYLOAD:g}, std {st1.payload_mass_std:.2f})"
    )
    print(
        f"   stage 2 (output error, {len(spec)} parameters; pilots, rescaling and start states until "
        f"they agree, then the fit): {s2:.1f} s, the second {res.n_evaluations} evaluations, cost {res.cost0:.4g} -> "
        f"{res.cost:.4g}"
    )
    print(f"   long refit ({len(long.names)} parameters, {long.n_evaluations} evaluations): "
          f"{s3:.1f} s")  # fmt: skip
    print(f"   both stages after compilation: {s1 + s2 + s3:.1f} s, without the long refit "
          f"{s1 + s2:.1f} s (goal 60 s)")  # fmt: skip
    theta = jnp.asarray(res.theta)

    def rj(th):  # jitted inside, one call per block (a jit around it would unroll the blocks)
        return oe.residuals_and_jacobian(th, plant, spec, seg, 1e-3)

    jax.block_until_ready(rj(theta))
    t0 = time.perf_counter()
    jax.block_until_ready(rj(theta))
    per_jac = time.perf_counter() - t0
    # the peer shares the segments among the devices too
    rf = jax.jit(lambda th: oe.per_device(
        lambda t, p, sg: oe.residuals(t, p, spec, sg).reshape(sg.targets.shape), th, plant, seg
    ))  # fmt: skip
    jax.block_until_ready(rf(theta))
    t0 = time.perf_counter()
    for k in range(len(spec) + 1):  # finite differences: one simulation per column, plus base
        jax.block_until_ready(rf(theta.at[k % len(spec)].add(1e-6)))
    per_fd = time.perf_counter() - t0
    print(f"   one residual + Jacobian evaluation: jaxmb {per_jac:.2f} s, finite-difference peer "
          f"{per_fd:.2f} s; ratio {per_jac / per_fd:.2f}")  # fmt: skip


def replay_drift():
    from jaxmb.identification import drift
    from jaxmb.identification.hydraulic_route import log_columns
    from jaxmb.identification.model_choice import spec_for
    from jaxmb.io.machine import load_machine

    crane = load_machine("crane", payload=60.0)
    plant = oe.strong_types(crane.plant)
    log = ROOT / "data/synthetic_crane/synthetic_crane_payload_validation.parquet"
    cols = log_columns(crane.read_log(log))
    names = hydraulic_selectors(plant, leakage=True) + ("body.payload.mass", "body.L.mass")
    spec = spec_for(names)
    theta = np.asarray(oe.initial_theta(plant, spec)) + 0.01
    noise = np.array([2e-5, 2e-5, 3e4, 3e4, 3e4, 3e4])  # the crane logs' noise levels (SI)
    seg = oe.free_run_segment(plant, cols)
    span = float(cols["t"][-1] - cols["t"][0])
    print(f"\n3. the replay's sensitivity: the crane, {span:g} s, {len(spec)} parameters")
    times = {}
    for who in ("chain", "single", "chain", "single"):  # interleaved, the second of each
        t0 = time.perf_counter()
        if who == "chain":
            t, G = drift.chained_sensitivity(theta, plant, spec, cols, noise)
        else:
            G1 = np.asarray(drift.replay_sensitivity(jnp.asarray(theta), plant, spec, seg))
        times[who] = time.perf_counter() - t0
    at = np.searchsorted(np.asarray(seg.ts[0]), t)
    err = np.max(np.abs(G - G1[at]), axis=(0, 1)) / np.max(np.abs(G1[at]), axis=(0, 1))
    print(f"   jaxmb chained {times['chain']:.2f} s, single run {times['single']:.2f} s; ratio "
          f"{times['chain'] / times['single']:.2f}; largest difference {err.max():.1e} of a "
          "column's largest")  # fmt: skip


def kr300():
    from jaxmb.identification.coulomb_width import choose_coulomb_width
    from jaxmb.identification.cutoff_choice import choose_cutoff
    from jaxmb.identification.identify import resolve_model
    from jaxmb.models.catalog import CATALOG

    print("\n4. KUKA KR300 recordings (real): identify from A, predict B and C, with the defaults")
    name, model, _ = resolve_model("kr300")
    sch = schema_for(model)
    logs = {k: read_log(ROOT / f"data/kr300/kr300_traj_{k}.parquet", sch) for k in "ABC"}
    ff = {k: read_log(ROOT / f"data/kr300/kr300_traj_{k}_authors_ff.parquet") for k in "ABC"}
    t0 = time.perf_counter()  # what `jaxmb identify A --model kr300` does, its choices included
    names = model.coordinate_names
    cutoff = choose_cutoff([logs["A"]], names)["cutoff_hz"]
    width = choose_coulomb_width([logs["A"]], names, cutoff)["coulomb_width"]
    res = rigid.identify_rigid(
        model, logs["A"], cutoff=cutoff, coulomb_width=width, known_forces=CATALOG[name].known_forces(),
        drives=rigid.Drives(gear_ratio=CATALOG[name].gear_ratios()), prior_weight=0.1,
    )  # fmt: skip
    ours_s = time.perf_counter() - t0
    print(f"   chosen from A: cutoff {cutoff:g} Hz, Coulomb width {width:.3g} rad/s")
    cols = [f"tau_q{i}" for i in range(1, 7)]
    # two sample sets: every sample, and those 3 / cutoff s in from each end (what the report's
    # validation RMSE is taken on: the filter's derivatives are poorest within a period of the
    # ends)
    preds, table = {}, {}
    for k in "ABC":
        s, tau = rigid.predict_torques(res, logs[k], cutoff=cutoff, edge=0.0)
        trimmed = rigid.predict_torques(res, logs[k], cutoff=cutoff)[0].index
        preds[k] = (s.at("tau"), {"jaxmb": tau, "authors' model": ff[k].stack(cols)}, trimmed)
    times = {"jaxmb": ours_s}
    try:
        import mujoco  # noqa: F401  (the peer imports it only when it runs)
        import mujoco_sysid_peer as mj
    except ImportError as err:
        print(f"   mujoco.sysid not available ({err}); pip install 'mujoco[sysid]'")
        mj = None
    if mj is not None:
        methods = ["inverse"] + (["rollout"] if args.rollout else [])
        train = mj.load_trajectory("A")
        for m in methods:
            t0 = time.perf_counter()
            r = mj.identify(train, method=m)
            times[f"mujoco.sysid {m}"] = time.perf_counter() - t0
            for k in "ABC":
                peer = mj.load_trajectory(k)
                np.testing.assert_allclose(peer["tau"], preds[k][0], rtol=1e-12)  # same samples
                preds[k][1][f"mujoco.sysid {m}"] = mj.predict_torques(r, peer)
    for label in ("every sample", f"samples {3 / cutoff:g} s in from each end"):
        print(f"   on {label}: joint-torque RMSE, N m")
        print(f"   {'':24}{'traj':>5}" + "".join(f"{c:>9}" for c in cols) + f"{'sum':>9}")
        for k, (meas, by, trimmed) in preds.items():
            keep = slice(None) if label == "every sample" else trimmed
            for who, tau in by.items():
                e = np.sqrt(np.mean((meas[keep] - tau[keep]) ** 2, 0))
                table[(label, who, k)] = e
                print(f"   {who:24}{k:>5}" + "".join(f"{x:9.1f}" for x in e) + f"{e.sum():9.1f}")
    print("   wall time of the identification: "
          + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))  # fmt: skip


def campaign():
    from jaxmb.io.machine import load_machine

    seconds = 40.0
    toml = ROOT / "data/machines/mobile_knuckle/mobile_knuckle.toml"
    machine = load_machine(toml)
    print(f"\n5. a campaign: {machine.name}, {seconds:g} s logs, the structure given")
    with tempfile.TemporaryDirectory(prefix="jaxmb-campaign-") as folder:
        _campaign(machine, toml, seconds, Path(folder))


def _campaign(machine, toml, seconds, folder):
    import make_machine_logs as mk

    from jaxmb import cli

    # a cache folder of this run's own: the first run compiles, whatever an earlier one kept
    os.environ["JAXMB_COMPILE_CACHE"] = str(folder / "xla")
    rng = np.random.default_rng(0)
    true = mk.true_plant(machine.plant, rng)
    offsets = {f"{c}_{a.name}": float(rng.uniform(-1, 1)) * 1e5
               for a in true.actuators for c in ("p_a", "p_b")}  # fmt: skip
    limits = mk.joint_limits(machine.urdf_path, true.model.coordinate_names)
    logs = []
    for k, (stem, kg, named) in enumerate((("empty", 0.0, True), ("loaded", 180.0, False))):
        logs.append(folder / f"{stem}.parquet")
        mk.write_experiment(logs[-1], machine, true, np.random.default_rng([0, k]), seconds,
                            0.25, limits, kg, named=named, offsets=offsets)  # fmt: skip
    compiled = []

    def listen(event, duration, **kw):
        if event == "/jax/core/compile/backend_compile_duration" and duration > 1.0:
            compiled.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listen)
    given = ["--mechanics", "fixed", "--leakage", "none", "--valve-effects", "fitted",
             "--offsets", "fitted", "--encoder-offsets", "none", "--long-refit", "no",
             "--quiet"]  # fmt: skip
    times = {}
    for who, fit in (("one log", logs[1:]), ("two logs", logs)):
        for run in ("first", "again"):
            compiled.clear()
            t0 = time.perf_counter()
            out = folder / f"{who.replace(' ', '_')}_{run}"
            cli.main(["identify", *map(str, fit), "--model", str(toml), "--out", str(out), *given])
            times[who, run] = time.perf_counter() - t0
            est = json.loads((out / "summary.json").read_text())["payload"]["mass_kg"]
            print(f"   {who}, {run} run: {times[who, run]:.1f} s, {len(compiled)} programs "
                  f"compiled (or read back) over 1 s ({sum(compiled):.0f} s); payload "
                  f"{est:.2f} kg (180)")  # fmt: skip
    ratio = times["two logs", "again"] / times["one log", "again"]
    print(f"   two logs / one log after compiling: {ratio:.2f} (goal at most 2)")


# as `jaxmb identify` runs: a failed run-time check gives NaN (the solvers' status says so)
# instead of a host callback in every compiled step
with tempfile.TemporaryDirectory(), failures_as_nan():
    if "regressor" not in skip:
        regressor_route()
    if "output_error" not in skip:
        output_error_route()
    if "drift" not in skip:
        replay_drift()
    if "kr300" not in skip:
        kr300()
    if "campaign" not in skip:
        campaign()
