"""A fake sounddevice module for fault injection: the real native callback, a fake device clock.

``_StreamBase`` takes the callback address and user data exactly as sounddevice would and, once
started, calls the native callback (``_native.invoke_audio_callback``) from a thread at the
device's rate: so the rings, counters and latency measurement under test are the real ones.
Knobs make the device misbehave: ``die_after`` callbacks (it goes away, with or without
PortAudio's finished callback), per-callback status ``flags``, a failing ``start``.
Device input channel c carries ``c * 1000 + frame index``.
"""

from __future__ import annotations

import threading
import time
import types

import numpy as np

from pygpukit_dsp import _native

DEVICES = [
    {"name": "Mic Array", "hostapi": 0, "max_input_channels": 8, "max_output_channels": 0,
     "default_samplerate": 48000.0},
    {"name": "Speakers", "hostapi": 0, "max_input_channels": 0, "max_output_channels": 2,
     "default_samplerate": 44100.0},
    {"name": "Interface", "hostapi": 0, "max_input_channels": 4, "max_output_channels": 4,
     "default_samplerate": 48000.0},
    {"name": "Other API", "hostapi": 1, "max_input_channels": 0, "max_output_channels": 2,
     "default_samplerate": 48000.0},
]
RATES = (44100, 48000)


def device_input(channel: int, start: int, frames: int) -> np.ndarray:
    return (channel * 1000 + np.arange(start, start + frames)).astype(np.float32)


class FakeStream:
    def __init__(self, sd, kind, samplerate=None, blocksize=None, device=None, channels=None, dtype=None,
                 latency=None, callback=None, userdata=None, wrap_callback="array", finished_callback=None,
                 **_):
        assert wrap_callback is None, "the native callback is a C function pointer"
        self.sd, self.kind, self.samplerate, self.device, self.channels = sd, kind, samplerate, device, channels
        self.latency, self.callback, self.userdata, self.finished = latency, callback, userdata, finished_callback
        self.dtype = dtype
        self.started = self.closed = self.aborted = False
        self.callbacks = 0
        self.played: list[np.ndarray] = []
        self._run = threading.Event()
        self._thread: threading.Thread | None = None
        sd.streams.append(self)

    @property
    def ichannels(self) -> int:
        return self.channels[0] if self.kind == "duplex" else (self.channels if self.kind == "input" else 0)

    @property
    def ochannels(self) -> int:
        return self.channels[1] if self.kind == "duplex" else (self.channels if self.kind == "output" else 0)

    @property
    def active(self) -> bool:
        return self._run.is_set()

    def start(self):
        if self.sd.config.get("fail_start"):
            raise RuntimeError("Error starting stream: Device unavailable [PaErrorCode -9985]")
        self.started = True
        self._run.set()
        self._thread = threading.Thread(target=self._clock, daemon=True)
        self._thread.start()

    def _clock(self):
        cfg = self.sd.config
        frames = cfg.get("frames", 256)
        period = frames / self.samplerate
        flags = list(cfg.get("flags", ()))
        t0 = time.monotonic()
        pos = 0
        while self._run.is_set():
            if cfg.get("die_after") is not None and self.callbacks >= cfg["die_after"]:
                if cfg.get("finish_on_death", True) and self.finished is not None:
                    self.finished()
                self._run.clear()
                return
            indata = None
            if self.ichannels:
                indata = np.stack([device_input(c, pos, frames) for c in range(self.ichannels)], axis=1)
            outdata = np.full((frames, self.ochannels), np.nan, np.float32) if self.ochannels else None
            now = pos / self.samplerate  # stream times from the device's clock, as a sound card's
            flag = flags[self.callbacks] if self.callbacks < len(flags) else 0
            _native.invoke_audio_callback(self.callback, self.userdata, indata, outdata, frames,
                                          now - 0.002, now, now + 0.003, flag)
            if outdata is not None:
                self.played.append(outdata)
            self.callbacks += 1
            pos += frames
            time.sleep(max(0.0, t0 + (self.callbacks * period) / cfg.get("speed", 1.0) - time.monotonic()))

    def _halt(self):
        self._run.clear()
        if self._thread is not None:
            self._thread.join()

    def stop(self, ignore_errors=True):
        self._halt()

    def abort(self, ignore_errors=True):
        self.aborted = True
        self._halt()

    def close(self, ignore_errors=True):
        self._halt()
        self.closed = True

    def output(self) -> np.ndarray:
        """Everything the device played, (frames, channels)."""
        return np.concatenate(self.played) if self.played else np.zeros((0, self.ochannels), np.float32)


def make_fake(**config) -> types.ModuleType:
    sd = types.ModuleType("sounddevice")
    sd.streams = []
    sd.config = dict(config)

    def query_devices(device=None, kind=None):
        if device is None and kind is None:
            return [dict(d, index=i) for i, d in enumerate(DEVICES)]
        key = f"max_{kind}_channels"
        if device is None:
            i = 0 if kind == "input" else 1
            return dict(DEVICES[i], index=i)
        if isinstance(device, int):
            if 0 <= device < len(DEVICES):
                return dict(DEVICES[device], index=device)
            raise ValueError(f"Error querying device {device}")
        hits = [i for i, d in enumerate(DEVICES) if device.lower() in d["name"].lower() and d[key] > 0]
        if len(hits) != 1:
            raise ValueError(f"No {kind} device matching {device!r}" if not hits
                             else f"Multiple {kind} devices found for {device!r}")
        return dict(DEVICES[hits[0]], index=hits[0])

    def check(device=None, channels=None, dtype=None, samplerate=None):
        if samplerate not in RATES:
            raise ValueError("Invalid sample rate [PaErrorCode -9997]")

    sd.query_devices = query_devices
    sd.query_hostapis = lambda: [
        {"name": "ALSA", "devices": [0, 1, 2], "default_input_device": 0, "default_output_device": 1},
        {"name": "OSS", "devices": [3], "default_input_device": -1, "default_output_device": 3}]
    sd.check_input_settings = check
    sd.check_output_settings = check
    sd._ffi = types.SimpleNamespace(cast=lambda ctype, value: int(value))
    sd._StreamBase = lambda kind, **kw: FakeStream(sd, kind, **kw)
    return sd
