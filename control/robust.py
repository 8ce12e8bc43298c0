r"""The robust inertia-partitioning controller of Dastranj & Mattila (2026) eqs. (14)-(18):

    e = q - q_d,  s = edot + Lambda e,  qdd_r = qdd_d - Lambda edot                (14)-(17)
    Q_a = Gamma(q) qdd_r + h(q, qd) - Q_e(q, qd) - K s - kappa sat(s / eps)         (18)

with Gamma, h and Q_e (gravity) from the *nominal* model the controller is built on; gains are
array leaves, so they can be tuned by gradient and batched with vmap.

Departure from the paper, stated: with ``h(q, qd)`` in eq. (18) the closed loop is eq. (20),
``Gamma sdot + K s + kappa sat(s/eps) = d``, and then ``Vdot`` of ``V = 1/2 s^T Gamma s`` carries
an extra ``1/2 s^T Gammadot s`` that eq. (24) drops. The paper's eq. (21), and so eq. (24) exactly,
hold for the passivity-based form ``Gamma qdd_r + C(q, qd) qd_r - Q_e - K s - kappa sat``
(Slotine and Li), available here as ``form="passivity"``. The default is eq. (18) as printed.
"""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from jaxmb.algorithms.dynamics import bias_forces, inverse_dynamics
from jaxmb.multibody.checks import check_all_finite, checked, not_positive
from jaxmb.multibody.model import Model

__all__ = ["RobustController", "filtered_error", "sat"]


def sat(x):
    """Componentwise saturation to [-1, 1] (the sat of eq. (18))."""
    return jnp.clip(x, -1.0, 1.0)


_DESIRED = ("q_d", "qd_d", "qdd_d")


def filtered_error(Lambda, q, qd, desired):
    r"""$(e, \dot e, s)$ with $s = \dot e + \Lambda e$ (eqs. (14)-(15)), Lambda diagonal as a vector."""
    q_d, qd_d, _ = check_all_finite(
        {f"desired {n}": x for n, x in zip(_DESIRED, desired, strict=True)}
    )
    e = q - q_d
    e_dot = qd - qd_d
    return e, e_dot, e_dot + Lambda * e


def _positive(name, x, n):
    """A diagonal gain as a length-n vector (a scalar is broadcast), checked > 0: now if concrete,
    at run time through equinox.error_if if traced (gains under vmap or grad)."""
    x = jnp.asarray(x, dtype=float)
    if x.ndim == 0:
        x = jnp.broadcast_to(x, (n,))
    return checked(
        x, not_positive, f"RobustController.{name}: must be > 0 and finite (diagonal gain)", (n,)
    )


class RobustController(eqx.Module):
    r"""$Q_a$ of Dastranj & Mattila (2026) eq. (18) on a nominal model.

    Attributes (diagonal gains as vectors of length n):
        model: the nominal model (Gamma, h and its gravity force Q_e).
        Lambda: error filter, 1/s (eq. (15)).
        K: linear feedback on s (N m s or N s per coordinate).
        kappa: robust gain, the force level of the switching term (N m or N).
        eps: boundary-layer widths of sat(s / eps) (rad/s or m/s).
    """

    model: Model
    Lambda: Float[Array, " n"]
    K: Float[Array, " n"]
    kappa: Float[Array, " n"]
    eps: Float[Array, " n"]
    form: str = eqx.field(static=True)

    def __init__(self, model: Model, Lambda, K, kappa, eps, *, form: str = "paper"):
        if form not in ("paper", "passivity"):
            raise ValueError(
                f"RobustController: form must be 'paper' (eq. (18)) or 'passivity', got {form!r}"
            )
        self.form = form
        n = model.n
        self.model = model
        self.Lambda = _positive("Lambda", Lambda, n)
        self.K = _positive("K", K, n)
        self.kappa = _positive("kappa", kappa, n)
        self.eps = _positive("eps", eps, n)

    def __call__(self, t, q, qd, desired):
        del t
        _, e_dot, s = filtered_error(self.Lambda, q, qd, desired)
        qdd_r = desired[2] - self.Lambda * e_dot  # eq. (16)
        # Gamma qdd_r + h - Q_e in one recursive pass (jaxmb.algorithms.recursive fast path)
        model_part = inverse_dynamics(self.model, q, qd, qdd_r)
        if self.form == "passivity":
            # replace h = C(q, qd) qd by C(q, qd) qd_r, qd_r = qd - s (eq. (17)). C qd is a
            # symmetric bilinear form B(qd, qd) (Christoffel symbols), so C(q, qd) v = B(qd, v)
            # = (h(q, qd + v) - h(q, qd - v)) / 4 by polarisation, with h from RNEA.
            qd_r = qd - s

            def h(v):
                return bias_forces(self.model, q, v, method="rnea")

            model_part = model_part - h(qd) + 0.25 * (h(qd + qd_r) - h(qd - qd_r))
        return model_part - self.K * s - self.kappa * sat(s / self.eps)  # eq. (18)
