"""W3, the contention benchmark: W1 as a realtime stream while W2 runs as a throughput stream.

A bench file of this kind is a pipeline file with two pipelines and a top-level ``bench:``
mapping (benchmarks/w3.yaml)::

    bench:
      kind: contention
      realtime: w1            # measured for latency (qos class realtime)
      throughput: w2          # the load (qos class throughput)
      blocks: 3000            # timed W1 blocks; warmup: 300 untimed before them
      period_ms: 1.0          # W1 arrival period (default: its block period)
      quantum_ns: 250000      # the scheduler's chunk quantum
      throughput_mode: resident
      throughput_seconds: 3.0 # W2 solo window
      segments: 10            # alternating W1-alone / W1-loaded segments sharing the timed blocks

:func:`run_w3` measures, in one process and in this order:

a. pygpukit-dsp W2 alone: GPU-resident blocks (normal blocks from reset upload the data first),
   two in flight, on its own CudaDispatch, for ``throughput_seconds``.
b. pygpukit-dsp W1 alone and W1 under W2 load, interleaved: both CudaEngines attached to ONE
   CudaDispatch whose scheduler holds W1 as a realtime stream (cost declared from the p99 of a
   short calibration) and W2 as a throughput stream. The timed W1 blocks are split into
   ``segments`` alternating segments of each kind (alone, loaded | loaded, alone | ...): in a
   loaded segment W2's resident loop runs in a background thread, in an alone segment W2 is
   idle. Host noise comes in bursts of seconds; alternating puts it on both kinds alike (as the
   W1 harness interleaves its implementations). One W1 block arrives every period (the host
   sleeps, then spins, to the arrival time); a block's latency is the host wall clock from
   hand-over (``engine.process``) until its output is back. W2's throughput under load is
   counted over the loaded segments' timed windows. The engine traces every timed block, and the
   report breaks both kinds' latency into phases (:mod:`pygpukit_dsp.bench.trace`).
c. PyTorch (pygpukit_dsp/bench/baselines/torch_w3.py): W1 as a CUDA graph on its own stream,
   W2 resident (a CUDA graph) on another stream in a background thread, paced the same way;
   W1 solo, W2 solo, both at the same stream priority, and W1 at the device's highest priority
   (one run each, not interleaved).

Outputs are checked: W1's outputs at the end of the interleaved run equal a fresh engine's
run back to back over the same input sequence, W2's under load equal its solo ones (same
inputs, state reset), and PyTorch's equal ours.
"""

from __future__ import annotations

import resource
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

import numpy as np
from pydantic import Field, field_validator

from ..affinity import leave_reserved, pinned, resolve_cpu
from ..errors import AdmissionError, ConfigError, DeviceError
from ..stages.base import StageParams
from .bench_file import pick_pipeline, validate_bench
from .gc_pauses import GcPauses, overlap_ns
from .stall_probe import EPISODE_GAP_NS, HOST_SLOW_FACTOR, HOST_SLOW_MIN_US, HOST_STALL_US, start_probe, stop_probe
from .trace import Breakdown, breakdown
from .trace import markdown as breakdown_markdown

if TYPE_CHECKING:
    from ..pipeline import Pipeline, SpecChain
    from ..spec.loader import Marks

# Targets of issue 4 (H100).
P99_RATIO_TARGET = 1.5      # W1 p99 under load / W1 p99 alone
MISSES_TARGET = 0           # W1 blocks over the deadline under load
W2_KEPT_TARGET = 0.70       # W2 samples/s under load / alone

W1_POOL = 32                # distinct W1 input blocks, cycled
W1_CHECK_BLOCKS = 6         # the last blocks of every W1 run are compared across runs
W2_CHECK_BLOCKS = 2         # normal (non-resident) W2 blocks from reset at the start of every W2 run
SELF_RTOL = 1e-5            # same implementation alone vs under load: same kernels, same data
CALIBRATION_BLOCKS = 200    # W1 blocks whose p99 is declared as its cost
W2_IN_FLIGHT = 2            # the engine's two slots
PUMP_MAX_SECONDS = 3600.0   # a pump runs until stopped; this only bounds a forgotten one
W2_WARM_S = 0.3             # W2 runs this long before its solo window opens
SPIN_NS = 150_000           # the host sleeps until this close to an arrival, then spins
SETTLE_BLOCKS = 20          # untimed W1 blocks after W2 is switched on or off
PUMP_START_TIMEOUT_S = 120.0
LATE_BACK_US = 100.0        # a paced W1 thread back from its sleep this late or later: a late wake-up
SLOW_PHASES = ("fill", "copy out")  # fixed CPU work of a block: plain copies, no lock, no wait (stall_probe.py)

Progress = Callable[[str], None]


# ----------------------------------------------------------------------------- the bench file


class ContentionSettings(StageParams):
    """The ``bench:`` mapping of a contention bench file (see the module doc)."""

    kind: Literal["contention"] = Field(description="the bench kind: contention (W3)")
    realtime: str | None = Field(None, description="the realtime pipeline (default: the one with qos class realtime)")
    throughput: str | None = Field(None, description="the load (default: the one with qos class throughput)")
    blocks: int = Field(3000, ge=W1_CHECK_BLOCKS, description="timed W1 blocks per W1 run")
    warmup: int = Field(300, ge=0, description="untimed W1 blocks before them")
    period_ms: float | None = Field(None, gt=0, description="W1 arrival period (default: its block period)")
    quantum_ns: int = Field(250_000, ge=1_000, description="the scheduler's chunk quantum")
    throughput_mode: str = Field("resident", description="W2: resident (input already on the GPU)")
    throughput_seconds: float = Field(3.0, gt=0, description="W2 solo timing window")
    spin_us: int | None = Field(None, ge=0, description="dispatcher spin before sleeping (default: the W1 period)")
    segments: int = Field(10, ge=1, description="alternating segments of W1 alone / loaded that share the timed blocks")

    @field_validator("throughput_mode")
    @classmethod
    def _resident_only(cls, v: str) -> str:
        if v != "resident":
            raise ValueError(f"throughput_mode '{v}' is not measured by the contention bench: only 'resident' "
                             "(W2's input already in device memory, transfers excluded: DESIGN.md's W3)")
        return v


