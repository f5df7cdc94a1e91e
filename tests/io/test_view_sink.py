"""The ``view`` sink: it takes snapshots without waiting, drops the oldest for a viewer that lags and
counts them, keeps the newest nfft samples of short blocks, and reports its drops in the run summary."""

import numpy as np
import pytest

from pygpukit_dsp import Pipeline
from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.io import SINKS, SynthSource, ViewSink
from pygpukit_dsp.signal import SignalSpec


def test_view_is_a_sink_type():
    assert SINKS["view"] is ViewSink


def test_a_lagging_viewer_loses_the_oldest_snapshots_and_they_are_counted():
    sink = ViewSink(queue=3)
    sink.open(SignalSpec(48000, 1, 4096))
    sink._interval = 0.0  # a snapshot of every block: nobody drains, so the queue overflows
    for i in range(10):
        sink.write(np.full((1, 4096), i, np.float32))
    snaps = sink.feed.drain()
    assert [int(s.data[0, 0]) for s in snaps] == [7, 8, 9]  # the newest stay
    assert sink.feed.dropped == 7 and sink.stats()["view_dropped"] == 7
    assert sink.stats()["samples"] == 40960


def test_snapshots_are_rate_limited_on_the_stream_thread():
    sink = ViewSink(fps=1)
    sink.open(SignalSpec(48000, 1, 256))
    for _ in range(1000):
        sink.write(np.zeros((1, 256), np.float32))
    assert sink.feed.taken == 1  # at most two a second: the rest cost a clock read
    assert sink.feed.dropped == 0


def test_short_blocks_give_the_newest_nfft_samples():
    sink = ViewSink(nfft=1024)
    sink.open(SignalSpec(48000, 2, 100))
    x = np.arange(2 * 3000, dtype=np.float32).reshape(2, 3000)
    for i in range(30):
        if i == 29:
            sink._next = 0.0
        else:
            sink._next = float("inf")
        sink.write(x[:, i * 100:(i + 1) * 100])
    (snap,) = sink.feed.drain()
    np.testing.assert_array_equal(snap.data, x[:, 3000 - 1024:])
    assert snap.end_s == pytest.approx(3000 / 48000)


def test_floor_above_ceiling_is_a_config_error():
    with pytest.raises(ConfigError, match="floor_db < ceil_db"):
        ViewSink(floor_db=0, ceil_db=-10)


def test_a_run_reports_the_view_drops_in_the_sink_stats():
    sink = ViewSink(queue=1, fps=60)
    p = Pipeline([], sample_rate=48000, channels=1, block_size=1024, backend="cpu",
                 source=SynthSource(signal="sine", freq_hz=1000, duration_s=1.0), sink=sink)
    summary = p.run()
    assert "view_dropped" in summary.sink_stats
    assert summary.sink_stats["view_dropped"] == sink.feed.dropped
    assert summary.sink_stats["samples"] == 48000
