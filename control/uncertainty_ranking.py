r"""Which uncertainty matters: each sampled parameter's first-order effect on a machine study's
outcomes (tracking errors, pressure peaks), so that a user knows which parameter to identify
better before the next campaign.

Every parameter ``p`` of the study's distribution is written in the coordinate it is drawn
in, ``u_p`` (`sampling.Parameter`): ``log v`` for a lognormal one (an identified positive
quantity), ``v`` otherwise. Its std ``s_p`` in that coordinate is the distribution's: the
lognormal's ``spread``, a normal's ``spread * nominal``, a uniform's ``spread * nominal /
sqrt(3)``, a range's ``(high - low) / sqrt(12)``. The closed loop at the nominal values is
differentiated along its whole run by forward mode (`diffrax.ForwardMode`, `jax.jacfwd`: the
derivative of the computed solution, one column per parameter): each coordinate's tracking
error ``e_c(t)`` and each cylinder's chamber pressures. One std of ``p``
alone then moves them by ``g_p(t) = s_p de/du_p(t)`` (the delta method; Saltelli et al.
(2008), "Global Sensitivity Analysis", ch. 1: the sigma-normalised derivative), and its
effect on

- a tracking error's RMS is ``rms_t g_p(t)``, on its largest value ``max_t |g_p(t)|`` (after
  the study's settling time): a model-based controller on its own model tracks its task
  exactly, so these are what the uncertainty adds, not a change of a nominal error;
- a cylinder's pressure peak is ``g_p(t*)`` of its chamber that peaks, ``t*`` the nominal
  peak's time (the peak's derivative where it is unique: the envelope theorem).

Each outcome's first-order spread over the whole distribution takes the correlation ``R``:
``sqrt(mean_t g(t)^T R g(t))`` for an RMS, ``max_t sqrt(g(t)^T R g(t))`` for a largest error,
``sqrt(g^T R g)`` at ``t*`` for a peak. The nominal loop runs at the study's tolerances or
`RTOL`, whichever is tighter; its derivatives are checked against central differences of the
same loop in `tests/test_uncertainty_ranking.py`."""

from __future__ import annotations

import dataclasses

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from jaxmb.compile_cache import strong_types
from jaxmb.control.sampling import Distribution
from jaxmb.multibody.checks import failures_as_nan
from jaxmb.saved_programs import saved

# the one nominal loop runs at least this tight: a forward-mode derivative is the derivative
# of the computed solution, and at a study's 1e-6 a parameter's effect below the solver's
# error came out as noise (a lift valve edge's on the telescope's pressure: 79 % off central
# differences at 1e-6, 0.1 % at 1e-9)
RTOL, ATOL = 1e-9, 1e-11

__all__ = [
    "outcome_names",
    "outcome_names_of",
    "drawn_stds",
    "series",
    "ranking",
    "rows",
    "summary",
]


def outcome_names(study) -> tuple[str, ...]:
    """The outcomes ranked: each coordinate's RMS and largest tracking error, each cylinder's
    pressure peak."""
    return outcome_names_of(study.plant)


def outcome_names_of(plant) -> tuple[str, ...]:
    """`outcome_names` of a study of ``plant``."""
    coords = plant.coordinate_names
    return (
        *(f"rmse_{c}" for c in coords),
        *(f"max_error_{c}" for c in coords),
        *(f"peak_pressure_{a}" for a in plant.actuator_names),
    )


def drawn_stds(dist: Distribution, nominal: Float[ArrayLike, " p"]) -> Float[np.ndarray, " p"]:
    """Each parameter's std in the coordinate it is drawn in (module docstring)."""
    out = []
    for p, v in zip(dist.parameters, np.asarray(nominal, float), strict=True):
        out.append(
            {
                "lognormal": p.spread,
                "normal": p.spread * abs(v),
                "uniform": p.spread * abs(v) / np.sqrt(3.0),
                "range": (p.high - p.low) / np.sqrt(12.0),
            }[p.kind]
        )
    return np.asarray(out, float)


def _values(u, nominal, log):
    return jnp.where(log, nominal * jnp.exp(u), nominal + u)


def series(study, controller, values, adjoint=None) -> Array:
    """``(T, n + 2 m)``: the closed loop's tracking errors and each cylinder's chamber
    pressures ``p_a``, ``p_b`` (Pa) at the study's save times."""
    plant, tr = study.trajectory(controller, values, adjoint=adjoint)
    p = [tr.signal(f"p_{c}_{a}") for a in plant.actuator_names for c in "ab"]
    return jnp.concatenate([tr.e, jnp.stack(p, axis=1)], axis=1)


@saved
def _jacobian(study_controller, u, log):
    """``(series, d series / du)`` at ``u`` (module docstring), ``(T, k)`` and ``(T, k, P)``."""
    study, controller = study_controller

    def f(u):
        y = series(study, controller, _values(u, study.nominal_values, log),
                   adjoint=diffrax.ForwardMode())  # fmt: skip
        return y, y

    J, y = jax.jacfwd(f, has_aux=True)(u)
    return y, J


