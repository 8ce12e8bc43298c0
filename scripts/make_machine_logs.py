"""Make SYNTHETIC logs of a hydraulic machine file (the knuckle-telescope example by default).

    python scripts/make_machine_logs.py [--machine FILE.toml] [--out DIR] [--seed 0]
                                        [--campaign] [--offsets BAR]

What it does (deterministic for a given seed), for any machine file:

1. Builds a "true" machine: the file's plant with every valve edge coefficient changed by a
   factor drawn in 0.9 .. 1.15, each bulk modulus 15 % below the file's, and each cylinder's
   Coulomb and static friction 30 % above it. Each valve effect the file declares (a spool
   overlap ``deadband``, a command ``delay``, a first-order spool's ``time_constant``) is
   built a factor drawn in 0.8 .. 1.3 off its data-sheet value.
2. Runs it in closed loop: each valve is driven by a P controller with velocity feed-forward on
   the coordinate its cylinder moves most (at the start configuration), plus a small multisine
   dither, tracking multisine references around the middle of the URDF's joint ranges; samples
   the commands at 1 kHz.
3. Drives the true plant with exactly those commands, linearly interpolated, at tight
   tolerances, and adds sensor effects (encoders of 2^17 counts/rev or 10 um for prismatic
   joints, pressure noise 0.3 bar with 16-bit quantisation over 0..250 bar). With
   ``--offsets BAR`` every pressure transducer reads a constant drawn in +-BAR beyond it. A
   machine whose file takes its supply from the log (``supply_from_log``) gets a load-sensing
   pump's: the highest chamber pressure of the run plus a 30 bar margin, within 60 bar and the
   file's supply pressure, through a 50 ms lag; the loop and the replay both run on it. This is
   an assumed, simple model of a load-sensing pump (the supply follows the highest load
   pressure plus a margin of 20-30 bar: Axin, Eriksson & Krus 2014, "Flow versus pressure
   control of pumps in mobile hydraulic systems", Proc. IMechE I 228(4)); it senses every
   chamber rather than the open work ports, and the first-order lag stands in for the pump's
   displacement controller.
4. Writes the log in the machine's own column names and units (its ``[log]`` table), so the
   logs also test that mapping: ``<name>_excitation`` (40 s), ``<name>_validation`` (20 s),
   their sidecars (the payload is a known condition) and ``<name>_truth.json``. With
   ``--campaign`` (the example in data/machines/mobile_knuckle), three logs of one machine on different days:
   ``<name>_empty`` (30 s, the bucket empty: its sidecar names 0 kg), ``<name>_loaded`` (30 s,
   an unknown load the sidecar does not name; the truth file holds it) and
   ``<name>_validation`` (20 s, a named load).
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
EFFECT_FACTORS = (0.8, 1.3)  # a declared valve effect as built, against its data sheet
LS_MARGIN, LS_MIN, LS_LAG = 30e5, 60e5, 0.05  # the load-sensing pump: Pa, Pa, s
# --campaign: (experiment, seconds, amplitude, payload kg, whether its sidecar names it)
CAMPAIGN = (("empty", 30.0, 0.25, 0.0, True), ("loaded", 30.0, 0.25, 180.0, False),
            ("validation", 20.0, 0.2, 90.0, True))  # fmt: skip


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
    for i, a in enumerate(plant.actuators):  # the declared valve effects, as built
        for field in declared_effects(a.valve):
            f = float(rng.uniform(*EFFECT_FACTORS))
            plant = eqx.tree_at(lambda p, i=i, fl=field: getattr(p.actuators[i].valve, fl),
                                plant, getattr(a.valve, field) * f)  # fmt: skip
    return plant


def declared_effects(valve) -> tuple[str, ...]:
    """The valve effects a machine file declares: a nonzero overlap or delay, a first-order
    spool's time constant."""
    out = tuple(f for f in ("deadband", "delay") if float(getattr(valve, f)) > 0)
    return out + (("tau",) if valve.spool == "first" else ())


def truth_record(plant) -> dict[str, float]:
    out = {}
    for a in plant.actuators:
        for edge in ("c_pa", "c_an", "c_pb", "c_bn"):
            out[f"valve.{a.name}.{edge}"] = float(getattr(a.valve, edge))
        out[f"cylinder.{a.name}.beta"] = float(a.cylinder.beta)
        for field in ("F_c", "F_s", "v_s", "sigma", "v_eps"):
            out[f"friction.{a.name}.{field}"] = float(getattr(a.friction, field))
        for field in declared_effects(a.valve):
            out[f"valve.{a.name}.{field}"] = float(getattr(a.valve, field))
    return out


