"""Admission of a session's streams by the Rust scheduler, before any block flows.

Every stream is registered under its QoS class with the scheduler of the device that runs its
blocks: one ``pygpukit_dsp_core.Scheduler`` per GPU in use (device keys ``"cuda"`` for GPU 0,
``"cuda:1"``, ``"cuda:2"``, ... for the others) and one for its CPU streams (the host's
dispatcher thread, see backends/cpu_dispatch.py). The scheduler models one device as one queue,
so CPU work never counts against a GPU's utilisation bound, one GPU's streams never against
another's, and each dispatcher only ever sees tasks of its own streams.

A stream with ``device: auto`` is *placed* here: its cost is known (declared or measured on
the GPU its engine was opened on), then the GPUs are tried in order of admission headroom (most
first: see :func:`headroom`) and the first that admits it keeps it; when that is not the GPU
its engine is on, the runner opens its engine again there (:meth:`StreamRunner.move_to_gpu`).
Refused by every GPU: an AdmissionError with each GPU's reason. Each runner gets a
:class:`Placement` saying where it runs and why (the run summary prints it).

A realtime stream (and a throughput stream with ``min_rate``) needs its per-block cost: the
declared ``qos.cost_us``, or one measured here by running a few blocks of zeros through the
opened engine (then its state is reset; a round that met a host hiccup is timed again): its
device time back to back (on a GPU, CUDA events around each block's work) for the scheduler's
sums, and its own latency alone (host wall clock; a realtime stream's blocks one period apart)
for its own wait (:class:`BlockCost`), once per kind of stream: streams with the same kind of
device (a GPU's model), engine, QoS class, input and stages share the measurement. Every stream gets its QoS deadline (``deadline_ms``,
default one block period), so the scheduler counts misses as the QoS line reports them. A
refusal is an AdmissionError carrying the scheduler's figures (utilisation of the stream, total
already admitted on that device, the bound, and for the response bound the costs and the
shortest deadline), raised before the first block.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from .devices import device_key, device_of, gpu_of, is_gpu  # noqa: F401  (device keys: devices.py)
from .errors import AdmissionError, ConfigError

if TYPE_CHECKING:
    from pygpukit_dsp_core import Scheduler

    from .runner import StreamRunner

CALIBRATION_BLOCKS = 8
CALIBRATION_ROUNDS = 3      # rounds of CALIBRATION_BLOCKS at most, while a round is not calm
CALM_FACTOR = 3.0           # a round is calm when its slowest block is within this many times its median
CALIBRATION_GAP_MAX_S = 0.01  # realtime calibration blocks come one period apart, at most this far
DEFAULT_U_MAX = 0.9         # the utilisation bound (Session(u_max=...), gk-stream run --u-max)
REHEARSAL_SHARE = 0.5       # rehearse a GPU's realtime streams when, costed alone, they fill more than this share of a bound
REHEARSAL_S = 0.3           # the rehearsal's first timed window (after REHEARSAL_WARMUP_S): device times
REHEARSAL_TAIL_S = 1.0      # its second: the dispatcher's work per block and the latency tail
REHEARSAL_WARMUP_S = 0.2
TAIL_QUANTILE = 0.9         # the rehearsal's latency tail: the excess over this quantile (LatencyTail)
TAIL_HORIZON_S = 60.0       # admission wants no block of a rehearsed kind past its deadline within this long
TAIL_MIN_BLOCKS = 200       # fewer rehearsed blocks of a kind: no tail estimate for it
DISPATCH_BUSY_MAX = 0.85    # the dispatcher's lock may be held at most this share of the time (dispatch_cost_ns) ...
DISPATCH_HOLD_NS = 800_000  # ... and less for short deadlines: a block may find it held this long (dispatch_busy_max)
DISPATCH_TYPICAL_NS = 12_000  # the dispatcher's serial work per block among many streams, before a rehearsal (crowded)


def _sleep_s(seconds: float) -> None:
    time.sleep(seconds)


def _spin_until(t_ns: int) -> None:
    while time.perf_counter_ns() < t_ns:
        pass  # the GIL is held: admission runs before any stream's thread


@dataclass(frozen=True)
class BlockCost:
    """What admission knows of one kind of stream's block, measured before the first block.

    ``device_ns`` is what the scheduler sums (the utilisation bound, Σ C in the response bound, and
    what its dispatcher measures later with events): how long one block holds its device, timed
    back to back. On a GPU, the larger of the block's GPU time (CUDA events around its work; the
    median of the round: a share of the device is an average) and the host time its launch calls
    took (whoever launches every stream's blocks, a dispatcher, does that one block at a time).
    On the host's dispatcher (CPU backend) blocks run one at a time, so it is the wall clock.
    ``latency_ns`` is the block's own latency alone (host wall clock, the slowest of a round at
    the stream's period): the response bound adds its excess over the device time to the stream's
    own wait, once, not once per stream (the host's copies and completion wait overlap other
    streams' blocks).
    """

    device_ns: int
    latency_ns: int
    how: str                     # how device_ns was measured
    gpu_ns: int | None = None    # the GPU time alone (median), when measured
    launch_ns: int | None = None  # the launch's host time alone (median), when measured

    def describe(self) -> str:
        alone = f"{self.latency_ns / 1e3:.1f} us alone, call to done"
        if self.gpu_ns is None:
            return f"{self.device_ns / 1e3:.1f} us of device time per block ({self.how}), {alone}"
        return (f"{self.device_ns / 1e3:.1f} us of device time per block ({self.how}: GPU "
                f"{self.gpu_ns / 1e3:.1f} us, launch {(self.launch_ns or 0) / 1e3:.1f} us), {alone}")


def _timed_round(engine: Any, x: np.ndarray, blocks: int, rounds: int, timing: bool,
                 pace: Callable[[], None]) -> tuple[list[int], list[int], list[int]]:
    """The first calm round of up to ``rounds`` of ``blocks`` blocks (see measure_engine_cost):
    the wall, GPU and launch times of its blocks."""
    least: tuple[list[int], list[int], list[int]] | None = None
    for _ in range(max(1, rounds)):
        times, gpu, launch = [], [], []
        for _ in range(blocks):
            pace()
            t0 = time.perf_counter_ns()
            engine.process(x)
            times.append(time.perf_counter_ns() - t0)
            if timing:
                gpu.append(int(engine.last_gpu_ns))
                launch.append(int(engine.last_launch_ns))
        if max(times) <= CALM_FACTOR * float(np.median(times)):
            return times, gpu, launch  # calm
        if least is None or max(times) < max(least[0]):
            least = (times, gpu, launch)
    assert least is not None
    return least


def measure_engine_cost(engine: Any, spec: Any, blocks: int = CALIBRATION_BLOCKS,
                        rounds: int = CALIBRATION_ROUNDS, gap_s: float | None = None,
                        spin_s: float = 0.0) -> BlockCost:
    """Time full blocks of zeros through ``engine`` (after one warm-up block): rounds of
    ``blocks`` blocks, the first calm one of up to ``rounds`` kept (a round whose slowest block
    took over CALM_FACTOR times its median, host wall clock, met a host hiccup: a preemption is
    not the block's cost; when none is calm, the round with the least slowest block).

    The device time comes from blocks back to back: on a GPU (an engine with ``set_gpu_timing``,
    the CUDA engine) the median GPU time (events) and launch time of the round; on the host's
    dispatcher its median wall clock. Back to back, with the host awake, it is reproducible (W1 on
    the H100: 10.6-10.9 us in every round); blocks that come after an idle gap take 11-19 us at
    the median, as the host wakes slowly or not (docs/scheduler.md). The latency alone is the
    slowest block of a round started ``gap_s`` apart (a realtime stream's period; the wait before
    each sleeps until ``spin_s`` before its start, then spins, as a Session's runner of a
    clock-paced source does with ``qos.spin_us``), each timed from its call: what its own block
    takes when it comes on its clock; None: of the back-to-back round. The engine's state is reset
    after. See :class:`BlockCost`."""
    timing = callable(getattr(engine, "set_gpu_timing", None))
    x = np.zeros(spec.block_shape, spec.np_dtype)
    gap_ns = int(gap_s * 1e9) if gap_s else 0
    spin_ns = min(int(spin_s * 1e9), gap_ns)
    next_at = 0

    def pace() -> None:
        nonlocal next_at
        now = time.perf_counter_ns()
        next_at = max(next_at + gap_ns, now) if next_at else now + gap_ns
        if next_at - spin_ns > now:
            _sleep_s((next_at - spin_ns - now) / 1e9)
        if spin_ns:
            _spin_until(next_at)

    if timing:
        engine.set_gpu_timing(True)
    try:
        engine.process(x)
        b2b = _timed_round(engine, x, blocks, rounds, timing, lambda: None)
        paced = _timed_round(engine, x, blocks, rounds, timing, pace) if gap_ns else b2b
    finally:
        if timing:
            engine.set_gpu_timing(False)
    engine.reset()
    latency = max(1, max(paced[0]))
    wall, gpu, launch = int(np.median(b2b[0])), b2b[1], b2b[2]
    if not timing:
        return BlockCost(max(1, wall), max(latency, wall), "wall clock: the host's dispatcher runs one block at a time")
    if not gpu or min(gpu) <= 0:
        return BlockCost(max(1, wall), max(latency, wall), "wall clock: the driver gave no GPU time for the block")
    g, l = int(np.median(gpu)), int(np.median(launch))
    how = "GPU events" if g >= l else "the launch's host time (more than the GPU time)"
    return BlockCost(max(1, g, l), max(latency, g, l), how, gpu_ns=g, launch_ns=l)


def calibration_pace(qos: Any, spec: Any) -> dict[str, Any]:
    """measure_engine_cost's ``gap_s`` and ``spin_s`` for a stream: a realtime stream's blocks one
    block period apart (at most CALIBRATION_GAP_MAX_S), as its blocks will come, spinning its
    ``qos.spin_us`` before each as its runner will; other classes back to back."""
    if qos.cls != "realtime":
        return {"gap_s": None, "spin_s": 0.0}
    return {"gap_s": min(float(spec.block_period), CALIBRATION_GAP_MAX_S), "spin_s": qos.spin_window_us() / 1e6}


def measure_block_cost(runner: "StreamRunner", blocks: int = CALIBRATION_BLOCKS) -> BlockCost:
    """:func:`measure_engine_cost` of the runner's engine and input, paced by :func:`calibration_pace`."""
    return measure_engine_cost(runner.engine, runner.chain.input, blocks,
                               **calibration_pace(runner.pipeline.qos, runner.chain.input))


def cost_key(runner: "StreamRunner") -> str:
    """What a block's measured cost depends on: the kind of device its engine runs on (a GPU's
    model, not its index: GPUs of one model run a block alike), the engine, the QoS class (the
    engine's options follow it), the input and the stages. Streams of one session with the same
    key share one measurement (the same work costs the same; timed once, a host hiccup cannot
    make one of them look costlier and ``device: auto`` place identical streams unevenly)."""
    device = device_of(runner)
    model = getattr(getattr(runner.engine, "device", None), "name", None)
    if is_gpu(device) and isinstance(model, str):
        device = f"cuda: {model}"
    stages = [st.to_config() for st in getattr(runner.pipeline, "stages", [])]
    return json.dumps([device, type(runner.engine).__name__, runner.pipeline.qos.cls, repr(runner.chain.input),
                       stages], sort_keys=True,
                      default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))  # arrays whole


@dataclass
class Placement:
    """Where a stream runs and why (``RunSummary.placement`` carries ``reason``)."""

    device: str                   # "cpu" | "cuda" | "cuda:N"
    gpu: int | None               # the GPU index (None on cpu)
    requested: Any                # the pipeline's device: None (GPU 0), an index, or "auto"
    reason: str
    headroom: dict[int, float] = field(default_factory=dict)  # auto: each GPU's, before it was placed
    refused: dict[int, str] = field(default_factory=dict)     # auto: GPUs that refused it, and why

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "gpu": self.gpu, "requested": self.requested, "reason": self.reason,
                "headroom": {str(k): v for k, v in self.headroom.items()},
                "refused": {str(k): v for k, v in self.refused.items()}}


def headroom(scheduler: "Scheduler | None", qos_class: str, u_max: float) -> float:
    """What a device's scheduler can still admit, as a fraction of the device.

    A realtime stream is bound by both admission checks, so its headroom is
    ``min(U_max - realtime utilisation, 1 - realtime utilisation - reserved throughput)``; any
    other stream's is the part of the device nobody reserved, ``1 - realtime - reserved``. A
    device without a scheduler yet (nothing placed there) has all of it.
    """
    if scheduler is None:
        rt = reserved = 0.0
    else:
        st = scheduler.stats()
        rt, reserved = float(st["realtime_utilisation"]), float(st["throughput_reserved"])
        u_max = float(st.get("u_max", u_max))
    free = 1.0 - rt - reserved
    return min(u_max - rt, free) if qos_class == "realtime" else free


def _stream_count(scheduler: "Scheduler | None") -> int:
    return 0 if scheduler is None else len(scheduler.stats()["streams"])


def units_per_block(runner: "StreamRunner") -> int:
    """Units the scheduler may split a block into: the CUDA engine's units for throughput and
    best-effort streams (paced chunk by chunk); 1 (whole blocks) for realtime and CPU streams."""
    if runner.pipeline.qos.cls == "realtime" or not is_gpu(device_of(runner)):
        return 1
    return max(1, int(getattr(runner.engine, "units_per_block", 1)))


def stream_registration(runner: "StreamRunner",
                        measured: dict[str, tuple[BlockCost, str]] | None = None) -> dict[str, Any]:
    """The keyword arguments of ``Scheduler.register_stream`` for a runner (cost measured if needed:
    ``cost_ns`` its device time, ``latency_ns`` its own latency alone; a runner given one gets
    ``measured_cost``). ``measured``: costs already measured in this admission, by
    :func:`cost_key`, with the stream they were measured on (read and filled; a runner given one
    gets ``cost_measured_on``). A declared ``qos.cost_us`` is the device time, and its latency."""
    spec, q = runner.chain.input, runner.pipeline.qos
    kw: dict[str, Any] = {"deadline_ns": max(1, round(q.deadline_s(spec.block_period) * 1e9))}
    if q.cls == "realtime":
        kw["period_ns"] = max(1, int(spec.block_period * 1e9))
    if q.cls == "throughput" and q.min_rate is not None:
        kw["min_rate_hz"] = q.min_rate / spec.block_size
    needs_cost = q.cls == "realtime" or "min_rate_hz" in kw
    if q.cost_us is not None:
        kw["cost_ns"] = max(1, int(q.cost_us * 1e3))
    elif needs_cost:
        key = cost_key(runner) if measured is not None else None
        if key is not None and key in measured:
            cost, runner.cost_measured_on = measured[key]
        else:
            cost = measure_block_cost(runner)
            if key is not None:
                measured[key] = (cost, runner.pipeline.name)
        runner.measured_cost = cost
        kw["cost_ns"] = cost.device_ns
        if q.cls == "realtime" and cost.latency_ns > cost.device_ns:
            kw["latency_ns"] = cost.latency_ns
    phase = getattr(runner, "release_phase_ns", None)
    if q.cls == "realtime" and phase is not None:
        kw["phase_ns"] = int(phase)
    kw["units_per_block"] = units_per_block(runner)
    return kw


def _requested(runner: "StreamRunner") -> Any:
    return getattr(runner, "device_request", getattr(runner.pipeline, "device", None))


def assign_phases(runners: list["StreamRunner"]) -> int:
    """Release phases for the clocks a Session paces itself (sources with ``rate: realtime``):
    the realtime streams of one block period among them, two or more, are staggered evenly over
    it (stream k of n at k * period / n; :func:`start_clocks` starts their clocks so). Each gets
    ``release_phase_ns``, which admission declares (the response bound then counts only the work
    that can be in front of each block: docs/scheduler.md, "Release phases"). A stream clocked by
    a device, the network or the caller keeps none: its block may come at any instant. Returns
    how many streams got a phase."""
    from .io._common import pacers_of

    groups: dict[int, list["StreamRunner"]] = {}
    for r in runners:
        r.release_phase_ns = None
        if r.pipeline.qos.cls == "realtime" and pacers_of(getattr(r, "source", None)):
            groups.setdefault(max(1, int(r.chain.input.block_period * 1e9)), []).append(r)
    n = 0
    for period, members in groups.items():
        if len(members) < 2:
            continue
        for k, r in enumerate(members):
            r.release_phase_ns = k * period // len(members)
            n += 1
    return n


def start_clocks(runners: list["StreamRunner"], lead_s: float = 0.02) -> float:
    """Start the clocks :func:`assign_phases` phased on one epoch ``lead_s`` from now, each at its
    stream's phase; returns the epoch (``time.perf_counter`` seconds)."""
    from .io._common import pacers_of

    epoch = time.perf_counter() + lead_s
    for r in runners:
        phase = getattr(r, "release_phase_ns", None)
        if phase is not None:
            for pacer in pacers_of(r.source):
                pacer.start_at(epoch + phase / 1e9)
    return epoch


def check_u_max(u_max: float, where: str) -> float:
    """``u_max`` as a float in (0, 1]; ValueError naming ``where`` otherwise."""
    value = float(u_max)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{where} must be in (0, 1], got {u_max}")
    return value


def admit(runners: list["StreamRunner"], *, u_max: float = DEFAULT_U_MAX,
          gpus: Sequence[int] | None = None) -> dict[str, "Scheduler"]:
    """Register every runner's stream with its device's new scheduler, in order; place
    ``device: auto`` streams on the GPU with the most headroom that admits them.

    Returns ``{"cpu": Scheduler, "cuda": Scheduler, "cuda:1": Scheduler, ...}`` for the devices in
    use (a stream's id is ``scheduler.stream_id(pipeline name)``). ``gpus``: the GPUs auto may
    use (default: every usable GPU, ``capabilities.usable_gpus()``). Each runner's
    ``placement`` is set. AdmissionError on the first refusal (for an auto stream: refused by
    every GPU); ConfigError when two pipelines share a name (the scheduler and the QoS lines tell
    streams apart by name).
    """
    from pygpukit_dsp_core import Scheduler

    seen: dict[str, "StreamRunner"] = {}
    for r in runners:
        name = r.pipeline.name
        if name in seen:
            raise ConfigError(f"two pipelines of the session are named '{name}'",
                              where=r.pipeline.where, hint="give every pipeline of a session a unique name")
        seen[name] = r

    schedulers: dict[str, Scheduler] = {}
    measured: dict[str, tuple[BlockCost, str]] = {}
    regs: list[tuple["StreamRunner", dict[str, Any]]] = []
    assign_phases(runners)
    for r in runners:
        device = device_of(r)
        requested = _requested(r)
        kw = stream_registration(r, measured)
        r.admitted_cost_ns = kw.get("cost_ns")
        regs.append((r, kw))
        if is_gpu(device) and requested == "auto":
            if gpus is None:
                from .capabilities import usable_gpus

                gpus = usable_gpus()
            candidates = list(gpus) or [gpu_of(device) or 0]  # none known: where its engine is
            r.placement = _place(r, kw, schedulers, candidates, u_max, Scheduler)
            continue
        sched = schedulers.get(device)
        fresh = sched is None
        if fresh:
            sched = Scheduler(u_max=u_max)
        refusal = _register(sched, r, kw)
        if refusal is not None:
            message, figures = refusal
            figures["device"] = device
            raise AdmissionError(r.pipeline.name, message, figures)
        if fresh:
            schedulers[device] = sched
        gpu = gpu_of(device)
        if gpu is None:
            reason = f"backend {device}"
        elif requested is None:
            reason = f"GPU {gpu}: the default (the pipeline sets no device)"
        else:
            reason = f"GPU {gpu}: requested (device: {requested})"
        r.placement = Placement(device, gpu, requested, reason)
    for device in [d for d in schedulers if is_gpu(d)]:
        schedulers[device] = _rehearse_if_crowded(device, schedulers[device], regs, u_max)
    return schedulers


# ----------------------------------------------------------------------------- the rehearsal


@dataclass(frozen=True)
class LatencyTail:
    """A kind of stream's latency from release in the rehearsal (its second window, as the streams
    will run) and how far its tail reaches: peaks over a threshold, the extreme-value estimate.
    The latencies' excesses over their TAIL_QUANTILE quantile ``threshold_ns`` are fitted with a
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
    threshold_ns: int    # their TAIL_QUANTILE quantile
    mean_excess_ns: int  # their mean excess over it
    shape: float         # the generalised Pareto's shape, in [-1, 0]
    p99_ns: int
    p999_ns: int
    max_ns: int

    @classmethod
    def of(cls, latency_ns: np.ndarray) -> "LatencyTail | None":
        """The tail of these latencies (ns); None below TAIL_MIN_BLOCKS of them."""
        lat = np.asarray(latency_ns, dtype=np.int64).ravel()
        if len(lat) < TAIL_MIN_BLOCKS:
            return None
        u, p99, p999 = np.percentile(lat, [100 * TAIL_QUANTILE, 99, 99.9])
        excess = (lat[lat > u] - u).astype(np.float64)
        mean = float(excess.mean()) if len(excess) else 0.0
        var = float(excess.var()) if len(excess) > 1 else 0.0
        # method of moments: mean = sigma / (1 - xi), var = sigma^2 / ((1 - xi)^2 (1 - 2 xi))
        shape = min(0.0, max(-1.0, 0.5 * (1.0 - mean * mean / var))) if var > 0 else -1.0
        if shape > -2.0 / math.sqrt(max(1, len(excess))):
            shape = 0.0  # within two standard errors of 0 (about 1/sqrt(n) there): exponential
        return cls(len(lat), int(u), int(round(mean)), shape, int(p99), int(p999), int(lat.max()))

    @property
    def scale_ns(self) -> float:
        return self.mean_excess_ns * (1.0 - self.shape)

    def reach_ns(self, blocks: float) -> int:
        """The latency that one block in ``blocks`` passes (at least the threshold)."""
        over = max(1.0, (1 - TAIL_QUANTILE) * blocks)  # blocks over the threshold among them
        if self.shape > -1e-9:
            return self.threshold_ns + int(self.scale_ns * math.log(over))
        return self.threshold_ns + int(self.scale_ns / self.shape * (over ** self.shape - 1.0))

    def describe(self) -> str:
        kind = ("exponential" if self.shape > -1e-9 else
                f"bounded, shape {self.shape:.2f}, at most {(self.threshold_ns - self.scale_ns / self.shape) / 1e3:.0f} us")
        return (f"latency from release p{100 * TAIL_QUANTILE:g} {self.threshold_ns / 1e3:.0f} us, "
                f"{self.mean_excess_ns / 1e3:.0f} us beyond it on average ({kind}), p99 {self.p99_ns / 1e3:.0f} us, "
                f"p99.9 {self.p999_ns / 1e3:.0f} us, max {self.max_ns / 1e3:.0f} us ({self.blocks} blocks)")


def horizon_blocks(periods_ns: Sequence[int], seconds: float = TAIL_HORIZON_S) -> float:
    """Blocks that streams of these periods release within ``seconds``."""
    return sum(seconds * 1e9 / max(1, int(p)) for p in periods_ns)


@dataclass(frozen=True)
class Rehearsal:
    """A GPU's realtime streams run together before the first block: what a block of this kind
    of stream costs among them (``RunSummary.admission`` says it)."""

    streams: int          # realtime streams rehearsed together on the GPU
    seconds: float        # its timed windows together
    device_ns: int        # this kind of stream's device time per block among them (the median of its streams')
    alone_ns: int         # its calibration alone (BlockCost.device_ns), or the declared qos.cost_us
    dispatch_ns: int = 0  # the dispatcher's serial work per block among them (RehearsalRun.dispatch_ns)
    overlap: float = 1.0  # how many blocks ran on the GPU at once, on average while it was busy (RehearsalRun.overlap)
    tail: LatencyTail | None = None  # this kind's latency from release among them
    horizon: float = 0.0             # this kind's blocks within TAIL_HORIZON_S (the tail's reach is over them)
    u_max: float = DEFAULT_U_MAX     # the utilisation bound it is admitted under (dispatch_cost_ns)
    deadline_ns: int | None = None   # the shortest deadline of the GPU's realtime streams (dispatch_busy_max)

    @property
    def reach_ns(self) -> int | None:
        """The latency one of this kind's blocks passes within TAIL_HORIZON_S (None: no tail)."""
        return self.tail.reach_ns(self.horizon) if self.tail is not None else None

    @property
    def occupancy_ns(self) -> int:
        """The GPU's time per block of this kind among them: its device time over the overlap
        (blocks of different streams run side by side, so their event-timed times add up to more
        than the time the GPU was busy)."""
        return gpu_share_ns(self.device_ns, self.overlap)

    @property
    def dispatch_cost_ns(self) -> int:
        """The dispatcher's serial work per block as admission counts it (:func:`dispatch_cost_ns`)."""
        return dispatch_cost_ns(self.dispatch_ns, self.u_max, self.deadline_ns)

    @property
    def cost_ns(self) -> int:
        """What a block of this kind costs among them: the larger of its share of the GPU
        (occupancy_ns) and the dispatcher's serial work per block as counted (dispatch_cost_ns;
        both are serial resources every block needs)."""
        return max(self.occupancy_ns, self.dispatch_cost_ns)

    def describe(self) -> str:
        out = (f"{self.device_ns / 1e3:.1f} us of device time per block among the {self.streams} realtime "
               f"streams of its GPU rehearsed together for {self.seconds:g} s ({self.alone_ns / 1e3:.1f} us alone)")
        if self.overlap > 1.0:
            out += (f", {self.overlap:.2f} blocks on the GPU at once while it was busy: "
                    f"{self.occupancy_ns / 1e3:.1f} us of the GPU per block")
        if self.dispatch_ns:
            counted, busy = self.dispatch_cost_ns, dispatch_busy_max(self.deadline_ns)
            out += (f", the dispatcher's serial work {self.dispatch_ns / 1e3:.1f} us per block"
                    + (f" (counted as {counted / 1e3:.1f} us: its lock held at most {busy:.0%} of the time"
                       + (f", for the {self.deadline_ns / 1e3:.0f} us deadline" if busy < DISPATCH_BUSY_MAX else "")
                       + ")" if counted != self.dispatch_ns else "")
                    + (" (admitted: the larger)" if counted > self.occupancy_ns else ""))
        if self.tail is not None:
            out += (f"; {self.tail.describe()}: its tail reaches {self.reach_ns / 1e3:.0f} us within "
                    f"{TAIL_HORIZON_S:g} s ({self.horizon:.0f} blocks of this kind)")
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

    def tail(self, engines: Sequence[int] | None = None) -> LatencyTail | None:
        """The latency tail of these engines' blocks together (indices; None: all)."""
        picked = self.latency_ns if engines is None else [self.latency_ns[i] for i in engines
                                                           if i < len(self.latency_ns)]
        return LatencyTail.of(np.concatenate(picked)) if picked else None

    def costs(self, u_max: float = DEFAULT_U_MAX, deadline_ns: int | None = None) -> list[int]:
        """Each engine's block cost among them, admitted under ``u_max`` with ``deadline_ns`` the
        shortest deadline: the larger of its share of the GPU (device time over the overlap) and the
        dispatcher's serial work per block as counted (:func:`dispatch_cost_ns`)."""
        d = dispatch_cost_ns(self.dispatch_ns, u_max, deadline_ns)
        return [max(gpu_share_ns(c, self.overlap), d) for c in self.device_ns]


def dispatch_busy_max(deadline_ns: int | None = None) -> float:
    """The share of the time the dispatcher's lock may be held among realtime streams whose
    shortest deadline is ``deadline_ns`` (None: no deadline known, DISPATCH_BUSY_MAX):
    ``min(DISPATCH_BUSY_MAX, 1 - DISPATCH_HOLD_NS / deadline_ns)``, 0 when the deadline is no longer
    than the hold.

    Why the deadline: a block may find the lock held for up to DISPATCH_HOLD_NS (a poll or a launch
    whose driver call stalls, or the host pausing the thread that holds it), and everything released
    meanwhile queues with it; a server busy a share U of its time clears such a backlog only at
    1 - U of its speed, so the block waits about DISPATCH_HOLD_NS / (1 - U). Keeping that within
    the deadline gives the bound. The hold, 0.8 ms, is the lock's longest steps in the 2 ms misses
    the process was blamed for (0.6-0.9 ms, W1 on an H200 in session 20), and it makes the bound at
    W1's 5.33 ms period the 85% that its runs there held to (79-85%; they missed from 82-88%). At
    2 ms it is 60%: on session 20's two H200 leases 192 W1 streams held with the lock 55-60% busy
    and the process missed from 60-65% (224 streams); on earlier leases they held to 67-74% (there
    it refuses 20-30% earlier than where misses began). The cap, 85%: past it the lock's own
    steps grow (each poll finds a bigger batch) and every run held there missed. Other deadlines
    follow from the form, untested (docs/scheduler.md, "The lock's bound at a short deadline")."""
    if deadline_ns is None:
        return DISPATCH_BUSY_MAX
    return max(0.0, min(DISPATCH_BUSY_MAX, 1.0 - DISPATCH_HOLD_NS / max(1, int(deadline_ns))))


def dispatch_cost_ns(dispatch_ns: int, u_max: float, deadline_ns: int | None = None) -> int:
    """The dispatcher's serial work per block as admission counts it against ``u_max``: scaled by
    u_max / dispatch_busy_max(deadline_ns) (at least 1), so that streams filling u_max hold its lock
    at most that share of the time (:func:`dispatch_busy_max`; ``deadline_ns``: the shortest
    deadline of the GPU's realtime streams, which share the lock). The lock is a queue whose steps
    are uneven (a poll that finds a batch of completions holds it for 0.2-1 ms, and the host's
    stalls land on it), so it cannot run as close to full as the GPU's queue. ValueError when the
    deadline is no longer than DISPATCH_HOLD_NS (no share of the lock keeps it: the caller refuses)."""
    busy = dispatch_busy_max(deadline_ns)
    if busy <= 0.0:
        raise ValueError(f"a {deadline_ns} ns deadline is no longer than the dispatcher's lock may be held "
                         f"({DISPATCH_HOLD_NS} ns)")
    return int(round(dispatch_ns * max(1.0, u_max / busy)))


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


def crowded(costs_ns: Sequence[int], periods_ns: Sequence[int], deadlines_ns: Sequence[int],
            u_max: float) -> bool:
    """Do these realtime streams, costed alone, fill more than REHEARSAL_SHARE of a bound: the
    utilisation bound u_max, the shortest deadline for the sum of their costs, or the dispatcher's
    lock (DISPATCH_BUSY_MAX, at DISPATCH_TYPICAL_NS of its work per block: a block's dispatch costs
    about the same whatever its pipeline, so hundreds of light streams fill the lock before the
    GPU)? Among hundreds of streams a block's device time grows past its calibration alone (W1 on
    the H100: 11.5 us alone, 13-15 us among 320-384 streams, docs/scheduler.md), and only a
    rehearsal measures the lock's work; below half of every bound that growth cannot reach them."""
    if len(costs_ns) < 2:
        return False
    util = sum(c / p for c, p in zip(costs_ns, periods_ns))
    lock = sum(DISPATCH_TYPICAL_NS / p for p in periods_ns)
    return (util > REHEARSAL_SHARE * u_max or sum(costs_ns) > REHEARSAL_SHARE * min(deadlines_ns)
            or lock > REHEARSAL_SHARE * DISPATCH_BUSY_MAX)


def rehearse(engines: Sequence[Any], specs: Sequence[Any], deadlines_ns: Sequence[int], *, device: int = 0,
             seconds: float = REHEARSAL_S, warmup_s: float = REHEARSAL_WARMUP_S, threads: int | None = None,
             spin_us: int = 100, dispatcher_spin_us: int = 200,
             phases_ns: Sequence[int | None] | None = None, time_every: int | None = None,
             tail_s: float = REHEARSAL_TAIL_S) -> RehearsalRun:
    """Run CUDA ``engines`` together, as their streams will run: each one block of zeros per
    block period (its ``spec``) at its release phase (``phases_ns``; a stream of no known phase,
    or every stream when None, at 0: all released at once, the instant the response bound
    assumes for them), through a scratch scheduler (every stream realtime, at its deadline) and
    one dispatcher on ``device``, blocks released by a few native threads (``_native.run_paced``:
    no Python per block). Returns each engine's device time per block as its dispatcher measured
    it (CUDA events, the scheduler's running average), in order, and the dispatcher's serial work
    per block (:class:`RehearsalRun`); every engine's state is reset after. ``time_every``: the
    dispatcher's (CudaDispatch; None: its default, as a Session's). The second window's latencies
    from release come back too (``RehearsalRun.latency_ns``: admission's tail check).

    Two timed windows: the first (``seconds``) times every block and records the GPU's timeline
    (the engines' device times, and their overlap: :func:`gpu_overlap`); the second (``tail_s``),
    at the dispatcher's own sampling as the streams will run, gives its serial work per block
    (timing every block would add two event records and three queries to each) and the latencies.
    The second is the longer: the queue's bad moments come a few times a second, and the tail
    must see some."""
    import os

    from pygpukit_dsp_core import Scheduler

    from . import _native
    from .backends.cuda_dispatch import DEFAULT_TIME_EVERY, CudaDispatch

    periods = [max(1, int(spec.block_period * 1e9)) for spec in specs]
    phases = [int(ph or 0) % p for ph, p in zip(phases_ns or [None] * len(engines), periods)]
    zeros: dict[Any, np.ndarray] = {}
    inputs = [[zeros.setdefault((tuple(spec.block_shape), spec.np_dtype),
                                np.zeros(spec.block_shape, spec.np_dtype))] for spec in specs]
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
            native = [e._engine for e in engines]
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
                        [np.asarray(v, dtype=np.int64) for v in res["latency_ns"]])


