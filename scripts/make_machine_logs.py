"""Make SYNTHETIC logs of a hydraulic machine file (the knuckle-telescope example by default).

    python scripts/make_machine_logs.py [--machine FILE.toml] [--out DIR] [--seed 0]

What it does (deterministic for a given seed), for any machine file:

1. Builds a "true" machine: the file's plant with every valve edge coefficient changed by a
   factor drawn in 0.9 .. 1.15, each bulk modulus 15 % below the file's, and each cylinder's
   Coulomb and static friction 30 % above it.
2. Runs it in closed loop: each valve is driven by a P controller with velocity feed-forward on
   the coordinate its cylinder moves most (at the start configuration), plus a small multisine
   dither, tracking multisine references around the middle of the URDF's joint ranges; samples
   the commands at 1 kHz.
3. Drives the true plant with exactly those commands, linearly interpolated, at tight
   tolerances, and adds sensor effects (encoders of 2^17 counts/rev or 10 um for prismatic
   joints, pressure noise 0.3 bar with 16-bit quantisation over 0..250 bar).
4. Writes the log in the machine's own column names and units (its ``[log]`` table), so the
   logs also test that mapping: ``<name>_excitation`` (40 s), ``<name>_validation`` (20 s),
   their sidecars (the payload is a known condition) and ``<name>_truth.json``.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxmb.io.logs import UNITS, write_log  # noqa: E402
from jaxmb.io.machine import load_machine  # noqa: E402
from jaxmb.simulation import CommandTable, simulate  # noqa: E402

DEFAULT = Path(__file__).parent.parent / "data/machines/knuckle_telescope/knuckle_telescope.toml"
DT = 1e-3
BETA_FACTOR = 0.85
FRICTION_FACTORS = {"F_c": 1.3, "F_s": 1.3}
PRESSURE_NOISE, ADC_BITS, P_RANGE = 0.3e5, 16, (0.0, 250e5)


def true_plant(plant, rng):
    """The TRUE plant (module docstring) and its factors."""
    factors = {}
    for i, a in enumerate(plant.actuators):
        for edge in ("c_pa", "c_an", "c_pb", "c_bn"):
            f = float(rng.uniform(0.9, 1.15))
            factors[f"valve.{a.name}.{edge}"] = f
            plant = eqx.tree_at(lambda p, i=i, e=edge: getattr(p.actuators[i].valve, e), plant,
                                getattr(a.valve, edge) * f)  # fmt: skip
        plant = eqx.tree_at(lambda p, i=i: p.actuators[i].cylinder.beta, plant,
                            a.cylinder.beta * BETA_FACTOR)  # fmt: skip
        for field, f in FRICTION_FACTORS.items():
            plant = eqx.tree_at(lambda p, i=i, fl=field: getattr(p.actuators[i].friction, fl),
                                plant, getattr(a.friction, field) * f)  # fmt: skip
    return plant


def truth_record(plant) -> dict[str, float]:
    out = {}
    for a in plant.actuators:
        for edge in ("c_pa", "c_an", "c_pb", "c_bn"):
            out[f"valve.{a.name}.{edge}"] = float(getattr(a.valve, edge))
        out[f"cylinder.{a.name}.beta"] = float(a.cylinder.beta)
        for field in ("F_c", "F_s", "v_s", "sigma", "v_eps"):
            out[f"friction.{a.name}.{field}"] = float(getattr(a.friction, field))
    return out


def joint_limits(urdf: Path, names) -> np.ndarray:
    """(n, 2) lower and upper limits of the named joints."""
    root = ET.parse(urdf).getroot()
    lim = {j.get("name"): j.find("limit") for j in root.findall("joint")}
    return np.array([[float(lim[n].get("lower")), float(lim[n].get("upper"))] for n in names])


def experiment(plant, rng, t_end, limits, amplitude, dither_v):
    n, m = plant.model.n, len(plant.actuators)
    mid = limits.mean(axis=1)
    span = limits[:, 1] - limits[:, 0]
    q0 = jnp.asarray(mid)
    _, _, J = plant.piston_kinematics(q0, jnp.zeros(n))
    drive = np.argmax(np.abs(np.asarray(J)), axis=1)  # actuator -> its coordinate
    sign = np.sign(np.asarray(J)[np.arange(m), drive])
    amp = amplitude * span[:, None] * np.array([1.0, 0.4, 0.15])
    freq = rng.uniform([0.05, 0.2, 0.5], [0.1, 0.35, 0.8], size=(n, 3))
    ph = rng.uniform(0, 2 * np.pi, size=(n, 3))
    a, f, p = (jnp.asarray(x) for x in (amp, freq, ph))

    def reference(t):
        s = jnp.clip(t / 1.0, 0.0, 1.0)
        w = s**3 * (10 - 15 * s + 6 * s**2)
        return q0 + w * (jnp.sum(a * jnp.sin(2 * jnp.pi * f * t + p), axis=1)
                         - jnp.sum(a * jnp.sin(p), axis=1))  # fmt: skip

    df = jnp.asarray(rng.uniform(1.0, 7.0, size=(m, 5)))
    dph = jnp.asarray(rng.uniform(0, 2 * np.pi, size=(m, 5)))
    kp = jnp.asarray(sign * 60.0 / np.where(span[drive] > 0, 1.0, 1.0))
    kff = jnp.asarray(sign * 15.0)
    d = jnp.asarray(drive)

    def controller(t, y, desired):
        q_d, qd_d, _ = desired
        dither = dither_v / jnp.sqrt(5.0) * jnp.sum(jnp.sin(2 * jnp.pi * df * t + dph), axis=1)
        return kp * (q_d[d] - y["q"][d]) + kff * qd_d[d] + jnp.clip(t, 0.0, 1.0) * dither

    ts = jnp.linspace(0.0, t_end, int(round(t_end / DT)) + 1)
    opts = dict(rtol=1e-8, atol=1e-10, max_steps=2_000_000)
    closed = eqx.filter_jit(
        lambda pl: simulate(pl, controller, reference, q0, jnp.zeros(n), ts, **opts)
    )(plant)
    table = CommandTable(np.asarray(ts), np.asarray(closed.u), plant.command_names)
    tr = eqx.filter_jit(lambda pl: simulate(pl, table, None, q0, jnp.zeros(n), ts, **opts))(plant)
    return tr, np.asarray(closed.u)


def columns(machine, plant, rng, tr, u) -> dict[str, np.ndarray]:
    """Sensor columns in the machine's own names and units (its [log] table)."""
    cols = {}
    for j, (name, frame) in enumerate(
        (c, next(f for f in plant.model.frames if f.coordinate == c))
        for c in plant.model.coordinate_names
    ):
        step = 2 * np.pi / 2**17 if frame.joint == "revolute" else 1e-5
        cols[name] = np.round(np.asarray(tr.q[:, j]) / step) * step
    lo, hi = P_RANGE
    step_p = (hi - lo) / (2**ADC_BITS - 1)
    for a in plant.actuators:
        for c in ("p_a", "p_b"):
            p = np.asarray(tr.signals[f"{c}_{a.name}"]) + rng.normal(0, PRESSURE_NOISE, tr.t.shape)
            cols[f"{c}_{a.name}"] = lo + np.clip(np.round((p - lo) / step_p), 0, 2**ADC_BITS - 1) * step_p  # fmt: skip
    for i, a in enumerate(plant.actuators):
        cols[f"u_{a.name}"] = u[:, i]
    out = {}
    for k, v in cols.items():  # to the machine's units and names
        unit = machine.units.get(k)
        out[machine.columns.get(k, k)] = v / UNITS[unit][1] if unit else v
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machine", type=Path, default=DEFAULT)
    ap.add_argument("--out", type=Path, default=None, help="default: beside the machine file")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    machine = load_machine(args.machine)
    out = args.out or args.machine.parent
    rng = np.random.default_rng(args.seed)
    plant = true_plant(machine.plant, rng)
    urdf = args.machine.parent / f"{args.machine.stem}.urdf"
    limits = joint_limits(urdf, plant.model.coordinate_names)
    name = machine.name
    truth = {
        "model": name, "synthetic": True,
        "note": "TRUE parameters of the SYNTHETIC logs; an identification must not read this "
        "file, only tests and reports compare against it",
        "parameters": truth_record(plant), "nominal": truth_record(machine.plant),
        "provenance": {"generator": "scripts/make_machine_logs.py", "seed": args.seed},
    }  # fmt: skip
    (out / f"{name}_truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    for k, (stem, t_end, amplitude) in enumerate((("excitation", 40.0, 0.25), ("validation", 20.0, 0.2))):  # fmt: skip
        rng_k = np.random.default_rng([args.seed, k])
        tr, u = experiment(plant, rng_k, t_end, limits, amplitude, 0.4)
        events = {e: int(v["count"]) for e, v in (tr.events or {}).items() if int(v["count"])}
        if events or not bool(tr.success):
            raise RuntimeError(f"{stem}: the run left the model's validity: {events}")
        meta = {
            "model": name, "synthetic": True,
            "conditions": {"payload_kg": machine.payload.mass if machine.payload else 0.0},
            "provenance": {"generator": "scripts/make_machine_logs.py", "seed": args.seed,
                           "experiment": stem, "plant": f"{args.machine.name} with the TRUE "
                           f"parameters of {name}_truth.json"},
        }  # fmt: skip
        write_log(out / f"{name}_{stem}.parquet", np.round(np.asarray(tr.t), 9),
                  columns(machine, plant, rng_k, tr, u), meta=meta)  # fmt: skip
        print(f"{stem}: {t_end:g} s, q range {np.ptp(np.asarray(tr.q), axis=0).round(3)}")


if __name__ == "__main__":
    main()
