"""channelizer: critically sampled polyphase analysis filterbank (M subchannels, decimation M)."""

from __future__ import annotations

import numpy as np
from pydantic import Field, field_validator, model_validator

from ..limits import MAX_CHANNELS, MAX_TAPS, limit
from ..signal import SignalSpec
from ._common import require_domain, require_multiple
from .base import RealArray, Stage, StageParams, register_stage


class ChannelizerParams(StageParams):
    channels: int = Field(..., ge=2, description=f"Number of subchannels M (also the decimation), at "
                          f"most {MAX_CHANNELS}.")
    taps_per_channel: int = Field(8, ge=1, description="Prototype length per subchannel: the default "
                                  "prototype is scipy.signal.firwin(M*taps_per_channel, 1/M).")
    taps: RealArray | None = Field(None, description="Explicit real prototype lowpass filter (any "
                                   "length; zero-padded to a multiple of M). Replaces the default design.")

    @field_validator("taps")
    @classmethod
    def _taps(cls, v: np.ndarray | None) -> np.ndarray | None:
        if v is not None and (v.ndim != 1 or v.size == 0):
            raise ValueError(f"taps must be a 1-D list of coefficients, got shape {v.shape}")
        if v is not None:
            limit(v.size, MAX_TAPS, "the prototype length", "taps")
        return v

    @field_validator("channels")
    @classmethod
    def _subchannels(cls, v: int) -> int:
        return limit(v, MAX_CHANNELS, "channels", "subchannels")

    @model_validator(mode="after")
    def _not_both(self) -> "ChannelizerParams":
        if self.taps is not None and "taps_per_channel" in self.model_fields_set:
            raise ValueError("give either 'taps' (an explicit prototype) or 'taps_per_channel' (for "
                             "the default design), not both")
        if self.taps is None and self.channels * self.taps_per_channel > MAX_TAPS:
            raise ValueError(f"the prototype length channels x taps_per_channel = {self.channels} x "
                             f"{self.taps_per_channel} is above the limit of {MAX_TAPS} taps")
        return self


class ChannelizerProcessor:
    """Polyphase branches (one T-tap FIR per branch along the decimated axis) + an FFT across them.

    With ``h[p + M*r] = H[r, p]`` and the branch inputs ``u_p[m] = x[m*M - p]``:
    ``y_k[m] = sum_p exp(2j*pi*k*p/M) * sum_r H[r, p] * u_p[m - r]``: an unnormalised
    inverse DFT over the branches ``p``.
    """

    def __init__(self, prototype: np.ndarray, M: int, channels: int, block_size: int, dtype: np.dtype):
        import scipy.fft as sfft  # SciPy loads when a processor is made, not with the catalog

        self._sfft = sfft
        self.M = M
        T = -(-prototype.size // M)
        self.T = T
        h = np.zeros(T * M)
        h[:prototype.size] = prototype
        self.H = h.reshape(T, M).astype(np.float32)  # H[r, p] = h[p + M*r]
        self.channels = channels
        self.dtype = np.dtype(dtype)
        # T*M history samples + the block, in rows of M samples
        self.ext = np.zeros((channels, (T + block_size // M) * M), dtype)
        self.hist = T * M

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        M, T, hist = self.M, self.T, self.hist
        m_in = x.shape[-1]
        rows = -(-m_in // M)  # a final partial block is zero-padded to whole rows of M
        n = rows * M
        ext = self.ext
        ext[:, hist:hist + m_in] = x
        ext[:, hist + m_in:hist + n] = 0
        E = ext[:, :hist + n].reshape(self.channels, T + rows, M)
        # branch p at row j: p = 0 -> E[j, 0]; p >= 1 -> E[j-1, M-p]  (u_p[m] = x[m*M - p])
        F = np.empty((self.channels, T + rows - 1, M), ext.dtype)
        F[:, :, 0] = E[:, 1:, 0]
        F[:, :, 1:] = E[:, :-1, :0:-1]
        # v[m, p] = sum_r H[r, p] * F[T-1 + m - r, p]   (F row i is E row i+1)
        v = F[:, T - 1:T - 1 + rows] * self.H[0]
        for r in range(1, T):
            v += F[:, T - 1 - r:T - 1 - r + rows] * self.H[r]
        y = self._sfft.ifft(v, axis=-1, norm="forward", overwrite_x=True)  # sum_p v_p exp(+2j*pi*k*p/M)
        ext[:, :hist] = ext[:, n:n + hist]
        # (C, rows, M) -> output channel c*M + k
        return np.ascontiguousarray(y.transpose(0, 2, 1)).reshape(self.channels * M, rows).astype(
            np.complex64, copy=False)

    def reset(self) -> None:
        self.ext[...] = 0


@register_stage
class Channelizer(Stage):
    """Critically sampled polyphase analysis filterbank.

    ``M = channels`` subchannels, each decimated by ``M``; subchannel ``k`` is centred at
    ``k*fs/M`` (FFT order, so channels above M/2 are the negative frequencies):

        y_k[m] = sum_l h[l] * exp(+2j*pi*k*l/M) * x[m*M - l]

    i.e. ``lfilter(h * exp(2j*pi*k*arange(L)/M), 1, x)[::M]``. The prototype ``h`` is
    ``firwin(M*taps_per_channel, 1/M)`` unless ``taps`` is given. Time-domain input, real
    or complex, ``C`` channels -> complex64, ``C*M`` channels (input channel ``c``,
    subchannel ``k`` -> output channel ``c*M + k``) at ``sample_rate/M`` with
    ``block_size/M`` samples per block; ``block_size % M == 0``. A final partial block is
    zero-padded to a multiple of M: ``ceil(samples/M)`` outputs.
    """

    type = "channelizer"
    summary = "Polyphase analysis filterbank: M subchannels, each decimated by M"
    Params = ChannelizerParams

    def prototype(self) -> np.ndarray:
        M = self.params.channels
        if self.params.taps is not None:
            return self.params.taps
        import scipy.signal as ssig  # SciPy loads when a filter is designed, not with the catalog

        return ssig.firwin(M * self.params.taps_per_channel, 1.0 / M)

    def state_bytes(self, spec: SignalSpec) -> int:
        M = self.params.channels
        length = self.params.taps.size if self.params.taps is not None else M * self.params.taps_per_channel
        # history + block, its polyphase copy, and the complex128 branch sums and ifft
        return 8 * length + spec.channels * (length + M + spec.block_size) * (2 * spec.np_dtype.itemsize + 32)

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where)
        M = self.params.channels
        require_multiple(spec, M, "channels (the decimation M)", where=self.where)
        return spec.with_(channels=spec.channels * M, sample_rate=spec.sample_rate / M,
                          block_size=spec.block_size // M, dtype="complex64")

    def cpu(self, spec: SignalSpec) -> ChannelizerProcessor:
        self.output_spec(spec)
        return ChannelizerProcessor(self.prototype(), self.params.channels, spec.channels,
                                    spec.block_size, spec.np_dtype)
