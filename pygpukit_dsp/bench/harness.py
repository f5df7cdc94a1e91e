"""Timing loop and correctness check of ``gk-stream bench`` (the latency bench, W1 back to back;
its report: bench/report.py; the throughput modes: bench/throughput.py)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..errors import ConfigError
from .inputs import first_block_note, first_block_times, input_blocks, machine_description, source_format
from .report import PAIR_BLOCKS, PAIR_SKIP, ROUND_BLOCKS, ROUND_WARM_S, SCHEDULES, BenchReport, ImplResult, percentiles

if TYPE_CHECKING:
    from ..pipeline import Pipeline

CHECK_BLOCKS = 6        # blocks compared against the project's output
CHECK_RTOL = 2e-3       # ||baseline - project|| / ||project||, float32 arithmetic



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

    chain = pipeline.specs(source_format(pipeline))
    choice = choose_backend(pipeline, chain, backend or pipeline.backend)
    # distinct input blocks, cycled; at most ~256 MiB of them (W2 blocks are 128 MiB each)
    pool = max(1, min(pool, blocks, (256 << 20) // max(1, chain.input.block_nbytes)))
    inputs = input_blocks(pipeline, chain, pool)
    spb = int(np.prod(chain.input.block_shape))

    impls: list[tuple[ImplResult, Any]] = []
    trace_figures = None
    project = open_backend(pipeline, chain, choice.name)
    impls.append((ImplResult(name=f"pygpukit-dsp ({choice.name})", kind="project"), project))
    for name in compare:
        try:
            impls.append((ImplResult(name=name, kind="baseline"), build_baseline(name, pipeline, chain)))
        except BaselineSkipped as exc:
            impls.append((ImplResult(name=name, kind="baseline", status="skipped", reason=str(exc),
                                      reason_code=exc.code), None))

    try:
        check_outputs(impls, inputs)
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
            r.latency_us = percentiles(us)
            r.samples_per_s = spb / (r.latency_us["mean"] * 1e-6)
            if r.name in paired_samples:
                r.paired_project_us = percentiles(np.asarray(paired_samples[r.name], dtype=np.float64) / 1e3)
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


def check_outputs(impls: list[tuple[ImplResult, Any]], inputs: list[np.ndarray]) -> None:
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
