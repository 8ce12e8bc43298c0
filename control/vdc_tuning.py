r"""Gradient-based tuning of a hydraulic machine's VDC gains (Petrovic & Mattila (2022) eq.
(36)'s ``lambda``, eq. (8)'s ``K_A = k_v M_A + k_0 1``, eq. (90)'s ``k_x`` and ``k_f``) through
the diffrax simulation of the hydraulic closed loop, over a Monte Carlo sample of perturbed
machines (`studies.MachineStudy`: the built-in crane's file or a user's), within the valves'
command range and the supply/return pressure band: the `VDC` kind of `tuning.tune`.

Gains are ``g = g0 exp(theta)`` (positive by construction, scale-free steps). The loss is

    J = mean_samples sum_j (rmse_j / r_j)^2                          tracking (CVaR optional)
      + w_u mean sum_i (u_rms,i / u_max,i)^2                          valve effort
      + w_c mean sum_i (udot_rms,i / (u_max,i / 1 s))^2               chattering
      + rho mean sum_i mean_t (|u_i| / u_max,i - 1)^+^2                valve voltage +-u_max
      + rho mean sum_i,c mean_t ((p_c - p_s)^+ + (p_r - p_c)^+)^2 / (p_s - p_r)^2   pressures

The valve clips the command at ``u_max`` (10 V in the spec): a law that asks for more has lost
authority there, and the saturation term measures how far and how long it asks. It is a mean
over time, not a peak, because on the spec's 2 s segments the task's own feed-forward asks the
lift valve for more flow than it passes at 10 V (`tests/test_crane.py`): no gains remove that
saturation, so a peak penalty would only distort them. The pressure term is zero while every
chamber stays between return and supply pressure (Assumption 5).

VDC's stability result is virtual stability (Theorem 5), which holds for any positive gains,
not an ultimate bound that gains must make tight (as eq. (25) is for the arm's `tuning`): the
constraints here are the actuator limits alone, and `vdc_conflicts` names those the tuned
gains still meet.

The gradient is forward mode (`jax.jacfwd` through `diffrax.ForwardMode`): eight log-gains
are few directions, and forward mode compiles in about a third of reverse mode's time on this
loop (measured on a 1 s horizon: 33 s against 73 s; the primal 10 s). As for the arm, solves
run at tight tolerances and a test checks the gradient against central finite differences.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxmb.control.studies import MachineStudy, SolverOptions
from jaxmb.control.tuning import Tuner, gains_of, tracking_term
from jaxmb.control.vdc_control import VDCController
from jaxmb.saved_programs import saved
from jaxmb.simulation import simulate

__all__ = [
    "VDC_GAINS",
    "VdcTuningWeights",
    "vdc_controller_with",
    "vdc_tuning_terms",
    "vdc_tuning_loss",
    "loss_of_terms",
    "vdc_loss_and_gradient",
    "vdc_conflicts",
    "VDC",
]

VDC_GAINS = ("lam", "k_v", "k_0", "k_x", "k_f")


@dataclass(frozen=True)
class VdcTuningWeights:
    """Weights and scales of the crane tuning loss (module docstring).

    Attributes:
        tolerated_error: ``r_j``, one for every joint or one per joint, rad or m.
        effort, chattering: ``w_u``, ``w_c``.
        penalty: ``rho``, on the valve range and the pressure band.
        cvar: None for the mean tracking term over samples; alpha in (0, 1) for the mean over
            the worst ``alpha`` fraction (CVaR)."""

    tolerated_error: float | tuple[float, ...] = 2e-3
    effort: float = 0.1
    chattering: float = 0.01
    penalty: float = 1000.0
    cvar: float | None = None


def vdc_controller_with(base: VDCController, gains: dict) -> VDCController:
    """``base`` with new VDC gains (shapes as ``base``'s: ``lam`` per joint, scalars ``k_v``
    and ``k_0``, ``k_x`` and ``k_f`` per cylinder)."""
    return eqx.tree_at(
        lambda c: [getattr(c, k) for k in VDC_GAINS],
        base,
        [jnp.broadcast_to(jnp.asarray(gains[k], float), jnp.shape(getattr(base, k)))
         for k in VDC_GAINS],
    )  # fmt: skip


def vdc_tuning_terms(
    study: MachineStudy, controller: VDCController, values, options: SolverOptions, adjoint=None
) -> dict:
    """Differentiable figures of one sample's closed loop for the loss."""
    plant, q0 = study.realise(values)
    controller = study.controller_on(controller, plant)
    tr = simulate(
        plant, controller, controller.reference, q0, jnp.zeros_like(q0), study.ts, throw=False,
        adjoint=adjoint, **study.solve_options(options),
    )  # fmt: skip
    acts = plant.actuators
    u_max = jnp.stack([a.valve.u_max for a in acts])
    u = tr.u / u_max[None, :]
    udot = jnp.diff(tr.u, axis=0) / options.dt_save / u_max[None, :]  # per second
    excess = []
    for a in acts:
        p_s, p_r = a.valve.p_s, a.valve.p_r
        for c in ("p_a", "p_b"):
            p = tr.signals[f"{c}_{a.name}"]
            excess.append((jax.nn.relu(p - p_s) + jax.nn.relu(p_r - p)) / (p_s - p_r))
    excess = jnp.stack(excess, axis=1)  # (T, 2 m): outside [p_r, p_s], as a band fraction
    return {
        "rmse": jnp.sqrt(jnp.mean(tr.e**2, axis=0)),
        "effort": jnp.sqrt(jnp.mean(u**2, axis=0)),
        "chattering": jnp.sqrt(jnp.mean(udot**2, axis=0)),
        "saturation": jnp.mean(jax.nn.relu(jnp.abs(u) - 1) ** 2, axis=0),
        "peak": jnp.max(jnp.abs(u), axis=0),
        "pressure": jnp.mean(excess**2, axis=0),
        "pressure_excess": jnp.max(excess, axis=0),
        "success": tr.success,
    }


