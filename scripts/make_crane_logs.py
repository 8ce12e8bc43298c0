"""Make the SYNTHETIC lift/tilt crane logs in data/synthetic_crane/ (for output-error tests).

    python scripts/make_crane_logs.py [--out data/synthetic_crane] [--seed 0]

What it does (deterministic for a given seed):

1. Builds a "true" crane: the full plant of shared/specs/lift_tilt_crane.md
   (`lift_tilt_crane_plant(full=True)`) with a 150 kg payload, valve flow coefficients
   changed per edge by -10 .. +15 %, the effective bulk modulus 20 % below nominal, the
   cylinder friction raised (F_c x1.4, F_s x1.3, sigma x1.5) and a small internal leakage
   (2e-14 m^3/(s Pa), about 0.01 l/min at 100 bar).
2. Runs it in closed loop under a joint-space P controller with velocity feed-forward and a
   small multisine dither on the valve commands, tracking a multisine reference (inside the
   working range and strokes), and samples the commands it sent at 1 kHz.
3. Drives the true plant with exactly those 1 kHz commands, linearly interpolated
   (`jaxmb.simulation.CommandTable`, as a replay sees them), at tight tolerances: so the logged
   commands are exactly what moved the plant.
4. Adds sensor effects: encoders with 2^17 counts/rev, pressure transducers with Gaussian
   noise (0.3 bar) and 16-bit quantisation over 0..250 bar, piston positions with 0.1 mm noise.

Writes ``synthetic_crane_excitation.parquet`` (25 s, for fitting),
``synthetic_crane_validation.parquet`` (15 s, a different motion), their JSON sidecars and
``synthetic_crane_truth.json`` (the true parameters; a fit never reads it, tests compare
against it).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from jaxmb.models.crane import lift_tilt_crane_plant  # noqa: E402
from jaxmb.simulation import CommandTable, simulate  # noqa: E402

ACTUATORS = ("lift", "tilt")
PAYLOAD = 150.0  # kg: an experimental condition, known to the fit (in the sidecar)
# true / nominal for each valve edge (within -10 .. +15 %)
VALVE_FACTORS = {
    "lift": {"c_pa": 1.10, "c_an": 0.92, "c_pb": 1.05, "c_bn": 0.95},
    "tilt": {"c_pa": 0.90, "c_an": 1.12, "c_pb": 1.15, "c_bn": 0.97},
}
BETA_FACTOR = 0.8
FRICTION_FACTORS = {"F_c": 1.4, "F_s": 1.3, "sigma": 1.5}
C_INT = 2e-14  # m^3/(s Pa)
DT = 1e-3  # s, 1 kHz
SENSORS = {
    "encoder_counts_per_rev": 2**17,
    "pressure_noise_std_pa": 0.3e5,
    "pressure_adc_bits": 16,
    "pressure_range_pa": [0.0, 250e5],
    "position_noise_std_m": 1e-4,
    "sample_rate_hz": 1000.0,
}
# joint-space P control with velocity feed-forward (V/rad, V/(rad/s)); the tilt cylinder
# extends as q2 decreases (spec, "Signs"), hence its sign
KP = np.array([60.0, -40.0])
KFF = np.array([20.0, -8.0])
Q0 = (0.45, -0.15)


def true_plant(payload: float = PAYLOAD):
    """The synthetic crane's TRUE plant (see the module docstring)."""
    plant = lift_tilt_crane_plant(full=True, payload=payload, friction="stribeck")
    for i, name in enumerate(ACTUATORS):
        a = plant.actuators[i]
        for edge, f in VALVE_FACTORS[name].items():
            plant = eqx.tree_at(
                lambda p, i=i, edge=edge: getattr(p.actuators[i].valve, edge),
                plant,
                getattr(a.valve, edge) * f,
            )
        plant = eqx.tree_at(
            lambda p, i=i: (p.actuators[i].cylinder.beta, p.actuators[i].cylinder.c_int),
            plant,
            (a.cylinder.beta * BETA_FACTOR, jnp.asarray(C_INT)),
        )
        for field, f in FRICTION_FACTORS.items():
            plant = eqx.tree_at(
                lambda p, i=i, field=field: getattr(p.actuators[i].friction, field),
                plant,
                getattr(a.friction, field) * f,
            )
    return plant


