"""``null``: a source of zeros and a sink that discards (and counts) what it gets."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from ..errors import ConfigError
from ..signal import SignalSpec
from .base import IoParams, Sink, Source, StreamFormat, register_sink, register_source
from ._common import Counters, Pacer, Rate, check_block, not_open


class NullSourceParams(IoParams):
    duration_s: float | None = Field(None, gt=0, description="length in seconds (default: endless)")
    rate: Rate = Field("asap", description="asap | realtime (pace reads at the sample rate)")


@register_source
class NullSource(Counters, Source):
    """Zeros in the pipeline's format (channels default 1, dtype float32)."""

    type = "null"
    Params = NullSourceParams
    summary = "zeros, endless or for duration_s"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self.realtime = self.params.rate == "realtime"
        self._fmt: StreamFormat | None = None
        self._init_counters()

    def open(self, request: StreamFormat) -> StreamFormat:
        if request.sample_rate is None:
            raise ConfigError("null source needs sample_rate: set it at the pipeline level",
                              where=self.where, hint="e.g. 'sample_rate: 48000'")
        sr = float(request.sample_rate)
        length = None if self.params.duration_s is None else int(round(self.params.duration_s * sr))
        self._fmt = StreamFormat(sample_rate=sr, channels=request.channels or 1,
                                 dtype=request.dtype or "float32", length=length)
        self._pos = 0
        self._pacer = Pacer(sr) if self.realtime else None
        return self._fmt

    def read(self, n: int) -> np.ndarray:
        if self._fmt is None:
            raise not_open("null source", "read")
        m = int(n) if self._fmt.length is None else max(0, min(int(n), self._fmt.length - self._pos))
        self._pos += m
        self._counts["samples"] += m
        if self._pacer is not None and m:
            self._pacer.wait_until(self._pos)
        return np.zeros((self._fmt.channels, m), dtype=self._fmt.dtype)


class NullSinkParams(IoParams):
    """The null sink takes no parameters."""


@register_sink
class NullSink(Counters, Sink):
    """Discards every block; counts samples (frames in the frames domain)."""

    type = "null"
    Params = NullSinkParams
    summary = "discard the output (counts samples)"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._spec: SignalSpec | None = None
        self._init_counters()

    def open(self, spec: SignalSpec) -> None:
        self._spec = spec

    def write(self, block: np.ndarray) -> None:
        if self._spec is None:
            raise not_open("null sink", "write")
        block = check_block(block, self._spec, "null sink")
        self._counts["samples"] += block.shape[1]
