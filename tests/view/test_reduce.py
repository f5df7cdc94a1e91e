"""The viewer's reduction: max-hold over bins, the frame-rate limit, spectra at the right frequency and
level, frames-domain input drawn as it is, and a frame whose size does not grow with the stream's rate."""

import base64
import json

import numpy as np
import pytest

from pygpukit_dsp.io.view_sink import Snapshot, ViewSink
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.view.reduce import (DB_STEP, FrameLimiter, SinkAnalysis, max_hold_bins, quantise_db,
                                      quantise_signed)


def decode_db(b64, floor_db):
    return floor_db + np.frombuffer(base64.b64decode(b64), np.uint8) * DB_STEP


def tone(fs, f, n, amplitude=0.5, complex_=False, channels=1):
    t = np.arange(n) / fs
    x = amplitude * (np.exp(2j * np.pi * f * t) if complex_ else np.cos(2 * np.pi * f * t))
    return np.tile(x, (channels, 1)).astype(np.complex64 if complex_ else np.float32)


def test_max_hold_keeps_a_one_bin_peak_that_a_mean_would_flatten():
    x = np.full(4096, -100.0)
    x[1234] = -3.0
    y = max_hold_bins(x, 512)
    assert y.shape == (512,)
    assert y.max() == -3.0 and int(np.argmax(y)) == 1234 * 512 // 4096
    assert np.count_nonzero(y > -100) == 1
    assert max_hold_bins(x[:100], 512).shape == (100,)  # fewer bins than points: as they are


def test_the_frame_limiter_lets_at_most_fps_frames_a_second_through():
    lim = FrameLimiter(30)
    ticks = np.arange(0, 2.0, 0.001)  # a pump polling every millisecond for two seconds
    passed = [t for t in ticks if lim.ready(t)]
    assert 58 <= len(passed) <= 61
    # slots of 1/30 s: any 31 frames in a row span a second at least (a late tick is not made up twice)
    assert min(b - a for a, b in zip(passed, passed[30:])) >= 1.0 - 1e-9


def test_quantised_values_come_back_within_one_step():
    db = np.array([-130.0, -120.0, -60.2, 0.0, 7.3, 500.0])
    back = decode_db(quantise_db(db, -120.0), -120.0)
    np.testing.assert_allclose(back[1:5], db[1:5], atol=DB_STEP / 2 + 1e-9)
    assert back[0] == -120.0 and back[-1] == -120.0 + 255 * DB_STEP  # clipped to the axis
    q, scale = quantise_signed(np.array([0.0, 0.25, -0.5]))
    assert scale == 0.5
    assert np.frombuffer(base64.b64decode(q), np.int8).tolist() == [0, 64, -127]


def analysis(spec, **params):
    sink = ViewSink(**params)
    return SinkAnalysis("view", spec, sink.params)


def test_a_real_tone_peaks_at_its_frequency_and_level():
    spec = SignalSpec(48000, 2, 1024)
    a = analysis(spec)
    a.add(Snapshot(tone(48000, 3000, 2048, channels=2), 1.0))
    frame = a.frame()
    assert frame["peak"]["x"] == pytest.approx(3000, abs=48000 / 2048)
    assert frame["peak"]["db"] == pytest.approx(-6.02, abs=0.1)  # amplitude 0.5: -6 dB re full scale
    row = decode_db(frame["spectrum"][0], a.params.floor_db)
    axis = a.meta()["axis"]
    x = axis["first"] + (axis["last"] - axis["first"]) * (np.argmax(row) + 0.5) / axis["points"]
    assert x == pytest.approx(3000, abs=2 * 48000 / 2048)
    assert frame["levels"]["rms_db"] == [pytest.approx(-9.03, abs=0.1)] * 2
    assert "constellation" not in frame and len(frame["scope"]["re"]) == 2