def _rehearse_if_crowded(device: str, sched: "Scheduler", regs: list[tuple["StreamRunner", dict[str, Any]]],
                         u_max: float) -> "Scheduler":
    """Admission's second look at one GPU (:func:`crowded`): its realtime streams rehearsed
    together (:func:`rehearse`); a kind of stream whose device time among them is larger than
    its calibration alone is admitted again with that figure, every stream of the GPU in the
    same order, by a new scheduler (returned). A declared ``qos.cost_us`` stays the stream's
    cost (its streams are rehearsed as load; when every cost is declared there is nothing to
    learn). AdmissionError on a refusal, with the rehearsal's figures."""
    from pygpukit_dsp_core import Scheduler

    here = [(r, kw) for r, kw in regs if getattr(getattr(r, "placement", None), "device", None) == device]
    rt = [(r, kw) for r, kw in here if r.pipeline.qos.cls == "realtime"]
    deadlines = [kw["deadline_ns"] for _, kw in rt]
    if all(r.pipeline.qos.cost_us is not None for r, _ in rt) or \
            not crowded([kw["cost_ns"] for _, kw in rt], [kw["period_ns"] for _, kw in rt], deadlines, u_max):
        return sched
    shortest = int(min(deadlines))
    if dispatch_busy_max(shortest) <= 0.0:
        r = next(r for r, kw in rt if int(kw["deadline_ns"]) == shortest)
        raise AdmissionError(
            r.pipeline.name,
            f"its {shortest / 1e3:.0f} us deadline is no longer than the {DISPATCH_HOLD_NS / 1e3:.0f} us a block may "
            f"find the dispatcher's lock held among the {len(rt)} realtime streams of its GPU (a poll that finds a "
            "batch of completions, or the host pausing the thread that holds it): lengthen qos.deadline_ms, or run "
            "fewer realtime streams on this GPU",
            {"reason": "dispatcher_hold", "device": device, "deadline_ns": shortest, "hold_ns": DISPATCH_HOLD_NS,
             "streams": len(rt)})
    run = rehearse([r.engine for r, _ in rt], [r.chain.input for r, _ in rt], deadlines, device=gpu_of(device) or 0,
                   phases_ns=[kw.get("phase_ns") for _, kw in rt])
    members: dict[str, list[int]] = {}  # kind of stream -> its streams' places in rt
    for i, (r, _) in enumerate(rt):
        members.setdefault(cost_key(r), []).append(i)
    kind_ns = {k: int(np.median([run.device_ns[i] for i in ix])) for k, ix in members.items()}
    tails = {k: run.tail(ix) for k, ix in members.items()}
    horizons = {k: horizon_blocks([rt[i][1]["period_ns"] for i in ix]) for k, ix in members.items()}
    grew = False
    for r, kw in rt:
        k = cost_key(r)
        r.rehearsal = Rehearsal(len(rt), REHEARSAL_S + REHEARSAL_TAIL_S, kind_ns[k], kw["cost_ns"], run.dispatch_ns,
                                run.overlap, tails[k], horizons[k], u_max, shortest)
        if r.pipeline.qos.cost_us is None and r.rehearsal.cost_ns > kw["cost_ns"]:
            kw["cost_ns"] = r.rehearsal.cost_ns
            if kw.get("latency_ns", 0) <= kw["cost_ns"]:
                kw.pop("latency_ns", None)
            r.admitted_cost_ns = kw["cost_ns"]
            grew = True
    if grew:
        again = Scheduler(u_max=u_max)
        for r, kw in here:
            refusal = _register(again, r, kw)
            if refusal is not None:
                message, figures = refusal
                figures["device"] = device
                if getattr(r, "rehearsal", None) is not None:
                    figures["rehearsal"] = r.rehearsal.describe()
                raise AdmissionError(r.pipeline.name, message, figures)
        sched = again
    _check_tails(device, rt)
    return sched


