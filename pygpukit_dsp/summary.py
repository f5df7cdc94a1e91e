"""The records of a run: RunSummary (what a run reports), SchedulerAccounting (the scheduler's
figures of one stream), Progress (a snapshot for progress callbacks), and StopRequest (why and how a
run ends early).

Executor layer, records only: plain dataclasses and formatting. It imports no other executor module
(runner.py, session.py, the backends), so the CLI, the cluster runner and a RunSummary read back
from JSON need none of them. runner.py re-exports every name here.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Callable


@dataclass
class Progress:
    """A snapshot handed to progress callbacks while a stream runs."""

    pipeline: str
    blocks: int
    samples_in: int
    elapsed_s: float
    p50_us: float
    p99_us: float
    max_us: float
    misses: int
    total_blocks: int | None = None

    @property
    def samples_per_s(self) -> float:
        return self.samples_in / self.elapsed_s if self.elapsed_s > 0 else 0.0


ProgressFn = Callable[[Progress], None]


class StopRequest:
    """Why and how a run ends early: set by Session.stop(), a signal handler or a run handle.

    ``reason`` is what the summary's ``ended_by`` says ("stop", "SIGINT", "SIGTERM"). A plain
    stop lets the runner finish the block in hand, drain the engine, flush and finalise every
    sink (a sound card plays out its queue); ``abort`` (a second Ctrl-C) skips the waiting for
    queued output but still finalises files.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None
        self.abort = False

    def set(self, reason: str = "stop", *, abort: bool = False) -> None:
        if self.reason is None:
            self.reason = reason
        self.abort = self.abort or abort
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def __call__(self) -> bool:  # usable where a ``stop() -> bool`` callable is expected
        return self._event.is_set()


@dataclass
class SchedulerAccounting:
    """The scheduler's figures of one stream, from the dispatcher of its device (Session runs).

    Latency here is release to finish as the scheduler sees it: from the hand-over of a block
    (its submission as a task) until the dispatcher reported it done; misses are blocks that
    finished after release + deadline. The runner's own host-side figures (RunSummary's
    ``latency_us`` and ``deadline_misses``) also include the copy of the output to the caller.
    """

    device: str                    # "cpu" | "cuda" (GPU 0) | "cuda:N": the dispatcher that ran the blocks
    deadline_us: float | None      # relative deadline the misses are counted against
    latency_us: dict[str, float]   # count, min, mean, p50, p90, p99, p999, max
    submitted: int
    completed: int                 # finished by their deadline
    missed: int                    # finished after it
    dropped: int                   # abandoned (a block that raised)
    cancelled: int                 # withdrawn (e.g. interrupted before it ran)
    chunks: int                    # launches (a whole CPU block is one chunk)
    busy_us: float                 # measured device time (cpu: engine time) of all chunks
    cost_us: float | None          # per-block cost the scheduler used last (declared or measured)
    achieved_rate_hz: float        # blocks per second since the first release
    declared_cost_us: float | None = None  # the device time it was admitted with (qos.cost_us or calibration)
    measured_cost_us: float | None = None  # the device time its dispatcher measured (events; EWMA)

    @classmethod
    def from_stats(cls, device: str, st: dict[str, Any]) -> "SchedulerAccounting":
        """From ``Scheduler.stream_stats`` (nanoseconds) to microseconds."""
        lat = st.get("latency", {})
        latency = {k: (v / 1e3 if k != "count" else v) for k, v in lat.items()
                   if k in ("count", "min", "mean", "p50", "p90", "p99", "p999", "max")}
        deadline, cost = st.get("deadline_ns"), st.get("cost_ns")
        return cls(device=device, deadline_us=deadline / 1e3 if deadline is not None else None,
                   latency_us=latency, submitted=st["submitted"], completed=st["completed"],
                   missed=st["missed"], dropped=st["dropped"], cancelled=st["cancelled"],
                   chunks=st["chunks"], busy_us=st["busy_ns"] / 1e3,
                   cost_us=cost / 1e3 if cost is not None else None,
                   achieved_rate_hz=float(st.get("achieved_rate_hz", 0.0)),
                   declared_cost_us=_us(st.get("declared_cost_ns")), measured_cost_us=_us(st.get("measured_cost_ns")))


def _us(ns: Any) -> float | None:
    return ns / 1e3 if ns is not None else None


@dataclass
class SinkAccount:
    """What one sink of a run took: its name (a graph's; a chain's sink is named by what it reads),
    type, what it read, the spec it took, and the blocks and samples (or frames) per channel written,
    with its own counters (``stats``)."""

    name: str
    type: str
    input: str
    spec: str
    unit: str      # "samples" | "frames"
    blocks: int
    samples: int
    stats: dict[str, int] = field(default_factory=dict)


