"""A Session's dispatch (pygpukit_dsp/dispatch.py): every block goes through its device's scheduler."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
from pygpukit_dsp_core import Scheduler

from pygpukit_dsp import Pipeline, Session, StreamFault, stages
from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.backends.cpu import CpuEngine
from pygpukit_dsp.dispatch import start_dispatch
from pygpukit_dsp.io import NullSink, NullSource, NumpySink, NumpySource


def _signal(seed: int, channels: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((channels, n)).astype(np.float32)


def _fir_stft(x, qos, name="spec"):
    chain = [stages.Fir(taps=np.hanning(33)), stages.Stft(nfft=128, hop=64), stages.Power()]
    return Pipeline(chain, name=name, sample_rate=8000, block_size=640, backend="cpu", qos=qos,
                    source=NumpySource(array=x), sink=NumpySink())


def _sos(x, qos, name="iir"):
    chain = [stages.Sos(design={"kind": "butter", "order": 4, "cutoff_hz": 1000}), stages.Gain(db=-3)]
    return Pipeline(chain, name=name, sample_rate=8000, block_size=256, backend="cpu", qos=qos,
                    source=NumpySource(array=x), sink=NumpySink())


def test_a_session_equals_an_unscheduled_run_and_accounts_every_block():
    x1, x2 = _signal(1, 2, 6000), _signal(2, 3, 5000)
    a = _sos(x1, {"class": "realtime"}, name="iir")
    b = _fir_stft(x2, {"class": "throughput", "min_rate": 8000}, name="spec")
    s = Session([a, b])
    summaries = s.run()

    ref_a = _sos(x1, {}).process(x1)
    ref_b = _fir_stft(x2, {}).process(x2)
    np.testing.assert_array_equal(a.sink.result(), ref_a)
    np.testing.assert_array_equal(b.sink.result(), ref_b)

    for summ in summaries:
        sa = summ.scheduler
        assert sa is not None and sa.device == "cpu"
        assert sa.submitted == summ.blocks and sa.completed + sa.missed == summ.blocks
        assert sa.dropped == sa.cancelled == 0
        assert sa.latency_us["count"] == summ.blocks and sa.chunks == summ.blocks and sa.busy_us > 0
        assert sa.deadline_us == pytest.approx(summ.deadline_us, rel=1e-6)
    assert [x.blocks for x in summaries] == [24, 8]  # ceil(6000/256), ceil(5000/640)
    counts = s.dispatch.stats()["cpu"]
    assert counts["submitted"] == counts["completed"] == 32 and counts["attached"] == 0


def test_misses_are_counted_by_the_scheduler_against_the_qos_deadline():
    # 1 us: no block can be handed over, run and handed back that fast
    p = _fir_stft(_signal(3, 1, 3200), {"class": "best_effort", "deadline_ms": 0.001})
    summ = p.run()
    assert summ.blocks == 5
    assert summ.scheduler.missed == 5 and summ.scheduler.completed == 0
    assert summ.deadline_misses == 5  # the runner's host-side count agrees


def test_the_dispatcher_runs_the_blocks_and_is_closed_after_the_run(monkeypatch):
    import threading

    seen: list[str] = []
    original = CpuEngine.process

    def spy(self, block, final=False):
        seen.append(threading.current_thread().name)
        return original(self, block, final)

    monkeypatch.setattr(CpuEngine, "process", spy)
    s = Session([_sos(_signal(4, 1, 1000), {})])
    s.run()
    assert seen and set(seen) == {"gk-cpu-dispatch"}
    assert s.dispatch.cpu.closed and not s.dispatch.cpu._thread.is_alive()


def test_a_block_error_reaches_the_runner_and_is_a_drop(monkeypatch):
    original = CpuEngine.process
    calls = [0]

    def failing(self, block, final=False):
        calls[0] += 1
        if calls[0] == 3:
            raise ValueError("stage blew up")
        return original(self, block, final)

    monkeypatch.setattr(CpuEngine, "process", failing)
    s = Session([_sos(_signal(5, 1, 4000), {}, name="one")])
    with pytest.raises(ValueError, match="stage blew up"):  # one pipeline: its own exception
        s.run()
    st = s.stream_stats("one")
    assert st["dropped"] == 1 and st["submitted"] == 3 and st["completed"] + st["missed"] == 2

    calls[0] = 0
    a = _sos(_signal(6, 1, 4000), {}, name="a")
    b = Pipeline([stages.Gain(db=0)], name="b", sample_rate=8000, channels=1, block_size=256,
                 backend="cpu", source=NullSource(duration_s=0.05), sink=NullSink())
    s = Session([a, b])
    with pytest.raises(StreamFault, match="failed: stage blew up") as ei:
        s.run()
    assert isinstance(ei.value.__cause__, ValueError)
    assert s.dispatch.cpu.closed and s.dispatch.stats()["cpu"]["failed"] == 1


def test_a_fault_summary_gets_the_scheduler_figures_too():
    calls = [0]

    def read(n):
        calls[0] += 1
        if calls[0] > 3:
            raise OSError("disk gone")
        return np.zeros((1, n), np.float32)

    from pygpukit_dsp.io import CallbackSource

    p = Pipeline([stages.Gain(db=0)], name="f", sample_rate=1000, channels=1, block_size=10,
                 backend="cpu", source=CallbackSource(fn=read), sink=NumpySink())
    with pytest.raises(StreamFault, match="disk gone") as ei:
        p.run()
    assert ei.value.summary.blocks == 3 and ei.value.summary.scheduler.submitted == 3


# ----------------------------------------------------------------------------- start_dispatch


class _Engine:
    def __init__(self, device: str):
        self.choice = BackendChoice(device, "test")
        self.calls = 0

    def process(self, block, final=False):
        self.calls += 1
        return block

    def close(self):
        pass


def _runner(name: str, device: str):
    return SimpleNamespace(pipeline=SimpleNamespace(name=name), engine=_Engine(device))


@pytest.fixture
def fake_cuda_dispatch(monkeypatch):
    """A stand-in for the lead's CudaDispatch that records the calls of the contract."""
    made: list = []

    class CudaDispatch:
        def __init__(self, scheduler, device_index=0):
            self.scheduler, self.device_index = scheduler, device_index
            self.attached: list = []
            self.closed = 0
            made.append(self)

        def attach(self, engine, stream):
            self.attached.append((engine, stream))

        def stats(self):
            return {"launches": 0}

        def stream_stats(self, stream):
            return dict(self.scheduler.stream_stats(stream))

        def close(self):
            self.closed += 1

    mod = types.ModuleType("pygpukit_dsp.backends.cuda_dispatch")
    mod.CudaDispatch = CudaDispatch
    monkeypatch.setitem(sys.modules, "pygpukit_dsp.backends.cuda_dispatch", mod)
    return made


