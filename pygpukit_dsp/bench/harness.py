"""Timing loop, correctness check and report for ``gk-stream bench``."""

from __future__ import annotations

import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..errors import ConfigError
from ..io.base import StreamFormat

if TYPE_CHECKING:
    from ..pipeline import Pipeline, SpecChain

# Schedules (run_bench(schedule=...)). "paired" (the default) times the project against one
# baseline at a time, in turns of PAIR_BLOCKS blocks each whose first PAIR_SKIP are untimed (the
# stream's caches coming back after the other's turn), so that the two meet the same host
# noise. "rounds" times every implementation in rounds of ROUND_BLOCKS. On the H100 machine the
# host's noise comes in bursts of tens to hundreds of ms that slow every host phase: with
# rounds a burst lands in one implementation's round and not in another's. There, an A/A test
# (the same engine twice) gave p99s of 42 and 98 us in one run and W1's p99 ratio to PyTorch +
# graph came out 0.12x and 1.09x in two runs of one process; in turns of 10 blocks, 0.52x and
# 0.49x (H100, 2026-11-22, 128e9ef; docs/benchmarks.md "Schedules").
SCHEDULES = ("paired", "rounds")
PAIR_BLOCKS = 10        # blocks per turn in a pairing
PAIR_SKIP = 2           # ... of which the first are untimed
ROUND_BLOCKS = 250      # blocks per implementation per round (interleaving against drift)
# Before each implementation's timed round it runs untimed for this long. Two reasons: the
# previous library's thread pools (OpenBLAS spins its workers for ~0.1 s after a call) go idle
# instead of competing for cores with the timed blocks; and the round starts in the steady state
# of a busy stream. An idle host is slow to come back: after 150 ms without blocks, W1's host
# phases (copies, Python, launch) ran 1.3-2x slower for the next 3-7 ms on the H100 machine
# (2026-11-22, 7fb6121; docs/benchmarks.md "The host after idle"); a sleep in place of this
# warm-up put that into every round.
ROUND_WARM_S = 0.15
CHECK_BLOCKS = 6        # blocks compared against the project's output
CHECK_RTOL = 2e-3       # ||baseline - project|| / ||project||, float32 arithmetic


@dataclass
class ImplResult:
    name: str
    kind: str                        # "project" | "baseline"
    status: str = "ok"               # "ok" | "skipped" | "mismatch" | "failed"
    reason: str = ""
    latency_us: dict[str, float] = field(default_factory=dict)  # p50 p99 p999 max mean min
    samples_per_s: float = 0.0
    max_rel_err: float | None = None
    first_block_us: float | None = None
    # schedule "paired", baselines: the project's percentiles in this baseline's pairing (the
    # ratios compare these with the baseline's, blocks timed side by side)
    paired_project_us: dict[str, float] = field(default_factory=dict)
    raw_us: list[float] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("raw_us")
        return d


