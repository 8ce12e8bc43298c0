r"""Each multiple-shooting segment's start state estimated from the first samples after it.

`output_error.make_segments` starts every segment from a *measured* state: the encoder's
coordinates, a Savitzky-Golay derivative for the velocities and smoothed chamber pressures.
Those estimates are biased where the motion is fast: a cubic 51 ms derivative window cannot
follow a telescope's hydraulic oscillation, and since the bias follows the motion it does not
average out over segments. The output-error fit then bends the valve coefficients to explain
the wrong transients. Measured on the knuckle's 40 s excitation log (true mechanics, stage 2
alone): the start velocities were 0.5-1.7 mm/s (or mrad/s) RMS off the true plant's and the
pressures 0.1 bar; valve edges came out up to 5 standard deviations off the truth and the
free-run replay of the validation log drifted 1.3x, 2.8x and 5.6x as far as the true plant's.

Here each segment's start state ``x_k = (q_k, qd_k, p_k)`` is the least-squares fit of the
model's prediction to the log's first ``head`` seconds after the start at *every* sample
(1 kHz, where the fit's residuals use every tenth): Gauss-Newton with Levenberg-Marquardt
damping, all segments at once (`jax.vmap`), the Jacobian by forward mode through the same RK4
run as the fit, each signal divided by its noise level; the start sample's measured
coordinates and pressures enter as residuals too. Every tenth sample is not enough: fitted on
the fit's own samples, the start states absorbed the valve errors and the telescope drifted
53x. This is multiple shooting with free initial states (Bock & Plitt 1984), solved by blocks:
`noise_weighted.fit_noise_weighted` alternates it with the parameter fit. Measured on the same
log with the true plant's parameters: start velocities 5-10x and pressures 2-4x closer to the
truth; the fit from those states put every parameter within 2.1 standard deviations of the
truth, and the replay drifted 0.87x, 1.15x and 1.09x as far as the true plant's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from jaxmb.actuators.plant import HydraulicPlant
from jaxmb.identification.output_error import (
    Segments,
    make_segments,
    per_device,
    segment_batches,
    simulate_one,
    strong_types,
    with_scales,
)
from jaxmb.multibody.checks import check_number, check_type
from jaxmb.saved_programs import saved

__all__ = ["head_segments", "estimate_start_states", "start_state_residuals"]

HEAD = 0.1  # s of every sample after a segment's start that its start state is fitted to
# a velocity's scale: the position scale per this time (s), so that the unknowns are O(1)
_VELOCITY_TIME = 0.05
_ITERATIONS = 4
# segments per device in one call of the compiled estimation: a fixed batch, so that one
# program serves every count of segments cut from one log (the fit's 40-120, the long
# refit's 40-60 pieces; the log's command table is part of the program's shapes). Measured
# on the 60 s crane log's 120 segments, two devices: 5.3 s at 8, 2.1 s at 32 (XLA's per-op
# cost spread over more lanes), 3.3 s at 64
_CHUNK = 32


def head_segments(
    plant: HydraulicPlant,
    log: Mapping[str, np.ndarray],
    segments: Segments,
    *,
    head: float = HEAD,
    dt: float = 1e-3,
) -> Segments:
    """The first ``head`` s after each of ``segments``' starts, at every sample of ``log``
    (what `estimate_start_states` fits to)."""
    ts = np.asarray(segments.ts)
    t = np.asarray(log["t"], float)
    h = float(np.mean(np.diff(t)))
    scales = dict(zip(segments.signal_names, np.asarray(segments.scale).tolist(), strict=True))
    dense = make_segments(
        plant, log, segment_time=float(ts[0, -1] - ts[0, 0]), stride=1, t_start=float(ts[0, 0]),
        t_end=float(ts[-1, -1]), scales=scales, dt=dt,
    )  # fmt: skip
    if dense.ts.shape[0] != ts.shape[0] or not np.allclose(np.asarray(dense.ts[:, 0]), ts[:, 0]):
        raise ValueError("head_segments: the log's segments do not start where `segments` do")
    L = int(round(head / h)) + 1
    return dataclasses.replace(
        dense, ts=dense.ts[:, :L], targets=dense.targets[:, :L], weights=dense.weights[:, :L],
        n_steps=int(np.ceil(head / dt)) + 8,
    )  # fmt: skip


def unknowns_scale(segments: Segments, n: int) -> Float[Array, " z"]:
    """The unit of each start-state unknown ``(q, qd, p)``: the residual scales, a velocity's
    per `_VELOCITY_TIME`, so that the unknowns are O(1) (also `shooting`'s)."""
    s_q = segments.scale[:n]
    return jnp.concatenate([s_q, s_q / _VELOCITY_TIME, segments.scale[n:]])


def start_state_residuals(
    z: Float[Array, " z"], plant: HydraulicPlant, segments: Segments, k, dt: float = 1e-3
) -> Float[Array, " R"]:
    """Segment ``k``'s residuals at every sample including the start (each signal divided by
    its scale), its start state moved by the scaled offsets ``z = (dq, dqd, dp)`` from
    ``segments``' own."""
    n = plant.model.n
    x = z * unknowns_scale(segments, n)
    q0 = segments.q0[k] + x[:n]
    qd0 = segments.qd0[k] + x[n : 2 * n]
    p0 = segments.p0[k] + x[2 * n :].reshape(segments.p0.shape[1:])
    y = simulate_one(plant, segments, segments.ts[k], q0, qd0, p0, dt=dt,
                     payload=segments.payload[k])  # fmt: skip
    y = y.at[0].set(jnp.concatenate([q0, p0.reshape(-1)]))  # the state itself at the start
    return ((y - segments.targets[k]) / segments.scale[None, :]).reshape(-1)


def _estimate(theta, plant: HydraulicPlant, segments: Segments, dt: float):
    """(q0, qd0, p0) of every segment by damped Gauss-Newton from its own start state
    (module docstring); ``theta`` is unused (the signature of `output_error.per_device`).

    Each iteration runs one simulation, forward mode, at its trial point: the residuals and
    Jacobian of the point last accepted ride in the carry, so a rejected trial is not
    recomputed and the compiled program holds the simulation once (its first iteration
    evaluates the start, a step of zero)."""
    del theta
    n = plant.model.n
    nz = 2 * n + 2 * segments.p0.shape[1]

    def one(k):
        def res(z):
            r = start_state_residuals(z, plant, segments, k, dt)
            r = jnp.where(jnp.isfinite(r), r, 1e3)
            return r, r

        def step(carry, _):
            z, r, J, cost, mu = carry
            H = J.T @ J
            dz = -jnp.linalg.solve(H + mu * jnp.diag(jnp.diag(H) + 1e-12), J.T @ r)
            J_t, r_t = jax.jacfwd(res, has_aux=True)(z + dz)
            c_t = 0.5 * r_t @ r_t
            better = c_t < cost  # Levenberg-Marquardt: accept and trust more, or damp more
            keep = lambda new, old: jnp.where(better, new, old)  # noqa: E731
            return (keep(z + dz, z), keep(r_t, r), keep(J_t, J), keep(c_t, cost),
                    keep(mu / 3.0, mu * 4.0)), None  # fmt: skip

        R = segments.targets.shape[1] * segments.targets.shape[2]
        # the start as iteration 0: no residuals yet (a zero step), any cost accepted
        carry = (jnp.zeros(nz), jnp.zeros(R), jnp.zeros((R, nz)), jnp.asarray(jnp.inf),
                 jnp.asarray(3e-3))  # fmt: skip
        return jax.lax.scan(step, carry, None, length=_ITERATIONS + 1)[0][0]

    x = jax.vmap(one)(jnp.arange(segments.ts.shape[0])) * unknowns_scale(segments, n)[None, :]
    return (
        segments.q0 + x[:, :n],
        segments.qd0 + x[:, n : 2 * n],
        segments.p0 + x[:, 2 * n :].reshape(segments.p0.shape),
    )


@saved
def _estimate_jit(plant, heads, dt):
    return per_device(lambda th, p, s: _estimate(th, p, s, dt), jnp.zeros(1), plant, heads)


def estimate_start_states(
    plant: HydraulicPlant, heads: Segments, segments: Segments, *, dt: float = 1e-3
) -> Segments:
    """``segments`` with every start state estimated for ``plant`` from ``heads``
    (`head_segments`; module docstring), each signal weighted by ``segments``' scales (the
    fit's noise levels). Same shapes: the compiled fit serves the result."""
    check_type(plant, HydraulicPlant, "estimate_start_states: plant")
    check_type(heads, Segments, "estimate_start_states: heads (see head_segments)")
    check_type(segments, Segments, "estimate_start_states: segments")
    check_number(dt, "estimate_start_states: dt (s)", above=0)
    heads = with_scales(heads, np.asarray(segments.scale))
    # in batches of `_CHUNK` segments a device, the last padded with copies: one compiled
    # program for every count of segments (compiling it costs 25-40 s on the crane, the
    # estimation of 120 segments 2.1 s); each segment's estimate is its own
    K, plant = heads.ts.shape[0], strong_types(plant)
    batches = segment_batches(heads, _CHUNK * len(jax.local_devices()))
    parts = [_estimate_jit(plant, b, dt) for b in batches]
    # on the host, unsharded: a start state split among the devices (`per_device`) would be
    # a new input type to the fit's compiled program, and compile it again
    new = tuple(
        jnp.asarray(np.concatenate([np.asarray(p[i]) for p in parts])[:K]) for i in range(3)
    )
    return eqx.tree_at(lambda s: (s.q0, s.qd0, s.p0), segments, new)
