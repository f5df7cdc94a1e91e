"""resample: streaming rational resampling by up/down with a polyphase FIR (resample_poly's filter)."""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, field_validator, model_validator

from ..limits import MAX_RESAMPLE_FACTOR, MAX_TAPS, limit
from ..signal import SignalSpec
from ._common import require_domain, require_multiple
from .base import RealArray, Stage, StageParams, register_stage


class ResampleParams(StageParams):
    up: int = Field(..., ge=1, description="Upsampling factor (reduced with down by their gcd).")
    down: int = Field(..., ge=1, description="Downsampling factor. Output rate = rate * up / down.")
    taps: int | RealArray | None = Field(
        None, description="Anti-aliasing lowpass. Default: scipy.signal.resample_poly's own design, "
        "firwin(20*max(up,down)+1, 1/max(up,down), window=('kaiser', 5.0)). An integer: that many "
        "taps of the same design. A list: the filter coefficients, as resample_poly(window=list) "
        "takes them. The filter is multiplied by up (the interpolation gain), as resample_poly does.")

    @field_validator("taps")
    @classmethod
    def _taps(cls, v: int | np.ndarray | None) -> int | np.ndarray | None:
        if isinstance(v, int) and v < 1:
            raise ValueError(f"taps must be >= 1 when given as a length, got {v}")
        if isinstance(v, np.ndarray) and (v.ndim != 1 or v.size == 0):
            raise ValueError(f"taps must be a 1-D list of coefficients, got shape {v.shape}")
        if v is not None:
            limit(v if isinstance(v, int) else v.size, MAX_TAPS, "the filter length", "taps")
        return v

    @model_validator(mode="after")
    def _factors(self) -> "ResampleParams":
        # the default filter has 20 * max(up, down) + 1 taps: bound the reduced ratio
        up, down = self.ratio
        if max(up, down) > MAX_RESAMPLE_FACTOR:
            raise ValueError(f"up/down = {self.up}/{self.down} (reduced: {up}/{down}) is above the limit of "
                             f"{MAX_RESAMPLE_FACTOR} for up and down; resample in two stages")
        return self

    @property
    def ratio(self) -> tuple[int, int]:
        """(up, down) reduced by their gcd."""
        g = math.gcd(self.up, self.down)
        return self.up // g, self.down // g


def resample_filter(up: int, down: int, taps: int | np.ndarray | None) -> tuple[np.ndarray, int]:
    """(h, half_len) exactly as scipy.signal.resample_poly builds them for float64 input."""
    max_rate = max(up, down)
    if isinstance(taps, np.ndarray):
        return taps.astype(np.float64) * up, (taps.size - 1) // 2
    numtaps = 2 * 10 * max_rate + 1 if taps is None else int(taps)
    import scipy.signal as ssig  # SciPy loads when a filter is designed, not with the catalog

    h = ssig.firwin(numtaps, 1.0 / max_rate, window=("kaiser", 5.0)) * up
    return h, (numtaps - 1) // 2


_DIRECT_CHUNK = 1 << 22  # elements of input windows gathered at once by the direct path


