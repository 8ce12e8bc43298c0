"""What the run-time input checks cost: the Section IV closed loop (20 s) and the arm's forward
dynamics vmapped over 10^4 states, with the checks (`jaxmb.multibody.checks.check_finite` and
`check_all_finite` on the state arguments, as shipped) and with them replaced by the identity,
in the same process. (One `equinox.error_if` per argument cost 40 % of the batched forward
dynamics, as each splits the fused computation under vmap; one per call costs a few percent.)

    python scripts/bench_input_checks.py [--repeats 5]
"""

import argparse
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--repeats", type=int, default=5)
args = parser.parse_args()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import sys  # noqa: E402

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jaxmb  # noqa: E402
from jaxmb.control import section_iv  # noqa: E402
from jaxmb.multibody import checks  # noqa: E402
from jaxmb.simulation import integrate as simulate_module  # noqa: E402


def _users(name: str) -> tuple:
    """Every loaded jaxmb module that imported the check ``name`` (the bare run replaces each
    one's reference), found rather than listed: the checks move with the house's layout."""
    fn = getattr(checks, name)
    return tuple(
        m for k, m in list(sys.modules.items())
        if k.split(".")[0] in ("jaxmb", "control") and m is not checks
        and getattr(m, name, None) is fn
    )  # fmt: skip


MODULES, ALL = _users("check_finite"), _users("check_all_finite")


def unchecked(x, name):
    del name
    return jnp.asarray(x)


def compiled():
    """The two workloads, compiled ahead of time (a `Compiled` keeps its executable whatever
    later traces see), with their arguments."""
    sc = section_iv()
    ts = jnp.linspace(0.0, 20.0, 2001)
    dyn, static = eqx.partition(sc.controller, eqx.is_array)

    def loop(d):
        c = eqx.combine(d, static)
        return simulate_module.simulate(
            sc.plant, c, sc.reference, sc.q0, sc.qd0, ts, disturbance=sc.disturbance
        ).q

    arm = jaxmb.models.series_parallel_3dof(full=True)
    noise = jax.random.normal(jax.random.key(0), (10_000, 3))
    q = jnp.array([0.1, 0.35, 0.1]) + jnp.array([0.2, 0.1, 0.01]) * noise
    fd = jax.vmap(lambda q: jaxmb.forward_dynamics(arm, q, 0.1 * q, q))
    return [(jax.jit(loop).lower(dyn).compile(), dyn), (jax.jit(fd).lower(q).compile(), q)]


checked = compiled()
saved = {m: m.check_finite for m in MODULES}
saved_all = {m: m.check_all_finite for m in ALL}
for m in MODULES:
    m.check_finite = unchecked
for m in ALL:
    m.check_all_finite = lambda fields: tuple(jnp.asarray(x) for x in fields.values())
jax.clear_caches()
bare = compiled()
for m, f in saved.items():
    m.check_finite = f
for m, f in saved_all.items():
    m.check_all_finite = f

times = {(k, w): [] for k in ("checked", "bare") for w in (0, 1)}
for _ in range(args.repeats):  # interleaved, so that the machine's load hits both alike
    for kind, pair in (("checked", checked), ("bare", bare)):
        for w, (fn, x) in enumerate(pair):
            jax.block_until_ready(fn(x))
            t0 = time.perf_counter()
            jax.block_until_ready(fn(x))
            times[kind, w].append(time.perf_counter() - t0)
checked = [min(times["checked", w]) for w in (0, 1)]
bare = [min(times["bare", w]) for w in (0, 1)]
print(f"Section IV loop, 20 s: checked {checked[0]:.3f} s, unchecked {bare[0]:.3f} s, "
      f"ratio {checked[0] / bare[0]:.3f}")  # fmt: skip
print(f"forward dynamics, 10^4 states: checked {checked[1] * 1e3:.2f} ms, unchecked "
      f"{bare[1] * 1e3:.2f} ms, ratio {checked[1] / bare[1]:.3f}")  # fmt: skip
