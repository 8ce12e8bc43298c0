r"""The regressor route: inertial, drive and friction parameters of a mechanical model from a log
of positions and generalized forces, by inverse-dynamics least squares.

Pipeline (Gautier (1990); Swevers et al. (1997); Wensing, Kim & Slotine (2017)):

1. positions are low-passed without phase lag and differentiated (`signals.estimate_derivatives`),
   the measured forces through the same filter, so that both sides of ``tau = W pi`` carry the
   same (zero) delay; ``edge`` samples at each end, where the zero-phase filter is least
   accurate, are dropped, and the rest decimated by ``stride`` (the filter is the anti-alias
   filter; Gautier's "parallel filtering");
2. the regressor `regressor.full_regressor` is stacked and reduced to base parameters;
3. base parameters by weighted least squares with one noise level per joint equation
   (`least_squares.least_squares`), with standard deviations, confidence intervals, the
   condition number and weak directions;
4. ``method="consistent"``: a physically consistent model (every body's pseudo-inertia positive
   definite, log-Cholesky parameters, `consistent.fit_consistent`) fitted to the same equations,
   regularised toward the prior model by the log-det divergence; ``method="wls"``: the standard
   parameters closest to the prior that reproduce the base estimate
   (``pi = pi_0 + K^+ (pi_b - K pi_0)``), which may not be a realisable rigid body.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from jaxmb.algorithms.dynamics import inertial_parameters, inverse_dynamics
from jaxmb.identification import consistent as cons
from jaxmb.identification import regressor as rg
from jaxmb.identification.coulomb_width import choose_coulomb_width
from jaxmb.identification.cutoff_choice import choose_cutoff
from jaxmb.identification.least_squares import LeastSquaresFit, least_squares, weak_directions
from jaxmb.identification.signals import estimate_derivatives, lowpass
from jaxmb.io.logs import Log
from jaxmb.multibody.checks import check_number, check_type
from jaxmb.multibody.model import Body, Model, replace_body

__all__ = [
    "DEFAULT_TERMS",
    "RigidSamples",
    "Drives",
    "Payload",
    "payload_torques",
    "generalized_forces",
    "RigidIdentification",
    "rigid_samples",
    "identify_rigid",
    "rigid_equations",
    "predict_torques",
    "model_from_parameters",
]

DEFAULT_TERMS = ("armature", "viscous", "coulomb", "offset")
METHODS = ("wls", "ols", "consistent")


class RigidSamples(eqx.Module):
    """A log's samples for the regressor at the full rate: ``t (T,)``; positions ``q``
    (zero-phase filtered), ``qd``, ``qdd`` (differentiated) and the generalized forces ``tau``
    as logged, each ``(T, n)``; ``index`` the samples used (edges trimmed, strided); ``fs`` Hz.
    A log in several uniform segments (split at gaps, `jaxmb.io.log_sampling.uniform_segments`) is their
    samples one after another, segment ``k`` at rows ``bounds[k]:bounds[k + 1]``, each filtered
    on its own."""

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    tau: np.ndarray
    index: np.ndarray
    fs: float
    bounds: np.ndarray

    def at(self, field: str) -> np.ndarray:
        """``field`` at the used samples."""
        return getattr(self, field)[self.index]

    def lowpass(self, x: np.ndarray, cutoff: float) -> np.ndarray:
        """`signals.lowpass` of ``x (T, ...)`` along its rows, segment by segment (nothing is
        filtered across a gap)."""
        b = self.bounds
        return np.concatenate(
            [lowpass(x[b[k] : b[k + 1]], self.fs, cutoff) for k in range(len(b) - 1)]
        )


class Drives(eqx.Module):
    """Per-coordinate drive constants that turn motor-side measurements into generalized forces:
    ``tau = G tau_motor`` (gear ratio G = motor angle / joint angle, torque through an ideal
    gear) and ``tau_motor = k_t i`` (torque constant, N m/A). The motor's rotor inertia and
    friction are identified as the joint terms ``armature`` (``G^2 J_m``), ``viscous``
    (``G^2 B``) and ``coulomb`` (``G T_c``), all joint side.

    Attributes:
        gear_ratio: ``{coordinate: G}``.
        torque_constant: ``{coordinate: k_t}``, N m/A (only for logs with currents ``i_<c>``).
    """

    gear_ratio: dict = eqx.field(static=True)
    torque_constant: dict = eqx.field(static=True)

    def __init__(self, gear_ratio=None, torque_constant=None):
        self.gear_ratio = {k: float(v) for k, v in (gear_ratio or {}).items()}
        self.torque_constant = {k: float(v) for k, v in (torque_constant or {}).items()}
        for what, d in (("gear_ratio", self.gear_ratio), ("torque_constant", self.torque_constant)):
            for k, v in d.items():
                if not (np.isfinite(v) and v != 0):
                    raise ValueError(f"Drives: {what}[{k!r}] must be finite and non-zero, got {v}")


class Payload(eqx.Module):
    """A known load one experiment carries: a point mass ``mass`` (kg) at ``com`` (m) in the
    frame ``frame`` (a log's sidecar ``conditions``: ``payload_kg``, ``payload_com``,
    ``payload_frame``)."""

    mass: float
    com: np.ndarray
    frame: str = eqx.field(static=True)


def payload_torques(
    model: Model, payload: Payload, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
) -> np.ndarray:
    """The generalized forces ``(T, n)`` that ``payload`` alone needs along the motion: the
    inverse dynamics of ``model``'s tree carrying the payload as its only body (inverse
    dynamics is linear in the bodies, so this is what the payload adds to the robot's)."""
    if payload.frame not in {f.name for f in model.frames}:
        raise ValueError(f"payload: frame {payload.frame!r} is not in the model; its frames are "
                         f"{[f.name for f in model.frames]}")  # fmt: skip
    body = Body("payload", payload.frame, payload.mass, payload.com, np.zeros((3, 3)))
    alone = Model(model.frames, (body,), gravity=model.gravity,
                  coordinate_map=model.coordinate_map, augmented_names=model.augmented_names)  # fmt: skip
    q, qd, qdd = (np.asarray(x, dtype=float) for x in (q, qd, qdd))
    T = q.shape[0]
    pad = -T % _CHUNK  # fixed-size blocks: one compiled program serves every segment's length
    X = [np.concatenate([x, np.zeros((pad, x.shape[1]))]).reshape(-1, _CHUNK, x.shape[1])
         for x in (q, qd, qdd)]  # fmt: skip
    out = [np.asarray(_inverse_dynamics_batch(alone, *(x[i] for x in X))) for i in range(len(X[0]))]
    return np.concatenate(out)[:T]


