"""The capacity sweep: up the ladder coarse, then the confirmations (:func:`ladder_runs`), for
pygpukit-dsp, its streams released all at once, the floor and PyTorch (:func:`run_capacity`);
:func:`plot_capacity` draws p99 against N."""

from __future__ import annotations

import copy
import os
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from pygpukit_dsp.backends.cuda_dispatch import DEFAULT_TIME_EVERY

from .predict import predict, session_prediction
from .report import CapacityPoint, CapacityReport, process_misses
from .settings import (ALIGNED, COARSE_S, CONFIRM_S, CONFIRM_TRIES, DEADLINES_MS, DECLARED_COST_NS, FLOOR,
                       FLOOR_ALIGNED, POOL, PROJECT_LADDER, SESSION_ALIGNED, STOP_AFTER_MISSING, TORCH_LADDER,
                       WARMUP_S)
from .streams import FloorStreams, ProjectStreams, TorchStreams, floor_plan

if TYPE_CHECKING:
    from pygpukit_dsp.pipeline import Pipeline


def ladder_runs(run_one: Callable[[int, float, str], CapacityPoint], ladder: tuple[int, ...] | list[int],
                 coarse_s: float, confirm_s: float, deadlines_ms: tuple[float, ...] | list[float],
                 points: list[CapacityPoint], say: Callable[[str], None], impl: str,
                 until: float | None = None, overhead_s: float = 1.0, stop_after: int = STOP_AFTER_MISSING,
                 confirm_tries: int = CONFIRM_TRIES, period_ms: float | None = None) -> None:
    """Coarse sweep up the ladder, then the confirmation runs (module doc). ``until``
    (perf_counter): runs that would end after it are left out (noted as skipped points).
    ``period_ms`` (default the first deadline): the deadline where every miss counts; at any other
    a run holds when the process is blamed for none of its misses (held_at)."""
    every = deadlines_ms[0] if period_ms is None else period_ms
    def fits(seconds: float) -> bool:
        return until is None or time.perf_counter() + seconds + overhead_s <= until

    coarse: list[CapacityPoint] = []
    missing = 0
    for n in ladder:
        if not fits(coarse_s):
            points.append(CapacityPoint(impl, n, coarse_s, "coarse", status="skipped", reason="time budget"))
            break
        pt = run_one(n, coarse_s, "coarse")
        points.append(pt)
        coarse.append(pt)
        say(f"capacity: {impl} N={n}: p99 {pt.p99_us:.1f} us, misses {pt.misses}, late {pt.late} "
            f"({pt.status}{': ' + pt.reason if pt.reason else ''})")
        if pt.status != "ok" or not held_at(pt, deadlines_ms[0], deadlines_ms[0] == every):
            missing += 1
            if missing >= stop_after or pt.status != "ok":
                break
        else:
            missing = 0
    if confirm_s <= 0:
        return
    confirmed: dict[int, CapacityPoint] = {}
    for d in deadlines_ms:
        # the period counts every miss (the target's rule); a shorter deadline also takes a run
        # whose misses all came in the host's episodes (held_at): there a host stall of a few ms
        # misses at any N, and stepping down would only find where the stalls happened to miss
        first = d == every
        good = [p.n for p in coarse if held_at(p, d, first)]
        candidates = sorted(good, reverse=True)[:confirm_tries]  # the knee, then steps down while they miss
        for n in candidates:
            pt = confirmed.get(n)
            if pt is None:
                if not fits(confirm_s):  # and no later one would: time only runs out
                    points.append(CapacityPoint(impl, n, confirm_s, "confirm", status="skipped", reason="time budget"))
                    return
                pt = run_one(n, confirm_s, "confirm")
                points.append(pt)
                confirmed[n] = pt
                say(f"capacity: {impl} N={n} confirm {confirm_s:g} s: p99 {pt.p99_us:.1f} us, misses {pt.misses}")
            if held_at(pt, d, first):
                break


