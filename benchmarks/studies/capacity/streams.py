"""The capacity sweep's runs of N streams: pygpukit-dsp's engines on one scheduler and dispatcher, the
floor's bare round trips, and PyTorch + CUDA graph (a Python thread and a CUDA stream each)."""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from pygpukit_dsp.backends.cuda_dispatch import DEFAULT_TIME_EVERY
from pygpukit_dsp.bench.stall_probe import start_probe, stop_probe
from pygpukit_dsp.bench.steal import StealSampler, steal_summary, steal_ticks

from .. import off_cpu
from .episodes import host_steps_us, miss_episodes, own_load
from .predict import staggered_phases
from .report import CapacityPoint
from .settings import ALIGNED, DECLARED_COST_NS, FLOOR, FLOOR_ALIGNED, TARGET_STREAMS, deadline_key

if TYPE_CHECKING:
    from pygpukit_dsp.pipeline import Pipeline


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def record_figures(point: CapacityPoint, lat_ns: np.ndarray, deadlines_ms: tuple[float, ...] | list[float]) -> None:
    point.blocks = int(lat_ns.size)
    if lat_ns.size == 0:
        point.status, point.reason = "failed", "no timed block"
        return
    us = lat_ns.astype(np.float64) / 1e3
    point.p50_us, point.p99_us, point.p999_us = (float(v) for v in np.percentile(us, [50, 99, 99.9]))
    point.max_us = float(us.max())
    point.misses = {deadline_key(d): int((us > d * 1e3).sum()) for d in deadlines_ms}


def paced_run(pt: CapacityPoint, targets: list[Any], period_ns: int, inputs: list[np.ndarray], warmup_s: float,
               seconds: float, deadlines_ms: tuple[float, ...] | list[float], threads: int, spin_us: int,
               aligned: bool = False, dispatch: Any = None) -> float:
    """``_native.run_paced`` over ``targets`` (engines or floors; stream i's phase i * period / N,
    or 0 for every stream when ``aligned``), the stall probe and the steal sampler beside it, the
    driver threads and ``dispatch``'s worker (a CudaDispatch, if any) watched (studies/off_cpu.py); fills
    ``pt``'s latency figures, misses by episode, steal, gaps, late count and CPU use. Returns the
    wall time."""
    from pygpukit_dsp import _native

    n = len(targets)
    watch = off_cpu.WATCH_GAP_US if _native.instrument.OffCpuMeter.available() else 0.0
    if dispatch is not None and watch:
        dispatch.watch_off_cpu(watch)
    probe = start_probe()
    steal = StealSampler().start()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    phases = [0] * n if aligned else staggered_phases(n, period_ns)
    try:
        res = _native.run_paced(targets, [period_ns] * n, phases, [inputs] * n, warmup_s, seconds, threads, spin_us,
                                watch_gap_us=watch)
    finally:
        stalls = stop_probe(probe)
        steal.stop()
    wall = time.perf_counter() - t0
    pt.cpu_cores = (cpu_seconds() - cpu0) / wall
    lat = np.concatenate([np.asarray(a, dtype=np.int64) for a in res["latency_ns"]])
    record_figures(pt, lat, deadlines_ms)
    gaps: off_cpu.Gaps | None = None
    slow_log = None
    if watch:
        gaps = [(f"driver thread {i}", g) for i, g in enumerate(res.get("thread_gaps", []))]
        if dispatch is not None:
            gaps.append(("dispatcher's worker", dispatch.off_cpu_gaps()))
            slow_log = [tuple(x) for x in dispatch.stats().get("slow_log", [])]
        pt.extra["off_cpu"] = off_cpu.summary(gaps, int(res["timed_from_ns"]), int(res["end_ns"]))
    pt.extra["misses_when_at"] = {deadline_key(d): miss_episodes(res, period_ns, 0 if aligned else n, d, stalls, threads, steal,
                                                         gaps, slow_log)
                                  for d in deadlines_ms}
    pt.extra["misses_when"] = pt.extra["misses_when_at"][deadline_key(max(deadlines_ms))]
    pt.extra["steal"] = steal.summary()
    pt.extra["host_steps_us"] = host_steps_us(res)
    pt.late = int(sum(res["late"]))
    return wall


