"""``audio``: sound card input and output through sounddevice (PortAudio).

sounddevice is an optional dependency (``pip install 'pygpukit-dsp[audio]'``), imported
only when an audio stream is opened or devices are listed. The device clock paces the
stream. Input overflows and output underflows reported by PortAudio are counted (one per
read/write that reported one) and shown in the run summary, never dropped silently.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Literal

import numpy as np
from pydantic import Field

from ..errors import ConfigError, StreamFault
from ..signal import SignalSpec
from .base import IoParams, Sink, Source, StreamFormat, register_sink, register_source
from ._common import Counters, check_block, need_time_domain, not_open

INSTALL_HINT = "pip install 'pygpukit-dsp[audio]'"


def _sounddevice(where: str | None = None) -> ModuleType:
    try:
        return importlib.import_module("sounddevice")
    except ImportError as exc:
        raise ConfigError(f"audio input/output needs the sounddevice package, which is not installed "
                          f"({exc})", where=where, hint=INSTALL_HINT) from None
    except OSError as exc:  # sounddevice raises OSError when the PortAudio library is missing
        raise ConfigError(f"sounddevice could not load the PortAudio library: {exc}", where=where,
                          hint="install PortAudio (e.g. 'apt install libportaudio2') and "
                               + INSTALL_HINT) from None


def audio_host_apis() -> tuple[list[dict[str, Any]], str | None]:
    """Host APIs with their devices, or ``([], reason)`` when audio is unavailable."""
    try:
        sd = importlib.import_module("sounddevice")
    except ImportError:
        return [], f"sounddevice is not installed: {INSTALL_HINT}"
    except OSError as exc:
        return [], f"PortAudio library not found ({exc})"
    try:
        apis = list(sd.query_hostapis())
        devices = list(sd.query_devices())
    except Exception as exc:  # PortAudioError and friends: report, do not crash `gk-stream devices`
        return [], f"querying audio devices failed: {exc}"
    out: list[dict[str, Any]] = []
    for api in apis:
        devs = []
        for index in api.get("devices", ()):
            d = devices[index]
            devs.append({
                "index": int(index),
                "name": d.get("name", ""),
                "max_input_channels": int(d.get("max_input_channels", 0)),
                "max_output_channels": int(d.get("max_output_channels", 0)),
                "default_samplerate": float(d.get("default_samplerate", 0.0)),
            })
        out.append({
            "name": api.get("name", ""),
            "default_input": int(api.get("default_input_device", -1)),
            "default_output": int(api.get("default_output_device", -1)),
            "devices": devs,
        })
    return out, None


class _AudioParams(IoParams):
    device: int | str | None = Field(None, description="device index or (part of) its name; default: "
                                                        "the system default")
    latency: float | Literal["low", "high"] = Field(
        "low", description="PortAudio latency: seconds, or 'low' / 'high'")


class AudioSourceParams(_AudioParams):
    duration_s: float | None = Field(None, gt=0, description="stop after this many seconds (default: endless)")


def _query(sd: ModuleType, device: int | str | None, kind: str, where: str | None) -> dict:
    try:
        return dict(sd.query_devices(device, kind))
    except Exception as exc:
        raise ConfigError(f"audio {kind} device {device!r} is not usable: {exc}", where=where,
                          path=("device",), hint="'gk-stream devices' lists the audio devices") from None


@register_source
class AudioDeviceSource(Counters, Source):
    """Records from a sound card as float32 ``(channels, n)`` blocks."""

    type = "audio"
    Params = AudioSourceParams
    summary = "sound card input (sounddevice)"
    realtime = True

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._stream = None
        self._init_counters()

    def open(self, request: StreamFormat) -> StreamFormat:
        if request.dtype not in (None, "float32"):
            raise ConfigError(f"audio input delivers float32 samples but the pipeline requests dtype "
                              f"{request.dtype}", where=self.where, hint="remove 'dtype' or set float32")
        sd = _sounddevice(self.where)
        self.close()
        p = self.params
        info = _query(sd, p.device, "input", self.where)
        max_in = int(info.get("max_input_channels", 0))
        channels = request.channels or min(2, max_in)
        if channels < 1 or channels > max_in:
            raise ConfigError(f"audio input device '{info.get('name')}' has {max_in} input channels but the "
                              f"pipeline requests channels: {channels}", where=self.where,
                              hint="lower 'channels' or pick another device")
        sr = float(request.sample_rate or info.get("default_samplerate") or 48000.0)
        try:
            sd.check_input_settings(device=p.device, channels=channels, dtype="float32", samplerate=sr)
            stream = sd.InputStream(samplerate=sr, channels=channels, dtype="float32", device=p.device,
                                    latency=p.latency)
            stream.start()
        except Exception as exc:
            raise ConfigError(f"cannot open audio input '{info.get('name')}' with {channels} channels at "
                              f"{sr:g} Hz: {exc}", where=self.where,
                              hint="'gk-stream devices' lists what each device supports") from None
        self._stream, self._channels = stream, channels
        self._length = None if p.duration_s is None else int(round(p.duration_s * sr))
        return StreamFormat(sample_rate=sr, channels=channels, dtype="float32", length=self._length)

    def read(self, n: int) -> np.ndarray:
        if self._stream is None:
            raise not_open("audio source", "read")
        n = int(n)
        if self._length is not None:
            n = max(0, min(n, self._length - self._counts["samples"]))
        if n == 0:
            return np.zeros((self._channels, 0), dtype=np.float32)
        try:
            data, overflowed = self._stream.read(n)
        except Exception as exc:
            raise StreamFault(f"audio input failed: {exc}") from exc
        if overflowed:
            self._counts["overflows"] += 1
        block = np.ascontiguousarray(np.asarray(data, dtype=np.float32).reshape(-1, self._channels).T)
        self._counts["samples"] += block.shape[1]
        return block

    def close(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.stop()
            stream.close()


class AudioSinkParams(_AudioParams):
    """Plays the output on a sound card."""


@register_sink
class AudioDeviceSink(Counters, Sink):
    """Plays a real float32 time-domain signal on a sound card."""

    type = "audio"
    Params = AudioSinkParams
    summary = "sound card output (sounddevice)"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._stream = None
        self._spec: SignalSpec | None = None
        self._init_counters()

    def open(self, spec: SignalSpec) -> None:
        need_time_domain(spec, "audio sink", dtype="float32", where=self.where)
        sd = _sounddevice(self.where)
        self.close()
        p = self.params
        info = _query(sd, p.device, "output", self.where)
        max_out = int(info.get("max_output_channels", 0))
        if spec.channels > max_out:
            raise ConfigError(f"audio output device '{info.get('name')}' has {max_out} output channels but "
                              f"the signal has {spec.channels}", where=self.where,
                              hint="add a 'mix' stage to reduce the channels or pick another device")
        try:
            sd.check_output_settings(device=p.device, channels=spec.channels, dtype="float32",
                                     samplerate=spec.sample_rate)
            stream = sd.OutputStream(samplerate=spec.sample_rate, channels=spec.channels, dtype="float32",
                                     device=p.device, latency=p.latency)
            stream.start()
        except Exception as exc:
            raise ConfigError(f"cannot open audio output '{info.get('name')}' with {spec.channels} channels "
                              f"at {spec.sample_rate:g} Hz: {exc}", where=self.where,
                              hint="'gk-stream devices' lists what each device supports") from None
        self._stream, self._spec = stream, spec

    def write(self, block: np.ndarray) -> None:
        if self._stream is None:
            raise not_open("audio sink", "write")
        block = check_block(block, self._spec, "audio sink")
        try:
            underflowed = self._stream.write(np.ascontiguousarray(block.T, dtype=np.float32))
        except Exception as exc:
            raise StreamFault(f"audio output failed: {exc}") from exc
        if underflowed:
            self._counts["underflows"] += 1
        self._counts["samples"] += block.shape[1]

    def close(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.stop()  # plays what is queued
            stream.close()