def _check_tails(device: str, rt: list[tuple["StreamRunner", dict[str, Any]]]) -> None:
    """Refuse a kind of rehearsed stream whose latency tail reaches past the shortest deadline of
    its streams within TAIL_HORIZON_S (:class:`LatencyTail`): AdmissionError naming its last
    stream in admission order (the one that crowded the GPU past it), with the rehearsal's figures."""
    last: dict[str, tuple["StreamRunner", int]] = {}  # kind -> (its last stream, its shortest deadline)
    for r, kw in rt:
        if getattr(r, "rehearsal", None) is None or r.rehearsal.reach_ns is None:
            continue
        k = cost_key(r)
        d = min(int(kw["deadline_ns"]), last[k][1]) if k in last else int(kw["deadline_ns"])
        last[k] = (r, d)
    for r, d in last.values():
        reh = r.rehearsal
        if reh.reach_ns > d:
            raise AdmissionError(
                r.pipeline.name,
                f"rehearsed with the {reh.streams} realtime streams of its GPU, its kind of stream's latency "
                f"from release reaches {reh.reach_ns / 1e3:.0f} us within {TAIL_HORIZON_S:g} s, past the "
                f"{d / 1e3:.0f} us deadline of its kind (the dispatcher's queue at this load: run fewer realtime "
                "streams on this GPU, or lengthen qos.deadline_ms)",
                {"reason": "latency_tail", "device": device, "reach_ns": reh.reach_ns, "deadline_ns": d,
                 "horizon_s": TAIL_HORIZON_S, "rehearsal": reh.describe()})