_CHUNK = 2048


@eqx.filter_jit
def _inverse_dynamics_batch(model: Model, q, qd, qdd):
    return jax.vmap(lambda a, b, c: inverse_dynamics(model, a, b, c))(q, qd, qdd)


def _per_segment(s: RigidSamples, model: Model, payloads, experiments):
    """Each sample's experiment label ``(T,)`` and the payloads' generalized forces ``(T, n)``
    (zero where a segment carries none)."""
    k = len(s.bounds) - 1
    payloads = [None] * k if payloads is None else list(payloads)
    experiments = [0] * k if experiments is None else list(experiments)
    if len(payloads) != k or len(experiments) != k:
        raise ValueError(f"payloads, experiments: expected one per log segment ({k}), got "
                         f"{len(payloads)} and {len(experiments)}")  # fmt: skip
    labels = np.zeros(s.t.size, dtype=int)
    extra = np.zeros_like(s.tau)
    for j in range(k):
        a, b = s.bounds[j], s.bounds[j + 1]
        labels[a:b] = experiments[j]
        if payloads[j] is not None:
            extra[a:b] = payload_torques(model, payloads[j], s.q[a:b], s.qd[a:b], s.qdd[a:b])
    return labels, extra


def generalized_forces(log: Log, names: Sequence[str], drives: Drives | None = None) -> np.ndarray:
    """Each coordinate's generalized force ``(T, n)`` from the best column the log has:
    ``tau_<c>`` as logged, else ``G tau_motor_<c>``, else ``G k_t i_<c>`` (`Drives`). Raises
    naming the coordinate and the columns and constants that would do."""
    drives = drives or Drives()
    out = []
    for c in names:
        G, kt = drives.gear_ratio.get(c), drives.torque_constant.get(c)
        if log.has(f"tau_{c}"):
            out.append(np.asarray(log[f"tau_{c}"]))
        elif log.has(f"tau_motor_{c}") and G is not None:
            out.append(G * np.asarray(log[f"tau_motor_{c}"]))
        elif log.has(f"i_{c}") and G is not None and kt is not None:
            out.append(G * kt * np.asarray(log[f"i_{c}"]))
        else:
            raise ValueError(
                f"log: no generalized force for coordinate {c!r}: expected column 'tau_{c}', or "
                f"'tau_motor_{c}' with a gear ratio, or 'i_{c}' with a gear ratio and a torque "
                f"constant (gear ratio {'given' if G is not None else 'not given'}, torque "
                f"constant {'given' if kt is not None else 'not given'})"
            )
    return np.stack(out, axis=1)


