"""What scipy.signal.firwin and scipy.signal.iirfilter refuse, decided without importing SciPy.

A pipeline's specs are propagated (``gk-stream validate``, the schema's checks, a stream opening)
before any filter is designed; importing scipy.signal costs over a second, so the fir and sos
stages check their ``design:`` here and design the taps or sections only when a processor, the
CUDA lowering or a caller needs them. Each rule is SciPy's own (firwin, iirfilter and the analog
prototypes cheb1ap, cheb2ap, ellipap of SciPy 1.17), with the same float64 arithmetic, so that a
value at an edge is refused exactly when SciPy refuses it (tests/stages/test_design_rules.py
compares both over grids of designs). What only the full design finds (NaN coefficients; SciPy's
section pairing failing for an edge within ~1e-12 of sample_rate/2 or an elliptic rp below ~1e-15 dB)
is refused when the design is computed, before the first block.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

_LOG10 = math.log(10)  # scipy.signal's _POW10_LOG10
_ARC_JAC_SN_MAXITER = 10  # as in scipy.signal._filter_design


class Refusal(NamedTuple):
    message: str  # SciPy's ValueError text, or what its arithmetic error means
    hint: str | None = None


def firwin_refusal(numtaps: int, cutoff: float | list[float], pass_zero: bool | str,
                   fs: float) -> Refusal | None:
    """What ``scipy.signal.firwin(numtaps, cutoff, pass_zero=pass_zero, fs=fs)`` refuses before it
    computes the window (the window is checked by the caller), or None."""
    nyq = 0.5 * float(fs)
    edges = np.atleast_1d(np.asarray(cutoff, dtype=np.float64)) / float(nyq)
    if edges.ndim > 1:
        return Refusal("The cutoff argument must be at most one-dimensional.")
    if edges.size == 0:
        return Refusal("At least one cutoff frequency must be given.")
    if np.min(edges) <= 0 or np.max(edges) >= 1:
        return Refusal("Invalid cutoff frequency: frequencies must be greater than 0 and less than fs/2.")
    if np.any(edges[1:] - edges[:-1] <= 0):
        return Refusal("Invalid cutoff frequencies: the frequencies must be strictly increasing.")
    if pass_zero in ("bandstop", "lowpass"):
        if pass_zero == "lowpass" and edges.size != 1:
            return Refusal(f'cutoff must have one element if pass_zero=="lowpass", got {edges.shape}')
        if pass_zero == "bandstop" and edges.size <= 1:
            return Refusal(f'cutoff must have at least two elements if pass_zero=="bandstop", got {edges.shape}')
        pass_zero = True
    elif pass_zero in ("bandpass", "highpass"):
        if pass_zero == "highpass" and edges.size != 1:
            return Refusal(f'cutoff must have one element if pass_zero=="highpass", got {edges.shape}')
        if pass_zero == "bandpass" and edges.size <= 1:
            return Refusal(f'cutoff must have at least two elements if pass_zero=="bandpass", got {edges.shape}')
        pass_zero = False
    elif not (pass_zero is True or pass_zero is False):
        return Refusal(f"Parameter pass_zero={pass_zero!r} not in (True, False, 'bandpass', 'lowpass', "
                       "'highpass', 'bandstop')")
    pass_nyquist = (edges.size % 2 == 0) == pass_zero
    if pass_nyquist and numtaps % 2 == 0:
        return Refusal("A filter with an even number of coefficients must have zero response at the "
                       "Nyquist frequency.")
    return None


def iirfilter_refusal(kind: str, order: int, cutoff: float | list[float], btype: str, rp: float | None,
                      rs: float | None, fs: float) -> Refusal | None:
    """What ``scipy.signal.iirfilter(order, cutoff, rp, rs, btype, ftype=kind, output='sos', fs=fs)``
    refuses in its checks of the critical frequencies, in the analog prototype (which depends on
    order, rp and rs alone) and in the gain of the lowpass or bandpass transformation, or None.
    The caller has checked that the edges are below fs/2 and that their count and rp/rs suit
    btype and kind (iirfilter's other checks)."""
    wn = np.asarray(cutoff, dtype=np.float64) / (float(fs) / 2)
    if np.any(wn <= 0):
        return Refusal("filter critical frequencies must be greater than 0",
                       hint="the cutoff is too small to be a frequency in float64 at this sample rate")
    if wn.size > 1 and not wn[0] < wn[1]:
        return Refusal("Wn[0] must be less than Wn[1]",
                       hint="the band edges are too close to tell apart in float64; move them apart")
    if kind == "cheby1":
        # cheb1ap: eps = sqrt(10**(0.1*rp) - 1), then 1 / eps
        if 10 ** (0.1 * rp) - 1.0 == 0:
            return _too_small("rp", rp)
    elif kind == "cheby2":
        # cheb2ap: de = 1 / sqrt(10**(0.1*rs) - 1)
        if 10 ** (0.1 * rs) - 1 == 0:
            return _too_small("rs", rs)
    elif kind == "ellip":
        refusal = _ellipap_refusal(order, rp, rs, btype)
        if refusal is not None:
            return refusal
    # lp2lp_zpk and lp2bp_zpk scale the gain by wo**degree or bw**degree in Python floats, which
    # raise OverflowError: a cutoff close to fs/2 prewarps to a huge frequency
    warped = 2 * 2.0 * np.tan(np.pi * wn / 2.0)
    degree = order if kind in ("butter", "bessel", "cheby1") else order % 2  # poles - zeros
    if btype in ("lowpass", "bandpass"):
        scale = float(warped) if btype == "lowpass" else float(warped[1] - warped[0])  # wo or bw
        try:
            scale ** degree
        except OverflowError:
            return Refusal(f"the design overflows float64: a {btype} of order {order} this close to the Nyquist "
                           f"frequency scales its gain by ({scale:.3g})**{degree}",
                           hint="move the cutoff further below sample_rate/2 or lower the order")
    return None


def _too_small(name: str, value: float) -> Refusal:
    return Refusal(f"float division by zero: {name} = {value:g} dB is too small (10**({name}/10) - 1 "
                   "is 0 in float64)", hint=f"use a larger {name}, e.g. {name}: 0.1")


def _pow10m1(x: float) -> float:
    return math.expm1(_LOG10 * x)


def _ellipap_refusal(order: int, rp: float, rs: float, btype: str) -> Refusal | None:
    """scipy.signal.ellipap(order, rp, rs)'s refusals, in its order, and the prototype that the
    highpass and bandstop transformations cannot take."""
    if order == 1:  # p = -sqrt(1 / (10**(0.1*rp) - 1))
        return _too_small("rp", rp) if _pow10m1(0.1 * rp) == 0 else None
    eps_sq = _pow10m1(0.1 * rp)
    if _pow10m1(0.1 * rs) == 0:
        return _too_small("rs", rs)
    ck1_sq = eps_sq / _pow10m1(0.1 * rs)
    if ck1_sq == 0:
        return Refusal("Cannot design a filter with given rp and rs specifications.",
                       hint="rp is too small beside rs in float64; use a larger rp")
    if ck1_sq > 1:
        # SciPy goes on with NaN (its elliptic degree needs ck1_sq <= 1) and fails in zpk2sos
        # ("attempt to get argmin of an empty sequence") or returns NaN sections
        return Refusal(f"kind 'ellip' needs rp no larger than rs: passband ripple rp = {rp:g} dB is above "
                       f"the stopband attenuation rs = {rs:g} dB", hint="e.g. rp: 0.5, rs: 60")
    if ck1_sq == 1 and order % 2 and btype in ("highpass", "bandstop"):
        # ellipk(1) is infinite: every pole lies on the imaginary axis and the odd order's real pole
        # at 0, which these transformations send to infinity (zpk2sos then fails)
        return Refusal(f"kind 'ellip' with rp = rs = {rs:g} dB and an odd order puts a pole at 0 Hz, which a "
                       f"{btype} cannot take", hint="make rs larger than rp, or the order even")
    try:
        _arc_jac_sc1(1.0 / math.sqrt(eps_sq), ck1_sq)
    except ValueError as exc:
        return Refusal(f"{exc or 'the elliptic prototype cannot be computed'} (SciPy's ellipap with "
                       f"rp = {rp:g} dB, rs = {rs:g} dB)", hint="make rs larger than rp by a few dB")
    return None


def _arc_jac_sn(w: complex, m: float) -> complex | float:
    """scipy.signal._filter_design._arc_jac_sn (inverse Jacobian elliptic sn by Landen
    transformations), kept operation for operation so that it fails where SciPy's fails."""

    def _complement(kx):
        return ((1 - kx) * (1 + kx)) ** 0.5

    k = m ** 0.5
    if k > 1:
        return np.nan
    elif k == 1:
        return np.arctanh(w)
    ks = [k]
    niter = 0
    while ks[-1] != 0:
        k_ = ks[-1]
        k_p = _complement(k_)
        ks.append((1 - k_p) / (1 + k_p))
        niter += 1
        if niter > _ARC_JAC_SN_MAXITER:
            raise ValueError("Landen transformation not converging")
    K = np.prod(1 + np.array(ks[1:])) * np.pi / 2
    wns = [w]
    for kn, knext in zip(ks[:-1], ks[1:]):
        wn = wns[-1]
        wns.append(2 * wn / ((1 + knext) * (1 + _complement(kn * wn))))
    u = 2 / np.pi * np.arcsin(wns[-1])
    return K * u


def _arc_jac_sc1(w: float, m: float) -> float:
    """scipy.signal._filter_design._arc_jac_sc1: real inverse Jacobian sc with complementary modulus."""
    zcomplex = _arc_jac_sn(1j * w, m)
    if abs(zcomplex.real) > 1e-14:
        raise ValueError
    return zcomplex.imag
