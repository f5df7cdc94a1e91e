"""stft: causal streaming short-time Fourier transform (windowed, overlapping frames)."""

from __future__ import annotations

import numpy as np
from pydantic import Field, field_validator, model_validator

from ..limits import MAX_FFT, limit
from ..signal import SignalSpec
from ._common import require_domain, require_multiple
from .base import Stage, StageParams, register_stage
from .fir import WindowSpec, check_window, window_arg


class StftParams(StageParams):
    nfft: int = Field(..., ge=1, description=f"Frame length = FFT size in samples, at most {MAX_FFT}.")
    hop: int | None = Field(None, ge=1, description="Samples between frame starts (default nfft//2). "
                            "block_size must be a multiple of hop.")
    window: WindowSpec = Field("hann", description="Window: scipy.signal.get_window(window, nfft) "
                               "(periodic); a name or [name, parameter], e.g. ['kaiser', 8.0].")

    @field_validator("window")
    @classmethod
    def _window(cls, v: WindowSpec) -> WindowSpec:
        return check_window(v)

    @field_validator("nfft")
    @classmethod
    def _nfft(cls, v: int) -> int:
        return limit(v, MAX_FFT, "nfft", "samples")

    @model_validator(mode="after")
    def _window_length(self) -> "StftParams":
        check_window(self.window, self.nfft)
        return self

    @property
    def hop_samples(self) -> int:
        return self.hop if self.hop is not None else max(1, self.nfft // 2)


class StftProcessor:
    def __init__(self, window: np.ndarray, hop: int, channels: int, block_size: int, dtype: np.dtype):
        import scipy.fft as sfft  # SciPy loads when a processor is made, not with the catalog

        self._sfft = sfft
        self.nfft = window.size
        self.hop = hop
        self.real = np.dtype(dtype).kind == "f"
        self.window = window.astype(np.float32)
        self.hist = max(self.nfft - hop, 0)  # samples kept from earlier blocks
        self.skip = max(hop - self.nfft, 0)  # hop > nfft: samples at the start of each hop not used
        self.ext = np.zeros((channels, self.hist + block_size), dtype)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        m = x.shape[-1]
        frames = -(-m // self.hop)
        if frames == 0:  # an empty final block: no frame ends in it
            bins = self.nfft // 2 + 1 if self.real else self.nfft
            return np.zeros((x.shape[0], 0, bins), np.complex64)
        n = frames * self.hop  # a final partial block is zero-padded to the next hop
        ext, hist = self.ext, self.hist
        ext[:, hist:hist + m] = x
        ext[:, hist + m:hist + n] = 0
        windows = np.lib.stride_tricks.sliding_window_view(ext[:, :hist + n], self.nfft, axis=-1)
        segs = windows[:, self.skip::self.hop][:, :frames] * self.window
        if self.real:
            y = self._sfft.rfft(segs, axis=-1, overwrite_x=True)
        else:
            y = self._sfft.fft(segs, axis=-1, overwrite_x=True)
        if hist:
            ext[:, :hist] = ext[:, n:n + hist]
        return y.astype(np.complex64, copy=False)

    def reset(self) -> None:
        self.ext[...] = 0


@register_stage
class Stft(Stage):
    """Causal streaming STFT.

    Global frame ``k`` covers input samples ``[k*hop + hop - nfft, k*hop + hop)`` (zeros
    before sample 0), multiplied by ``w = scipy.signal.get_window(window, nfft)`` and
    transformed: real input -> ``nfft//2 + 1`` bins (rfft), complex input -> ``nfft`` bins
    in FFT order. Each hop of new input completes one frame: ``block_size/hop`` frames per
    block at ``sample_rate/hop`` frames/s. A final partial block is zero-padded to the next
    hop, so a stream of ``N`` samples gives ``ceil(N/hop)`` frames.

    Alignment with SciPy: with ``SFT = ShortTimeFFT(w, hop, fs, mfft=nfft,
    fft_mode='onesided' (real) or 'twosided' (complex), phase_shift=None)``::

        ours[c, k, :] == SFT.stft(x[c], p0=0, p1=K, k_offset=hop - ceil(nfft/2))[:, k]

    for ``k < K = ceil(N/hop)``. When ``ceil(nfft/2)`` is a multiple of ``hop`` no offset
    is needed: ``ours[c, k] == SFT.stft(x[c], p0=p_shift, p1=p_shift + K)[:, k]`` with
    ``p_shift = 1 - ceil(nfft/2)//hop`` (``0`` for ``hop = nfft/2``).
    """

    type = "stft"
    summary = "Causal streaming STFT (window, hop) -> frames domain"
    Params = StftParams

    @property
    def hop(self) -> int:
        return self.params.hop_samples

    def window(self) -> np.ndarray:
        import scipy.signal as ssig  # SciPy loads when a window is computed, not with the catalog

        return ssig.get_window(window_arg(self.params.window), self.params.nfft)

    def state_bytes(self, spec: SignalSpec) -> int:
        nfft, frames = self.params.nfft, max(spec.block_size // self.hop, 1)
        # the input history + block, and the windowed frames before their transform
        return (spec.channels * (nfft + spec.block_size) * spec.np_dtype.itemsize
                + spec.channels * frames * nfft * 8 + 4 * nfft)

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where,
                       hint="the input is already frames; stft takes samples")
        require_multiple(spec, self.hop, "hop", where=self.where)
        nfft = self.params.nfft
        bins = nfft if spec.is_complex else nfft // 2 + 1
        return SignalSpec(sample_rate=spec.sample_rate / self.hop, channels=spec.channels,
                          block_size=spec.block_size // self.hop, dtype="complex64",
                          domain="frames", bins=bins)

    def cpu(self, spec: SignalSpec) -> StftProcessor:
        self.output_spec(spec)
        return StftProcessor(self.window(), self.hop, spec.channels, spec.block_size, spec.np_dtype)