LUGRE_FACTORS = {"F_c": 1.5, "F_s": 1.4, "sigma2": 1.6}


def lugre_true_plant():
    """The plant of the LuGre log: nominal hydraulics, LuGre friction (the crane module's
    `LUGRE` levels) with F_c x1.5, F_s x1.4 and sigma2 x1.6 on both cylinders: a log that
    isolates the friction law."""
    plant = lift_tilt_crane_plant(full=True, payload=PAYLOAD, friction="lugre")
    for i, a in enumerate(plant.actuators):
        for field, f in LUGRE_FACTORS.items():
            plant = eqx.tree_at(
                lambda p, i=i, field=field: getattr(p.actuators[i].friction, field),
                plant,
                getattr(a.friction, field) * f,
            )
    return plant


def lugre_record(plant) -> dict[str, float]:
    return {
        f"friction.{a.name}.{f}": float(getattr(a.friction, f))
        for a in plant.actuators
        for f in ("sigma0", "sigma1", "sigma2", "F_c", "F_s", "v_s", "v_eps")
    }


def truth_record(plant) -> dict[str, float]:
    """The true values under the selector names of `jaxmb.identification.output_error`."""
    out = {}
    for a in plant.actuators:
        for edge in ("c_pa", "c_an", "c_pb", "c_bn"):
            out[f"valve.{a.name}.{edge}"] = float(getattr(a.valve, edge))
        for field in ("beta", "c_int", "c_ext"):
            out[f"cylinder.{a.name}.{field}"] = float(getattr(a.cylinder, field))
        for field in ("F_c", "F_s", "v_s", "sigma", "v_eps"):
            out[f"friction.{a.name}.{field}"] = float(getattr(a.friction, field))
    out["body.payload.mass"] = PAYLOAD
    return out


def multisine(rng, t_end, offset, amplitudes, freqs, ramp=1.0):
    """A reference: ``q0 + w(t) sum_k a_k sin(2 pi f_k t + phi_k)`` with random phases and a
    quintic fade-in ``w`` over ``ramp`` s, so it starts at rest at ``q0``."""
    phases = rng.uniform(0, 2 * np.pi, size=np.shape(amplitudes))
    a, f, ph = (jnp.asarray(x) for x in (amplitudes, freqs, phases))
    offset = jnp.asarray(offset)
    sine0 = jnp.sum(a * jnp.sin(ph), axis=1)

    def ref(t):
        s = jnp.clip(t / ramp, 0.0, 1.0)
        w = s**3 * (10 - 15 * s + 6 * s**2)
        return offset + w * (jnp.sum(a * jnp.sin(2 * jnp.pi * f * t + ph), axis=1) - sine0)

    return ref, phases


def make_controller(rng, dither_v):
    """``u = KP (q_d - q) + KFF qd_d + dither(t)``; dither: five sines 1-7 Hz per valve."""
    f = jnp.asarray(rng.uniform(1.0, 7.0, size=(2, 5)))
    ph = jnp.asarray(rng.uniform(0, 2 * np.pi, size=(2, 5)))
    kp, kff = jnp.asarray(KP), jnp.asarray(KFF)

    def controller(t, y, desired):
        q_d, qd_d, _ = desired
        dither = dither_v / jnp.sqrt(5.0) * jnp.sum(jnp.sin(2 * jnp.pi * f * t + ph), axis=1)
        ramp = jnp.clip(t, 0.0, 1.0)  # no dither jump at t = 0
        return kp * (q_d - y["q"]) + kff * qd_d + ramp * dither

    return controller


def run_experiment(plant, reference, controller, t_end, q0):
    """Closed loop, then the open-loop drive by the sampled commands; returns the replay's
    trajectory, the commands and the largest joint gap between the two runs."""
    ts = jnp.linspace(0.0, t_end, int(round(t_end / DT)) + 1)
    q0 = jnp.asarray(q0)
    closed = eqx.filter_jit(
        lambda p: simulate(p, controller, reference, q0, jnp.zeros(2), ts, rtol=1e-8, atol=1e-10,
                           max_steps=1_000_000)
    )(plant)  # fmt: skip
    u = np.asarray(closed.u)  # as computed; the valves saturate at +-10 V themselves
    table = CommandTable(np.asarray(ts), u, plant.command_names)
    tr = eqx.filter_jit(
        lambda p: simulate(p, table, None, q0, jnp.zeros(2), ts, rtol=1e-9, atol=1e-11,
                           max_steps=1_000_000)
    )(plant)  # fmt: skip
    gap = float(jnp.abs(tr.q - closed.q).max())
    return tr, u, gap


