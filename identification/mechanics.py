r"""Stage 1 of a hydraulic machine's identification: the mechanics (booms, cylinder bodies and
payload) and cylinder friction from the chamber pressures, by the regressor route, before any
simulation.

The cylinders' pressure forces ``F_i = A_a p_a - A_b p_b`` (Petrovic & Mattila (2022) eq. (79))
map to generalized forces ``tau_p = sum_i J_x_i(q)^T F_i`` (the plant's input matrix). The
equations of motion (Dastranj & Mattila (2026) eq. (13)), with the net piston force
``F_i - f_i(xdot_i)`` on the mechanism, are linear in every body's 10 standard inertial
parameters and in each cylinder's friction law written in linear form:

    tau_p = Y(q, qd, qdd) pi + sum_i J_x_i^T [tanh(v/v_eps), exp(-(v/v_s)^2) tanh(v/v_eps), v]
                                            [F_c, F_s - F_c, sigma]^T ,   v = xdot_i

``Y`` the inertial regressor (`jaxmb.regressor`, with the cylinders' tube and rod bodies through
their loop closures) and ``v_s``, ``v_eps`` the file's widths. A pressure transducer's constant
offset ``o`` enters the measured force linearly, ``A_a (p_a + o_a) - A_b (p_b + o_b) = F +
dF``: with ``force_offsets`` each named cylinder's ``dF`` is one more column, ``J_x_i^T``, so
that the offsets do not bias the masses (``sensor.<a>.force``, N; stage 2 splits it into the
chambers' offsets). Positions are differentiated and
every column (pressures included) low-passed alike (`signals.estimate_derivatives`, zero phase,
Gautier's parallel filtering).

From the stacked equations (one noise level per joint, Gautier & Poignet (2001)):

1. **Base parameters** (Gautier (1990), `regressor.base_parameters`): the combinations the log
   determines, by weighted least squares, each with its standard deviation and 95 % interval.
2. **A physically consistent model** (`consistent.fit_consistent`: log-Cholesky parameters,
   Rucker & Wensing (2022)) of every body, pulled toward the file's (CAD) values by the log-det
   divergence with the user's ``prior_weight`` (Lee & Park (2018)). The payload has no CAD value:
   its prior is the payload-only fit (`payload.payload_only`) at a weight a thousand times
   weaker, which only settles what the log leaves open (its second moments, an out-of-plane
   offset).
3. **Standard deviations of every parameter** by the Laplace approximation of that fit: the
   inverse of the Gauss-Newton Hessian ``A^T A + sum_b w_b grad^2 d_b`` (data weighted by
   ``1/sigma``, so the cost is half a chi-square). The share of a parameter's precision that comes
   from the log rather than the prior, ``1 - var_post / var_prior``, says which parameters the log
   determines; the rest are reported as held by the prior.

The estimated noise is correlated over about ``fs / (2 cutoff)`` samples (the low-pass), so the
variances are scaled up by that oversampling factor over the stride. (A robot's regressor route
follows the filter exactly, `rigid.filtered_noise_covariance`; there the factor gave stds about
5-10 % too small in a Monte Carlo over noise, issue 31.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import jaxmb
from jaxmb.actuators.hydraulics import StribeckFriction
from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.identification import consistent as cons
from jaxmb.identification import regressor as rg
from jaxmb.identification.least_squares import LeastSquaresFit, least_squares, weak_directions
from jaxmb.identification.payload import payload_only
from jaxmb.identification.rigid import model_from_parameters
from jaxmb.identification.signals import estimate_derivatives, lowpass
from jaxmb.io.logs import Log
from jaxmb.io.machine import Machine
from jaxmb.multibody.checks import check_number, check_type

__all__ = [
    "CUTOFF",
    "PRIOR_WEIGHT",
    "PressureSamples",
    "pressure_samples",
    "edge_samples",
    "MechanicsEstimate",
    "identify_mechanics",
    "with_bodies",
]

CUTOFF = 4.0  # Hz: a boom's motion lives below 1-2 Hz; the hydraulic modes (~7 Hz) are cut
# The divergence of a body scaled by (1 + e) is about 2 e^2, so a weight w trusts the file's
# (CAD) bodies to a relative std of about 1 / (2 sqrt(w)): 625 is 2 %, a welded boom's CAD mass.
PRIOR_WEIGHT = 625.0
PAYLOAD_PRIOR_SHARE = 1e-3  # the payload's prior (the payload-only fit): only for what data miss
PAYLOAD_RADIUS = 0.1  # m: the payload prior's extent (a solid sphere): a point mass is singular
COM_WEAK = 0.05  # m: a payload centre coordinate with a larger std is not determined
DETERMINED = 0.5  # a parameter the log determines: more than half its precision from data


@dataclass(frozen=True)
class PressureSamples:
    """A log's samples for the pressure-force equations (SI): positions, their derivatives and
    the cylinders' pressure forces ``F (N, m)``, filtered alike, edges trimmed and strided."""

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    F: np.ndarray
    piston_velocity: np.ndarray  # (T, m) every sample, differentiated at 4 x cutoff
    index: np.ndarray  # the samples kept
    fs: float
    cutoff: float
    stride: int


