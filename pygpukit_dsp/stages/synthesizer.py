"""synthesizer: polyphase synthesis filterbank, the inverse of ``channelizer`` (M subchannels
interpolated by M and summed back into one wideband stream)."""

from __future__ import annotations

import numpy as np
from pydantic import Field, field_validator, model_validator

from ..errors import ConfigError
from ..limits import MAX_CHANNELS, MAX_TAPS, limit
from ..signal import SignalSpec
from ._common import require_domain
from .base import RealArray, Stage, StageParams, register_stage


class SynthesizerParams(StageParams):
    channels: int = Field(..., ge=2, description=f"Number of subchannels M (also the interpolation), "
                          f"at most {MAX_CHANNELS}: the channelizer's channels.")
    taps_per_channel: int = Field(8, ge=1, description="Prototype length per subchannel, as the "
                                  "channelizer's: the default prototype is "
                                  "scipy.signal.firwin(M*taps_per_channel, 1/M).")
    taps: RealArray | None = Field(None, description="Explicit real prototype lowpass filter, the "
                                   "channelizer's (any length; zero-padded to a multiple of M). "
                                   "Replaces the default design.")

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
    def _not_both(self) -> "SynthesizerParams":
        if self.taps is not None and "taps_per_channel" in self.model_fields_set:
            raise ValueError("give either 'taps' (an explicit prototype) or 'taps_per_channel' (for "
                             "the default design), not both")
        if self.taps is None and self.channels * self.taps_per_channel > MAX_TAPS:
            raise ValueError(f"the prototype length channels x taps_per_channel = {self.channels} x "
                             f"{self.taps_per_channel} is above the limit of {MAX_TAPS} taps")
        return self


def synthesis_branches(prototype: np.ndarray, M: int) -> np.ndarray:
    """G[r, p] = h[T*M - 1 - (r*M + p)] (h zero-padded to T*M = ceil(L/M)*M taps): the branch
    filters of the synthesis bank, the analysis prototype reversed."""
    T = -(-prototype.size // M)
    h = np.zeros(T * M)
    h[:prototype.size] = prototype
    return np.ascontiguousarray(h[::-1].reshape(T, M))


class SynthesizerProcessor:
    """``W_p[m] = sum_k y_k[m] exp(2j*pi*k*(p+1)/M)`` (an unnormalised inverse DFT over the
    subchannels, read at ``(p+1) mod M``), then ``x[q*M + p] = M * sum_r G[r, p] W_p[q - r]``."""

    def __init__(self, prototype: np.ndarray, M: int, inputs: int, block_size: int):
        import scipy.fft as sfft  # SciPy loads when a processor is made, not with the catalog

        self._sfft = sfft
        self.M = M
        self.G = (M * synthesis_branches(prototype, M)).astype(np.float64)  # (T, M)
        self.T = self.G.shape[0]
        self.inputs = inputs
        # W of the last T-1 rows and of the block, (inputs, T-1 + rows, M)
        self.ext = np.zeros((inputs, self.T - 1 + block_size, M), np.complex128)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        M, T, C = self.M, self.T, self.inputs
        rows = x.shape[-1]
        y = x.reshape(C, M, rows)
        V = self._sfft.ifft(y, axis=1, norm="forward")  # V_p = sum_k y_k exp(+2j*pi*k*p/M)
        ext = self.ext
        ext[:, T - 1:T - 1 + rows, :M - 1] = V[:, 1:].transpose(0, 2, 1)  # W_p = V_{(p+1) % M}
        ext[:, T - 1:T - 1 + rows, M - 1] = V[:, 0]
        out = self.G[0] * ext[:, T - 1:T - 1 + rows]
        for r in range(1, T):
            out += self.G[r] * ext[:, T - 1 - r:T - 1 - r + rows]
        if T > 1:
            ext[:, :T - 1] = ext[:, rows:rows + T - 1]
        return out.reshape(C, rows * M).astype(np.complex64)

    def reset(self) -> None:
        self.ext[...] = 0


@register_stage
class Synthesizer(Stage):
    """Polyphase synthesis filterbank: the inverse of ``channelizer``.

    ``C*M`` time-domain channels (input channel ``c*M + k`` is subchannel ``k`` of output
    channel ``c``, as the channelizer writes them) -> ``C`` complex64 channels at
    ``sample_rate*M``, ``block_size*M`` samples per block. With the channelizer's prototype
    ``h`` (zero-padded to ``T*M`` taps) the output is

        x[n] = sum_k sum_m y_k[m] * f_k[n - m*M],   f_k[l] = M * conj(h_k[T*M - 1 - l])

    where ``h_k[l] = h[l] * exp(2j*pi*k*l/M)`` are the channelizer's filters: each subchannel is
    interpolated by M through the matched filter of its analysis filter. Channelizer then
    synthesizer gives the input delayed by ``T*M - 1`` samples, exactly for a prototype that
    allows it (``h = ones(M)/M``) and within the aliasing of a critically sampled filterbank
    otherwise (docs/stages.md gives the measured error).
    """

    type = "synthesizer"
    summary = "Polyphase synthesis filterbank (inverse channelizer): M subchannels -> one stream"
    Params = SynthesizerParams

    def prototype(self) -> np.ndarray:
        M = self.params.channels
        if self.params.taps is not None:
            return self.params.taps
        import scipy.signal as ssig  # SciPy loads when a filter is designed, not with the catalog

        return ssig.firwin(M * self.params.taps_per_channel, 1.0 / M)

    def delay(self) -> int:
        """Samples of delay of channelizer -> synthesizer: T*M - 1."""
        M = self.params.channels
        L = self.params.taps.size if self.params.taps is not None else M * self.params.taps_per_channel
        return -(-L // M) * M - 1

    def state_bytes(self, spec: SignalSpec) -> int:
        M = self.params.channels
        L = self.params.taps.size if self.params.taps is not None else M * self.params.taps_per_channel
        # the transformed rows with their history (complex128) and the output in complex128
        return 8 * L + spec.channels * (L // M + 1 + spec.block_size) * 16 * 3

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where,
                       hint="the synthesizer takes a channelizer's output (time-domain subchannels)")
        M = self.params.channels
        if spec.channels % M:
            raise ConfigError(f"the input's {spec.channels} channels are not a multiple of "
                              f"channels = {M} (subchannels per output)", where=self.where,
                              hint="give the channelizer's channels; its output has C*M channels")
        return spec.with_(channels=spec.channels // M, sample_rate=spec.sample_rate * M,
                          block_size=spec.block_size * M, dtype="complex64")

    def cpu(self, spec: SignalSpec) -> SynthesizerProcessor:
        self.output_spec(spec)
        return SynthesizerProcessor(self.prototype(), self.params.channels,
                                    spec.channels // self.params.channels, spec.block_size)
