"""The rehearsal: a crowded GPU's realtime streams run together before the first block.

Layer: executor (admission). Imports NumPy, the policy, the device model's bridge (model.py)
and, when it runs, the native module, the CUDA dispatcher and the Rust scheduler; never the bench.

What the cost measured alone does not see is what many streams do to each other's blocks: a
block's device time grows among hundreds of streams, blocks of different streams overlap on the
GPU, every block passes through the dispatcher's lock, and the lock's queue has a tail. So when a
GPU's realtime streams, costed alone, fill more than ``policy.rehearsal_share`` of a bound
(:func:`crowded`), admission runs them together (:func:`rehearse`) and admits them by what it
measured there (admit.py). The measurements live here; the decision is the Rust scheduler's.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .calibration import REFERENCE, Calibration
from .policy import DEFAULT_POLICY, AdmissionPolicy

# the dispatcher logs each step that held its lock this long or more (native/engine/dispatcher.h)
SLOW_STEP_NS = 200_000


@dataclass(frozen=True)
class LatencyTail:
    """A kind of stream's latency from release in the rehearsal (its second window, as the streams
    will run) and how far its tail reaches: peaks over a threshold, the extreme-value estimate.
    The latencies' excesses over their ``quantile`` quantile ``threshold_ns`` are fitted with a
    generalised Pareto distribution by its moments (mean excess ``mean_excess_ns``, ``shape``):
    shape 0 is the exponential tail of a queue's waiting time (a GI/G/1 queue's wait has one), a
    negative shape a bounded tail (blocks released all at once wait behind at most all the others).
    A shape fitted above 0 (heavier than exponential: a few outliers in a short window), or within
    two of its standard errors below 0, is taken as 0. One block in B then passes ``reach_ns(B)``.

    Why admission needs it: for staggered releases the response bound counts only the work
    released just before a block, but the dispatcher's lock is a queue whose steps are uneven
    (most 10-15 us, some 0.2-1 ms) and the host wobbles, so at 77-85% busy a block sometimes
    waits for a millisecond or two: a 2 ms deadline misses where 5.33 ms does not
    (docs/scheduler.md, "The lock's bound, and the queue's tail")."""

    blocks: int          # latencies it was estimated from
    threshold_ns: int    # their `quantile` quantile
    mean_excess_ns: int  # their mean excess over it
    shape: float         # the generalised Pareto's shape, in [-1, 0]
    p99_ns: int
    p999_ns: int
    max_ns: int
    quantile: float = DEFAULT_POLICY.tail_quantile

    @classmethod
    def of(cls, latency_ns: np.ndarray, policy: AdmissionPolicy = DEFAULT_POLICY) -> "LatencyTail | None":
        """The tail of these latencies (ns); None below ``policy.tail_min_blocks`` of them."""
        lat = np.asarray(latency_ns, dtype=np.int64).ravel()
        if len(lat) < policy.tail_min_blocks:
            return None
        q = policy.tail_quantile
        u, p99, p999 = np.percentile(lat, [100 * q, 99, 99.9])
        excess = (lat[lat > u] - u).astype(np.float64)
        mean = float(excess.mean()) if len(excess) else 0.0
        var = float(excess.var()) if len(excess) > 1 else 0.0
        # method of moments: mean = sigma / (1 - xi), var = sigma^2 / ((1 - xi)^2 (1 - 2 xi))
        shape = min(0.0, max(-1.0, 0.5 * (1.0 - mean * mean / var))) if var > 0 else -1.0
        if shape > -2.0 / math.sqrt(max(1, len(excess))):
            shape = 0.0  # within two standard errors of 0 (about 1/sqrt(n) there): exponential
        return cls(len(lat), int(u), int(round(mean)), shape, int(p99), int(p999), int(lat.max()), q)

    @property
    def scale_ns(self) -> float:
        return self.mean_excess_ns * (1.0 - self.shape)

    def reach_ns(self, blocks: float) -> int:
        """The latency that one block in ``blocks`` passes (at least the threshold)."""
        over = max(1.0, (1 - self.quantile) * blocks)  # blocks over the threshold among them
        if self.shape > -1e-9:
            return self.threshold_ns + int(self.scale_ns * math.log(over))
        return self.threshold_ns + int(self.scale_ns / self.shape * (over ** self.shape - 1.0))

    def describe(self) -> str:
        bound_us = (self.threshold_ns - self.scale_ns / self.shape) / 1e3 if self.shape < -1e-9 else 0.0
        kind = "exponential" if self.shape > -1e-9 else f"bounded, shape {self.shape:.2f}, at most {bound_us:.0f} us"
        return (f"latency from release p{100 * self.quantile:g} {self.threshold_ns / 1e3:.0f} us, "
                f"{self.mean_excess_ns / 1e3:.0f} us beyond it on average ({kind}), p99 {self.p99_ns / 1e3:.0f} us, "
                f"p99.9 {self.p999_ns / 1e3:.0f} us, max {self.max_ns / 1e3:.0f} us ({self.blocks} blocks)")


def horizon_blocks(periods_ns: Sequence[int], seconds: float = DEFAULT_POLICY.tail_horizon_s) -> float:
    """Blocks that streams of these periods release within ``seconds``."""
    return sum(seconds * 1e9 / max(1, int(p)) for p in periods_ns)


def gpu_share_ns(device_ns: int, overlap: float) -> int:
    """A block's share of the GPU: its event-timed device time over the blocks' overlap. With
    device_ns the mean of the intervals this is their union per block, whether the blocks ran side
    by side or one waited behind another inside its interval."""
    return max(1, int(round(device_ns / max(1.0, overlap))))


def gpu_overlap(intervals: np.ndarray) -> float:
    """The blocks' GPU intervals (k, 2: start, stop ns; the dispatcher's timeline): the sum of
    their lengths over the length of their union, the average number of blocks on the GPU at once
    while it was busy (1.0: none overlapped, or no interval)."""
    iv = np.asarray(intervals, dtype=np.int64).reshape(-1, 2)
    iv = iv[iv[:, 1] > iv[:, 0]]
    if not len(iv):
        return 1.0
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    reach = np.maximum.accumulate(iv[:, 1])
    # a new busy stretch starts where an interval begins after everything before it ended
    fresh = np.concatenate(([True], iv[1:, 0] > reach[:-1]))
    starts = iv[fresh, 0]
    ends = np.append(reach[np.flatnonzero(fresh)[1:] - 1], reach[-1])
    union = int((ends - starts).sum())
    return max(1.0, float((iv[:, 1] - iv[:, 0]).sum()) / union) if union > 0 else 1.0


@dataclass(frozen=True)
class Rehearsal:
    """A GPU's realtime streams run together before the first block: what a block of this kind
    of stream costs among them (``RunSummary.admission`` says it). ``dispatcher_share`` and
    ``counted_dispatch_ns`` are the Rust scheduler's: the share of its time the dispatcher's lock
    may be held at the GPU's shortest realtime deadline, and the dispatcher's work per block as
    counted against ``u_max`` there (docs/scheduler.md, "The device model")."""

    streams: int          # realtime streams rehearsed together on the GPU
    seconds: float        # its timed windows together
    device_ns: int        # this kind of stream's device time per block among them (the median of its streams')
    alone_ns: int         # its cost measured alone (BlockCost.device_ns), or the declared qos.cost_us
    dispatch_ns: int = 0  # the dispatcher's serial work per block among them (RehearsalRun.dispatch_ns)
    overlap: float = 1.0  # how many blocks ran on the GPU at once, on average while it was busy
    tail: LatencyTail | None = None  # this kind's latency from release among them
    horizon: float = 0.0             # this kind's blocks within horizon_s (the tail's reach is over them)
    horizon_s: float = DEFAULT_POLICY.tail_horizon_s
    deadline_ns: int | None = None   # the shortest deadline of the GPU's realtime streams
    dispatcher_share: float = DEFAULT_POLICY.dispatcher_busy_cap  # the lock's share at that deadline (Rust)
    counted_dispatch_ns: int | None = None  # dispatch_ns as counted against u_max there (Rust; None: as it is)
    busy_cap: float = DEFAULT_POLICY.dispatcher_busy_cap  # the policy's cap of that share
    counted_cost_ns: int | None = None  # the device model's count of a block among them (Rust; cost_ns)

    @property
    def reach_ns(self) -> int | None:
        """The latency one of this kind's blocks passes within horizon_s (None: no tail)."""
        return self.tail.reach_ns(self.horizon) if self.tail is not None else None

    @property
    def occupancy_ns(self) -> int:
        """The GPU's time per block of this kind among them: its device time over the overlap
        (blocks of different streams run side by side, so their event-timed times add up to more
        than the time the GPU was busy)."""
        return gpu_share_ns(self.device_ns, self.overlap)

    @property
    def dispatch_cost_ns(self) -> int:
        """The dispatcher's serial work per block as admission counts it."""
        return self.dispatch_ns if self.counted_dispatch_ns is None else self.counted_dispatch_ns

    @property
    def cost_ns(self) -> int:
        """What a block of this kind costs among them, as the device model counts it: the larger
        of its share of the GPU (occupancy_ns) and the dispatcher's serial work per block as
        counted (dispatch_cost_ns; both are serial resources every block needs)."""
        return self.occupancy_ns if self.counted_cost_ns is None else self.counted_cost_ns

    def describe(self) -> str:
        out = (f"{self.device_ns / 1e3:.1f} us of device time per block among the {self.streams} realtime "
               f"streams of its GPU rehearsed together for {self.seconds:g} s ({self.alone_ns / 1e3:.1f} us alone)")
        if self.overlap > 1.0:
            out += (f", {self.overlap:.2f} blocks on the GPU at once while it was busy: "
                    f"{self.occupancy_ns / 1e3:.1f} us of the GPU per block")
        if self.dispatch_ns:
            counted, busy = self.dispatch_cost_ns, self.dispatcher_share
            deadline = (f", for the {self.deadline_ns / 1e3:.0f} us deadline"
                        if busy < self.busy_cap and self.deadline_ns is not None else "")
            out += (f", the dispatcher's serial work {self.dispatch_ns / 1e3:.1f} us per block"
                    + (f" (counted as {counted / 1e3:.1f} us: its lock held at most {busy:.0%} of the time"
                       + deadline + ")" if counted != self.dispatch_ns else "")
                    + (" (admitted: the larger)" if counted > self.occupancy_ns else ""))
        if self.tail is not None:
            out += (f"; {self.tail.describe()}: its tail reaches {self.reach_ns / 1e3:.0f} us within "
                    f"{self.horizon_s:g} s ({self.horizon:.0f} blocks of this kind)")
        return out