# the terms the loss is made of (differentiated); the others are reported only
_LOSS_TERMS = ("rmse", "effort", "chattering", "saturation", "pressure")


def loss_of_terms(terms: dict, weights: VdcTuningWeights):
    """``(J, aux)`` from the samples' stacked terms (`vdc_tuning_terms`, leading axis M)."""
    r = jnp.broadcast_to(jnp.asarray(weights.tolerated_error, float), terms["rmse"].shape[1:])
    track_term = tracking_term(terms["rmse"], r, weights.cvar)
    parts = {k: jnp.mean(jnp.sum(terms[k] ** 2, axis=1)) for k in ("effort", "chattering")} | {
        k: jnp.mean(jnp.sum(terms[k], axis=1)) for k in ("saturation", "pressure")
    }
    J = (
        track_term
        + weights.effort * parts["effort"]
        + weights.chattering * parts["chattering"]
        + weights.penalty * (parts["saturation"] + parts["pressure"])
    )
    aux = {"tracking": track_term, **parts, "rmse": jnp.max(terms["rmse"], axis=0)}
    if "peak" in terms:
        aux["peak"] = jnp.max(terms["peak"], axis=0)  # (m,) x u_max, over the samples
        aux["pressure_excess"] = jnp.max(terms["pressure_excess"], axis=0)  # (2 m,)
        aux["success"] = jnp.all(terms["success"])
    return J, aux


def vdc_tuning_loss(theta, g0, study, base, values, weights: VdcTuningWeights, options):
    """``(J, aux)`` for the samples ``values`` (M, P), their closed loops vmapped; see the
    module docstring."""
    ctrl = vdc_controller_with(base, gains_of(theta, g0))
    terms = jax.vmap(lambda v: vdc_tuning_terms(study, ctrl, v, options))(values)
    return loss_of_terms(terms, weights)


@saved
def _terms_and_jacobian(theta, g0, study, base, value, options):
    """One sample's terms and their Jacobian with respect to the flattened ``theta``, by one
    forward-mode pass through its solve (compiled once per study layout: every argument but
    the options is traced; kept for later runs, `jaxmb.saved_programs`)."""
    flat, unravel = ravel_pytree(theta)

    def f(x):
        ctrl = vdc_controller_with(base, gains_of(unravel(x), g0))
        t = vdc_tuning_terms(study, ctrl, value, options, diffrax.ForwardMode())
        return {k: t[k] for k in _LOSS_TERMS}, t

    return jax.jacfwd(f, has_aux=True)(flat)[::-1]


@saved
def _chain(terms, jacobians, weights):
    """``((J, aux), dJ/dtheta)`` from the stacked terms and their Jacobians (chain rule through
    `loss_of_terms`)."""
    J, pullback, aux = jax.vjp(
        lambda t: loss_of_terms({**terms, **t}, weights), {k: terms[k] for k in _LOSS_TERMS},
        has_aux=True,
    )  # fmt: skip
    (cot,) = pullback(jnp.ones_like(J))
    grad = sum(jnp.tensordot(cot[k], jacobians[k], axes=cot[k].ndim) for k in _LOSS_TERMS)
    return (J, aux), grad


