r"""Inverse-dynamics regressors with joint drive and friction terms, and base parameters.

The rigid-body part is linear in the standard inertial parameters (10 per body, Pinocchio's order,
`jaxmb.inertial_parameters`): ``Q_a = Y(q, qd, qdd) pi`` (`jaxmb.regressor`). Each coordinate
``c`` may add drive and friction terms that are linear in their coefficients:

    tau_c = [Y pi]_c + Ia_c qdd_c + Fv_c qd_c + Fc_c tanh(qd_c / w) + Fs_c tanh(qd_c / w) exp(-(qd_c / v_s)^2) + F0_c

with ``Ia`` the armature (reflected rotor inertia, ``G^2 J_m`` for gear ratio ``G``), ``Fv``
viscous, ``Fc`` Coulomb, ``Fs`` the Stribeck excess over Coulomb at a fixed Stribeck velocity
``v_s``, and ``F0`` an offset (asymmetric Coulomb, torque-sensor bias). The sign function is
smoothed as ``tanh(qd / w)`` (``w`` = `coulomb_width`) so that the model is differentiable and the
regressor is not noise-driven at rest; with ``w`` well below the velocities of an excitation
trajectory the difference to ``sign`` is negligible.

Base parameters (Gautier (1990) "Numerical calculation of the base inertial parameters of
robots"): the stacked regressor ``W = [Y(x_1); ...; Y(x_N)]`` has rank ``r < p``. A QR
factorisation with column pivoting, ``W P = Q [R_1 R_2]``, orders the columns so that the first
``r`` are independent; the others are ``W_2 = W_1 beta`` with ``beta = R_11^{-1} R_12``. Then
``W pi = W_1 pi_b`` with the base parameters

    pi_b = pi_1 + beta pi_2 = K pi ,   K = [1  beta] P^T ,

the linear relation to the standard parameters that `BaseParameters.expressions` prints.
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg as sla
from jaxtyping import Array, ArrayLike, Float

from jaxmb.algorithms import dynamics
from jaxmb.multibody.model import Model

__all__ = [
    "JOINT_TERMS",
    "INERTIAL_NAMES",
    "parameter_names",
    "joint_term_columns",
    "full_regressor",
    "stacked_regressor",
    "standard_parameters",
    "BaseParameters",
    "base_parameters",
    "check_terms",
]

JOINT_TERMS = ("armature", "viscous", "coulomb", "stribeck", "offset")
INERTIAL_NAMES = ("m", "mcx", "mcy", "mcz", "Ixx", "Ixy", "Iyy", "Ixz", "Iyz", "Izz")


def check_terms(terms: Sequence[str]) -> tuple[str, ...]:
    terms = tuple(terms)
    for t in terms:
        if t not in JOINT_TERMS:
            raise ValueError(f"terms: expected names from {JOINT_TERMS}, got {t!r}")
    if len(set(terms)) != len(terms):
        raise ValueError(f"terms: duplicate entries in {terms}")
    return terms


def parameter_names(model: Model, terms: Sequence[str] = ()) -> tuple[str, ...]:
    """Names of the columns of `full_regressor`: ``<body>.<m|mcx|...|Izz>`` for every body in
    model order, then ``<coordinate>.<term>`` for every coordinate, terms in the given order."""
    terms = check_terms(terms)
    inertial = tuple(f"{b}.{p}" for b in model.body_names for p in INERTIAL_NAMES)
    joint = tuple(f"{c}.{t}" for c in model.coordinate_names for t in terms)
    return inertial + joint


def joint_term_columns(
    qd: Float[ArrayLike, " n"],
    qdd: Float[ArrayLike, " n"],
    terms: Sequence[str],
    *,
    coulomb_width: float | Float[Array, ""] = 1e-2,
    stribeck_velocity: float | Float[Array, ""] = 0.1,
) -> Float[Array, "n nk"]:
    """The drive/friction block of the regressor: for coordinate ``c`` and term ``t`` the column
    ``c*k + t`` holds the term's basis function in row ``c`` (zero elsewhere)."""
    terms = check_terms(terms)
    qd, qdd = jnp.asarray(qd, dtype=float), jnp.asarray(qdd, dtype=float)
    sgn = jnp.tanh(qd / coulomb_width)  # smoothed sign(qd); see the module docstring
    basis = {
        "armature": qdd,
        "viscous": qd,
        "coulomb": sgn,
        "stribeck": sgn * jnp.exp(-((qd / stribeck_velocity) ** 2)),
        "offset": jnp.ones_like(qd),
    }
    if not terms:
        return jnp.zeros((qd.shape[0], 0), dtype=qd.dtype)
    B = jnp.stack([basis[t] for t in terms], axis=-1)  # (n, k)
    n, k = B.shape
    eye = jnp.eye(n, dtype=qd.dtype)
    return (eye[:, :, None] * B[:, None, :]).reshape(n, n * k)