class ResampleProcessor:
    """Causal polyphase resampler: scipy.signal.upfirdn over (history + block).

    The block start is always a multiple of ``down`` input samples (block_size is), and the
    history kept is a multiple of ``down`` too, so every block maps to whole output samples.

    upfirdn also computes the outputs of the history, which are thrown away: with a history
    longer than the block (a long filter, small blocks) that is most of the work, so then only
    the block's outputs are computed (``_direct``): output ``j`` is ``sum_l h[r + l*up] * x[q - l]``
    with ``j*down = q*up + r``, the input window ending at ``q`` against the reversed phase-``r``
    filter; ``(q, r)`` are the same for every block. Both give the same numbers.
    """

    def __init__(self, h_padded: np.ndarray, up: int, down: int, channels: int, block_size: int,
                 dtype: np.dtype):
        import scipy.signal as ssig  # SciPy loads when a processor is made, not with the catalog

        self._upfirdn = ssig.upfirdn
        self.up, self.down = up, down
        self.h = h_padded
        self.dtype = np.dtype(dtype)
        taps_per_phase = self.P = h_padded.size // up
        self.hist = -(-(taps_per_phase - 1) // down) * down
        self.skip = self.hist * up // down  # outputs of upfirdn that belong to the history
        self.direct = self.hist > block_size
        if self.direct:
            # Hrev[r, i] = h[r + (P-1-i)*up]: phase r's filter, reversed to meet a window in order
            self.Hrev = np.ascontiguousarray(h_padded.reshape(taps_per_phase, up).T[:, ::-1])
            jdown = np.arange(block_size * up // down) * down
            self.q, self.r = jdown // up, jdown % up
            self.hist = taps_per_phase - 1
        self.ext = np.zeros((channels, self.hist + block_size), dtype)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        m = x.shape[-1]
        count = -(-m * self.up // self.down)
        ext, hist = self.ext, self.hist
        ext[:, hist:hist + m] = x
        if self.direct:
            y = self._direct(ext[:, :hist + m], count)
        else:
            y = self._upfirdn(self.h, ext[:, :hist + m], self.up, self.down, axis=-1)[:, self.skip:self.skip + count]
        if hist:
            ext[:, :hist] = ext[:, m:m + hist]
        return y.astype(self.dtype)

    def _direct(self, ext: np.ndarray, count: int) -> np.ndarray:
        P, channels = self.P, ext.shape[0]
        y = np.empty((channels, count), np.complex128 if self.dtype.kind == "c" else np.float64)
        if count == 0:  # an empty final block
            return y
        windows = np.lib.stride_tricks.sliding_window_view(ext, P, axis=-1)  # window q ends at input q
        step = max(1, _DIRECT_CHUNK // (channels * P))  # bounds the gathered windows
        for a in range(0, count, step):
            b = min(count, a + step)
            y[:, a:b] = np.einsum("cjp,jp->cj", windows[:, self.q[a:b]], self.Hrev[self.r[a:b]])
        return y

    def reset(self) -> None:
        self.ext[...] = 0


class IdentityProcessor:
    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        return x.copy()

    def reset(self) -> None:
        """up == down: a plain copy, no state."""


@register_stage
class Resample(Stage):
    """Streaming rational resampler (rate * up / down), causal counterpart of resample_poly.

    ``up``/``down`` are reduced by their gcd; ``block_size * up / down`` must be whole, i.e.
    block_size must be a multiple of the reduced ``down``. Over a stream of ``N`` input
    samples it emits ``ceil(N*up/down)`` outputs (a final partial block gives
    ``ceil(m*up/down)``). The filter ``h`` is resample_poly's (see ``taps``), front-padded
    with ``n_pre_pad = down - half_len % down`` zeros as resample_poly does, where
    ``half_len = (len(h) - 1) // 2``. resample_poly is zero-phase; this stage is causal and
    lags it by exactly ``D = (half_len + n_pre_pad) // down`` output samples
    (:attr:`delay_out_samples`)::

        ours[:, D:] == scipy.signal.resample_poly(x, up, down, axis=-1, window=h_or_default)[:, :len - D]

    When the reduced ratio is 1/1 the stage copies its input (as resample_poly does), D = 0.
    """

    type = "resample"
    summary = "Rational resampling by up/down (streaming polyphase, resample_poly's filter)"
    Params = ResampleParams

    @property
    def ratio(self) -> tuple[int, int]:
        return self.params.ratio

    def filter(self) -> tuple[np.ndarray, int]:
        """(h, half_len): the filter before padding, as resample_poly builds it."""
        up, down = self.ratio
        return resample_filter(up, down, self.params.taps)

    @property
    def delay_out_samples(self) -> int:
        """D: this stage's output lags scipy.signal.resample_poly's by D output samples."""
        up, down = self.ratio
        if up == down:
            return 0
        taps = self.params.taps  # the filter's length alone: no design
        length = 20 * max(up, down) + 1 if taps is None else taps if isinstance(taps, int) else taps.size
        half_len = (length - 1) // 2  # as resample_filter gives it
        n_pre_pad = down - half_len % down
        return (half_len + n_pre_pad) // down

    def padded_filter(self) -> np.ndarray:
        up, down = self.ratio
        h, half_len = self.filter()
        n_pre_pad = down - half_len % down
        total = n_pre_pad + h.size
        hp = np.zeros(-(-total // up) * up)  # whole phases (zeros at the end change nothing)
        hp[n_pre_pad:total] = h
        return hp

    def state_bytes(self, spec: SignalSpec) -> int:
        up, down = self.ratio
        if up == down:
            return 0
        taps = self.params.taps
        length = 20 * max(up, down) + 1 if taps is None else taps if isinstance(taps, int) else taps.size
        hist = length // up + down
        # the filter, the input history, and upfirdn's float64/complex128 output over both
        return 8 * length + spec.channels * (hist + spec.block_size) * (spec.np_dtype.itemsize + 16 * up // down + 16)

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where)
        up, down = self.ratio
        reduced = f" (up/down = {self.params.up}/{self.params.down} reduced to {up}/{down})" \
            if (up, down) != (self.params.up, self.params.down) else ""
        require_multiple(spec, down, "down", where=self.where, note=reduced)
        return spec.with_(sample_rate=spec.sample_rate * up / down, block_size=spec.block_size * up // down)

    def cpu(self, spec: SignalSpec) -> ResampleProcessor | IdentityProcessor:
        self.output_spec(spec)
        up, down = self.ratio
        if up == down:
            return IdentityProcessor()
        return ResampleProcessor(self.padded_filter(), up, down, spec.channels, spec.block_size,
                                 spec.np_dtype)
