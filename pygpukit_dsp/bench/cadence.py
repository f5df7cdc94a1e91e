"""Paced latency: blocks released on an absolute clock at the stream's period.

``gk-stream bench benchmarks/w1.yaml --cadence realtime`` (:func:`run_cadence`). W1's figures are
taken back to back; a real stream hands over one block per period (48 kHz / 256 = one every
5.33 ms), and a host that idles between blocks is slower on each of them (docs/benchmarks.md, "The
host after idle"). Here block k of a segment is *released* at ``t0 + k * period`` and its latency
runs from that release until its output is available, whatever made it late (a late wake-up, a
previous block still running, the block itself).

Every implementation is paced the same way in the same run: the project (the pipeline's engine)
and each baseline (NumPy, CuPy eager, PyTorch eager, PyTorch + CUDA graph). Waiting for a release
never holds the GIL: the project's engine waits inside its own call (the engine's instrument,
:class:`~pygpukit_dsp.bench.paced.PacedEngine`: sleep until ``spin_us`` before the release,
``prewarm`` the slot, spin, come back to Python ``warm_us`` before the release and spin the rest in
the block's own call), a baseline in ``_native.wait_until`` (the same sleep-then-spin, in the same
two steps) before its call. The project also runs *back to back* (W1's own method) in the same run, for the ratio of
paced to back-to-back latency.

Implementations take turns in segments (``SEGMENT_BLOCKS`` timed blocks each, after
``SETTLE_BLOCKS`` untimed paced blocks), rotating until each has ``blocks`` timed blocks, so that
the host's bursts of noise fall on all of them (the W3 bench alternates the same way). The CPU
time the process uses per second of audio (``getrusage``, every thread) is measured over each
implementation's timed segments: a thread that spins through a whole period costs one core (1.0).

:func:`run_settings` compares host settings on the project alone, in the same rotation: sleeping in Python, a native sleep, spin windows, prewarm, a pinned core,
SCHED_FIFO, mlockall, spinning the whole period, no spin in the completion wait.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import os
import resource
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..affinity import pinned, resolve_cpu
from ..errors import ConfigError
from .contention import LatencyFigures
from .host_settings import (CPU_DMA_LATENCY, fifo, host_facts, locked, mlockall, sched_fifo_allowed,
                            shallow_idle, wake_latency_limit)
from .paced import PacedEngine
from .steal import steal_summary, steal_ticks
from .trace import Breakdown, breakdown
from .trace import markdown as breakdown_markdown

if TYPE_CHECKING:
    from ..pipeline import Pipeline

CADENCES = ("realtime",)
DEFAULT_SPIN_US = 200        # the spin window before a release (QoS.spin_us's default)
DEFAULT_PREWARM = True
DEFAULT_WARM_US = 100        # back to Python this long before the release (PacedEngine.process's warm_us)
SEGMENT_BLOCKS = 250         # timed blocks per turn of an implementation
SETTLE_BLOCKS = 10           # untimed paced blocks at the start of every turn
POOL = 32                    # distinct input blocks, cycled
FRESH_NOTE = "each block written into its array just before it is due, as a live source writes it (untimed)"
POOL_NOTE = "each block read from the input pool as it is (cold)"
IDLE_FLOOR_BLOCKS = 400      # host_idle_floor: paced copies (and as many back to back)
# Targets (H100): paced p50 <= 1.3x and p99 <= 1.5x back to back; paced p99 <= 0.5x PyTorch +
# CUDA graph paced the same way.
P50_TARGET, P99_TARGET, TORCH_TARGET = 1.3, 1.5, 0.5


@dataclass
class PacedFigures(LatencyFigures):
    """Latency from release (us) of one implementation's timed blocks (W3's figures: percentiles,
    misses over the deadline, overruns = blocks still running at the next release), and what it
    cost the host."""

    cpu_per_audio_s: float | None = None   # CPU seconds of the process per second of audio


@dataclass
class CadenceRow:
    key: str
    label: str
    kind: str                       # project | back_to_back | baseline | setting
    status: str = "ok"              # ok | skipped | failed | mismatch
    reason: str = ""
    reason_code: str = ""           # a skipped baseline: why, for a program (baselines.ops.SKIP_CODES)
    figures: PacedFigures | None = None
    max_rel_err: float | None = None
    breakdown: Breakdown | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CadenceReport:
    pipeline: str
    spec: str
    backend: str
    period_us: float
    deadline_us: float
    blocks: int
    warmup: int
    spin_us: int
    prewarm: bool
    machine: str
    warm_us: int = 0
    cpu: int | None = None        # the CPU the main rotation's thread was pinned to (qos.cpu / --cpu)
    fresh_input: bool = True      # each block written just before it is due (_Arrival)
    idle_floor: dict[str, float] = field(default_factory=dict)  # host_idle_floor()
    steal: dict[str, Any] = field(default_factory=dict)         # steal_summary() over the main rotation
    rows: list[CadenceRow] = field(default_factory=list)
    settings: list[CadenceRow] = field(default_factory=list)
    host: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def row(self, key: str) -> CadenceRow | None:
        return next((r for r in self.rows if r.key == key and r.status == "ok" and r.figures), None)

    def ratios(self) -> dict[str, float]:
        """paced / back to back (p50, p99) and paced / PyTorch + graph paced (p99)."""
        out: dict[str, float] = {}
        paced, b2b, tg = self.row("project"), self.row("back_to_back"), self.row("torch-graph")
        if paced and b2b:
            out["paced_over_back_to_back_p50"] = paced.figures.p50 / b2b.figures.p50
            out["paced_over_back_to_back_p99"] = paced.figures.p99 / b2b.figures.p99
        if paced and tg:
            out["paced_over_torch_graph_p99"] = paced.figures.p99 / tg.figures.p99
            out["paced_over_torch_graph_p50"] = paced.figures.p50 / tg.figures.p50
        return out

    def floor_checks(self) -> dict[str, dict[str, Any]]:
        """For the targets: does the bare round trip (the floor, same rotation) meet them itself?
        ``p50`` / ``p99`` (against back to back) and ``torch`` (p99 against PyTorch + graph paced)
        -> the floor's paced figure (``floor_us``; ``floor_back_to_back_us`` beside it for the
        first two), what the target allows the project (``allowed_us`` = ``target`` x
        ``base_us``), and ``below_machine``: the floor paced is over it. A block of the project does
        at least the floor's work (the fill, a GPU round trip, the copy out, a Python call), so there
        the target is below what this machine allowed in this run. Empty without the floor's rows."""
        paced, b2b = self.row("project"), self.row("back_to_back")
        fl, fl_b2b, tg = self.row("floor"), self.row("floor_back_to_back"), self.row("torch-graph")
        if not (paced and b2b and fl and fl_b2b):
            return {}

        def check(q: str, floor_us: float, target: float, base_us: float, **beside: float) -> dict[str, Any]:
            allowed = target * base_us
            return {"quantile": q, "floor_us": floor_us, **beside, "target": target, "base_us": base_us,
                    "allowed_us": allowed, "below_machine": floor_us > allowed}

        out = {}
        if tg:  # the same test against PyTorch + graph's paced p99 (a hiccup of the host adds the same us to both)
            out["torch"] = check("p99", fl.figures.p99, TORCH_TARGET, tg.figures.p99)
        for q, target in (("p50", P50_TARGET), ("p99", P99_TARGET)):
            out[q] = check(q, getattr(fl.figures, q), target, getattr(b2b.figures, q),
                           floor_back_to_back_us=getattr(fl_b2b.figures, q))
        return out

    def floor_verdicts(self) -> dict[str, str]:
        """floor_checks() in words: ``target -> sentence``."""
        out = {}
        for key, c in self.floor_checks().items():
            aside = "" if "floor_back_to_back_us" not in c else (
                f" (back to back {c['floor_back_to_back_us']:.1f}: {c['floor_us'] / c['floor_back_to_back_us']:.2f}x)")
            out[key] = (f"the bare round trip paced: {c['quantile']} {c['floor_us']:.1f} us{aside} against the "
                        f"{c['allowed_us']:.1f} us the target allows the project ({c['target']:g} x {c['base_us']:.1f})"
                        + (": **the target is below what this machine allowed in this run**" if c["below_machine"]
                           else ": the floor is within it"))
        return out

    TARGETS = ((f"paced p50 <= {P50_TARGET:g}x back to back", "paced_over_back_to_back_p50", P50_TARGET),
               (f"paced p99 <= {P99_TARGET:g}x back to back", "paced_over_back_to_back_p99", P99_TARGET),
               (f"paced p99 <= {TORCH_TARGET:g}x PyTorch + CUDA graph paced", "paced_over_torch_graph_p99",
                TORCH_TARGET))

    def targets(self) -> list[tuple[str, bool | None, str]]:
        r = self.ratios()
        out = []
        for name, key, target in self.TARGETS:
            v = r.get(key)
            out.append((name, None if v is None else v <= target, "not measured" if v is None else f"{v:.2f}x"))
        return out

    def markdown(self) -> str:
        lines = [
            f"### {self.pipeline} at its real cadence: one block every {self.period_us:.1f} us, latency from release",
            "",
            f"{self.spec}; backend={self.backend}; {self.blocks} timed blocks per implementation after {self.warmup} "
            f"warm-up, in turns of {SEGMENT_BLOCKS} ({SETTLE_BLOCKS} untimed paced blocks first); deadline "
            f"{self.deadline_us:.0f} us; waits: sleep until {self.spin_us} us before the release, then spin"
            f"{' (project: prewarm at the start of the spin)' if self.prewarm else ''}"
            f"{f', back in Python {self.warm_us} us before the release' if self.warm_us else ''}"
            f"{f'; every implementation driven from a thread pinned to CPU {self.cpu}' if self.cpu is not None else ''}"
            f"; {FRESH_NOTE if self.fresh_input else POOL_NOTE}"
            f"; {self.machine}",
            "",
            "| implementation | p50 us | p90 us | p99 us | p99.9 us | max us | misses | overruns | CPU s / audio s | check |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        lines += [_table_row(r) for r in self.rows]
        f = self.idle_floor
        if f:
            lines += ["", f"Host floor, same run: a {f['bytes'] // 1024} KiB copy (the fill's size; the same work every "
                          f"time) right after the same paced wait took p50 {f['paced_p50_us']:.1f} us (p99 "
                          f"{f['paced_p99_us']:.1f}) against {f['b2b_p50_us']:.1f} us (p99 {f['b2b_p99_us']:.1f}) back to "
                          f"back: {f['p50_ratio']:.2f}x. A thread that sleeps between blocks pays about that on every "
                          "block's fixed CPU work on this host, whatever it runs."]
        st = self.steal
        if st.get("available"):
            lines += ["", f"Steal over the rotation (/proc/stat: CPU time the hypervisor took from this guest's "
                          f"vCPUs): {st['ms']:g} ms in all, {st['ms_per_s']:g} ms per second (most on CPU "
                          f"{st['max_cpu']}: {st['max_cpu_ms']:g} ms)."]
        lines += ["", "Ratios and targets:"]
        floor = self.floor_verdicts()
        for name, met, detail in self.targets():
            verdict = "not measured" if met is None else ("**met**" if met else "**not met**")
            why = floor.get("torch") if "PyTorch" in name else next(
                (v for k, v in floor.items() if name.startswith(f"paced {k} ") and name.endswith("back to back")), None)
            lines.append(f"- {name}: {verdict} ({detail})" + (f"; {why}" if why else ""))
        if self.settings:
            lines += ["", f"Host settings, {self.pipeline} alone, same rotation "
                          f"({self.settings[0].figures.blocks if self.settings[0].figures else 0} timed blocks each):", "",
                      "| setting | p50 us | p90 us | p99 us | p99.9 us | max us | misses | CPU s / audio s | "
                      "python in p50 | fill p50 | launch p50 | GPU + seen p50 | python out p50 | note |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
            for r in self.settings:
                lines.append(_settings_row(r))
        if self.host:
            lines += ["", "Host: " + ", ".join(f"{k} {v}" for k, v in self.host.items())]
        proj = self.row("project")
        if proj is not None and proj.breakdown is not None:
            lines += ["", *breakdown_markdown(f"Where the paced block's time went ({proj.label}; python in starts at "
                                              "the release)", proj.breakdown)]
        b2b = self.row("back_to_back")
        if b2b is not None and b2b.breakdown is not None:
            lines += ["", *breakdown_markdown(f"The same, back to back ({b2b.label})", b2b.breakdown)]
        lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ratios"] = self.ratios()
        ratios = d["ratios"]
        d["targets"] = [{"name": n, "key": key, "target": target, "ratio": ratios.get(key), "met": m, "detail": t}
                        for (n, m, t), (_, key, target) in zip(self.targets(), self.TARGETS)]
        d["floor_checks"] = self.floor_checks()
        d["floor_verdicts"] = self.floor_verdicts()
        return d


def _fmt(v: float | None, digits: int = 1) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def _table_row(r: CadenceRow) -> str:
    if r.status != "ok" or r.figures is None:
        return f"| {r.label} | | | | | | | | | {r.status}: {r.reason} |"
    f = r.figures
    check = "reference" if r.kind in ("project", "back_to_back") else "floor: no output to check" if r.kind == "floor" else (
        f"ok (rel err {r.max_rel_err:.1e})" if r.max_rel_err is not None else "ok")
    return (f"| {r.label} | {f.p50:.1f} | {f.p90:.1f} | {f.p99:.1f} | {f.p999:.1f} | {f.max:.1f} | {f.misses} | "
            f"{f.overruns} | {_fmt(f.cpu_per_audio_s, 3)} | {check} |")


def _settings_row(r: CadenceRow) -> str:
    if r.status != "ok" or r.figures is None:
        return f"| {r.label} | | | | | | | | | | | | | {r.status}: {r.reason} |"
    f = r.figures
    ph = {p.name: p.p50_us for p in r.breakdown.phases} if r.breakdown is not None else {}
    cells = [_fmt(ph.get(k)) for k in ("python in", "fill", "launch", "GPU + seen", "python out")]
    return (f"| {r.label} | {f.p50:.1f} | {f.p90:.1f} | {f.p99:.1f} | {f.p999:.1f} | {f.max:.1f} | {f.misses} | "
            f"{_fmt(f.cpu_per_audio_s, 3)} | " + " | ".join(cells) + f" | {r.reason} |")


# ----------------------------------------------------------------------------- timing


@dataclass
class _Impl:
    """One implementation in the rotation: ``call(block, release_ns)`` runs a block released at
    ``release_ns`` (None: back to back) and returns its output."""

    row: CadenceRow
    call: Callable[[np.ndarray, int | None], Any]
    paced: bool = True
    traced: Any = None                      # a CudaEngine to trace (set_trace / block_trace)
    setup: Callable[[], contextlib.AbstractContextManager] | None = None  # host setting around a turn
    arrival: _Arrival | None = None          # None: the block comes from the pool as it is (cold)
    lat: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    traces: list[dict[str, np.ndarray]] = field(default_factory=list)
    overruns: int = 0
    cpu_s: float = 0.0
    audio_s: float = 0.0


def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class _Arrival:
    """A block as a live source hands it over: written into the array the call receives just
    before it is due (``warm_us`` before its release, when the wait comes back to Python; just
    before a back-to-back call), so that it is in the cache as a block a sound card's callback or a
    socket read has just written. Untimed, the same for every implementation. Without it each
    paced block would come from the input pool as written ``POOL`` periods earlier, which no
    live stream reads (``fresh_input=False``; docs/benchmarks.md, "Paced W1")."""

    def __init__(self) -> None:
        self.buf: np.ndarray | None = None
        self.src: np.ndarray | None = None

    def stage(self, src: np.ndarray) -> np.ndarray:
        if self.buf is None or self.buf.shape != src.shape or self.buf.dtype != src.dtype:
            self.buf = np.empty_like(src)
        self.src = src
        return self.buf

    def __call__(self) -> None:
        if self.src is not None and self.buf is not None:
            np.copyto(self.buf, self.src)
            self.src = None


_ARRIVAL: list[_Arrival | None] = [None]  # the block due next (set by _turn; one rotation thread)


def _arrive() -> None:
    """Write the block due next (a call's hook: after the first step of the wait)."""
    a = _ARRIVAL[0]
    if a is not None:
        a()


def _turn(impl: _Impl, inputs: list[np.ndarray], first: int, n: int, period_ns: int, settle: int) -> int:
    """One turn: ``settle`` untimed blocks, then ``n`` timed; paced on a clock that starts one
    period from now. Returns the index of the next input."""
    perf = time.perf_counter_ns
    k = len(inputs)
    i = first
    ctx = impl.setup() if impl.setup is not None else contextlib.nullcontext()
    arrival = impl.arrival
    hooked = getattr(impl.call, "arrives", False)  # the call writes it itself, after its first wait step

    def block(src: np.ndarray, release: int | None) -> np.ndarray:
        if arrival is None:
            _ARRIVAL[0] = None
            return src
        x = arrival.stage(src)
        _ARRIVAL[0] = arrival
        if release is None or not hooked:
            arrival()  # back to back, or a call without the hook: written just before the call
        return x

    with ctx:
        t0 = perf() + period_ns
        for j in range(settle):
            release = t0 + j * period_ns if impl.paced else None
            impl.call(block(inputs[i % k], release), release)
            i += 1
        if impl.traced is not None:
            impl.traced.set_trace(n)
        base = t0 + settle * period_ns
        if impl.paced and perf() > base:  # the settling ran late: restart the clock
            base = perf() + period_ns
        cpu0 = _cpu_seconds()
        for j in range(n):
            release = base + j * period_ns if impl.paced else None
            x = block(inputs[i % k], release)
            start = perf() if release is None else release
            impl.call(x, release)
            end = perf()
            i += 1
            impl.lat.append(end - start)
            impl.starts.append(start)
            impl.ends.append(end)
            if release is not None and end > release + period_ns:
                impl.overruns += 1
        impl.cpu_s += _cpu_seconds() - cpu0
        impl.audio_s += n * period_ns / 1e9
        if impl.traced is not None:
            impl.traces.append(impl.traced.block_trace())
            impl.traced.set_trace(0)
    return i


def _rotate(impls: list[_Impl], inputs: list[np.ndarray], blocks: int, period_ns: int,
            say: Callable[[str], None] | None = None) -> None:
    """Turns of SEGMENT_BLOCKS, every implementation in order, until each has ``blocks``."""
    done, i = 0, 0
    while done < blocks:
        n = min(SEGMENT_BLOCKS, blocks - done)
        for impl in impls:
            try:
                i = _turn(impl, inputs, i, n, period_ns, SETTLE_BLOCKS)
            except Exception as exc:  # a baseline that breaks is reported, not fatal
                if impl.row.kind in ("baseline", "setting") and impl.row.status == "ok":
                    impl.row.status, impl.row.reason = "failed", f"{type(exc).__name__}: {exc}"
                else:
                    raise
        impls = [m for m in impls if m.row.status == "ok"]
        done += n
        if say is not None:
            say(f"cadence: {done}/{blocks} blocks per implementation")


def _finish(impl: _Impl, deadline_ns: int) -> None:
    if impl.row.status != "ok" or not impl.lat:
        return
    cpu = impl.cpu_s / impl.audio_s if impl.paced and impl.audio_s > 0 else None
    impl.row.figures = PacedFigures.from_ns(np.asarray(impl.lat, dtype=np.int64), deadline_ns, impl.overruns,
                                            cpu_per_audio_s=cpu)
    if impl.traced is not None and impl.traces:
        trace = {k: np.concatenate([t[k] for t in impl.traces]) for k in impl.traces[0]}
        try:
            impl.row.breakdown = breakdown(trace, np.asarray(impl.starts), np.asarray(impl.ends), deadline_ns=deadline_ns)
        except ValueError as exc:  # the trace and the stamps disagree: say so, keep the figures
            impl.row.extra["breakdown_error"] = str(exc)


# ----------------------------------------------------------------------------- the runs


def with_block_size(pipeline: "Pipeline", block_size: int | None) -> "Pipeline":
    """The pipeline with another block size (its stages shared; every engine makes its own state)."""
    if block_size is None or block_size == pipeline.block_size:
        return pipeline
    if block_size < 1:
        raise ConfigError(f"--block-size must be >= 1, got {block_size}")
    p = copy.copy(pipeline)
    p.block_size = int(block_size)
    p.name = f"{pipeline.name}_b{block_size}"
    return p


def _waiter(spin_us: int, warm_us: int = 0) -> Callable[[int | None], None]:
    """A baseline's wait: natively to ``warm_us`` before the release (sleep, then spin), back in
    Python, natively again to the release: the same two steps as the project's."""
    from .. import _native

    def wait(release: int | None) -> None:
        if release is not None:
            if warm_us > 0:
                _native.wait_until(int(release) - warm_us * 1000, int(spin_us))
            _arrive()
            _native.wait_until(int(release), int(spin_us))
    return wait


def _baseline_call(impl: Any, wait: Callable[[int | None], None]) -> Callable[[np.ndarray, int | None], Any]:
    def call(x: np.ndarray, release: int | None) -> Any:
        wait(release)
        return impl.process(x)
    call.arrives = True  # type: ignore[attr-defined]  # _waiter writes the block (_Arrival)
    return call


def _floor_call(floor: Any, out_shape: tuple[int, ...], out_dtype: Any, spin_us: int, prewarm: bool,
                warm_us: int) -> Callable[[np.ndarray, int | None], Any]:
    """The round trip's floor (``_native.instrument.RoundTripFloor``) paced as the project is: back in Python
    ``warm_us`` before the release, then the rest of the wait (prewarm, spin) and the block in one
    native call; a new output array per block, as ``process()`` returns."""
    from .. import _native

    def call(x: np.ndarray, release: int | None) -> Any:
        y = np.empty(out_shape, out_dtype)
        if release is None:
            floor.run(x, y)
            return y
        if warm_us > 0:
            _native.wait_until(int(release) - warm_us * 1000, int(spin_us))
        _arrive()
        floor.run(x, y, int(release), int(spin_us), prewarm)
        return y
    call.arrives = True  # type: ignore[attr-defined]
    return call


def _project_call(engine: Any, spin_us: int, prewarm: bool, native: bool,
                  warm_us: int = 0) -> Callable[[np.ndarray, int | None], Any]:
    if native:  # CudaEngine: the wait inside its own call (its instrument)
        paced = PacedEngine(engine)

        def call(x: np.ndarray, release: int | None) -> Any:
            return paced.process(x, release, spin_us=spin_us, prewarm=prewarm, warm_us=warm_us, arrive=_arrive)
        call.arrives = warm_us > 0  # type: ignore[attr-defined]  # else the block is written before the call
        return call
    return _baseline_call(engine, _waiter(spin_us, warm_us))


def host_idle_floor(block: np.ndarray, period_ns: int, blocks: int, spin_us: int, warm_us: int) -> dict[str, float]:
    """The host's own cost of idling between blocks, measured on work that is the same every time:
    a copy of ``block`` (the fill's size) timed right after the paced wait (the same two steps as
    every implementation's), then the same copy back to back. Their ratio is what a thread that
    sleeps between blocks pays on fixed CPU work on this host, whatever runs: the floor under the
    paced / back-to-back ratio of the host phases."""
    src, dst = block.copy(), np.empty_like(block)
    _ARRIVAL[0] = None  # no block is due: the wait's hook does nothing
    wait = _waiter(spin_us, warm_us)
    perf = time.perf_counter_ns
    paced, b2b = [], []
    t0 = perf() + period_ns
    for j in range(blocks):
        wait(t0 + j * period_ns)
        a = perf()
        np.copyto(dst, src)
        paced.append(perf() - a)
    for _ in range(blocks):
        a = perf()
        np.copyto(dst, src)
        b2b.append(perf() - a)
    p, b = np.asarray(paced[blocks // 10:]) / 1e3, np.asarray(b2b[blocks // 10:]) / 1e3
    out = {"bytes": int(block.nbytes), "paced_p50_us": float(np.median(p)), "paced_p99_us": float(np.percentile(p, 99)),
           "b2b_p50_us": float(np.median(b)), "b2b_p99_us": float(np.percentile(b, 99))}
    out["p50_ratio"] = out["paced_p50_us"] / out["b2b_p50_us"] if out["b2b_p50_us"] > 0 else 0.0
    return out


def run_cadence(pipeline: "Pipeline", *, backend: str | None = None, blocks: int = 2000, warmup: int = 200,
                compare: list[str] | None = None, block_size: int | None = None, spin_us: int = DEFAULT_SPIN_US,
                prewarm: bool = DEFAULT_PREWARM, warm_us: int = DEFAULT_WARM_US, settings: bool = False,
                settings_blocks: int | None = None, cpu: int | str | None = None, fresh_input: bool = True,
                progress: Callable[[str], None] | None = None) -> CadenceReport:
    """Paced latency of the pipeline and the ``compare`` baselines (module doc); with
    ``settings``, also :func:`run_settings` (``settings_blocks`` each, default ``blocks // 2``).

    ``cpu``: the CPU the calling thread is pinned to while the main rotation runs (every
    implementation alike): a number, ``auto`` or ``none``; default the pipeline's ``qos.cpu``. The
    settings rotation sets its own. ``fresh_input``: each block is written just before it is due
    (:class:`_Arrival`); False: read from the input pool as it is."""
    from ..backends import choose_backend, open_backend
    from .baselines import BASELINES, BaselineSkipped, build_baseline
    from .harness import check_outputs
    from .inputs import input_blocks, machine_description, source_format
    from .report import ImplResult

    compare = list(compare or [])
    unknown = [c for c in compare if c not in BASELINES]
    if unknown:
        from ..stages.base import did_you_mean

        raise ConfigError(f"unknown baseline '{unknown[0]}'", hint=did_you_mean(unknown[0], sorted(BASELINES))
                          or f"baselines: {', '.join(sorted(BASELINES))}")
    if blocks < 1:
        raise ConfigError(f"blocks must be >= 1, got {blocks}")
    if spin_us < 0:
        raise ConfigError(f"--spin-us must be >= 0, got {spin_us}")
    if not 0 <= warm_us <= spin_us:
        warm_us = min(max(0, warm_us), spin_us)  # the Python round trip happens inside the spin window
    say = progress or (lambda _line: None)
    p = with_block_size(pipeline, block_size)
    pin = resolve_cpu(p.qos.cpu if cpu is None else None if cpu == "none" else cpu,
                      "--cpu" if cpu is not None else p.qos.where_of("cpu") or p.where)
    chain = p.specs(source_format(p))
    choice = choose_backend(p, chain, backend or p.backend)
    spec = chain.input
    period_ns = int(round(spec.block_period * 1e9))
    deadline_ns = max(1, int(round(p.qos.deadline_s(spec.block_period) * 1e9)))
    inputs = input_blocks(p, chain, min(POOL, max(1, blocks)))
    report = CadenceReport(pipeline=p.name, spec=f"{spec.describe()} -> {chain.output.describe()}", backend=choice.name,
                           period_us=period_ns / 1e3, deadline_us=deadline_ns / 1e3, blocks=blocks, warmup=warmup,
                           spin_us=spin_us, prewarm=prewarm and choice.name == "cuda", machine=machine_description(),
                           host=host_facts(), warm_us=warm_us, cpu=pin)
    engine = open_backend(p, chain, choice.name)
    native = choice.name == "cuda"
    opened: list[Any] = [engine]
    try:
        proj = _Impl(CadenceRow("project", f"pygpukit-dsp ({choice.name}), paced", "project"),
                     _project_call(engine, spin_us, prewarm, native, warm_us), traced=engine if native else None)
        b2b = _Impl(CadenceRow("back_to_back", f"pygpukit-dsp ({choice.name}), back to back", "back_to_back"),
                    _project_call(engine, spin_us, prewarm, native), paced=False, traced=engine if native else None)
        impls = [proj, b2b]
        floors: list[CadenceRow] = []
        if native:  # the round trip's floor, paced and back to back, in the same rotation
            from .. import _native

            out = chain.output
            rt = _native.instrument.RoundTripFloor(engine.device, int(chain.input.block_nbytes), int(out.block_nbytes))
            for paced in (True, False):
                row = CadenceRow("floor" if paced else "floor_back_to_back",
                                 f"floor: bare round trip, {'paced' if paced else 'back to back'}", "floor")
                floors.append(row)
                impls.append(_Impl(row, _floor_call(rt, tuple(out.block_shape), out.np_dtype, spin_us, prewarm,
                                                    warm_us), paced=paced))
        checked = [(ImplResult(name="project", kind="project"), engine)]
        for name in compare:
            row = CadenceRow(name, f"{name}, paced", "baseline")
            report.rows.append(row)
            try:
                base = build_baseline(name, p, chain)
            except BaselineSkipped as exc:
                row.status, row.reason, row.reason_code = "skipped", str(exc), exc.code
                continue
            except Exception as exc:  # a baseline that breaks is reported, not fatal
                row.status, row.reason = "failed", f"{type(exc).__name__}: {exc}"
                continue
            opened.append(base)
            res = ImplResult(name=name, kind="baseline")
            checked.append((res, base))
            impls.append(_Impl(row, _baseline_call(base, _waiter(spin_us, warm_us))))
        say(f"cadence: {p.name} every {period_ns / 1e3:.1f} us; checking outputs")
        check_outputs(checked, inputs)
        for res, _ in checked[1:]:
            row = next(r for r in report.rows if r.key == res.name)
            row.max_rel_err = res.max_rel_err
            if res.status != "ok":
                row.status, row.reason = res.status, res.reason
        impls = [m for m in impls if m.row.status == "ok"]
        for m in impls:
            m.arrival = _Arrival() if fresh_input else None
        report.fresh_input = fresh_input
        report.rows[:0] = [proj.row, b2b.row, *floors]
        with pinned(pin):
            for m in impls:  # warm-up: compiles, caches, clocks (back to back)
                for j in range(warmup):
                    m.call(inputs[j % len(inputs)], None)
            steal0, t_rot = steal_ticks(), time.perf_counter()
            _rotate(impls, inputs, blocks, period_ns, say)
            report.steal = steal_summary(steal0, steal_ticks(), time.perf_counter() - t_rot)
            if native:  # what the rotation thread's paced sleeps learned (native/engine/wake.cpp)
                report.host["wake_guard_us"] = round(float(_native.wake_guard_us()), 1)
            report.idle_floor = host_idle_floor(inputs[0], period_ns, min(blocks, IDLE_FLOOR_BLOCKS), spin_us, warm_us)
        for m in impls:
            _finish(m, deadline_ns)
        if settings:
            report.settings = run_settings(p, chain, choice, engine, inputs, blocks=settings_blocks or max(1, blocks // 2),
                                           period_ns=period_ns, deadline_ns=deadline_ns, say=say)
    finally:
        for obj in opened:
            with contextlib.suppress(Exception):
                obj.close()
    report.notes.append(f"misses: blocks over the {deadline_ns / 1e3:.0f} us deadline counted from their release; "
                        "overruns: blocks still running at the next release (that block then waits: its latency "
                        "includes the wait)")
    return report


def run_settings(pipeline: "Pipeline", chain: Any, choice: Any, engine: Any, inputs: list[np.ndarray], *, blocks: int,
                 period_ns: int, deadline_ns: int, say: Callable[[str], None] | None = None) -> list[CadenceRow]:
    """The project paced under each host setting, in one rotation (module doc)."""
    native = choice.name == "cuda"
    period_us = period_ns // 1000
    cpus = sorted(os.sched_getaffinity(0))
    pin_cpu = cpus[-1]
    rows: list[_Impl] = []
    extra_engines: list[Any] = []

    def python_sleep(x: np.ndarray, release: int | None) -> Any:
        if release is not None:
            left = release - time.perf_counter_ns()
            if left > 0:
                time.sleep(left / 1e9)
        return engine.process(x)

    def add(key: str, label: str, call: Callable, setup: Callable | None = None, note: str = "",
            traced: Any = None) -> None:
        rows.append(_Impl(CadenceRow(key, label, "setting", reason=note), call, setup=setup,
                          traced=traced or (engine if native else None)))

    def warm_engine(**options: Any) -> Any:
        """Another engine of the pipeline with CudaEngine ``options``, warmed up, closed at the end."""
        from ..backends.cuda_engine import CudaEngine

        other = CudaEngine(pipeline, chain, choice, **options)
        extra_engines.append(other)
        for j in range(50):
            other.process(inputs[j % len(inputs)])
        return other

    d, w = DEFAULT_SPIN_US, DEFAULT_WARM_US
    default = _project_call(engine, d, native, native, w)
    add("sleep_python", "Python time.sleep to the release, then process()", python_sleep,
        note="what a plain paced loop does")
    add("native_sleep", "native sleep to the release (spin 0)", _project_call(engine, 0, False, native))
    add("spin50", "spin 50 us before the release", _project_call(engine, 50, False, native))
    add("spin200", f"spin {d} us before the release, one native call", _project_call(engine, d, False, native))
    if native:
        add("spin200_prewarm", f"spin {d} us + prewarm, one native call", _project_call(engine, d, True, native))
    add("spin200_warm", f"spin {d} us{' + prewarm' if native else ''}, back in Python {w} us before (default)",
        default, note="the default")
    add("pinned", f"default + caller pinned to CPU {pin_cpu}", default, setup=lambda: pinned(pin_cpu))
    if sched_fifo_allowed():
        add("fifo", "default + SCHED_FIFO (priority 10)", default, setup=fifo)
    else:
        rows.append(_Impl(CadenceRow("fifo", "default + SCHED_FIFO", "setting", status="skipped",
                                     reason="this process may not use SCHED_FIFO (EPERM)"), lambda x, r: None))
    why = mlockall()
    if why is None:
        ctypes.CDLL(None).munlockall()
        add("mlockall", "default + mlockall (current and future pages)", default, setup=locked)
    else:
        rows.append(_Impl(CadenceRow("mlockall", "default + mlockall", "setting", status="skipped",
                                     reason=f"mlockall failed: {why}"), lambda x, r: None))
    add("spin_period", "spin the whole period (one busy core)", _project_call(engine, period_us, native, native, w))
    add("pinned_spin1000", f"spin 1000 us{' + prewarm' if native else ''} + caller pinned to CPU {pin_cpu}",
        _project_call(engine, min(1000, period_us), native, native, w), setup=lambda: pinned(pin_cpu))
    add("pinned_spin_period", f"spin the whole period + caller pinned to CPU {pin_cpu}",
        _project_call(engine, period_us, native, native, w), setup=lambda: pinned(pin_cpu))
    why = wake_latency_limit()
    if why is None:
        def pinned_shallow() -> contextlib.AbstractContextManager:
            stack = contextlib.ExitStack()
            stack.enter_context(pinned(pin_cpu))
            stack.enter_context(shallow_idle(0))
            return stack
        add("pinned_shallow_idle", f"default + caller pinned to CPU {pin_cpu} + {CPU_DMA_LATENCY} 0 (no deep idle)",
            default, setup=pinned_shallow)
    else:
        rows.append(_Impl(CadenceRow("pinned_shallow_idle", f"default + pinned + {CPU_DMA_LATENCY} 0", "setting",
                                     status="skipped", reason=why), lambda x, r: None))
    if native:
        nospin = warm_engine(spin_us=0)
        nospin_call = _project_call(nospin, d, True, True, w)
        paced = PacedEngine(engine)
        held: list[np.ndarray] = []

        def out_call(x: np.ndarray, release: int | None) -> Any:
            if not held:  # the first block makes the array every later one is written into
                held.append(np.empty_like(engine.process(x)))
                return held[0]
            return paced.process(x, release, out=held[0], spin_us=d, prewarm=True, warm_us=w, arrive=_arrive)
        out_call.arrives = True  # type: ignore[attr-defined]
        add("out_array", f"default + caller pinned to CPU {pin_cpu} + out= (the caller's output array: no allocation per block)", out_call,
            setup=lambda: pinned(pin_cpu))
        add("completion_no_spin", "default, completion wait without spin (blocks at once)", nospin_call,
            traced=nospin)
        from .. import _native

        def unguarded(x: np.ndarray, release: int | None) -> Any:
            _native.set_wake_guard_us(0)  # forget what the thread learned: the sleep ends spin_us before
            return default(x, release)
        unguarded.arrives = True  # type: ignore[attr-defined]
        add("no_wake_guard", "default without the wake guard (its learned lateness reset before every block)",
            unguarded, note="a sleep that ends spin_us before the release")
    rows.append(_Impl(CadenceRow("pool_input", "default, each block read from the input pool as it is (written "
                                 f"{POOL} periods earlier: cold)", "setting"), default,
                      traced=engine if native else None))
    try:
        live = [m for m in rows if m.row.status == "ok"]
        for m in live:
            m.arrival = None if m.row.key == "pool_input" else _Arrival()
        _rotate(live, inputs, blocks, period_ns, (lambda s: say("settings " + s)) if say else None)
        for m in live:
            _finish(m, deadline_ns)
    finally:
        for e in extra_engines:
            with contextlib.suppress(Exception):
                e.close()
    return [m.row for m in rows]