@dataclass
class SourceAccount:
    """What one source of a run delivered: its name, type, spec, the samples per channel read into
    blocks, and its own counters."""

    name: str
    type: str
    spec: str
    samples: int
    stats: dict[str, int] = field(default_factory=dict)


@dataclass
class RunSummary:
    """Everything a run reports: backend and why, counts, latency percentiles, misses.

    ``latency_us`` and ``deadline_misses`` are the runner's host-side figures (hand-over to the
    engine until the output is available to the sink); ``scheduler`` holds the scheduler's
    accounting of the same blocks when the run went through a Session (always, for
    ``Pipeline.run`` and ``gk-stream run``), else None.

    ``sources`` and ``sinks`` account for each source and sink by name (a graph has several:
    docs/graphs.md); ``source_stats``, ``sink_stats``, ``input_spec``, ``output_spec`` and
    ``samples_out`` are the first source's and the first sink's (the first output's).
    """

    pipeline: str
    backend: str
    backend_reason: str
    qos_class: str
    blocks: int
    samples_in: int
    samples_out: int
    input_spec: str
    output_spec: str
    wall_s: float
    deadline_us: float
    deadline_misses: int
    latency_us: dict[str, float]  # count, min, mean, p50, p90, p99, p999, max
    source_stats: dict[str, int] = field(default_factory=dict)
    sink_stats: dict[str, int] = field(default_factory=dict)
    engine_counters: dict[str, int] = field(default_factory=dict)
    # "source end" | "sender idle" (a raw zmq source's end_after_idle_s) | "block limit" | "duration limit" |
    # "stop" | "SIGINT" | "SIGTERM" | "interrupted" (KeyboardInterrupt in a library run) | "fault";
    # "... (aborted)" when queued output was not awaited
    ended_by: str = "source end"
    fault: str | None = None
    output_unit: str = "samples"  # "frames" when the output is in the frames domain
    scheduler: SchedulerAccounting | None = None  # set by Session after the dispatch drained
    audio: dict[str, Any] | None = None  # a sound card's figures (io/portaudio.py LiveAudio.report)
    gpu: int | None = None        # cuda: the GPU the stream ran on (None on cpu)
    placement: str | None = None  # cuda: why that GPU ("GPU 1: auto: the most admission headroom ...")
    cpu: int | None = None        # qos.cpu: the CPU the thread that ran the blocks was pinned to
    admission: str | None = None  # a measured realtime cost: what admission measured (BlockCost.describe)
    # what the source saw happen on the way, in order: e.g. a zmq source's lost blocks, each
    # {"sample": samples delivered before it, "dropped_samples", "dropped_blocks", "sequence", "why"};
    # a raw zmq source's GNU Radio tags {"sample", "event": "tag", "key", "value", "srcid", "offset"}
    # (rx_time also "time_s", "origin_s": the Unix time of sample 0) and, on sub, when it joined
    # {"sample": 0, "event": "first message", "endpoint", "joined_unix_s", "waited_s"}
    events: list[dict[str, Any]] = field(default_factory=list)
    # NaN/Inf input samples (pygpukit_dsp/nonfinite.py, NonFiniteCount.to_dict): the policy, the
    # count, and where the first one was (block, sample, channel, time, value); None: not checked
    nonfinite: dict[str, Any] | None = None
    sources: list[SourceAccount] = field(default_factory=list)
    sinks: list[SinkAccount] = field(default_factory=list)
    # each python stage's Python calls, by stage name: {"calls", "mean_us", "p50_us", "p99_us",
    # "max_us", "total_us"} (the time of the call itself, measured around it; docs/stages.md, "python")
    python_stages: dict[str, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:  # read back from JSON (to_dict): the accounts as records again
        self.sources = [SourceAccount(**a) if isinstance(a, dict) else a for a in self.sources]
        self.sinks = [SinkAccount(**a) if isinstance(a, dict) else a for a in self.sinks]

    def sink(self, name: str) -> SinkAccount:
        """The account of sink ``name``."""
        for a in self.sinks:
            if a.name == name:
                return a
        raise KeyError(f"the run had no sink named '{name}' (its sinks: {', '.join(a.name for a in self.sinks)})")

    @property
    def samples_per_s(self) -> float:
        return self.samples_in / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples_per_s"] = self.samples_per_s
        return d

    def format(self) -> str:
        lat = self.latency_us
        lines = [
            f"pipeline {self.pipeline}: backend={self.backend} ({self.backend_reason})",
            *([f"  device {self.placement or f'GPU {self.gpu}'}"] if self.gpu is not None else []),
            *([f"  blocks driven by a thread pinned to CPU {self.cpu} (qos.cpu)"] if self.cpu is not None else []),
            f"  input  {self.input_spec}",
            f"  output {self.output_spec}",
            f"  blocks {self.blocks}, samples in {self.samples_in}, out {self.samples_out}"
            f"{' frames' if self.output_unit == 'frames' else ''} (per channel), "
            f"{self.wall_s:.3f} s wall, {self.samples_per_s / 1e6:.3f} Msamples/s; ended by {self.ended_by}",
            *([f"  source {a.name} ({a.type}): {a.spec}, {a.samples} samples read" for a in self.sources]
              if len(self.sources) > 1 else []),
            *([f"  sink {a.name} ({a.type}) <- {a.input}: {a.spec}, {a.blocks} blocks, {a.samples}"
               f"{' frames' if a.unit == 'frames' else ''} written" for a in self.sinks] if len(self.sinks) > 1 else []),
            f"  latency per block, host (us): p50 {lat.get('p50', 0):.1f}  p99 {lat.get('p99', 0):.1f}  "
            f"p99.9 {lat.get('p999', 0):.1f}  max {lat.get('max', 0):.1f}",
            f"  qos {self.qos_class}: deadline {self.deadline_us:.1f} us, deadline misses {self.deadline_misses} (host)",
            *([f"  admitted with a measured cost: {self.admission}"] if self.admission else []),
            *(f"  python stage {name}: {c['calls']} calls, per call p50 {c['p50_us']:.1f}  p99 {c['p99_us']:.1f}  "
              f"max {c['max_us']:.1f} us, {c['total_us'] / 1e3:.3f} ms in all" for name, c in self.python_stages.items()),
        ]
        sa = self.scheduler
        if sa is not None:
            sl = sa.latency_us
            lines.append(
                f"  scheduler ({sa.device} dispatcher): latency p50 {sl.get('p50', 0):.1f}  "
                f"p99 {sl.get('p99', 0):.1f}  p99.9 {sl.get('p999', 0):.1f}  max {sl.get('max', 0):.1f} us; "
                f"misses {sa.missed}, drops {sa.dropped}, chunks {sa.chunks}, busy {sa.busy_us / 1e3:.3f} ms"
                + (f"; device time per block admitted {sa.declared_cost_us:.1f} us, measured "
                   f"{sa.measured_cost_us:.1f} us" if sa.declared_cost_us and sa.measured_cost_us else ""))
        issues = {f"source {k}": v for k, v in self.source_stats.items() if v and k not in INFO_COUNTERS}
        if len(self.sinks) > 1:  # every sink's problems, by name
            issues.update({f"sink {a.name} {k}": v for a in self.sinks for k, v in a.stats.items()
                           if v and k not in INFO_COUNTERS})
        else:
            issues.update({f"sink {k}": v for k, v in self.sink_stats.items() if v and k not in INFO_COUNTERS})
        if issues:
            lines.append("  " + ", ".join(f"{k} {v}" for k, v in issues.items()))
        lines.extend(_event_lines(self.events))
        if self.nonfinite and self.nonfinite.get("count"):
            from .nonfinite import NonFiniteCount

            lines.append("  " + NonFiniteCount(**self.nonfinite).describe())
        if self.audio:
            from .io.portaudio import LiveAudio

            lines.append("  " + LiveAudio.format_report(self.audio))
        if self.fault:
            lines.append(f"  FAULT: {self.fault}")
        return "\n".join(lines)


def _event_lines(events: list[dict[str, Any]]) -> list[str]:
    """The summary's lines for a source's join and tag events (docs/scale-out.md, GNU Radio)."""
    import datetime as dt

    lines = []
    for e in events:
        if e.get("event") == "first message":
            joined = dt.datetime.fromtimestamp(e["joined_unix_s"], dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3]
            lines.append(f"  source joined {e.get('endpoint')} at {joined} UTC; first message after "
                         f"{e['waited_s']:.3f} s (a publisher's samples before it are not seen)")
    tags = [e for e in events if e.get("event") == "tag"]
    if tags:
        shown = ", ".join(f"{e['key']}={e['value']} at {e['sample']}" for e in tags[:4])
        lines.append(f"  source tags {len(tags)}: {shown}" + (", ..." if len(tags) > 4 else ""))
    origin = next((e["origin_s"] for e in tags if "origin_s" in e), None)
    if origin is not None:
        when = dt.datetime.fromtimestamp(origin, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lines.append(f"  stream time: sample 0 at {when} (rx_time)")
    return lines


INFO_COUNTERS = ("samples", "messages", "other_topics")
"""Counters that report what went through, not what went wrong: the summary's problem line skips them."""