def edge_samples(cutoff: float, fs: float) -> int:
    """Samples dropped at each end of a log sampled at ``fs`` Hz: ``1.5 / cutoff`` s, where the
    zero-phase low-pass at ``cutoff`` Hz is least accurate."""
    return int(np.ceil(1.5 / cutoff * fs))


def pressure_samples(
    plant: HydraulicPlant, log: Log, *, cutoff: float = CUTOFF, stride: int = 10
) -> PressureSamples:
    """The samples of a validated, uniformly sampled ``log`` of ``plant`` (module docstring);
    ``1.5 / cutoff`` s at each end, where the zero-phase filter is least accurate, are dropped."""
    names = plant.model.coordinate_names
    est = estimate_derivatives(log, names, cutoff=cutoff)
    fs = 1.0 / float(np.median(np.diff(log.t)))
    edge = edge_samples(cutoff, fs)
    keep = np.arange(edge, log.n - edge, stride)
    # the friction laws are nonlinear in the piston velocity: they are evaluated on a velocity
    # that keeps the motion's detail (4 x cutoff) and then filtered like everything else
    fast = estimate_derivatives(log, names, cutoff=min(4.0 * cutoff, 0.2 * fs))
    B = jax.jit(jax.vmap(plant.input_matrix))(jnp.asarray(fast.stack(list(names))))
    qd_fast = fast.stack([f"qd_{c}" for c in names])
    xd = np.einsum("tnm,tn->tm", np.asarray(B), qd_fast)
    F = np.stack(
        [a.cylinder.force(est[f"p_a_{a.name}"], est[f"p_b_{a.name}"]) for a in plant.actuators],
        axis=1,
    )
    return PressureSamples(
        q=est.stack(list(names))[keep],
        qd=est.stack([f"qd_{c}" for c in names])[keep],
        qdd=est.stack([f"qdd_{c}" for c in names])[keep],
        F=F[keep],
        piston_velocity=xd,
        index=keep,
        fs=fs,
        cutoff=float(cutoff),
        stride=int(stride),
    )


def friction_widths(plant: HydraulicPlant) -> tuple[tuple[float, float], ...]:
    """Each cylinder's ``(v_s, v_eps)`` of its friction law in linear form (the file's Stribeck
    widths; other laws take the spec's 5 mm/s and 1 mm/s)."""
    out = []
    for a in plant.actuators:
        f = a.friction
        out.append(
            (float(f.v_s), float(f.v_eps)) if isinstance(f, StribeckFriction) else (5e-3, 1e-3)
        )
    return tuple(out)