def ranking(study, controller) -> dict:
    """Each parameter's effect on each outcome at the study's nominal values (module
    docstring): ``{"outcomes", "parameters", "std" (P,) of u, "effect" (outcomes, P),
    "outcome_std" (outcomes,) first order, correlations included, "nominal" (outcomes,),
    "ranked" {outcome: parameters by |effect|, largest first}, "peaks" {cylinder: the nominal
    peak's time and chamber}, "series", "jacobian"}``. A
    failed nominal run, or derivatives that are not finite, are refused."""
    dist = study.distribution
    log = np.array([p.kind == "lognormal" for p in dist.parameters])
    study.check_controller(controller)
    o = study.options
    tight = dataclasses.replace(o, rtol=min(o.rtol, RTOL), atol=min(o.atol, ATOL))
    study = dataclasses.replace(study, options=tight)
    with failures_as_nan():
        y, J = _jacobian(strong_types((study, controller)), jnp.zeros(len(log)), jnp.asarray(log))
    y, J = np.asarray(y), np.asarray(J)
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(J))):
        raise ValueError(
            "uncertainty ranking: the closed loop at the nominal values failed or its "
            "derivatives are not finite; no ranking"
        )
    s = drawn_stds(dist, study.nominal_values)
    R = np.eye(len(s)) if dist.correlation is None else np.asarray(dist.correlation, float)
    G = J * s[None, None, :]  # (T, k, P): one std of each parameter alone
    n = len(study.coordinate_names)
    after = np.asarray(study.ts) >= study.settle
    joint = np.sqrt(np.clip(np.einsum("tkp,pq,tkq->tk", G, R, G), 0.0, None))  # (T, k)
    effect, spread, nominal, peaks = [], [], [], {}
    for c in range(n):  # RMS tracking errors
        effect.append(np.sqrt(np.mean(G[:, c, :] ** 2, axis=0)))
        spread.append(np.sqrt(np.mean(joint[:, c] ** 2)))
        nominal.append(np.sqrt(np.mean(y[:, c] ** 2)))
    for c in range(n):  # largest tracking errors after settling
        effect.append(np.max(np.abs(G[after, c, :]), axis=0))
        spread.append(np.max(joint[after, c]))
        nominal.append(np.max(np.abs(y[after, c])))
    for a in range(n, y.shape[1], 2):  # pressure peaks: at the nominal peak's time and chamber
        t, c = np.unravel_index(int(np.argmax(y[:, a : a + 2])), (y.shape[0], 2))
        name = study.plant.actuator_names[(a - n) // 2]
        peaks[name] = {"time_s": float(study.ts[t]), "chamber": "ab"[c]}
        effect.append(G[t, a + c, :])
        spread.append(joint[t, a + c])
        nominal.append(y[t, a + c])
    E = np.stack(effect)
    names = outcome_names(study)
    order = np.argsort(-np.abs(E), axis=1, kind="stable")
    return {
        "outcomes": names,
        "parameters": dist.names,
        "std": s,
        "effect": E,
        "outcome_std": np.asarray(spread),
        "nominal": np.asarray(nominal),
        "ranked": {o: [dist.names[k] for k in order[i]] for i, o in enumerate(names)},
        "peaks": peaks,
        "series": y,
        "jacobian": J,
    }


def rows(result: dict) -> list[dict]:
    """``uncertainty_ranking.csv``'s rows: per outcome, its parameters by |effect|, each with
    its share of the outcome's first-order variance as if the parameters were independent
    (its effect squared over their sum)."""
    out = []
    for i, o in enumerate(result["outcomes"]):
        E = result["effect"][i]
        total = float(np.sum(E**2))
        for rank, name in enumerate(result["ranked"][o], start=1):
            k = result["parameters"].index(name)
            out.append(
                {
                    "outcome": o,
                    "rank": rank,
                    "parameter": name,
                    "effect": float(E[k]),
                    "share": float(E[k] ** 2 / total) if total > 0 else 0.0,
                    "std": float(result["std"][k]),
                    "outcome_nominal": float(result["nominal"][i]),
                    "outcome_std": float(result["outcome_std"][i]),
                }
            )
    return out


def summary(result: dict, top: int = 3) -> dict:
    """The summary's entry: each outcome's nominal value, first-order spread and its ``top``
    parameters with their effects."""
    out = {}
    for i, o in enumerate(result["outcomes"]):
        lead = result["ranked"][o][:top]
        out[o] = {
            "nominal": float(result["nominal"][i]),
            "std_first_order": float(result["outcome_std"][i]),
            "top": {n: float(result["effect"][i, result["parameters"].index(n)]) for n in lead},
        }
    return out