class ProjectStreams:
    """Up to max(ladder) W1 engines, opened once; each run attaches the first N to a fresh scheduler
    and dispatcher (the Session's one-GPU path) and drives them natively."""

    def __init__(self, pipeline: "Pipeline", inputs: list[np.ndarray], *, threads: int, spin_us: int,
                 dispatcher_spin_us: int, device: int = 0, engine_kwargs: dict[str, Any] | None = None,
                 time_every: int | None = None):
        from pygpukit_dsp.backends import choose_backend
        from pygpukit_dsp.backends.cuda_engine import CudaEngine

        self.pipeline, self.inputs, self.threads, self.spin_us = pipeline, inputs, threads, spin_us
        self.dispatcher_spin_us, self.device = dispatcher_spin_us, device
        self.time_every = time_every or DEFAULT_TIME_EVERY  # CudaDispatch.time_every
        # the GPU's calibration (its dispatcher's work per block and lock hold), as a Session's
        # admission reads it; set by the sweep (None: the reference figures)
        self.calibration: Any = None
        self.chain = pipeline.specs()
        self.period_ns = int(round(self.chain.input.block_period * 1e9))
        self.engines: list[Any] = []
        # (n, aligned) -> its rehearsal (admission.RehearsalRun, its latencies dropped) and their tail
        self.rehearsed: dict[tuple[int, bool], tuple[Any, Any]] = {}
        choice = choose_backend(pipeline, self.chain, "cuda")
        # the realtime defaults (what a Session opens); engine_kwargs: tests (a fake driver without
        # mapped host memory)
        self._open = lambda: CudaEngine(pipeline, self.chain, choice, device=device, **(engine_kwargs or {}))

    def ensure(self, n: int) -> None:
        while len(self.engines) < n:
            self.engines.append(self._open())

    def session_cost(self) -> Any:
        """What a Session's admission measures for a realtime W1 stream (a BlockCost)."""
        from pygpukit_dsp.admission import calibration_pace, measure_engine_cost

        self.ensure(1)
        return measure_engine_cost(self.engines[0], self.chain.input,
                                   **calibration_pace(self.pipeline.qos, self.chain.input))

    def rehearsed_ns(self, n: int, aligned: bool = False, deadline_ns: int | None = None) -> int:
        """A Session's rehearsal of n of these streams (admission.rehearse, once per n and
        ``aligned``) at the sweep's staggered phases (their clocks' phases declared), or ``aligned``
        (none declared: all released at once): the median block cost among them, as admission
        takes it under U_max 0.9 for streams whose deadline is ``deadline_ns`` (None: the period)
        (the larger of the GPU's share and the dispatcher's serial work per block as counted:
        admission.RehearsalRun.costs)."""
        from pygpukit_dsp.admission import rehearse

        if (n, aligned) not in self.rehearsed:
            self.ensure(n)
            spec = self.chain.input
            phases = None if aligned else staggered_phases(n, self.period_ns)
            run = rehearse(self.engines[:n], [spec] * n, [self.period_ns] * n, device=self.device,
                           threads=self.threads, spin_us=self.spin_us, dispatcher_spin_us=self.dispatcher_spin_us,
                           phases_ns=phases, time_every=self.time_every)
            tail = run.tail()
            run.latency_ns = []  # the tail is fitted: the latencies are not kept
            self.rehearsed[n, aligned] = (run, tail)
        run = self.rehearsed[n, aligned][0]
        return int(np.median(run.costs(deadline_ns=self.period_ns if deadline_ns is None else deadline_ns,
                                       calibration=self.calibration)))

    def tail(self, n: int, aligned: bool = False) -> Any:
        """The latency tail of the rehearsal of n streams (admission.LatencyTail; None: not rehearsed)."""
        return self.rehearsed[n, aligned][1] if (n, aligned) in self.rehearsed else None

    def dispatch_us(self, aligned: bool) -> dict[str, float]:
        """N -> the dispatcher's serial work per block (us) in the rehearsals of N streams made so
        far, staggered or ``aligned`` (Prediction.dispatch_us)."""
        return {str(n): v[0].dispatch_ns / 1e3 for (n, a), v in self.rehearsed.items() if a == aligned}

    def overlap(self, aligned: bool) -> dict[str, float]:
        """N -> blocks on the GPU at once in the rehearsals of N streams (Prediction.overlap)."""
        return {str(n): v[0].overlap for (n, a), v in self.rehearsed.items() if a == aligned}

    def run(self, n: int, seconds: float, phase: str, warmup_s: float,
            deadlines_ms: tuple[float, ...] | list[float], aligned: bool = False) -> CapacityPoint:
        from pygpukit_dsp_core import Scheduler

        from pygpukit_dsp.backends.cuda_dispatch import CudaDispatch

        pt = CapacityPoint(ALIGNED if aligned else "pygpukit-dsp", n, seconds, phase)
        self.ensure(n)
        engines = self.engines[:n]
        P = self.period_ns
        sched = Scheduler()
        ids = [sched.register_stream(f"{self.pipeline.name}_{i}", "realtime", period_ns=P, deadline_ns=P,
                                     cost_ns=DECLARED_COST_NS) for i in range(n)]
        for e in engines:
            e.reset()
        with CudaDispatch(sched, device_index=self.device, spin_us=self.dispatcher_spin_us,
                          time_every=self.time_every) as dispatch:
            for e, sid in zip(engines, ids):
                dispatch.attach(e, sid)
            wall = paced_run(pt, [e.native for e in engines], P, self.inputs, warmup_s, seconds, deadlines_ms,
                              self.threads, self.spin_us, aligned, dispatch=dispatch)
            stats = [dispatch.stream_stats(sid) for sid in ids]
            pt.extra["dispatch"] = {k: v for k, v in dispatch.stats().items() if k != "slow_log"}
        busy = sum(int(s.get("busy_ns", 0)) for s in stats)
        pt.gpu_busy, pt.gpu_busy_how = busy / (wall * 1e9), "events"
        # the share of the run its steps held the dispatcher's lock (every block passes through it)
        pt.extra["dispatcher_busy"] = sum(pt.extra["dispatch"].get("step_ns", {}).values()) / (wall * 1e9)
        for when in pt.extra["misses_when_at"].values():
            own_load(when, pt.gpu_busy, pt.cpu_cores, len(os.sched_getaffinity(0)), pt.extra["dispatcher_busy"])
        measured = [s.get("measured_cost_ns") for s in stats if s.get("measured_cost_ns")]
        pt.extra["measured_gpu_cost_ns"] = float(np.median(measured)) if measured else None
        pt.extra["scheduler_missed"] = int(sum(int(s.get("missed", 0)) for s in stats))
        pt.extra["scheduler_p99_us"] = float(max((s.get("latency", {}).get("p99", 0) or 0) for s in stats)) / 1e3
        return pt

    def close(self) -> None:
        for e in self.engines:
            with contextlib.suppress(Exception):
                e.close()
        self.engines = []


