"""The audio source/sink against a fake sounddevice module (no audio hardware here)."""

import sys
import types

import numpy as np
import pytest

from pygpukit_dsp.errors import ConfigError, StreamFault
from pygpukit_dsp.io.audio_device import AudioDeviceSink, AudioDeviceSource, audio_host_apis
from pygpukit_dsp.io.base import StreamFormat
from pygpukit_dsp.signal import SignalSpec

DEVICES = [
    {"name": "Mic Array", "hostapi": 0, "max_input_channels": 8, "max_output_channels": 0,
     "default_samplerate": 48000.0},
    {"name": "Speakers", "hostapi": 0, "max_input_channels": 0, "max_output_channels": 2,
     "default_samplerate": 44100.0},
]


class FakeStream:
    def __init__(self, samplerate, channels, dtype, device, latency, flags):
        self.samplerate, self.channels, self.dtype = samplerate, channels, dtype
        self.device, self.latency, self.flags = device, latency, list(flags)
        self.started = self.closed = False
        self.written: list[np.ndarray] = []
        self.count = 0

    def start(self):
        self.started = True

    def stop(self):
        self.started = False

    def close(self):
        self.closed = True

    def read(self, frames):
        data = (self.count + np.arange(frames * self.channels, dtype=np.float32)).reshape(frames, self.channels)
        self.count += frames * self.channels
        return data, (self.flags.pop(0) if self.flags else False)

    def write(self, data):
        assert data.shape[1] == self.channels and data.dtype == np.float32
        self.written.append(data.copy())
        return self.flags.pop(0) if self.flags else False


def make_fake(flags=()):
    sd = types.ModuleType("sounddevice")
    sd.streams = []

    def query_devices(device=None, kind=None):
        if device is None and kind is None:
            return DEVICES
        if device is None:
            return DEVICES[0 if kind == "input" else 1]
        if isinstance(device, int) and 0 <= device < len(DEVICES):
            return DEVICES[device]
        raise ValueError(f"No {kind} device matching {device!r}")

    def stream_factory(samplerate, channels, dtype, device, latency):
        s = FakeStream(samplerate, channels, dtype, device, latency, flags)
        sd.streams.append(s)
        return s

    def check(device=None, channels=None, dtype=None, samplerate=None):
        if samplerate not in (44100, 48000):
            raise ValueError("Invalid sample rate")

    sd.query_devices = query_devices
    sd.query_hostapis = lambda: [{"name": "ALSA", "devices": [0, 1], "default_input_device": 0,
                                  "default_output_device": 1}]
    sd.InputStream = stream_factory
    sd.OutputStream = stream_factory
    sd.check_input_settings = check
    sd.check_output_settings = check
    return sd


def test_missing_sounddevice_is_a_clear_error_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # makes `import sounddevice` fail
    src = AudioDeviceSource()  # building needs no sounddevice: it is imported when opened
    with pytest.raises(ConfigError, match="needs the sounddevice package") as e:
        src.open(StreamFormat())
    assert e.value.hint == "pip install 'pygpukit-dsp[audio]'"
    apis, reason = audio_host_apis()
    assert apis == [] and "pip install 'pygpukit-dsp[audio]'" in reason


def test_host_apis_list_devices(monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", make_fake())
    apis, reason = audio_host_apis()
    assert reason is None
    assert apis[0]["name"] == "ALSA" and apis[0]["default_input"] == 0
    assert [d["name"] for d in apis[0]["devices"]] == ["Mic Array", "Speakers"]
    assert apis[0]["devices"][0]["max_input_channels"] == 8


def test_source_reads_channels_first_and_counts_overflows(monkeypatch):
    sd = make_fake(flags=[False, True, False, True])
    monkeypatch.setitem(sys.modules, "sounddevice", sd)
    src = AudioDeviceSource(latency=0.01)
    assert src.realtime
    fmt = src.open(StreamFormat(channels=4))
    assert fmt == StreamFormat(sample_rate=48000.0, channels=4, dtype="float32", length=None)
    stream = sd.streams[0]
    assert stream.started and stream.latency == 0.01 and stream.channels == 4
    blocks = [src.read(16) for _ in range(4)]
    assert blocks[0].shape == (4, 16) and blocks[0].flags.c_contiguous
    np.testing.assert_array_equal(blocks[0][1, :3], [1, 5, 9])  # interleaved frames -> channels
    assert src.stats() == {"samples": 64, "overflows": 2, "underflows": 0, "dropped": 0}
    src.close()
    src.close()
    assert stream.closed


def test_source_duration_and_format_errors(monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", make_fake())
    src = AudioDeviceSource(duration_s=0.001)
    assert src.open(StreamFormat(sample_rate=48000, channels=1)).length == 48
    assert [src.read(40).shape[1] for _ in range(3)] == [40, 8, 0]
    with pytest.raises(ConfigError, match="has 8 input channels but the pipeline requests channels: 9"):
        AudioDeviceSource().open(StreamFormat(channels=9))
    with pytest.raises(ConfigError, match="requests dtype complex64"):
        AudioDeviceSource().open(StreamFormat(dtype="complex64"))
    with pytest.raises(ConfigError, match="Invalid sample rate") as e:
        AudioDeviceSource().open(StreamFormat(sample_rate=12345, channels=1))
    assert "gk-stream devices" in e.value.hint
    with pytest.raises(ConfigError, match="audio input device 7 is not usable") as e:
        AudioDeviceSource(device=7).open(StreamFormat())
    assert e.value.path == ("device",)


def test_sink_plays_frames_first_and_counts_underflows(monkeypatch):
    sd = make_fake(flags=[True, False])
    monkeypatch.setitem(sys.modules, "sounddevice", sd)
    sink = AudioDeviceSink(device=1)
    sink.open(SignalSpec(44100, 2, 8))
    sink.write(np.arange(16, dtype=np.float32).reshape(2, 8))
    sink.write(np.zeros((2, 3), np.float32))
    stream = sd.streams[0]
    np.testing.assert_array_equal(stream.written[0][:2], [[0, 8], [1, 9]])
    assert sink.stats() == {"samples": 11, "overflows": 0, "underflows": 1, "dropped": 0}
    sink.close()
    assert stream.closed


def test_sink_refuses_what_a_sound_card_cannot_play(monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", make_fake())
    with pytest.raises(ConfigError, match="has 2 output channels but the signal has 6") as e:
        AudioDeviceSink().open(SignalSpec(48000, 6, 8))
    assert "mix" in e.value.hint
    with pytest.raises(ConfigError, match="needs float32 samples, got complex64"):
        AudioDeviceSink().open(SignalSpec(48000, 1, 8, dtype="complex64"))


def test_stream_errors_while_running_are_stream_faults(monkeypatch):
    sd = make_fake()
    monkeypatch.setitem(sys.modules, "sounddevice", sd)
    src = AudioDeviceSource()
    src.open(StreamFormat(channels=1))

    def broken(frames):
        raise OSError("device unplugged")
    sd.streams[0].read = broken
    with pytest.raises(StreamFault, match="audio input failed: device unplugged"):
        src.read(4)