def joint_limits(urdf: Path, names) -> np.ndarray:
    """(n, 2) lower and upper limits of the named joints."""
    root = ET.parse(urdf).getroot()
    lim = {j.get("name"): j.find("limit") for j in root.findall("joint")}
    return np.array([[float(lim[n].get("lower")), float(lim[n].get("upper"))] for n in names])


class _Supplied(CommandTable):
    """The experiment's controller where the supply moves: a table that holds the supply
    pressure (so that the loop's valves see it, as a replay's do) and computes its commands by
    feedback (``law``); its commands reach the spools at once, so the loop needs no hold."""

    law: object = None

    def __call__(self, t, y=None, desired=None):
        return self.law(t, y, desired)

    def for_plant(self, plant):
        table, out = super().for_plant(plant), object.__new__(_Supplied)
        for k in ("t", "values", "names", "supply", "supply_names", "law"):
            object.__setattr__(out, k, getattr(self if k == "law" else table, k))
        object.__setattr__(out, "delays", None)
        return out


def load_sensing(tr, plant) -> np.ndarray:
    """A load-sensing pump's supply pressure over a run (module docstring): the highest
    chamber pressure plus the margin, within `LS_MIN` and the valves' supply, lagged."""
    p = np.max([np.asarray(tr.signals[f"{c}_{a.name}"]) for a in plant.actuators
                for c in ("p_a", "p_b")], axis=0)  # fmt: skip
    want = np.clip(p + LS_MARGIN, LS_MIN, float(plant.actuators[0].valve.p_s))
    out, k = np.empty_like(want), DT / (LS_LAG + DT)
    out[0] = want[0]
    for i in range(1, want.size):
        out[i] = out[i - 1] + k * (want[i] - out[i - 1])
    return out


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
    # the loop drives the spools at once (no delay: the replay below delays the commands it
    # made, which shifts the motion by the delay); a delay-free copy of the plant runs it
    prompt = eqx.tree_at(lambda p: [a.valve.delay for a in p.actuators], plant,
                         [jnp.zeros(()) for _ in plant.actuators])  # fmt: skip
    supply = None
    if plant.logged:  # a load-sensing pump: from a first run at the valves' supply
        first = eqx.filter_jit(
            lambda pl: simulate(pl, controller, reference, q0, jnp.zeros(n), ts, **opts)
        )(prompt)  # a feedback loop: the valves' own supply
        supply = load_sensing(first, plant)
        table = _Supplied(np.asarray(ts), np.zeros((ts.size, m)), plant.command_names)
        table = _with_supply(table, np.asarray(ts), supply, plant)
        object.__setattr__(table, "law", controller)  # its commands: the feedback law's
        loop = table
    else:
        loop = controller
    closed = eqx.filter_jit(lambda pl: simulate(pl, loop, reference, q0, jnp.zeros(n), ts, **opts))(
        prompt
    )
    table = CommandTable(np.asarray(ts), np.asarray(closed.u), plant.command_names)
    if supply is not None:
        table = _with_supply(table, np.asarray(ts), supply, plant)
    tr = eqx.filter_jit(lambda pl: simulate(pl, table, None, q0, jnp.zeros(n), ts, **opts))(plant)
    return tr, np.asarray(closed.u), supply


def _with_supply(table, t, supply, plant):
    """``table`` with the logged supply column(s) the plant takes (``p_s``)."""
    names = (*table.names, *plant.logged)
    values = np.concatenate(
        [np.asarray(table.values), np.stack([supply] * len(plant.logged), 1)], 1
    )
    out = type(table)(t, values, names)
    if isinstance(table, _Supplied):
        object.__setattr__(out, "law", table.law)
    return out