def unused_drives(log: Log, names: Sequence[str], drives: Drives) -> list[str]:
    """What of ``drives`` `generalized_forces` does not use on ``log``, a phrase per option
    (``tau_<c>`` logged: both constants ignored; ``tau_motor_<c>``: the torque constant)."""
    out = []
    for what, d, needs in (
        ("--gear-ratios", drives.gear_ratio, ("tau_motor_", "i_")),
        ("--torque-constants", drives.torque_constant, ("i_",)),
    ):
        ignored = {}
        for c in (c for c in names if c in d):
            used = next((p for p in ("tau_", "tau_motor_", "i_") if log.has(f"{p}{c}")), None)
            if used not in needs:
                ignored[c] = f"{used}{c}" if used else "no motor-side column"
        if ignored:
            out.append(
                f"{what} {', '.join(ignored)}: ignored; the log gives "
                + ", ".join(f"{c} by {col}" for c, col in ignored.items())
            )
    return out


def rigid_samples(
    model: Model,
    log: Log | Sequence[Log],
    *,
    cutoff: float,
    stride: int = 1,
    edge: float | None = None,
    drives: Drives | None = None,
) -> RigidSamples:
    """Positions and their derivatives, zero-phase filtered at ``cutoff`` Hz
    (`signals.estimate_derivatives`), and the logged generalized forces ``tau_<c>`` of every
    coordinate. ``edge`` seconds (default ``3 / cutoff``, where the filtered acceleration error
    falls below 0.1 % of its peak) are left out at both ends and every ``stride``-th sample of
    the rest is used. ``log`` may be several uniform segments of one sampling rate (a log split
    at its gaps, `jaxmb.io.log_sampling.uniform_segments`): each is filtered, differentiated and trimmed on its
    own."""
    edge = 3.0 / cutoff if edge is None else edge
    logs = [log] if isinstance(log, Log) else list(log)
    names = model.coordinate_names
    missing = [c for c in names if not logs[0].has(c)]
    if missing:
        raise ValueError(
            f"log: missing columns {missing}; the regressor route needs every coordinate's "
            "position and generalized force"
        )
    fs = [1.0 / float(np.median(np.diff(lg.t))) for lg in logs]
    if max(fs) - min(fs) > 1e-6 * max(fs):
        raise ValueError(f"log segments: expected one sampling rate, got {sorted(set(fs))} Hz")
    parts, index, start = [], [], 0
    for lg in logs:
        f = estimate_derivatives(lg, names, cutoff=cutoff, others="keep")
        t = np.asarray(f.t)
        idx = np.flatnonzero((t >= t[0] + edge) & (t <= t[-1] - edge))[::stride]
        parts.append((t, *(np.stack([np.asarray(f[fmt.format(c)]) for c in names], axis=1)
                           for fmt in ("{}", "qd_{}", "qdd_{}")),
                      generalized_forces(lg, names, drives)))  # fmt: skip
        index.append(idx + start)
        start += t.size
    index = np.concatenate(index)
    if index.size < 2:
        raise ValueError(f"log: too short for edge={edge} s and stride={stride}")
    t, q, qd, qdd, tau = (np.concatenate(x) for x in zip(*parts, strict=True))
    bounds = np.cumsum([0, *(p[0].size for p in parts)])
    return RigidSamples(t=t, q=q, qd=qd, qdd=qdd, tau=tau, index=index, fs=fs[0], bounds=bounds)