def full_regressor(
    model: Model,
    q: Float[ArrayLike, " n"],
    qd: Float[ArrayLike, " n"],
    qdd: Float[ArrayLike, " n"],
    terms: Sequence[str] = (),
    *,
    coulomb_width: float | Float[Array, ""] = 1e-2,
    stribeck_velocity: float | Float[Array, ""] = 0.1,
) -> Float[Array, "n p"]:
    """``[Y(q, qd, qdd), joint terms]`` with columns named by `parameter_names`."""
    Y = dynamics.regressor(model, q, qd, qdd)
    J = joint_term_columns(
        qd, qdd, terms, coulomb_width=coulomb_width, stribeck_velocity=stribeck_velocity
    )
    return jnp.concatenate([Y, J], axis=1)


@eqx.filter_jit
def _stacked(model, Q, Qd, Qdd, terms, coulomb_width, stribeck_velocity):
    f = lambda q, qd, qdd: full_regressor(  # noqa: E731
        model,
        q,
        qd,
        qdd,
        terms,
        coulomb_width=coulomb_width,
        stribeck_velocity=stribeck_velocity,
    )
    return jax.lax.map(lambda x: f(*x), (Q, Qd, Qdd), batch_size=256)


def stacked_regressor(
    model: Model,
    Q: Float[ArrayLike, "N n"],
    Qd: Float[ArrayLike, "N n"],
    Qdd: Float[ArrayLike, "N n"],
    terms: Sequence[str] = (),
    *,
    coulomb_width: float | Float[Array, ""] = 1e-2,
    stribeck_velocity: float | Float[Array, ""] = 0.1,
) -> Float[Array, "N n p"]:
    """`full_regressor` at every sample (batched, 256 samples per vectorised chunk to bound
    memory on long logs). Reshape to ``(N*n, p)`` for least squares."""
    terms = check_terms(terms)
    Q, Qd, Qdd = (jnp.asarray(x, dtype=float) for x in (Q, Qd, Qdd))
    for name, x in (("Q", Q), ("Qd", Qd), ("Qdd", Qdd)):
        if x.ndim != 2 or x.shape[1] != model.n:
            raise ValueError(f"{name}: expected shape (N, {model.n}), got {x.shape}")
    cw, sv = jnp.asarray(coulomb_width, float), jnp.asarray(stribeck_velocity, float)
    return _stacked(model, Q, Qd, Qdd, terms, cw, sv)


def standard_parameters(
    model: Model, terms: Sequence[str] = (), joint_values: dict[str, dict[str, float]] | None = None
) -> Float[Array, " p"]:
    """The parameter vector of `parameter_names`: the model's inertial parameters, then the joint
    terms from ``joint_values[coordinate][term]`` (0 where absent)."""
    terms = check_terms(terms)
    joint_values = joint_values or {}
    for c in joint_values:
        model.coordinate(c)  # raises naming an unknown coordinate
    joint = [
        float(joint_values.get(c, {}).get(t, 0.0)) for c in model.coordinate_names for t in terms
    ]
    pi = dynamics.inertial_parameters(model).ravel()
    return jnp.concatenate([pi, jnp.asarray(joint, dtype=pi.dtype)])