@dataclass
class ContentionBench:
    """A loaded contention bench file: its settings and its two pipelines."""

    settings: ContentionSettings
    realtime: "Pipeline"
    throughput: "Pipeline"
    path: str = "<python>"


def load_contention(path: str | Path, pipelines: list["Pipeline"] | None = None) -> ContentionBench | None:
    """The contention bench in ``path``; None when the file has no top-level ``bench:`` (a plain
    pipeline file). ``pipelines``: the file's pipelines if already loaded. ConfigError (with
    FILE:LINE:COL) for a bad ``bench:`` mapping or pipelines that do not fit it."""
    from ..pipeline import Pipeline
    from ..spec.loader import load_marked

    if pipelines is None:
        pipelines = Pipeline.load_all(path)  # the file's own errors first (missing, YAML, pipelines)
    text = Path(path).read_text(encoding="utf-8-sig")
    doc, marks = load_marked(text, str(path))
    if not isinstance(doc, dict) or "bench" not in doc or marks is None:
        return None
    return contention_from_document(doc["bench"], marks.child("bench") or marks, pipelines, str(path))


def contention_from_document(section: Any, bm: "Marks", pipelines: list["Pipeline"],
                             path: str = "<string>") -> ContentionBench:
    """Validate a ``bench:`` mapping (marks ``bm``) against the file's pipelines."""
    if not isinstance(section, dict):
        raise ConfigError(f"bench must be a mapping, got {type(section).__name__}", where=bm.where,
                          hint="e.g. 'bench: {kind: contention, realtime: w1, throughput: w2}'")
    if "kind" in section and section["kind"] != "contention":
        raise ConfigError(f"unknown bench kind {section['kind']!r}", where=bm.value_where("kind"),
                          hint="the kinds are: contention (W3: a realtime pipeline under a throughput one), "
                               "link (a stream across two processes over zmq)")
    settings = validate_bench(ContentionSettings, section, bm)
    assert isinstance(settings, ContentionSettings)
    realtime = _pick(pipelines, settings.realtime, "realtime", bm)
    throughput = _pick(pipelines, settings.throughput, "throughput", bm)
    if realtime is throughput:
        raise ConfigError("bench: realtime and throughput name the same pipeline", where=bm.where,
                          hint="name two different pipelines")
    return ContentionBench(settings, realtime, throughput, path)


def _pick(pipelines: list["Pipeline"], name: str | None, cls: str, bm: "Marks") -> "Pipeline":
    return pick_pipeline(
        pipelines, name, cls, bm, fits=lambda p: p.qos.cls == cls,
        count_error=lambda n, names: (f"bench: {n} pipelines have qos class {cls}; the contention bench needs one",
                                      f"name it with '{cls}: NAME' (pipelines: {', '.join(names)})"),
        misfit=lambda p: (f"bench: pipeline '{p.name}' has qos class {p.qos.cls}, but '{cls}:' needs class {cls}",
                          f"give '{p.name}' 'qos: {{class: {cls}}}' or name another pipeline"))


# ----------------------------------------------------------------------------- the report


@dataclass
class LatencyFigures:
    """W1 host wall-clock latency of one run (microseconds), and its deadline misses."""

    blocks: int
    p50: float
    p90: float
    p99: float
    p999: float
    max: float
    mean: float
    misses: int          # blocks over the deadline
    overruns: int = 0    # blocks that took longer than a period (the next one was handed over late)

    @classmethod
    def from_ns(cls, lat_ns: np.ndarray, deadline_ns: int, overruns: int = 0, **extra: Any) -> Any:
        """From latencies in ns; ``extra``: a subclass's own fields (bench/cadence.py's PacedFigures)."""
        us = np.asarray(lat_ns, dtype=np.float64) / 1e3
        p50, p90, p99, p999 = (float(v) for v in np.percentile(us, [50, 90, 99, 99.9]))
        return cls(blocks=int(us.size), p50=p50, p90=p90, p99=p99, p999=p999, max=float(us.max()),
                   mean=float(us.mean()), misses=int((np.asarray(lat_ns) > deadline_ns).sum()),
                   overruns=overruns, **extra)


@dataclass
class ContentionRow:
    """One line of the table: a W1 run and/or a W2 run of one implementation and setting."""

    key: str                          # project_solo project_load torch_solo torch_same torch_high
    label: str
    status: str = "ok"                # ok | skipped | failed
    reason: str = ""
    w1: LatencyFigures | None = None
    w2_samples_per_s: float | None = None
    solo_key: str | None = None       # the row a load row is compared with
    extra: dict[str, Any] = field(default_factory=dict)  # priorities, scheduler and dispatcher stats


@dataclass
class OutputCheck:
    name: str
    max_rel_err: float | None
    tolerance: float
    ok: bool
    reason: str = ""
    project: bool = True   # pygpukit-dsp against itself (a failure is a bug); False: a baseline


@dataclass
class TargetVerdict:
    name: str
    met: bool | None                  # None: not measured (the run failed)
    detail: str