@dataclass
class BenchReport:
    pipeline: str
    mode: str
    backend: str
    backend_reason: str
    input_spec: str
    output_spec: str
    blocks: int
    warmup: int
    samples_per_block: int
    machine: str
    results: list[ImplResult]
    notes: list[str] = field(default_factory=list)
    first_block: dict[str, float | str] = field(default_factory=dict)  # cuda: cold/warm engine open -> first output
    breakdown: Any = None  # cuda: where the project's block latency went (bench.trace.Breakdown)
    schedule: str = "paired"

    def project(self) -> ImplResult:
        return self.results[0]

    def ratios(self) -> dict[str, dict[str, float]]:
        """project / baseline for p50 and p99 (below 1.0: the project is faster); paired: the
        project's figures from that baseline's pairing."""
        proj = self.project()
        out: dict[str, dict[str, float]] = {}
        if proj.status != "ok" or self.mode != "latency":
            return out
        for r in self.results[1:]:
            if r.status == "ok":
                mine = r.paired_project_us or proj.latency_us
                out[r.name] = {k: mine[k] / r.latency_us[k] for k in ("p50", "p99")
                               if r.latency_us.get(k) and mine.get(k)}
        return out

    def speedups(self) -> dict[str, float]:
        """Throughput modes: project samples/s over baseline samples/s (above 1.0: the project is faster)."""
        proj = self.project()
        return {r.name: proj.samples_per_s / r.samples_per_s for r in self.results[1:]
                if r.status == "ok" and r.samples_per_s > 0 and proj.samples_per_s > 0}

    def markdown(self) -> str:
        if self.mode != "latency":
            return self._markdown_throughput()
        paired = self.schedule == "paired" and len(self.results) > 1
        how = (f"{self.blocks} timed blocks per implementation, paired: the project and one "
               f"baseline at a time, in turns of {PAIR_BLOCKS} blocks (the first {PAIR_SKIP} untimed)" if paired else
               f"{self.blocks} timed blocks, interleaved in rounds of {ROUND_BLOCKS}")
        lines = [
            f"### {self.pipeline}: {self.mode} benchmark, backend={self.backend} ({self.backend_reason})",
            "",
            f"{self.input_spec} -> {self.output_spec}; {how}, after {self.warmup} warm-up; {self.machine}",
            "",
            "| implementation | p50 us | p99 us | p99.9 us | max us | Msamples/s | "
            + ("project paired p50 / p99 us | " if paired else "") + "p50 ratio | p99 ratio | check |",
            "|---|---:|---:|---:|---:|---:|" + ("---:|" if paired else "") + "---:|---:|---|",
        ]
        ratios = self.ratios()
        for r in self.results:
            if r.status in ("skipped", "failed"):
                lines.append(f"| {r.name} | | | | | | " + ("| " if paired else "") + f"| | {r.status}: {r.reason} |")
                continue
            lat = r.latency_us
            rt = ratios.get(r.name, {})
            check = "reference" if r.kind == "project" else (
                f"ok (rel err {r.max_rel_err:.1e})" if r.status == "ok" else f"{r.status}: {r.reason}")
            pp = r.paired_project_us
            pair_cell = "" if not paired else (f"{pp['p50']:.1f} / {pp['p99']:.1f} | " if pp else "| ")
            lines.append(
                f"| {r.name} | {lat['p50']:.1f} | {lat['p99']:.1f} | {lat['p999']:.1f} | {lat['max']:.1f} | "
                f"{r.samples_per_s / 1e6:.2f} | {pair_cell}"
                f"{_ratio(rt.get('p50'))} | {_ratio(rt.get('p99'))} | {check} |")
        lines.append("")
        lines.append("Ratios are project / baseline (below 1.00x: the project is faster)"
                     + ("; each from the blocks the two ran side by side (the project's own row: all "
                        "of its pairings)." if paired else "."))
        lines += self.notes
        if self.breakdown is not None:
            from .trace import markdown as breakdown_markdown

            lines += ["", *breakdown_markdown(f"Where {self.results[0].name}'s time went", self.breakdown)]
        return "\n".join(lines)

    def _markdown_throughput(self) -> str:
        what = ("GPU-resident input, transfers excluded" if self.mode == "resident"
                else "streamed from pinned host memory, every byte over PCIe")
        lines = [
            f"### {self.pipeline}: {self.mode} throughput, backend={self.backend} ({self.backend_reason})",
            "",
            f"{self.input_spec} -> {self.output_spec}; {what}; {self.blocks} timed blocks; {self.machine}",
            "",
            "| implementation | Gsamples/s | per-block p50 us | per-block p99 us | project speedup | check |",
            "|---|---:|---:|---:|---:|---|",
        ]
        speed = self.speedups()
        for r in self.results:
            if r.status != "ok":
                lines.append(f"| {r.name} | | | | | {r.status}: {r.reason} |")
                continue
            p50 = f"{r.latency_us['p50']:.1f}" if "p50" in r.latency_us else ""
            p99 = f"{r.latency_us['p99']:.1f}" if "p99" in r.latency_us else ""
            sp = f"{speed[r.name]:.2f}x" if r.name in speed else ""
            lines.append(f"| {r.name} | {r.samples_per_s / 1e9:.2f} | {p50} | {p99} | {sp} | "
                         f"{'reference' if r.kind == 'project' else 'ok'} |")
        lines += [""] + self.notes
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "results"}
        d["results"] = [r.to_dict() for r in self.results]
        d["ratios"] = self.ratios()
        d["speedups"] = self.speedups()
        return d