class RigidIdentification(eqx.Module):
    """The result of `identify_rigid`.

    Attributes:
        model: the identified model (standard parameters; physically consistent for
            ``method="consistent"``, see ``consistent``).
        joint: ``{coordinate: {term: value}}`` drive and friction coefficients (SI).
        terms: the joint terms in the regressor.
        names: all standard parameter names; ``pi`` their values.
        base: base parameters of the excitation.
        fit: the weighted least-squares estimate of the base parameters and its statistics.
        consistent: per body, whether its estimate is a realisable rigid body.
        method, cutoff, coulomb_width, stribeck_velocity: the options used (the cutoff and
            the Coulomb sign's width as given, or as chosen from the log: ``choices``).
        choices: each rule's report where ``identify_rigid`` chose the cutoff
            (``"cutoff"``: `cutoff_choice.choose_cutoff`) or the width (``"coulomb_width"``:
            `coulomb_width.choose_coulomb_width`).
        forces: the known generalized forces ``{name: f(q)}``; scales: their identified scales.
        weak: weak directions of the base regressor.
    """

    model: Model
    joint: dict
    terms: tuple[str, ...] = eqx.field(static=True)
    names: tuple[str, ...] = eqx.field(static=True)
    pi: np.ndarray
    base: rg.BaseParameters
    fit: LeastSquaresFit
    consistent: dict
    method: str = eqx.field(static=True)
    forces: dict = eqx.field(static=True)
    known_forces: dict = eqx.field(static=True)
    drives: Drives | None
    scales: dict
    coulomb_width: float = eqx.field(static=True)
    cutoff: float = eqx.field(static=True)
    choices: dict = eqx.field(static=True)
    stribeck_velocity: float = eqx.field(static=True)
    weak: list


def model_from_parameters(
    model: Model, pi: np.ndarray, bodies: Sequence[str] | None = None
) -> Model:
    """``model`` with each body's mass, COM and COM inertia from its 10 standard parameters
    (inverse of `jaxmb.inertial_parameters`); with ``bodies``, only those, ``pi`` holding theirs
    in that order. Raises naming the body if one is not a realisable rigid body (mass <= 0 or
    inertia not physical)."""
    names = model.body_names if bodies is None else tuple(bodies)
    pi = np.asarray(pi, dtype=float).reshape(len(names), 10)
    for name, p in zip(names, pi, strict=True):
        b = model.bodies[model.body_names.index(name)]
        m, h = p[0], p[1:4]
        if not m > 0:
            raise ValueError(f"body {b.name!r}: identified mass {m:.6g} kg is not positive")
        c = h / m
        Ixx, Ixy, Iyy, Ixz, Iyz, Izz = p[4:]
        I_O = np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]])
        I_C = I_O - m * (np.dot(c, c) * np.eye(3) - np.outer(c, c))  # parallel axes
        model = replace_body(model, b.name, mass=m, com=c, inertia=I_C)
    return model


def _split(terms, model, pi):
    """``pi`` as the bodies' inertial parameters and each coordinate's joint terms."""
    nb = 10 * len(model.bodies)
    k = len(terms)
    joint = {
        c: {t: float(pi[nb + i * k + j]) for j, t in enumerate(terms)}
        for i, c in enumerate(model.coordinate_names)
    }
    return pi[:nb], joint


def rigid_equations(
    model: Model,
    log: Log | Sequence[Log],
    *,
    cutoff: float,
    stride: int = 1,
    edge: float | None = None,
    drives: Drives | None = None,
    terms: Sequence[str] = DEFAULT_TERMS,
    coulomb_width: float = 1e-2,
    stribeck_velocity: float = 0.1,
    forces: Mapping[str, Callable] | None = None,
    known_forces: Mapping[str, Callable] | None = None,
    payloads: Sequence[Payload | None] | None = None,
    experiments: Sequence[int] | None = None,
) -> tuple[RigidSamples, np.ndarray, np.ndarray, np.ndarray]:
    """The regressor route's equations ``y = W pi`` at the full rate, before the low-pass:
    ``(s, W (T, n, p), y (T, n), labels (T,))`` with ``s`` the samples (`rigid_samples`), ``W``
    the regressor with a column per scaled force, ``y`` the measured generalized forces with
    the known forces and the payloads' moved over, ``labels`` each sample's experiment. The
    arguments are `identify_rigid`'s."""
    s = rigid_samples(model, log, cutoff=cutoff, stride=stride, edge=edge, drives=drives)
    W = rg.stacked_regressor(
        model,
        s.q,
        s.qd,
        s.qdd,
        tuple(terms),
        coulomb_width=coulomb_width,
        stribeck_velocity=stribeck_velocity,
    )
    W = _with_forces(np.asarray(W), s.q, dict(forces or {}))
    labels, carried = _per_segment(s, model, payloads, experiments)
    # known right-hand-side forces, and what the payloads need, to the measured side
    y = s.tau + _force_sum(s.q, dict(known_forces or {})) - carried
    return s, W, y, labels