def _register(sched: "Scheduler", r: "StreamRunner", kw: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """Register ``r``'s stream; None when admitted, else (the refusal's message, its figures)."""
    from pygpukit_dsp_core import AdmissionRefused

    p, q = r.pipeline, r.pipeline.qos
    try:
        sched.register_stream(p.name, q.cls, **kw)
    except AdmissionRefused as e:
        figures = dict(e.figures)
        shared = getattr(r, "cost_measured_on", None)
        figures["cost_source"] = ("declared (qos.cost_us)" if q.cost_us is not None else
                                  f"measured on '{shared}' (the same kind of stream)" if shared else "measured")
        cost = getattr(r, "measured_cost", None)
        if q.cost_us is None and cost is not None:
            figures["measured"] = cost.describe()
        return str(e).removeprefix(f"stream '{p.name}' not admitted: "), figures
    return None


def _place(r: "StreamRunner", kw: dict[str, Any], schedulers: dict[str, "Scheduler"], gpus: list[int],
           u_max: float, Scheduler: Any) -> Placement:
    """Admit an auto stream on the GPU with the most headroom that takes it; move its engine there."""
    cls = r.pipeline.qos.cls
    room = {g: headroom(schedulers.get(device_key(g)), cls, u_max) for g in gpus}
    count = {g: _stream_count(schedulers.get(device_key(g))) for g in gpus}
    # most headroom first; then the GPU with fewer streams (streams that reserve nothing leave the
    # headroom alone: they spread by count); then the lower index
    order = sorted(gpus, key=lambda g: (-round(room[g], 9), count[g], g))
    refused: dict[int, str] = {}
    first: tuple[str, dict[str, Any]] | None = None
    for g in order:
        key = device_key(g)
        sched = schedulers.get(key)
        fresh = sched is None
        if fresh:
            sched = Scheduler(u_max=u_max)
        refusal = _register(sched, r, kw)
        if refusal is not None:
            refused[g] = refusal[0]
            if first is None:
                first = refusal
            continue
        if fresh:
            schedulers[key] = sched
        engine_gpu = gpu_of(device_of(r))
        if engine_gpu != g:
            try:
                r.move_to_gpu(g)
            except BaseException:
                sched.unregister_stream(sched.stream_id(r.pipeline.name))
                raise
        why = _why(g, order, room, count, refused)
        return Placement(key, g, "auto", f"GPU {g}: {why}", headroom=room, refused=refused)
    assert first is not None
    message, figures = first
    figures["device"] = "auto"
    figures["gpus_tried"] = ", ".join(f"GPU {g}" for g in order)
    detail = "; ".join(f"GPU {g}: {refused[g]}" for g in order)
    raise AdmissionError(r.pipeline.name, f"no GPU admits it (device: auto over {len(order)} GPU(s)): {detail}",
                         figures)


def _why(g: int, order: list[int], room: dict[int, float], count: dict[int, int],
         refused: dict[int, str]) -> str:
    """The placement reason of an auto stream admitted on GPU ``g`` (tried in ``order``)."""
    listing = ", ".join(f"GPU {o} {room[o]:.4f}" for o in order)
    if len(order) == 1:
        return f"auto: the only usable GPU (headroom {room[g]:.4f})"
    if refused:
        tried = "; ".join(f"GPU {o} refused it ({refused[o]})" for o in refused)
        return f"auto: {tried}; GPU {g} admitted it (headroom {listing})"
    nxt = order[1]
    if round(room[g], 9) > round(room[nxt], 9):
        return f"auto: the most admission headroom ({listing})"
    if count[g] < count[nxt]:
        return (f"auto: headroom tied with GPU {nxt} ({room[g]:.4f}); fewer streams here "
                f"({count[g]} vs {count[nxt]})")
    return f"auto: headroom ({room[g]:.4f}) and stream count ({count[g]}) tied with GPU {nxt}; the lower index"