def equations(
    plant: HydraulicPlant,
    s: PressureSamples,
    *,
    stribeck: bool = False,
    force_offsets: Sequence[str] = (),
):
    """``(tau_p (N, n), Y (N, n, 10 nb), Y_friction (N, n, k m + o))`` at every sample: per
    cylinder the columns of ``F_c``, (with ``stribeck``) ``F_s - F_c``, and ``sigma``, then
    one column ``J_x_i^T`` per cylinder of ``force_offsets`` (its pressure force's offset,
    module docstring). Without
    ``stribeck`` the static force keeps the file's ratio ``F_s / F_c`` (one column for both):
    a 4 Hz low-pass smears the hump below ``v_s`` (5 mm/s), so a free ``F_s`` is biased."""
    widths = friction_widths(plant)
    v_s = jnp.asarray([w[0] for w in widths])
    v_eps = jnp.asarray([w[1] for w in widths])
    ratio = jnp.asarray(static_ratios(plant))

    def basis(xd):  # (m,) -> (m, k)
        th = jnp.tanh(xd / v_eps)
        hump = jnp.exp(-((xd / v_s) ** 2)) * th
        return jnp.stack([th, hump, xd] if stribeck else [th + (ratio - 1.0) * hump, xd], axis=1)

    # Gautier's parallel filtering: the same low-pass on the friction basis as on the pressures
    phi = np.asarray(jax.jit(jax.vmap(basis))(jnp.asarray(s.piston_velocity)))
    phi = lowpass(phi, s.fs, s.cutoff)[s.index]

    offset_columns = np.array([plant.actuator_names.index(a) for a in force_offsets], int)

    def one(q, qd, qdd, F, phi):
        B = plant.input_matrix(q)  # (n, m): J_x^T columns
        Y = jaxmb.regressor(plant.model, q, qd, qdd)
        fric = (B[:, :, None] * phi[None]).reshape(B.shape[0], -1)
        return B @ F, Y, jnp.concatenate([fric, B[:, offset_columns]], axis=1)

    args = (s.q, s.qd, s.qdd, s.F, phi)
    out = jax.jit(jax.vmap(one))(*(jnp.asarray(x) for x in args))
    return tuple(np.asarray(x) for x in out)


def static_ratios(plant: HydraulicPlant) -> tuple[float, ...]:
    """Each cylinder's ``F_s / F_c`` in the file (1 where the law has no static force)."""
    out = []
    for a in plant.actuators:
        f = a.friction
        ok = isinstance(f, StribeckFriction) and float(f.F_c) > 0
        out.append(float(f.F_s) / float(f.F_c) if ok else 1.0)
    return tuple(out)


@dataclass(frozen=True)
class MechanicsEstimate:
    """Stage 1's result (SI). ``names`` are the fitted parameters: ``<body>.<m|mcx|...|Izz>``
    (`regressor.INERTIAL_NAMES`, inertia about the body frame's origin) for every fitted body,
    then ``friction.<cylinder>.<F_c|dF_s|sigma>``, then ``sensor.<cylinder>.force`` (the
    pressure force's offset, N) of each cylinder fitted with one; ``values``, ``std``,
    ``nominal`` (the file's,
    or the prior's) and ``from_log`` (the share of the precision that comes from the log, module
    docstring) in that order, ``covariance`` the values' joint one. ``base`` and ``base_fit``:
    the base parameters and their weighted least-squares estimate; ``model`` the identified
    (physically consistent) model."""

    names: tuple[str, ...]
    values: np.ndarray
    std: np.ndarray
    covariance: np.ndarray  # (P, P) of the values, the Laplace approximation's
    nominal: np.ndarray
    from_log: np.ndarray
    fitted_bodies: tuple[str, ...]
    model: jaxmb.Model
    base: rg.BaseParameters
    base_fit: LeastSquaresFit
    weak: list
    payload_mass: float | None
    payload_mass_std: float | None
    payload_com: tuple[float, float, float] | None
    payload_com_std: tuple[float, float, float] | None
    payload_com_determined: tuple[bool, bool, bool]
    static_ratios: dict
    prior_weight: float
    converged: bool
    rms_residual: tuple[float, ...]
    samples: int
    cutoff_hz: float

    def value(self, name: str) -> float:
        return float(self.values[self.names.index(name)])

    def std_of(self, name: str) -> float:
        return float(self.std[self.names.index(name)])

    @property
    def friction(self) -> dict:
        """``{friction.<cyl>.<F_c|F_s|sigma>: value}``: ``F_s = F_c + dF_s`` where fitted, else
        ``F_c`` times the file's ratio."""
        out = {}
        for n, v in zip(self.names, self.values, strict=True):
            if n.startswith("friction.") and not n.endswith(".dF_s"):
                out[n] = float(v)
        for a, r in self.static_ratios.items():
            fc = out[f"friction.{a}.F_c"]
            key = f"friction.{a}.dF_s"
            out[f"friction.{a}.F_s"] = fc + self.value(key) if key in self.names else fc * r
        return out

    @property
    def not_determined(self) -> tuple[str, ...]:
        """Parameters whose value comes mostly from the prior, not the log."""
        return tuple(n for n, f in zip(self.names, self.from_log, strict=True) if f < DETERMINED)


