"""Monte Carlo study configurations (TOML), as ``jaxmb montecarlo CONFIG.toml`` reads them.

```toml
[study]
scenario = "section_iv"        # or "crane", or "machine" with machine = "my_machine.toml"
                               # (a machine file: VDC on its [task]; relative to this file)
                               # and optionally params = "out/identify/params.json" (its
                               # identified parameters: plant and controller model)
samples = 1000                 # N (--samples overrides)
chunk = 100                    # samples per jitted call (--chunk overrides; results do not
                               # depend on it)
lanes = 32                     # samples vmapped together on a device (results are bitwise
                               # reproducible for the same lanes)
seed = 0
t_final = 20.0                 # s
settle = 5.0                   # s: "max error after the transient" is measured from here
payload = 0.0                  # kg at the tool, nominal (the controller never knows it)

[solver]                       # every sample's solve (SolverOptions)
method = "rodas4"              # a `simulate` solver: "tsit5" (default), "rodas4" for stiff
                               # loops (the arm's thin boundary layer), ...
rtol = 1e-6
atol = 1e-8
max_steps = 100000
dt_save = 0.01
dtmin = 1e-9

[controller]                   # gains; or gains = "out/tune/gains.json" (from `jaxmb tune`)
K = [30.0, 30.0, 30.0]

[limits]
torque = [1000.0, 4000.0, 10000.0]   # |Q_a| limits, N m, N m, N (arm)

[[parameter]]                  # one block per perturbed leaf (`sampling` names them)
name = "body.link1.mass"
distribution = "uniform"       # uniform: nominal (1 +- spread); normal; range: low..high
spread = 0.1

[[correlation]]                # optional: a Gaussian copula over pairs
parameters = ["body.link1.mass", "body.link2.mass"]
rho = 0.5

[identified]                   # a machine study with [study] params: draws from the joint
inflate = 2.0                  # covariance its identification wrote (covariance.json), every
exclude = []                   # std times inflate (default 1); the parameters the data
                               # determine, but those excluded, hand-set in [[parameter]], or
                               # (body.payload.mass) where [study] payload sets the task's load
                               # (stage 1's bodies and the transducers' offsets stay as identified)
rank = true                    # rank the parameters by their uncertainty's effect on the
                               # outcomes (montecarlo's uncertainty_ranking.csv; default true)
```

Every unknown key is an error that names it, as is a missing or mistyped value.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import numpy as np

from jaxmb.control.kinds import SCENARIOS, kind_of
from jaxmb.control.sampling import Distribution, Parameter, identified, joined, nominal_value
from jaxmb.control.studies import SolverOptions
from jaxmb.io.covariance_file import read_covariance

__all__ = ["load_config", "build_study", "read_gains", "write_gains"]

_GAINS = {g for kind, _ in SCENARIOS.values() for g in kind.gain_names}
_SECTIONS = {
    "study": {
        "scenario",
        "machine",
        "params",
        "samples",
        "chunk",
        "lanes",
        "seed",
        "t_final",
        "settle",
        "payload",
    },  # fmt: skip
    "solver": {"rtol", "atol", "max_steps", "dt_save", "dtmin", "method"},
    "controller": {"gains", *_GAINS},
    "limits": {"torque"},
    "parameter": {"name", "distribution", "spread", "low", "high"},
    "correlation": {"parameters", "rho"},
    "identified": {"inflate", "exclude", "rank"},
    "tune": None,  # checked by jaxmb.control.tune_run
}


def _unknown(where: str, given, allowed) -> None:
    extra = sorted(set(given) - set(allowed))
    if extra:
        raise ValueError(f"{where}: unknown key(s) {extra}; expected some of {sorted(allowed)}")


def load_config(path) -> dict:
    """The TOML file as a dict, with its sections and keys checked."""
    path = Path(path)
    try:
        cfg = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"config: no file {str(path)!r}") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"config {path}: not valid TOML: {err}") from None
    _unknown(f"config {path}", cfg, _SECTIONS)
    for sec in ("study", "solver", "controller", "limits", "identified", "tune"):
        if not isinstance(cfg.get(sec, {}), dict):
            raise ValueError(f"config {path}: [{sec}] must be a table")
        if _SECTIONS[sec] is not None:
            _unknown(f"config {path} [{sec}]", cfg.get(sec, {}), _SECTIONS[sec])
    for sec in ("parameter", "correlation"):
        blocks = cfg.get(sec, [])
        if not isinstance(blocks, list):
            raise ValueError(f"config {path}: [[{sec}]] must be an array of tables")
        for k, b in enumerate(blocks):
            _unknown(f"config {path} [[{sec}]] #{k + 1}", b, _SECTIONS[sec])
    scenario = cfg.get("study", {}).get("scenario")
    if not (isinstance(scenario, str) and scenario in SCENARIOS):
        raise ValueError(
            f"config {path} [study] scenario: expected one of {tuple(SCENARIOS)}, got "
            f"{cfg.get('study', {}).get('scenario')!r}"
        )
    st = cfg["study"]
    kind, builtin = SCENARIOS[scenario]
    files = [s for s, (k, b) in SCENARIOS.items() if k.machine_file and b is None]
    if "params" in st and not kind.machine_file:
        raise ValueError(
            f"config {path} [study] params: only for a machine file's scenario "
            f"({', '.join(s for s, (k, _) in SCENARIOS.items() if k.machine_file)})"
        )
    if (kind.machine_file and builtin is None) != ("machine" in st):
        raise ValueError(
            f"config {path} [study] machine: "
            + (f"the {scenario} scenario needs machine = \"FILE.toml\" (a machine file)"
               if "machine" not in st else
               f"only for scenario = {' or '.join(map(repr, files))}, not {scenario!r} (which "
               f"names its machine)")
        )  # fmt: skip
    if "identified" in cfg and "params" not in st:
        raise ValueError(
            f"config {path} [identified]: draws from an identification's covariance; name its "
            "parameter file in [study] params (jaxmb identify's params.json)"
        )
    cfg["_dir"] = str(path.resolve().parent)
    return cfg


def read_gains(path, scenario: str) -> dict:
    """Gains written by `write_gains` (``jaxmb tune``) for ``scenario``, or for a scenario of
    the same kind (a machine file's VDC gains, whichever scenario tuned them; the controller
    then checks their shapes against the machine)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"gains file {str(path)!r}: cannot read JSON: {err}") from None
    given = data.get("scenario") if isinstance(data, dict) else None
    same_kind = isinstance(given, str) and given in SCENARIOS
    if not (same_kind and kind_of(given) is kind_of(scenario)) or not isinstance(
        data.get("gains"), dict
    ):
        accepted = " or ".join(repr(s) for s in SCENARIOS if kind_of(s) is kind_of(scenario))
        raise ValueError(
            f"gains file {path}: expected {{'scenario': {accepted}, 'gains': {{...}}}}, got "
            f"scenario {given!r}"
        )
    _unknown(f"gains file {path}", data["gains"], kind_of(scenario).gain_names)
    return data["gains"]