def _ratio(v: float | None) -> str:
    return f"{v:.2f}x" if v is not None else ""


def _percentiles(us: np.ndarray) -> dict[str, float]:
    return {
        "p50": float(np.percentile(us, 50)), "p99": float(np.percentile(us, 99)),
        "p999": float(np.percentile(us, 99.9)), "max": float(us.max()), "min": float(us.min()),
        "mean": float(us.mean()),
    }


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        import os

        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        import os

        cores = os.cpu_count() or 0
    text = f"{platform.system()} {cpu}, {cores} cores, Python {sys.version.split()[0]}"
    try:
        from ..capabilities import capabilities

        gpus = [g for g in capabilities().get("gpus", []) if g.get("usable")]
        if gpus:
            text += f", GPU {gpus[0]['name']}"
    except Exception:  # the description is informative only; never fail a benchmark for it
        pass
    return text


def _input_blocks(pipeline: "Pipeline", chain: "SpecChain", n: int) -> list[np.ndarray]:
    """``n`` consecutive full blocks from the pipeline's source (or seeded noise without one)."""
    spec = chain.input
    blocks: list[np.ndarray] = []
    if pipeline.source is not None:
        src = pipeline.source
        src.open(StreamFormat(spec.sample_rate, spec.channels, spec.dtype))
        try:
            while len(blocks) < n:
                parts, have = [], 0
                while have < spec.block_size:
                    chunk = np.asarray(src.read(spec.block_size - have))
                    if chunk.shape[1] == 0:
                        break
                    parts.append(chunk)
                    have += chunk.shape[1]
                if have < spec.block_size:
                    break
                blocks.append(np.ascontiguousarray(np.concatenate(parts, axis=1), spec.np_dtype))
        finally:
            src.close()
    if not blocks:
        rng = np.random.default_rng(1)
        shape = spec.block_shape
        for _ in range(n):
            x = rng.standard_normal(shape)
            if spec.is_complex:
                x = x + 1j * rng.standard_normal(shape)
            blocks.append(np.ascontiguousarray(x, spec.np_dtype))
    return blocks


