"""The audio and duplex sources/sinks with a fake sounddevice driving the real native callback.

This is fault injection and configuration checking: the JACK server tests
(test_audio_live.py) are where the live path meets a real audio server.
"""

import sys
import threading
import time

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, Session, stages
from pygpukit_dsp.errors import ConfigError, StreamFault
from pygpukit_dsp.io import (AudioDeviceSink, AudioDeviceSource, CallbackSink, CallbackSource, DuplexSink, DuplexSource,
                             NumpySink, SynthSource)
from pygpukit_dsp.io.base import StreamFormat
from pygpukit_dsp.io import portaudio
from pygpukit_dsp.io.portaudio import audio_devices
from pygpukit_dsp.signal import SignalSpec


def _duplex(n_stages=None, **source):
    return Pipeline(n_stages or [stages.Gain(linear=2.0)], name="dx", block_size=256, backend="cpu",
                    source=DuplexSource(**source), sink=DuplexSink())


def test_missing_sounddevice_is_a_clear_error_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # makes `import sounddevice` fail
    src = AudioDeviceSource()  # building needs no sounddevice: it is imported when opened
    with pytest.raises(ConfigError, match="needs the sounddevice package") as e:
        src.open(StreamFormat())
    assert e.value.hint == "pip install 'pygpukit-dsp[audio]'"
    devices, reason = audio_devices()
    assert devices == [] and "pip install 'pygpukit-dsp[audio]'" in reason


def test_devices_are_listed_with_host_api_channels_and_defaults(fake):
    fake()
    devices, reason = audio_devices()
    assert reason is None
    assert [(d["index"], d["name"], d["host_api"]) for d in devices][:2] == [(0, "Mic Array", "ALSA"),
                                                                            (1, "Speakers", "ALSA")]
    assert devices[0]["max_input_channels"] == 8 and devices[0]["default_input"]
    assert devices[1]["default_output"] and not devices[1]["default_input"]
    assert devices[3]["host_api"] == "OSS"


def test_duplex_plays_the_processed_input_exactly_preroll_blocks_later(fake, device_input, loop_check):
    sd = fake(frames=64)  # the device's period differs from the block size: the rings re-cut it
    p = _duplex(device="interface", input_channels=[3, 1], preroll_blocks=2)
    p.sink = DuplexSink(output_channels=[2, 0])
    s = p.run(blocks=40)
    assert s.blocks == 40 and s.ended_by == "block limit"
    stream = sd.streams[0]
    assert stream.kind == "duplex" and stream.channels == (4, 3) and stream.device == (2, 2)
    played = stream.output()
    preroll = 2 * 256
    n = 40 * 256
    a = s.audio
    assert np.all(played[:preroll] == 0)  # the pre-roll: silence, not an underrun
    # pipeline channel 0 = device input 3 -> device output 2; channel 1 = input 1 -> output 0. The
    # fake device keeps its clock on a loaded machine too, so the pipeline may be late: then the
    # stream counts underruns (and overruns), and only their silence (and lost input) may differ.
    counted = loop_check.Counted.from_audio(a)
    for out_ch, in_ch in ((2, 3), (0, 1)):
        y, rec = 2 * device_input(in_ch, 0, n)[np.newaxis], played[:, out_ch][np.newaxis]
        recorded = np.ones(rec.shape[1], bool)
        stretches = loop_check.align(rec, recorded, y, 0, atol=0.0)
        spans = loop_check.spans(stretches, rec, recorded, n, 0, preroll)
        assert loop_check.unaccounted(spans, counted, 64, settle=0) == []  # a gain has no memory
        if counted.nothing:
            assert stretches == [loop_check.Stretch(preroll, preroll + n, preroll)]
    assert np.all(played[:, 1] == 0)  # an unmapped output channel stays silent
    assert a["kind"] == "duplex" and a["preroll_frames"] == preroll and a["preroll_blocks"] == 2
    assert a["input_channels"] == [3, 1] and a["output_channels"] == [2, 0]
    assert a["input_overflows"] == a["output_underflows"] == 0
    # stream times from the fake device's clock: DAC - ADC = 5 ms within a callback, plus the
    # 512-frame pre-roll, plus the silence of any underrun, less any input an overrun dropped
    lat = a["adc_to_dac_ms"]
    assert lat["count"] >= 30
    assert lat["min"] >= 5.0 + (preroll - a["ring_overrun_frames"]) / 48.0 - 1e-3
    assert lat["max"] <= 5.0 + (preroll + a["ring_underrun_frames"]) / 48.0 + 1e-3
    if counted.nothing:
        assert lat["p50"] == pytest.approx(5.0 + preroll / 48.0, abs=1e-3)
    assert s.source_stats["samples"] == s.sink_stats["samples"] == n
    assert "pre-roll 2 blocks (512 frames, 10.7 ms)" in s.format() and "ADC-to-DAC p50" in s.format()


