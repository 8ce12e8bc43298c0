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

``G`` is computed on the replay cut into pieces of `shooting.PIECE_TIME` that run side by
side, chained (multiple shooting condensed, `shooting.closed_chain`): with every piece started
where the one before it ends (Newton steps on continuity from the log's measured states), the
chain is the replay and its condensed Jacobian is ``G`` (the chain rule through each piece's
end state). A 20 s replay is then 1 000 RK4 steps in sequence instead of 20 000, each over
twenty lanes, at the price of an evaluation per Newton step. Measured on the crane's 20 s
validation log, 16 parameters, the nominal plant, one core, after compiling: the single run's
``G`` 19.4 s, the chain's 14.7 s in three evaluations (gaps 341, 0.25, then 1e-7 units); on
the CLI's two XLA devices, which share the pieces (`output_error.per_device`) where the single
run cannot use the second, 19.3 s against 6.8 s (`scripts/bench_identify.py`), the two equal to
3e-10 of each column's largest. ``G`` is sampled every `STRIDE`-th sample, as the fits are. A
plant whose actuators hold states of their own (a spool's dynamics, LuGre bristles), which a
piece starts steady, keeps the single run (`replay_sensitivity`), at every sample."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.identification import output_error as oe
from jaxmb.identification import shooting
from jaxmb.identification.long_refit import STRIDE  # every 10th sample, as the long refit's
from jaxmb.saved_programs import saved

__all__ = ["chained_sensitivity", "replay_sensitivity", "replay_std", "expected_rmse"]


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


def chained_sensitivity(
    theta: Float[np.ndarray, " P"] | Float[Array, " P"],
    plant: HydraulicPlant,
    spec: oe.HydraulicParameters,
    log: Mapping[str, np.ndarray],
    scales: Float[np.ndarray, " c"],
    *,
    dt: float = 1e-3,
) -> tuple[Float[np.ndarray, " M"], Float[np.ndarray, "M c P"]] | None:
    """``(t, G)``: the free-run replay's sensitivity ``G = dy/dtheta`` (as `replay_sensitivity`'s)
    at every `STRIDE`-th sample of ``log`` after its first, from chained pieces of at most
    `shooting.PIECE_TIME` (module docstring). ``scales`` (the signals' noise levels) set the
    units in which the chain's gaps close (`shooting.GAP_TOL`). None where the chain does not
    close (`shooting.closed_chain`) or ``plant``'s actuators hold states of their own."""
    if shooting.internal_states(plant):
        return None
    t = np.asarray(log["t"], float)
    h = float(np.mean(np.diff(t)))
    span = (t.size - 1) // STRIDE  # strides in the log
    m = max(1, int(np.ceil(span * STRIDE * h / shooting.PIECE_TIME - 1e-9)))
    per = span // m  # strides per piece: m pieces of at most PIECE_TIME, a few left at the end
    if per < 1:
        return None
    pieces = oe.make_segments(plant, log, segment_time=per * STRIDE * h, stride=STRIDE, dt=dt)
    pieces = oe.with_scales(pieces, np.asarray(scales, float))
    closed = shooting.closed_chain(jnp.asarray(theta, float), plant, spec, pieces, dt)
    if closed is None:
        return None
    _, J, pieces = closed
    w = np.asarray(pieces.weights)
    keep = w > 0  # each piece's start sample is its predecessor's last
    J = J.reshape(*w.shape, len(pieces.signal_names), -1)[keep]  # (M, c, P)
    G = J * np.asarray(pieces.scale)[None, :, None] / w[keep][:, None, None]
    return np.asarray(pieces.ts)[keep], G


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
    """Per signal of a free-run replay of ``log`` from its first sample: ``"drift_std"``, the
    RMS over time of ``sigma_y`` (what the parameters' uncertainty alone explains), and
    ``"expected_rmse"``, ``sqrt(noise^2 + drift_std^2)``, with ``noise`` the signal's noise
    level (e.g. the fit's `output_error.residual_scales`). ``G`` by `chained_sensitivity`, or
    where that does not apply by `replay_sensitivity` (every sample)."""
    seg = oe.free_run_segment(plant, log, stride=1, dt=dt)
    names = seg.signal_names
    chained = chained_sensitivity(
        theta, plant, spec, log, np.array([float(noise[c]) for c in names]), dt=dt
    )
    if chained is not None:
        G = chained[1]
    else:
        G = np.asarray(
            replay_sensitivity(jnp.asarray(theta, float), oe.strong_types(plant), spec, seg, dt)
        )
        G = G[np.asarray(seg.weights[0]) > 0]
    std = replay_std(G, covariance)
    out = {}
    for j, c in enumerate(names):
        drift = float(np.sqrt(np.mean(std[:, j] ** 2)))
        out[c] = {"drift_std": drift, "expected_rmse": float(np.hypot(noise[c], drift))}
    return out
