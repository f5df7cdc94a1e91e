"""Sound cards: ``audio`` (input or output) and ``duplex`` (input and output in one stream).

Each runs one PortAudio stream whose callback is native (io/portaudio.py): the callback copies
between the device and lock-free rings, and the pipeline's thread reads and writes the rings,
so the device clock paces the stream and a slow block shows up as counted late blocks,
overruns and underruns, never as a silent gap. ``duplex`` is a source and a sink that share one
stream (``source: {type: duplex}`` with ``sink: {type: duplex}``): its output plays exactly
``preroll_blocks`` blocks after its input, and its ADC-to-DAC latency is measured every block.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from ..errors import ConfigError
from ..signal import SignalSpec
from .base import IoParams, Sink, Source, StreamFormat, register_sink, register_source
from ._common import check_block, need_time_domain, not_open
from .portaudio import (DEFAULT_DEVICE_TIMEOUT_S, DEFAULT_PREROLL_BLOCKS, DEFAULT_RING_BLOCKS, DeviceSide,
                        LiveAudio, audio_devices, channel_map, check_rate, resolve_device, sounddevice)

DeviceRef = int | str | None

__all__ = ["AudioDeviceSource", "AudioDeviceSink", "DuplexSource", "DuplexSink", "audio_devices"]


class _DeviceParams(IoParams):
    latency: float | Literal["low", "high"] = Field(
        "low", description="PortAudio's suggested latency: 'low', 'high' or seconds")
    ring_blocks: int = Field(DEFAULT_RING_BLOCKS, ge=2, le=4096,
                             description="blocks each ring holds: how far the pipeline may fall behind the device")
    device_timeout_s: float = Field(DEFAULT_DEVICE_TIMEOUT_S, gt=0, le=3600,
                                    description="no callback for this long: the device is gone (StreamFault)")


class _InputParams(_DeviceParams):
    input_channels: list[int] | None = Field(
        None, description="device input channels to use, in pipeline order, e.g. [0, 2, 5] (default: the first N)")
    duration_s: float | None = Field(None, gt=0, description="stop after this many seconds (default: endless)")


class _LiveComponent:
    """What the audio sources and sinks share: their LiveAudio and its counters."""

    _live: LiveAudio | None = None

    def interrupt(self, *, abort: bool = False) -> None:
        super().interrupt(abort=abort)
        if self._live is not None:
            self._live.interrupt(abort=abort)

    def audio_report(self) -> dict[str, Any] | None:
        return self._live.report() if self._live is not None else None


def _open_input(src: "_LiveComponent", request: StreamFormat, what: str) -> tuple[Any, DeviceSide, float]:
    if request.dtype not in (None, "float32"):
        raise ConfigError(f"{what} delivers float32 samples but the pipeline requests dtype {request.dtype}",
                          where=src.where, hint="remove 'dtype' or set float32")
    sd = sounddevice(src.where)
    p = src.params
    device = p.device[0] if isinstance(p.device, list) else p.device
    side = resolve_device(sd, device, "input", where=src.where)
    side.map = channel_map(side, p.input_channels, request.channels, where=src.where, key="input_channels")
    rate = float(request.sample_rate or side.default_rate or 48000.0)
    check_rate(sd, side, rate, where=src.where)
    return sd, side, rate


def _output_side(sd: Any, device: DeviceRef, output_channels: list[int] | None, spec: SignalSpec,
                 what: str, where: str | None) -> DeviceSide:
    need_time_domain(spec, what, dtype="float32", where=where)
    side = resolve_device(sd, device, "output", where=where)
    side.map = channel_map(side, output_channels, spec.channels, where=where, key="output_channels")
    check_rate(sd, side, spec.sample_rate, where=where)
    return side


class _InputSource(_LiveComponent, Source):
    realtime = True
    nonfinite_default = "zero"  # a glitch must not stop a live stream, nor reach the speakers as DC

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._live: LiveAudio | None = None
        self._channels = 0
        self._samples = 0
        self._length: int | None = None

    def _start_live(self, request: StreamFormat, **live: Any) -> StreamFormat:
        self.close()
        sd, side, rate = _open_input(self, request, f"{self.type} source")
        p = self.params
        self._live = LiveAudio(what=f"{self.type} source", sample_rate=rate, latency=p.latency, input=side,
                               ring_blocks=p.ring_blocks, device_timeout_s=p.device_timeout_s, where=self.where,
                               **live)
        self._channels, self._samples = len(side.map), 0
        self._length = None if p.duration_s is None else int(round(p.duration_s * rate))
        return StreamFormat(sample_rate=rate, channels=self._channels, dtype="float32", length=self._length)

    def read(self, n: int) -> np.ndarray:
        if self._live is None:
            raise not_open(f"{self.type} source", "read")
        n = int(n)
        if self._length is not None:
            n = max(0, min(n, self._length - self._samples))
        block = np.empty((self._channels, n), dtype=np.float32)
        if n == 0 or self._live.read(block) == 0:
            return block[:, :0]
        self._samples += n
        return block

    def stats(self) -> dict[str, int]:
        r = self._live.report() if self._live is not None else {}
        return {"samples": self._samples, "overflows": r.get("input_overflows", 0), "underflows": 0,
                "dropped": r.get("ring_overrun_frames", 0),
                "late_blocks": self._live.late_in if self._live is not None else 0}

    def close(self) -> None:
        if self._live is not None:
            self._live.close()


class AudioSourceParams(_InputParams):
    device: DeviceRef = Field(None, description="input device: index or (part of) its name; default: the "
                                                "system's default input")


@register_source
class AudioDeviceSource(_InputSource):
    """Records float32 ``(channels, n)`` blocks from a sound card (an input-only stream)."""

    type = "audio"
    Params = AudioSourceParams
    summary = "sound card input (sounddevice; native callback and ring)"

    def open(self, request: StreamFormat) -> StreamFormat:
        return self._start_live(request)


class AudioSinkParams(_DeviceParams):
    device: DeviceRef = Field(None, description="output device: index or (part of) its name; default: the "
                                                "system's default output")
    output_channels: list[int] | None = Field(
        None, description="device output channels for the pipeline's channels, in order (default: the first N)")
    preroll_blocks: int = Field(DEFAULT_PREROLL_BLOCKS, ge=1, le=64,
                                description="blocks of silence queued before the first block")


@register_sink
class AudioDeviceSink(_LiveComponent, Sink):
    """Plays a real float32 time-domain signal on a sound card (an output-only stream)."""

    type = "audio"
    Params = AudioSinkParams
    summary = "sound card output (sounddevice; native callback and ring)"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._live: LiveAudio | None = None
        self._spec: SignalSpec | None = None
        self._samples = 0

    def open(self, spec: SignalSpec) -> None:
        self.close()
        sd = sounddevice(self.where)
        p = self.params
        side = _output_side(sd, p.device, p.output_channels, spec, "audio sink", self.where)
        self._live = LiveAudio(what="audio sink", sample_rate=spec.sample_rate, latency=p.latency, output=side,
                               preroll_blocks=p.preroll_blocks, ring_blocks=p.ring_blocks,
                               device_timeout_s=p.device_timeout_s, where=self.where)
        self._live.block_size = spec.block_size
        self._spec, self._samples = spec, 0

    def write(self, block: np.ndarray) -> None:
        if self._live is None:
            raise not_open("audio sink", "write")
        block = np.ascontiguousarray(check_block(block, self._spec, "audio sink"), dtype=np.float32)
        self._live.write(block)
        self._samples += block.shape[1]

    def stats(self) -> dict[str, int]:
        return _sink_stats(self._live, self._samples)

    def close(self) -> None:
        if self._live is not None:
            self._live.close(drain=not self.aborting)


def _sink_stats(live: LiveAudio | None, samples: int) -> dict[str, int]:
    r = live.report() if live is not None else {}
    return {"samples": samples, "overflows": 0, "underflows": r.get("output_underflows", 0), "dropped": 0,
            "ring_underruns": r.get("ring_underrun_frames", 0),
            "late_blocks": live.late_out if live is not None else 0}


class DuplexSourceParams(_InputParams):
    device: DeviceRef | list[DeviceRef] = Field(
        None, description="device for both directions (index or part of its name), or [input, output]; "
                          "default: the system's defaults")
    preroll_blocks: int = Field(DEFAULT_PREROLL_BLOCKS, ge=1, le=64,
                                description="blocks of silence queued before the first block: the output "
                                            "plays exactly this many blocks after the input")


@register_source
class DuplexSource(_InputSource):
    """The input half of a duplex stream; its sink must be ``duplex`` (the output half)."""

    type = "duplex"
    Params = DuplexSourceParams
    summary = "sound card input and output in one stream (with sink 'duplex')"

    def open(self, request: StreamFormat) -> StreamFormat:
        device = self.params.device
        if isinstance(device, list) and len(device) != 2:
            raise ConfigError(f"'device' as a list must be [input, output], got {device}", where=self.where,
                              path=("device",))
        return self._start_live(request, preroll_blocks=self.params.preroll_blocks)

    @property
    def live(self) -> LiveAudio | None:
        return self._live


class DuplexSinkParams(IoParams):
    output_channels: list[int] | None = Field(
        None, description="device output channels for the pipeline's channels, in order (default: the first N)")


@register_sink
class DuplexSink(Sink):
    """The output half of a duplex stream: plays the pipeline's output in the source's stream."""

    type = "duplex"
    Params = DuplexSinkParams
    summary = "sound card output of the duplex source's stream"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._source: DuplexSource | None = None
        self._spec: SignalSpec | None = None
        self._samples = 0

    def pair_with(self, source: Source) -> None:
        """Join the duplex source's stream (the runner calls this before opening)."""
        if not isinstance(source, DuplexSource):
            raise ConfigError(f"sink 'duplex' plays in the stream of a 'duplex' source, but the source is "
                              f"'{source.type}'", where=self.where,
                              hint="use 'source: {type: duplex}', or sink 'audio' for an output-only stream "
                                   "(from Python, start(..., sink=NullSink()) runs with no sink)")
        self._source = source

    def open(self, spec: SignalSpec) -> None:
        live = self._source.live if self._source is not None else None
        if live is None:
            raise ConfigError("sink 'duplex' needs its 'duplex' source opened first", where=self.where)
        if spec.domain == "time" and spec.sample_rate != live.sample_rate:
            raise ConfigError(f"duplex: the pipeline's output runs at {spec.sample_rate:g} Hz but the stream at "
                              f"{live.sample_rate:g} Hz (one PortAudio stream has one rate)", where=self.where,
                              hint="remove the 'resample' stage, or use sink 'audio' on its own stream")
        sd = sounddevice(self.where)
        device = self._source.params.device
        device = device[1] if isinstance(device, list) else device
        side = _output_side(sd, device, self.params.output_channels, spec, "duplex sink", self.where)
        if side.host_api != live.input.host_api:
            raise ConfigError(f"duplex: input {live.input.describe()} and output {side.describe()} use different "
                              "host APIs; one PortAudio stream needs one", where=self.where,
                              hint="pick devices of the same host API, or use 'audio' source and sink")
        live.attach_output(side)
        self._spec, self._samples = spec, 0

    def write(self, block: np.ndarray) -> None:
        if self._spec is None or self._source is None or self._source.live is None:
            raise not_open("duplex sink", "write")
        block = np.ascontiguousarray(check_block(block, self._spec, "duplex sink"), dtype=np.float32)
        self._source.live.write(block)
        self._samples += block.shape[1]

    def stats(self) -> dict[str, int]:
        return _sink_stats(self._source.live if self._source is not None else None, self._samples)

    def close(self) -> None:
        """Play out what is queued; the source closes the stream after it."""
        live = self._source.live if self._source is not None else None
        if live is not None and live.started and not self.aborting:
            live.drain()
