"""StreamRunner: every sample kept, limits, summary figures, faults."""

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, StreamFault, stages
from pygpukit_dsp.io import CallbackSource, NumpySink, NumpySource


def _pipe(x, block, sink=None, stage_list=None):
    return Pipeline(stage_list or [stages.Gain(linear=2.0)], sample_rate=1000, block_size=block,
                    backend="cpu", source=NumpySource(array=x), sink=sink or NumpySink())


def test_run_keeps_every_sample_including_last_partial_block():
    x = np.random.default_rng(0).standard_normal((2, 1000)).astype(np.float32)
    sink = NumpySink()
    s = _pipe(x, 96, sink).run()
    np.testing.assert_allclose(sink.result(), 2 * x, rtol=1e-6)
    assert s.blocks == 11 and s.samples_in == 1000 and s.samples_out == 1000
    assert s.ended_by == "source end"
    assert s.latency_us["count"] == 11
    assert s.backend == "cpu" and s.backend_reason == "requested"


def test_run_equals_process():
    x = np.random.default_rng(1).standard_normal((1, 5000)).astype(np.float32)
    chain = [stages.Fir(taps=np.hanning(33)), stages.Stft(nfft=128, hop=64), stages.Power()]
    sink = NumpySink()
    _pipe(x, 640, sink, chain).run()
    ref = Pipeline([stages.Fir(taps=np.hanning(33)), stages.Stft(nfft=128, hop=64), stages.Power()],
                   sample_rate=1000, block_size=640, backend="cpu").process(x)
    np.testing.assert_array_equal(sink.result(), ref)


def test_block_and_duration_limits():
    x = np.zeros((1, 10000), np.float32)
    assert _pipe(x, 100).run(blocks=7).blocks == 7
    s = _pipe(x, 100).run(duration=0.25)  # 250 samples at 1 kHz -> 3 blocks
    assert s.blocks == 3 and s.ended_by == "duration limit"


def test_short_reads_are_reblocked():
    x = np.arange(1000, dtype=np.float32)[None]
    pos = [0]

    def fn(n):
        n = min(n, 37, 1000 - pos[0])  # a source that returns small chunks
        out = x[:, pos[0]:pos[0] + n]
        pos[0] += n
        return out if n else None

    sink = NumpySink()
    p = Pipeline([stages.Gain(db=0)], sample_rate=1000, channels=1, block_size=128, backend="cpu",
                 source=CallbackSource(fn=fn), sink=sink)
    s = p.run()
    np.testing.assert_array_equal(sink.result(), x)
    assert s.blocks == 8


def test_source_failure_is_a_stream_fault_with_summary():
    calls = [0]

    def fn(n):
        calls[0] += 1
        if calls[0] > 3:
            raise OSError("disk gone")
        return np.zeros((1, n), np.float32)

    p = Pipeline([stages.Gain(db=0)], sample_rate=1000, channels=1, block_size=10, backend="cpu",
                 source=CallbackSource(fn=fn), sink=NumpySink())
    with pytest.raises(StreamFault, match="disk gone") as ei:
        p.run()
    assert ei.value.summary.blocks == 3


def test_deadline_misses_counted():
    x = np.zeros((1, 1000), np.float32)
    p = _pipe(x, 100)
    p.qos = p.qos.model_copy(update={"deadline_ms": 1e-6})  # impossible deadline: every block misses
    s = p.run()
    assert s.deadline_misses == s.blocks == 10


def test_progress_callback_sees_blocks():
    from pygpukit_dsp.runner import StreamRunner

    seen = []
    x = np.zeros((1, 1000), np.float32)
    StreamRunner(_pipe(x, 100)).run(progress=seen.append, progress_interval_s=0.0)
    assert [p.blocks for p in seen] == list(range(1, 11))
    assert seen[-1].samples_in == 1000 and seen[-1].total_blocks == 10
