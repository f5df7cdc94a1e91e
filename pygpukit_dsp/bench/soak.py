"""Soak: one pipeline as a realtime-paced stream for minutes, its memory sampled at an interval.

The stream goes through the path users get (a Session: admission, the scheduler's dispatcher,
the engine, the sink), with its source wrapped in :class:`PacedSource`: block n is released
n block periods after block 0, at the stream's sample clock (48 kHz / 256 = 187.5 blocks/s for
W1), and a source that ends is opened again, so the soak lasts ``minutes`` whatever the
source's length. A sampler thread records, every ``interval_s``: RSS and its peak
(/proc/self/status), open file descriptors, threads, blocks so far against the clock, the
stream's latency and deadline misses so far, optionally Python's own allocations (tracemalloc),
and on the cuda backend the GPU's used memory and the engine pool's figures. The report fits a
line through the RSS of the samples after the warm-up and says whether it grew.

    report = run_soak(Pipeline.from_yaml("benchmarks/w1.yaml"), backend="cpu", minutes=10)
    print(report.markdown())
"""

from __future__ import annotations

import math
import os
import platform
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..errors import ConfigError
from ..io._common import Pacer
from ..io.base import IoParams, Source, StreamFormat

if TYPE_CHECKING:
    from ..pipeline import Pipeline, SpecChain

MIB = float(1 << 20)
# RSS growth within the noise: less than this many MiB over the samples after the warm-up. A
# steady stream's RSS moves by a few hundred KiB as allocator arenas and lazily touched pages
# come and go; 1 MiB over the window is the smallest rise the verdict calls growth. The slope
# threshold is therefore NOISE_MIB / window: 6.3 MiB/h for a 10-minute soak (570 s after its
# 30 s warm-up), 13 MiB/h for 5 minutes; a longer soak resolves a slower leak.
NOISE_MIB = 1.0
WARMUP_MAX_S = 30.0     # default warm-up: a tenth of the soak, at most this


# ----------------------------------------------------------------------------- pacing


class PacedSource(Source):
    """A pipeline's source released at its sample clock and opened again when it ends.

    ``n`` samples become available ``n / rate`` seconds after the first read (io._common.Pacer,
    the clock of synth's ``rate: realtime``); a source already paced by a clock (a sound card,
    ``rate: realtime``) is not paced twice. When the source ends it is closed and opened again
    with the same request (``restarts`` counts it), so the stream never ends by itself.
    """

    type = "paced"
    summary = "a source released at its sample clock and restarted at its end (soak)"

    def __init__(self, inner: Source):
        super().__init__(IoParams(), base_dir=inner.base_dir)
        self.inner = inner
        self.where = inner.where
        self.realtime = True
        self.restarts = 0
        # perf_counter when the first samples came: the stream clock's t0 (block n is released
        # n + 1 block periods later; a source with its own clock: when it delivered block 0)
        self.first_read: float | None = None
        self._request: StreamFormat | None = None
        self._pacer: Pacer | None = None
        self._pos = 0

    def open(self, request: StreamFormat) -> StreamFormat:
        fmt = self.inner.open(request)
        self._request = request
        self._pos = 0
        self.first_read = None
        self._pacer = None if self.inner.realtime else Pacer(float(fmt.sample_rate))
        return replace(fmt, length=None)  # endless: the soak's duration limit ends it

    def read(self, n: int) -> np.ndarray:
        chunk = np.asarray(self.inner.read(n))
        if chunk.ndim == 2 and chunk.shape[1] == 0 and self._request is not None:
            self.inner.close()
            self.inner.open(self._request)
            self.restarts += 1
            chunk = np.asarray(self.inner.read(n))  # still empty: a source with nothing to give ends
        if chunk.ndim == 2 and chunk.shape[1]:
            if self.first_read is None:  # the Pacer's t0 too: the first samples were just made
                self.first_read = time.perf_counter()
            if self._pacer is not None:
                self._pos += chunk.shape[1]
                self._pacer.wait_until(self._pos)
        return chunk

    def stats(self) -> dict[str, int]:
        fn = getattr(self.inner, "stats", None)
        return dict(fn()) if callable(fn) else {}

    def interrupt(self, *, abort: bool = False) -> None:
        super().interrupt(abort=abort)
        self.inner.interrupt(abort=abort)

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> str:
        return self.inner.describe()  # faults name the user's source


