"""Per-state cost of jaxmb's mass_matrix, bias_forces and forward_dynamics batched over many
states, next to Pinocchio's crba, nonLinearEffects and aba on the same states, in one process.

Both run on the same single core by default (the process is pinned, XLA runs single-threaded),
so the printed ratios compare algorithms and implementations, not core counts. Timings are the
best of several repeats; the ratio jaxmb / Pinocchio below 1 means jaxmb is faster per state.

The arm is a closed chain, which Pinocchio cannot express through a coordinate map; its peer is
Pinocchio on the arm's open augmented tree plus the map, done the textbook way in numpy:
``Gamma = E^T crba(qhat) E``, ``h - Q_g = E^T rnea(qhat, E qd, Edot qd)`` and a Cholesky solve.

    python scripts/bench_dynamics.py [--states 100000] [--cores 1] [--repeats 3]
"""

import argparse

from benchkit import best_of, pin_cores

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--states", type=int, default=100_000)
parser.add_argument("--cores", type=int, default=1, help="cores for both (process affinity)")
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument(
    "--batch", type=int, default=512, help="states per vmapped chunk (cache-sized is fastest)"
)
parser.add_argument("--systems", default="arm,chain7,chain30")
args = parser.parse_args()

pin_cores(args.cores)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402

import jaxmb  # noqa: E402
from jaxmb.models import random_tree_urdf  # noqa: E402


def arm_urdf() -> str:
    """The nominal arm's augmented open tree (spec frames) as URDF, for Pinocchio."""
    m = jaxmb.models.series_parallel_3dof()
    fmt = lambda v: " ".join(f"{float(x):.17g}" for x in np.ravel(v))  # noqa: E731
    lines = ['<robot name="arm">', '<link name="S"/>']
    for f in m.frames:
        R = np.asarray(f.rotation)
        rpy = [np.arctan2(R[2, 1], R[2, 2]), -np.arcsin(R[2, 0]), np.arctan2(R[1, 0], R[0, 0])]
        inertial = ""
        for b in m.bodies:
            if b.frame == f.name:
                I = np.asarray(b.inertia)
                inertial = (
                    f'<inertial><origin xyz="{fmt(b.com)}"/><mass value="{fmt(b.mass)}"/>'
                    f'<inertia ixx="{fmt(I[0, 0])}" ixy="{fmt(I[0, 1])}" ixz="{fmt(I[0, 2])}" '
                    f'iyy="{fmt(I[1, 1])}" iyz="{fmt(I[1, 2])}" izz="{fmt(I[2, 2])}"/></inertial>'
                )
        lines.append(f'<link name="{f.name}">{inertial}</link>')
        kind = "fixed" if f.joint == "fixed" else f.joint
        name = f.coordinate or f"fix_{f.name}"
        axis = "" if kind == "fixed" else f'<axis xyz="{fmt(f.axis)}"/>'
        limit = "" if kind == "fixed" else '<limit lower="-9" upper="9" effort="1" velocity="1"/>'
        lines.append(
            f'<joint name="{name}" type="{kind}"><parent link="{f.parent}"/>'
            f'<child link="{f.name}"/><origin xyz="{fmt(f.translation)}" rpy="{fmt(rpy)}"/>'
            f"{axis}{limit}</joint>"
        )
    return "\n".join([*lines, "</robot>"])


def pinocchio_peer(pm, closed_chain: bool):
    """Per-state Pinocchio functions (mass matrix, h - Q_g, forward dynamics)."""
    pd = pm.createData()
    if not closed_chain:

        def M(q):
            return pin.crba(pm, pd, q)

        def nle(q, qd):
            return pin.nonLinearEffects(pm, pd, q, qd)

        def fd(q, qd, tau):
            return pin.aba(pm, pd, q, qd, tau)

        return M, nle, fd

    L0, l0 = 0.35, 0.425  # the spec's triangle

    def lift(q):
        """qhat, dzeta/ddelta and d2zeta/ddelta2 from eq. (28), in numpy (no JAX in the peer)."""
        d = q[2]
        c = (d + l0) ** 2 / (2 * L0**2) - 1
        s = np.sqrt(1 - c * c)
        e = (d + l0) / (L0**2 * s)  # eq. (28)
        de = 1 / (L0**2 * s) + (d + l0) ** 2 * c / (L0**4 * s**3)  # its derivative
        qhat = np.array([q[0], q[1], -np.arccos(c)])
        return qhat, e, de

    def M(q):
        qhat, e, _ = lift(q)
        Mh = pin.crba(pm, pd, qhat)
        Mh = np.triu(Mh) + np.triu(Mh, 1).T
        E = np.diag([1.0, 1.0, e])
        return E.T @ Mh @ E

    def nle(q, qd):
        qhat, e, de = lift(q)
        qhatd = np.array([qd[0], qd[1], e * qd[2]])
        tau = pin.rnea(pm, pd, qhat, qhatd, np.array([0.0, 0.0, de * qd[2] ** 2]))
        return tau * np.array([1.0, 1.0, e])

    def fd(q, qd, tau):
        G = M(q)
        return np.linalg.solve(G, tau - nle(q, qd))

    return M, nle, fd