def identify_rigid(
    model: Model,
    log: Log | Sequence[Log],
    *,
    terms: Sequence[str] = DEFAULT_TERMS,
    method: str = "consistent",
    cutoff: float | None = None,
    stride: int = 1,
    edge: float | None = None,
    coulomb_width: float | None = None,
    stribeck_velocity: float = 0.1,
    prior_weight: float = 0.1,
    prior_joint: dict | None = None,
    forces: Mapping[str, Callable] | None = None,
    known_forces: Mapping[str, Callable] | None = None,
    drives: Drives | None = None,
    payloads: Sequence[Payload | None] | None = None,
    experiments: Sequence[int] | None = None,
) -> RigidIdentification:
    """Identify ``model``'s inertial parameters and the joint ``terms`` from ``log`` (a `Log`,
    or the uniform segments of one, `jaxmb.io.log_sampling.uniform_segments`).

    ``model`` supplies the structure and the prior (CAD) inertial values; ``prior_joint``
    optional prior joint-term values (start of the consistent fit). ``forces`` are known
    position-dependent generalized forces on the model's right-hand side (like gravity, e.g. a
    counterbalance spring ``f(q) -> (n,)``), each with an identified scale ``<name>.scale``
    (prior 1): ``tau = W pi - sum_k s_k f_k(q)``; ``known_forces`` enter with scale 1, not
    identified (e.g. a spring whose parameters come from a datasheet, when the log's range of
    motion cannot separate it from gravity). With ``log`` a sequence of segments (of one or
    several experiments), ``payloads`` gives each segment's known load (`Payload`, or None;
    its generalized forces move to the measured side) and ``experiments`` its experiment's
    label: WLS then has one noise level per joint equation and experiment. ``cutoff`` (Hz) and
    ``coulomb_width`` (rad/s) left None are chosen from ``log`` as `jaxmb identify` chooses
    them: the cutoff from the motion's bandwidth (`cutoff_choice.choose_cutoff`), the width
    from the filtered velocity's noise (`coulomb_width.choose_coulomb_width`); the result
    records both and the rules' reports (``choices``). See the module docstring."""
    _check_options(model, log, drives, cutoff, stride, edge, coulomb_width, stribeck_velocity,
                   terms, method)  # fmt: skip
    terms = tuple(terms)
    segments = [log] if isinstance(log, Log) else list(log)
    cutoff, coulomb_width, choices = _chosen_cutoff_and_width(
        segments, model, cutoff, coulomb_width
    )
    s, W, y, labels = rigid_equations(
        model, log, cutoff=cutoff, stride=stride, edge=edge, drives=drives, terms=terms,
        coulomb_width=coulomb_width, stribeck_velocity=stribeck_velocity, forces=forces,
        known_forces=known_forces, payloads=payloads, experiments=experiments,
    )  # fmt: skip
    names = rg.parameter_names(model, terms)
    forces = dict(forces or {})
    known = dict(known_forces or {})
    W, y = _parallel_filtered(s, W, y, cutoff)
    names = names + tuple(f"{k}.scale" for k in forces)
    base, Wb, groups, fit = _base_estimate(model, s, W, y, labels, names, method, cutoff)
    pi0 = np.concatenate(
        [np.asarray(rg.standard_parameters(model, terms, prior_joint)), np.ones(len(forces))]
    )
    pi = _standard_estimate(model, W, y, fit, base, groups, pi0, method, prior_weight)
    inertial, joint = _split(terms, model, pi)
    scales = {k: float(v) for k, v in zip(forces, pi[len(pi) - len(forces) :], strict=True)}
    consistent, new = _identified_bodies(model, inertial)
    return RigidIdentification(
        model=new,
        joint=joint,
        terms=terms,
        names=names,
        pi=pi,
        base=base,
        fit=fit,
        consistent=consistent,
        method=method,
        forces=forces,
        known_forces=known,
        drives=drives,
        scales=scales,
        coulomb_width=coulomb_width,
        cutoff=cutoff,
        choices=choices,
        stribeck_velocity=stribeck_velocity,
        weak=weak_directions(Wb * (1.0 / fit.row_sigma[groups])[:, None]
                             if method != "ols" else Wb, base.base_names),
    )  # fmt: skip