def columns(machine, plant, rng, tr, u, supply=None, offsets=None) -> dict[str, np.ndarray]:
    """Sensor columns in the machine's own names and units (its [log] table): the pressure
    transducers reading ``offsets`` (Pa, by signal) beyond the pressure; the supply
    pressure where the machine logs it."""
    offsets = offsets or {}
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
            p = p + offsets.get(f"{c}_{a.name}", 0.0)
            cols[f"{c}_{a.name}"] = lo + np.clip(np.round((p - lo) / step_p), 0, 2**ADC_BITS - 1) * step_p  # fmt: skip
    for name in plant.logged:  # the pump's transducer: noise, no offset
        cols[name] = supply + rng.normal(0, PRESSURE_NOISE, tr.t.shape)
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
    ap.add_argument("--campaign", action="store_true", help="empty, loaded and validation logs")
    ap.add_argument("--offsets", type=float, default=0.0, metavar="BAR",
                    help="pressure transducers' offsets drawn in +-BAR")  # fmt: skip
    args = ap.parse_args(argv)
    machine = load_machine(args.machine)
    if args.campaign and machine.payload is None:
        ap.error(f"--campaign: machine file {args.machine} has no [payload] table to load")
    out = args.out or args.machine.parent
    rng = np.random.default_rng(args.seed)
    plant = true_plant(machine.plant, rng)
    offsets = {f"{c}_{a.name}": float(rng.uniform(-1, 1)) * args.offsets * 1e5
               for a in plant.actuators for c in ("p_a", "p_b")} if args.offsets else {}  # fmt: skip
    limits = joint_limits(machine.urdf_path, plant.model.coordinate_names)
    name = machine.name
    nominal_payload = machine.payload.mass if machine.payload else 0.0
    if args.campaign:
        runs = CAMPAIGN
    else:
        runs = (("excitation", 40.0, 0.25, nominal_payload, True),
                ("validation", 20.0, 0.2, nominal_payload, True))  # fmt: skip
    truth = {
        "model": name, "synthetic": True,
        "note": "TRUE parameters of the SYNTHETIC logs; an identification must not read this "
        "file, only tests and reports compare against it",
        "parameters": {**truth_record(plant),
                       **{f"sensor.{k[4:]}.{k[:3]}": v for k, v in offsets.items()}},
        "nominal": truth_record(machine.plant),
        "provenance": {"generator": "scripts/make_machine_logs.py", "seed": args.seed},
    }  # fmt: skip
    if args.campaign:
        truth["payload_kg"] = {stem: kg for stem, _, _, kg, _ in runs}
    (out / f"{name}_truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    for k, (stem, t_end, amplitude, payload, named) in enumerate(runs):
        provenance = {"generator": "scripts/make_machine_logs.py", "seed": args.seed,
                      "experiment": stem, "plant": f"{args.machine.name} with the TRUE "
                      f"parameters of {name}_truth.json"}  # fmt: skip
        tr, supply = write_experiment(
            out / f"{name}_{stem}.parquet", machine, plant, np.random.default_rng([args.seed, k]),
            t_end, amplitude, limits, payload, named=named,
            offsets=offsets, provenance=provenance,
        )  # fmt: skip
        print(f"{stem}: {t_end:g} s, q range {np.ptp(np.asarray(tr.q), axis=0).round(3)}"
              + (f", supply {supply.min() / 1e5:.0f}-{supply.max() / 1e5:.0f} bar"
                 if supply is not None else ""))  # fmt: skip


def write_experiment(
    path: Path, machine, plant, rng, t_end: float, amplitude: float, limits, payload_kg,
    *, named: bool, offsets: dict, provenance: dict | None = None,
):  # fmt: skip
    """One experiment of the TRUE ``plant`` (`experiment`), carrying ``payload_kg`` where it
    has a payload body, logged by ``machine``'s sensors into ``path``; the sidecar names the
    payload where ``named``. Refuses a run that left the model's validity. Returns the
    trajectory and the logged supply."""
    if "payload" in plant.model.body_names:
        j = plant.model.body_names.index("payload")
        plant = eqx.tree_at(lambda p: p.model.bodies[j].mass, plant, jnp.asarray(float(payload_kg)))
    tr, u, supply = experiment(plant, rng, t_end, limits, amplitude, 0.4)
    events = {e: int(v["count"]) for e, v in (tr.events or {}).items() if int(v["count"])}
    if events or not bool(tr.success):
        raise RuntimeError(f"{path.name}: the run left the model's validity: {events}")
    meta = {"model": machine.name, "synthetic": True,
            "conditions": {"payload_kg": payload_kg} if named else {}}  # fmt: skip
    if provenance:
        meta["provenance"] = provenance
    write_log(path, np.round(np.asarray(tr.t), 9),
              columns(machine, plant, rng, tr, u, supply, offsets), meta=meta)  # fmt: skip
    return tr, supply


if __name__ == "__main__":
    main()