class FloorStreams:
    """The capacity floor: N bare round trips (``_native.instrument.RoundTripFloor``: the W1 block to the GPU
    and its output's size back, no pipeline, no scheduler, one CUDA stream each), released by the
    same driver threads on the same staggered clocks as the project's streams. Where the floor
    itself misses at N, N streams were more than this machine allowed in that run, whatever they
    ran (the paced rotation's floor, pygpukit_dsp/bench/cadence.py, does the same for one stream)."""

    def __init__(self, chain: Any, inputs: list[np.ndarray], *, threads: int, spin_us: int, device: int = 0):
        from pygpukit_dsp import _native

        self.device = _native.Device(device)
        self.inputs = [np.ascontiguousarray(x) for x in inputs]
        self.in_bytes, self.out_bytes = int(chain.input.block_nbytes), int(chain.output.block_nbytes)
        self.period_ns = int(round(chain.input.block_period * 1e9))
        self.threads, self.spin_us = threads, spin_us
        self.floors: list[Any] = []

    def run(self, n: int, seconds: float, phase: str, warmup_s: float,
            deadlines_ms: tuple[float, ...] | list[float], aligned: bool = False) -> CapacityPoint:
        from pygpukit_dsp import _native

        while len(self.floors) < n:
            self.floors.append(_native.instrument.RoundTripFloor(self.device, self.in_bytes, self.out_bytes))
        pt = CapacityPoint(FLOOR_ALIGNED if aligned else FLOOR, n, seconds, phase)
        paced_run(pt, self.floors[:n], self.period_ns, self.inputs, warmup_s, seconds, deadlines_ms, self.threads,
                   self.spin_us, aligned)
        for when in pt.extra["misses_when_at"].values():
            own_load(when, None, pt.cpu_cores, len(os.sched_getaffinity(0)))
        return pt

    def close(self) -> None:
        self.floors = []