@dataclass
class RehearsalRun:
    """What :func:`rehearse` measured: each engine's device time per block among the others, and
    the dispatcher's serial work per block (the time its steps held its lock, over the blocks it
    launched: every block passes through that one lock, so it bounds the GPU's streams as the
    device time does; it includes the worker's polls while blocks are in flight, so at light load
    it reads high, which only matters where admission is not rehearsing)."""

    device_ns: list[int]
    dispatch_ns: int
    blocks: int = 0
    overlap: float = 1.0  # Σ of the blocks' GPU intervals over their union (gpu_overlap): >= 1
    # each engine's latencies from release in the second window (ns; empty: not measured)
    latency_ns: list[np.ndarray] = field(default_factory=list)
    hold_ns: int = 0      # the longest step that held the dispatcher's lock in the second window

    def tail(self, engines: Sequence[int] | None = None,
             policy: AdmissionPolicy = DEFAULT_POLICY) -> LatencyTail | None:
        """The latency tail of these engines' blocks together (indices; None: all)."""
        picked = self.latency_ns if engines is None else [self.latency_ns[i] for i in engines
                                                           if i < len(self.latency_ns)]
        return LatencyTail.of(np.concatenate(picked), policy) if picked else None

    def costs(self, u_max: float = DEFAULT_POLICY.u_max, deadline_ns: int | None = None, *,
              calibration: Calibration | None = None, policy: AdmissionPolicy = DEFAULT_POLICY) -> list[int]:
        """Each engine's block cost among them, admitted under ``u_max`` with ``deadline_ns`` the
        shortest deadline: the larger of its share of the GPU (device time over the overlap) and the
        dispatcher's serial work per block as the Rust device model counts it at that deadline
        (``calibration``: the GPU's hold; None: the reference figures, calibration.REFERENCE).
        ValueError when the deadline is no longer than the hold."""
        from .model import counted_cost_ns

        return [counted_cost_ns(gpu_share_ns(c, self.overlap), self.dispatch_ns, deadline_ns, u_max=u_max,
                                calibration=calibration, policy=policy) for c in self.device_ns]


