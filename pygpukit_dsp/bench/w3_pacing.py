"""W3's timing loops (the contention bench, bench/contention.py): W1 paced at its period, one
block per period, its latency from the hand-over or, with a release call, from the release; and
W1's input as one continuous stream (:class:`Feed`)."""

from __future__ import annotations

import resource
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

W1_CHECK_BLOCKS = 6         # the last blocks of every W1 run are compared across runs
SPIN_NS = 150_000           # the host sleeps until this close to an arrival, then spins


@dataclass
class W1Run:
    lat_ns: np.ndarray
    outputs: list[np.ndarray]       # the last W1_CHECK_BLOCKS outputs
    t_start: int                    # perf_counter_ns at the first timed hand-over
    t_end: int
    overruns: int
    starts: np.ndarray              # perf_counter_ns before / after each timed process() call
    ends: np.ndarray
    # per block, from the start of its wait to its output: the W1 thread's voluntary and involuntary
    # context switches and the wall time it did not run (wall - thread CPU time), ns
    switches: np.ndarray | None = None


def _thread_clock() -> tuple[int, int, int, int] | None:
    """The calling thread's (voluntary, involuntary) context switches so far, its CPU time and
    the wall clock (ns) (Linux), else None. A thread that spins through its waits (qos.spin_us >=
    the period) switches voluntarily only when it sleeps or blocks, and involuntarily only when
    the guest's scheduler takes its CPU; wall time it neither ran nor was switched out for was
    taken beneath the guest (steal: the guest's clock does not charge it to the thread)."""
    if not hasattr(resource, "RUSAGE_THREAD"):
        return None
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    return ru.ru_nvcsw, ru.ru_nivcsw, time.thread_time_ns(), time.perf_counter_ns()


def _wait_until(t_ns: int) -> None:
    """Sleep until SPIN_NS before ``t_ns``, then spin. The spin yields the GIL on every turn
    (sleep(0)): a pure Python spin would hold it for a whole switch interval (5 ms), starving
    the W2 thread of the hand-offs it needs between blocks."""
    perf = time.perf_counter_ns
    while True:
        left = t_ns - perf()
        if left <= 0:
            return
        time.sleep((left - SPIN_NS) / 1e9 if left > SPIN_NS else 0)


def paced_w1(process: Callable[[np.ndarray], Any], inputs: list[np.ndarray], *, warmup: int, blocks: int,
              period_ns: int, release_call: Callable[[np.ndarray, int], Any] | None = None) -> W1Run:
    """One block per period; latency = hand-over to output, for the blocks after ``warmup``.

    ``release_call(block, release_ns)`` (the paced waits): the call itself waits for the
    block's release (natively, without the GIL) and the latency runs from the release."""
    perf = time.perf_counter_ns
    total = warmup + blocks
    keep_from = total - W1_CHECK_BLOCKS
    starts = np.empty(blocks, dtype=np.int64)
    ends = np.empty(blocks, dtype=np.int64)
    outs: list[np.ndarray] = []
    k = len(inputs)
    overruns = 0
    t_start = 0
    counts = _thread_clock() is not None
    switches = np.zeros((blocks, 3), dtype=np.int64) if counts else None
    t_next = perf() + period_ns
    for i in range(total):
        before = _thread_clock() if counts and i >= warmup else None  # outside the timed call
        if release_call is not None:
            t0 = t_next
            y = release_call(inputs[i % k], t_next)
        else:
            _wait_until(t_next)
            t0 = perf()
            y = process(inputs[i % k])
        t1 = perf()
        if i >= warmup:
            starts[i - warmup], ends[i - warmup] = t0, t1
            if before is not None and switches is not None:
                after = _thread_clock()
                assert after is not None
                off_cpu = (after[3] - before[3]) - (after[2] - before[2])
                switches[i - warmup] = (after[0] - before[0], after[1] - before[1], max(0, off_cpu))
            if i == warmup:
                t_start = t0
        if i >= keep_from:
            outs.append(np.array(y, copy=True))
        t_next += period_ns
        if t1 > t_next:  # longer than a period: the next block (already arrived) goes at once
            overruns += 1
            t_next = t1
    return W1Run(ends - starts, outs, t_start, perf(), overruns, starts, ends, switches)


def pace_until(event: threading.Event, process: Callable[[np.ndarray], Any], inputs: list[np.ndarray],
                period_ns: int, release_call: Callable[[np.ndarray, int], Any] | None = None) -> int:
    """W1 blocks at the period (untimed) until ``event`` is set; returns how many ran."""
    t_next = time.perf_counter_ns()
    n = 0
    while not event.is_set():
        if release_call is not None:
            release_call(inputs[n % len(inputs)], t_next)
        else:
            _wait_until(t_next)
            process(inputs[n % len(inputs)])
        n += 1
        t_next += period_ns
    return n


class Feed:
    """W1's input as one continuous stream: block i is inputs[i % len(inputs)], whatever the
    caller passes; keeps the last W1_CHECK_BLOCKS outputs. ``process`` returns a new array per
    block (CudaEngine.process, the safe API), so they are kept as they are: a copy here would run
    inside the timed call (its latency ends when the feed returns), which the PyTorch baseline's
    W1 (a view of its pinned output, copied after the stamp) does not pay."""

    def __init__(self, process: Callable[[np.ndarray], Any], inputs: list[np.ndarray]):
        self.process, self.inputs, self.count = process, inputs, 0
        self.last: deque[np.ndarray] = deque(maxlen=W1_CHECK_BLOCKS)
        self.back_ns: dict[int, int] = {}  # block -> when its wait came back to Python (warm_us)

    def _back(self) -> None:
        self.back_ns[self.count] = time.perf_counter_ns()

    def back_late_us(self, first: int, starts: np.ndarray, warm_us: int) -> np.ndarray:
        """For blocks first, first + 1, ...: how late (us) each wait came back to Python against
        the time it asked for (the release - warm_us); NaN where it did not stop there."""
        late = np.full(len(starts), np.nan)
        for j, t0 in enumerate(starts):
            b = self.back_ns.get(first + j)
            if b is not None:
                late[j] = (b - (int(t0) - warm_us * 1000)) / 1e3
        return late

    def __call__(self, _block: Any) -> Any:
        y = self.process(self.inputs[self.count % len(self.inputs)])
        self.count += 1
        self.last.append(y)
        return y

    def at(self, _block: Any, release_ns: int, spin_us: int, prewarm: bool, warm_us: int = 0) -> Any:
        """The next block, handed over before its release: the engine waits for it natively."""
        y = self.process(self.inputs[self.count % len(self.inputs)], release_ns=release_ns, spin_us=spin_us,
                         prewarm=prewarm, warm_us=warm_us, arrive=self._back if warm_us > 0 else None)
        self.count += 1
        self.last.append(y)
        return y


def split_blocks(blocks: int, segments: int) -> list[int]:
    """``blocks`` timed blocks over ``segments`` segments, as evenly as they go (none empty)."""
    segments = max(1, min(segments, blocks))
    return [blocks // segments + (1 if i < blocks % segments else 0) for i in range(segments)]
