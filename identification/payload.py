r"""The payload alone from the pressure forces, the booms and cylinder bodies at their file (CAD)
values: the quick linear fit that starts stage 1 (`mechanics`) and gives the payload its prior.

With the stacked equations of `mechanics.equations`, ``tau_p = Y pi + Y_f beta`` (Petrovic &
Mattila (2022) eq. (79) forces through the input matrix; Dastranj & Mattila (2026) eq. (13)),
the known bodies move to the left: ``tau_p - Y_known pi_file = Y_payload pi_payload + Y_f beta``.
A point mass ``m`` at ``c`` has ``pi = m [1, c, |c|^2 I - c c^T]`` (Pinocchio's order): linear
in ``(m, m c)`` once the small second moments are taken at the current ``c`` (iterated). The
centre's coordinates that the motion never excites (a planar machine's out-of-plane offset) keep
the file's value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PayloadEstimate", "payload_only"]

COM_WEAK = 0.05  # m: a centre coordinate with a larger std is reported as not determined


@dataclass(frozen=True)
class PayloadEstimate:
    """The payload-only fit (SI): mass with std, centre (the file's value where the log does not
    determine a coordinate: ``com_determined`` False there)."""

    mass: float
    mass_std: float
    com: tuple[float, float, float]
    com_std: tuple[float, float, float]
    com_determined: tuple[bool, bool, bool]


def _second_moments(c: np.ndarray) -> np.ndarray:
    """``|c|^2 I - c c^T`` in the regressor's order (xx, xy, yy, xz, yz, zz)."""
    s = c @ c
    return np.array([s - c[0] ** 2, -c[0] * c[1], s - c[1] ** 2, -c[0] * c[2], -c[1] * c[2],
                     s - c[2] ** 2])  # fmt: skip


def payload_only(
    tau: np.ndarray, Y: np.ndarray, Yf: np.ndarray, pi_file: np.ndarray, j: int, com0
) -> PayloadEstimate:
    """The fit (module docstring) on stacked equations ``tau (N, n)``, ``Y (N, n, 10 nb)``,
    ``Yf (N, n, k)`` (`mechanics.equations`); ``pi_file (nb, 10)`` the file's bodies, ``j`` the
    payload body, ``com0`` its centre in the file."""
    nb = pi_file.shape[0]
    known = np.ones(nb, bool)
    known[j] = False
    Yk = Y.reshape(*Y.shape[:2], nb, 10)
    y = (tau - np.einsum("tnbp,bp->tn", Yk[:, :, known], pi_file[known])).reshape(-1)
    Yp = Yk[:, :, j].reshape(-1, 10)
    F = Yf.reshape(Yp.shape[0], -1)
    com = np.asarray(com0, float).copy()
    norm = np.linalg.norm(Yp[:, :4], axis=0)
    determined = norm[1:] > 1e-8 * norm[0]  # a first moment the motion never excites
    first_std = {}
    for _ in range(3):
        fixed = np.where(determined, 0.0, com)
        mass_col = Yp[:, 0] + Yp[:, 4:] @ _second_moments(com) + Yp[:, 1:4] @ fixed
        free = [k for k in range(3) if determined[k]]
        A = np.concatenate([mass_col[:, None], Yp[:, [1 + k for k in free]], F], axis=1)
        scale = np.linalg.norm(A, axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        x, *_ = np.linalg.lstsq(A / scale, y, rcond=None)
        r = y - (A / scale) @ x
        sigma2 = r @ r / max(len(y) - A.shape[1], 1)
        cov = sigma2 * np.linalg.pinv((A / scale).T @ (A / scale)) / np.outer(scale, scale)
        x = x / scale
        std = np.sqrt(np.clip(np.diag(cov), 0, None))
        m = x[0]
        first_std = {}
        for idx, k in enumerate(free):
            mc, sd = x[1 + idx], std[1 + idx]
            if m > 0 and sd / m < COM_WEAK:
                com[k], first_std[k] = mc / m, sd
            else:
                determined[k] = False
    return PayloadEstimate(
        mass=float(m),
        mass_std=float(std[0]),
        com=tuple(float(c) for c in com),
        com_std=tuple(
            float(first_std[k] / m) if k in first_std else float("inf") for k in range(3)
        ),
        com_determined=tuple(bool(d) for d in determined),
    )