def write_gains(path, scenario: str, gains: dict, **extra) -> None:
    """Gains as JSON (``jaxmb simulate --gains`` and ``[controller] gains`` read them): a list
    per gain, a number for the crane's scalar ``k_v`` and ``k_0``."""
    body = {
        "scenario": scenario,
        "gains": {k: np.asarray(v, float).tolist() for k, v in gains.items()},
    }
    Path(path).write_text(json.dumps({**body, **extra}, indent=1))


def _number(where: str, x, *, integer: bool = False):
    ok = isinstance(x, int) if integer else isinstance(x, int | float)
    if not ok or isinstance(x, bool):
        raise ValueError(f"{where}: expected {'an integer' if integer else 'a number'}, got {x!r}")
    return x


def build_study(cfg: dict, *, samples: int | None = None, chunk: int | None = None):
    """``(study, controller, samples, chunk, lanes, description)`` from a loaded configuration;
    ``samples``/``chunk`` override the file's. ``description`` is what identifies the study
    (everything but samples and chunk) for `montecarlo.run_study`."""
    st = dict(cfg.get("study", {}))
    scenario = st["scenario"]
    params = []
    for k, b in enumerate(cfg.get("parameter", [])):
        where = f"[[parameter]] #{k + 1}"
        if "name" not in b:
            raise ValueError(f"{where}: needs a name")
        kw = {f: float(_number(f"{where} {f}", b[f])) for f in ("spread", "low", "high") if f in b}
        params.append(Parameter(str(b["name"]), str(b.get("distribution", "uniform")), **kw))
    pairs = []
    for k, c in enumerate(cfg.get("correlation", [])):
        names = c.get("parameters")
        if not (isinstance(names, list) and len(names) == 2) or "rho" not in c:
            raise ValueError(f"[[correlation]] #{k + 1}: needs parameters = [a, b] and rho")
        pairs.append(
            (names[0], names[1], float(_number(f"[[correlation]] #{k + 1} rho", c["rho"])))
        )
    dist = Distribution.from_pairs(params, pairs)
    drawn = _identified(cfg, dist) if "identified" in cfg else None
    if drawn is not None:
        dist = joined(dist, drawn[0])
    solver = {
        k: (int if k == "max_steps" else float)(
            _number(f"[solver] {k}", v, integer=k == "max_steps")
        )
        for k, v in cfg.get("solver", {}).items()
        if k != "method"
    }
    if "method" in cfg.get("solver", {}):
        solver["method"] = cfg["solver"]["method"]  # SolverOptions names the allowed ones
    ctrl = dict(cfg.get("controller", {}))
    gains_path = ctrl.pop("gains", None)
    gains = {}
    if gains_path is not None:
        p = Path(gains_path)
        p = p if p.is_absolute() else Path(cfg.get("_dir", ".")) / p
        gains = read_gains(p, scenario)
    gains.update(ctrl)
    kind, machine = SCENARIOS[scenario]
    _unknown(f"[controller] for scenario {scenario!r}", gains, kind.gain_names)
    common = {
        "seed": _number("[study] seed", st.get("seed", 0), integer=True),
        "payload": float(_number("[study] payload", st.get("payload", 0.0))),
    }
    for k in ("t_final", "settle"):
        if k in st:
            common[k] = float(_number(f"[study] {k}", st[k]))
    if "limits" in cfg and not kind.limits:
        raise ValueError(f"[limits]: the {scenario}'s limits are its valves' and pressures")
    options = SolverOptions(**{**kind.solver, **solver})
    study, controller, identity = kind.build(cfg, machine, dist, options, common, gains)
    n = samples if samples is not None else st.get("samples", 100)
    m = chunk if chunk is not None else st.get("chunk", 64)
    n = _number("samples", n, integer=True)
    m = _number("chunk", m, integer=True)
    lanes = _number("[study] lanes", st.get("lanes", 32), integer=True)
    description = {k: v for k, v in cfg.items() if k not in ("_dir", "tune")}
    description["study"] = {k: v for k, v in st.items() if k not in ("samples", "chunk")}
    description["controller"] = {k: v for k, v in gains.items()}
    description["study"].update(identity)  # rows of other files' versions must not mix with these
    h = getattr(study, "sample_time", None)  # rows of the continuous loop neither
    description["study"]["loop"] = "continuous" if h is None else f"sampled every {h:g} s"
    if drawn is not None:
        _check_identified(drawn[0], drawn[2], study.plant)
        description["study"]["covariance_sha256"] = drawn[1]
    return study, controller, n, m, lanes, description


