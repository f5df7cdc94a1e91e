"""fft, rfft, ifft, irfft: cut samples into non-overlapping frames and transform them (and back)."""

from __future__ import annotations

import numpy as np
from pydantic import Field, field_validator

from ..errors import ConfigError
from ..limits import MAX_FFT, limit
from ..signal import SignalSpec
from ._common import require_domain, require_multiple
from .base import Stage, StageParams, register_stage


class FftParams(StageParams):
    n: int | None = Field(None, ge=1, description="Frame length in samples (FFT size). Default: the "
                          "block size, i.e. one frame per block. block_size must be a multiple of n. "
                          f"At most {MAX_FFT}.")

    @field_validator("n")
    @classmethod
    def _n(cls, v: int | None) -> int | None:
        return v if v is None else limit(v, MAX_FFT, "n", "samples")


class InverseFftParams(StageParams):
    n: int | None = Field(None, ge=1, description="Output samples per frame. Default: the number of "
                          "bins (ifft) or 2*(bins-1) (irfft); if given it must match the input bins.")

    @field_validator("n")
    @classmethod
    def _n(cls, v: int | None) -> int | None:
        return v if v is None else limit(v, MAX_FFT, "n", "samples")


class ForwardFftProcessor:
    def __init__(self, n: int, channels: int, real: bool):
        import scipy.fft as sfft  # SciPy loads when a processor is made, not with the catalog

        self._sfft = sfft
        self.n, self.channels, self.real = n, channels, real

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        c, m = x.shape
        frames = -(-m // self.n)
        if frames * self.n != m:  # final partial block: zero-pad the last frame
            padded = np.zeros((c, frames * self.n), x.dtype)
            padded[:, :m] = x
            x = padded
        framed = x.reshape(c, frames, self.n)
        if self.real:
            return self._sfft.rfft(framed, axis=-1).astype(np.complex64, copy=False)
        return self._sfft.fft(framed, axis=-1).astype(np.complex64, copy=False)

    def reset(self) -> None:
        """Frames never straddle blocks: no streaming state."""


class InverseFftProcessor:
    def __init__(self, n: int, real: bool):
        import scipy.fft as sfft  # SciPy loads when a processor is made, not with the catalog

        self._sfft = sfft
        self.n, self.real = n, real

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        c, frames, _ = x.shape
        if self.real:
            y = self._sfft.irfft(x, self.n, axis=-1).astype(np.float32, copy=False)
        else:
            y = self._sfft.ifft(x, axis=-1).astype(np.complex64, copy=False)
        return y.reshape(c, frames * self.n)

    def reset(self) -> None:
        """Frames map to whole output samples: no streaming state."""


class _ForwardFft(Stage):
    Params = FftParams
    real_only = False

    def frame_length(self, spec: SignalSpec) -> int:
        return self.params.n if self.params.n is not None else spec.block_size

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where,
                       hint="the input is already frames; use ifft/irfft first to go back to samples")
        if self.real_only and spec.is_complex:
            raise ConfigError("rfft needs real (float32) input, got complex64", where=self.where,
                              hint="use fft for complex input")
        n = self.frame_length(spec)
        if self.params.n is None and n > MAX_FFT:  # one frame per block: the block is the FFT
            raise ConfigError(f"one frame per block of {n} samples is above the limit of {MAX_FFT} samples "
                              "per FFT", where=self.where, hint="set n to a shorter frame length")
        require_multiple(spec, n, "the frame length n", where=self.where)
        bins = n // 2 + 1 if self.real_only else n
        return SignalSpec(sample_rate=spec.sample_rate / n, channels=spec.channels,
                          block_size=spec.block_size // n, dtype="complex64", domain="frames", bins=bins)

    def cpu(self, spec: SignalSpec) -> ForwardFftProcessor:
        self.output_spec(spec)
        return ForwardFftProcessor(self.frame_length(spec), spec.channels, self.real_only)


@register_stage
class Fft(_ForwardFft):
    """Complex FFT of non-overlapping frames of ``n`` samples (NumPy's unnormalised forward).

    Time domain ``(C, block)`` (real or complex) -> frames ``(C, block/n, n)`` complex64 in
    FFT order, at ``sample_rate/n`` frames per second. ``block_size % n == 0``. A final
    partial block is zero-padded to whole frames: ``ceil(samples/n)`` frames.
    """

    type = "fft"
    summary = "FFT of non-overlapping frames of n samples -> frames domain"


@register_stage
class Rfft(_ForwardFft):
    """Real FFT of non-overlapping frames of ``n`` samples: ``n//2 + 1`` bins, complex64.

    Real (float32) input only; otherwise as :class:`Fft`.
    """

    type = "rfft"
    summary = "Real FFT of non-overlapping frames of n samples (n//2+1 bins)"
    real_only = True


class _InverseFft(Stage):
    Params = InverseFftParams
    real_output = False

    def samples_per_frame(self, spec: SignalSpec) -> int:
        bins, n = spec.bins, self.params.n
        if not self.real_output:
            if n is not None and n != bins:
                raise ConfigError(f"n = {n} does not match the input's {bins} bins", where=self.where,
                                  hint=f"leave n out or set n: {bins}", path=("n",))
            return bins
        if n is None:
            if bins < 2:
                raise ConfigError(f"irfft needs at least 2 bins, got {bins}", where=self.where)
            return 2 * (bins - 1)
        if n // 2 + 1 != bins:
            raise ConfigError(f"n = {n} needs n//2+1 = {n // 2 + 1} bins but the input has {bins}",
                              where=self.where, path=("n",),
                              hint=f"leave n out or use n: {2 * (bins - 1)} or {2 * (bins - 1) + 1}")
        return n

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "frames", where=self.where,
                       hint="add fft/rfft (or stft) before it; ifft/irfft turn frames back into samples")
        n = self.samples_per_frame(spec)
        return SignalSpec(sample_rate=spec.sample_rate * n, channels=spec.channels,
                          block_size=spec.block_size * n,
                          dtype="float32" if self.real_output else "complex64", domain="time")

    def cpu(self, spec: SignalSpec) -> InverseFftProcessor:
        self.output_spec(spec)
        return InverseFftProcessor(self.samples_per_frame(spec), self.real_output)


@register_stage
class Ifft(_InverseFft):
    """Inverse FFT of each frame (NumPy normalisation: 1/n), frames concatenated into samples.

    Frames ``(C, F, bins)`` -> time ``(C, F*bins)`` complex64 at ``frame_rate*bins`` Hz.
    """

    type = "ifft"
    summary = "Inverse FFT of each frame -> complex samples"


@register_stage
class Irfft(_InverseFft):
    """Inverse real FFT of each frame -> ``n = 2*(bins-1)`` real samples (or ``n`` if given,
    with ``n//2 + 1 == bins``), frames concatenated; float32 output.
    """

    type = "irfft"
    summary = "Inverse real FFT of each frame -> real samples"
    real_output = True