def test_spectra_between_two_frames_are_max_held_into_the_next():
    spec = SignalSpec(48000, 1, 2048)
    a = analysis(spec)
    a.add(Snapshot(tone(48000, 1000, 2048), 0.5))
    a.add(Snapshot(tone(48000, 9000, 2048, amplitude=0.1), 1.0))
    frame = a.frame()
    row = decode_db(frame["spectrum"][0], a.params.floor_db)
    hz = np.arange(row.size) * (24000 / row.size)
    assert row[np.abs(hz - 1000).argmin() - 1:np.abs(hz - 1000).argmin() + 2].max() > -8
    assert row[np.abs(hz - 9000).argmin() - 1:np.abs(hz - 9000).argmin() + 2].max() > -22
    assert frame["peak"]["x"] == pytest.approx(1000, abs=24)
    assert not a.pending  # the next frame starts empty


def test_a_complex_stream_has_a_centred_axis_and_a_constellation():
    fs = 1.024e6
    spec = SignalSpec(fs, 1, 8192, dtype="complex64")
    a = analysis(spec)
    a.add(Snapshot(tone(fs, -250e3, 8192, complex_=True), 1.0))
    frame = a.frame()
    assert a.meta()["axis"]["first"] == -fs / 2
    assert frame["peak"]["x"] == pytest.approx(-250e3, abs=fs / 2048)
    assert frame["peak"]["db"] == pytest.approx(-6.02, abs=0.1)
    iq = np.frombuffer(base64.b64decode(frame["constellation"]["q"]), np.int8).reshape(-1, 2)
    assert iq.shape == (256, 2)
    assert len(frame["scope"]["im"]) == 1


def test_frames_are_drawn_as_they_are_with_their_bin_spacing():
    spec = SignalSpec(1000, 1, 8, dtype="float32", domain="frames", bins=513)
    a = analysis(spec, bin_hz=46.875, levels="power")
    frames = np.full((1, 8, 513), 1e-6, np.float32)
    frames[0, 3, 64] = 1.0  # one frame of the snapshot holds the peak: max-hold over frames keeps it
    a.add(Snapshot(frames, 0.008))
    frame = a.frame()
    assert frame["peak"]["x"] == pytest.approx(64 * 46.875)
    assert frame["peak"]["db"] == pytest.approx(0.0)
    assert "scope" not in frame and "levels" not in frame


def test_frames_in_fft_order_are_drawn_centred_when_shifted():
    spec = SignalSpec(1000, 1, 4, dtype="complex64", domain="frames", bins=1024)
    a = analysis(spec, bin_hz=1000, shift=True)
    frames = np.zeros((1, 4, 1024), np.complex64) + 1e-3
    frames[0, :, 1024 - 250] = 10.0  # bin -250: -250 kHz
    a.add(Snapshot(frames, 0.004))
    assert a.meta()["axis"]["first"] == -512000
    assert a.frame()["peak"]["x"] == pytest.approx(-250000)


def test_a_gigasample_stream_makes_a_frame_of_a_few_kilobytes():
    """A 1 Gsps complex block of 2^20 samples on 4 channels reaches the browser as a frame of bounded size."""
    spec = SignalSpec(1e9, 4, 1 << 20, dtype="complex64")
    sink = ViewSink()
    sink.open(spec)
    rng = np.random.default_rng(1)
    block = (rng.standard_normal((4, 1 << 20)) + 1j * rng.standard_normal((4, 1 << 20))).astype(np.complex64) * 0.01
    block += tone(1e9, 123e6, 1 << 20, complex_=True, channels=4, amplitude=0.3)
    sink.write(block)
    (snap,) = sink.feed.drain()
    assert snap.data.shape == (4, sink.params.nfft)  # the sink copied the newest nfft samples, not the block
    a = SinkAnalysis("rx", spec, sink.params)
    a.add(snap)
    frame = a.frame()
    size = len(json.dumps(frame, separators=(",", ":")))
    assert size < 12000, size  # 4 traces of 512 spectrum points and 512 IQ scope samples, base64
    small = SignalSpec(48000, 4, 4096, dtype="complex64")  # the same sink on a slow stream: the same size
    b = SinkAnalysis("rx", small, sink.params)
    b.add(Snapshot(block[:, :4096], 1.0))
    assert abs(len(json.dumps(b.frame(), separators=(",", ":"))) - size) < 100
    assert frame["peak"]["x"] == pytest.approx(123e6, abs=1e9 / 2048)
    assert len(frame["spectrum"]) == 4 and len(base64.b64decode(frame["spectrum"][0])) == 512