class BaseParameters(eqx.Module):
    """The identifiable (base) parameters of a stacked regressor and their relation to the
    standard parameters (Gautier (1990)); see the module docstring.

    Attributes:
        names: the standard parameter names (columns of the regressor).
        independent: column indices of the base parameters, in pivot order.
        K: ``(r, p)`` matrix with ``pi_b = K pi``.
        rank: r.
        singular_values: of the column-scaled stacked regressor (conditioning report).
    """

    names: tuple[str, ...] = eqx.field(static=True)
    independent: tuple[int, ...] = eqx.field(static=True)
    K: Float[np.ndarray, "r p"]
    rank: int = eqx.field(static=True)
    singular_values: Float[np.ndarray, " p"]

    @property
    def base_names(self) -> tuple[str, ...]:
        return tuple(self.names[i] for i in self.independent)

    @property
    def unidentifiable(self) -> tuple[str, ...]:
        """Standard parameters that appear in no base parameter (no effect on the data)."""
        used = np.abs(self.K).max(axis=0) > 0
        return tuple(n for n, u in zip(self.names, used, strict=True) if not u)

    def expressions(self, digits: int = 4) -> tuple[str, ...]:
        """Each base parameter as a linear combination of standard ones, e.g.
        ``"link2.Izz + 0.25 link3.m"``."""
        out = []
        for row in np.asarray(self.K):
            terms = []
            for j in np.flatnonzero(row):
                c = row[j]
                coef = "" if abs(c - 1) < 1e-12 else f"{c:.{digits}g} "
                terms.append(f"{coef}{self.names[j]}")
            out.append(" + ".join(terms).replace("+ -", "- "))
        return tuple(out)

    def reduce(self, W: Float[np.ndarray, "m p"]) -> Float[np.ndarray, "m r"]:
        """The base regressor: the independent columns of ``W``."""
        return np.asarray(W)[..., list(self.independent)]

    def project(self, pi: Float[np.ndarray, " p"]) -> Float[np.ndarray, " r"]:
        """Base parameters ``K pi`` of standard parameters ``pi``."""
        return np.asarray(self.K) @ np.asarray(pi)


def base_parameters(
    W: Float[np.ndarray, "m p"], names: Sequence[str], *, rtol: float = 1e-8
) -> BaseParameters:
    """Base parameters of the stacked regressor ``W`` by QR with column pivoting.

    Columns are scaled to unit norm first, so the rank decision does not depend on units
    (kg vs kg m^2 vs N m s); a column counts as independent while its diagonal entry of R is
    above ``rtol`` times the largest. ``beta`` entries below 1e-10 (relative) are set to zero:
    they are round-off of exact structural relations. Evaluate ``W`` at many random or
    excitation states: too few samples understate the rank."""
    W = np.asarray(W, dtype=float)
    names = tuple(names)
    if W.ndim != 2 or W.shape[1] != len(names):
        raise ValueError(f"W: expected shape (m, {len(names)}) matching names, got {W.shape}")
    if not np.isfinite(W).all():
        raise ValueError("W: the stacked regressor has non-finite entries")
    norms = np.linalg.norm(W, axis=0)
    scale = np.where(norms > 0, norms, 1.0)
    Ws = W / scale
    _, R, perm = sla.qr(Ws, mode="economic", pivoting=True)
    d = np.abs(np.diag(R))
    rank = int(np.sum(d > rtol * d[0])) if d.size and d[0] > 0 else 0
    ind, dep = perm[:rank], perm[rank:]
    beta_s = sla.solve_triangular(R[:rank, :rank], R[:rank, rank:])  # scaled columns
    beta_s[np.abs(beta_s) < 1e-10 * max(1.0, np.abs(beta_s).max(initial=0.0))] = 0.0
    # back to physical units: W_dep = W_ind beta with beta_ij = beta_s_ij * scale_dep_j / scale_ind_i
    beta = beta_s * scale[dep][None, :] / scale[ind][:, None]
    K = np.zeros((rank, len(names)))
    K[np.arange(rank), ind] = 1.0
    K[:, dep] = beta
    sv = np.linalg.svd(Ws, compute_uv=False)
    return BaseParameters(
        names=names,
        independent=tuple(int(i) for i in ind),
        K=K,
        rank=rank,
        singular_values=sv,
    )
