r"""Signal processing for identification: zero-phase low-pass filtering, Savitzky-Golay
derivatives, decimation, and joint velocities/accelerations from logged positions.

Choices (each one is tested in tests/test_signals.py):

- **Zero phase.** Every filter runs forwards and backwards (`scipy.signal.sosfiltfilt` on a
  Butterworth design in second-order sections), so filtered signals are not delayed. The
  magnitude response is the square of the Butterworth's: with the bilinear transform,

  .. math:: |H(f)|^2 = 1 / \big(1 + (\tan(\pi f/f_s) / \tan(\pi f_c/f_s))^{2N}\big),

  i.e. 1/2 (-6 dB) at the cutoff ``f_c`` and a roll-off of ``-40 N`` dB per decade above it.
  At the ends the record is continued by its odd extension over ``3 / f_c`` seconds; as that
  continuation is only C^1, second derivatives are least accurate there: on the tests' signals
  at ``f_c = 10`` Hz the acceleration error is ~3 % of its peak 0.1 s from the ends and ~0.03 %
  at 0.3 s. Drop about ``3 / f_c`` seconds at each end where accelerations matter.
- **Savitzky-Golay derivatives** (Savitzky & Golay (1964)): the k-th derivative of a local
  least-squares polynomial of degree ``polyorder`` over ``window`` samples (as
  `scipy.signal.savgol_filter` with ``deriv``, ``delta`` and ``mode="interp"``, but fitted on
  the window's positions scaled to [-1, 1], so that windows of thousands of samples keep
  their precision), exact for polynomials of that
  degree and zero-phase. The default degree 5 keeps the derivative filters' passband flat
  (a degree-3 fit biases second derivatives by ~1 % well inside its passband). Given a
  cutoff instead of a window, the half-width ``M`` (window ``2M + 1``) follows Schafer (2011)
  "What is a Savitzky-Golay filter?", IEEE Signal Processing Magazine 28(4), whose -3 dB
  frequency of the smoothing filter is
  ``f_3dB / (f_s / 2) ~ (polyorder + 1) / (3.2 M - 4.6)``.
- **Equal filtering of both sides of the model** (Gautier (1990)'s parallel filtering): in
  `estimate_derivatives` every column, positions, their derivatives and the measured forces,
  passes through the same zero-phase low-pass and the same Savitzky-Golay window, so a
  regressor ``tau = W(q, qd, qdd) pi`` relates signals with equal (zero) delay and equal
  gain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import scipy.signal
from jaxtyping import ArrayLike, Float

from jaxmb.io.log_sampling import sampling_report
from jaxmb.io.logs import Log, with_note

__all__ = [
    "check_cutoff",
    "lowpass",
    "savgol_window",
    "differentiate",
    "decimate",
    "estimate_derivatives",
]


def _positive(name: str, value) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: expected a finite number > 0, got {value}")
    return value


def check_cutoff(cutoff: float, t: Float[ArrayLike, " T"], source: str) -> None:
    """Refuse a low-pass ``cutoff`` (the CLI's ``--cutoff``) at or above the Nyquist frequency
    of the samples at times ``t``, naming their ``source``, before anything is filtered."""
    t = np.asarray(t, float)
    fs = 1.0 / float(np.median(np.diff(t)))
    if not cutoff < fs / 2:
        raise ValueError(
            f"--cutoff: expected below the Nyquist frequency of {source} (fs/2 = {fs / 2:g} Hz: "
            f"{t.size} samples over {t[-1] - t[0]:g} s), got {cutoff:g} Hz"
        )


def _as_signal(x, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0:
        raise ValueError(f"{what}: expected samples along axis 0, got a scalar")
    if not np.isfinite(x).all():
        raise ValueError(
            f"{what}: expected finite values, got {int((~np.isfinite(x)).sum())} NaN/inf"
        )
    return x


def lowpass(x: ArrayLike, fs: float, cutoff: float, order: int = 4) -> Float[np.ndarray, "T ..."]:
    """Zero-phase Butterworth low-pass of ``x`` along axis 0 (module docstring).

    Args:
        x: samples (T, ...) taken uniformly at ``fs`` Hz.
        fs: sampling frequency, Hz.
        cutoff: Butterworth cutoff, Hz, ``0 < cutoff < fs / 2``; the forward-backward pass
            halves the power there (gain 1/2, -6 dB).
        order: Butterworth order N (the magnitude falls as ``f^(-2N)``).
    """
    fs = _positive("lowpass: fs", fs)
    cutoff = _positive("lowpass: cutoff", cutoff)
    if cutoff >= fs / 2:
        raise ValueError(
            f"lowpass: cutoff must be below the Nyquist frequency fs/2 = {fs / 2:g} Hz, got "
            f"{cutoff:g} Hz"
        )
    if not (isinstance(order, int | np.integer) and order >= 1):
        raise ValueError(f"lowpass: order must be an integer >= 1, got {order!r}")
    x = _as_signal(x, "lowpass: x")
    sos = scipy.signal.butter(int(order), cutoff, btype="low", output="sos", fs=fs)
    # scipy's default edge padding for sosfiltfilt; a shorter record cannot be filtered
    padlen = 3 * (2 * len(sos) + 1 - min((sos[:, 2] == 0).sum(), (sos[:, 5] == 0).sum()))
    if x.shape[0] <= padlen:
        raise ValueError(
            f"lowpass: need more than {padlen} samples for an order-{order} filter, got "
            f"{x.shape[0]}"
        )
    # pad with 3/cutoff s of odd extension (not scipy's 27 samples): the start-up transient of
    # the forward and backward passes then decays inside the padding, which cuts the error
    # of the first and last ~0.3/cutoff s about fivefold
    padlen = min(x.shape[0] - 1, max(padlen, math.ceil(3 * fs / cutoff)))
    return scipy.signal.sosfiltfilt(sos, x, axis=0, padlen=padlen)


def savgol_window(fs: float, cutoff: float, polyorder: int = 5) -> int:
    """Odd Savitzky-Golay window ``2M + 1`` whose smoothing filter has its -3 dB point near
    ``cutoff`` Hz: ``M = ((polyorder + 1) f_s / (2 f_c) + 4.6) / 3.2`` rounded up (Schafer
    (2011), module docstring), at least ``polyorder + 2`` samples."""
    fs = _positive("savgol_window: fs", fs)
    cutoff = _positive("savgol_window: cutoff", cutoff)
    M = math.ceil(((polyorder + 1) * fs / (2 * cutoff) + 4.6) / 3.2)
    window = 2 * M + 1
    smallest = polyorder + 2 + (polyorder + 2 + 1) % 2  # odd and > polyorder
    return max(window, smallest)


def differentiate(
    x: ArrayLike,
    dt: float,
    *,
    order: int = 1,
    window: int | None = None,
    polyorder: int = 5,
    cutoff: float | None = None,
) -> Float[np.ndarray, "T ..."]:
    """The ``order``-th time derivative of uniformly sampled ``x`` (along axis 0) by a
    Savitzky-Golay filter (module docstring); ``order=0`` smooths.

    Args:
        x: samples (T, ...), interval ``dt`` s.
        window: odd number of samples of the local fit; or give
        cutoff: the smoothing bandwidth, Hz, from which the window is chosen
            (`savgol_window`). One of the two is required.
        polyorder: degree of the local polynomial (>= order).

    At the ends the polynomial fitted to the first/last window is differentiated
    (``mode="interp"``)."""
    dt = _positive("differentiate: dt", dt)
    if not (isinstance(order, int | np.integer) and order >= 0):
        raise ValueError(f"differentiate: order must be an integer >= 0, got {order!r}")
    if polyorder < order:
        raise ValueError(
            f"differentiate: polyorder must be >= order ({order}) for a non-zero derivative, "
            f"got {polyorder}"
        )
    if (window is None) == (cutoff is None):
        raise ValueError("differentiate: give exactly one of window (samples) or cutoff (Hz)")
    if window is None:
        window = savgol_window(1.0 / dt, cutoff, polyorder)
    if not (isinstance(window, int | np.integer) and window % 2 == 1 and window > polyorder):
        raise ValueError(
            f"differentiate: window must be an odd integer > polyorder ({polyorder}), got {window!r}"
        )
    x = _as_signal(x, "differentiate: x")
    if x.shape[0] < window:
        raise ValueError(
            f"differentiate: the window ({window} samples) is longer than the signal "
            f"({x.shape[0]} samples)"
        )
    return _savgol(x, int(window), int(polyorder), int(order), dt)


def _savgol(x: np.ndarray, window: int, polyorder: int, order: int, dt: float) -> np.ndarray:
    """`scipy.signal.savgol_filter` (``mode="interp"``) with its local polynomials fitted on
    the window's positions scaled to [-1, 1]: scipy's coefficients are fitted on raw sample
    offsets, and lose all precision past ~600 samples at degree 5 (a window of 801 sums to
    1e-9 instead of 1), the window a 2 Hz cutoff asks of a 4 kHz log. Each output sample is
    the ``order``-th derivative, at its own position, of the polynomial fitted to the window
    centred on it; within half a window of an end, of the one fitted to the first or last
    window."""
    half = window // 2
    u = np.arange(-half, half + 1) / half
    P = np.linalg.pinv(np.vander(u, polyorder + 1, increasing=True))  # window -> coefficients
    k = np.arange(polyorder + 1)
    # d^order/du^order of u^k at u, divided into seconds: row j of D takes coefficients to the
    # derivative at u[j]
    falling = np.array([math.perm(int(i), order) for i in k], dtype=float)
    power = np.clip(k - order, 0, None)
    D = np.where(k >= order, falling * u[:, None] ** power, 0.0) / (half * dt) ** order
    flat = x.reshape(x.shape[0], -1)
    centre = D[half] @ P  # the correlation kernel over the window: convolve with it reversed
    y = scipy.signal.oaconvolve(flat, centre[::-1, None], mode="same", axes=0)
    y[:half] = D[:half] @ (P @ flat[:window])
    y[-half:] = D[half + 1 :] @ (P @ flat[-window:])
    return y.reshape(x.shape)


def _uniform(log: Log, who: str) -> float:
    rep = sampling_report(log)
    if not rep.uniform:
        raise ValueError(
            f"{who}: needs uniform sampling; column 't' has jitter {rep.jitter:.3g} s at median "
            f"dt {rep.dt:.6g} s and {rep.n_gaps} gaps. Put the log on a uniform grid first "
            "with jaxmb.io.log_sampling.resample"
        )
    return rep.dt


def decimate(log: Log, factor: int, *, cutoff: float | None = None, order: int = 4) -> Log:
    """Every ``factor``-th sample of ``log`` after a zero-phase anti-alias low-pass of every
    column.

    Args:
        factor: integer >= 1 (1 returns the log unchanged).
        cutoff: Hz; default 0.8 of the new Nyquist frequency ``fs / (2 factor)``. Must not exceed
            it.
        order: Butterworth order (`lowpass`)."""
    if not (isinstance(factor, int | np.integer) and factor >= 1):
        raise ValueError(f"decimate: factor must be an integer >= 1, got {factor!r}")
    if factor == 1:
        return log
    dt = _uniform(log, "decimate")
    fs = 1.0 / dt
    nyquist = fs / (2 * factor)
    cutoff = 0.8 * nyquist if cutoff is None else float(cutoff)
    if not 0 < cutoff <= nyquist:
        raise ValueError(
            f"decimate: cutoff must be in (0, {nyquist:g}] Hz, the Nyquist frequency after "
            f"decimation by {factor}, got {cutoff:g}"
        )
    sig = {}
    if log.names:
        Y = lowpass(log.stack(log.names), fs, cutoff, order)
        sig = {c: Y[::factor, j] for j, c in enumerate(log.names)}
    out = Log(log.t[::factor], sig, log.sidecar)
    return with_note(
        out, {"decimate": {"factor": int(factor), "cutoff_hz": cutoff, "order": int(order)}}
    )


def estimate_derivatives(
    log: Log,
    coordinates: Sequence[str],
    *,
    cutoff: float,
    order: int = 4,
    polyorder: int = 5,
    sg_factor: float = 4.0,
    recompute: bool = False,
    others: str = "filter",
) -> Log:
    r"""Velocities ``qd_<c>`` and accelerations ``qdd_<c>`` of ``coordinates`` from the logged
    positions, with every column filtered alike (module docstring).

    Each column ``x`` becomes ``S_0(F(x))``, with ``F`` the zero-phase Butterworth low-pass at
    ``cutoff`` Hz (order ``order``) and ``S_k`` the Savitzky-Golay k-th derivative of degree
    ``polyorder`` whose window is `savgol_window` for ``sg_factor * cutoff``: wide enough to
    reject what ``F`` leaves, narrow enough that in ``F``'s passband ``S_1``, ``S_2`` are the
    derivatives of ``S_0`` to well below 1e-3 relative (degree 5: the bias grows as
    ``(f / f_c)^6``). Then

    - ``qd_<c> = S_1(F(q))``, ``qdd_<c> = S_2(F(q))``;
    - a measured ``qd_<c>`` is kept (filtered, ``S_0(F(qd))``) and gives ``qdd_<c> =
      S_1(F(qd))``; a measured ``qdd_<c>`` is kept (``S_0(F(qdd))``); ``recompute=True``
      ignores measured velocities and accelerations;
    - every other column (``tau_``, ``f_``, pressures, commands, ...) becomes ``S_0(F(x))``
      (``others="filter"``, the default, so that both sides of the model carry the same filter)
      or is left as logged (``others="keep"``).

    Sampling must be uniform (`jaxmb.io.log_sampling.resample` first otherwise). The first
    and last ``~ 1/cutoff`` seconds are the least accurate (edge effects)."""
    if isinstance(coordinates, str):
        raise ValueError(
            f"estimate_derivatives: coordinates must be a sequence of names, got {coordinates!r}"
        )
    if others not in ("filter", "keep"):
        raise ValueError(f"estimate_derivatives: others must be 'filter' or 'keep', got {others!r}")
    missing = [c for c in coordinates if c not in log.signals]
    if missing:
        raise ValueError(
            f"estimate_derivatives: no position column for {missing}; columns are {list(log.names)}"
        )
    sg_factor = _positive("estimate_derivatives: sg_factor", sg_factor)
    dt = _uniform(log, "estimate_derivatives")
    fs = 1.0 / dt
    window = savgol_window(fs, min(sg_factor * cutoff, 0.45 * fs), polyorder)

    def F(x):
        return lowpass(x, fs, cutoff, order)

    def S(x, k):
        return differentiate(x, dt, order=k, window=window, polyorder=polyorder)

    new: dict[str, np.ndarray] = {}
    derived: set[str] = set()
    for c in coordinates:
        q = F(log[c])
        new[c] = S(q, 0)
        vd, va = f"qd_{c}", f"qdd_{c}"
        if log.has(vd) and not recompute:
            v = F(log[vd])
            new[vd], new[va] = S(v, 0), S(v, 1)
        else:
            new[vd], new[va] = S(q, 1), S(q, 2)
        if log.has(va) and not recompute:
            new[va] = S(F(log[va]), 0)
        derived |= {c, vd, va}
    if others == "filter":
        for name in log.names:
            if name not in derived:
                new[name] = S(F(log[name]), 0)
    out = log.with_signals(new)
    note = {
        "estimate_derivatives": {
            "coordinates": list(coordinates),
            "butterworth": {"cutoff_hz": float(cutoff), "order": int(order), "zero_phase": True},
            "savgol": {"window": int(window), "polyorder": int(polyorder)},
            "recompute": bool(recompute),
            "others": others,
        }
    }
    return with_note(out, note)