def _chosen_cutoff_and_width(segments, model: Model, cutoff, coulomb_width):
    """``(cutoff, coulomb_width, choices)``: each left None chosen from the log as `jaxmb
    identify` chooses it (`cutoff_choice.choose_cutoff`, then at that cutoff
    `coulomb_width.choose_coulomb_width`), ``choices`` the rules' reports."""
    where = "identify_rigid"
    choices = {}
    if cutoff is None:  # the command's rule (`cutoff_choice`), its message in this API's names
        try:
            choices["cutoff"] = choose_cutoff(segments, model.coordinate_names)
        except ValueError as err:
            text = str(err).removeprefix("--cutoff: ").replace("give --cutoff", "give cutoff=")
            raise ValueError(f"{where}: cutoff=None: {text}") from None
        cutoff = choices["cutoff"]["cutoff_hz"]
    if coulomb_width is None:  # the command's rule (`coulomb_width`), at that cutoff
        choices["coulomb_width"] = choose_coulomb_width(segments, model.coordinate_names, cutoff)
        coulomb_width = choices["coulomb_width"]["coulomb_width"]
    return cutoff, coulomb_width, choices


def _base_estimate(model: Model, s, W, y, labels, names, method: str, cutoff: float):
    """``(base, Wb, groups, fit)``: the base parameters of the filtered rows ``W``, their
    regressor, each row's noise group (a joint's equations in one experiment, 0..G-1) and the
    least-squares estimate with the filtered noise's covariance (`filtered_noise_covariance`);
    refused where the rows do not outnumber the parameters."""
    if W.shape[0] <= len(names):
        raise ValueError(
            f"log: {s.index.size} samples x {model.n} equations = {W.shape[0]} rows for "
            f"{len(names)} parameters; log longer, or lower the stride"
        )
    base = rg.base_parameters(W, names)
    Wb = base.reduce(W)
    # one noise level per joint equation (and experiment), labelled 0..G-1
    groups = (labels[s.index][:, None] * model.n + np.arange(model.n)).ravel()
    groups = np.searchsorted(np.unique(groups), groups)
    fit = least_squares(Wb, y, groups=None if method == "ols" else groups)
    # the filtered noise is correlated over about fs / (2 cutoff) samples: fewer independent
    # equations than rows; the covariance follows the filter exactly (a sandwich)
    fit = filtered_noise_covariance(fit, Wb, y, groups, s, cutoff, ols=method == "ols")
    return base, Wb, groups, fit


def _identified_bodies(model: Model, inertial: np.ndarray) -> tuple[dict, Model]:
    """``(consistent, model)``: whether each body's identified parameters are physically
    consistent, and ``model`` with them (unchanged where one is not realisable)."""
    consistent = {
        b.name: bool(cons.is_physically_consistent(jnp.asarray(p)))
        for b, p in zip(model.bodies, inertial.reshape(-1, 10), strict=True)
    }
    try:
        new = model_from_parameters(model, inertial)
    except ValueError:
        new = model  # not realisable: keep the structure; `consistent` says which body failed
    return consistent, new


def _parallel_filtered(s, W, y, cutoff: float):
    """``(W, y)`` stacked into rows after parallel filtering (Gautier (1997)): the same
    zero-phase low-pass on both sides of y = W pi keeps the equation exact for the linear
    filter, removes the noise above the cutoff from y, and filters the regressor's sharp
    columns (smoothed sign(qd)) like the torque they explain, instead of comparing a filtered
    torque with an unfiltered column; the rows kept are the samples' (``s.index``)."""
    T, n, p = W.shape
    W = s.lowpass(W.reshape(T, n * p), cutoff).reshape(T, n, p)[s.index]
    y = s.lowpass(y, cutoff)[s.index]
    return W.reshape(-1, p), y.reshape(-1)