def crowded(costs_ns: Sequence[int], periods_ns: Sequence[int], deadlines_ns: Sequence[int], u_max: float, *,
            calibration: Calibration | None = None, policy: AdmissionPolicy = DEFAULT_POLICY) -> bool:
    """Do these realtime streams, costed alone, fill more than ``policy.rehearsal_share`` of a
    bound: the utilisation bound u_max, the shortest deadline for the sum of their costs, or the
    dispatcher's lock (``policy.dispatcher_busy_cap``, at the calibration's dispatcher work per
    block, ``calibration.dispatch_ns``: a block's dispatch costs about the same whatever its
    pipeline, so hundreds of light streams fill the lock before the GPU)? Among hundreds of
    streams a block's device time grows past its cost alone (W1 on the H100: 11.5 us alone,
    13-15 us among 320-384 streams, docs/scheduler.md), and only a rehearsal measures the lock's
    work; below that share of every bound that growth cannot reach them. ``calibration`` None:
    the reference figures (calibration.REFERENCE)."""
    if len(costs_ns) < 2:
        return False
    share = policy.rehearsal_share
    typical = (calibration or REFERENCE).dispatch_ns
    util = sum(c / p for c, p in zip(costs_ns, periods_ns))
    lock = sum(typical / p for p in periods_ns)
    return (util > share * u_max or sum(costs_ns) > share * min(deadlines_ns)
            or lock > share * policy.dispatcher_busy_cap)