def test_a_device_period_of_several_blocks_makes_no_late_blocks(fake):
    fake(frames=1024)  # each callback brings four 256-frame blocks at once: none of them is late
    p = Pipeline([stages.Gain(linear=1.0)], name="long_period", block_size=256, backend="cpu",
                 source=AudioDeviceSource(device=0, input_channels=[0]), sink=CallbackSink(fn=lambda b: None))
    s = p.run(blocks=40)
    assert s.audio["late_blocks"] == 0 and s.source_stats["late_blocks"] == 0
    assert s.source_stats["samples"] == 40 * 256


def test_status_flags_overruns_and_late_blocks_are_counted(fake):
    sd = fake(frames=256, flags=[0, 2, 0, 4, 6])  # input overflow, output underflow, both

    calls = [0]

    def slow_sink(block):
        calls[0] += 1
        if calls[0] == 10:
            time.sleep(0.2)  # 37 blocks of device time: the 8-block input ring overflows

    p = Pipeline([stages.Gain(linear=1.0)], name="slow", block_size=256, backend="cpu",
                 source=AudioDeviceSource(device=0, input_channels=[0], ring_blocks=8), sink=CallbackSink(fn=slow_sink))
    s = p.run(blocks=30)
    a = s.audio
    assert a["input_overflows"] == 2
    assert a["ring_overruns"] >= 1 and a["ring_overrun_frames"] > 0
    assert s.source_stats["dropped"] == a["ring_overrun_frames"]  # lost input is "dropped", never silent
    assert a["late_blocks"] >= 1 and s.source_stats["late_blocks"] == a["late_blocks"]
    assert sd.streams[0].kind == "input"
    assert "ring overruns" in s.format()


def test_output_ring_underruns_and_late_blocks_when_the_pipeline_is_slow(fake):
    sd = fake(frames=256)
    calls = [0]

    def read(n):
        calls[0] += 1
        if calls[0] == 20:
            time.sleep(0.1)  # longer than the 2-block pre-roll and what is queued
        return np.ones((1, n), np.float32)

    p = Pipeline([stages.Gain(linear=1.0)], name="out", sample_rate=44100, block_size=256, backend="cpu",
                 source=CallbackSource(fn=read, rate="realtime"), sink=AudioDeviceSink(device="speak", ring_blocks=4))
    s = p.run(blocks=40)
    a = s.audio
    assert a["ring_underruns"] >= 1 and a["ring_underrun_frames"] > 0
    assert s.sink_stats["ring_underruns"] == a["ring_underrun_frames"] and s.sink_stats["late_blocks"] >= 1
    played = sd.streams[0].output()[:, 0]
    # every block was played, none dropped: the silence of the underrun sits between them
    assert np.count_nonzero(played == 1.0) == 40 * 256


def test_a_device_that_goes_away_is_a_stream_fault_naming_the_part_and_block(fake, device_input):
    sd = fake(frames=256, die_after=12)
    sink = NumpySink()
    p = Pipeline([stages.Gain(linear=1.0)], name="gone", block_size=256, backend="cpu",
                 source=AudioDeviceSource(device="mic", input_channels=[0]), sink=sink)
    with pytest.raises(StreamFault) as e:
        p.run(blocks=100)
    msg = str(e.value)
    assert "source 'audio' failed at block 12" in msg and "'Mic Array' (ALSA) stopped delivering" in msg
    assert "the stream finished" in msg and e.value.block == 12 and e.value.part == "source 'audio'"
    assert e.value.summary.blocks == 12 and e.value.summary.ended_by == "fault"
    np.testing.assert_array_equal(sink.result()[0], device_input(0, 0, 12 * 256))  # every block before it
    assert sd.streams[0].closed and sd.streams[0].aborted


