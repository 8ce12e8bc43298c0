"""Cost of one forward-dynamics evaluation of the full 3-DoF arm by Aghili (2005)'s projection
route (five dependent coordinates, constraint Jacobian by autodiff, SVD pseudo-inverse) against
the minimal-coordinate route of the core (coordinate map, CRBA + RNEA, Cholesky), in one process.

Two measurements, both float64 on the same pinned core:
- single call: one jitted evaluation at a time (latency, dominated by dispatch);
- throughput: `jax.vmap` over N states (default 10^4), chunked with `lax.map`.
The ratio projection / minimal above 1 means the projection route is slower.

    python scripts/bench_projection.py [--states 10000] [--cores 1] [--repeats 5]
"""

import argparse

from benchkit import best_of, pin_cores

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--states", type=int, default=10_000)
parser.add_argument("--cores", type=int, default=1, help="cores (process affinity)")
parser.add_argument("--repeats", type=int, default=5)
parser.add_argument("--batch", type=int, default=512, help="states per vmapped chunk")
args = parser.parse_args()

pin_cores(args.cores)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmb  # noqa: E402
from jaxmb.constraints import projection as pj  # noqa: E402

MIN = jaxmb.models.series_parallel_3dof(full=True)
DEP = jaxmb.models.series_parallel_3dof_dependent()

rng = np.random.default_rng(0)
N = args.states
q = jnp.asarray(
    np.column_stack([rng.uniform(-3, 3, N), rng.uniform(-1, 1.5, N), rng.uniform(0, 0.2, N)])
)
qd = jnp.asarray(rng.normal(size=(N, 3)) * np.array([1.0, 1.0, 0.1]))
u = jnp.asarray(rng.normal(size=(N, 3)) * np.array([100.0, 1000.0, 5000.0]))
qhat = jax.vmap(lambda x: jaxmb.augmented_coordinates(MIN, x))(q)
qhat_d = jax.vmap(lambda x, v: jaxmb.coordinate_map_jacobian(MIN, x) @ v)(q, qd)
f = jnp.stack([u[:, 0], u[:, 1], jnp.zeros(N), jnp.zeros(N), u[:, 2]], axis=1)


def minimal(x, v, w):
    return jaxmb.forward_dynamics(MIN, x, v, w)


routes = {"minimal (core)": (minimal, (q, qd, u))}
for form in pj.INERTIA_FORMS:
    routes[f"projection, {form}"] = (
        lambda x, v, w, form=form: pj.forward_dynamics(DEP, x, v, w, inertia=form),
        (qhat, qhat_d, f),
    )

print(f"arm forward dynamics, float64, {args.cores} core(s), best of {args.repeats}")
print(f"{'route':<26} {'single call us':>15} {'vmapped us/state':>17} {'ratio':>7}")
base = None
for name, (fn, data) in routes.items():
    single = jax.jit(fn)
    one = tuple(x[0] for x in data)
    t_single = best_of(lambda s=single, o=one: s(*o).block_until_ready(), args.repeats * 20)

    @jax.jit
    def batched(*xs, fn=fn):
        return jax.lax.map(lambda a: fn(*a), xs, batch_size=args.batch)

    t_batch = best_of(lambda b=batched, d=data: b(*d).block_until_ready(), args.repeats) / N
    base = base or t_batch
    print(f"{name:<26} {t_single * 1e6:>15.1f} {t_batch * 1e6:>17.2f} {t_batch / base:>7.2f}")
    jax.clear_caches()