def _window_hold_ns(before: dict[str, Any], after: dict[str, Any]) -> int:
    """The longest step that held the dispatcher's lock between two of its stats: the longest of
    the slow steps logged in between; none logged, the longest step so far if shorter than a
    slow step, else the slow step's threshold (no step in between was slower)."""
    logged = list(after.get("slow_log", []))[len(before.get("slow_log", [])):]
    if logged:
        return int(max(int(entry[1]) for entry in logged))
    longest = int(max(after.get("longest_step_ns", {}).values(), default=0))
    return min(longest, SLOW_STEP_NS)


def rehearse(engines: Sequence[Any], specs: Sequence[Any], deadlines_ns: Sequence[int], *, device: int = 0,
             seconds: float | None = None, warmup_s: float | None = None, threads: int | None = None,
             spin_us: int = 100, dispatcher_spin_us: int = 200,
             phases_ns: Sequence[int | None] | None = None, time_every: int | None = None,
             tail_s: float | None = None, policy: AdmissionPolicy = DEFAULT_POLICY) -> RehearsalRun:
    """Run CUDA ``engines`` together, as their streams will run: each one block of zeros per
    block period (its ``spec``) at its release phase (``phases_ns``; a stream of no known phase,
    or every stream when None, at 0: all released at once, the instant the response bound
    assumes for them), through a scratch scheduler (every stream realtime, at its deadline) and
    one dispatcher on ``device``, blocks released by a few native threads (``_native.run_paced``:
    no Python per block). Returns each engine's device time per block as its dispatcher measured
    it (CUDA events, the scheduler's running average), in order, the dispatcher's serial work
    per block and its lock's longest hold (:class:`RehearsalRun`); every engine's state is reset
    after. ``time_every``: the dispatcher's (CudaDispatch; None: its default, as a Session's). The
    second window's latencies from release come back too (``RehearsalRun.latency_ns``: the tail).

    Two timed windows after ``warmup_s`` (``policy.rehearsal_warmup_s``): the first (``seconds``,
    ``policy.rehearsal_s``) times every block and records the GPU's timeline (the engines' device
    times, and their overlap: :func:`gpu_overlap`); the second (``tail_s``,
    ``policy.rehearsal_tail_s``), at the dispatcher's own sampling as the streams will run, gives
    its serial work per block (timing every block would add two event records and three queries to
    each), the longest step that held its lock, and the latencies. The second is the longer: the
    queue's bad moments come a few times a second, and the tail must see some."""
    from pygpukit_dsp_core import Scheduler

    from .. import _native
    from ..backends.cuda_dispatch import DEFAULT_TIME_EVERY, CudaDispatch

    seconds = policy.rehearsal_s if seconds is None else seconds
    warmup_s = policy.rehearsal_warmup_s if warmup_s is None else warmup_s
    tail_s = policy.rehearsal_tail_s if tail_s is None else tail_s
    periods = [max(1, int(spec.block_period * 1e9)) for spec in specs]
    phases = [int(ph or 0) % p for ph, p in zip(phases_ns or [None] * len(engines), periods)]
    zeros: dict[Any, np.ndarray] = {}
    inputs = [[zeros.setdefault((tuple(spec.block_shape), spec.np_dtype),
                                np.zeros(spec.block_shape, spec.np_dtype))] for spec in specs]
    for i, e in enumerate(engines):
        packed = getattr(e, "packed_zero_block", None)  # a graph's engine: every source's slice at once
        if callable(packed):
            inputs[i] = [packed()]
    if threads is None:
        threads = max(1, min(4, len(os.sched_getaffinity(0)) // 4))
    sched = Scheduler()
    ids = [sched.register_stream(f"rehearsal_{i}", "realtime", period_ns=p, deadline_ns=max(1, int(d)), cost_ns=1)
           for i, (p, d) in enumerate(zip(periods, deadlines_ns))]
    for e in engines:
        e.reset()
    try:
        with CudaDispatch(sched, device_index=device, spin_us=dispatcher_spin_us) as dispatch:
            for e, sid in zip(engines, ids):
                dispatch.attach(e, sid)
            native = [e.native for e in engines]
            dispatch.time_every = 1
            dispatch.start_timeline()
            try:
                _native.run_paced(native, periods, phases, inputs, warmup_s, seconds, threads, spin_us)
            finally:
                timeline = dispatch.stop_timeline()
            stats = [dispatch.stream_stats(sid) for sid in ids]
            dispatch.time_every = time_every or DEFAULT_TIME_EVERY
            before = dispatch.stats()
            res = _native.run_paced(native, periods, phases, inputs, min(warmup_s, 0.05), tail_s, threads, spin_us)
            after = dispatch.stats()
    finally:
        for e in engines:
            e.reset()
    launched = int(after.get("launches", 0)) - int(before.get("launches", 0))
    held = int(sum(after.get("step_ns", {}).values())) - int(sum(before.get("step_ns", {}).values()))
    return RehearsalRun([int(st.get("measured_cost_ns") or 0) for st in stats],
                        held // launched if launched > 0 else 0, launched, gpu_overlap(timeline),
                        [np.asarray(v, dtype=np.int64) for v in res["latency_ns"]],
                        hold_ns=_window_hold_ns(before, after))
