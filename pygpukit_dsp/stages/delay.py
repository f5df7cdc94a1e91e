"""delay: an integer-sample delay line (one delay for all channels, or one per channel)."""

from __future__ import annotations

import numpy as np
from pydantic import Field, field_validator

from ..errors import ConfigError
from ..limits import MAX_DELAY, limit
from ..signal import SignalSpec
from ._common import require_domain
from .base import Stage, StageParams, register_stage


class DelayParams(StageParams):
    samples: int | list[int] = Field(
        ..., description="Delay in samples (>= 0): one value for every channel, or a list with one "
        "value per channel (e.g. delay-and-sum beamforming).")

    @field_validator("samples")
    @classmethod
    def _non_negative(cls, v: int | list[int]) -> int | list[int]:
        values = [v] if isinstance(v, int) else list(v)
        if not values:
            raise ValueError("samples needs at least one value")
        if any(d < 0 for d in values):
            raise ValueError(f"delays must be >= 0 samples, got {v}")
        limit(max(values), MAX_DELAY, "delay", "samples")
        return v


class DelayProcessor:
    """Keeps the last max(delay) input samples; output length equals input length."""

    def __init__(self, delays: np.ndarray, block_size: int, dtype: np.dtype):
        self.delays = delays  # (channels,)
        self.depth = int(delays.max())
        self.uniform = bool(np.all(delays == delays[0]))
        self.ext = np.zeros((delays.size, self.depth + block_size), dtype)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        n = x.shape[-1]
        D, ext = self.depth, self.ext
        if D == 0:
            return x.copy()
        ext[:, D:D + n] = x
        if self.uniform:
            y = ext[:, :n].copy()
        else:
            y = np.empty_like(x, dtype=ext.dtype)
            for c, d in enumerate(self.delays):
                y[c] = ext[c, D - d:D - d + n]
        ext[:, :D] = ext[:, n:n + D]
        return y

    def reset(self) -> None:
        self.ext[...] = 0


@register_stage
class Delay(Stage):
    """Integer delay: ``y[c, n] = x[c, n - d_c]`` (zeros before the stream starts).

    The output block has as many samples as the input block, so at the end of a stream
    the last ``d_c`` input samples of channel ``c`` stay in the line (they are not flushed).
    Time domain, any dtype.
    """

    type = "delay"
    summary = "Integer-sample delay line (per channel or for all)"
    Params = DelayParams

    def delays_for(self, spec: SignalSpec) -> np.ndarray:
        s = self.params.samples
        if isinstance(s, int):
            return np.full(spec.channels, s, dtype=np.int64)
        if len(s) != spec.channels:
            raise ConfigError(f"samples lists {len(s)} delays but the input has {spec.channels} channels",
                              where=self.where, path=("samples",),
                              hint=f"give {spec.channels} values, or one integer for every channel")
        return np.asarray(s, dtype=np.int64)

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where)
        if not isinstance(self.params.samples, int):
            self.delays_for(spec)  # the per-channel list must match (an int needs no array here)
        return spec

    def state_bytes(self, spec: SignalSpec) -> int:
        s = self.params.samples
        depth = s if isinstance(s, int) else max(s)
        return spec.channels * (depth + spec.block_size) * spec.np_dtype.itemsize

    def cpu(self, spec: SignalSpec) -> DelayProcessor:
        self.output_spec(spec)
        return DelayProcessor(self.delays_for(spec), spec.block_size, spec.np_dtype)
