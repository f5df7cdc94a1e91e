"""SignalSpec: the format of the stream flowing between two stages."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from .errors import ConfigError

DTYPES = ("float32", "complex64")
Domain = Literal["time", "frames"]


@dataclass(frozen=True)
class SignalSpec:
    """Format of one edge of a pipeline.

    A *block* of a time-domain signal has shape ``(channels, block_size)``; a
    block of a frames-domain signal (after fft/stft) has shape
    ``(channels, block_size, bins)``: ``block_size`` frames of ``bins`` values.

    ``sample_rate`` is the rate along the streaming axis: samples per second in
    the time domain, frames per second in the frames domain.
    """

    sample_rate: float
    channels: int
    block_size: int
    dtype: str = "float32"
    domain: Domain = "time"
    bins: int = 0

    def __post_init__(self) -> None:
        # ConfigError (a ValueError): a stage's output_spec that builds an impossible spec (a rate
        # that overflows to inf after resampling) is a configuration error, located by Pipeline
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.domain not in ("time", "frames"):
            raise ConfigError(f"domain must be 'time' or 'frames', got {self.domain!r}")
        if self.channels < 1 or self.block_size < 1:
            raise ConfigError("channels and block_size must be >= 1")
        if (self.domain == "frames") != (self.bins > 0):
            raise ConfigError("bins > 0 exactly when domain == 'frames'")
        if not (math.isfinite(self.sample_rate) and self.sample_rate > 0):
            raise ConfigError(f"the sample rate must be a finite number > 0, got {self.sample_rate:g}",
                              hint="a resample, fft or average stage took it out of range; check "
                                   "sample_rate and the stages' factors")

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @property
    def is_complex(self) -> bool:
        return self.dtype == "complex64"

    @property
    def block_shape(self) -> tuple[int, ...]:
        if self.domain == "time":
            return (self.channels, self.block_size)
        return (self.channels, self.block_size, self.bins)

    @property
    def block_nbytes(self) -> int:
        return math.prod(self.block_shape) * self.np_dtype.itemsize  # exact: np.prod overflows int64

    @property
    def block_period(self) -> float:
        """Seconds of signal in one full block."""
        return self.block_size / self.sample_rate

    def with_(self, **changes) -> "SignalSpec":
        return replace(self, **changes)

    def describe(self) -> str:
        if self.domain == "time":
            return (f"{self.channels} ch x {self.block_size} {self.dtype} samples "
                    f"@ {self.sample_rate:g} Hz")
        return (f"{self.channels} ch x {self.block_size} frames x {self.bins} bins {self.dtype} "
                f"@ {self.sample_rate:g} frames/s")