def _payload_prior(machine: Machine, mass: float, com) -> np.ndarray:
    """The payload's 10 parameters as a solid sphere of radius `PAYLOAD_RADIUS` at ``com``, at
    least 1 kg: a physical prior body (a point mass has a singular pseudo-inertia)."""
    m = max(float(mass), 1.0)
    model = machine.with_payload(m, com).model  # a point mass at com
    pi = np.array(jaxmb.inertial_parameters(model))[model.body_names.index("payload")]
    pi[[4, 6, 9]] += 0.4 * m * PAYLOAD_RADIUS**2  # I_xx, I_yy, I_zz: a sphere's I_C
    return pi


def identify_mechanics(
    machine: Machine,
    log: Log | Sequence[Log],
    *,
    payload_known: float | None | Sequence[float | None] = None,
    stribeck: bool = True,
    force_offsets: Sequence[str] = (),
    cutoff: float = CUTOFF,
    stride: int = 10,
    prior_weight: float = PRIOR_WEIGHT,
) -> MechanicsEstimate:
    """Stage 1 (module docstring) on a validated, uniformly sampled log of ``machine``, or on
    several (a campaign, `campaign`: their equations stacked, one noise level per log and
    joint).

    ``payload_known``: the payload's mass when the experiment names it (its sidecar; with
    several logs, one entry per log, None where unknown); the payload body is then known (the
    file's centre) and moved to the right-hand side of that log's equations. The logs that
    name none carry one unknown payload, fitted with the booms. ``stribeck``: fit the static
    friction force too (see `equations`). ``force_offsets``: the cylinders whose pressure
    force's offset is fitted (module docstring; the pressure transducers' offsets), shared by
    the logs."""
    logs, known, force_offsets = _checked_inputs(machine, log, payload_known, cutoff, stride,
                                                 prior_weight, force_offsets)  # fmt: skip
    plant, j, unknown = _stage1_plant(machine, known)
    model = plant.model
    per_log = _log_equations(machine, plant, logs, known, j, cutoff, stride, stribeck,
                             force_offsets)  # fmt: skip
    tau, Y, Yf = (np.concatenate([x[i] for x in per_log]) for i in (1, 2, 3))
    N, n, _ = Y.shape
    fitted, pi_file, payload_prior = _fitted_bodies(machine, model, tau, Y, Yf, j, unknown)
    Yi, Ye, y = _stacked_rows(tau, Y, Yf, fitted)
    body_names = tuple(model.body_names[b] for b in fitted)
    names = _unknown_names(plant, body_names, stribeck, force_offsets)
    W = np.concatenate([Yi, Ye], axis=1)

    # 1. base parameters by WLS, one noise level per joint equation
    base, fit, w = _base_wls(W, y, names, per_log, n)

    # 2. the physically consistent model, pulled toward the file's bodies
    prior = pi_file[fitted]
    weights = _prior_weights(fitted, None if payload_prior is None else j, prior_weight)
    nominal_friction = _nominal_friction(plant, stribeck, force_offsets)
    res = _consistent_fit(Yi, Ye, y, w, prior, weights, nominal_friction)
    pi = np.asarray(res.pi)
    values = np.concatenate([pi.ravel(), np.asarray(res.extra)])

    # 3. Laplace approximation: Gauss-Newton Hessian of data plus prior, in parameter space
    cov, std, from_log = _laplace(W * w[:, None], pi, prior, weights, len(names))

    identified = model_from_parameters(model, pi, body_names)
    rows = (y - W @ values).reshape(N, n)
    payload = (None, None, None, None, (False, False, False))
    if payload_prior is not None:
        payload = _payload_estimate(values, std, cov, from_log, 10 * fitted.index(j))
    return MechanicsEstimate(
        names=names,
        values=values,
        std=std,
        covariance=cov,
        nominal=np.concatenate([prior.ravel(), np.asarray(nominal_friction)]),
        from_log=from_log,
        fitted_bodies=body_names,
        model=identified,
        base=base,
        base_fit=fit,
        weak=weak_directions(base.reduce(W) * w[:, None], base.base_names),
        payload_mass=payload[0],
        payload_mass_std=payload[1],
        payload_com=payload[2],
        payload_com_std=payload[3],
        payload_com_determined=payload[4],
        static_ratios=dict(zip(plant.actuator_names, static_ratios(plant), strict=True)),
        prior_weight=float(prior_weight),
        converged=bool(res.converged),
        rms_residual=tuple(float(x) for x in np.sqrt(np.mean(rows**2, axis=0))),
        samples=N,
        cutoff_hz=float(cutoff),
    )


