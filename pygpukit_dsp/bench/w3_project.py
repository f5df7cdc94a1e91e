"""pygpukit-dsp's runs of W3 (the contention bench, bench/contention.py): W2 alone, and W1 alone
and under W2 load in alternating segments on one scheduler and dispatcher, W1's reference run; the
causes of W1's misses."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..affinity import pinned, resolve_cpu
from ..errors import AdmissionError
from .gc_pauses import GcPauses, overlap_ns
from .paced import PacedEngine
from .stall_probe import EPISODE_GAP_NS, HOST_SLOW_FACTOR, HOST_SLOW_MIN_US, HOST_STALL_US, start_probe, stop_probe
from .trace import Breakdown, breakdown
from .w3_pacing import Feed, W1Run, paced_w1, split_blocks
from .w3_pumps import project_pump, resident_pump, start_pump, timed_window, wait_started, finish_pump
from .w3_report import LATE_BACK_US, SLOW_PHASES

if TYPE_CHECKING:
    from ..pipeline import Pipeline, SpecChain
    from .contention import ContentionBench, ReleaseWaitSettings

CALIBRATION_BLOCKS = 200    # W1 blocks whose p99 is declared as its cost
SETTLE_BLOCKS = 20          # untimed W1 blocks after W2 is switched on or off


class ProjectRun:
    """pygpukit-dsp's three runs (W1 alone, W2 alone, both on one scheduler)."""

    def __init__(self, bench: ContentionBench, c1: "SpecChain", c2: "SpecChain", *, period_ns: int,
                 deadline_ns: int, quantum_ns: int, spin_us: int, wait: "ReleaseWaitSettings | None" = None):
        self.bench, self.c1, self.c2 = bench, c1, c2
        self.period_ns, self.deadline_ns, self.quantum_ns, self.spin_us = period_ns, deadline_ns, quantum_ns, spin_us
        self.wait = wait
        self.cost_ns: int | None = None

    def _engine(self, pipeline: "Pipeline", chain: "SpecChain") -> Any:
        from ..backends import choose_backend
        from ..backends.cuda_engine import CudaEngine

        return CudaEngine(pipeline, chain, choose_backend(pipeline, chain, "cuda"))

    def _scheduler(self) -> Any:
        from pygpukit_dsp_core import Scheduler

        return Scheduler(quantum_ns=self.quantum_ns)

    def _register(self, sched: Any, pipeline: "Pipeline", qos: str, **kw: Any) -> int:
        from pygpukit_dsp_core import AdmissionRefused

        try:
            return sched.register_stream(pipeline.name, qos, **kw)
        except AdmissionRefused as e:
            raise AdmissionError(pipeline.name, str(e).removeprefix(f"stream '{pipeline.name}' not admitted: "),
                                 dict(e.figures)) from None

    def _register_w1(self, sched: Any, engine: Any, inputs: list[np.ndarray]) -> int:
        if self.cost_ns is None:  # declared: the p99 of a short calibration, alone, before attaching
            perf = time.perf_counter_ns
            t = []
            for i in range(CALIBRATION_BLOCKS):
                t0 = perf()
                engine.process(inputs[i % len(inputs)])
                t.append(perf() - t0)
            engine.reset()
            self.cost_ns = max(1, int(np.percentile(t, 99)))
        return self._register(sched, self.bench.realtime, "realtime", period_ns=self.period_ns,
                              deadline_ns=self.deadline_ns, cost_ns=self.cost_ns)

    def _register_w2(self, sched: Any, engine: Any) -> int:
        return self._register(sched, self.bench.throughput, "throughput", units_per_block=engine.units_per_block)

    def w2_alone(self, blocks: list[np.ndarray], seconds: float) -> tuple[float, list[np.ndarray], dict[str, Any]]:
        from ..backends.cuda_dispatch import CudaDispatch

        engine = self._engine(self.bench.throughput, self.c2)
        spb = int(np.prod(self.c2.input.block_shape))
        try:
            sched = self._scheduler()
            sid = self._register_w2(sched, engine)
            with CudaDispatch(sched, spin_us=self.spin_us) as dispatch:
                dispatch.attach(engine, sid)
                pump = start_pump(project_pump(engine, blocks))
                t0, t1 = timed_window(pump, seconds)
                extra = {"scheduler_w2": sched.stream_stats(sid), "dispatch": dispatch.stats(),
                         "units_per_block": engine.units_per_block}
        finally:
            engine.close()
        return pump.rate(t0, t1, spb), pump.outputs, extra

    def interleaved(self, w1_inputs: list[np.ndarray], w2_blocks: list[np.ndarray], warmup: int, blocks: int,
                    segments: int) -> "Interleaved":
        """W1 alone and W1 under W2 load, in alternating segments on ONE scheduler and dispatcher.

        Both engines stay attached throughout; a load segment runs W2's resident loop, an alone
        segment leaves W2 idle. Segments alternate (alone, load | load, alone | ...) so that the
        host's noise, which comes in bursts of seconds, falls on both kinds alike. W1 is one
        continuous stream from reset; after every switch SETTLE_BLOCKS untimed blocks let the GPU
        and the scheduler settle.
        """
        from ..backends.cuda_dispatch import CudaDispatch

        spb = int(np.prod(self.c2.input.block_shape))
        w1 = self._engine(self.bench.realtime, self.c1)
        try:
            w2 = self._engine(self.bench.throughput, self.c2)
            try:
                sched = self._scheduler()
                sid1 = self._register_w1(sched, w1, w1_inputs)
                sid2 = self._register_w2(sched, w2)
                rt = self.bench.realtime
                # qos.cpu of the realtime pipeline: the thread that drives W1 runs pinned, as a runner would
                cpu = resolve_cpu(rt.qos.cpu, rt.qos.where_of("cpu") or rt.where or f"pipeline '{rt.name}'")
                with CudaDispatch(sched, spin_us=self.spin_us) as dispatch, pinned(cpu):
                    dispatch.attach(w1, sid1)
                    dispatch.attach(w2, sid2)
                    w2_outputs = [np.array(w2.process(b), copy=True) for b in w2_blocks]  # checked, from reset
                    w2.instrument().resident = True
                    w1.reset()
                    # W1 paced through its engine's instrument (its waits inside the block's call)
                    feed = Feed(PacedEngine(w1).process, w1_inputs)
                    wait = self.wait
                    at = None if wait is None else (
                        lambda x, r: feed.at(x, r, wait.spin_us, wait.prewarm, wait.warm_us))  # noqa: E731
                    paced_w1(feed, w1_inputs, warmup=warmup, blocks=0, period_ns=self.period_ns, release_call=at)
                    out = Interleaved(w2_outputs=w2_outputs)
                    warm_us = wait.warm_us if wait is not None else 0
                    probe = start_probe()
                    with GcPauses() as gc_pauses:
                        for seg, n in enumerate(split_blocks(blocks, segments)):
                            for loaded in ((False, True) if seg % 2 == 0 else (True, False)):
                                pump = start_pump(resident_pump(w2)) if loaded else None
                                try:
                                    if pump is not None:
                                        wait_started(pump)
                                    paced_w1(feed, w1_inputs, warmup=SETTLE_BLOCKS, blocks=0,
                                              period_ns=self.period_ns, release_call=at)
                                    w1.set_trace(n)
                                    first = feed.count
                                    run = paced_w1(feed, w1_inputs, warmup=0, blocks=n, period_ns=self.period_ns,
                                                    release_call=at)
                                    late = feed.back_late_us(first, run.starts, warm_us) if at is not None else None
                                    (out.load if loaded else out.solo).add(run, w1.block_trace(), late)
                                finally:
                                    if pump is not None:
                                        finish_pump(pump)
                                if pump is not None:
                                    out.w2_done += pump.count(run.t_start, run.t_end)
                                    out.w2_seconds += (run.t_end - run.t_start) / 1e9
                    out.stalls = stop_probe(probe)
                    out.gc = gc_pauses.spans()
                    out.w1_blocks, out.w1_last = feed.count, list(feed.last)
                    out.extra = {"scheduler_w1": sched.stream_stats(sid1), "scheduler_w2": sched.stream_stats(sid2),
                                 "dispatch": dispatch.stats(), "declared_cost_ns": self.cost_ns,
                                 "segments": segments}
                out.w2_samples_per_s = out.w2_done * spb / out.w2_seconds if out.w2_seconds > 0 else 0.0
            finally:
                w2.close()
        finally:
            w1.close()
        return out

    def w1_reference(self, inputs: list[np.ndarray], upto: list[int]) -> list[list[np.ndarray]]:
        """W1 alone from reset on a fresh engine, back to back, with the feed's input sequence:
        for each n in ``upto``, the last W1_CHECK_BLOCKS outputs of its first n blocks."""
        engine = self._engine(self.bench.realtime, self.c1)
        try:
            feed = Feed(engine.process, inputs)
            outs = []
            for n in sorted(upto):
                while feed.count < n:
                    feed(None)
                outs.append(list(feed.last))
        finally:
            engine.close()
        order = sorted(range(len(upto)), key=lambda i: upto[i])
        return [outs[order.index(i)] for i in range(len(upto))]


