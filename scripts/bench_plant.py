"""A machine file's hydraulic plant (the knuckle-telescope boom: three cylinders, cylinder loops
as a coordinate map): the cost of one vector-field evaluation, single and vmapped over states,
and of its piston kinematics.

The peer, run in the same process: each mount on its own, as a user would call it
(`CylinderMount.position_and_jacobian`, reverse mode through a full kinematic pass per
mount), against the plant's one shared pass with ``J_x`` by forward mode
(`HydraulicPlant.piston_kinematics`). The peer is today's per-mount API, which shares the
fused products, not the code before the shared pass: the ratio is the pass's own share of the
gain (dev/performance-history.md has the before-and-after). Everything runs inside `failures_as_nan`, as the CLI
runs it: outside it the input checks are host callbacks inside the loop and distort the cost.

    python scripts/bench_plant.py [--batch 64] [--calls 4000] [--cores 2] [--repeats 5]
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import best_of, pin_cores  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--batch", type=int, default=64, help="states of the vmapped run")
parser.add_argument("--calls", type=int, default=4000, help="evaluations per timed loop")
parser.add_argument("--cores", type=int, default=2)
parser.add_argument("--repeats", type=int, default=5)
args = parser.parse_args()
pin_cores(args.cores)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

jax.config.update("jax_enable_x64", True)

from jaxmb.io.machine import load_machine  # noqa: E402
from jaxmb.multibody.checks import failures_as_nan  # noqa: E402

MACHINE = Path(__file__).parent.parent / "data/machines/knuckle_telescope/knuckle_telescope.toml"


def per_call(step, plant, y0, batch: int | None) -> float:
    """Microseconds per evaluation (per state when batched) of ``step(plant, i, y)`` in a
    compiled loop that feeds each result back, so that nothing is hoisted out of it. The plant
    is an argument, as in identification and Monte Carlo studies: its parameters are not
    constants that the compiler could fold."""
    n = args.calls
    if batch is None:
        run = jax.jit(lambda p, y: jax.lax.fori_loop(0, n, lambda i, y: step(p, i, y), y))
        y = y0
    else:
        run = jax.jit(
            lambda p, y: jax.lax.fori_loop(
                0, n, lambda i, y: jax.vmap(lambda s: step(p, i, s))(y), y
            )
        )
        spread = 1 + 1e-3 * jnp.linspace(-1, 1, batch)
        y = jax.tree.map(
            lambda a: (
                jnp.broadcast_to(a, (batch, *a.shape)) * spread.reshape((batch,) + (1,) * a.ndim)
            ),
            y0,
        )
    return (
        best_of(lambda: jax.block_until_ready(run(plant, y)), args.repeats) / n / (batch or 1) * 1e6
    )


def per_mount(self, q, qd):
    """The peer: each mount on its own, reverse mode through its own kinematic passes."""
    xs, Js = zip(
        *(a.mount.position_and_jacobian(self.model, q) for a in self.actuators), strict=True
    )
    J = jnp.stack(Js)
    return jnp.stack(xs), J @ qd, J


def main():
    plant = load_machine(MACHINE).plant
    q0 = jnp.array([0.3, -0.4, 0.5])
    y0 = plant.initial_state(q0, jnp.array([0.15, -0.2, 0.1]))
    # commands that vary along the loop, as a log's do (constant ones fold into the program)
    freq = jnp.arange(1.0, len(plant.command_names) + 1)

    def vf(p, i, y):
        t = 1.0 + i * 1e-3
        return jax.tree.map(
            lambda a, b: a + 1e-9 * b, y, p.vector_field(t, y, 5 * jnp.sin(freq * t))
        )

    print(f"{MACHINE.name}: {len(plant.actuators)} cylinders, n = {plant.n}, {args.cores} cores")
    rows = [
        (
            "vector field, one pass",
            per_call(vf, plant, y0, None),
            per_call(vf, plant, y0, args.batch),
        )
    ]
    shared = type(plant).piston_kinematics
    type(plant).piston_kinematics = per_mount  # traced afresh below: the peer's kinematics
    try:
        rows.append(
            (
                "vector field, each mount (peer)",
                per_call(vf, plant, y0, None),
                per_call(vf, plant, y0, args.batch),
            )
        )
    finally:
        type(plant).piston_kinematics = shared
    print(f"{'':32s} {'single us':>10s} {f'x{args.batch} us/state':>16s}")
    for name, single, many in rows:
        print(f"{name:32s} {single:10.2f} {many:16.2f}")
    print(
        f"peer / one pass: {rows[1][1] / rows[0][1]:.2f}x single, {rows[1][2] / rows[0][2]:.2f}x vmapped"
    )


if __name__ == "__main__":
    with failures_as_nan():
        main()
