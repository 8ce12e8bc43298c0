r"""Stage 1 of a hydraulic machine's identification: the payload and cylinder friction from the
chamber pressures, by the regressor route (linear least squares), before any simulation.

The cylinders' pressure forces ``F_i = A_a p_a - A_b p_b`` (Petrovic & Mattila (2022) eq. (79))
map to generalized forces ``tau_p = sum_i J_x_i(q)^T F_i`` (the plant's input matrix). The
equations of motion (Dastranj & Mattila (2026) eq. (13)), with the net piston force
``F_i - f_i(xdot_i)`` on the mechanism, read

    tau_p = ID_0(q, qd, qdd) + Y_payload(q, qd, qdd) pi_payload + sum_i J_x_i^T f_i(xdot_i)

``ID_0`` the inverse dynamics of the machine's booms and cylinder bodies at their file (CAD)
values, ``Y_payload`` the payload body's 10 columns of the inertial regressor (`jaxmb.regressor`,
linear in its standard parameters), and ``f_i`` each cylinder's friction law in its linear form
``F_c tanh(v / v_eps) + (F_s - F_c) exp(-(v / v_s)^2) tanh(v / v_eps) + sigma v`` (the file's
``v_s`` and ``v_eps``). A point mass ``m`` at ``c`` has ``pi = m [1, c, |c|^2 I - c c^T]``:
linear in ``(m, m c)`` once the small second moments are taken at the current ``c`` (iterated).

Positions are differentiated and every column (pressures included) low-passed alike
(`signals.estimate_derivatives`, zero phase). The fit gives the payload's mass with its standard
deviation, the centre's first moments where the log determines them (a planar machine's
out-of-plane offset never is), and the friction parameters, so that friction does not absorb
the payload's weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import jaxmb
from jaxmb.hydraulics import StribeckFriction
from jaxmb.models.machine import Machine

from .logs import Log
from .signals import estimate_derivatives

__all__ = ["PayloadEstimate", "estimate_payload"]

CUTOFF = 4.0  # Hz: a boom's motion lives below 1-2 Hz; the hydraulic modes (~7 Hz) are cut
COM_WEAK = 0.05  # m: a centre coordinate with a larger std is reported as not determined


@dataclass(frozen=True)
class PayloadEstimate:
    """Stage 1's result (SI). ``com`` holds the file's value where the log does not determine
    a coordinate (``com_determined`` False there); ``friction`` maps ``friction.<cyl>.<field>``
    to its estimate."""

    mass: float
    mass_std: float
    com: tuple[float, float, float]
    com_std: tuple[float, float, float]
    com_determined: tuple[bool, bool, bool]
    friction: dict
    friction_std: dict
    rms_residual: float
    samples: int
    cutoff_hz: float


def _laws(plant):
    out = []
    for a in plant.actuators:
        f = a.friction
        if isinstance(f, StribeckFriction):
            out.append((float(f.v_s), float(f.v_eps)))
        else:  # LuGre or none: the spec's smooth-law widths
            out.append((5e-3, 1e-3))
    return out


def _columns(plant, j: int, com, fixed, laws):
    """Per sample: ``(tau_p - ID_0, [payload columns (n, 4) | friction columns (n, 3m)])``; the
    centre's coordinates where ``fixed`` are taken as given (in the mass column)."""
    model = plant.model
    v_s = jnp.asarray([w[0] for w in laws])
    v_eps = jnp.asarray([w[1] for w in laws])
    c = jnp.asarray(com)
    c_fixed = c * jnp.asarray(fixed, float)
    second = jnp.stack([c @ c - c[0] ** 2, -c[0] * c[1], c @ c - c[1] ** 2, -c[0] * c[2],
                        -c[1] * c[2], c @ c - c[2] ** 2])  # fmt: skip

    def one(q, qd, qdd, F):
        B = plant.input_matrix(q)  # (n, m): J_x^T columns
        tau_p = B @ F
        Y = jaxmb.regressor(model, q, qd, qdd)[:, 10 * j : 10 * j + 10]
        rest = jaxmb.inverse_dynamics(model, q, qd, qdd)  # the payload's mass is 0 here
        xd = B.T @ qd
        th = jnp.tanh(xd / v_eps)
        phi = jnp.stack([th, jnp.exp(-((xd / v_s) ** 2)) * th, xd], axis=1)  # (m, 3)
        fric = (B[:, :, None] * phi[None]).reshape(B.shape[0], -1)
        mass_col = Y[:, 0] + Y[:, 4:] @ second + Y[:, 1:4] @ c_fixed  # d tau / d m
        return tau_p - rest, jnp.concatenate([mass_col[:, None], Y[:, 1:4], fric], axis=1)

    return jax.jit(jax.vmap(one))


