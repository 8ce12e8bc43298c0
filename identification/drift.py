"""How far an identified model's free-run replay is expected to drift, given the uncertainty
of its parameters: the error bars of a replay.

A free run integrates every flow error, so a parameter error ``delta theta`` moves the
replayed signal at time ``t`` by ``G(t) delta theta`` to first order, with ``G = dy/dtheta``
the sensitivity of the replay (forward mode through the same RK4 run as the replay). With the
fit's covariance ``Sigma`` of theta (`output_error.fit`), the replay's standard deviation is

    sigma_y(t)^2 = G(t) Sigma G(t)^T      (the delta method; Ljung 1999, ch. 9)

and a replay of a log whose sensor noise has RMS ``s`` is expected to show an RMSE of about
``sqrt(s^2 + mean_t sigma_y(t)^2)``. That is the drift the log's information allows: when the
measured replay stays within it, the model is as good as the identification log can make it,
and only a longer or richer log narrows it. The covariance is stage 2's, conditional on the
mechanics it holds fixed; a direction of theta the fit's residuals do not see (an infinite
std, `output_error.theta_covariance`) is left out, as it is out of the fit.

The sensitivity's forward pass also computes the replay itself, which the caller has already
simulated (`output_error.predict`); the second run costs one replay and keeps the two
functions independent."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.identification import output_error as oe
from jaxmb.saved_programs import saved

__all__ = ["replay_sensitivity", "replay_std", "expected_rmse"]


@saved
def replay_sensitivity(
    theta: Float[Array, " P"],
    plant: HydraulicPlant,
    spec: oe.HydraulicParameters,
    segment: oe.Segments,
    dt: float = 1e-3,
) -> Float[Array, "S c P"]:
    """``G = d y / d theta`` of the replay of the one-segment ``segment``
    (`output_error.free_run_segment`) at ``oe.plant_with(theta, plant, spec)`` (SI units per
    unit of theta, i.e. per relative change of a parameter, or per `output_error.COM_STEP` of a
    centre coordinate)."""

    def y(th):
        return oe.simulate_segments(oe.plant_with(th, plant, spec), segment, dt=dt)[0]

    return jax.jacfwd(y)(theta)


def replay_std(
    sensitivity: Float[np.ndarray, "S c P"], covariance: Float[np.ndarray, "P P"]
) -> Float[np.ndarray, "S c"]:
    """``sigma_y = sqrt(diag(G Sigma G^T))`` per sample and signal (module docstring)."""
    G = np.asarray(sensitivity, float)
    var = np.einsum("scp,pq,scq->sc", G, np.asarray(covariance, float), G)
    return np.sqrt(np.clip(var, 0.0, None))


def expected_rmse(
    theta: Float[np.ndarray, " P"],
    covariance: Float[np.ndarray, "P P"],
    plant: HydraulicPlant,
    spec: oe.HydraulicParameters,
    log: Mapping[str, np.ndarray],
    noise: Mapping[str, float],
    *,
    dt: float = 1e-3,
) -> dict[str, dict[str, float]]:
    """Per signal of a free-run replay of ``log`` (its every sample, as `output_error.predict`
    ``mode="free"``): ``"drift_std"``, the RMS over time of ``sigma_y`` (what the parameters'
    uncertainty alone explains), and ``"expected_rmse"``, ``sqrt(noise^2 + drift_std^2)``,
    with ``noise`` the signal's noise level (e.g. the fit's `output_error.residual_scales`)."""
    seg = oe.free_run_segment(plant, log, stride=1, dt=dt)
    G = replay_sensitivity(jnp.asarray(theta, float), oe.strong_types(plant), spec, seg, dt)
    G = np.asarray(G)
    keep = np.asarray(seg.weights[0]) > 0
    std = replay_std(G[keep], covariance)
    out = {}
    for j, c in enumerate(seg.signal_names):
        drift = float(np.sqrt(np.mean(std[:, j] ** 2)))
        out[c] = {"drift_std": drift, "expected_rmse": float(np.hypot(noise[c], drift))}
    return out