def run_bench(pipeline: "Pipeline", *, backend: str | None = None, blocks: int = 2000,
              warmup: int = 200, compare: list[str] | None = None, plot: str | None = None,
              progress: bool = False, mode: str = "latency", pool: int = 32,
              schedule: str = "paired") -> BenchReport:
    from ..backends import choose_backend, open_backend
    from .baselines import BASELINES, BaselineSkipped, build_baseline

    if schedule not in SCHEDULES:
        raise ConfigError(f"unknown schedule '{schedule}'", hint=f"schedules: {', '.join(SCHEDULES)}")
    compare = compare or []
    unknown = [c for c in compare if c not in BASELINES]
    if unknown:
        from ..stages.base import did_you_mean

        raise ConfigError(f"unknown baseline '{unknown[0]}'",
                          hint=did_you_mean(unknown[0], sorted(BASELINES)) or
                          f"baselines: {', '.join(sorted(BASELINES))}")
    if plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ConfigError("--plot needs matplotlib", hint="pip install 'pygpukit-dsp[plot]'") from None
    if mode != "latency":
        from .throughput import run_throughput_bench

        return run_throughput_bench(pipeline, backend=backend, blocks=blocks, warmup=warmup,
                                    compare=compare, mode=mode, progress=progress)

    chain = pipeline.specs(_source_format(pipeline))
    choice = choose_backend(pipeline, chain, backend or pipeline.backend)
    # distinct input blocks, cycled; at most ~256 MiB of them (W2 blocks are 128 MiB each)
    pool = max(1, min(pool, blocks, (256 << 20) // max(1, chain.input.block_nbytes)))
    inputs = _input_blocks(pipeline, chain, pool)
    spb = int(np.prod(chain.input.block_shape))

    impls: list[tuple[ImplResult, Any]] = []
    trace_figures = None
    project = open_backend(pipeline, chain, choice.name)
    impls.append((ImplResult(name=f"pygpukit-dsp ({choice.name})", kind="project"), project))
    for name in compare:
        try:
            impls.append((ImplResult(name=name, kind="baseline"), build_baseline(name, pipeline, chain)))
        except BaselineSkipped as exc:
            impls.append((ImplResult(name=name, kind="baseline", status="skipped", reason=str(exc)), None))

    try:
        _check_outputs(impls, inputs)
        runnable = [(r, impl) for r, impl in impls if r.status == "ok"]
        for r, impl in runnable:  # warm-up (compiles, caches, clocks)
            t0 = time.perf_counter_ns()
            impl.process(inputs[0])
            r.first_block_us = (time.perf_counter_ns() - t0) / 1e3
            for i in range(warmup):
                impl.process(inputs[i % len(inputs)])
        samples: dict[str, list[int]] = {r.name: [] for r, _ in runnable}
        # the project's timed calls, traced natively: one (start, end) per call
        traced = project if impls[0][0].status == "ok" and hasattr(project, "set_trace") else None
        calls: list[tuple[int, int]] = []
        traces: list[dict[str, np.ndarray]] = []
        t_report = time.perf_counter()

        named = [(r.name, impl) for r, impl in runnable]
        paired_runs = schedule == "paired" and len(runnable) > 1 and runnable[0][0].kind == "project"
        total = blocks * (len(runnable) - 1 if paired_runs else 1)

        def report_progress(done: int) -> None:
            nonlocal t_report
            if progress and time.perf_counter() - t_report > 0.5:
                t_report = time.perf_counter()
                sys.stderr.write(f"\rbench {pipeline.name}: {done}/{total} blocks")
                sys.stderr.flush()

        paired_samples: dict[str, list[int]] = {}
        if paired_runs:
            _timed_pairs(named[0], named[1:], inputs, blocks, samples, paired_samples,
                         traced=traced, calls=calls, traces=traces, on_progress=report_progress)
        else:
            _timed_rounds(named, inputs, blocks, samples,
                          traced=traced, calls=calls, traces=traces, on_round=report_progress)
        if progress:
            sys.stderr.write("\r" + " " * 60 + "\r")
        for r, _ in runnable:
            us = np.asarray(samples[r.name], dtype=np.float64) / 1e3
            r.raw_us = us.tolist()
            r.latency_us = _percentiles(us)
            r.samples_per_s = spb / (r.latency_us["mean"] * 1e-6)
            if r.name in paired_samples:
                r.paired_project_us = _percentiles(np.asarray(paired_samples[r.name], dtype=np.float64) / 1e3)
        if traced is not None:
            from .trace import breakdown

            st = np.asarray(calls, dtype=np.int64)
            rows = {k: np.concatenate([t[k] for t in traces]) for k in traces[0]}
            trace_figures = breakdown(rows, st[:, 0], st[:, 1])
    finally:
        for _, impl in impls:
            if impl is not None:
                impl.close()

    notes: list[str] = []
    first: dict[str, float] = {}
    if choice.name == "cuda":
        first = first_block_times(pipeline, chain, inputs[0])
        notes.append(first_block_note(first))
    report = BenchReport(
        pipeline=pipeline.name, mode="latency", backend=choice.name, backend_reason=choice.reason,
        input_spec=chain.input.describe(), output_spec=chain.output.describe(), blocks=blocks,
        warmup=warmup, samples_per_block=spb, machine=machine_description(),
        results=[r for r, _ in impls], notes=notes, first_block=first,
        breakdown=trace_figures, schedule=schedule)
    if plot:
        from .plot import plot_latency

        plot_latency(report, plot)
    return report


def first_block_times(pipeline: "Pipeline", chain: "SpecChain", block: np.ndarray) -> dict[str, float]:
    """Milliseconds from opening the cuda engine to the first block's output, cold and warm, in
    this process (its CUDA context and libraries already loaded; benchmarks/first_block.py measures
    fresh processes).

    cold: an empty kernel disk cache (a fresh GK_CACHE_DIR, in-memory cache cleared): the kernels
    compiled into the wheel are loaded (NVRTC compiles only what the wheel does not ship, or
    everything with GK_SHIPPED_KERNELS=0). warm: the same again on the disk cache the cold open
    left. Both include the engine's buffers, warm-up block and graph capture; cuFFT plans and
    cuBLAS handles are made once per shape, so the warm open reuses the cold one's.
    ``kernels_cold``: "<n> shipped, <m> NVRTC" for the cold open.
    """
    import os
    import tempfile

    from .. import _native
    from ..backends import open_backend

    out: dict[str, float] = {}
    old = os.environ.get("GK_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="gk-cold-cache-") as cache:
        os.environ["GK_CACHE_DIR"] = cache
        try:
            for label in ("cold", "warm"):
                _native.clear_jit_memory_cache()
                before = dict(_native.jit_stats())
                t0 = time.perf_counter()
                engine = open_backend(pipeline, chain, "cuda")
                try:
                    engine.process(block)
                    out[f"first_block_{label}_ms"] = (time.perf_counter() - t0) * 1e3
                finally:
                    engine.close()
                if label == "cold":
                    after = dict(_native.jit_stats())
                    out["kernels_cold"] = (f"{after.get('shipped_hits', 0) - before.get('shipped_hits', 0)} shipped, "
                                           f"{after['compiles'] - before['compiles']} NVRTC")
        finally:
            if old is None:
                os.environ.pop("GK_CACHE_DIR", None)
            else:
                os.environ["GK_CACHE_DIR"] = old
    return out


def first_block_note(times: dict) -> str:
    kernels = f"; kernels {times['kernels_cold']}" if "kernels_cold" in times else ""
    return (f"first block from engine open: cold (empty kernel cache) {times['first_block_cold_ms']:.0f} ms, "
            f"warm (disk cache) {times['first_block_warm_ms']:.0f} ms{kernels}")


def _source_format(pipeline: "Pipeline") -> StreamFormat:
    if pipeline.source is None:
        return StreamFormat()
    fmt = pipeline.source.open(StreamFormat(pipeline.sample_rate, pipeline.channels, pipeline.dtype))
    pipeline.source.close()
    return fmt


def _timed_rounds(runnable: list[tuple[str, Any]], inputs: list[np.ndarray], blocks: int,
                  samples: dict[str, list[int]], *, traced: Any = None,
                  calls: list[tuple[int, int]] | None = None,
                  traces: list[dict[str, np.ndarray]] | None = None,
                  on_round: Callable[[int], None] | None = None, warm_s: float | None = None) -> None:
    """Time ``blocks`` blocks of every implementation, interleaved in rounds of ROUND_BLOCKS.

    With more than one implementation, each runs untimed for ``warm_s`` (ROUND_WARM_S) before
    each of its rounds. ``traced`` (the project's engine) is traced during its timed blocks
    only: ``calls`` gets their (start, end) stamps and ``traces`` each round's block trace.
    """
    warm_s = ROUND_WARM_S if warm_s is None else warm_s
    done = 0
    while done < blocks:
        n = min(ROUND_BLOCKS, blocks - done)
        for name, impl in runnable:
            if len(runnable) > 1:
                if impl is traced:
                    traced.set_trace(0)
                _run_untimed(impl.process, inputs, done, warm_s)
            if impl is traced:
                traced.set_trace(n)
            _time_blocks(impl.process, inputs, done, n, samples[name],
                         calls if impl is traced else None)
            if impl is traced and traces is not None:
                traces.append(traced.block_trace())
        done += n
        if on_round is not None:
            on_round(done)
    if traced is not None:
        traced.set_trace(0)


def _timed_pairs(project: tuple[str, Any], baselines: list[tuple[str, Any]], inputs: list[np.ndarray],
                 blocks: int, samples: dict[str, list[int]], paired: dict[str, list[int]], *,
                 traced: Any = None, calls: list[tuple[int, int]] | None = None,
                 traces: list[dict[str, np.ndarray]] | None = None,
                 on_progress: Callable[[int], None] | None = None, warm_s: float | None = None,
                 turn: int = PAIR_BLOCKS, skip: int = PAIR_SKIP) -> None:
    """Time the project against each baseline in turn: after ``warm_s`` (ROUND_WARM_S) of the two
    alternating untimed, they take turns of ``turn`` blocks (the project first), the first
    ``skip`` of each turn untimed, until each has ``blocks`` timed blocks. ``samples`` gets
    every implementation's times (the project's over all pairings), ``paired[baseline]`` the
    project's times of that pairing. ``traced`` (the project's engine) is traced during its
    timed blocks only: ``calls`` gets their (start, end) stamps, ``traces`` one trace per turn."""
    if not 0 <= skip < turn:
        raise ValueError(f"a turn of {turn} blocks cannot leave {skip} untimed")
    warm_s = ROUND_WARM_S if warm_s is None else warm_s
    pname, proj = project
    k = len(inputs)
    done = 0
    for bname, base in baselines:
        if traced is not None:
            traced.set_trace(0)
        end = time.perf_counter() + warm_s
        i = 0
        while True:
            proj.process(inputs[i % k])
            base.process(inputs[i % k])
            i += 1
            if time.perf_counter() >= end:
                break
        mine, theirs = paired.setdefault(bname, []), samples[bname]
        start = len(mine)
        while len(mine) - start < blocks:
            n = min(turn - skip, blocks - (len(mine) - start))
            for fn, out, is_proj in ((proj.process, mine, True), (base.process, theirs, False)):
                for j in range(skip):  # untimed: the turn's first blocks
                    fn(inputs[(i + j) % k])
                traced_turn = is_proj and traced is not None
                if traced_turn:
                    traced.set_trace(n)
                _time_blocks(fn, inputs, i + skip, n, out, calls if traced_turn else None)
                if traced_turn:
                    if traces is not None:
                        traces.append(traced.block_trace())
                    traced.set_trace(0)
            i += turn
            if on_progress is not None and (len(mine) - start) % (25 * (turn - skip)) < n:
                on_progress(done + len(mine) - start)
        samples[pname].extend(mine[start:])
        done += blocks
    if traced is not None:
        traced.set_trace(0)


def _run_untimed(fn: Callable[[np.ndarray], Any], inputs: list[np.ndarray], start: int,
                 seconds: float) -> int:
    """At least one block, then blocks until ``seconds`` have passed; returns how many ran."""
    k = len(inputs)
    end = time.perf_counter() + seconds
    i = start
    while True:
        fn(inputs[i % k])
        i += 1
        if time.perf_counter() >= end:
            return i - start


def _time_blocks(fn: Callable[[np.ndarray], Any], inputs: list[np.ndarray], start: int, n: int,
                 out: list[int], stamps: list[tuple[int, int]] | None = None) -> None:
    perf = time.perf_counter_ns
    k = len(inputs)
    for i in range(start, start + n):
        x = inputs[i % k]
        t0 = perf()
        fn(x)
        t1 = perf()
        out.append(t1 - t0)
        if stamps is not None:
            stamps.append((t0, t1))


def _check_outputs(impls: list[tuple[ImplResult, Any]], inputs: list[np.ndarray]) -> None:
    """Run CHECK_BLOCKS blocks from reset through each implementation and compare with the project."""
    n = min(CHECK_BLOCKS, len(inputs))
    ref_r, ref = impls[0]
    ref.reset()
    ref_out = [np.array(ref.process(inputs[i]), copy=True) for i in range(n)]
    ref.reset()
    for r, impl in impls[1:]:
        if r.status != "ok":
            continue
        try:
            impl.reset()
            err = 0.0
            for i in range(n):
                y = np.asarray(impl.process(inputs[i]))
                if y.shape != ref_out[i].shape:
                    raise ValueError(f"output shape {y.shape} != project's {ref_out[i].shape}")
                denom = float(np.linalg.norm(ref_out[i])) or 1.0
                err = max(err, float(np.linalg.norm(y - ref_out[i])) / denom)
            impl.reset()
        except Exception as exc:  # a baseline that breaks is reported, not fatal
            r.status, r.reason = "failed", f"{type(exc).__name__}: {exc}"
            continue
        r.max_rel_err = err
        if not err <= CHECK_RTOL:
            r.status, r.reason = "mismatch", f"relative error {err:.2e} > {CHECK_RTOL:.0e}"