def _check_options(model, log, drives, cutoff, stride, edge, coulomb_width, stribeck_velocity,
                   terms, method) -> None:  # fmt: skip
    """Refuse `identify_rigid`'s arguments that are not what it takes, by name."""
    where = "identify_rigid"
    check_type(model, Model, f"{where}: model")
    _check_logs(log, f"{where}: log (read a file with jaxmb.identification.read_log)")
    check_type(drives, (Drives, type(None)), f"{where}: drives")
    if cutoff is not None:
        check_number(cutoff, f"{where}: cutoff (Hz)", above=0)
    check_number(stride, f"{where}: stride", integer=True, at_least=1)
    if edge is not None:
        check_number(edge, f"{where}: edge (s)", at_least=0)
    if coulomb_width is not None:
        check_number(coulomb_width, f"{where}: coulomb_width (rad/s)", above=0)
    check_number(stribeck_velocity, f"{where}: stribeck_velocity (rad/s)", above=0)
    if isinstance(terms, str):
        raise TypeError(f"{where}: terms: expected a sequence of term names, got str {terms!r}")
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")


def _standard_estimate(model, W, y, fit, base, groups, pi0, method: str, prior_weight):
    """The standard parameters (inertial, joint terms, force scales) behind the base estimate:
    the physically consistent fit (log-Cholesky, pulled toward the model's inertias) for
    ``"consistent"``, else those nearest the prior that reproduce the base estimate."""
    if method == "consistent":
        nb = len(model.bodies)
        Y_in, Y_ex = W[:, : 10 * nb], W[:, 10 * nb :]
        w = 1.0 / fit.row_sigma[groups]
        prior = inertial_parameters(model)
        res = cons.fit_consistent(
            jnp.asarray(Y_in),
            jnp.asarray(y),
            theta0=cons.parameters_to_log_cholesky(prior),
            extra0=jnp.asarray(pi0[10 * nb :]),
            Y_extra=jnp.asarray(Y_ex),
            weights=None if w is None else jnp.asarray(w),
            prior=prior,
            prior_weight=prior_weight,
        )
        pi = np.concatenate([np.asarray(res.pi).ravel(), np.asarray(res.extra)])
    else:
        # the standard parameters nearest the prior that reproduce the base estimate
        K = np.asarray(base.K)
        pi = pi0 + np.linalg.pinv(K) @ (fit.theta - K @ pi0)
    return pi