def _stacked_rows(tau, Y, Yf, fitted: list):
    """``(Yi (N n, 10 f), Ye (N n, e), y (N n,))``: the equations' rows, with the inertial
    columns of the ``fitted`` bodies only."""
    N, n, _ = Y.shape
    cols = np.concatenate([np.arange(10 * b, 10 * b + 10) for b in fitted])
    Yi = Y[:, :, cols].reshape(N * n, -1)
    Ye = Yf.reshape(N * n, -1)
    y = tau.reshape(-1)
    return Yi, Ye, y


def _consistent_fit(Yi, Ye, y, w, prior, weights, nominal_friction) -> cons.ConsistentFit:
    """The physically consistent bodies and friction terms (`consistent.fit_consistent`) from
    the rows weighted by ``w``: the bodies started from and pulled toward ``prior`` with
    ``weights``, the friction started from the file's ``nominal_friction``."""
    return cons.fit_consistent(
        jnp.asarray(Yi), jnp.asarray(y), theta0=cons.parameters_to_log_cholesky(prior),
        extra0=jnp.asarray(nominal_friction), Y_extra=jnp.asarray(Ye), weights=jnp.asarray(w),
        prior=prior, prior_weight=jnp.asarray(weights), steps=512,
    )  # fmt: skip


def _stage1_plant(machine: Machine, known) -> tuple[HydraulicPlant, int | None, bool]:
    """``(plant, j, unknown)``: the plant whose regressor every log shares (a payload rides
    along at a named mass: the regressor does not depend on the bodies' values), the payload
    body's index ``j`` (None without one), and whether some log leaves the payload unknown."""
    has_payload = machine.payload is not None
    unknown = has_payload and any(m is None for m in known)
    named = [m for m in known if m is not None]
    plant = machine.plant
    if has_payload:
        plant = machine.with_payload(float(named[0] if named else 0.0))
    j = plant.model.body_names.index("payload") if has_payload else None
    return plant, j, unknown


def _fitted_bodies(machine, model, tau, Y, Yf, j, unknown: bool):
    """``(fitted, pi_file (nb, 10), payload_prior)``: the bodies the fit estimates (every one
    but a payload every log names), the file's parameters as their prior, and, for an unknown
    payload, its prior from the payload-only fit (`_payload_prior`; None otherwise)."""
    pi_file = np.array(jaxmb.inertial_parameters(model))  # (nb, 10), writable
    fitted = list(range(len(model.bodies)))
    payload_prior = None
    if j is not None and not unknown:
        fitted.remove(j)
    elif unknown:
        p1 = payload_only(tau, Y, Yf, pi_file, j, machine.payload.com)
        payload_prior = _payload_prior(machine, p1.mass, p1.com)
        pi_file[j] = payload_prior
    return fitted, pi_file, payload_prior


