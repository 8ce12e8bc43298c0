"""``jaxmb state`` (also ``jaxmb --q ...``): for the 3-DoF series-parallel arm at a given
state, Gamma, the per-body Gamma_i, h, the gravity force and the forward-dynamics acceleration."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from jaxmb.cli import (
    parse_vector,
)


def _matrix_lines(name: str, A: np.ndarray, names: tuple[str, ...]) -> list[str]:
    width = max(12, *(len(c) + 2 for c in names))
    head = " " * 8 + "".join(f"{c:>{width}}" for c in names)
    rows = [
        f"{r:>8}" + "".join(f"{x:>{width}.6g}" for x in row)
        for r, row in zip(names, A, strict=True)
    ]
    return [name, head, *rows]


def _vector_line(name: str, v: np.ndarray, names: tuple[str, ...], unit: str) -> str:
    return (
        f"{name:<28}"
        + "  ".join(f"{c}={x:.6g}" for c, x in zip(names, v, strict=True))
        + f"  ({unit})"
    )


def state(args: argparse.Namespace) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)  # the CLI reports in float64
    import jax.numpy as jnp

    import jaxmb
    from jaxmb.models.series_parallel import L0, STROKE, l0

    model = jaxmb.models.series_parallel_3dof(full=args.full)
    names = model.coordinate_names
    q = parse_vector(args.q, "q", 3)
    qd = parse_vector(args.qd, "qd", 3)
    tau = parse_vector(args.tau, "tau", 3)
    lo, hi = -l0, 2 * L0 - l0
    if not lo < q[2] < hi:
        raise SystemExit(
            f"jaxmb: --q: delta = {q[2]} m is outside the closed chain's domain ({lo}, {hi}) m"
        )
    q, qd, tau = jnp.asarray(q), jnp.asarray(qd), jnp.asarray(tau)
    Gamma_i = np.asarray(jaxmb.body_mass_matrices(model, q))
    Gamma = np.asarray(jaxmb.mass_matrix(model, q))
    h = np.asarray(jaxmb.bias_forces(model, q, qd))
    Qg = np.asarray(jaxmb.gravity_forces(model, q))
    qdd = np.asarray(jaxmb.forward_dynamics(model, q, qd, tau))

    if args.json:
        out = {
            "model": "series_parallel_3dof" + ("(full)" if args.full else ""),
            "coordinates": list(names),
            "q": q.tolist(),
            "qd": qd.tolist(),
            "tau": tau.tolist(),
            "Gamma": Gamma.tolist(),
            "Gamma_i": {b: G.tolist() for b, G in zip(model.body_names, Gamma_i, strict=True)},
            "h": h.tolist(),
            "gravity_force": Qg.tolist(),
            "qdd": qdd.tolist(),
        }
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    lines = [
        f"3-DoF series-parallel arm ({'full plant: + cylinder, piston' if args.full else 'nominal'})",
        _vector_line("q", np.asarray(q), names, "rad, rad, m"),
        _vector_line("qd", np.asarray(qd), names, "rad/s, rad/s, m/s"),
        _vector_line("tau (Q_a)", np.asarray(tau), names, "N m, N m, N"),
        "",
        *_matrix_lines("Gamma = sum_i Gamma_i (eq. 10)", Gamma, names),
    ]
    for b, G in zip(model.body_names, Gamma_i, strict=True):
        lines += ["", *_matrix_lines(f"Gamma_{b} (eq. 9)", G, names)]
    lines += [
        "",
        _vector_line("h (eq. 13)", h, names, "N m, N m, N"),
        _vector_line("gravity force Q_g", Qg, names, "N m, N m, N"),
        _vector_line("qdd (forward dynamics)", qdd, names, "rad/s^2, rad/s^2, m/s^2"),
    ]
    if not STROKE[0] <= float(q[2]) <= STROKE[1]:
        lines.append(f"note: delta = {float(q[2])} m is outside the stroke {STROKE} m")
    print("\n".join(lines))
    return 0


def add_parser(sub) -> None:
    """The ``state`` command."""
    p = sub.add_parser("state", help="dynamics of the 3-DoF series-parallel arm at one state")
    p.add_argument("--q", default="0.1,0.35,0.1", help="phi,theta,delta (rad, rad, m)")
    p.add_argument("--qd", default="0.2,-0.1,0.05", help="velocities (rad/s, rad/s, m/s)")
    p.add_argument("--tau", default="0,0,0", help="actuator forces Q_a (N m, N m, N)")
    p.add_argument("--full", action="store_true", help="the full plant (adds cylinder, piston)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=state)