def _identified(cfg: dict, hand_set: Distribution) -> tuple[Distribution, str, dict]:
    """``[identified]``'s distribution (`sampling.identified`) from the covariance file that
    ``[study] params`` names, that file's sha256 and its values."""
    sec = cfg["identified"]
    inflate = float(_number("[identified] inflate", sec.get("inflate", 1.0)))
    if not inflate > 0:
        raise ValueError(f"[identified] inflate: expected a number > 0, got {inflate}")
    if not isinstance(sec.get("rank", True), bool):
        raise ValueError(f"[identified] rank: expected true or false, got {sec['rank']!r}")
    exclude = sec.get("exclude", [])
    if not (isinstance(exclude, list) and all(isinstance(x, str) for x in exclude)):
        raise ValueError(
            f"[identified] exclude: expected a list of parameter names, got {exclude!r}"
        )
    params_path = Path(cfg["study"]["params"])
    if not params_path.is_absolute():
        params_path = Path(cfg.get("_dir", ".")) / params_path
    try:
        name = json.loads(params_path.read_text()).get("covariance")
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"[study] params: cannot read {params_path}: {err}") from None
    if not isinstance(name, str):
        raise ValueError(
            f"[identified]: {params_path} names no covariance file (an identification before "
            "covariance.json was written: identify again)"
        )
    path = params_path.parent / name
    try:
        cov = read_covariance(path)
    except ValueError as err:
        raise ValueError(f"[identified]: {err}") from None
    unknown = [x for x in exclude if x not in cov["names"]]
    if unknown:
        raise ValueError(f"[identified] exclude: {unknown} are not in {path} ({cov['names']})")
    # stage 1's inertial parameters are not leaves a study perturbs: its bodies are held at
    # their estimates; the pressure transducers' and encoders' offsets belong to the logger,
    # not to the closed loop (the controller reads the plant's state); a hand-set parameter, or the
    # task's payload, replaces the identified one
    skip = set(exclude) | set(hand_set.names) | set(cov["undetermined"])
    if "payload" in cfg["study"]:
        skip.add("body.payload.mass")
    names = [x for x in cov["names"]
             if not x.startswith(("mechanics.", "sensor.", "encoder.")) and x not in skip]  # fmt: skip
    if not names:
        raise ValueError(f"[identified]: no parameter of {path} is left to draw")
    try:
        dist = identified(cov, inflate=inflate, names=names)
    except ValueError as err:
        raise ValueError(f"[identified] {path}: {err}") from None
    values = dict(zip(cov["names"], cov["values"], strict=True))
    return dist, hashlib.sha256(path.read_bytes()).hexdigest(), values


def _check_identified(dist: Distribution, values: dict, plant) -> None:
    """Refuse a study whose plant does not hold the identified values its draws centre on (a
    params file and a covariance file of different identifications)."""
    for n in dist.names:
        held = nominal_value(plant, n)
        if not np.isclose(held, values[n], rtol=1e-9, atol=0.0):
            raise ValueError(
                f"[identified] {n}: the study's plant holds {held:.9g}, the covariance file "
                f"{values[n]:.9g}: the parameter file and its covariance are not one "
                "identification"
            )