def _prior_weights(fitted: list, weak: int | None, prior_weight: float) -> np.ndarray:
    """``(len(fitted),)`` each fitted body's prior weight: ``prior_weight``, and
    `PAYLOAD_PRIOR_SHARE` of it for body ``weak``, a payload whose prior is only the
    payload-only fit (None: no such body)."""
    weights = np.full(len(fitted), float(prior_weight))
    if weak is not None:
        weights[fitted.index(weak)] *= PAYLOAD_PRIOR_SHARE
    return weights


def with_bodies(plant: HydraulicPlant, model: jaxmb.Model) -> HydraulicPlant:
    """``plant`` with the bodies (mass, centre, inertia) of ``model``, the same tree."""
    return eqx.tree_at(lambda p: p.model.bodies, plant, model.bodies)


def _checked_inputs(machine, log, payload_known, cutoff, stride, prior_weight, force_offsets):
    """``(logs, known payloads, force offsets)`` of `identify_mechanics`, each refused by name
    where it is not what the function takes."""
    check_type(machine, Machine, "identify_mechanics: machine (see jaxmb.io.machine)")
    logs = [log] if isinstance(log, Log) else list(log)
    known = [payload_known] if isinstance(log, Log) else list(payload_known or [None] * len(logs))
    if not logs or len(known) != len(logs):
        raise ValueError(
            f"identify_mechanics: {len(logs)} log(s) and {len(known)} payload(s); one each"
        )
    for lg in logs:
        check_type(lg, Log, "identify_mechanics: log")
    for m in known:
        if m is not None:
            check_number(m, "identify_mechanics: payload_known (kg)", at_least=0)
    check_number(cutoff, "identify_mechanics: cutoff (Hz)", above=0)
    check_number(stride, "identify_mechanics: stride", integer=True, at_least=1)
    check_number(prior_weight, "identify_mechanics: prior_weight", above=0)
    force_offsets = tuple(force_offsets)
    for a in force_offsets:
        if a not in machine.plant.actuator_names:
            raise ValueError(
                f"identify_mechanics: force_offsets: no cylinder {a!r}; the machine's are "
                f"{machine.plant.actuator_names}"
            )
    return logs, known, force_offsets


def _log_equations(machine, plant, logs, known, j, cutoff, stride, stribeck, force_offsets):
    """Each log's ``(samples, tau, Y, Yf)`` (`pressure_samples`, `equations`): a payload the
    log names is known, moved to the right-hand side of its equations, out of the fit (body
    ``j``); the regressor does not depend on the bodies' values, so one plant serves all."""
    per_log = []
    has_payload = j is not None
    for lg, m in zip(logs, known, strict=True):
        s = pressure_samples(plant, lg, cutoff=cutoff, stride=stride)
        tau, Y, Yf = equations(plant, s, stribeck=stribeck, force_offsets=force_offsets)
        if has_payload and m is not None:  # known: to the right-hand side, out of the fit
            pi_m = np.array(jaxmb.inertial_parameters(machine.with_payload(float(m)).model))[j]
            tau = tau - Y[:, :, 10 * j : 10 * j + 10] @ pi_m
            Y = Y.copy()
            Y[:, :, 10 * j : 10 * j + 10] = 0.0
        per_log.append((s, tau, Y, Yf))
    return per_log


def _nominal_friction(plant, stribeck: bool, force_offsets) -> list[float]:
    """The machine file's friction per cylinder (``F_c``, ``F_s - F_c`` where Stribeck's, and
    ``sigma``), then a zero force offset per fitted transducer (it reads true unless fitted)."""
    nominal_friction = []
    for a in plant.actuators:
        f = a.friction
        fc, fs_, sig = (
            (float(f.F_c), float(f.F_s), float(f.sigma))
            if isinstance(f, StribeckFriction)
            else (0.0, 0.0, 0.0)
        )
        nominal_friction += [fc, fs_ - fc, sig] if stribeck else [fc, sig]
    nominal_friction += [0.0] * len(force_offsets)
    return nominal_friction