@dataclass
class Timed:
    """The timed W1 blocks of one kind (alone or loaded), gathered over the segments."""

    runs: list[W1Run] = field(default_factory=list)
    traces: list[dict[str, np.ndarray]] = field(default_factory=list)
    back_late: list[np.ndarray] = field(default_factory=list)  # per block: us late back from the sleep (NaN: unknown)

    def add(self, run: W1Run, trace: dict[str, np.ndarray], back_late_us: np.ndarray | None = None) -> None:
        self.runs.append(run)
        self.traces.append(trace)
        self.back_late.append(np.full(len(run.lat_ns), np.nan) if back_late_us is None else back_late_us)

    @property
    def lat_ns(self) -> np.ndarray:
        return np.concatenate([r.lat_ns for r in self.runs])

    @property
    def overruns(self) -> int:
        return sum(r.overruns for r in self.runs)

    def breakdown(self, deadline_ns: int | None = None) -> Breakdown:
        trace = {k: np.concatenate([t[k] for t in self.traces]) for k in self.traces[0]}
        return breakdown(trace, np.concatenate([r.starts for r in self.runs]),
                         np.concatenate([r.ends for r in self.runs]), deadline_ns=deadline_ns)


@dataclass
class Interleaved:
    stalls: tuple[np.ndarray, np.ndarray] | None = None  # the stall probe's (starts, lengths), ns
    gc: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # the collector's (starts, ends, generations), ns
    solo: Timed = field(default_factory=Timed)
    load: Timed = field(default_factory=Timed)
    w2_outputs: list[np.ndarray] = field(default_factory=list)
    w2_done: int = 0             # W2 blocks completed inside the load segments' timed windows
    w2_seconds: float = 0.0      # ... and those windows' total length
    w2_samples_per_s: float = 0.0
    w1_blocks: int = 0           # W1 blocks from reset to the end of the run
    w1_last: list[np.ndarray] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def miss_causes(timed: "Timed", bd: Breakdown, stalls: tuple[np.ndarray, np.ndarray] | None,
                gc_spans: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """Each W1 block over the deadline: a *host stall* when the stall probe (a thread on another
    CPU that only reads the clock) stopped for >= HOST_STALL_US while the block ran (the whole
    guest or its CPUs were held: nothing in the process can fix that); a *host slowdown* when the
    block's fixed CPU work (SLOW_PHASES: copies of a fixed size, no lock, no wait) took
    HOST_SLOW_FACTOR times its median or more: the CPU under the W1 thread ran slow (its vCPU
    shared or preempted beneath the guest, which a probe on another CPU cannot see); else the
    *process*'s. Two more rules, checked in this order after those: a miss whose W1 thread made
    no context switch at all from the start of its wait to its output (it neither slept nor
    blocked, and the guest's scheduler never took its CPU: the thread spun through, qos.spin_us >=
    the period) and yet did not run for HOST_STALL_US or more of it (wall minus the thread's CPU
    time: the guest charges stolen time to nobody) is a *host stall* too: its vCPU was held
    beneath the guest (``vcpu_held``); and a miss within EPISODE_GAP_NS of a host stall or
    slowdown is one episode with it and takes its cause (``episode_of``: that miss's block), as
    the capacity sweep's episodes do. Facts beside each miss, which the cause does not use: how
    late the W1 thread came back from its paced sleep (``back_late_us``: to Python, against the
    release - warm_us it asked for), its context switches (``switches``: voluntary, involuntary),
    the time it did not run (``off_cpu_us``) and how long the garbage collector ran inside the
    block (``gc_us``); the process's misses are counted by them too (``process_late_back``: back
    >= LATE_BACK_US late; ``process_gc``: a collection of 50 us or more inside)."""
    out: dict[str, Any] = {"misses": len(bd.over), "host_stall": 0, "host_slow": 0, "process": 0,
                           "process_late_back": 0, "process_gc": 0, "vcpu_held": 0, "episode": 0, "blocks": []}
    if gc_spans is not None:
        out["gc_collections"] = int(len(gc_spans[0]))
        out["gc_max_us"] = float((gc_spans[1] - gc_spans[0]).max()) / 1e3 if len(gc_spans[0]) else 0.0
    if stalls is None:
        out["probe"] = "none"
        return out
    g0, glen = stalls
    big = glen >= HOST_STALL_US * 1000
    g0, g1 = g0[big], g0[big] + glen[big]
    starts = np.concatenate([r.starts for r in timed.runs])
    ends = np.concatenate([r.ends for r in timed.runs])
    back_late = np.concatenate(timed.back_late) if timed.back_late else np.full(len(starts), np.nan)
    switches = (np.concatenate([r.switches for r in timed.runs])
                if timed.runs and all(r.switches is not None for r in timed.runs) else None)
    out["probe_gaps"] = int(big.sum())
    work_p50 = sum(ph.p50_us for ph in bd.phases if ph.name in SLOW_PHASES)
    slow_at = max(HOST_SLOW_FACTOR * work_p50, work_p50 + HOST_SLOW_MIN_US)
    for o in bd.over:
        a, b = int(starts[o.index]), int(ends[o.index])
        hit = (g0 < b) & (g1 > a)
        stalled = int(glen[big][hit].max()) / 1e3 if hit.any() else 0.0
        work = sum(o.phases_us.get(k, 0.0) for k in SLOW_PHASES)
        cause = "host_stall" if hit.any() else "host_slow" if work_p50 > 0 and work >= slow_at else "process"
        sw = None if switches is None or o.index >= len(switches) else [int(v) for v in switches[o.index]]
        block = {"index": o.index, "total_us": o.total_us, "largest": o.largest, "cause": cause,
                 "probe_stall_us": stalled, "start_ns": a}
        if sw is not None:
            block["switches"], block["off_cpu_us"] = sw[:2], round(sw[2] / 1e3, 1)
            if cause == "process" and sw[:2] == [0, 0] and sw[2] >= HOST_STALL_US * 1000:
                block["cause"], block["vcpu_held"] = "host_stall", True
                out["vcpu_held"] += 1
        late = float(back_late[o.index]) if o.index < len(back_late) else float("nan")
        gc_ns, gc_gen = overlap_ns(gc_spans, a, b)
        block.update({"back_late_us": None if np.isnan(late) else round(late, 1), "gc_us": round(gc_ns / 1e3, 1),
                      "gc_generation": gc_gen, "gpu_us": None if o.gpu_us is None else round(o.gpu_us, 1)})
        out["blocks"].append(block)
    for block in out["blocks"]:  # one episode with a host's miss: its cause
        if block["cause"] != "process":
            continue
        near = [h for h in out["blocks"] if h["cause"] != "process" and "episode_of" not in h
                and abs(h["start_ns"] - block["start_ns"]) <= EPISODE_GAP_NS]
        if near:
            h = min(near, key=lambda h: abs(h["start_ns"] - block["start_ns"]))
            block["cause"], block["episode_of"] = h["cause"], h["index"]
            out["episode"] += 1
    for block in out["blocks"]:
        out[block["cause"]] += 1
        if block["cause"] == "process":
            late = block["back_late_us"]
            out["process_late_back"] += int(late is not None and late >= LATE_BACK_US)
            out["process_gc"] += int(block["gc_us"] >= 50)
        del block["start_ns"]
    return out