def sensor_columns(rng, plant, tr, u) -> dict[str, np.ndarray]:
    """The log's columns with the sensor effects of `SENSORS`."""
    cols = {"t": np.round(np.asarray(tr.t), 9)}
    step_q = 2 * np.pi / SENSORS["encoder_counts_per_rev"]
    for j, name in enumerate(plant.coordinate_names):
        cols[name] = np.round(np.asarray(tr.q[:, j]) / step_q) * step_q
    lo, hi = SENSORS["pressure_range_pa"]
    step_p = (hi - lo) / (2 ** SENSORS["pressure_adc_bits"] - 1)
    for a in ACTUATORS:
        for c in ("p_a", "p_b"):
            p = np.asarray(tr.signals[f"{c}_{a}"])
            p = p + rng.normal(0.0, SENSORS["pressure_noise_std_pa"], p.shape)
            cols[f"{c}_{a}"] = lo + np.clip(np.round((p - lo) / step_p), 0, 2**16 - 1) * step_p
    for j, a in enumerate(ACTUATORS):
        cols[f"u_{a}"] = u[:, j]
    for a in ACTUATORS:
        x = np.asarray(tr.signals[f"x_{a}"])
        cols[f"x_{a}"] = x + rng.normal(0.0, SENSORS["position_noise_std_m"], x.shape)
    return cols


def write_log(out: Path, stem: str, cols: dict, sidecar: dict) -> None:
    table = pa.table({k: pa.array(v, pa.float64()) for k, v in cols.items()})
    pq.write_table(table, out / f"{stem}.parquet", compression="zstd", compression_level=19)
    (out / f"{stem}.json").write_text(json.dumps(sidecar, indent=2) + "\n")


