"""Pipeline.start() / Session.start(): a run on a background thread with live stats, stop and iteration."""

import time

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, Session, StreamFault, stages
from pygpukit_dsp.io import CallbackSink, NumpySink, SynthSource
from pygpukit_dsp.io.base import StreamFormat


def _gain(name="g", **kw):
    return Pipeline([stages.Gain(linear=2.0)], name=name, sample_rate=8000, channels=2, block_size=100,
                    backend="cpu", **kw)


def test_without_a_sink_the_handle_iterates_over_every_output_block():
    p = _gain()
    with p.start(source=SynthSource(signal="sine", freq_hz=440, duration_s=1.0)) as run:
        blocks = list(run)
    assert len(blocks) == 80 and all(b.shape == (2, 100) for b in blocks)
    src = SynthSource(signal="sine", freq_hz=440)
    src.open(StreamFormat(8000, 2))
    np.testing.assert_array_equal(np.concatenate(blocks, axis=1), p.process(src.read(8000)))
    assert run.summary.ended_by == "source end" and run.summary.blocks == 80
    assert p.source is None and p.sink is None  # start() ran a copy with that source


def test_stats_are_live_and_stop_drains_and_returns_the_summary():
    sink = NumpySink()
    run = _gain().start(source=SynthSource(signal="noise", rate="realtime"), sink=sink)
    try:
        deadline = time.monotonic() + 10
        while run.stats().get("blocks", 0) < 5:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        st = run.stats()
        assert st["latency_us"]["count"] >= 5 and st["sink_stats"]["samples"] >= 500
        assert run.running
    finally:
        (summary,) = run.stop()
    assert not run.running and summary.ended_by == "stop"
    assert sink.result().shape[1] == summary.samples_out == summary.blocks * 100
    with pytest.raises(RuntimeError, match="tap=True"):  # a sink takes the blocks: no iteration
        iter(run).__next__()


def test_a_fault_is_raised_by_stop_and_by_the_with_block():
    def failing(block):
        raise OSError("disk gone")

    with pytest.raises(StreamFault, match="sink 'callback' failed at block 0: .*disk gone"):
        with _gain().start(source=SynthSource(duration_s=1.0), sink=CallbackSink(fn=failing)) as run:
            run.wait(10)


def test_a_session_handle_names_its_streams():
    a = _gain("a", source=SynthSource(duration_s=0.5))
    b = _gain("b", source=SynthSource(duration_s=0.25))
    with Session([a, b]).start(tap=True) as run:
        got = {}
        for name, block in run:
            got[name] = got.get(name, 0) + 1
    assert got == {"a": 40, "b": 20}
    assert [s.pipeline for s in run.summaries] == ["a", "b"]
    assert set(run.stats()) == {"a", "b"}
