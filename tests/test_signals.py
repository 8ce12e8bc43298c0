"""Signal processing against known signals: sums of sinusoids with analytic derivatives, the
closed-form magnitude of a zero-phase Butterworth, polynomials that Savitzky-Golay fits
exactly, and aliasing that decimation must prevent."""

import math

import numpy as np
import pytest
import scipy.signal

from jaxmb.identification.signals import (
    decimate,
    differentiate,
    estimate_derivatives,
    lowpass,
    savgol_window,
)
from jaxmb.io.log_sampling import resample, sampling_report
from jaxmb.io.logs import Log

FS = 1000.0
DT = 1 / FS
NOISE = 1e-4  # rad, a 16-bit encoder's quantisation order of magnitude
A = np.array([0.5, 0.3, 0.2])
F = np.array([0.5, 1.3, 2.7])  # Hz
PHASE = np.array([0.1, 1.0, 2.0])


def sines(t):
    """Sum of sinusoids and its first two analytic derivatives."""
    w = 2 * np.pi * F
    arg = w * t[:, None] + PHASE
    return (
        (A * np.sin(arg)).sum(1),
        (A * w * np.cos(arg)).sum(1),
        -(A * w**2 * np.sin(arg)).sum(1),
    )


@pytest.fixture(scope="module")
def record():
    t = np.arange(4000) * DT
    x, xd, xdd = sines(t)
    noisy = x + np.random.default_rng(0).normal(0, NOISE, t.size)
    return t, x, xd, xdd, noisy


def _amplitude(t, y, f):
    """Least-squares amplitude and phase of the tone at f Hz in y (the test's own estimator)."""
    M = np.stack([np.sin(2 * np.pi * f * t), np.cos(2 * np.pi * f * t)], axis=1)
    (s, c), *_ = np.linalg.lstsq(M, y, rcond=None)
    return math.hypot(s, c), math.atan2(c, s)


def test_savgol_derivatives_of_noisy_sines(record):
    """Errors stay within what noise (sigma ||c||, c the filter's coefficients) and the fit's
    bias allow: 6 noise standard deviations plus 0.1 % of the peak inside the record, where
    the window is centred; the ends, where a one-sided fit amplifies noise about 5 times more
    for the second derivative, get 8 times that."""
    t, _, xd, xdd, noisy = record
    cutoff = 20.0
    win = savgol_window(FS, cutoff)
    inner = slice(win, -win)
    for order, ref in ((1, xd), (2, xdd)):
        est = differentiate(noisy, DT, order=order, cutoff=cutoff)
        c = scipy.signal.savgol_coeffs(win, 5, deriv=order, delta=DT)
        tol = 6 * NOISE * np.linalg.norm(c) + 1e-3 * np.abs(ref).max()
        err = np.abs(est - ref)
        assert err[inner].max() < tol, (order, err[inner].max(), tol)
        assert err.max() < 8 * tol, (order, err.max(), tol)
    # a given window gives the same as the cutoff that selects it
    np.testing.assert_array_equal(
        differentiate(noisy, DT, window=win), differentiate(noisy, DT, cutoff=cutoff)
    )


def test_savgol_is_exact_for_polynomials():
    """A degree-5 fit differentiates a quintic exactly, ends included (mode="interp")."""
    t = np.arange(300) * DT
    p = np.polynomial.Polynomial([0.3, -1.0, 2.0, 0.5, -3.0, 4.0])
    cond = np.linalg.cond(np.vander(np.arange(-15.0, 16.0), 6, increasing=True))
    for order in (0, 1, 2, 3):
        est = differentiate(p(t), DT, order=order, window=31)
        ref = p.deriv(order)(t) if order else p(t)
        # round-off of scipy's least-squares coefficients, eps cond(V) relative (V the degree-5
        # Vandermonde matrix of the 31 window offsets, cond ~5e5), amplified by order! and
        # (time scale of the fit)^-order, the window's half-width being 15 dt (measured with
        # scipy 1.17: 0.4, 0.33, 0.013 and 0.52 of this bound for orders 0-3)
        bound = np.finfo(float).eps * cond * math.factorial(order) * (15 * DT) ** -order
        np.testing.assert_allclose(est, ref, rtol=0, atol=bound)


