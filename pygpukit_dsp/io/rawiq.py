"""``rawiq``: headerless interleaved IQ files, as SDR tools write them.

``cf32``: little-endian float32 I, Q pairs (numpy ``complex64``). ``cs16``: little-endian
int16 I, Q pairs, scaled by ``scale`` (default 1/32768) to complex64. Several channels are
interleaved sample by sample: ``ch0 ch1 ... ch0 ch1 ...``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from ..errors import ConfigError, StreamFault
from ..signal import SignalSpec
from .base import IoParams, Sink, Source, StreamFormat, register_sink, register_source
from ._common import (Counters, ExistingFile, Pacer, PartialFile, PathStr, Rate, check_block, cut_to, mismatch,
                      need_time_domain, not_open, write_all, write_failure)

IqFormat = Literal["cf32", "cs16"]
_BYTES_PER_SAMPLE = {"cf32": 8, "cs16": 4}


class RawIqSourceParams(IoParams):
    path: ExistingFile = Field(description="raw IQ file (relative to the YAML file's folder)")
    format: IqFormat = Field("cf32", description="cf32 (float32 I/Q) | cs16 (int16 I/Q)")
    channels: int | None = Field(None, ge=1, description="interleaved channels (default: the pipeline's, else 1)")
    sample_rate: float | None = Field(None, gt=0, description="sample rate in Hz (default: the pipeline's)")
    scale: float = Field(1 / 32768, gt=0, description="cs16: multiplier from int16 to float")
    rate: Rate = Field("asap", description="asap | realtime (pace reads at the sample rate)")


@register_source
class RawIqSource(Counters, Source):
    """Reads interleaved IQ samples as complex64 ``(channels, n)`` blocks."""

    type = "rawiq"
    Params = RawIqSourceParams
    summary = "raw interleaved IQ file (cf32 or cs16), complex64 output"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self.realtime = self.params.rate == "realtime"
        self._file = None
        self._init_counters()

    @property
    def full_path(self) -> Path:
        return self.resolve_path(self.params.path)

    def input_files(self) -> list[Path]:
        return [self.full_path]

    def open(self, request: StreamFormat) -> StreamFormat:
        p = self.params
        what = f"rawiq file '{p.path}'"
        if request.dtype not in (None, "complex64"):
            raise ConfigError(f"{what} holds complex64 samples but the pipeline requests dtype "
                              f"{request.dtype}", where=self.where,
                              hint="set 'dtype: complex64' in the pipeline or remove 'dtype'")
        channels = p.channels
        if channels is not None and request.channels is not None and channels != request.channels:
            raise mismatch("rawiq source", "channels", channels, request.channels,
                           where=self.where, hint="make the source's and the pipeline's channels agree "
                                                  "or remove one of them")
        channels = channels or request.channels or 1
        sr = p.sample_rate
        if sr is not None and request.sample_rate is not None and float(sr) != float(request.sample_rate):
            raise mismatch("rawiq source", "sample_rate", f"{sr:g}",
                           f"{request.sample_rate:g}", where=self.where,
                           hint="make the source's and the pipeline's sample_rate agree or remove one")
        sr = sr or request.sample_rate
        if sr is None:
            raise ConfigError("rawiq needs sample_rate: raw files do not store it", where=self.where,
                              hint="set 'sample_rate' in the source or at the pipeline level")
        path = self.full_path
        try:
            size = os.path.getsize(path)
        except OSError as exc:
            raise ConfigError(f"cannot read {what} ({path}): {exc.strerror or exc}", where=self.where,
                              path=("path",)) from None
        frame = _BYTES_PER_SAMPLE[p.format] * channels
        if size == 0:
            raise ConfigError(f"{what} ({path}) is empty (0 bytes)", where=self.where, path=("path",),
                              hint="was the capture written completely? check the path")
        if size % frame:
            raise ConfigError(
                f"{what} has {size} bytes, not a multiple of the frame size {frame} bytes "
                f"({channels} channel(s) x {_BYTES_PER_SAMPLE[p.format]} bytes per {p.format} sample); "
                f"{size % frame} bytes left over", where=self.where,
                hint="check 'format' and 'channels', or trim the file")
        self.close()
        try:
            self._file = open(path, "rb")
        except OSError as exc:
            raise ConfigError(f"cannot open {what} ({path}): {exc.strerror or exc}", where=self.where,
                              path=("path",)) from None
        self._channels, self._frame = channels, frame
        self._pos, self._length = 0, size // frame
        self._pacer = Pacer(sr) if self.realtime else None
        return StreamFormat(sample_rate=float(sr), channels=channels, dtype="complex64",
                            length=size // frame)

    def read(self, n: int) -> np.ndarray:
        if self._file is None:
            raise not_open(f"rawiq source '{self.params.path}'", "read")
        try:
            raw = self._file.read(int(n) * self._frame)
        except OSError as exc:
            raise StreamFault(f"reading {self.full_path} failed after {self._pos} samples: {exc}") from exc
        m = len(raw) // self._frame
        if len(raw) % self._frame:
            raise StreamFault(f"{self.full_path} ended in the middle of a sample (was it truncated "
                              "while reading?)")
        if m < n and self._pos + m < self._length:
            raise StreamFault(f"{self.full_path} ended after {self._pos + m} of its {self._length} samples "
                              "(was it truncated while reading?)")
        self._pos += m
        if self.params.format == "cf32":
            x = np.frombuffer(raw, dtype="<c8").reshape(m, self._channels)
            block = np.ascontiguousarray(x.T, dtype=np.complex64)
        else:
            iq = np.frombuffer(raw, dtype="<i2").reshape(m, self._channels, 2).astype(np.float32)
            scale = np.float32(self.params.scale)
            block = np.empty((self._channels, m), dtype=np.complex64)
            block.real = iq[:, :, 0].T * scale
            block.imag = iq[:, :, 1].T * scale
        self._counts["samples"] += m
        if self._pacer is not None and m:
            self._pacer.wait_until(self._counts["samples"])
        return block

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class RawIqSinkParams(IoParams):
    path: PathStr = Field(description="raw IQ file to write (relative to the YAML file's folder)")
    format: IqFormat = Field("cf32", description="cf32 (float32 I/Q) | cs16 (int16 I/Q)")
    scale: float = Field(1 / 32768, gt=0, description="cs16: the int16 value is round(x / scale)")


@register_sink
class RawIqSink(Counters, Sink):
    """Writes complex64 time-domain blocks as interleaved IQ; cs16 values are rounded and clipped.

    Written as ``NAME.partial`` and renamed when closed. A failed write (a full disk) is cut back to
    the last whole block: the byte stream then holds exactly the blocks written and is renamed too;
    where the cut fails it keeps ``NAME.partial``. A run that wrote nothing leaves no file.
    """

    type = "rawiq"
    Params = RawIqSinkParams
    summary = "raw interleaved IQ file (cf32 or cs16) from complex64 samples"
    _counter_names = Counters._counter_names + ("clipped",)

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._file = None
        self._spec: SignalSpec | None = None
        self._out: PartialFile | None = None
        self._init_counters()

    @property
    def full_path(self) -> Path:
        return self.resolve_path(self.params.path)

    def output_files(self) -> list[Path]:
        return [self.full_path]

    def open(self, spec: SignalSpec) -> None:
        what = f"rawiq sink '{self.params.path}'"
        need_time_domain(spec, what, dtype="complex64", where=self.where)
        self.close()
        self._out = PartialFile(self.full_path, what, where=self.where)
        self._file = self._out.create()
        self._spec = spec
        self._bytes = self._blocks = 0

    def write(self, block: np.ndarray) -> None:
        if self._file is None:
            raise not_open(f"rawiq sink '{self.params.path}'", "write")
        block = check_block(block, self._spec, f"rawiq sink '{self.params.path}'")
        interleaved = np.ascontiguousarray(block.T, dtype=np.complex64)  # (m, channels)
        if self.params.format == "cf32":
            data = interleaved.astype("<c8", copy=False)
        else:
            iq = interleaved.view(np.float32).reshape(interleaved.shape[0], -1) / np.float32(self.params.scale)
            iq = np.rint(iq)
            over = (iq > 32767) | (iq < -32768)
            self._counts["clipped"] += int(np.count_nonzero(over))
            data = np.clip(iq, -32768, 32767).astype("<i2")
        raw = data.tobytes()
        try:
            write_all(self._file, raw)  # unbuffered: a full disk shows here, at this block, not at close
        except OSError as exc:
            raise StreamFault(f"writing {self._out.partial} failed: {write_failure(self.full_path, exc, len(raw))}; "
                              f"{self._finish_after_fault()}") from exc
        self._bytes += len(raw)
        self._blocks += 1
        self._counts["samples"] += block.shape[1]

    def close(self) -> None:
        if self._file is None:
            return
        f, self._file = self._file, None
        out = self._out
        try:
            f.close()
        except OSError as exc:
            raise StreamFault(f"finalising {out.partial} failed: {exc}; the incomplete file keeps the name "
                              f"{out.partial.name}") from exc
        if self._bytes == 0:
            out.discard()
        else:
            out.commit()

    def _finish_after_fault(self) -> str:
        """After a failed write: cut the byte stream back to the whole blocks before it and give it its
        name (it then holds exactly those); where the cut fails it keeps its .partial name. Says what
        became of the file, for the fault's message."""
        f, self._file = self._file, None
        out = self._out
        cut = cut_to(f, self._bytes)
        try:
            f.close()
        except OSError:
            cut = False
        if self._bytes == 0:
            out.discard()
            return "nothing had been written, so no file is left"
        if not cut:
            return f"the incomplete file keeps the name {out.partial.name}"
        try:
            out.commit()
        except StreamFault as exc:
            return str(exc)
        return f"{out.path.name} holds the {self._blocks} whole blocks written before it ({self._bytes} bytes)"
