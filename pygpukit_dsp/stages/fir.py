"""fir: a streaming FIR filter.

Three implementations, picked by a rough cost model (``plan_fir``) from the filter length,
channel count and block size: a per-tap loop (the shortest filters), direct form as a
block-Toeplitz matrix product through BLAS (short and medium filters; the W1 case of 256
taps x 64 channels x 256-sample blocks), and uniformly partitioned overlap-save with scipy.fft
(long filters, reverbs). All three give ``scipy.signal.lfilter(taps, 1, x)`` over the stream.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..errors import ConfigError
from ..limits import MAX_TAPS, limit
from ..signal import SignalSpec
from ._design_rules import firwin_refusal
from ._common import (check_file_exists, exactly_one, load_array_file, output_dtype, require_domain,
                      require_multiple)
from .base import NumberArray, Stage, StageParams, register_stage

if TYPE_CHECKING:
    from ._polyphase import DecimatingFir

WindowSpec = str | list[str | float]


def window_arg(window: WindowSpec) -> str | tuple:
    """YAML window spec -> scipy.signal.get_window argument: 'hann' or ('kaiser', 8.0)."""
    return window if isinstance(window, str) else tuple(window)


# windows scipy.signal.get_window computes by name alone, finite at every length (tests/stages/
# test_fir.py checks each against SciPy): checking one needs no SciPy (gk-stream validate)
PLAIN_WINDOWS = frozenset({"hann", "hamming", "blackman", "blackmanharris", "bartlett", "barthann", "bohman",
                           "boxcar", "cosine", "flattop", "nuttall", "parzen", "triang", "tukey"})
# ['kaiser', beta]: I0(beta*sqrt(1 - x**2)) / I0(beta) is finite at every length while I0(beta) is
# (it overflows a little above |beta| = 709); a larger beta is checked by SciPy
_KAISER_BETA_WITHOUT_SCIPY = 700.0


def window_needs_scipy(window: WindowSpec) -> bool:
    """False for the windows SciPy computes, finite, at every length: checking them needs no SciPy."""
    if isinstance(window, str):
        return window not in PLAIN_WINDOWS
    if len(window) == 2 and window[0] == "kaiser" and type(window[1]) in (int, float):
        return not abs(window[1]) <= _KAISER_BETA_WITHOUT_SCIPY  # NaN: checked by SciPy
    return True


def check_window(window: WindowSpec, length: int = 16) -> WindowSpec:
    examples = "examples: 'hann', 'hamming', 'blackman', ['kaiser', 8.0], ['tukey', 0.25]"
    if isinstance(window, list) and not window:
        raise ValueError(f"window is an empty list; {examples}")
    if not window_needs_scipy(window):
        return window
    import scipy.signal as ssig  # SciPy loads when a window needs it checked, not with the catalog

    try:
        w = ssig.get_window(window_arg(window), length)
    except (ValueError, TypeError, IndexError, OverflowError) as exc:  # scipy raises all of these
        raise ValueError(f"unknown or incomplete window {window!r} ({exc}); {examples}") from None
    if not np.all(np.isfinite(w)):  # e.g. ['kaiser', 1e300]: the parameter is out of range
        raise ValueError(f"window {window!r} gives NaN or infinite values: its parameter is out of range")
    return window


class FirDesign(StageParams):
    numtaps: int = Field(..., ge=1, description=f"Filter length (number of taps), at most {MAX_TAPS}.")
    cutoff_hz: float | list[float] = Field(
        ..., description="Cutoff frequency in Hz, or a list of increasing band edges in Hz "
        "(scipy.signal.firwin's cutoff, with fs = the stream's sample rate).")
    window: WindowSpec = Field("hamming", description="Window of the windowed-sinc design: a name "
                               "('hamming', 'hann', 'blackman'...) or [name, parameter] such as "
                               "['kaiser', 8.0].")
    pass_zero: bool | Literal["lowpass", "highpass", "bandpass", "bandstop"] = Field(
        True, description="True (or 'lowpass'/'bandstop'): the band from 0 Hz to the first edge "
        "passes; False (or 'highpass'/'bandpass'): it is stopped. As in scipy.signal.firwin.")

    @field_validator("cutoff_hz")
    @classmethod
    def _cutoffs(cls, v: float | list[float]) -> float | list[float]:
        edges = [v] if isinstance(v, (int, float)) else list(v)
        if not edges:
            raise ValueError("cutoff_hz needs at least one frequency")
        if any(not math.isfinite(e) or e <= 0 for e in edges):
            raise ValueError(f"cutoff frequencies must be > 0 Hz, got {v}")
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise ValueError(f"band edges must be strictly increasing, got {v}")
        return v

    @field_validator("window")
    @classmethod
    def _window(cls, v: WindowSpec) -> WindowSpec:
        return check_window(v)

    @field_validator("numtaps")
    @classmethod
    def _numtaps(cls, v: int) -> int:
        return limit(v, MAX_TAPS, "numtaps", "taps")

    def check(self, sample_rate: float) -> None:
        """Raise the ConfigError that designing at ``sample_rate`` would raise for what firwin
        refuses (the cutoffs, pass_zero, an even numtaps, the window at numtaps), without SciPy
        unless the window needs it; taps that come out NaN are found by :meth:`taps` alone."""
        refusal = firwin_refusal(self.numtaps, self.cutoff_hz, self.pass_zero, sample_rate)
        if refusal is None and window_needs_scipy(self.window):
            import scipy.signal as ssig  # loaded already: the window's own check needed it

            try:
                ssig.get_window(window_arg(self.window), self.numtaps, fftbins=False)  # as firwin calls it
            except (ValueError, TypeError, IndexError, OverflowError) as exc:
                raise ConfigError(f"design: window {self.window!r} with numtaps {self.numtaps}: {exc}",
                                  path=("design",)) from None
        if refusal is not None:
            raise self._design_error(refusal.message, sample_rate)

    def _design_error(self, message: str, sample_rate: float) -> ConfigError:
        hint, path = None, ("design",)
        edges = [self.cutoff_hz] if isinstance(self.cutoff_hz, (int, float)) else self.cutoff_hz
        if max(edges) >= sample_rate / 2:
            hint = f"cutoff frequencies must be below sample_rate/2 = {sample_rate / 2:g} Hz"
            path = ("design", "cutoff_hz")
        elif "even number" in message or "Nyquist" in message:
            hint = f"use an odd numtaps, e.g. {self.numtaps + 1}"
            path = ("design", "numtaps")
        return ConfigError(f"design: {message}", hint=hint, path=path)

    def taps(self, sample_rate: float) -> np.ndarray:
        """The taps firwin designs at ``sample_rate``; a ConfigError for what it refuses or for NaN taps."""
        self.check(sample_rate)
        import scipy.signal as ssig  # SciPy loads when a filter is designed, not with the catalog

        try:
            with np.errstate(invalid="ignore", divide="ignore"):
                h = ssig.firwin(self.numtaps, self.cutoff_hz, window=window_arg(self.window),
                                pass_zero=self.pass_zero, fs=sample_rate)
        except ValueError as exc:  # a rule of a SciPy newer than the one check() follows
            raise self._design_error(str(exc), sample_rate) from None
        if not np.all(np.isfinite(h)):  # firwin scales by the gain at a frequency where it is 0
            raise ConfigError(f"design: numtaps {self.numtaps} with cutoff_hz {self.cutoff_hz} and window "
                              f"{self.window!r} gives NaN taps (no gain where firwin normalises)",
                              hint="use more taps or other band edges", path=("design",))
        return h


class FirTapsParams(StageParams):
    """The filter of fir and ddc: exactly one of taps, taps_file, design."""

    taps: NumberArray | None = Field(
        None, description="Filter coefficients, real or complex: shape (L,) for every channel or "
        "(channels, L), one row per channel. y[n] = sum_k taps[k] * x[n-k].")
    taps_file: str | None = Field(
        None, description="A file with the taps: .npy, or text readable by numpy.loadtxt (one "
        "row per channel). Relative paths are resolved against the YAML file's folder.")
    design: FirDesign | None = Field(
        None, description="Design the taps with scipy.signal.firwin at the stream's sample rate.")
    @field_validator("taps")
    @classmethod
    def _taps_shape(cls, v: np.ndarray | None) -> np.ndarray | None:
        if v is not None:
            _check_taps_shape(v)
        return v

    @field_validator("taps_file")
    @classmethod
    def _file_exists(cls, v: str | None, info: ValidationInfo) -> str | None:
        return check_file_exists(v, info)

    @model_validator(mode="after")
    def _one_of(self) -> "FirTapsParams":
        exactly_one(self, ("taps", "taps_file", "design"))
        return self


class FirParams(FirTapsParams):
    method: Literal["auto", "direct", "matmul", "overlap_save"] = Field(
        "auto", description="Implementation: 'direct' (multiply-adds per tap), 'matmul' (direct "
        "form as a block-Toeplitz matrix product), 'overlap_save' (partitioned FFT convolution); "
        "'auto' picks the cheapest for the filter length, channels and block size. A decimating "
        "filter (decimate > 1) has one form, polyphase: it takes 'auto' only.")
    decimate: int = Field(
        1, ge=1, description="Keep every D-th output: y = lfilter(taps, 1, x)[..., ::D] (outputs "
        "0, D, 2D...), computing only those (polyphase). The output rate is the input's / D; "
        "block_size must be a multiple of D.")

    @model_validator(mode="after")
    def _method_of_a_decimator(self) -> "FirParams":
        if self.decimate > 1 and self.method != "auto":
            raise ValueError(f"method '{self.method}' is for decimate: 1; a decimating filter "
                             "(decimate > 1) runs its polyphase form: leave method out (auto)")
        return self


def _check_taps_shape(t: np.ndarray) -> None:
    if t.ndim not in (1, 2) or t.size == 0:
        raise ValueError(f"taps must have shape (L,) or (channels, L) with L >= 1, got shape {t.shape}")
    limit(t.shape[-1], MAX_TAPS, "the filter length", "taps")


# ---------------------------------------------------------------------------
# Implementations. All three keep the input history, so that streaming in blocks gives
# scipy.signal.lfilter(taps, 1, x) over the whole signal (up to float32 rounding).

# Rough costs in ns, fitted on a 2-core AVX-512 Xeon VM (numpy/scipy.fft/OpenBLAS, float32);
# used only to pick a method, so only their ratios matter.
_OP_OVERHEAD_NS = 2500.0
_DIRECT_NS_PER_MAC = 0.6
_FFT_NS_PER_NLOGN = 0.55  # forward + inverse real transform, per n*log2(n)
_CFFT_NS_PER_NLOGN = 0.8
_CMAC_NS = 1.1
_CHUNK_OVERHEAD_NS = 8000.0
_GEMM_NS_PER_MAC = 0.01  # large sub-blocks; narrow ones (small P, few rows) run below BLAS peak
_GEMM_OVERHEAD_NS = 10000.0
_FFT_OVERHEAD_NS = 22000.0
_COPY_NS = 0.3
_MATMUL_MAX_ELEMENTS = 1 << 22  # cap on the Toeplitz matrices (and 4x that on copied windows)


class DirectFir:
    """Direct form: y = sum_k h[k] * x[n-k] as L vectorised multiply-adds over the block."""

    method = "direct"

    def __init__(self, taps: np.ndarray, channels: int, block_size: int, dtype: np.dtype):
        self.dtype = np.dtype(dtype)
        taps = np.asarray(taps)
        self.L = taps.shape[-1]
        # per tap k a coefficient broadcastable against (channels, n)
        coeffs = taps.astype(self.dtype)
        self.coeffs = [coeffs[k] if coeffs.ndim == 1 else coeffs[:, k:k + 1].copy() for k in range(self.L)]
        self.block_size = block_size
        self.ext = np.zeros((channels, self.L - 1 + block_size), self.dtype)
        self.tmp = np.empty((channels, block_size), self.dtype)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        n = x.shape[-1]
        h = self.L - 1
        ext = self.ext
        ext[:, h:h + n] = x
        y = np.multiply(ext[:, h:h + n], self.coeffs[0], dtype=self.dtype)
        tmp = self.tmp[:, :n]
        for k in range(1, self.L):
            np.multiply(ext[:, h - k:h - k + n], self.coeffs[k], out=tmp)
            y += tmp
        if h:
            ext[:, :h] = ext[:, n:n + h]
        return y

    def reset(self) -> None:
        self.ext[...] = 0


class MatmulFir:
    """Direct form as a block-Toeplitz matrix product (BLAS GEMM).

    A block is cut into ``q`` sub-blocks of ``P`` outputs. Sub-block ``j`` of channel ``c``
    is ``W @ T`` where ``W`` is the window of ``P + L - 1`` input samples ending at the
    sub-block's last sample and ``T[i, p] = h[L - 1 + p - i]`` (zero outside the filter):
    the same ``T`` for every sub-block. With taps shared by all channels the windows are
    strided views of the history buffer (no copy) and the outputs are written in place.
    Rows go to GEMM in stacks of ``r`` channels (NumPy calls GEMM once per stack entry) so
    that each call is small enough for OpenBLAS to run on the calling thread: a GEMM split
    across threads waits a whole scheduler tick when another process holds the other core,
    which shows up as millisecond outliers in a real-time loop.
    """

    method = "matmul"

    def __init__(self, taps: np.ndarray, channels: int, block_size: int, dtype: np.dtype, sub_block: int):
        self.dtype = np.dtype(dtype)
        taps = np.asarray(taps)
        L = self.L = taps.shape[-1]
        P = self.P = sub_block
        self.channels, self.block_size, self.q = channels, block_size, block_size // sub_block
        self.width = P + L - 1
        i = np.arange(self.width)[:, None]
        p = np.arange(P)[None, :]
        k = L - 1 + p - i
        valid = (k >= 0) & (k < L)
        T = np.where(valid, taps[..., np.where(valid, k, 0)], 0).astype(self.dtype)
        self.T = np.ascontiguousarray(T)  # (width, P), or (C, width, P) for per-channel taps
        self.per_channel = taps.ndim == 2
        self.ext = np.zeros((channels, L - 1 + block_size), self.dtype)
        if self.per_channel:
            self.windows = np.empty((channels, self.q, self.width), self.dtype)
        else:
            self.stack_rows = gemm_stack_rows(channels, self.width, P)
            item, row = self.dtype.itemsize, self.ext.shape[1]
            r = self.stack_rows
            # windows[j, g, i, :] = ext[g*r + i, j*P : j*P + width]
            self.windows = np.lib.stride_tricks.as_strided(
                self.ext, shape=(self.q, channels // r, r, self.width),
                strides=(P * item, r * row * item, row * item, item), writeable=False)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        n = x.shape[-1]
        h, B, ext, C, q, P = self.L - 1, self.block_size, self.ext, self.channels, self.q, self.P
        ext[:, h:h + n] = x
        if n < B:  # final partial block: zeros after it do not change the outputs we keep
            ext[:, h + n:] = 0
        y = np.empty((C, B), self.dtype)
        if self.per_channel:
            view = np.lib.stride_tricks.sliding_window_view(ext, self.width, axis=-1)[:, ::P]
            np.copyto(self.windows, view)
            np.matmul(self.windows, self.T, out=y.reshape(C, q, P))
        else:
            r = self.stack_rows
            item = self.dtype.itemsize
            out = np.lib.stride_tricks.as_strided(
                y, shape=(q, C // r, r, P), strides=(P * item, r * B * item, B * item, item))
            np.matmul(self.windows, self.T, out=out)
        if h:
            ext[:, :h] = ext[:, B:B + h]
        return y[:, :n]

    def reset(self) -> None:
        self.ext[...] = 0


# OpenBLAS runs a GEMM on the calling thread while m*n*k < 2 * 4 * 65536 (its SMP threshold
# gives one thread per 4*65536 multiply-adds).
_GEMM_SINGLE_THREAD_MNK = 2 * 4 * 65536


def gemm_stack_rows(rows: int, width: int, cols: int) -> int:
    """The largest divisor r of ``rows`` with r*width*cols below the single-thread GEMM size."""
    best = 1
    for r in _divisors(rows):
        if r * width * cols < _GEMM_SINGLE_THREAD_MNK:
            best = r
    return best


class OverlapSaveFir:
    """(Uniformly partitioned) overlap-save convolution with scipy.fft.

    Each block of ``block_size`` samples is processed in ``q = block_size / step`` chunks of
    ``step`` new samples. With one partition (``K == 1``) the whole filter is applied with an
    FFT of ``nfft >= step + L - 1``; with ``K > 1`` partitions of ``step`` taps, spectra of
    past chunks are kept in a frequency-domain delay line, so that long filters (reverbs)
    cost one small FFT pair per chunk plus K complex multiply-adds per bin.
    """

    method = "overlap_save"

    def __init__(self, taps: np.ndarray, channels: int, block_size: int, dtype: np.dtype,
                 step: int, partitions: int):
        import scipy.fft as sfft  # SciPy loads when a processor is made, not with the catalog

        self._sfft = sfft
        self.dtype = np.dtype(dtype)
        self.real = self.dtype.kind == "f"
        taps = np.asarray(taps)
        if taps.ndim == 1:
            taps = taps[None, :]
        L = taps.shape[-1]
        self.channels, self.block_size, self.step = channels, block_size, step
        self.K = partitions
        part = L if partitions == 1 else step  # taps per partition
        self.nfft = sfft.next_fast_len(step + part - 1, real=self.real)
        self.hist = self.nfft - step  # samples of history kept before the new chunk
        self.q = block_size // step
        padded = np.zeros((taps.shape[0], self.K * part), taps.dtype)
        padded[:, :L] = taps
        parts = padded.reshape(taps.shape[0], self.K, part)
        fwd = sfft.rfft if self.real else sfft.fft
        spectra = fwd(parts, self.nfft, axis=-1).astype(np.complex64)  # (Ct, K, bins)
        self.bins = spectra.shape[-1]
        self.ctype = np.dtype(np.complex64)
        if self.K == 1:
            h = spectra[:, 0, :]  # (Ct, bins)
            self.H = h[0] if h.shape[0] == 1 else h
            self.Hq = self.H if self.H.ndim == 1 else self.H[:, None, :]
        else:
            self.Hrev = np.ascontiguousarray(spectra[:, ::-1, :])  # newest partition last
            if self.Hrev.shape[0] == 1:
                self.Hrev = self.Hrev[0]
            self.ring = np.zeros((channels, 2 * self.K, self.bins), self.ctype)
            self.acc = np.empty((channels, self.K, self.bins), self.ctype)
            self.cursor = 0
        self.ext = np.zeros((channels, self.hist + block_size), self.dtype)

    def _forward(self, a: np.ndarray) -> np.ndarray:
        return self._sfft.rfft(a, axis=-1) if self.real else self._sfft.fft(a, axis=-1)

    def _inverse(self, a: np.ndarray) -> np.ndarray:
        if self.real:
            return self._sfft.irfft(a, self.nfft, axis=-1, overwrite_x=True)
        return self._sfft.ifft(a, axis=-1, overwrite_x=True)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        n = x.shape[-1]
        ext, hist, step, nfft, B = self.ext, self.hist, self.step, self.nfft, self.block_size
        ext[:, hist:hist + n] = x
        if n < B:  # the final partial block: zeros after it do not change the outputs we keep
            ext[:, hist + n:] = 0
        if self.q == 1:
            X = self._forward(ext)  # (C, bins)
            if self.K == 1:
                X *= self.H
                y = self._inverse(X)[:, nfft - step:]
            else:
                y = self._inverse(self._fdl(X))[:, nfft - step:]
        else:
            windows = np.lib.stride_tricks.sliding_window_view(ext, nfft, axis=-1)[:, ::step]
            X = self._forward(windows)  # (C, q, bins)
            if self.K == 1:
                X *= self.Hq
            else:
                X = np.stack([self._fdl(X[:, j]) for j in range(self.q)], axis=1)
            y = self._inverse(X)[:, :, nfft - step:].reshape(self.channels, B)
        ext[:, :hist] = ext[:, B:]
        # y is freshly allocated by the inverse FFT, so a view of it is safe to hand out; copying
        # it contiguous would cost more than it saves downstream (matmul takes row strides).
        return y[:, :n]

    def _fdl(self, X: np.ndarray) -> np.ndarray:
        """Push one chunk spectrum into the delay line; return sum_k X_{j-k} * H_k."""
        K, w = self.K, self.cursor
        self.ring[:, w] = X
        self.ring[:, w + K] = X
        w = self.cursor = (w + 1) % K
        np.multiply(self.ring[:, w:w + K], self.Hrev, out=self.acc)
        return self.acc.sum(axis=1)

    def reset(self) -> None:
        self.ext[...] = 0
        if self.K > 1:
            self.ring[...] = 0
            self.cursor = 0


def plan_fir(L: int, channels: int, block_size: int, is_complex: bool,
             method: str = "auto", per_channel: bool = False) -> tuple[str, int, int, float]:
    """Pick (method, sub-block or step, partitions, estimated ns per block) by a rough cost model."""
    import scipy.fft as sfft  # SciPy loads when a filter is planned, not with the catalog

    cx = 4 if is_complex else 1
    direct = ("direct", block_size, 1,
              L * (_OP_OVERHEAD_NS + _DIRECT_NS_PER_MAC * channels * block_size * cx))
    matmul = []
    ols = []
    fft_ns = _CFFT_NS_PER_NLOGN if is_complex else _FFT_NS_PER_NLOGN
    for step in _divisors(block_size):
        q = block_size // step
        width = step + L - 1
        toeplitz = (channels if per_channel else 1) * width * step
        if toeplitz <= _MATMUL_MAX_ELEMENTS and (not per_channel or channels * q * width <= 4 * _MATMUL_MAX_ELEMENTS):
            r = q if per_channel else gemm_stack_rows(channels, width, step)
            ns = (_GEMM_OVERHEAD_NS
                  + channels * block_size * width * _GEMM_NS_PER_MAC * (1 + 32 / step) * (1 + 2 / r) * cx
                  + (channels * q * width * _COPY_NS if per_channel else 0.0))
            matmul.append(("matmul", step, 1, ns))
        for K in {1, math.ceil(L / step)}:
            part = L if K == 1 else step
            nfft = sfft.next_fast_len(step + part - 1, real=not is_complex)
            bins = nfft if is_complex else nfft // 2 + 1
            ns = (_FFT_OVERHEAD_NS + q * channels * fft_ns * nfft * math.log2(nfft)
                  + q * channels * K * bins * _CMAC_NS
                  + (q * _CHUNK_OVERHEAD_NS if K > 1 else 0.0)
                  + (q * channels * nfft * _COPY_NS if q > 1 else 0.0))
            ols.append(("overlap_save", step, K, ns))
    by_method = {"direct": [direct], "matmul": matmul, "overlap_save": ols}
    pool = by_method[method] if method != "auto" else [direct, *matmul, *ols]
    if not pool:
        raise ConfigError(f"method '{method}' cannot run this filter ({L} taps, {channels} channels, "
                          f"block_size {block_size}) within its memory cap",
                          hint="use method: auto or overlap_save", path=("method",))
    return min(pool, key=lambda c: c[3])


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


# ---------------------------------------------------------------------------


@register_stage
class Fir(Stage):
    """Streaming FIR filter: the concatenated output equals ``scipy.signal.lfilter(taps, 1, x)``.

    Taps of shape ``(L,)`` filter every channel; ``(channels, L)`` gives each channel its own
    filter. Real or complex taps and input; the output is complex64 if either is complex,
    else float32. Time-domain input only, any block size; the output block has the input's
    length (no latency beyond the filter's own delay). With ``decimate: D`` the output is
    ``lfilter(taps, 1, x)[..., ::D]`` (outputs 0, D, 2D... of the stream), computed polyphase
    (only the kept outputs), at rate / D in blocks of block_size / D; block_size must be a
    multiple of D, and a final partial block of n samples gives ceil(n / D) outputs. The implementation (per-tap loop,
    block-Toeplitz matmul, or partitioned overlap-save with scipy.fft) is chosen by estimated
    cost; ``method`` forces one. Output blocks may be views of freshly allocated arrays; the
    processor never writes to a block it has returned.
    """

    type = "fir"
    summary = "FIR filter (taps, taps file or firwin design); direct or overlap-save FFT"
    Params = FirParams

    def __init__(self, params: FirParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
        self._taps: np.ndarray | None = None
        self._designed: dict[float, np.ndarray] = {}  # designed taps by sample rate
        if self.params.taps is not None:
            self._taps = self.params.taps
        elif self.params.taps_file is not None:
            t = load_array_file(self.resolve_path(self.params.taps_file), param="taps_file")
            try:
                _check_taps_shape(t)
            except ValueError as exc:
                raise ConfigError(f"taps_file: {exc}", path=("taps_file",)) from None
            self._taps = t

    def taps_for(self, spec: SignalSpec) -> np.ndarray:
        """The filter taps used at ``spec.sample_rate``: a design is computed here, on first use
        (by the CPU processor, the CUDA lowering...), not while the specs are propagated."""
        if self._taps is not None:
            return self._taps
        taps = self._designed.get(spec.sample_rate)
        if taps is None:
            try:
                taps = self.params.design.taps(spec.sample_rate)
            except ConfigError as exc:  # found by the design alone (NaN taps): when the stream opens
                raise ConfigError(f"stage '{self.name}' ({self.type}): {exc.message}",
                                  where=exc.where or self.where, hint=exc.hint, path=exc.path) from None
            self._designed[spec.sample_rate] = taps
        return taps

    def state_bytes(self, spec: SignalSpec) -> int:
        # input history + work arrays of the chosen method (overlap-save: spectra of twice that)
        L = self._taps.shape[-1] if self._taps is not None else self.params.design.numtaps
        return 4 * spec.channels * (L + spec.block_size) * 8 + 16 * L

    @property
    def decimate(self) -> int:
        return self.params.decimate

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where)
        D = self.params.decimate
        if D > 1:
            require_multiple(spec, D, "decimate", where=self.where)
        rate = {} if D == 1 else {"sample_rate": spec.sample_rate / D, "block_size": spec.block_size // D}
        if self._taps is None:  # a design: real taps of shape (numtaps,), checked without designing
            self.params.design.check(spec.sample_rate)
            return spec.with_(dtype=output_dtype(spec.is_complex), **rate)
        taps = self._taps
        if taps.ndim == 2 and taps.shape[0] != spec.channels:
            raise ConfigError(
                f"taps have {taps.shape[0]} rows (one per channel, shape {taps.shape}) but the input "
                f"has {spec.channels} channels", where=self.where,
                hint=f"give {spec.channels} rows, or a 1-D taps list applied to every channel")
        return spec.with_(dtype=output_dtype(np.iscomplexobj(taps), spec.is_complex), **rate)

    def cpu(self, spec: SignalSpec) -> "DirectFir | MatmulFir | OverlapSaveFir | DecimatingFir":
        out = self.output_spec(spec)
        taps = self.taps_for(spec)
        if self.params.decimate > 1:
            from ._polyphase import DecimatingFir  # loaded when a decimating filter runs
            return DecimatingFir(taps, self.params.decimate, spec.channels, spec.block_size, out.np_dtype)
        method, step, K, _ = plan_fir(taps.shape[-1], spec.channels, spec.block_size,
                                      out.is_complex, self.params.method, per_channel=taps.ndim == 2)
        if method == "direct":
            return DirectFir(taps, spec.channels, spec.block_size, out.np_dtype)
        if method == "matmul":
            return MatmulFir(taps, spec.channels, spec.block_size, out.np_dtype, step)
        return OverlapSaveFir(taps, spec.channels, spec.block_size, out.np_dtype, step, K)