def vdc_loss_and_gradient(study: MachineStudy, base: VDCController, values,
                            weights: VdcTuningWeights = VdcTuningWeights(),
                            rtol: float = 1e-8, atol: float = 1e-10):  # fmt: skip
    """``(fn, g0)``: ``fn(theta) -> ((J, aux), dJ/dtheta)`` about ``g0`` = ``base``'s gains.

    Each sample's closed loop is solved on its own with the derivatives of its terms along all
    eight log-gains (forward mode: one pass each), and the loss and its gradient are assembled
    from them. One sample at a time, not vmapped: on CPU a vmapped batch is not faster (one
    core runs a while loop), waits for its slowest sample, and the forward-mode pass over four
    vmapped 2 s crane runs was measured to stall (the process idle in XLA's runtime, never
    returning); one sample's pass compiles once and is reused for all. Call it inside
    `jaxmb.multibody.checks.failures_as_nan` when a sample may leave the crane's domain: that sample is
    then a failed run (``aux["success"]`` False) instead of an error for the whole batch."""
    study.check_controller(base)  # before anything compiles
    g0 = {k: jnp.asarray(getattr(base, k), float) for k in VDC_GAINS}
    options = replace(study.options, rtol=rtol, atol=atol)
    values = jnp.asarray(values)

    def fn(theta):
        flat, unravel = ravel_pytree(theta)
        runs = [_terms_and_jacobian(theta, g0, study, base, v, options) for v in values]
        terms = jax.tree.map(lambda *x: jnp.stack(x), *(t for t, _ in runs))
        jacobians = jax.tree.map(lambda *x: jnp.stack(x), *(j for _, j in runs))
        (J, aux), grad = _chain(terms, jacobians, weights)
        return (J, aux), unravel(grad)

    return fn, g0


def vdc_conflicts(plant, peak, pressure_excess) -> list[str]:
    """The actuator limits the gains still meet on the tuning sample: valves asked beyond
    ``u_max`` (``peak`` in units of it) and chambers outside [p_r, p_s] (``pressure_excess``
    as a fraction of the band, chambers a then b per cylinder)."""
    out = []
    for i, a in enumerate(plant.actuators):
        if peak[i] > 1:
            out.append(
                f"valve {a.name}: the law asks up to {peak[i]:.2f} x u_max "
                f"({float(a.valve.u_max):g} V): the valve limit binds (the valve saturates); "
                "where the task's feed-forward alone exceeds it, no gains can track closer"
            )
        for j, c in enumerate(("a", "b")):
            x = pressure_excess[2 * i + j]
            if x > 0:
                out.append(
                    f"cylinder {a.name}, chamber {c}: the pressure leaves [p_r, p_s] by "
                    f"{100 * x:.2g} % of the band"
                )
    return out


def _row(aux, gains, weights, study):
    """A step's figures: its terms, the largest RMSE per coordinate, the peak command per valve
    and the pressure excess per chamber; feasible where every valve stayed within ``u_max``
    and every chamber within [p_r, p_s]."""
    del gains, weights
    peak, px = np.asarray(aux["peak"]), np.asarray(aux["pressure_excess"])
    row = {k: float(aux[k]) for k in ("tracking", "effort", "chattering", "saturation",
                                      "pressure")}  # fmt: skip
    row.update({f"rmse_{c}": float(aux["rmse"][j]) for j, c in enumerate(study.coordinate_names)})
    row.update({f"peak_{a.name}": float(peak[i]) for i, a in enumerate(study.plant.actuators)})
    row.update({f"pressure_excess_{i}": float(x) for i, x in enumerate(px)})
    return row, peak.max() <= 1 and px.max() == 0


def _result(best, g0, study):
    """The chosen step's peak commands and pressure excesses, and the limits it still meets."""
    del g0
    acts = study.plant.actuators
    peak = np.array([best[f"peak_{a.name}"] for a in acts])
    px = np.array([best[f"pressure_excess_{i}"] for i in range(2 * len(acts))])
    figures = {
        "peak_command_over_u_max": peak.tolist(),
        "pressure_excess_over_band": px.tolist(),
    }
    return figures, vdc_conflicts(study.plant, peak, px)


# a hydraulic machine's VDC, tuned within its valves' range and its pressure band
VDC = Tuner(
    gain_names=VDC_GAINS,
    with_gains=vdc_controller_with,
    loss_and_gradient=vdc_loss_and_gradient,
    row=_row,
    result=_result,
    steps=20,
)