def main():
    rng = np.random.default_rng(0)
    N = args.states
    print(f"jaxmb bench_dynamics: {N} states, {args.cores} core(s), best of {args.repeats}")
    print(f"jax {jax.__version__}, pinocchio {pin.__version__}, devices {jax.devices()}")
    header = f"{'system':<9}{'function':<40}{'dtype':<9}{'jaxmb us/state':>15}{'pin us/state':>14}{'ratio':>8}"
    print(header)
    print("-" * len(header))
    for system in args.systems.split(","):
        jax.clear_caches()  # XLA's CPU JIT maps memory per executable; keep the process small
        if system == "arm":
            model = jaxmb.models.series_parallel_3dof()
            pm = pin.buildModelFromXML(arm_urdf())
            q = np.column_stack(
                [rng.uniform(-3, 3, N), rng.uniform(-1, 1.5, N), rng.uniform(0, 0.2, N)]
            )
            closed = True
        else:
            n = int(system.removeprefix("chain"))
            xml = random_tree_urdf(n, seed=n)
            model, pm = jaxmb.load_urdf(xml), pin.buildModelFromXML(xml)
            q = rng.uniform(-3, 3, (N, model.n))
            closed = False
        qd = rng.normal(size=q.shape) * 0.5
        tau = rng.normal(size=q.shape) * 10
        M_pin, nle_pin, fd_pin = pinocchio_peer(pm, closed)
        # Pinocchio orders joints depth-first like load_urdf; check so the comparison is honest
        if not closed:
            assert [pm.names[i] for i in range(1, pm.njoints)] == list(model.coordinate_names)
        i0 = N // 3  # spot check: same states, same answers
        np.testing.assert_allclose(
            jaxmb.mass_matrix(model, q[i0]),
            np.triu(M_pin(q[i0])) + np.triu(M_pin(q[i0]), 1).T,
            rtol=1e-9,
            atol=1e-9,
        )

        def pin_loop(fn, *arrays):
            def run():
                for row in zip(*arrays, strict=True):
                    fn(*row)

            return run

        peers = {
            "mass_matrix": (pin_loop(M_pin, q), "crba"),
            "bias_forces": (pin_loop(nle_pin, q, qd), "nle"),
            "forward_dynamics": (pin_loop(fd_pin, q, qd, tau), "aba"),
        }
        pin_cost = {k: best_of(fn, args.repeats) / N * 1e6 for k, (fn, _) in peers.items()}
        if closed:  # for transparency: Pinocchio on the open augmented tree alone, no map/glue
            pd_bare = pm.createData()
            qh = np.column_stack([q[:, 0], q[:, 1], -np.arccos((q[:, 2] + 0.425) ** 2 / 0.245 - 1)])
            bare = {
                "crba": pin_loop(lambda a: pin.crba(pm, pd_bare, a), qh),  # noqa: B023
                "nle": pin_loop(lambda a, b: pin.nonLinearEffects(pm, pd_bare, a, b), qh, qd),  # noqa: B023
                "aba": pin_loop(lambda a, b, c: pin.aba(pm, pd_bare, a, b, c), qh, qd, tau),  # noqa: B023
            }
            costs = ", ".join(
                f"{k} {best_of(fn, args.repeats) / N * 1e6:.3f} us" for k, fn in bare.items()
            )
            print(f"{system:<9}(Pinocchio on the open augmented tree alone, without E: {costs})")
        cases = [
            ("mass_matrix", lambda m, a, b, c: jaxmb.mass_matrix(m, a)),
            ("bias_forces", lambda m, a, b, c: jaxmb.bias_forces(m, a, b)),
            ("bias_forces", lambda m, a, b, c: jaxmb.bias_forces(m, a, b, method="rnea")),
            ("forward_dynamics", lambda m, a, b, c: jaxmb.forward_dynamics(m, a, b, c)),
        ]
        labels = ["", " (lagrangian)", " (rnea fast path)", ""]
        for dtype in (jnp.float64, jnp.float32):
            to = lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x  # noqa: E731,B023
            m_d = jax.tree.map(to, model)
            xs = tuple(jnp.asarray(a, dtype=dtype) for a in (q, qd, tau))
            for (name, fn), label in zip(cases, labels, strict=True):

                @eqx.filter_jit
                def batched(m, xs, fn=fn):
                    return jax.lax.map(lambda x: fn(m, *x), xs, batch_size=args.batch)  # noqa: B023

                t = best_of(lambda: jax.block_until_ready(batched(m_d, xs)), args.repeats)  # noqa: B023
                ours = t / N * 1e6
                peer = pin_cost[name]
                desc = f"{name}{label} vs {peers[name][1]}"
                dname = jnp.dtype(dtype).name
                print(
                    f"{system:<9}{desc:<40}{dname:<9}{ours:>15.3f}{peer:>14.3f}{ours / peer:>8.2f}"
                )
        # latency of one jitted call on one state (float64, the model baked into the compiled
        # function as in a control loop), against one Pinocchio call
        jax.clear_caches()
        for name, fn in [cases[0], cases[3]]:
            one = jax.jit(lambda a, b, c, fn=fn: fn(model, a, b, c))  # noqa: B023
            a, b, c = (jnp.asarray(x[0]) for x in (q, qd, tau))
            reps = 2000
            t = best_of(
                lambda: [jax.block_until_ready(one(a, b, c)) for _ in range(reps)],  # noqa: B023
                args.repeats,
            )
            us = t / reps * 1e6
            print(
                f"{system:<9}{'latency: one jitted ' + name:<40}{'float64':<9}"
                f"{us:>15.3f}{pin_cost[name]:>14.3f}{us / pin_cost[name]:>8.2f}"
            )


if __name__ == "__main__":
    main()