# ----------------------------------------------------------------------------- samples


@dataclass
class SoakSample:
    """The process and the stream at one moment of a soak."""

    elapsed_s: float               # since run_soak started the stream (before it opened)
    phase: str                     # before | warm-up | steady | after (the stream closed)
    stream_s: float | None         # since the stream's clock started (its first samples were read)
    blocks: int                    # blocks through the sink so far
    expected_blocks: float | None  # stream_s / block period: the blocks the clock released by now
    rss_bytes: int
    hwm_bytes: int                 # peak RSS of the process so far (VmHWM)
    fds: int                       # open file descriptors
    threads: int
    p50_us: float | None = None    # the stream's latency so far (host, hand-over to output)
    p99_us: float | None = None
    misses: int = 0                # host deadline misses so far
    python_bytes: int | None = None        # tracemalloc's current figure (track_python)
    device_used_bytes: int | None = None   # cuda: total - free memory of the GPU (every process)
    pool_in_use_bytes: int | None = None   # cuda: the engine pool's blocks in use
    pool_reserved_bytes: int | None = None  # cuda: ... and held from the driver (in use + cached)


def read_proc_status() -> dict[str, int]:
    """VmRSS, VmHWM (bytes) and Threads of this process from /proc/self/status."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024  # kB
            elif key == "Threads":
                out[key] = int(value)
    return out


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) - 1  # less the descriptor listdir itself holds


def least_squares_slope(xs: list[float], ys: list[float]) -> float | None:
    """The slope of the least-squares line through (xs, ys); None with fewer than 2 distinct xs."""
    if len(xs) < 2:
        return None
    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    dx = x - x.mean()
    den = float(dx @ dx)
    return float(dx @ (y - y.mean())) / den if den > 0 else None


# ----------------------------------------------------------------------------- report


@dataclass
class SoakReport:
    pipeline: str
    backend: str
    backend_reason: str
    machine: str
    minutes: float
    interval_s: float
    warmup_s: float
    sample_rate: float
    block_size: int
    samples: list[SoakSample] = field(default_factory=list)
    blocks: int = 0
    ended_by: str = ""
    wall_s: float = 0.0             # the stream's own wall time (first block to its end)
    host_misses: int = 0            # blocks over the deadline, host side (the runner)
    scheduler_misses: int | None = None  # ... as the scheduler accounted them
    deadline_us: float = 0.0
    latency_us: dict[str, float] = field(default_factory=dict)
    source_restarts: int = 0
    python_tracked: bool = False
    noise_mib: float = NOISE_MIB

    @property
    def block_period_s(self) -> float:
        return self.block_size / self.sample_rate

    def steady(self) -> list[SoakSample]:
        return [s for s in self.samples if s.phase == "steady"]

    def growth(self) -> dict[str, Any]:
        """Start (first steady sample) -> end (last steady sample) of every figure, and the RSS
        slope in MiB/h from a least-squares fit over the steady samples."""
        st = self.steady()
        g: dict[str, Any] = {"steady_samples": len(st)}
        if not st:
            return g
        a, b = st[0], st[-1]
        window_h = (b.elapsed_s - a.elapsed_s) / 3600
        slope = least_squares_slope([s.elapsed_s / 3600 for s in st], [s.rss_bytes / MIB for s in st])
        g.update(
            window_s=b.elapsed_s - a.elapsed_s,
            rss_start_mib=a.rss_bytes / MIB, rss_end_mib=b.rss_bytes / MIB,
            rss_delta_mib=(b.rss_bytes - a.rss_bytes) / MIB,
            rss_slope_mib_h=slope,
            threshold_mib_h=self.noise_mib / window_h if window_h > 0 else None,
            hwm_start_mib=a.hwm_bytes / MIB, hwm_end_mib=b.hwm_bytes / MIB,
            fds_start=a.fds, fds_end=b.fds, threads_start=a.threads, threads_end=b.threads)
        if a.python_bytes is not None and b.python_bytes is not None:
            g.update(python_start_mib=a.python_bytes / MIB, python_end_mib=b.python_bytes / MIB)
        for key in ("device_used", "pool_in_use", "pool_reserved"):
            va, vb = getattr(a, f"{key}_bytes"), getattr(b, f"{key}_bytes")
            if va is not None and vb is not None:
                g.update({f"{key}_start_mib": va / MIB, f"{key}_end_mib": vb / MIB})
        return g

    def grew(self) -> list[str] | None:
        """What grew over the steady samples: ``rss`` when the RSS slope is over the
        noise threshold, ``fds`` / ``threads`` when they rose, ``device_pool`` when the engine
        pool's reserved bytes rose by more than the noise. [] : no growth; None: too few samples
        after the warm-up to fit a slope."""
        g = self.growth()
        slope, limit = g.get("rss_slope_mib_h"), g.get("threshold_mib_h")
        if slope is None or limit is None:
            return None
        out = ["rss"] if slope > limit else []
        out += [key for key in ("fds", "threads") if g[f"{key}_end"] > g[f"{key}_start"]]
        if "pool_reserved_start_mib" in g and \
                g["pool_reserved_end_mib"] - g["pool_reserved_start_mib"] > self.noise_mib:
            out.append("device_pool")
        return out

    def verdict_code(self) -> str:
        """``no_growth``, ``growth`` (grew() says of what) or ``too_few_samples``."""
        grew = self.grew()
        return "too_few_samples" if grew is None else "growth" if grew else "no_growth"

    def verdict(self) -> str:
        """grew() in words: "no growth" when the RSS slope is within the noise threshold and
        descriptors, threads and the engine pool held steady; else what grew."""
        g, grew = self.growth(), self.grew()
        if grew is None:
            return f"too few samples after the warm-up to fit a slope ({g['steady_samples']})"
        words = {"rss": lambda: f"RSS grew {g['rss_slope_mib_h']:.1f} MiB/h",
                 "fds": lambda: f"open fds grew {g['fds_start']} -> {g['fds_end']}",
                 "threads": lambda: f"threads grew {g['threads_start']} -> {g['threads_end']}",
                 "device_pool": lambda: (f"device pool grew {g['pool_reserved_start_mib']:.1f} -> "
                                         f"{g['pool_reserved_end_mib']:.1f} MiB")}
        if grew:
            return "; ".join(words[k]() for k in grew)
        return (f"no growth (RSS slope {g['rss_slope_mib_h']:+.1f} MiB/h; above {g['threshold_mib_h']:.1f} MiB/h "
                "would be growth)")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["block_period_s"] = self.block_period_s
        d["growth"] = self.growth()
        d["verdict_code"] = self.verdict_code()
        d["grew"] = self.grew()
        d["verdict"] = self.verdict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SoakReport":
        """The report back from :meth:`to_dict` (its derived keys are recomputed, not read)."""
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["samples"] = [SoakSample(**s) for s in d.get("samples", [])]
        return cls(**kw)

    def markdown(self) -> str:
        cuda = any(s.device_used_bytes is not None for s in self.samples)
        py = any(s.python_bytes is not None for s in self.samples)
        rate = 1 / self.block_period_s
        lines = [
            f"### {self.pipeline}: soak, backend={self.backend} ({self.backend_reason})",
            "",
            f"{self.minutes:g} min at the stream's clock ({self.sample_rate:g} Hz / {self.block_size} = "
            f"{rate:g} blocks/s), a sample every {self.interval_s:g} s, growth fitted after "
            f"{self.warmup_s:g} s of warm-up; {self.machine}",
            "",
            "| elapsed s | phase | blocks | clock blocks | RSS MiB | peak RSS MiB | "
            + ("Python MiB | " if py else "") + "fds | threads | p50 us | p99 us | misses |"
            + (" GPU used MiB | pool in use MiB | pool reserved MiB |" if cuda else ""),
            "|---:|---|---:|---:|---:|---:|" + ("---:|" if py else "") + "---:|---:|---:|---:|---:|"
            + ("---:|---:|---:|" if cuda else ""),
        ]
        for s in self.samples:
            row = [f"{s.elapsed_s:.1f}", s.phase, str(s.blocks), _num(s.expected_blocks, "{:.0f}"),
                   f"{s.rss_bytes / MIB:.1f}", f"{s.hwm_bytes / MIB:.1f}"]
            if py:
                row.append(_mib(s.python_bytes))
            row += [str(s.fds), str(s.threads), _num(s.p50_us, "{:.1f}"), _num(s.p99_us, "{:.1f}"), str(s.misses)]
            if cuda:
                row += [_mib(s.device_used_bytes), _mib(s.pool_in_use_bytes), _mib(s.pool_reserved_bytes)]
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        lines += [f"* {line}" for line in self.summary_lines()]
        return "\n".join(lines)

    def summary_lines(self) -> list[str]:
        g = self.growth()
        out = []
        if "rss_start_mib" in g:
            slope, limit = g["rss_slope_mib_h"], g["threshold_mib_h"]
            out.append(
                f"RSS after warm-up {g['rss_start_mib']:.1f} -> end {g['rss_end_mib']:.1f} MiB "
                f"({g['rss_delta_mib']:+.2f} MiB over {_duration(g['window_s'])}); slope "
                + (f"{slope:+.2f} MiB/h" if slope is not None else "n/a")
                + f" (least squares over {g['steady_samples']} samples; noise threshold "
                + (f"{limit:.1f} MiB/h" if limit is not None else "n/a") + ")")
            out.append(f"peak RSS {g['hwm_start_mib']:.1f} -> {g['hwm_end_mib']:.1f} MiB; open fds "
                       f"{g['fds_start']} -> {g['fds_end']}; threads {g['threads_start']} -> {g['threads_end']}")
            if "python_start_mib" in g:
                out.append(f"Python allocations (tracemalloc) {g['python_start_mib']:.2f} -> "
                           f"{g['python_end_mib']:.2f} MiB")
            if "device_used_start_mib" in g:
                out.append(f"GPU memory used {g['device_used_start_mib']:.1f} -> {g['device_used_end_mib']:.1f} MiB "
                           f"(every process on the GPU); engine pool in use {g['pool_in_use_start_mib']:.1f} -> "
                           f"{g['pool_in_use_end_mib']:.1f} MiB, reserved {g['pool_reserved_start_mib']:.1f} -> "
                           f"{g['pool_reserved_end_mib']:.1f} MiB")
        after = [s for s in self.samples if s.phase == "after"]
        if after and after[-1].device_used_bytes is not None:
            before = [s for s in self.samples if s.phase == "before"]
            if before and before[0].device_used_bytes is not None:
                out.append(f"GPU memory used before the stream opened {before[0].device_used_bytes / MIB:.1f} MiB, "
                           f"after it closed {after[-1].device_used_bytes / MIB:.1f} MiB")
        clock = self.wall_s / self.block_period_s if self.wall_s > 0 else 0.0
        sched = f", scheduler {self.scheduler_misses}" if self.scheduler_misses is not None else ""
        lat = self.latency_us
        out.append(f"blocks {self.blocks} in {self.wall_s:.1f} s of stream ({clock:.0f} at the clock); "
                   f"latency p50 {lat.get('p50', 0):.1f} us, p99 {lat.get('p99', 0):.1f} us, max "
                   f"{lat.get('max', 0):.1f} us; deadline ({self.deadline_us:.0f} us) misses: host "
                   f"{self.host_misses}{sched}; source restarts {self.source_restarts}; ended by {self.ended_by}")
        out.append(f"verdict: {self.verdict()}")
        return out


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def _mib(v: int | None) -> str:
    return f"{v / MIB:.1f}" if v is not None else ""


def _num(v: float | None, fmt: str) -> str:
    return fmt.format(v) if v is not None else ""


def format_sample(s: SoakSample, pipeline: str = "") -> str:
    """One progress line per sample (the script prints them to stderr)."""
    dev = "" if s.device_used_bytes is None else (
        f", GPU used {_mib(s.device_used_bytes)} MiB, pool {_mib(s.pool_reserved_bytes)} MiB")
    clock = f"/{s.expected_blocks:.0f}" if s.expected_blocks is not None else ""
    p99 = f", p99 {s.p99_us:.1f} us" if s.p99_us is not None else ""
    return (f"soak {pipeline} {s.elapsed_s:7.1f} s {s.phase:<7} blocks {s.blocks}{clock}, RSS "
            f"{_mib(s.rss_bytes)} MiB (peak {_mib(s.hwm_bytes)}), fds {s.fds}, threads {s.threads}"
            f"{p99}, misses {s.misses}{dev}")


# ----------------------------------------------------------------------------- the run


class _Sampler:
    """Takes SoakSamples: one before the stream opens, one every interval while it runs, one after."""

    def __init__(self, session: Any, clock: PacedSource | None, period_s: float, warmup_s: float,
                 device: Any, track_python: bool, progress: Callable[[SoakSample], None] | None):
        self.session, self.clock, self.period_s = session, clock, period_s
        self.warmup_s, self.device, self.track_python = warmup_s, device, track_python
        self.progress = progress
        self.samples: list[SoakSample] = []
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def take(self, phase: str | None = None) -> SoakSample:
        now = time.perf_counter()
        elapsed = now - self.t0
        if phase is None:
            phase = "warm-up" if elapsed < self.warmup_s else "steady"
        proc = read_proc_status()
        stats = next(iter(self.session.live_stats().values()), {})
        lat = stats.get("latency_us", {})
        first = self.clock.first_read if self.clock is not None else None
        stream_s = None if first is None or phase == "after" else now - first
        s = SoakSample(
            elapsed_s=elapsed, phase=phase, stream_s=stream_s, blocks=int(stats.get("blocks", 0)),
            expected_blocks=None if stream_s is None else stream_s / self.period_s,
            rss_bytes=proc.get("VmRSS", 0), hwm_bytes=proc.get("VmHWM", 0), fds=open_fds(),
            threads=proc.get("Threads", threading.active_count()),
            p50_us=lat.get("p50") if lat.get("count") else None,
            p99_us=lat.get("p99") if lat.get("count") else None, misses=int(stats.get("misses", 0)))
        if self.track_python:
            import tracemalloc

            s.python_bytes = tracemalloc.get_traced_memory()[0]
        if self.device is not None:
            free, total = self.device.memory_info()
            pool = self.device.memory_stats()
            s.device_used_bytes = int(total - free)
            s.pool_in_use_bytes = int(pool["in_use_bytes"])
            s.pool_reserved_bytes = int(pool["reserved_bytes"])
        self.samples.append(s)
        if self.progress is not None:
            self.progress(s)
        return s

    def start(self, interval_s: float) -> None:
        def loop() -> None:
            k = 1
            try:
                while True:
                    due = self.t0 + k * interval_s
                    while (left := due - time.perf_counter()) > 0:  # wait() may wake a hair early
                        if self._stop.wait(left):
                            return
                    self.take()
                    # a sample that came late skips the ticks it missed instead of bunching up
                    k = max(k + 1, math.floor((time.perf_counter() - self.t0) / interval_s) + 1)
            except BaseException as exc:  # raised by run_soak after the stream ended
                self.error = exc

        self._thread = threading.Thread(target=loop, name="gk-soak-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def _chain(pipeline: "Pipeline") -> "SpecChain":
    """The pipeline's specs from its source's format (the source opened and closed once)."""
    fmt = StreamFormat()
    if pipeline.source is not None:
        fmt = pipeline.source.open(StreamFormat(pipeline.sample_rate, pipeline.channels, pipeline.dtype))
        pipeline.source.close()
    return pipeline.specs(fmt)


def resolve_backend(pipeline: "Pipeline", chain: "SpecChain", backend: str | None) -> tuple[str, str]:
    """The backend the soak's stream will run on, and why, decided once before it opens (on the
    cpu backend nothing here touches CUDA)."""
    requested = backend or pipeline.backend
    if requested == "cpu":
        return "cpu", "requested"
    from ..backends import choose_backend

    choice = choose_backend(pipeline, chain, requested)
    return choice.name, choice.reason


def _machine(backend: str) -> str:
    if backend == "cuda":
        from .inputs import machine_description

        return machine_description()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0
    return f"{platform.system()} {platform.processor() or platform.machine()}, {cores} cores, " \
           f"Python {sys.version.split()[0]}"


def default_warmup(minutes: float) -> float:
    """A tenth of the soak, at most WARMUP_MAX_S."""
    return min(WARMUP_MAX_S, minutes * 60 / 10)


def run_soak(pipeline: "Pipeline", *, backend: str | None = None, minutes: float = 10.0,
             interval_s: float = 10.0, warmup_s: float | None = None, track_python: bool = False,
             progress: Callable[[SoakSample], None] | None = None) -> SoakReport:
    """Run ``pipeline`` as a realtime-paced stream for ``minutes`` of its sample clock and sample
    the process every ``interval_s`` (see the module's docstring).

    ``warmup_s`` (default: a tenth of the soak, at most 30 s): samples before it are not fitted.
    ``track_python``: also sample tracemalloc's figure (it slows every allocation down).
    ``progress(sample)`` is called from the sampler thread after every sample.
    The stream ends at its duration limit (``ended_by``), or earlier on Ctrl-C with the samples so far.
    """
    from ..pipeline import Pipeline
    from ..session import Session

    if not (math.isfinite(minutes) and minutes > 0):
        raise ConfigError(f"a soak needs minutes > 0, got {minutes}")
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise ConfigError(f"the sampling interval must be > 0 seconds, got {interval_s}")
    warmup = default_warmup(minutes) if warmup_s is None else float(warmup_s)
    if not 0 <= warmup < minutes * 60:
        raise ConfigError(f"the warm-up ({warmup:g} s) must be >= 0 and shorter than the soak "
                          f"({minutes * 60:g} s)")
    if pipeline.source is None:
        raise ConfigError(f"pipeline '{pipeline.name}' has no source to soak", where=pipeline.where,
                          hint="add a source (e.g. {type: synth, signal: noise})")
    chain = _chain(pipeline)
    spec = chain.input
    name, reason = resolve_backend(pipeline, chain, backend)

    paced: PacedSource | None = None
    source: Source = pipeline.source
    if getattr(pipeline.sink, "pair_with", None) is None:  # a duplex pair runs at its sound card's clock
        source = paced = PacedSource(pipeline.source)
    soaked = Pipeline(pipeline.stages, name=pipeline.name, sample_rate=pipeline.sample_rate,
                      channels=pipeline.channels, block_size=pipeline.block_size, dtype=pipeline.dtype,
                      backend=name, qos=pipeline.qos, source=source, sink=pipeline.sink,
                      where=pipeline.where, path=pipeline.path, device=pipeline.device,
                      device_where=pipeline.device_where)
    device = None
    if name == "cuda":
        from .. import _native
        from ..backends import requested_gpu

        device = _native.Device(requested_gpu(pipeline))  # one stream: auto is GPU 0 (all empty)
    session = Session([soaked], backend=name)
    sampler = _Sampler(session, paced, spec.block_period, warmup, device, track_python, progress)
    if track_python:
        import tracemalloc

        tracemalloc.start()
    try:
        sampler.take("before")
        sampler.start(interval_s)
        try:
            summary = session.run(duration=minutes * 60)[0]
        finally:
            sampler.stop()
        sampler.take("after")
    finally:
        if track_python:
            import tracemalloc

            tracemalloc.stop()
    if sampler.error is not None:
        raise sampler.error
    return SoakReport(
        pipeline=pipeline.name, backend=summary.backend, backend_reason=reason, machine=_machine(name),
        minutes=minutes, interval_s=interval_s, warmup_s=warmup, sample_rate=float(spec.sample_rate),
        block_size=spec.block_size, samples=sampler.samples, blocks=summary.blocks,
        ended_by=summary.ended_by, wall_s=summary.wall_s, host_misses=summary.deadline_misses,
        scheduler_misses=summary.scheduler.missed if summary.scheduler is not None else None,
        deadline_us=summary.deadline_us, latency_us=dict(summary.latency_us),
        source_restarts=paced.restarts if paced is not None else 0, python_tracked=track_python)