def test_lowpass_has_zero_phase_lag():
    """Passband tones come out undelayed: the cross-correlation peaks at lag 0 and the phase at
    5 Hz is unchanged; a causal filter of the same design (the contrast) lags."""
    t = np.arange(3000) * DT
    x = np.sin(2 * np.pi * 2 * t) + np.sin(2 * np.pi * 5 * t + 1) + np.sin(2 * np.pi * 11 * t + 2)
    y = lowpass(x, FS, 50.0)
    lags = scipy.signal.correlation_lags(y.size, x.size)
    assert lags[np.argmax(scipy.signal.correlate(y, x))] == 0
    inner = slice(500, -500)
    _, phase_in = _amplitude(t[inner], x[inner], 5.0)
    _, phase_out = _amplitude(t[inner], y[inner], 5.0)
    assert abs(phase_out - phase_in) < 1e-6  # rad; the causal filter's lag is ~0.1 rad here
    causal = scipy.signal.sosfilt(scipy.signal.butter(4, 50.0, output="sos", fs=FS), x)
    assert lags[np.argmax(scipy.signal.correlate(causal, x))] > 0


@pytest.mark.parametrize("f_stop", [30.0, 40.0, 80.0])
def test_lowpass_attenuation_matches_butterworth(f_stop):
    """Gain of the forward-backward Butterworth (bilinear transform):
    1 / (1 + (tan(pi f / fs) / tan(pi fc / fs))^(2N)), at a passband and a stopband tone."""
    cutoff, order = 20.0, 4
    t = np.arange(4000) * DT
    x = np.sin(2 * np.pi * 2 * t) + np.sin(2 * np.pi * f_stop * t)
    y = lowpass(x, FS, cutoff, order)

    def gain(f):
        r = math.tan(math.pi * f / FS) / math.tan(math.pi * cutoff / FS)
        return 1 / (1 + r ** (2 * order))

    inner = slice(500, -500)  # away from the end transients
    M = np.stack(
        [g(2 * np.pi * f * t[inner]) for f in (2.0, f_stop) for g in (np.sin, np.cos)], axis=1
    )
    coef, *_ = np.linalg.lstsq(M, y[inner], rcond=None)
    a_pass, a_stop = math.hypot(*coef[:2]), math.hypot(*coef[2:])
    assert a_pass == pytest.approx(gain(2.0), rel=1e-6)
    # 1e-7 absolute: leakage of the passband tone into the fit of the stopband tone
    assert a_stop == pytest.approx(gain(f_stop), rel=1e-3, abs=1e-7)


def test_decimate_preserves_a_low_tone():
    """A 230 Hz tone would alias to 30 Hz at fs = 100 Hz; the anti-alias filter removes it and
    keeps the 3 Hz tone."""
    t = np.arange(4000) * DT
    low = np.sin(2 * np.pi * 3 * t)
    log = Log(t, {"u_lift": low + 0.5 * np.sin(2 * np.pi * 230 * t)})
    dec = decimate(log, 10)
    assert dec.n == 400 and np.array_equal(dec.t, t[::10])
    assert sampling_report(dec).dt == pytest.approx(0.01, rel=1e-12)
    inner = slice(30, -30)
    err = np.abs(dec["u_lift"] - low[::10])[inner]
    assert err.max() < 2e-3  # 3 Hz gain ~1 - 1e-8; residue of the 230 Hz tone < 1e-3
    naive = np.abs(log["u_lift"][::10] - low[::10])[inner]
    assert naive.max() > 0.4  # without the filter the alias is there
    assert dec.meta["processing"][0]["decimate"]["factor"] == 10
    with pytest.raises(ValueError, match="Nyquist frequency after decimation"):
        decimate(log, 10, cutoff=60.0)


def test_resample_recovers_a_smooth_signal_from_jittered_stamps():
    rng = np.random.default_rng(3)
    n = 2000
    t = (np.arange(n) + rng.uniform(-0.3, 0.3, n)) * DT
    t[0] = 0.0

    def f(t):
        return np.sin(2 * np.pi * 2 * t) + 0.3 * np.cos(2 * np.pi * 5 * t)

    log = Log(t, {"q1": f(t)})
    rep = sampling_report(log)
    assert not rep.uniform and rep.jitter > 0.3 * DT and rep.n_gaps == 0
    f2 = (2 * np.pi * 2) ** 2 + 0.3 * (2 * np.pi * 5) ** 2  # max |f''|
    h = np.diff(t).max()
    for method, tol in (("linear", h**2 / 8 * f2), ("cubic", 1e-8)):
        r = resample(log, DT, method)
        assert sampling_report(r).uniform
        np.testing.assert_allclose(np.diff(r.t), DT, rtol=1e-9)
        err = np.abs(r["q1"] - f(r.t))
        # linear: the interpolation error bound h^2/8 max|f''|; cubic: O(h^4), far smaller
        assert err.max() <= tol, (method, err.max(), tol)