def filtered_noise_covariance(
    fit: LeastSquaresFit,
    Wb: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    s: RigidSamples,
    cutoff: float,
    *,
    ols: bool = False,
) -> LeastSquaresFit:
    r"""``fit`` with the covariance of its estimate for noise that passed the zero-phase
    low-pass ``F`` before the regression (parallel filtering): the residual rows are ``F n``,
    correlated over about ``fs / (2 cutoff)`` samples, not independent. With ``A`` the weighted
    regressor and ``B_g`` its rows of group ``g`` put back at their full-rate samples,

    ``cov = (A^T A)^-1 [sum_g sigma_g^2 (F B_g)^T (F B_g)] (A^T A)^-1``

    (``F`` of a zero-phase filter is symmetric), ``sigma_g^2`` the white noise level of group
    ``g`` (a joint's equations in one experiment): its residuals' sum of squares over
    ``m_g E - tr((A^T A)^-1 (F B_g)^T (F B_g))``, with ``E = sum h_k^2`` the filter's energy (its
    equivalent noise bandwidth over ``fs / 2``): the filtered residuals keep ``E`` of the white
    variance per row, and the fit absorbs about one white variance per parameter. OLS takes
    one noise level for every group, as its covariance does. The regressor's own noise
    (from the measured positions) is not in it."""
    w = np.ones(y.size) if ols else 1.0 / fit.row_sigma[groups]
    e = (y - Wb @ fit.theta) * w
    A = Wb * w[:, None]
    scale = np.linalg.norm(A, axis=0)  # columns of unit norm: units do not spoil the inverse
    scale = np.where(scale > 0, scale, 1.0)
    A = A / scale
    m, r = A.shape
    n = m // s.index.size  # rows per sample
    impulse = np.zeros(2 * int(10 * s.fs / cutoff) + 1)
    impulse[impulse.size // 2] = 1.0
    energy = float(np.sum(lowpass(impulse, s.fs, cutoff) ** 2))
    sample = s.index[np.arange(m) // n]
    _, sv, Vt = np.linalg.svd(A, full_matrices=False)
    keep = sv > sv[0] * 1e-12
    bread = (Vt[keep].T / sv[keep] ** 2) @ Vt[keep]  # (A^T A)^-1 (pseudo-inverse)
    labels = np.unique(groups)
    M, dof = [], []
    for g in labels:
        rows = groups == g
        B = np.zeros((s.t.size, r))
        B[sample[rows]] = A[rows]  # one row per sample and group
        FB = s.lowpass(B, cutoff)
        M.append(FB.T @ FB)  # A_g^T (F F^T) A_g: the group's noise through the estimate
        # E[e_g^T e_g] = sigma_g^2 (m_g energy - tr(P F F^T)_g): the fit absorbs about one
        # white-noise variance per parameter, not one filtered variance
        dof.append(rows.sum() * energy - float(np.sum(bread * M[-1])))
    if min(dof) <= 0:
        raise ValueError(
            f"log: {m} equations at a {cutoff:g} Hz low-pass hold about {m * energy:.0f} "
            f"independent ones, too few for {r} base parameters; a longer log, or a higher cutoff"
        )
    ss = [float(e[groups == g] @ e[groups == g]) for g in labels]
    if ols:  # one white-noise level for every equation
        var = [sum(ss) / sum(dof)] * len(labels)
    else:
        var = [a / d for a, d in zip(ss, dof, strict=True)]
    meat = sum(v * Mg for v, Mg in zip(var, M, strict=True))
    cov = (bread @ meat @ bread) / np.outer(scale, scale)
    cov = 0.5 * (cov + cov.T)
    return eqx.tree_at(lambda f: (f.cov, f.std), fit, (cov, np.sqrt(np.diag(cov))))


def predict_torques(
    result: RigidIdentification,
    log: Log | Sequence[Log],
    *,
    cutoff: float | None = None,
    edge: float | None = None,
    payloads: Sequence[Payload | None] | None = None,
) -> tuple[RigidSamples, np.ndarray]:
    """Generalized forces the identified model predicts from ``log``'s motion (positions
    filtered and differentiated as in the fit, at ``cutoff``: default the fit's) at the
    samples ``s.index``, to be compared with the logged forces ``s.at("tau")``:
    ``(s, tau_hat (N, n))``; ``payloads`` as in `identify_rigid`, their forces added."""
    check_type(result, RigidIdentification, "predict_torques: result")
    _check_logs(log, "predict_torques: log")
    cutoff = result.cutoff if cutoff is None else cutoff
    check_number(cutoff, "predict_torques: cutoff (Hz)", above=0)
    s, W, y, _ = rigid_equations(
        result.model, log, cutoff=cutoff, edge=edge, drives=result.drives, terms=result.terms,
        coulomb_width=result.coulomb_width, stribeck_velocity=result.stribeck_velocity,
        forces=result.forces, known_forces=result.known_forces, payloads=payloads,
    )  # fmt: skip
    # the equations' right side is the measured forces less the known ones and the payloads'
    tau = np.einsum("tnp,p->tn", W[s.index], result.pi) + (s.tau - y)[s.index]
    return s, tau


def _check_logs(log, what: str) -> None:
    """A `Log`, or a non-empty sequence of them (segments)."""
    if isinstance(log, list | tuple) and log:
        for k, lg in enumerate(log):
            check_type(lg, Log, f"{what}[{k}]")
    else:
        check_type(log, Log, what)


def _force_sum(Q: np.ndarray, forces: Mapping[str, Callable]) -> np.ndarray:
    """``sum_k f_k(q)`` at every sample, ``(N, n)``."""
    total = np.zeros_like(Q)
    for k, f in forces.items():
        v = np.asarray(jax.vmap(f)(jnp.asarray(Q)))
        if v.shape != Q.shape:
            raise ValueError(f"known_forces[{k!r}]: expected f(q) of shape {Q.shape[1:]}")
        total = total + v
    return total


def _with_forces(W: np.ndarray, Q: np.ndarray, forces: Mapping[str, Callable]) -> np.ndarray:
    """Append one column ``-f_k(q)`` per scaled force to the stacked regressor ``(N, n, p)``."""
    if not forces:
        return W
    cols = [-np.asarray(jax.vmap(f)(jnp.asarray(Q))) for f in forces.values()]
    for k, c in zip(forces, cols, strict=True):
        if c.shape != W.shape[:2]:
            raise ValueError(f"forces[{k!r}]: expected f(q) of shape {W.shape[1:2]}")
    return np.concatenate([W, np.stack(cols, axis=-1)], axis=-1)