def _laplace(A, pi, prior, weights, n_names: int):
    """``(covariance, std, from_log)`` of the Laplace approximation: the Gauss-Newton Hessian
    of the weighted data ``A`` plus the prior's (the Bregman divergence's Hessian of each
    fitted body at its estimate ``pi``, weighted), in parameter space; ``from_log`` the share
    of each inertial parameter's precision that the data give (1 for the friction terms)."""
    H_data = A.T @ A
    hess = jax.vmap(jax.hessian(cons.bregman_divergence), in_axes=(0, 0))(
        jnp.asarray(pi), jnp.asarray(prior)
    )
    H_prior = np.zeros_like(H_data)
    for k in range(len(prior)):
        H_prior[10 * k : 10 * k + 10, 10 * k : 10 * k + 10] = weights[k] * np.asarray(hess[k])
    cov = np.linalg.pinv(H_data + H_prior, hermitian=True)
    std = np.sqrt(np.clip(np.diag(cov), 0, None))
    ni = 10 * len(prior)
    var_prior = np.full(n_names, np.inf)
    var_prior[:ni] = np.diag(np.linalg.pinv(H_prior[:ni, :ni], hermitian=True))
    from_log = np.clip(1.0 - std**2 / var_prior, 0.0, 1.0)
    return cov, std, from_log


def _payload_estimate(values, std, cov, from_log, k: int):
    """``(mass, mass std, centre, centre std, which centre coordinates the log determines)``
    of the payload whose ten inertial parameters start at column ``k``."""
    mass, mass_std = float(values[k]), float(std[k])
    h = values[k + 1 : k + 4]
    c = h / mass
    # delta method for c = h / m: dc/dh = I/m, dc/dm = -h/m^2
    G = np.concatenate([-(h / mass**2)[:, None], np.eye(3) / mass], axis=1)
    C = G @ cov[k : k + 4, k : k + 4] @ G.T
    com, com_std = tuple(map(float, c)), tuple(map(float, np.sqrt(np.diag(C))))
    # a centre coordinate the log determines: its first moment's precision comes from the
    # data (the payload's prior is weak but not nil), to within COM_WEAK
    com_determined = tuple(
        bool(from_log[k + 1 + i] >= DETERMINED and com_std[i] < COM_WEAK) for i in range(3)
    )
    return mass, mass_std, com, com_std, com_determined


def _unknown_names(plant, body_names, stribeck: bool, force_offsets) -> tuple[str, ...]:
    """The names of stage 1's unknowns: each fitted body's ten inertial parameters, each
    cylinder's friction terms, each fitted transducer's force offset."""
    inertial = tuple(f"{b}.{p}" for b in body_names for p in rg.INERTIAL_NAMES)
    fields = ("F_c", "dF_s", "sigma") if stribeck else ("F_c", "sigma")
    friction = tuple(f"friction.{a}.{f}" for a in plant.actuator_names for f in fields)
    return inertial + friction + tuple(f"sensor.{a}.force" for a in force_offsets)


def _base_wls(W, y, names, per_log, n: int):
    """``(base parameters, their WLS fit, each row's weight 1 / sigma)``: one noise level per
    joint and log (experiments of other days, other loads), inflated for the rows the low-pass
    makes dependent (its bandwidth against the rate the rows keep)."""
    # columns whose effect is a millionth of the largest (a cylinder body's inertia about its
    # axis) are not base parameters of a real log: 1e-6, not the exact-rank 1e-8
    base = rg.base_parameters(W, names, rtol=1e-6)
    groups = np.concatenate(
        [k * n + np.tile(np.arange(n), x[1].shape[0]) for k, x in enumerate(per_log)]
    )
    fit = least_squares(base.reduce(W), y, groups=groups)
    s = per_log[0][0]
    inflate = max(1.0, s.fs / (2.0 * s.cutoff * s.stride))
    fit = fit.inflated(inflate)
    w = 1.0 / (fit.row_sigma[groups] * np.sqrt(inflate))  # 1 / sigma of independent rows
    return base, fit, w
