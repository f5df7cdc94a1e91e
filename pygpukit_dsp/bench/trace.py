"""Where a block's latency went: the phases of :meth:`CudaEngine.block_trace` records.

The engine stamps each traced ``process()`` call natively (CLOCK_MONOTONIC ns, the clock of
``time.perf_counter_ns``); the caller adds its own stamps just before and after the call, so
the Python on either side is a phase too:

====================  =========================================================================
python in             the caller's stamp -> the native call (argument checks, GIL release)
fill                  the copy of the block into its pinned input slot
hand-over             -> the first chunk starts being queued (a dispatcher: posting, its pick-up,
                      the scheduler's decision; inline: the idle check)
launch                queueing the block (graph launch or kernels)
GPU + seen            -> its completion is observed (queueing behind other work on the GPU, the
                      block itself, the poll that sees it)
wake                  -> the calling thread has it back (a dispatcher's hand-back)
copy out              -> the output is copied out of the pinned slot (into a recycled buffer or
                      the caller's ``out``)
python out            -> the caller's stamp (GIL re-acquired, the array made and returned)
====================  =========================================================================

With overlap_fill (mapped I/O, inline process of a full block) the block is queued before it
is copied in: then hand-over runs from the native call to the launch, fill from the end of the
launch to the end of the copy (the copy overlaps the launch's way to the GPU), and GPU + seen
from the end of the copy. The phases add up to the caller's latency either way.

For every phase: p50 and p99 over the blocks, and its mean over the slowest 1% of blocks (by
total latency), which says which phase the tail comes from. Given a deadline, every block over
it is listed with its phases and the largest one named (:class:`OverBlock`): a miss is counted
and also says whether the host or the GPU part took the time.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

PHASES: tuple[tuple[str, str, str], ...] = (
    ("python in", "py_start", "call"),
    ("fill", "call", "filled"),
    ("hand-over", "filled", "launch_begin"),
    ("launch", "launch_begin", "launched"),
    ("GPU + seen", "launched", "done_seen"),
    ("wake", "done_seen", "woke"),
    ("copy out", "woke", "copied"),
    ("python out", "copied", "py_end"),
)
TAIL_FRACTION = 0.01
MAX_OVER_LISTED = 10  # blocks over the deadline listed one by one in markdown()


@dataclass
class PhaseFigures:
    name: str
    p50_us: float
    p99_us: float
    tail_mean_us: float   # mean over the slowest TAIL_FRACTION of blocks (by total latency)


@dataclass
class OverBlock:
    """One block over the deadline: where its time went."""
    index: int                   # among the blocks of the breakdown, in call order
    total_us: float
    phases_us: dict[str, float]  # every phase of PHASES
    largest: str                 # the phase that took the most
    gpu_us: float | None         # device time (events), if recorded


@dataclass
class Breakdown:
    blocks: int
    tail_blocks: int
    phases: list[PhaseFigures]
    total: PhaseFigures
    gpu: PhaseFigures | None   # device time of the block (scheduled blocks' events), if recorded
    deadline_us: float | None = None
    over: list[OverBlock] = field(default_factory=list)  # every block over deadline_us
    gpu_blocks: int = 0        # the blocks with device time (a dispatcher times a sample of them)

    def over_by_phase(self) -> dict[str, int]:
        """The blocks over the deadline counted by their largest phase."""
        return dict(sorted(Counter(o.largest for o in self.over).items()))

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def breakdown(trace: Mapping[str, np.ndarray], py_start: np.ndarray, py_end: np.ndarray,
              keep: np.ndarray | None = None, deadline_ns: int | None = None) -> Breakdown:
    """Phases of the last ``len(py_start)`` trace records, matched in order with the caller's
    stamps; ``keep`` (a bool per call) leaves out the calls that were not timed; with
    ``deadline_ns``, every block whose total exceeds it is listed in ``over``."""
    n = len(py_start)
    if len(py_end) != n:
        raise ValueError(f"py_start has {n} stamps and py_end {len(py_end)}")
    have = len(trace["call"])
    if n == 0 or have < n:
        raise ValueError(f"the trace holds {have} records, {n} needed (set_trace(capacity) with capacity >= {n})")
    cols = {k: np.asarray(v[-n:], dtype=np.int64) for k, v in trace.items()}
    cols["py_start"] = np.asarray(py_start, dtype=np.int64)
    cols["py_end"] = np.asarray(py_end, dtype=np.int64)
    if "copied" not in cols:  # a trace of a build before the copy-out stamp
        cols["copied"] = cols["woke"]
    bad = ~((cols["py_start"] <= cols["call"]) & (cols["woke"] <= cols["copied"]) & (cols["copied"] <= cols["py_end"]))
    if bad.any():
        raise ValueError(f"{int(bad.sum())} trace records do not fall inside their calls: "
                         "the trace and the stamps are not of the same blocks")
    if keep is not None:
        keep = np.asarray(keep, dtype=bool)
        if len(keep) != n or not keep.any():
            raise ValueError("keep must hold one bool per call, at least one True")
        cols = {k: v[keep] for k, v in cols.items()}
        n = int(keep.sum())
    total = cols["py_end"] - cols["py_start"]
    k = max(1, int(round(n * TAIL_FRACTION)))
    tail = np.argsort(total)[-k:]

    def figures(name: str, ns: np.ndarray) -> PhaseFigures:
        us = ns.astype(np.float64) / 1e3
        p50, p99 = np.percentile(us, [50, 99])
        return PhaseFigures(name, float(p50), float(p99), float(us[tail].mean()))

    spans = {name: cols[b] - cols[a] for name, a, b in PHASES}
    late = cols["filled"] > cols["launch_begin"]  # overlap_fill: copied in after the launch
    if late.any():
        spans["hand-over"] = np.where(late, cols["launch_begin"] - cols["call"], spans["hand-over"])
        spans["fill"] = np.where(late, cols["filled"] - cols["launched"], spans["fill"])
        spans["GPU + seen"] = np.where(late, cols["done_seen"] - cols["filled"], spans["GPU + seen"])
    phases = [figures(name, spans[name]) for name, _, _ in PHASES]
    # A dispatcher times a sample of its blocks (CudaDispatch.time_every): 0 marks the others.
    timed = cols["gpu_ns"] > 0
    gpu = None
    if timed.any():
        us = cols["gpu_ns"][timed].astype(np.float64) / 1e3
        in_tail = np.zeros(n, dtype=bool)
        in_tail[tail] = True
        tail_us = cols["gpu_ns"][timed & in_tail].astype(np.float64) / 1e3
        name = "GPU time (events)" if timed.all() else f"GPU time (events; {int(timed.sum())} blocks timed)"
        p50, p99 = np.percentile(us, [50, 99])
        gpu = PhaseFigures(name, float(p50), float(p99), float(tail_us.mean()) if len(tail_us) else float("nan"))
    over: list[OverBlock] = []
    if deadline_ns is not None:
        for i in np.flatnonzero(total > deadline_ns):
            us = {name: float(spans[name][i]) / 1e3 for name, _, _ in PHASES}
            over.append(OverBlock(int(i), float(total[i]) / 1e3, us, max(us, key=us.__getitem__),
                                  float(cols["gpu_ns"][i]) / 1e3 if timed[i] else None))
    return Breakdown(n, k, phases, figures("total", total), gpu,
                     deadline_ns / 1e3 if deadline_ns is not None else None, over, int(timed.sum()))


def markdown(title: str, b: Breakdown) -> list[str]:
    lines = [f"{title} ({b.blocks} blocks; tail = the slowest {b.tail_blocks}):", "",
             "| phase | p50 us | p99 us | mean in the tail us |", "|---|---:|---:|---:|"]
    for f in [*b.phases, b.total, *([b.gpu] if b.gpu else [])]:
        tail = "-" if np.isnan(f.tail_mean_us) else f"{f.tail_mean_us:.1f}"  # no timed block in the tail
        lines.append(f"| {f.name} | {f.p50_us:.1f} | {f.p99_us:.1f} | {tail} |")
    if b.deadline_us is not None:
        lines += ["", f"Blocks over the {b.deadline_us:.0f} us deadline: {len(b.over)}"
                  + (":" if b.over else "")]
        for o in b.over[:MAX_OVER_LISTED]:
            spans = ", ".join(f"{name} {us:.1f}" for name, us in o.phases_us.items())
            gpu = f"; GPU time {o.gpu_us:.1f} us" if o.gpu_us is not None else ""
            lines.append(f"- block {o.index}: {o.total_us:.1f} us, most in {o.largest} "
                         f"({o.phases_us[o.largest]:.1f} us){gpu}; {spans}")
        if len(b.over) > MAX_OVER_LISTED:
            lines.append(f"- ... {len(b.over) - MAX_OVER_LISTED} more; largest phase of all "
                         f"{len(b.over)}: " + ", ".join(f"{k} {v}" for k, v in b.over_by_phase().items()))
    return lines
