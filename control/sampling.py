r"""Distributions over perturbed models for Monte Carlo studies and gain tuning.

A perturbed model is the nominal one with some named scalar leaves replaced. A `Distribution`
draws those values for sample ``i`` from a generator of its own (Philox keyed by ``(i, seed)``,
on the host), so a sample's values depend on the seed and its index alone, bit for bit: the
same whatever the chunking, the device count or the process count (what makes a sharded study
reproducible). They enter the jitted computation as data.

Correlation is a Gaussian copula: ``z = L w`` with ``w ~ N(0, I)`` and ``L L^T = R`` the
correlation matrix; a ``"normal"`` parameter is ``nominal (1 + spread z)``, a ``"uniform"`` one
``nominal (1 + spread (2 Phi(z) - 1))`` (the +-10 % of Ider et al. is ``spread = 0.1``), a
``"range"`` one ``low + (high - low) Phi(z)``, a ``"lognormal"`` one ``nominal exp(spread z)``
(positive by construction: ``spread`` is the std of its log). Independent parameters are
``R = I``. `identified` builds the distribution an identification left (its joint covariance,
`jaxmb.io.covariance_file`): each log-space parameter lognormal, each linear one normal, with
the correlations the covariance holds.

Leaf names (`leaf_getter`):

- ``body.<name>.mass`` (kg) and ``body.<name>.inertia`` (a factor on the rotational inertia
  about the COM, nominal 1) of a model's body;
- ``<part>.<actuator>.<field>`` of a hydraulic plant: ``valve.lift.c_pa``, ``cylinder.lift.beta``,
  ``friction.tilt.F_c``, ``mount.lift.l_min``, ...;
- scenario-level values a study defines itself (``initial_error.phi``, ``disturbance.scale``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike
from scipy import special

from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.multibody.model import Body, Model

__all__ = [
    "Parameter",
    "Distribution",
    "identified",
    "joined",
    "leaf_getter",
    "nominal_value",
    "with_leaves",
    "with_point_mass",
]

KINDS = ("uniform", "normal", "range", "lognormal")
# standard normal deviations a draw exceeds with probability about 1e-9 (`Distribution.upper_bounds`)
TAIL = 6.0


@dataclass(frozen=True)
class Parameter:
    """One perturbed scalar.

    Attributes:
        name: the leaf's name (see the module docstring).
        kind: ``"uniform"`` (nominal times 1 +- spread), ``"normal"`` (relative std ``spread``),
            ``"range"`` (uniform on ``[low, high]``, absolute, SI units) or ``"lognormal"``
            (nominal times ``exp(spread z)``).
        spread: relative half-width or standard deviation (uniform, normal), the std of the
            log (lognormal).
        low, high: the range's ends (range).
    """

    name: str
    kind: str = "uniform"
    spread: float = 0.0
    low: float = 0.0
    high: float = 0.0

    def __post_init__(self):
        where = f"parameter {self.name!r}"
        if self.kind not in KINDS:
            raise ValueError(f"{where}: distribution must be one of {KINDS}, got {self.kind!r}")
        if self.kind in ("uniform", "normal", "lognormal") and not (
            np.isfinite(self.spread) and self.spread >= 0
        ):
            raise ValueError(f"{where}: spread must be a finite number >= 0, got {self.spread}")
        if self.kind == "uniform" and self.spread >= 1:
            raise ValueError(f"{where}: a uniform spread must be < 1 (values stay > 0)")
        if self.kind == "range" and not (np.isfinite(self.low) and np.isfinite(self.high)):
            raise ValueError(f"{where}: low and high must be finite, got {self.low}, {self.high}")
        if self.kind == "range" and not self.high >= self.low:
            raise ValueError(f"{where}: need high >= low, got [{self.low}, {self.high}]")


@dataclass(frozen=True)
class Distribution:
    """Parameters with an optional correlation matrix (a Gaussian copula; identity if None)."""

    parameters: tuple[Parameter, ...]
    correlation: tuple[tuple[float, ...], ...] | None = None

    def __post_init__(self):
        names = self.names
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"distribution: parameter(s) {dup} listed twice")
        if self.correlation is not None:
            R = np.asarray(self.correlation, dtype=float)
            p = len(names)
            if R.shape != (p, p) or not np.allclose(R, R.T) or not np.allclose(np.diag(R), 1):
                raise ValueError(
                    f"distribution: correlation must be a symmetric ({p}, {p}) matrix with unit "
                    "diagonal"
                )
            if np.linalg.eigvalsh(R)[0] <= 0:
                raise ValueError("distribution: correlation matrix is not positive definite")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    @classmethod
    def from_pairs(
        cls, parameters: Sequence[Parameter], pairs: Sequence[tuple[str, str, float]] = ()
    ) -> Distribution:
        """Correlations given as ``(name_a, name_b, rho)`` pairs, the rest independent."""
        names = [p.name for p in parameters]
        if not pairs:
            return cls(tuple(parameters))
        R = np.eye(len(names))
        for a, b, rho in pairs:
            for x in (a, b):
                if x not in names:
                    raise ValueError(f"correlation: {x!r} is not a perturbed parameter {names}")
            if a == b or not -1 < rho < 1:
                raise ValueError(f"correlation {a!r}-{b!r}: need two names and -1 < rho < 1")
            i, j = names.index(a), names.index(b)
            R[i, j] = R[j, i] = rho
        return cls(tuple(parameters), tuple(map(tuple, R.tolist())))

    def upper_bounds(self, nominal, z: float = TAIL) -> np.ndarray:
        """Each parameter's largest value a draw takes but with probability about 1e-9 (its
        standard normal ``z`` at `TAIL`; a uniform's or a range's upper end), ``(P,)``: what a
        study sizes its buffers for (a valve's delay: `control.studies.MachineStudy`)."""
        nominal = np.asarray(nominal, dtype=float)
        out = np.empty(len(self.parameters))
        for k, par in enumerate(self.parameters):
            if par.kind == "uniform":
                out[k] = nominal[k] * (1 + par.spread)
            elif par.kind == "normal":
                out[k] = nominal[k] * (1 + par.spread * z)
            elif par.kind == "lognormal":
                out[k] = nominal[k] * np.exp(par.spread * z)
            else:
                out[k] = par.high
        return out

    def sample(self, nominal, seed: int, indices) -> np.ndarray:
        """The values of samples ``indices``, ``(len(indices), P)``, drawn on the host: each
        row from its own counter-based generator (Philox keyed by ``(index, seed)``), so a
        row is bitwise the same whatever else is drawn with it (no vectorisation-dependent
        rounding, as inside a jitted batch)."""
        nominal = np.asarray(nominal, dtype=float)
        indices = np.atleast_1d(np.asarray(indices, dtype=np.int64))
        p = len(self.parameters)
        if np.any(indices < 0):
            raise ValueError("Distribution.sample: indices must be >= 0")
        z = np.zeros((indices.size, p))
        for row, i in enumerate(indices):
            key = np.array([i, seed], dtype=np.uint64)
            z[row] = np.random.Generator(np.random.Philox(key=key)).standard_normal(p)
        if self.correlation is not None:
            z = z @ np.linalg.cholesky(np.asarray(self.correlation)).T
        u = special.ndtr(z)
        out = np.empty_like(z)
        for k, par in enumerate(self.parameters):
            if par.kind == "uniform":
                out[:, k] = nominal[k] * (1 + par.spread * (2 * u[:, k] - 1))
            elif par.kind == "normal":
                out[:, k] = nominal[k] * (1 + par.spread * z[:, k])
            elif par.kind == "lognormal":
                out[:, k] = nominal[k] * np.exp(par.spread * z[:, k])
            else:
                out[:, k] = par.low + (par.high - par.low) * u[:, k]
        return out


def identified(
    covariance: Mapping, *, inflate: float = 1.0, names: Sequence[str] | None = None
) -> Distribution:
    """The distribution an identification left (`jaxmb.io.covariance_file.read_covariance`'s
    mapping), around the nominal values a study takes (the identified plant's): each ``"log"``
    parameter lognormal with the std of its log, each ``"linear"`` one normal with its std
    relative to its value, correlated as the covariance says; every std times ``inflate`` (a
    margin for model error). ``names``: those parameters only (default every one the data
    determine), in that order."""
    all_names = list(covariance["names"])
    pick = [n for n in all_names if n not in covariance["undetermined"]] if names is None else names
    unknown = [n for n in pick if n not in all_names]
    if unknown:
        raise ValueError(f"identified: {unknown} are not in the covariance file")
    undetermined = [n for n in pick if n in covariance["undetermined"]]
    if undetermined:
        raise ValueError(
            f"identified: {undetermined}: the identification did not determine them (an "
            "infinite std); give them a hand-set range instead"
        )
    if not (np.isfinite(inflate) and inflate > 0):
        raise ValueError(f"identified: inflate must be a finite number > 0, got {inflate}")
    k = [all_names.index(n) for n in pick]
    C = np.asarray(covariance["covariance"], float)[np.ix_(k, k)]
    d = np.sqrt(np.diag(C))
    if not np.all(d > 0):
        zero = [n for n, x in zip(pick, d, strict=True) if not x > 0]
        raise ValueError(f"identified: {zero} have a zero variance")
    params = []
    for n, j, dk in zip(pick, k, d, strict=True):
        log = covariance["parametrisation"][j] == "log"
        value = float(covariance["values"][j])
        spread = inflate * dk if log else inflate * dk / abs(value)
        params.append(Parameter(n, "lognormal" if log else "normal", spread=float(spread)))
    R = C / np.outer(d, d)
    R = 0.5 * (R + R.T)
    np.fill_diagonal(R, 1.0)
    return Distribution(tuple(params), tuple(map(tuple, R.tolist())))


def joined(a: Distribution, b: Distribution) -> Distribution:
    """``a``'s and ``b``'s parameters as one distribution, the two independent."""
    Ra = np.eye(len(a.parameters)) if a.correlation is None else np.asarray(a.correlation)
    Rb = np.eye(len(b.parameters)) if b.correlation is None else np.asarray(b.correlation)
    R = np.block([[Ra, np.zeros((Ra.shape[0], Rb.shape[0]))],
                  [np.zeros((Rb.shape[0], Ra.shape[0])), Rb]])  # fmt: skip
    if a.correlation is None and b.correlation is None:
        return Distribution(a.parameters + b.parameters)
    return Distribution(a.parameters + b.parameters, tuple(map(tuple, R.tolist())))


def leaf_getter(system: Model | HydraulicPlant, name: str) -> Callable:
    """``system -> leaf`` for a leaf name (module docstring); raises naming what exists."""
    parts = name.split(".")
    model = system.model if isinstance(system, HydraulicPlant) else system
    if len(parts) != 3:
        raise ValueError(f"parameter {name!r}: expected '<part>.<name>.<field>'")
    part, who, field = parts
    if part == "body":
        if who not in model.body_names:
            raise ValueError(f"parameter {name!r}: no body {who!r}; bodies are {model.body_names}")
        if field not in ("mass", "inertia"):
            raise ValueError(f"parameter {name!r}: a body's field is 'mass' or 'inertia'")
        j = model.body_names.index(who)

        def get_model(s):
            return s.model if isinstance(s, HydraulicPlant) else s

        return lambda s: getattr(get_model(s).bodies[j], field)
    if not isinstance(system, HydraulicPlant):
        raise ValueError(f"parameter {name!r}: only 'body.<name>.<field>' applies to a Model")
    if who not in system.actuator_names:
        raise ValueError(
            f"parameter {name!r}: no actuator {who!r}; actuators are {system.actuator_names}"
        )
    i = system.actuator_names.index(who)
    if part not in ("valve", "cylinder", "friction", "mount"):
        raise ValueError(f"parameter {name!r}: part must be valve, cylinder, friction or mount")
    owner = getattr(system.actuators[i], part)
    if owner is None or not eqx.is_array(getattr(owner, field, None)):
        kind = type(owner).__name__
        raise ValueError(f"parameter {name!r}: {kind} of actuator {who!r} has no leaf {field!r}")
    return lambda s: getattr(getattr(s.actuators[i], part), field)


def nominal_value(system, name: str) -> float:
    """The leaf's nominal value: 1 for an inertia factor."""
    if name.endswith(".inertia"):
        leaf_getter(system, name)
        return 1.0
    return float(leaf_getter(system, name)(system))


def with_leaves(system, values: Mapping[str, ArrayLike]):
    """``system`` with each named leaf set (an inertia factor scales the tensor). Set by
    `equinox.tree_at`: values may be traced (vmap, grad); a sampled mass stays > 0 by the
    distribution (uniform spread < 1), zero is allowed for a payload point mass."""
    if not values:
        return system
    getters = [leaf_getter(system, n) for n in values]
    new = [
        v * g(system) if n.endswith(".inertia") else jnp.asarray(v, dtype=float)
        for (n, v), g in zip(values.items(), getters, strict=True)
    ]
    return eqx.tree_at(lambda s: [g(s) for g in getters], system, new)


def with_point_mass(system, name: str, frame: str, mass: float = 0.0):
    """``system`` (a Model or a plant with one) with a point mass ``name`` at ``frame``'s origin,
    so that a payload is a leaf (``body.<name>.mass``) even where it is nominally 0 kg."""
    model = system.model if isinstance(system, HydraulicPlant) else system
    if name in model.body_names:
        return with_leaves(system, {f"body.{name}.mass": mass})
    point = Body(name, frame, 1.0, jnp.zeros(3), jnp.zeros((3, 3)))
    new = Model(
        model.frames, model.bodies + (point,), model.gravity, model.coordinate_map,
        model.augmented_names,
    )  # fmt: skip
    new = eqx.tree_at(lambda m: m.bodies[-1].mass, new, jnp.asarray(mass, dtype=float))
    if isinstance(system, HydraulicPlant):
        return eqx.tree_at(lambda s: s.model, system, new)
    return new