@pytest.fixture(scope="module")
def mass_spring(record):
    """``tau = 3 qdd + 50 q`` of a motion plus a 30 Hz vibration beyond the 10 Hz cutoff."""
    t, x, xd, xdd, noisy = record
    w = 2 * np.pi * 30
    vib = 1e-3 * np.sin(w * t)
    q = noisy + vib
    tau = 3 * (xdd - w**2 * vib) + 50 * (x + vib)
    return t, x, xd, xdd, Log(t, {"q": q, "tau": tau})


def test_estimate_derivatives(mass_spring):
    """Derivatives of the motion within tolerance, and the filtered torque equal to the model
    applied to the filtered positions: both sides carry the same zero-phase filter, so the
    vibration cancels; the unfiltered torque (the contrast) keeps it."""
    t, x, xd, xdd, log = mass_spring
    est = estimate_derivatives(log, ["q"], cutoff=10.0)
    inner = slice(300, -300)  # 3 / cutoff s from each end (module docstring of signals)
    assert est.names == ("q", "tau", "qd_q", "qdd_q")
    # noise 1e-4 rad leaves ~1.4e-5 rad below 10 Hz; x (2 pi 10) per derivative, ~4 sigma peaks
    assert np.abs(est["q"] - x)[inner].max() < 1e-4
    assert np.abs(est["qd_q"] - xd)[inner].max() < 5e-3  # of a 6.8 rad/s peak
    assert np.abs(est["qdd_q"] - xdd)[inner].max() < 0.3  # of an 82 rad/s^2 peak
    resid = est["tau"] - (3 * est["qdd_q"] + 50 * est["q"])
    assert np.abs(resid)[inner].max() < 1.0  # tau ~ 400 N m peak, vibration part 107 N m
    kept = estimate_derivatives(log, ["q"], cutoff=10.0, others="keep")
    np.testing.assert_array_equal(kept["tau"], log["tau"])
    assert np.abs(kept["tau"] - (3 * kept["qdd_q"] + 50 * kept["q"]))[inner].max() > 50
    note = est.meta["processing"][0]["estimate_derivatives"]
    assert note["butterworth"]["cutoff_hz"] == 10.0 and note["savgol"]["polyorder"] == 5


def test_estimate_derivatives_keeps_measured_velocity(record):
    """A measured velocity with a 0.05 rad/s bias is kept (and filtered), unless recomputed."""
    t, x, xd, _, noisy = record
    log = Log(t, {"q": noisy, "qd_q": xd + 0.05})
    inner = slice(300, -300)
    kept = estimate_derivatives(log, ["q"], cutoff=10.0)
    np.testing.assert_allclose(kept["qd_q"][inner] - xd[inner], 0.05, atol=1e-4)
    fresh = estimate_derivatives(log, ["q"], cutoff=10.0, recompute=True)
    assert np.abs(fresh["qd_q"] - xd)[inner].max() < 5e-3


def test_bad_input_is_refused(record):
    t, _, _, _, noisy = record
    with pytest.raises(ValueError, match="Nyquist frequency fs/2 = 500 Hz"):
        lowpass(noisy, FS, 500.0)
    with pytest.raises(ValueError, match="order must be an integer >= 1"):
        lowpass(noisy, FS, 10.0, order=0)
    with pytest.raises(ValueError, match="need more than"):
        lowpass(noisy[:10], FS, 10.0)
    with pytest.raises(ValueError, match="exactly one of window"):
        differentiate(noisy, DT)
    with pytest.raises(ValueError, match="window must be an odd integer"):
        differentiate(noisy, DT, window=20)
    with pytest.raises(ValueError, match="polyorder must be >= order"):
        differentiate(noisy, DT, order=3, polyorder=2, window=21)
    with pytest.raises(ValueError, match=r"no position column for \['q2'\]"):
        estimate_derivatives(Log(t, {"q": noisy}), ["q2"], cutoff=10.0)
    jittered = t + np.random.default_rng(1).uniform(-0.2, 0.2, t.size) * DT
    with pytest.raises(ValueError, match="needs uniform sampling.*resample"):
        estimate_derivatives(Log(jittered, {"q": noisy}), ["q"], cutoff=10.0)
    with pytest.raises(ValueError, match="needs uniform sampling"):
        decimate(Log(jittered, {"q": noisy}), 2)