@dataclass
class ContentionReport:
    realtime: str
    throughput: str
    w1_spec: str
    w2_spec: str
    period_us: float
    deadline_us: float
    settings: dict[str, Any]
    machine: str
    rows: list[ContentionRow]
    checks: list[OutputCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def row(self, key: str) -> ContentionRow | None:
        return next((r for r in self.rows if r.key == key), None)

    def _solo(self, r: ContentionRow) -> ContentionRow | None:
        solo = self.row(r.solo_key) if r.solo_key else None
        return solo if solo is not None and solo.status == "ok" else None

    def w1_p99_ratio(self, key: str) -> float | None:
        """W1 p99 under load / W1 p99 alone, for a load row."""
        r = self.row(key)
        solo = self._solo(r) if r is not None else None
        if r is None or r.status != "ok" or solo is None or r.w1 is None or solo.w1 is None or not solo.w1.p99:
            return None
        return r.w1.p99 / solo.w1.p99

    def w2_kept(self, key: str) -> float | None:
        """W2 samples/s under load / alone (1.0 = nothing lost), for a load row."""
        r = self.row(key)
        solo = self._solo(r) if r is not None else None
        if r is None or r.status != "ok" or solo is None or r.w2_samples_per_s is None \
                or not solo.w2_samples_per_s:
            return None
        return r.w2_samples_per_s / solo.w2_samples_per_s

    @property
    def checks_passed(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def targets(self) -> list[TargetVerdict]:
        """The three targets of issue 4, judged on pygpukit-dsp's rows."""
        solo, load = self.row("project_solo"), self.row("project_load")
        measured = all(r is not None and r.status == "ok" and r.w1 is not None for r in (solo, load))
        out: list[TargetVerdict] = []
        name = f"W1 p99 under load <= {P99_RATIO_TARGET:g}x its solo p99"
        ratio = self.w1_p99_ratio("project_load")
        if ratio is None or not measured:
            out.append(TargetVerdict(name, None, "not measured"))
        else:
            out.append(TargetVerdict(name, ratio <= P99_RATIO_TARGET,
                                     f"{ratio:.2f}x: {load.w1.p99:.1f} / {solo.w1.p99:.1f} us"))
        name = f"zero W1 deadline misses at {self.deadline_us / 1e3:g} ms under load"
        if not measured:
            out.append(TargetVerdict(name, None, "not measured"))
        else:
            out.append(TargetVerdict(name, load.w1.misses <= MISSES_TARGET,
                                     f"{load.w1.misses} of {load.w1.blocks} blocks; alone {solo.w1.misses}"))
        name = f"W2 keeps >= {W2_KEPT_TARGET:.0%} of its solo throughput"
        kept = self.w2_kept("project_load")
        if kept is None:
            out.append(TargetVerdict(name, None, "not measured"))
        else:
            out.append(TargetVerdict(name, kept >= W2_KEPT_TARGET,
                                     f"{kept:.1%}: {load.w2_samples_per_s / 1e9:.1f} / "
                                     f"{solo.w2_samples_per_s / 1e9:.1f} Gsamples/s"))
        return out

    def markdown(self) -> str:
        s = self.settings
        lines = [
            f"### W3 contention: {self.realtime} (realtime) under {self.throughput} (throughput, "
            f"{s.get('throughput_mode', 'resident')}) on one GPU",
            "",
            f"{self.realtime}: {self.w1_spec}; one block every {self.period_us:.1f} us, deadline "
            f"{self.deadline_us:.0f} us; {s.get('blocks')} timed blocks after {s.get('warmup')} warm-up per run. "
            f"{self.throughput}: {self.w2_spec}; GPU-resident, {W2_IN_FLIGHT} blocks in flight; solo window "
            f"{s.get('throughput_seconds')} s. Scheduler quantum {s.get('quantum_ns', 0) / 1e3:g} us. {self.machine}",
            "",
            f"| run | W1 p50 us | W1 p99 us | W1 p99.9 us | W1 max us | W1 misses > {self.deadline_us:.0f} us "
            f"| W2 Gsamples/s | W1 p99 load/solo | W2 kept |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in self.rows:
            if r.status != "ok":
                lines.append(f"| {r.label} | | | | | | | | {r.status}: {r.reason} |")
                continue
            w1 = r.w1
            cells = [f"{w1.p50:.1f}", f"{w1.p99:.1f}", f"{w1.p999:.1f}", f"{w1.max:.1f}", str(w1.misses)] \
                if w1 is not None else [""] * 5
            w2 = f"{r.w2_samples_per_s / 1e9:.1f}" if r.w2_samples_per_s is not None else ""
            ratio, kept = self.w1_p99_ratio(r.key), self.w2_kept(r.key)
            lines.append(f"| {r.label} | " + " | ".join(cells) + f" | {w2} | "
                         f"{f'{ratio:.2f}x' if ratio is not None else ''} | "
                         f"{f'{kept:.1%}' if kept is not None else ''} |")
        lines += ["", "Targets (issue 4):"]
        for t in self.targets():
            verdict = "not measured" if t.met is None else ("**met**" if t.met else "**not met**")
            lines.append(f"- {t.name}: {verdict} ({t.detail})")
        causes = [(r, r.extra.get("miss_causes")) for r in self.rows if r.status == "ok" and r.extra.get("miss_causes")]
        if causes:
            lines += ["", f"W1's misses by cause (a stall probe, a thread on another CPU that only reads the clock, ran "
                          f"beside pygpukit-dsp's W1; a miss during which it stopped >= {HOST_STALL_US:g} us is a "
                          f"host stall; a miss whose fixed CPU work ({' + '.join(SLOW_PHASES)}: copies, no lock, no "
                          f"wait) took >= {HOST_SLOW_FACTOR:g}x its median is a host slowdown, the CPU under W1's "
                          "thread running slow; a miss whose W1 thread made no context switch from its wait to its "
                          f"output and yet did not run for >= {HOST_STALL_US:g} us of it is a host stall too, its "
                          f"vCPU held beneath the guest; a miss within {EPISODE_GAP_NS // 1_000_000} ms of a host's "
                          "miss is one episode with it; the others are the process's):"]
            for r, c in causes:
                lines.append(f"- {r.label}: {c['misses']} misses: {c['host_stall']} host stalls, "
                             f"{c.get('host_slow', 0)} host slowdowns, {c['process']} the process's"
                             + (f" (probe gaps >= {HOST_STALL_US:g} us in the run: {c.get('probe_gaps', 0)})"
                                if "probe_gaps" in c else " (no probe)"))
                if c.get("vcpu_held") or c.get("episode"):
                    lines.append(f"  - of the host's: {c.get('vcpu_held', 0)} with W1's vCPU held (no context switch), "
                                 f"{c.get('episode', 0)} in one episode with another host miss")
                facts = [b for b in c.get("blocks", []) if "switches" in b]
                if facts:
                    lines.append("  - per miss (context switches voluntary / involuntary, us not running; cause): "
                                 + ", ".join(f"block {b['index']} {b['switches'][0]} / {b['switches'][1]}, "
                                             f"{b['off_cpu_us']:g}; {b['cause']}" for b in facts[:10]))
                if c["process"] and "process_late_back" in c:
                    lines.append(f"  - of the process's: {c['process_late_back']} came back from the paced sleep "
                                 f">= {LATE_BACK_US:g} us late, {c['process_gc']} had the garbage collector running "
                                 f"(>= 50 us) inside; per miss (us late back from the sleep / GC us / GPU time us): "
                                 + ", ".join(f"block {b['index']} {_or_dash(b.get('back_late_us'))} / {b.get('gc_us', 0):g}"
                                             f" / {_or_dash(b.get('gpu_us'))}"
                                             for b in c["blocks"] if b["cause"] == "process"))
                if "gc_collections" in c:
                    lines.append(f"  - garbage collections during the interleaved run: {c['gc_collections']}, "
                                 f"the longest {c['gc_max_us']:.0f} us")
            load = self.row("project_load")
            lc = load.extra.get("miss_causes") if load is not None else None
            if lc is not None:
                lines.append(f"- issue 13: zero W1 misses under load that the process can be blamed for: "
                             f"{'**met**' if lc['process'] == 0 else '**not met**'} ({lc['process']} of {lc['misses']})")
        lines += ["", "Outputs: " + ("all checks passed" if self.checks_passed else "**CHECK FAILED**")]
        for c in self.checks:
            err = f"rel err {c.max_rel_err:.1e}" if c.max_rel_err is not None else c.reason
            lines.append(f"- {c.name}: {err} (tolerance {c.tolerance:.0e}) {'ok' if c.ok else 'FAILED'}")
        scheduled = [r for r in self.rows if r.status == "ok" and r.extra.get("scheduler_w1")]
        if scheduled:
            lines += ["", "The scheduler's own accounting of W1 (hand-over to GPU completion; every block of the "
                          "run, alone and loaded segments, warm-up and settling included):"]
        for r in scheduled:
            sched = r.extra["scheduler_w1"]
            lat = sched.get("latency", {})
            p99 = lat.get("p99_ns", lat.get("p99", 0)) or 0
            lines.append(f"- {r.label}: p99 {p99 / 1e3:.1f} us, missed {sched.get('missed', 0)} of "
                         f"{sched.get('submitted', 0)}")
        for r in self.rows:
            if r.status == "ok" and isinstance(r.extra.get("w1_breakdown"), Breakdown):
                lines += ["", *breakdown_markdown(f"Where W1's time went, {r.label}", r.extra["w1_breakdown"])]
        if self.notes:
            lines.append("")
            lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["targets"] = [asdict(t) for t in self.targets()]
        d["checks_passed"] = self.checks_passed
        d["ratios"] = {r.key: {"w1_p99_load_over_solo": self.w1_p99_ratio(r.key), "w2_kept": self.w2_kept(r.key)}
                       for r in self.rows if r.solo_key}
        return d


@dataclass
class ReleaseWaitSettings:
    """Issue 13's paced waits: W1's call waits natively for each block's release (sleep until
    ``spin_us`` before it, then spin; ``prewarm`` the project's slot when the spin starts), and its
    latency runs from the release. PyTorch's W1 waits the same way (``_native.wait_until``) before
    its call."""

    spin_us: int | None = None  # None: the realtime pipeline's qos.spin_us (its default: 200)
    prewarm: bool = True
    warm_us: int = 100      # back in Python this long before the release (CudaEngine.process)


# ----------------------------------------------------------------------------- timing loops


@dataclass
class _W1Run:
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


def _paced_w1(process: Callable[[np.ndarray], Any], inputs: list[np.ndarray], *, warmup: int, blocks: int,
              period_ns: int, release_call: Callable[[np.ndarray, int], Any] | None = None) -> _W1Run:
    """One block per period; latency = hand-over to output, for the blocks after ``warmup``.

    ``release_call(block, release_ns)`` (issue 13's settings): the call itself waits for the
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
    return _W1Run(ends - starts, outs, t_start, perf(), overruns, starts, ends, switches)


def _pace_until(event: threading.Event, process: Callable[[np.ndarray], Any], inputs: list[np.ndarray],
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


@dataclass
class _Pump:
    """A W2 loop running in a background thread (see :func:`_start_pump`)."""

    stop: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)  # resident loop running
    stamps: list[int] = field(default_factory=list)  # perf_counter_ns of every completed block
    outputs: list[np.ndarray] = field(default_factory=list)  # the checked (normal) blocks' outputs
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def count(self, t0: int, t1: int) -> int:
        """Blocks completed in (t0, t1]."""
        stamps = np.asarray(self.stamps, dtype=np.int64)
        return int(((stamps > t0) & (stamps <= t1)).sum())

    def rate(self, t0: int, t1: int, samples_per_block: int) -> float:
        """Samples/s of the blocks completed in (t0, t1]."""
        return self.count(t0, t1) * samples_per_block / ((t1 - t0) / 1e9)


PumpBody = Callable[[_Pump], None]


def _start_pump(body: PumpBody) -> _Pump:
    pump = _Pump()

    def run() -> None:
        try:
            leave_reserved()  # started by W1's thread, which may be pinned (qos.cpu): not on its CPU
            body(pump)
        except BaseException as exc:  # handed to the main thread by _finish_pump
            pump.error = exc
        finally:
            pump.started.set()

    pump.thread = threading.Thread(target=run, name="w3-throughput", daemon=True)
    pump.thread.start()
    return pump


def _wait_started(pump: _Pump) -> None:
    if not pump.started.wait(PUMP_START_TIMEOUT_S):
        raise DeviceError(f"the W2 loop did not start within {PUMP_START_TIMEOUT_S:.0f} s")
    if pump.error is not None:
        raise pump.error


def _finish_pump(pump: _Pump) -> None:
    pump.stop.set()
    if pump.thread is not None:
        pump.thread.join()
    if pump.error is not None:
        raise pump.error


def _timed_window(pump: _Pump, seconds: float) -> tuple[int, int]:
    """Let a started pump warm up, then time a ``seconds`` window of it; finish it either way."""
    try:
        _wait_started(pump)
        time.sleep(W2_WARM_S)
        t0 = time.perf_counter_ns()
        time.sleep(seconds)
        return t0, time.perf_counter_ns()
    finally:
        _finish_pump(pump)


def _rel_err(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
    if len(got) != len(ref) or not ref:
        raise ValueError(f"{len(got)} blocks to compare with {len(ref)}")
    err = 0.0
    for y, r in zip(got, ref):
        y, r = np.asarray(y), np.asarray(r)
        if y.shape != r.shape:
            raise ValueError(f"output shape {y.shape} != {r.shape}")
        err = max(err, float(np.linalg.norm(y - r)) / (float(np.linalg.norm(r)) or 1.0))
    return err


def _check(name: str, got: list[np.ndarray] | None, ref: list[np.ndarray] | None, tol: float, *,
           project: bool = True) -> OutputCheck:
    if got is None or ref is None:
        return OutputCheck(name, None, tol, False, "not run", project)
    try:
        err = _rel_err(got, ref)
    except ValueError as exc:
        return OutputCheck(name, None, tol, False, str(exc), project)
    return OutputCheck(name, err, tol, err <= tol, "", project)


# ----------------------------------------------------------------------------- pygpukit-dsp


def _project_pump(engine: Any, blocks: list[np.ndarray]) -> PumpBody:
    """W2 alone: normal blocks from reset first (they upload the data; their outputs are
    checked), then the resident loop until stopped."""
    resident = _resident_pump(engine)

    def body(pump: _Pump) -> None:
        pump.outputs = [np.array(engine.process(b), copy=True) for b in blocks]
        engine.set_resident(True)
        resident(pump)
    return body


class _ProjectRun:
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
                pump = _start_pump(_project_pump(engine, blocks))
                t0, t1 = _timed_window(pump, seconds)
                extra = {"scheduler_w2": sched.stream_stats(sid), "dispatch": dispatch.stats(),
                         "units_per_block": engine.units_per_block}
        finally:
            engine.close()
        return pump.rate(t0, t1, spb), pump.outputs, extra

    def interleaved(self, w1_inputs: list[np.ndarray], w2_blocks: list[np.ndarray], warmup: int, blocks: int,
                    segments: int) -> "_Interleaved":
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
                    w2.set_resident(True)
                    w1.reset()
                    feed = _Feed(w1.process, w1_inputs)
                    wait = self.wait
                    at = None if wait is None else (
                        lambda x, r: feed.at(x, r, wait.spin_us, wait.prewarm, wait.warm_us))  # noqa: E731
                    _paced_w1(feed, w1_inputs, warmup=warmup, blocks=0, period_ns=self.period_ns, release_call=at)
                    out = _Interleaved(w2_outputs=w2_outputs)
                    warm_us = wait.warm_us if wait is not None else 0
                    probe = start_probe()
                    with GcPauses() as gc_pauses:
                        for seg, n in enumerate(_split(blocks, segments)):
                            for loaded in ((False, True) if seg % 2 == 0 else (True, False)):
                                pump = _start_pump(_resident_pump(w2)) if loaded else None
                                try:
                                    if pump is not None:
                                        _wait_started(pump)
                                    _paced_w1(feed, w1_inputs, warmup=SETTLE_BLOCKS, blocks=0,
                                              period_ns=self.period_ns, release_call=at)
                                    w1.set_trace(n)
                                    first = feed.count
                                    run = _paced_w1(feed, w1_inputs, warmup=0, blocks=n, period_ns=self.period_ns,
                                                    release_call=at)
                                    late = feed.back_late_us(first, run.starts, warm_us) if at is not None else None
                                    (out.load if loaded else out.solo).add(run, w1.block_trace(), late)
                                finally:
                                    if pump is not None:
                                        _finish_pump(pump)
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
            feed = _Feed(engine.process, inputs)
            outs = []
            for n in sorted(upto):
                while feed.count < n:
                    feed(None)
                outs.append(list(feed.last))
        finally:
            engine.close()
        order = sorted(range(len(upto)), key=lambda i: upto[i])
        return [outs[order.index(i)] for i in range(len(upto))]


class _Feed:
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


def _split(blocks: int, segments: int) -> list[int]:
    """``blocks`` timed blocks over ``segments`` segments, as evenly as they go (none empty)."""
    segments = max(1, min(segments, blocks))
    return [blocks // segments + (1 if i < blocks % segments else 0) for i in range(segments)]


@dataclass
class _Timed:
    """The timed W1 blocks of one kind (alone or loaded), gathered over the segments."""

    runs: list[_W1Run] = field(default_factory=list)
    traces: list[dict[str, np.ndarray]] = field(default_factory=list)
    back_late: list[np.ndarray] = field(default_factory=list)  # per block: us late back from the sleep (NaN: unknown)

    def add(self, run: _W1Run, trace: dict[str, np.ndarray], back_late_us: np.ndarray | None = None) -> None:
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
class _Interleaved:
    stalls: tuple[np.ndarray, np.ndarray] | None = None  # the stall probe's (starts, lengths), ns
    gc: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # the collector's (starts, ends, generations), ns
    solo: _Timed = field(default_factory=_Timed)
    load: _Timed = field(default_factory=_Timed)
    w2_outputs: list[np.ndarray] = field(default_factory=list)
    w2_done: int = 0             # W2 blocks completed inside the load segments' timed windows
    w2_seconds: float = 0.0      # ... and those windows' total length
    w2_samples_per_s: float = 0.0
    w1_blocks: int = 0           # W1 blocks from reset to the end of the run
    w1_last: list[np.ndarray] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def _or_dash(v: Any) -> str:
    return "-" if v is None else f"{v:g}"


def miss_causes(timed: "_Timed", bd: Breakdown, stalls: tuple[np.ndarray, np.ndarray] | None,
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


def _resident_pump(engine: Any) -> PumpBody:
    """W2's resident loop, natively (pump_resident: no Python, no GIL per block), until stopped."""
    def body(pump: _Pump) -> None:
        watcher = threading.Thread(target=lambda: (pump.stop.wait(), engine.stop_pump()),
                                   name="w3-pump-stop", daemon=True)
        watcher.start()
        offset = time.perf_counter_ns() - time.monotonic_ns()
        pump.started.set()
        try:
            stamps = engine.pump_resident(PUMP_MAX_SECONDS)
        finally:
            pump.stop.set()
            watcher.join()
        pump.stamps.extend(t + offset for t in stamps)
    return body


# ----------------------------------------------------------------------------- the run


def _require_cuda(pipeline: "Pipeline", chain: "SpecChain", backend: str | None) -> None:
    from ..backends import choose_backend

    requested = backend or pipeline.backend
    if requested == "cpu":
        raise ConfigError(f"the contention bench times the GPU engine; backend 'cpu' cannot run it "
                          f"(pipeline '{pipeline.name}')", hint="use --backend cuda (or auto) on a GPU machine")
    try:
        choose_backend(pipeline, chain, "cuda")
    except DeviceError as exc:
        raise DeviceError(f"the contention bench (W3) needs a usable GPU: {exc}") from None


def run_w3(bench: ContentionBench | str | Path, *, backend: str | None = None, blocks: int | None = None,
           warmup: int | None = None, period_ms: float | None = None, throughput_seconds: float | None = None,
           quantum_ns: int | None = None, segments: int | None = None, baseline: bool = True,
           wait: ReleaseWaitSettings | None = ReleaseWaitSettings(),
           progress: Progress | None = None) -> ContentionReport:
    """Run the contention benchmark (module doc); arguments left None take the bench file's values.

    ``baseline=False`` leaves out the PyTorch runs. ``progress`` receives one line per step.
    ``wait``: how W1's blocks wait for their release (issue 13: natively, spin window, prewarm, and
    the latency from the release; None: the sessions-3-to-6 method, a Python sleep-then-spin and
    the latency from the hand-over).
    """
    from .harness import _input_blocks, _source_format, machine_description

    if not isinstance(bench, ContentionBench):
        loaded = load_contention(bench)
        if loaded is None:
            raise ConfigError(f"{bench} has no 'bench:' mapping", hint="see benchmarks/w3.yaml")
        bench = loaded
    st = bench.settings
    blocks = st.blocks if blocks is None else blocks
    warmup = st.warmup if warmup is None else warmup
    seconds = st.throughput_seconds if throughput_seconds is None else throughput_seconds
    quantum = st.quantum_ns if quantum_ns is None else quantum_ns
    segments = st.segments if segments is None else segments
    if blocks < W1_CHECK_BLOCKS:
        raise ConfigError(f"the contention bench needs at least {W1_CHECK_BLOCKS} timed W1 blocks, got {blocks}",
                          hint="--blocks N with N >= 6")
    say = progress or (lambda _line: None)
    w1p, w2p = bench.realtime, bench.throughput
    c1, c2 = w1p.specs(_source_format(w1p)), w2p.specs(_source_format(w2p))
    _require_cuda(w1p, c1, backend)
    _require_cuda(w2p, c2, backend)
    period_ms = period_ms if period_ms is not None else st.period_ms
    period_ns = int(round(period_ms * 1e6)) if period_ms is not None else int(round(c1.input.block_period * 1e9))
    deadline_ns = max(1, int(round(w1p.qos.deadline_s(c1.input.block_period) * 1e9)))
    spin_us = st.spin_us if st.spin_us is not None else period_ns // 1000 + 100
    w1_total_s = (warmup + blocks) * period_ns / 1e9
    if wait is not None and wait.spin_us is None:
        wait = replace(wait, spin_us=w1p.qos.spin_window_us())

    settings = {"blocks": blocks, "warmup": warmup, "period_ns": period_ns, "deadline_ns": deadline_ns,
                "quantum_ns": quantum, "throughput_mode": st.throughput_mode, "throughput_seconds": seconds,
                "spin_us": spin_us, "w2_in_flight": W2_IN_FLIGHT, "segments": segments, "file": bench.path,
                "release_wait": None if wait is None else asdict(wait)}
    report = ContentionReport(
        realtime=w1p.name, throughput=w2p.name, w1_spec=c1.input.describe(), w2_spec=c2.input.describe(),
        period_us=period_ns / 1e3, deadline_us=deadline_ns / 1e3, settings=settings,
        machine=machine_description(), rows=[])
    say(f"w3: {w1p.name} every {period_ns / 1e3:.1f} us, {warmup}+{blocks} blocks per W1 run "
        f"(~{w1_total_s:.0f} s each); {w2p.name} solo window {seconds:g} s; preparing inputs")
    w1_inputs = _input_blocks(w1p, c1, W1_POOL)
    w2_blocks = _input_blocks(w2p, c2, W2_CHECK_BLOCKS)

    proj = _ProjectRun(bench, c1, c2, period_ns=period_ns, deadline_ns=deadline_ns, quantum_ns=quantum,
                       spin_us=spin_us, wait=wait)
    solo = ContentionRow("project_solo", "pygpukit-dsp, alone")
    load = ContentionRow("project_load", "pygpukit-dsp, W1 + W2 on one scheduler", solo_key="project_solo")
    report.rows += [solo, load]
    say(f"w3: pygpukit-dsp {w2p.name} alone ({seconds:g} s)")
    solo.w2_samples_per_s, w2_solo_out, solo.extra = proj.w2_alone(w2_blocks, seconds)
    say(f"w3:   {solo.w2_samples_per_s / 1e9:.1f} Gsamples/s")
    parts = _split(blocks, segments)
    say(f"w3: pygpukit-dsp {w1p.name} alone and {w1p.name} + {w2p.name} on one scheduler, in {len(parts)} "
        f"alternating segments of each (~{2 * (blocks + len(parts) * SETTLE_BLOCKS) * period_ns / 1e9:.0f} s)")
    run = proj.interleaved(w1_inputs, w2_blocks, warmup, blocks, segments)
    solo.w1 = LatencyFigures.from_ns(run.solo.lat_ns, deadline_ns, run.solo.overruns)
    load.w1 = LatencyFigures.from_ns(run.load.lat_ns, deadline_ns, run.load.overruns)
    solo.extra["w1_breakdown"] = run.solo.breakdown(deadline_ns)
    load.extra = {**run.extra, "w1_breakdown": run.load.breakdown(deadline_ns)}
    solo.extra["miss_causes"] = miss_causes(run.solo, solo.extra["w1_breakdown"], run.stalls, run.gc)
    load.extra["miss_causes"] = miss_causes(run.load, load.extra["w1_breakdown"], run.stalls, run.gc)
    if run.stalls is not None:
        solo.extra["probe_gaps_over_100us"] = int((run.stalls[1] >= HOST_STALL_US * 1000).sum())
        solo.extra["probe_max_gap_us"] = float(run.stalls[1].max()) / 1e3 if run.stalls[1].size else 0.0
    load.w2_samples_per_s = run.w2_samples_per_s
    say(f"w3:   alone: {_w1_line(solo.w1)}")
    say(f"w3:   loaded: {_w1_line(load.w1)}; {w2p.name} {load.w2_samples_per_s / 1e9:.1f} Gsamples/s")
    # references: W1 alone from reset, back to back (first warmup + blocks blocks: PyTorch's
    # check; the whole interleaved run: its check)
    w1_ref, w1_ref_run = proj.w1_reference(w1_inputs, [warmup + blocks, run.w1_blocks])
    report.checks += [
        _check(f"pygpukit-dsp {w1p.name}, interleaved run = alone back to back (last {W1_CHECK_BLOCKS} of "
               f"{run.w1_blocks} blocks)", run.w1_last, w1_ref_run, SELF_RTOL),
        _check(f"pygpukit-dsp {w2p.name} under load = alone ({W2_CHECK_BLOCKS} blocks from reset)",
               run.w2_outputs, w2_solo_out, SELF_RTOL),
    ]
    report.notes.append(f"pygpukit-dsp: {w1p.name} declared cost {proj.cost_ns / 1e3:.1f} us (p99 of "
                        f"{CALIBRATION_BLOCKS} blocks alone); dispatcher spin {spin_us} us; {w1p.name} alone and "
                        f"loaded measured in {len(parts)} alternating segments each, {SETTLE_BLOCKS} untimed "
                        "blocks after every switch"
                        + (f"; {w1p.name} driven from a thread pinned to CPU "
                           f"{resolve_cpu(w1p.qos.cpu)} (qos.cpu: {w1p.qos.cpu})" if w1p.qos.cpu is not None else ""))

    if baseline:
        _torch_rows(report, bench, c1, c2, w1_inputs, w2_blocks, w1_ref, w2_solo_out,
                    warmup=warmup, blocks=blocks, period_ns=period_ns, deadline_ns=deadline_ns,
                    seconds=seconds, say=say, wait=wait)
    for t in report.targets():
        say(f"w3: {t.name}: {'not measured' if t.met is None else 'met' if t.met else 'NOT met'} ({t.detail})")
    return report


def _w1_line(f: LatencyFigures) -> str:
    return f"W1 p50 {f.p50:.1f} us, p99 {f.p99:.1f} us, max {f.max:.1f} us, misses {f.misses}"


def _torch_rows(report: ContentionReport, bench: ContentionBench, c1: "SpecChain", c2: "SpecChain",
                w1_inputs: list[np.ndarray], w2_blocks: list[np.ndarray], ref_w1: list[np.ndarray],
                ref_w2: list[np.ndarray], *, warmup: int, blocks: int, period_ns: int, deadline_ns: int,
                seconds: float, say: Progress, wait: ReleaseWaitSettings | None = None) -> None:
    from .. import _native
    from .baselines import BaselineSkipped
    from .baselines.torch_w3 import TorchW3
    from .harness import CHECK_RTOL

    keys = [("torch_solo", "PyTorch + CUDA graph, alone (priority 0)", None),
            ("torch_same", "PyTorch, two streams, same priority", "torch_solo"),
            ("torch_high", "PyTorch, two streams, W1 high priority", "torch_solo")]
    rows = {k: ContentionRow(k, label, solo_key=solo) for k, label, solo in keys}
    report.rows += list(rows.values())
    w1n, w2n = bench.realtime.name, bench.throughput.name
    say("w3: PyTorch baseline: capturing CUDA graphs")
    try:
        torch_w3 = TorchW3(bench.realtime, c1, bench.throughput, c2)
    except BaselineSkipped as exc:
        for r in rows.values():
            r.status, r.reason = "skipped", str(exc)
        return
    except Exception as exc:  # a baseline that breaks is reported, not fatal
        for r in rows.values():
            r.status, r.reason = "failed", f"{type(exc).__name__}: {exc}"
        return
    spb2 = int(np.prod(c2.input.block_shape))
    outs: dict[str, list[np.ndarray]] = {}
    at = None
    if wait is not None:  # the same native wait as pygpukit-dsp's W1, before each call
        def at(x: np.ndarray, release: int) -> Any:
            if wait.warm_us > 0:  # the same two steps as pygpukit-dsp's W1
                _native.wait_until(int(release) - wait.warm_us * 1000, int(wait.spin_us))
            _native.wait_until(int(release), int(wait.spin_us))
            return torch_w3.w1_process(x)
    try:
        if torch_w3.w2_note:
            report.notes.append(torch_w3.w2_note)
        solo = rows["torch_solo"]
        s1, s2 = torch_w3.streams(high=False)
        solo.extra = {"w1_priority": s1.priority, "w2_priority": s2.priority}
        say(f"w3: PyTorch {w1n} alone")
        run = torch_w3.w1_run(s1, lambda: _paced_w1(torch_w3.w1_process, w1_inputs, warmup=warmup,
                                                      blocks=blocks, period_ns=period_ns, release_call=at))
        solo.w1 = LatencyFigures.from_ns(run.lat_ns, deadline_ns, run.overruns)
        outs["solo"] = run.outputs
        say(f"w3:   {_w1_line(solo.w1)}")
        say(f"w3: PyTorch {w2n} alone ({seconds:g} s)")
        pump = _start_pump(torch_w3.w2_pump(s2, w2_blocks))
        t0, t1 = _timed_window(pump, seconds)
        solo.w2_samples_per_s = pump.rate(t0, t1, spb2)
        w2_out = pump.outputs
        say(f"w3:   {solo.w2_samples_per_s / 1e9:.1f} Gsamples/s")
        for key, high in (("torch_same", False), ("torch_high", True)):
            r = rows[key]
            s1, s2 = torch_w3.streams(high=high)
            r.extra = {"w1_priority": s1.priority, "w2_priority": s2.priority}
            say(f"w3: PyTorch {w1n} + {w2n}, stream priorities {s1.priority} / {s2.priority}")
            pump = _start_pump(torch_w3.w2_pump(s2, w2_blocks))
            try:
                def loaded(pump=pump) -> _W1Run:
                    _pace_until(pump.started, torch_w3.w1_process, w1_inputs, period_ns, release_call=at)
                    _wait_started(pump)
                    torch_w3.w1_reset()
                    return _paced_w1(torch_w3.w1_process, w1_inputs, warmup=warmup, blocks=blocks,
                                     period_ns=period_ns, release_call=at)
                run = torch_w3.w1_run(s1, loaded)
            finally:
                _finish_pump(pump)
            r.w1 = LatencyFigures.from_ns(run.lat_ns, deadline_ns, run.overruns)
            r.w2_samples_per_s = pump.rate(run.t_start, run.t_end, spb2)
            outs[key] = run.outputs
            say(f"w3:   {_w1_line(r.w1)}; {w2n} {r.w2_samples_per_s / 1e9:.1f} Gsamples/s")
    except Exception as exc:  # a baseline that breaks is reported, not fatal
        for r in rows.values():
            if r.w1 is None and r.status == "ok":
                r.status, r.reason = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        torch_w3.close()
    if "solo" in outs:
        report.checks.append(_check(f"PyTorch {w1n} = pygpukit-dsp (last {W1_CHECK_BLOCKS} blocks alone)",
                                    outs["solo"], ref_w1, CHECK_RTOL, project=False))
        if rows["torch_solo"].w2_samples_per_s is not None:
            report.checks.append(_check(f"PyTorch {w2n} = pygpukit-dsp ({W2_CHECK_BLOCKS} blocks from reset)",
                                        w2_out, ref_w2, CHECK_RTOL, project=False))
        for key in ("torch_same", "torch_high"):
            if key in outs:
                report.checks.append(_check(f"PyTorch {w1n} under load ({key.removeprefix('torch_')} "
                                            f"priority) = alone", outs[key], outs["solo"], SELF_RTOL,
                                            project=False))