def floor_plan(points: list[CapacityPoint], deadline_ms: float) -> list[tuple[int, str]]:
    """The floor's runs, after the project's sweep: a coarse run at every N where the project's
    coarse sweep missed at ``deadline_ms`` (where its misses began), and, when the project did not
    confirm TARGET_STREAMS, a confirmation at TARGET_STREAMS (the target's verdict needs it)."""
    proj = [p for p in points if p.impl == "pygpukit-dsp" and p.status == "ok"]
    plan = [(p.n, "coarse") for p in proj if p.phase == "coarse" and not p.zero_misses(deadline_ms)]
    held = [p.n for p in proj if p.phase == "confirm" and p.zero_misses(deadline_ms)]
    if not held or max(held) < TARGET_STREAMS:
        plan.append((TARGET_STREAMS, "confirm"))
    return plan


# ----------------------------------------------------------------------------- PyTorch + graph


class TorchStreams:
    """Up to max(ladder) torch-graph W1 baselines, one Python thread and one CUDA stream each."""

    def __init__(self, pipeline: "Pipeline", inputs: list[np.ndarray]):
        from pygpukit_dsp.bench.baselines.torch_impl import TorchBaseline, import_torch

        self.torch = import_torch()
        self.pipeline, self.inputs = pipeline, inputs
        self.chain = pipeline.specs()
        self.period_ns = int(round(self.chain.input.block_period * 1e9))
        self._make = lambda: TorchBaseline(pipeline, self.chain, graph=True)
        self.impls: list[Any] = []
        self.streams: list[Any] = []
        self.gpu_ns = self._block_gpu_ns()

    def ensure(self, n: int) -> None:
        while len(self.impls) < n:
            s = self.torch.cuda.Stream()
            with self.torch.cuda.stream(s):
                self.impls.append(self._make())
            self.streams.append(s)

    def _block_gpu_ns(self) -> float:
        self.ensure(1)
        times = self.impls[0].time_resident(self.inputs[0], 50)
        return float(np.median(times)) * 1e9

    def run(self, n: int, seconds: float, phase: str, warmup_s: float,
            deadlines_ms: tuple[float, ...] | list[float]) -> CapacityPoint:
        pt = CapacityPoint("torch-graph", n, seconds, phase)
        self.ensure(n)
        P = self.period_ns
        torch = self.torch
        start = time.perf_counter_ns() + 100_000_000 + n * 1_000_000  # every thread started by then
        timed_from = start + int(warmup_s * 1e9)
        end = timed_from + int(seconds * 1e9)
        lat: list[list[int]] = [[] for _ in range(n)]
        late = [0] * n
        errors: list[BaseException] = []
        inputs = self.inputs

        def worker(i: int) -> None:
            impl, stream, out = self.impls[i], self.streams[i], lat[i]
            perf = time.perf_counter_ns
            try:
                with torch.cuda.stream(stream):
                    k = 0
                    while True:
                        release = start + i * P // n + k * P
                        if release >= end:
                            return
                        now = perf()
                        if release > now:
                            time.sleep((release - now) / 1e9)
                        elif now - release > P:
                            late[i] += 1
                        impl.process(inputs[k % len(inputs)])
                        t = perf()
                        if release >= timed_from:
                            out.append(t - release)
                        k += 1
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,), daemon=True, name=f"torch-w1-{i}") for i in range(n)]
        cpu0, t0, steal0 = cpu_seconds(), time.perf_counter(), steal_ticks()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        pt.cpu_cores = (cpu_seconds() - cpu0) / wall
        pt.extra["steal"] = steal_summary(steal0, steal_ticks(), wall)
        if errors:
            pt.status, pt.reason = "failed", f"{type(errors[0]).__name__}: {errors[0]}"
            return pt
        record_figures(pt, np.concatenate([np.asarray(x, dtype=np.int64) for x in lat]), deadlines_ms)
        pt.late = int(sum(late))
        pt.gpu_busy, pt.gpu_busy_how = n * self.gpu_ns / P, "estimated"
        return pt

    def close(self) -> None:
        for impl in self.impls:
            with contextlib.suppress(Exception):
                impl.close()
        self.impls, self.streams = [], []
