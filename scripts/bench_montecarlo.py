"""Monte Carlo throughput: closed-loop simulated seconds per wall second for the Section IV
scenario (full arm, robust controller of eq. (18), Table II gains unless --gains) and the crane
(VDC on the A-B-C-D task), batched over perturbed plants (the shipped study configurations
data/montecarlo_*.toml), on every local CPU core (one XLA device per core, the batch sharded
over them: `jaxmb.control.montecarlo.chunk_runner`), and on a GPU wherever JAX has one.

The peer, in the same process: MuJoCo's native multi-threaded `mujoco.rollout` of a comparable
open-chain 3-DoF arm (scripts/mujoco_rollout_peer.py) at an accurate fixed step, open loop: MuJoCo
has no model-based controller in its loop, and its arm has no closed chain, so the comparison
flatters it. Also printed: what limits jaxmb's rate (solver steps per simulated second, and the
cost of one batched vector-field evaluation, plant plus controller).

The Section IV study solves with the shipped config's Rodas4 (linearly implicit); the same
batch with Tsit5 at the same tolerances runs in the same process as the explicit peer.

    python scripts/bench_montecarlo.py [--batches 1,100,10000] [--t-final 20] [--t-final-large 20]
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import shipped_flags  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--batches", default="1,100,10000", help="batch sizes")
parser.add_argument("--t-final", type=float, default=20.0, help="simulated s per run (arm)")
parser.add_argument(
    "--t-final-large", type=float, default=20.0, help="simulated s at batches >= 1000 (time)"
)
parser.add_argument(
    "--explicit-batch", type=int, default=100, help="batch of the Tsit5 peer run (0: none)"
)
parser.add_argument("--crane-t-final", type=float, default=18.0, help="simulated s (crane)")
parser.add_argument("--crane-batches", default="1,100", help="batch sizes for the crane")
parser.add_argument("--lanes", type=int, default=64, help="samples vmapped together per device")
parser.add_argument("--gains", default=None, help="gains.json of `jaxmb tune` for the arm")
parser.add_argument("--no-mujoco", action="store_true", help="skip the MuJoCo peer")
args = parser.parse_args()
cores = os.cpu_count() or 1
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={cores}"
).strip()
shipped_flags()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import numpy as np  # noqa: E402

from jaxmb.control import study_config  # noqa: E402
from jaxmb.control.montecarlo import chunk_runner  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def study_for(name: str, t_final: float, method: str | None = None):
    cfg = study_config.load_config(REPO / "data" / f"montecarlo_{name}.toml")
    if method is not None:
        cfg.setdefault("solver", {})["method"] = method
    cfg["study"]["t_final"] = t_final
    cfg["study"]["settle"] = min(cfg["study"].get("settle", 0.0), t_final / 2)
    if args.gains and name == "section_iv":
        cfg["controller"] = {"gains": str(Path(args.gains).resolve())}
    study, ctrl, *_ = study_config.build_study(cfg)
    return study, ctrl


def rate(name: str, batch: int, t_final: float, devices, method: str | None = None) -> dict:
    study, ctrl = study_for(name, t_final, method)
    lanes = max(1, min(args.lanes, batch // len(devices)))
    run, granule = chunk_runner(study, ctrl, lanes=lanes, devices=devices)
    size = -(-batch // granule) * granule
    idx = np.arange(size)
    t0 = time.perf_counter()
    jax.block_until_ready(run(idx))  # compile + first run
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(run(idx + size))
    wall = time.perf_counter() - t0
    steps = np.asarray(out["num_steps"])
    failed = np.asarray(out["failed"])
    return {
        "batch": size,
        "t_final": t_final,
        "wall_s": wall,
        "compile_and_first_s": first,
        "rate": size * t_final / wall,
        "steps_per_sim_s": float(steps.mean() / t_final),
        "max_steps_per_sim_s": float(steps.max() / t_final),
        "failed": int(failed.sum()),
        "devices": f"{len(devices)} x {devices[0].platform}",
        "lanes": lanes,
        "method": study.options.method,
    }


def vector_field_cost(devices, n: int = 10_000) -> float:
    """Seconds per state of one batched plant + controller evaluation (the Section IV loop)."""
    from jaxmb.algorithms.dynamics import forward_dynamics
    from jaxmb.simulation import desired_state

    study, ctrl = study_for("section_iv", 2.0)
    sc = study.scenario
    rng = np.random.default_rng(0)
    q = jax.device_put(np.asarray(sc.q0) + 0.01 * rng.normal(size=(n, 3)), devices[0])
    qd = jax.device_put(0.1 * rng.normal(size=(n, 3)), devices[0])

    @jax.jit
    def f(q, qd):
        def one(q_, qd_):
            u = ctrl(0.3, q_, qd_, desired_state(sc.reference, 0.3))
            return forward_dynamics(sc.plant, q_, qd_, u, sc.disturbance.wrenches_at(0.3))

        return jax.vmap(one)(q, qd)

    jax.block_until_ready(f(q, qd))
    t0 = time.perf_counter()
    for _ in range(5):
        jax.block_until_ready(f(q, qd))
    return (time.perf_counter() - t0) / 5 / n


def show(label: str, r: dict) -> None:
    print(
        f"{label:<34}{r['batch']:>7}{r['t_final']:>7.1f}{r['rate']:>12.1f}{r['wall_s']:>10.2f}"
        f"{r['steps_per_sim_s']:>10.0f}{r['max_steps_per_sim_s']:>10.0f}{r['failed']:>7}"
        f"{r['compile_and_first_s']:>9.1f}"
    )


def main() -> None:
    cpus = jax.devices("cpu")
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    print(f"jax {jax.__version__}, {len(cpus)} CPU device(s) on {cores} core(s), "
          f"{len(gpus)} GPU(s); float64; Section IV solver: "
          f"{study_for('section_iv', 1.0)[0].options.method}")  # fmt: skip
    head = (f"{'':<34}{'batch':>7}{'T s':>7}{'sim s/s':>12}{'wall s':>10}{'steps/s':>10}"
            f"{'max':>10}{'fail':>7}{'compile':>9}")  # fmt: skip
    print(head)
    results = {}
    for b in map(int, args.batches.split(",")):
        t = args.t_final if b < 1000 else args.t_final_large
        results[("arm", b)] = r = rate("section_iv", b, t, cpus)
        show(f"Section IV, {len(cpus)} CPU device(s)", r)
        if gpus:
            show("Section IV, GPU", rate("section_iv", b, t, gpus[:1]))
    if args.explicit_batch:
        b = args.explicit_batch
        r = rate("section_iv", b, args.t_final, cpus, method="tsit5")
        show("Section IV, Tsit5 (peer)", r)
        if ("arm", b) in results:
            print(f"  {results[('arm', b)]['method']} / Tsit5 at batch {b}, same tolerances: "
                  f"{results[('arm', b)]['rate'] / r['rate']:.2f}x")  # fmt: skip
    for b in map(int, args.crane_batches.split(",")):
        r = rate("crane", b, args.crane_t_final, cpus)
        show(f"crane, {len(cpus)} CPU device(s)", r)
        if gpus:
            show("crane, GPU", rate("crane", b, args.crane_t_final, gpus[:1]))
    vf = vector_field_cost(cpus)
    print(f"\none Section IV plant + controller evaluation, batched over 10^4 states on one "
          f"device: {vf * 1e6:.2f} us per state")  # fmt: skip
    if not args.no_mujoco:
        try:
            import mujoco  # noqa: F401  (the peer imports it only when it runs)
            from mujoco_rollout_peer import rollout_rate
        except ImportError as err:
            print(f"\nMuJoCo peer skipped: {err} (pip install mujoco, or --no-mujoco)")
            return
        print("\nMuJoCo mujoco.rollout, open loop (no controller in the loop), same cores:")
        for b in map(int, args.batches.split(",")):
            t = args.t_final if b < 1000 else args.t_final_large
            m = rollout_rate(b, t_sim=t)
            print(f"  batch {b:>6}: {m['sim_s_per_wall_s']:>10.1f} sim s/s "
                  f"({m['integrator']}, step {m['timestep']:g} s, {m['nthread']} threads, "
                  f"step error {m['step_error_rad']:.1e} rad)")  # fmt: skip
            if ("arm", b) in results:
                print(f"  jaxmb / MuJoCo at batch {b}: "
                      f"{results[('arm', b)]['rate'] / m['sim_s_per_wall_s']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
