"""CpuDispatcher (pygpukit_dsp/backends/cpu_dispatch.py): order, accounting, errors, drain.

Fake engines stand in for CpuEngine: they record what ran, in which order, on which thread.
Nothing here depends on timing except through events the tests set themselves.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import numpy as np
import pytest
from pygpukit_dsp_core import Scheduler

from pygpukit_dsp.backends.cpu_dispatch import CpuDispatcher
from pygpukit_dsp.errors import StreamFault

PERIOD_NS = 10_000_000


class FakeEngine:
    """Doubles each block; ``hold`` makes process() wait for ``release`` (to keep the thread busy)."""

    def __init__(self, name: str, log: list, *, hold: bool = False, delay_s: float = 0.0,
                 fail_on: int | None = None):
        self.name, self.log = name, log
        self.calls = 0
        self.threads: set[str] = set()
        self.hold, self.delay_s, self.fail_on = hold, delay_s, fail_on
        self.started, self.release = threading.Event(), threading.Event()
        self.raised: BaseException | None = None
        self.closed = False

    def process(self, block, final=False):
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        self.log.append(self.name)
        self.started.set()
        if self.hold:
            assert self.release.wait(10), "test never released the engine"
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_on is not None and self.calls == self.fail_on:
            self.raised = ValueError(f"{self.name}: bad block {self.calls}")
            raise self.raised
        return block * 2

    def close(self):
        self.closed = True


def _call_in_thread(fn, *args):
    box: dict = {}

    def run():
        try:
            box["result"] = fn(*args)
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def _wait_for(cond, what: str, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.001)


@pytest.fixture
def sched():
    return Scheduler()


def test_blocks_run_on_the_dispatcher_thread_with_results_and_counts(sched):
    sid = sched.register_stream("a", "best_effort")
    eng = FakeEngine("a", [])
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    with CpuDispatcher(sched) as disp:
        disp.attach(eng, sid)
        outs = [eng.process(x + i, final=(i == 9)) for i in range(10)]
        st = disp.stream_stats(sid)
        counts = disp.stats()
    for i, y in enumerate(outs):
        np.testing.assert_array_equal(y, (x + i) * 2)
    assert eng.calls == 10 and eng.threads == {"gk-cpu-dispatch"}  # each block once, on the dispatcher
    assert counts["submitted"] == counts["launched"] == counts["completed"] == 10
    assert st["submitted"] == 10 and st["completed"] + st["missed"] == 10 and st["dropped"] == 0
    assert st["chunks"] == 10 and st["latency"]["count"] == 10 and st["busy_ns"] > 0


def test_realtime_block_handed_over_later_runs_before_a_waiting_best_effort_block(sched):
    rt = sched.register_stream("rt", "realtime", period_ns=PERIOD_NS, cost_ns=100_000)
    be = sched.register_stream("be", "best_effort")
    busy = sched.register_stream("busy", "best_effort")
    log: list[str] = []
    e_rt, e_be, e_busy = FakeEngine("rt", log), FakeEngine("be", log), FakeEngine("busy", log, hold=True)
    x = np.ones((1, 8), np.float32)
    with CpuDispatcher(sched) as disp:
        for e, sid in ((e_rt, rt), (e_be, be), (e_busy, busy)):
            disp.attach(e, sid)
        t_busy, _ = _call_in_thread(e_busy.process, x)
        assert e_busy.started.wait(10)  # the dispatcher thread is now busy
        t_be, _ = _call_in_thread(e_be.process, x)
        _wait_for(lambda: sched.stream_stats(be)["submitted"] == 1, "the best-effort hand-over")
        t_rt, _ = _call_in_thread(e_rt.process, x)
        _wait_for(lambda: sched.stream_stats(rt)["submitted"] == 1, "the realtime hand-over")
        e_busy.release.set()
        for t in (t_busy, t_be, t_rt):
            t.join(10)
    assert log == ["busy", "rt", "be"]


def test_a_block_past_its_deadline_is_counted_as_a_miss(sched):
    sid = sched.register_stream("slow", "best_effort", deadline_ns=1_000_000)  # 1 ms
    eng = FakeEngine("slow", [], delay_s=0.003)  # a deliberately slow stage: 3 ms per block
    with CpuDispatcher(sched) as disp:
        disp.attach(eng, sid)
        for _ in range(3):
            eng.process(np.zeros((1, 4), np.float32))
        st = disp.stream_stats(sid)
    assert st["missed"] == 3 and st["completed"] == 0
    assert st["latency"]["min"] >= 3_000_000 and st["busy_ns"] >= 9_000_000


def test_an_error_reaches_the_caller_as_the_same_exception_and_counts_a_drop(sched):
    sid = sched.register_stream("f", "best_effort")
    eng = FakeEngine("f", [], fail_on=2)
    x = np.ones((1, 4), np.float32)
    with CpuDispatcher(sched) as disp:
        disp.attach(eng, sid)
        eng.process(x)
        with pytest.raises(ValueError, match="bad block 2") as ei:
            eng.process(x)
        assert ei.value is eng.raised
        np.testing.assert_array_equal(eng.process(x), 2 * x)  # the stream goes on
        st, counts = disp.stream_stats(sid), disp.stats()
    assert st["dropped"] == 1 and st["submitted"] == 3 and st["completed"] + st["missed"] == 2
    assert counts["failed"] == 1 and counts["completed"] == 2


def test_close_drains_every_handed_over_block_then_stops(sched):
    log: list[str] = []
    busy = FakeEngine("busy", log, hold=True)
    others = [FakeEngine(f"s{i}", log) for i in range(3)]
    disp = CpuDispatcher(sched)
    for e in [busy, *others]:
        disp.attach(e, sched.register_stream(e.name, "best_effort"))
    x = np.arange(4, dtype=np.float32)[None]
    t_busy, _ = _call_in_thread(busy.process, x)
    assert busy.started.wait(10)
    waiting = [_call_in_thread(e.process, x + i) for i, e in enumerate(others)]
    _wait_for(lambda: disp.stats()["pending"] == 3, "three blocks handed over")
    t_close, _ = _call_in_thread(disp.close)
    t_close.join(0.2)
    assert t_close.is_alive()  # close waits for the blocks handed over
    busy.release.set()
    t_close.join(10)
    assert not t_close.is_alive() and disp.closed
    for i, (t, box) in enumerate(waiting):
        t.join(10)
        np.testing.assert_array_equal(box["result"], (x + i) * 2)  # none lost
    assert sorted(log) == ["busy", "s0", "s1", "s2"]  # none duplicated
    counts = disp.stats()
    assert counts["submitted"] == counts["completed"] == 4 and counts["pending"] == 0
    assert counts["attached"] == 0 and not disp._thread.is_alive()
    disp.close()  # idempotent


def test_close_detaches_engines_and_keeps_the_final_figures(sched):
    sid = sched.register_stream("a", "best_effort")
    eng = FakeEngine("a", [])
    disp = CpuDispatcher(sched)
    disp.attach(eng, sid)
    eng.process(np.ones((1, 2), np.float32))
    disp.close()
    assert "process" not in vars(eng) and "close" not in vars(eng)  # its own methods again
    assert sched.stream_id("a") is None  # the finished stream left the scheduler
    assert disp.stream_stats(sid)["submitted"] == 1
    eng.process(np.ones((1, 2), np.float32))  # unscheduled now
    assert eng.threads == {"gk-cpu-dispatch", threading.current_thread().name}
    with pytest.raises(StreamFault, match="closed"):
        disp.attach(FakeEngine("b", []), sched.register_stream("b", "best_effort"))


@contextlib.contextmanager
def _realtime_beside_a_big_block(sched):
    """A realtime stream that has run once, and a best-effort stream whose 5 ms block cannot run
    beside it without endangering its deadline: (dispatcher, rt id, big id, rt engine, big engine, x)."""
    rt = sched.register_stream("rt", "realtime", period_ns=2_000_000, cost_ns=500_000)
    big = sched.register_stream("big", "best_effort", cost_ns=5_000_000)
    e_rt, e_big = FakeEngine("rt", []), FakeEngine("big", [])
    x = np.ones((1, 2), np.float32)
    with CpuDispatcher(sched) as disp:
        disp.attach(e_rt, rt)
        disp.attach(e_big, big)
        e_rt.process(x)
        yield disp, rt, big, e_rt, e_big, x


def test_closing_an_engine_releases_its_reservation_so_held_blocks_run(sched):
    # A best-effort block that cannot run without endangering a live realtime stream waits;
    # once the realtime engine is closed (its runner is done) the block runs.
    with _realtime_beside_a_big_block(sched) as (disp, rt, big, e_rt, e_big, x):
        t_big, box = _call_in_thread(e_big.process, x)
        _wait_for(lambda: sched.stats()["paced"] > 0, "the scheduler holding the big block back")
        t_big.join(0.1)
        assert t_big.is_alive() and e_big.calls == 0
        e_rt.close()
        assert e_rt.closed and sched.stream_id("rt") is None
        t_big.join(10)
        np.testing.assert_array_equal(box["result"], 2 * x)
        assert disp.stream_stats(rt)["completed"] == 1  # figures of the retired stream


@pytest.mark.parametrize("to", ["process", "another thread"])
def test_an_interrupted_caller_withdraws_its_block(sched, to):
    # "another thread": a process-directed Ctrl-C may land on any thread; this one lands on the
    # sender's, and the waiting main thread must still wake and raise (a second, direct signal
    # after 10 s keeps a regression from hanging the suite, and is counted)
    fallback = []
    # Python's own Ctrl-C handler, also where the test runner was started with SIGINT ignored
    # (a background job of a non-interactive shell: Python then installs none)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_a_held_block(sched, to, fallback)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_a_held_block(sched, to, fallback):
    with _realtime_beside_a_big_block(sched) as (disp, rt, big, e_rt, e_big, x):
        # the big block is held back while rt is registered: Ctrl-C arrives while it waits
        interrupted = threading.Event()

        def interrupt_when_held():
            _wait_for(lambda: disp.stats()["pending"] == 1 and sched.stats()["paced"] > 0, "the held block")
            if to == "process":
                os.kill(os.getpid(), signal.SIGINT)
                return
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            if not interrupted.wait(10):
                fallback.append(1)
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

        sender = threading.Thread(target=interrupt_when_held, daemon=True)
        sender.start()
        with pytest.raises(KeyboardInterrupt):
            e_big.process(x)
        interrupted.set()
        sender.join()
        counts = disp.stats()
    assert e_big.calls == 0 and counts["cancelled"] == 1 and counts["pending"] == 0
    assert disp.stream_stats(big)["cancelled"] == 1
    assert not fallback  # the main thread raised on the first signal


class _InterruptedSubmit:
    """The scheduler, with a Ctrl-C that lands as its first submit returns (the task made, its id
    not yet the caller's): the window a loaded machine's signal can hit between hand-over and wait."""

    def __init__(self, sched):
        self._sched, self.armed = sched, True

    def submit(self, stream):
        out = self._sched.submit(stream)
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return out

    def __getattr__(self, name):
        return getattr(self._sched, name)


def test_a_signal_between_the_hand_over_and_the_wait_withdraws_the_block(sched):
    sid = sched.register_stream("a", "best_effort")
    eng = FakeEngine("a", [])
    x = np.ones((2, 64), np.float32)
    with CpuDispatcher(_InterruptedSubmit(sched)) as disp:
        disp.attach(eng, sid)
        with pytest.raises(KeyboardInterrupt):
            eng.process(x)
        np.testing.assert_array_equal(eng.process(x), 2 * x)  # the dispatcher carries on
        counts = disp.stats()
    assert counts["cancelled"] == 1 and counts["completed"] == 1 and counts["pending"] == 0 and eng.calls == 1


def test_attach_refuses_a_stream_registered_in_chunks(sched):
    sid = sched.register_stream("c", "best_effort", units_per_block=4)
    with CpuDispatcher(sched) as disp, pytest.raises(ValueError, match="units_per_block=4"):
        disp.attach(FakeEngine("c", []), sid)


def test_a_task_the_dispatcher_never_saw_fails_its_waiters_with_a_fault(sched):
    # Sharing a scheduler with another dispatcher is a bug: the task of another device's stream
    # must never be run as if it were ours.
    other = sched.register_stream("gpu_stream", "best_effort")
    mine = sched.register_stream("mine", "best_effort")
    eng = FakeEngine("mine", [])
    disp = CpuDispatcher(sched)
    disp.attach(eng, mine)
    sched.submit(other)  # handed to "another dispatcher": ours gets it from next()
    with pytest.raises(StreamFault, match="no CPU stream handed over"):
        eng.process(np.ones((1, 2), np.float32))
    with pytest.raises(StreamFault, match="dispatcher failed"):
        eng.process(np.ones((1, 2), np.float32))
    disp.close()
    assert eng.calls == 0