def held_at(p: CapacityPoint, deadline_ms: float, first: bool) -> bool:
    """Whether a run held at a deadline for the ladder: no miss, or (``first`` False: not the
    period) none that its episodes blame on the process."""
    if p.zero_misses(deadline_ms):
        return True
    return not first and p.status == "ok" and p.blocks > 0 and process_misses(p, deadline_ms) == 0


# ----------------------------------------------------------------------------- the run


def w1_shaped(pipeline: "Pipeline") -> "Pipeline":
    """The pipeline as a realtime stream (deadline: one block period), on GPU 0."""
    p = copy.copy(pipeline)
    p.qos = p.qos.model_copy(update={"class_": "realtime", "deadline_ms": None})
    p.device = None
    return p


def run_capacity(pipeline: "Pipeline", *, ladder: tuple[int, ...] | list[int] = PROJECT_LADDER,
                 torch_ladder: tuple[int, ...] | list[int] = TORCH_LADDER, coarse_s: float = COARSE_S,
                 confirm_s: float = CONFIRM_S, warmup_s: float = WARMUP_S,
                 deadlines_ms: tuple[float, ...] | list[float] = DEADLINES_MS, threads: int | None = None,
                 spin_us: int = 100, dispatcher_spin_us: int = 200, baseline: bool = True, floor: bool = True,
                 aligned: bool = True, engine_kwargs: dict[str, Any] | None = None, budget_s: float | None = None,
                 time_every: int | None = None, progress: Callable[[str], None] | None = None,
                 calibration: Any = None) -> CapacityReport:
    """The capacity sweep (module doc) of ``pipeline`` (W1); with ``floor``, the floor's runs
    (:func:`floor_plan`); with ``aligned``, the project's streams again with every phase 0 (all
    released at once) up the ladder to the first N at which the process is blamed for misses at the
    shortest deadline, where admission's response bound is judged (:data:`ALIGNED`); with
    ``baseline``, PyTorch + graph. ``time_every``: the dispatcher's (CudaDispatch; None: its
    default). ``calibration``: the GPU's figures admission's prediction uses (None: this GPU's own,
    measured or cached as a Session's admission reads them; the reference figures on a fake driver)."""
    from pygpukit_dsp.errors import ConfigError
    from pygpukit_dsp.bench.inputs import input_blocks, machine_description, source_format

    if not ladder:
        raise ConfigError("the capacity ladder is empty")
    t_begin = time.perf_counter()
    # the budget: pygpukit-dsp gets up to its share, the floor's runs up to theirs after it,
    # PyTorch the rest (each skips the runs that would not fit)
    until_all = None if budget_s is None else t_begin + budget_s
    until_proj = None if budget_s is None else t_begin + budget_s * (0.5 if baseline else 0.75 if floor else 0.85)
    until_aligned = None if budget_s is None else t_begin + budget_s * (0.62 if baseline else 0.85)
    until_floor = None if budget_s is None else t_begin + budget_s * (0.72 if baseline else 1.0)
    if sorted(ladder) != list(ladder) or sorted(torch_ladder) != list(torch_ladder):
        raise ConfigError("the capacity ladders must increase")
    say = progress or (lambda _line: None)
    p = w1_shaped(pipeline)
    chain = p.specs(source_format(p))
    inputs = input_blocks(p, chain, POOL)
    period_ns = int(round(chain.input.block_period * 1e9))
    if threads is None:
        threads = max(1, min(4, len(os.sched_getaffinity(0)) // 4))
    report = CapacityReport(
        pipeline=p.name, spec=f"{chain.input.describe()} -> {chain.output.describe()}", period_us=period_ns / 1e3,
        deadlines_ms=list(deadlines_ms), machine=machine_description(),
        settings={"ladder": list(ladder), "torch_ladder": list(torch_ladder), "coarse_s": coarse_s,
                  "confirm_s": confirm_s, "warmup_s": warmup_s, "driver_threads": threads, "spin_us": spin_us,
                  "dispatcher_spin_us": dispatcher_spin_us, "declared_cost_ns": DECLARED_COST_NS,
                  "budget_s": budget_s, "time_every": time_every or DEFAULT_TIME_EVERY})
    proj = ProjectStreams(p, inputs, threads=threads, spin_us=spin_us, dispatcher_spin_us=dispatcher_spin_us,
                           engine_kwargs=engine_kwargs, time_every=time_every)
    try:
        cost = proj.session_cost()
        report.settings["session_cost"] = asdict(cost)
        if calibration is None and not engine_kwargs:  # a real GPU: its own figures, as a Session admits
            from pygpukit_dsp.admission import calibration_for

            calibration = calibration_for(proj.device)
        proj.calibration = calibration
        report.settings["calibration"] = calibration.to_dict() if calibration is not None else None
        if calibration is not None:
            say(f"capacity: this GPU's calibration: dispatcher work {calibration.dispatch_ns / 1e3:.1f} us per block, "
                f"lock hold {calibration.hold_ns / 1e3:.0f} us (windows: "
                f"{', '.join(f'{h / 1e3:.0f}' for h in calibration.hold_windows_ns)} us), overlap {calibration.overlap}")
        report.predictions.append(session_prediction(cost, period_ns, deadlines_ms,
                                                     lambda n, d: proj.rehearsed_ns(n, deadline_ns=d),
                                                     n_max=max(ladder), say=say, phased=True, tail=proj.tail,
                                                     calibration=calibration))
        report.predictions[-1].dispatch_us = proj.dispatch_us(aligned=False)
        report.predictions[-1].overlap = proj.overlap(aligned=False)
        say(f"capacity: admission with the Session's calibration ({cost.describe()}), the streams' phases "
            f"declared, admits {report.predictions[-1].streams}")
        if aligned:
            report.predictions.append(session_prediction(
                cost, period_ns, deadlines_ms, lambda n, d: proj.rehearsed_ns(n, aligned=True, deadline_ns=d),
                n_max=max(ladder), say=say, phased=False, how=SESSION_ALIGNED,
                tail=lambda n: proj.tail(n, aligned=True), calibration=calibration))
            report.predictions[-1].dispatch_us = proj.dispatch_us(aligned=True)
            report.predictions[-1].overlap = proj.overlap(aligned=True)
            say(f"capacity: admission with no phase declared (every block may come at once) admits "
                f"{report.predictions[-1].streams}")
        ladder_runs(lambda n, s, ph: proj.run(n, s, ph, warmup_s, deadlines_ms), ladder, coarse_s, confirm_s,
                     deadlines_ms, report.points, say, "pygpukit-dsp", until=until_proj, overhead_s=warmup_s + 1)
        gpu_costs = [pt.extra.get("measured_gpu_cost_ns") for pt in report.points
                     if pt.impl == "pygpukit-dsp" and pt.extra.get("measured_gpu_cost_ns")]
        if gpu_costs:
            report.predictions.append(predict(int(np.median(gpu_costs)), period_ns, deadlines_ms, "gpu",
                                              latency_ns=cost.latency_ns, phased=True))
        if aligned:
            short = [min(deadlines_ms)]
            top = max((p.n for p in report.points if p.impl == "pygpukit-dsp" and p.status == "ok"), default=0)
            ladder_a = [n for n in ladder if n <= top]
            ladder_runs(lambda n, s, ph: proj.run(n, s, ph, warmup_s, deadlines_ms, aligned=True), ladder_a,
                         coarse_s, confirm_s, short, report.points, say, ALIGNED, until=until_aligned,
                         overhead_s=warmup_s + 1, stop_after=1, confirm_tries=1, period_ms=deadlines_ms[0])
    finally:
        proj.close()
    if floor:
        floors = FloorStreams(chain, inputs, threads=threads, spin_us=spin_us)
        try:
            for n, phase in floor_plan(report.points, deadlines_ms[0]):
                secs = coarse_s if phase == "coarse" else confirm_s
                if secs <= 0:
                    continue
                if until_floor is not None and time.perf_counter() + secs + warmup_s + 1 > until_floor:
                    report.points.append(CapacityPoint(FLOOR, n, secs, phase, status="skipped", reason="time budget"))
                    continue
                pt = floors.run(n, secs, phase, warmup_s, deadlines_ms)
                report.points.append(pt)
                say(f"capacity: floor N={n} {phase} {secs:g} s: p99 {pt.p99_us:.1f} us, misses {pt.misses}")
            # the floor released all at once at the N the aligned runs ran: what a burst costs
            # with no pipeline and no scheduler, beside the project's aligned runs
            for n in sorted({p.n for p in report.points if p.impl == ALIGNED and p.phase == "coarse"
                             and p.status == "ok" and p.blocks > 0}):
                if coarse_s <= 0:
                    break
                if until_floor is not None and time.perf_counter() + coarse_s + warmup_s + 1 > until_floor:
                    report.points.append(CapacityPoint(FLOOR_ALIGNED, n, coarse_s, "coarse", status="skipped",
                                                       reason="time budget"))
                    continue
                pt = floors.run(n, coarse_s, "coarse", warmup_s, deadlines_ms, aligned=True)
                report.points.append(pt)
                say(f"capacity: floor, aligned N={n}: p50 {pt.p50_us:.1f} us, p99.9 {pt.p999_us:.1f} us, "
                    f"misses {pt.misses}")
        finally:
            floors.close()
    if baseline:
        try:
            torch_streams = TorchStreams(p, inputs)
        except Exception as exc:  # no torch / no GPU for it: reported, not fatal
            report.points.append(CapacityPoint("torch-graph", 0, 0.0, "coarse", status="skipped",
                                               reason=f"{type(exc).__name__}: {exc}"))
        else:
            try:
                ladder_runs(lambda n, s, ph: torch_streams.run(n, s, ph, warmup_s, deadlines_ms), torch_ladder,
                             coarse_s, confirm_s, deadlines_ms, report.points, say, "torch-graph",
                             until=until_all, overhead_s=warmup_s + 1)
            finally:
                torch_streams.close()
    report.notes.append(f"pygpukit-dsp: {threads} native driver thread(s) release the blocks (sleep until "
                        f"{spin_us} us before a release, then spin; poll blocks in flight); the dispatcher spins "
                        f"{dispatcher_spin_us} us after its last activity and times one block in "
                        f"{report.settings['time_every']} with CUDA events (after each stream's first 16); "
                        f"streams declared at "
                        f"{DECLARED_COST_NS / 1e3:g} us per block so that admission does not stop the sweep")
    return report


def plot_capacity(report: CapacityReport, path: str) -> None:
    """p99 latency against N for both implementations (and the floor's runs), the deadlines as
    horizontal lines (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for impl, marker in (("pygpukit-dsp", "o"), ("torch-graph", "s"), (FLOOR, "^"), (ALIGNED, "D"),
                         (FLOOR_ALIGNED, "v")):
        for phase, style in (("coarse", "-" if impl not in (FLOOR, FLOOR_ALIGNED) else ""), ("confirm", "")):
            pts = sorted((p.n, p.p99_us) for p in report.points
                         if p.impl == impl and p.phase == phase and p.status == "ok" and p.blocks)
            if not pts:
                continue
            xs, ys = zip(*pts)
            label = f"{impl} ({phase}{' ' + str(report.settings.get('confirm_s')) + ' s' if phase == 'confirm' else ''})"
            ax.plot(xs, ys, style, marker=marker, fillstyle="none" if phase == "confirm" else "full",
                    markersize=8 if phase == "confirm" else 5, label=label)
    for d in report.deadlines_ms:
        ax.axhline(d * 1e3, color="grey", linestyle=":", linewidth=1)
        ax.text(ax.get_xlim()[0], d * 1e3, f" {d:.2f} ms deadline", fontsize=7, va="bottom", color="grey")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("concurrent realtime streams N")
    ax.set_ylabel("p99 latency from release (us)")
    ax.set_title(f"{report.pipeline}: {report.spec}\n{report.machine}", fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