def estimate_payload(
    machine: Machine, log: Log, *, cutoff: float = CUTOFF, stride: int = 10
) -> PayloadEstimate:
    """Stage 1 (module docstring) on a validated log of ``machine`` (uniform sampling)."""
    plant = machine.with_payload(0.0)
    names = plant.model.coordinate_names
    j = plant.model.body_names.index("payload")
    est = estimate_derivatives(log, names, cutoff=cutoff)
    edge = int(np.ceil(1.5 / cutoff / float(np.median(np.diff(log.t)))))
    keep = slice(edge, log.n - edge, stride)
    q = est.stack(list(names))[keep]
    qd = est.stack([f"qd_{c}" for c in names])[keep]
    qdd = est.stack([f"qdd_{c}" for c in names])[keep]
    F = np.stack(
        [a.cylinder.force(est[f"p_a_{a.name}"], est[f"p_b_{a.name}"]) for a in plant.actuators],
        axis=1,
    )[keep]
    laws = _laws(plant)
    com = np.asarray(machine.payload.com, float)
    m_act = len(plant.actuators)
    determined = np.ones(3, bool)
    for _ in range(3):  # the second moments at the current centre
        rhs, W = (np.asarray(x) for x in _columns(plant, j, com, ~determined, laws)(q, qd, qdd, F))
        y, A = rhs.reshape(-1), W.reshape(-1, W.shape[-1])
        norm = np.linalg.norm(A[:, :4], axis=0)
        determined &= norm[1:] > 1e-8 * norm[0]  # a moment the motion never excites
        free = [k for k in range(3) if determined[k]]
        cols = [0] + [1 + k for k in free] + list(range(4, A.shape[1]))
        As = A[:, cols]
        scale = np.linalg.norm(As, axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        x, *_ = np.linalg.lstsq(As / scale, y, rcond=None)
        x = x / scale
        r = y - As @ x
        sigma2 = r @ r / max(len(y) - len(cols), 1)
        std = np.sqrt(np.clip(np.diag(np.linalg.pinv((As / scale).T @ (As / scale))), 0, None))
        std = np.sqrt(sigma2) * std / scale
        m = x[0]
        new = com.copy()
        first_std = {}
        for idx, k in enumerate(free):
            mc, sd = x[1 + idx], std[1 + idx]
            if m > 0 and sd / m < COM_WEAK:
                new[k], first_std[k] = mc / m, sd
            else:
                determined[k] = False
        com = new
    nf = len(cols) - 3 * m_act
    fr, fr_std = {}, {}
    for i, a in enumerate(plant.actuators):
        b = nf + 3 * i
        fc, dfs, sig = x[b : b + 3]
        fr.update({f"friction.{a.name}.F_c": float(fc), f"friction.{a.name}.F_s": float(fc + dfs),
                   f"friction.{a.name}.sigma": float(sig)})  # fmt: skip
        fr_std.update({f"friction.{a.name}.F_c": float(std[b]),
                       f"friction.{a.name}.sigma": float(std[b + 2])})  # fmt: skip
    com_std = tuple(float(first_std[k] / m) if k in first_std else float("inf") for k in range(3))
    return PayloadEstimate(
        mass=float(m), mass_std=float(std[0]), com=tuple(float(c) for c in com), com_std=com_std,
        com_determined=tuple(bool(d) for d in determined), friction=fr, friction_std=fr_std,
        rms_residual=float(np.sqrt(np.mean(r**2))), samples=int(q.shape[0]), cutoff_hz=cutoff,
    )  # fmt: skip