def test_runners_are_grouped_by_device(fake_cuda_dispatch):
    cpu_s, gpu_s = Scheduler(), Scheduler()
    ra, rb, rc = _runner("a", "cpu"), _runner("g1", "cuda"), _runner("g2", "cuda")
    sid_a = cpu_s.register_stream("a", "best_effort")
    sid_1 = gpu_s.register_stream("g1", "best_effort")
    sid_2 = gpu_s.register_stream("g2", "throughput", units_per_block=8)
    d = start_dispatch([ra, rb, rc], {"cpu": cpu_s, "cuda": gpu_s})
    (cuda,) = fake_cuda_dispatch
    assert cuda.scheduler is gpu_s and cuda.device_index == 0
    assert cuda.attached == [(rb.engine, sid_1), (rc.engine, sid_2)]
    assert d.cpu is not None and d.cpu.scheduler is cpu_s and "process" in vars(ra.engine)
    assert d.streams == {"a": ("cpu", sid_a), "g1": ("cuda", sid_1), "g2": ("cuda", sid_2)}
    ra.engine.process(np.zeros((1, 4), np.float32))
    assert d.stream_stats("a")["submitted"] == 1
    assert d.stream_stats("g2")["units_per_block"] == 8
    assert set(d.stats()) == {"cpu", "cuda"}
    d.close()
    d.close()  # idempotent
    assert cuda.closed == 1 and d.cpu.closed and "process" not in vars(ra.engine)
    with pytest.raises(KeyError, match="no stream named 'zz'"):
        d.stream_stats("zz")


def test_cuda_dispatch_is_only_made_for_cuda_streams(monkeypatch):
    mod = types.ModuleType("pygpukit_dsp.backends.cuda_dispatch")

    def refuse(*a, **k):
        raise AssertionError("CudaDispatch made for a cpu-only session")

    mod.CudaDispatch = refuse
    monkeypatch.setitem(sys.modules, "pygpukit_dsp.backends.cuda_dispatch", mod)
    s = Scheduler()
    s.register_stream("a", "best_effort")
    d = start_dispatch([_runner("a", "cpu")], s)  # one scheduler is enough on one device
    assert d.cuda is None and d.device_of("a") == "cpu"
    d.close()


def test_one_scheduler_for_two_devices_is_refused():
    s = Scheduler()
    s.register_stream("a", "best_effort")
    s.register_stream("g", "best_effort")
    with pytest.raises(ValueError, match="one scheduler per device"):
        start_dispatch([_runner("a", "cpu"), _runner("g", "cuda")], s)


def test_an_unregistered_stream_is_an_error_and_nothing_stays_attached():
    s = Scheduler()
    s.register_stream("a", "best_effort")
    ra, rb = _runner("a", "cpu"), _runner("b", "cpu")
    with pytest.raises(ValueError, match="stream 'b' is not registered with the cpu scheduler"):
        start_dispatch([ra, rb], {"cpu": s})
    assert "process" not in vars(ra.engine)  # the dispatcher that started was closed again