EXPERIMENTS = {
    # stem: (plant, duration s, reference amplitudes (2, k) rad, frequencies (2, k) Hz,
    #        q offset, dither amplitude V)
    "synthetic_crane_excitation": (
        "stribeck", 25.0, [[0.20, 0.08, 0.03], [0.25, 0.10, 0.04]],
        [[0.07, 0.23, 0.53], [0.11, 0.31, 0.71]], Q0, 0.4,
    ),
    "synthetic_crane_validation": (
        "stribeck", 15.0, [[0.18, 0.08], [0.20, 0.12]], [[0.09, 0.41], [0.13, 0.27]], Q0, 0.4,
    ),
    # slow motion with many reversals (piston speeds below ~10 mm/s), where friction shows
    "synthetic_crane_lugre": (
        "lugre", 4.0, [[0.020, 0.006], [0.025, 0.008]], [[0.23, 0.9], [0.17, 0.7]],
        (0.9, -0.2), 0.1,
    ),
    # the same crane carrying 60 kg that its sidecars do not mention (issue 27's user case)
    "synthetic_crane_payload_excitation": (
        "stribeck60", 40.0, [[0.22, 0.08, 0.03], [0.25, 0.10, 0.04]],
        [[0.06, 0.19, 0.47], [0.09, 0.29, 0.61]], Q0, 0.4,
    ),
    "synthetic_crane_payload_validation": (
        "stribeck60", 20.0, [[0.18, 0.08], [0.22, 0.10]], [[0.08, 0.37], [0.12, 0.25]], Q0, 0.4,
    ),
    # the same crane with its bucket empty, as its sidecar says ("payload_kg": 0.0): a
    # validation log of another condition than the fit's unknown load
    "synthetic_crane_empty_validation": (
        "stribeck0", 6.0, [[0.18, 0.08], [0.22, 0.10]], [[0.10, 0.33], [0.14, 0.29]], Q0, 0.4,
    ),
}  # fmt: skip
# payload carried (kg) and whether the sidecar names it, per plant kind
PAYLOADS = {
    "stribeck": (PAYLOAD, True),
    "lugre": (PAYLOAD, True),
    "stribeck60": (60.0, False),
    "stribeck0": (0.0, True),
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("data/synthetic_crane"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", default=None, help="experiments to (re)make")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    plant = true_plant()
    truth = {
        "model": "lift_tilt_crane",
        "synthetic": True,
        "note": "TRUE parameters of the SYNTHETIC logs; an identification must not read this "
        "file, only tests and reports compare against it",
        "parameters": truth_record(plant),
        "nominal": truth_record(lift_tilt_crane_plant(full=True, payload=PAYLOAD)),
        "lugre": {
            "log": "synthetic_crane_lugre",
            "parameters": lugre_record(lugre_true_plant()),
            "nominal": lugre_record(lift_tilt_crane_plant(full=True, friction="lugre")),
            "note": "hydraulics of the LuGre log are nominal; only the friction differs",
        },
        "payload_kg": {"synthetic_crane_payload_excitation": 60.0,
                       "synthetic_crane_payload_validation": 60.0,
                       "synthetic_crane_empty_validation": 0.0, "others": PAYLOAD},
        "provenance": {"generator": "scripts/make_crane_logs.py", "seed": args.seed},
    }  # fmt: skip
    (args.out / "synthetic_crane_truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    plants = {"stribeck": plant, "lugre": lugre_true_plant(), "stribeck60": true_plant(60.0),
              "stribeck0": true_plant(0.0)}  # fmt: skip
    for k, (stem, (kind, t_end, amp, freq, offset, dither)) in enumerate(EXPERIMENTS.items()):
        if args.only is not None and stem not in args.only:
            continue
        rng = np.random.default_rng([args.seed, k])
        ref, phases = multisine(rng, t_end, offset, amp, freq)
        ctrl = make_controller(rng, dither)
        t0 = time.perf_counter()
        tr, u, gap = run_experiment(plants[kind], ref, ctrl, t_end, offset)
        events = {k: int(v["count"]) for k, v in (tr.events or {}).items() if int(v["count"]) > 0}
        if events or not bool(tr.success):
            worst = {
                k: (float(np.max(tr.signals[k])) / 1e5, float(tr.t[np.argmax(tr.signals[k])]))
                for k in tr.signals
                if k.startswith("p_")
            }
            raise RuntimeError(
                f"{stem}: the run left the model's validity: {events}; max bar (at s): {worst}"
            )
        cols = sensor_columns(rng, plants[kind], tr, u)
        sidecar = {
            "model": "lift_tilt_crane",
            "synthetic": True,
            "sensors": SENSORS,
            "conditions": {"p_supply_pa": 185e5, "p_return_pa": 10e5}
            | ({"payload_kg": PAYLOADS[kind][0]} if PAYLOADS[kind][1] else {}),
            "provenance": {
                "generator": "scripts/make_crane_logs.py",
                "seed": args.seed,
                "experiment": stem,
                "plant": f"lift_tilt_crane_plant(full=True, payload={PAYLOADS[kind][0]:g}, "
                f"friction={kind.rstrip('60')!r}) "
                "with the TRUE parameters of synthetic_crane_truth.json"
                + (" (key 'lugre')" if kind == "lugre" else ""),
                "excitation": {
                    "reference": "multisine in joint space with a 1 s quintic fade-in",
                    "amplitudes_rad": amp,
                    "frequencies_hz": freq,
                    "phases_rad": np.asarray(phases).tolist(),
                    "controller": f"u = KP (q_d - q) + KFF qd_d + {dither} V multisine dither, "
                    f"KP={KP.tolist()}, KFF={KFF.tolist()}",
                    "drive": "the closed loop's commands sampled at 1 kHz, replayed open loop "
                    "(linear interpolation) on the true plant, Tsit5 rtol 1e-9 atol 1e-11 "
                    "(pressures in bar)",
                    "closed_loop_vs_replay_max_joint_gap_rad": gap,
                },
            },
            "units": {},
        }
        write_log(args.out, stem, cols, sidecar)
        x = {a: (float(cols[f"x_{a}"].min()), float(cols[f"x_{a}"].max())) for a in ACTUATORS}
        p = {
            k: (float(cols[k].min() / 1e5), float(cols[k].max() / 1e5))
            for k in cols
            if k.startswith("p_")
        }
        print(
            f"{stem}: {t_end} s in {time.perf_counter() - t0:.0f} s, replay gap {gap:.2e} rad, "
            f"|u| max {np.abs(u).max(axis=0)}, x {x}, p bar {p}"
        )


if __name__ == "__main__":
    main()