def test_a_device_that_stops_calling_back_times_out(fake):
    fake(frames=256, die_after=5, finish_on_death=False)
    p = Pipeline([stages.Gain(linear=1.0)], name="hung", block_size=256, backend="cpu",
                 source=AudioDeviceSource(input_channels=[0], device_timeout_s=0.3), sink=NumpySink())
    # (how long it waited: 0.3 s and a slice, or more where the machine is loaded)
    with pytest.raises(StreamFault, match=r"failed at block 5: .*no callback for (0\.[3-9]|[1-9]\d*\.\d) s"):
        p.run(blocks=100)


def test_a_stopped_run_returns_from_a_waiting_read(fake):
    fake(frames=256, die_after=3, finish_on_death=False)
    p = Pipeline([stages.Gain(linear=1.0)], name="stop", block_size=256, backend="cpu",
                 source=AudioDeviceSource(input_channels=[0], device_timeout_s=60), sink=NumpySink())
    session = Session([p])

    def stop_once_the_read_waits():  # the three blocks are in: the next read waits for the device
        deadline = time.monotonic() + 30
        while session.live_stats().get("stop", {}).get("blocks", 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        session.stop("SIGINT")

    threading.Thread(target=stop_once_the_read_waits, daemon=True).start()
    (s,) = session.run()  # without the interrupt this read would wait 60 s for the device
    assert s.ended_by == "SIGINT" and s.blocks == 3


def test_configuration_errors_name_the_device_and_what_it_supports(fake):
    fake()
    with pytest.raises(ConfigError, match="'Mic Array' \\(ALSA\\) cannot run 1 channels at 12345 Hz") as e:
        AudioDeviceSource(device=0).open(StreamFormat(sample_rate=12345, channels=1))
    assert "it supports: 44100 Hz, 48000 Hz" in str(e.value)
    with pytest.raises(ConfigError, match="No input device matching 'nothing'") as e:
        AudioDeviceSource(device="nothing").open(StreamFormat())
    assert "0 'Mic Array' (ALSA, 8 in, 0 out, 48000 Hz)" in e.value.hint and e.value.path == ("device",)
    with pytest.raises(ConfigError, match="input channel 8 does not exist on 'Mic Array'"):
        AudioDeviceSource(input_channels=[0, 8]).open(StreamFormat())
    with pytest.raises(ConfigError, match="maps 2 channels but the pipeline has 3"):
        AudioDeviceSource(input_channels=[0, 1]).open(StreamFormat(channels=3))
    with pytest.raises(ConfigError, match="names a device channel twice"):
        AudioDeviceSource(input_channels=[1, 1]).open(StreamFormat())
    with pytest.raises(ConfigError, match="'Speakers' \\(ALSA\\) has 2 output channels but 6 are needed") as e:
        AudioDeviceSink().open(SignalSpec(44100, 6, 8))
    assert "mix" in e.value.hint
    with pytest.raises(ConfigError, match="needs float32 samples, got complex64"):
        AudioDeviceSink().open(SignalSpec(48000, 1, 8, dtype="complex64"))
    with pytest.raises(ConfigError, match="requests dtype complex64"):
        AudioDeviceSource().open(StreamFormat(dtype="complex64"))


def test_duplex_sink_needs_a_duplex_source_one_rate_and_one_host_api(fake):
    fake()
    with pytest.raises(ConfigError, match="plays in the stream of a 'duplex' source, but the source is 'synth'"):
        Pipeline([], name="x", sample_rate=48000, channels=1, block_size=64, backend="cpu",
                 source=SynthSource(duration_s=0.01), sink=DuplexSink()).run()
    p = _duplex([stages.Resample(up=2, down=1)], device="interface", input_channels=[0])
    with pytest.raises(ConfigError, match="output runs at 96000 Hz but the stream at 48000 Hz"):
        p.run(blocks=1)
    p = _duplex(device=[2, 3], input_channels=[0])
    with pytest.raises(ConfigError, match="different host APIs"):
        p.run(blocks=1)
    with pytest.raises(ConfigError, match=r"must be \[input, output\]"):
        _duplex(device=[2, 2, 2]).run(blocks=1)


def test_a_stream_that_cannot_start_is_a_stream_fault(fake):
    fake(fail_start=True)
    p = Pipeline([], name="x", block_size=64, backend="cpu", source=AudioDeviceSource(input_channels=[0]),
                 sink=NumpySink())
    with pytest.raises(StreamFault, match="source 'audio' failed at block 0: .*cannot start the input stream "
                                          "on 'Mic Array' \\(ALSA\\): Error starting stream"):
        p.run(blocks=4)


def test_audio_source_duration_limit(fake):
    fake(frames=128)
    p = Pipeline([], name="d", block_size=256, backend="cpu",
                 source=AudioDeviceSource(input_channels=[0], duration_s=0.05), sink=NumpySink())
    s = p.run()
    assert s.samples_in == 2400 and s.blocks == 10 and s.ended_by == "source end"  # 9 full + 96


def _located(component, where):
    component.where = where  # as the YAML loader sets it
    return component


def test_a_second_stream_on_an_open_device_side_is_a_config_error_at_its_place(fake):
    sd = fake()
    first = Pipeline([], name="a", block_size=256, backend="cpu", sink=NumpySink(),
                     source=_located(AudioDeviceSource(device="mic", input_channels=[0]), "two.yaml:8:13"))
    second = Pipeline([], name="b", block_size=256, backend="cpu", sink=NumpySink(),
                      source=_located(AudioDeviceSource(device="mic", input_channels=[1]), "two.yaml:12:13"))
    with pytest.raises(ConfigError) as exc:
        Session([first, second]).run(blocks=2)
    assert exc.value.where == "two.yaml:12:13"
    assert "already open in this process, by the audio source at two.yaml:8:13" in exc.value.message
    assert exc.value.hint == portaudio.ONE_STREAM_PER_DEVICE
    assert sd.streams == []  # found before any stream opened
    # the output of a duplex stream is taken too: an audio sink on it is refused at the sink
    dx = _duplex(device="interface", input_channels=[0])
    player = Pipeline([], name="p", sample_rate=48000, channels=1, block_size=256, backend="cpu",
                      source=SynthSource(duration_s=0.1),
                      sink=_located(AudioDeviceSink(device="interface"), "two.yaml:20:11"))
    with pytest.raises(ConfigError, match="audio output 'Interface' .ALSA. is already open") as exc:
        Session([dx, player]).run(blocks=2)
    assert exc.value.where == "two.yaml:20:11"


def test_a_device_closed_by_one_run_opens_for_the_next_and_input_and_output_streams_share_one(fake):
    fake()
    for _ in range(2):  # the claim ends with the run
        s = Pipeline([], name="a", block_size=256, backend="cpu", sink=NumpySink(),
                     source=AudioDeviceSource(device="interface", input_channels=[0])).run(blocks=2)
        assert s.blocks == 2
    recorder = Pipeline([], name="rec", block_size=256, backend="cpu", sink=NumpySink(),
                        source=AudioDeviceSource(device="interface", input_channels=[0]))
    player = Pipeline([], name="play", sample_rate=48000, channels=1, block_size=256, backend="cpu",
                      source=SynthSource(duration_s=0.05), sink=AudioDeviceSink(device="interface"))
    assert [s.blocks for s in Session([recorder, player]).run(blocks=4)] == [4, 4]


def test_a_duplex_stream_that_never_started_does_not_blame_the_host_api(fake):
    fake(fail_start=True)
    with pytest.raises(StreamFault) as exc:
        _duplex(device="interface", input_channels=[0]).run(blocks=4)
    audio = exc.value.summary.audio
    assert audio["adc_to_dac_ms"] is None and audio["adc_to_dac_unmeasured"] == "the stream never started"
    assert "ADC-to-DAC not measured (the stream never started)" in portaudio.LiveAudio.format_report(audio)
