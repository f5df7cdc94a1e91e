"""Capacity: how many realtime streams one GPU carries at a deadline (issue 13, item 3).

``python benchmarks/capacity.py --out DIR`` (:func:`run_capacity`). N concurrent W1-shaped
realtime streams (64 ch x 256 samples, fir 256 taps + mix 16 x 64, 48 kHz: one block every
5.33 ms), each on its own clock, the clocks' phases staggered evenly over the period (stream i
releases its blocks at ``start + i * period / N + k * period``). N is swept upward; per N the
report gives p50/p99/p99.9/max latency from release (every block of every stream), deadline
misses at 5.33 ms and at 2 ms, blocks released late (both slots of a stream still busy), the GPU's
busy fraction, the process's CPU use, and what admission control predicted.

pygpukit-dsp runs the streams the way a Session runs them on one GPU: one Rust scheduler, one
dispatcher (``CudaDispatch``: a native thread, realtime callers helping it), every engine attached
as a realtime stream with the realtime defaults (latency mode, mapped I/O, one graph per block).
What a Session adds on top, one Python runner thread per stream, would measure the GIL rather than
the GPU at N x 187.5 blocks/s, so the blocks are released by a few native driver threads instead
(``_native.run_paced``: fill the slot, submit, poll, copy out; no Python per block). Admission
would refuse the N beyond its bound, which is what the sweep must cross to find where misses
begin: the measured runs declare a cost of 1 us per block (earliest deadline first among
streams of one deadline is release order, whatever the cost), and admission's own prediction is
computed beside them (a scratch scheduler admitting streams until it refuses): what a Session of
N such streams admits (:func:`session_prediction`: the costs it measures before the first block,
admission.measure_engine_cost on one engine, its device time back to back and its latency alone
at the stream's period; past half a bound, admission.rehearse of N engines together, N found by
bisection), and with the GPU time the dispatcher measured during the runs (CUDA events). The
streams declare the sweep's staggered phases (as a Session does for the clocks it paces), so the
response bound counts only the work that can be in front of each block.
:meth:`CapacityReport.admission_verdict` says whether the Session's prediction falls where misses
begin (between the largest N that held and the smallest that missed), counting every miss and
counting only the process's. The aligned runs (:data:`ALIGNED`, every phase 0: all blocks
released at once, what the response bound assumes for streams of no declared phase) are judged
against the prediction for such streams (:data:`SESSION_ALIGNED`: no phase, rehearsed all at
once) at the shortest deadline.

The floor (:class:`_FloorStreams`, :func:`floor_plan`): N bare round trips of the W1 block (no
pipeline, no scheduler), released by the same driver threads on the same clocks, where the
project's misses began and at the target's N when the project did not hold it; the target's
verdict says whether the floor itself missed there (the target below what the machine allowed in
that run) or held (the miss the project's). The floor also runs released all at once
(:data:`FLOOR_ALIGNED`) at every N of the aligned sweep: what a burst costs the machine itself.

The PyTorch baseline is what a user would write: one Python thread and one ``torch.cuda.Stream``
per stream, each replaying the torch-graph W1 (pinned staging, the block's ops in one CUDA graph),
sleeping until its next release; latency from the release.

The sweep is coarse first (``coarse_s`` per N, N up the ladder until misses at the 5.33 ms
deadline appear at two successive N), then the largest N with zero misses at each deadline is
confirmed over ``confirm_s`` (>= 30 s for the headline); a confirmation that misses steps down the
ladder, up to CONFIRM_TRIES runs per deadline (a run already made for the other deadline
counts). At the period every miss counts; at the shorter deadline a run whose misses all came in
the host's episodes also ends the step down (a host stall of 2-3 ms misses 2 ms at any N, so
stepping down would only find where the stalls happened to fall), and the verdict there counts
both ways. The headline: the largest N with zero misses over the confirmation, at 5.33 ms and at
2 ms, for both, and their ratio. Every run's misses come grouped into episodes, each with its
cause (host slowdown, host stall or the process's: :func:`episode_cause`), the steal time
sampled beside it (bench/steal.py), and where the driver threads' and the dispatcher worker's time
went around it (bench/off_cpu.py: a thread whose vCPU stopped beneath the guest makes the
episode the host's).
"""

from __future__ import annotations

import contextlib
import copy
import os
import resource
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..admission import DISPATCH_BUSY_MAX, TAIL_HORIZON_S, dispatch_busy_max
from ..backends.cuda_dispatch import DEFAULT_TIME_EVERY
from . import off_cpu
from .stall_probe import EPISODE_GAP_NS, HOST_SLOW_FACTOR, HOST_STALL_US, start_probe, stop_probe
from .steal import StealSampler, steal_summary, steal_ticks

if TYPE_CHECKING:
    from ..pipeline import Pipeline

PROJECT_LADDER = (16, 32, 64, 96, 128, 160, 192, 224, 256, 320, 384, 512)
TORCH_LADDER = (4, 8, 16, 24, 32, 48, 64, 96, 128)
DEADLINES_MS = (256 / 48.0, 2.0)    # the block period (5.33 ms) and 2 ms
COARSE_S = 3.0
CONFIRM_S = 30.0
WARMUP_S = 0.5
DECLARED_COST_NS = 1_000            # measured runs: admission must not stop the sweep (module doc)
POOL = 8                            # distinct input blocks, shared by every stream
STOP_AFTER_MISSING = 2              # coarse sweep: stop after this many successive N with misses
CONFIRM_TRIES = 3                   # confirmations per deadline: the knee, then down the ladder while they miss
TARGET_STREAMS = 100                # issue 13: >= 100 streams with zero misses at 5.33 ms over 30 s
TARGET_RATIO = 3.0                  # ... and >= 3x what PyTorch + graph holds
NOT_MUCH_EARLIER = 0.9              # admission refusing at >= this fraction of the N that held: "a little earlier"
FLOOR = "floor"                     # the capacity floor's points (_FloorStreams)
FLOOR_ALIGNED = "floor, aligned"    # the floor released all at once, at the N the aligned runs ran
ALIGNED = "pygpukit-dsp, aligned"   # the project's streams with every phase 0: all release at once
SESSION_ALIGNED = "session, aligned"  # the prediction for them: no phase declared, rehearsed all at once


@dataclass
class CapacityPoint:
    """One run of N streams."""

    impl: str                        # pygpukit-dsp | torch-graph
    n: int
    seconds: float
    phase: str                       # coarse | confirm
    blocks: int = 0
    p50_us: float = 0.0
    p99_us: float = 0.0
    p999_us: float = 0.0
    max_us: float = 0.0
    misses: dict[str, int] = field(default_factory=dict)   # deadline (ms, as text) -> blocks over it
    late: int = 0                    # releases that found both slots of the stream busy
    gpu_busy: float | None = None    # fraction of the wall time (sum of the blocks' GPU time / wall)
    gpu_busy_how: str = ""
    cpu_cores: float = 0.0           # process CPU seconds per wall second
    status: str = "ok"
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def zero_misses(self, deadline_ms: float) -> bool:
        return self.status == "ok" and self.blocks > 0 and self.misses.get(_key(deadline_ms), 1) == 0


def _key(deadline_ms: float) -> str:
    return f"{deadline_ms:.2f}"


def _process_misses(p: "CapacityPoint", deadline_ms: float) -> int | None:
    """The misses over ``deadline_ms`` of a run that its episodes blame on the process (None: its
    misses there were not sorted into episodes)."""
    when = p.extra.get("misses_when_at", {}).get(_key(deadline_ms))
    if when is None and _key(deadline_ms) == max(p.misses, key=float, default=None):
        when = p.extra.get("misses_when")  # a run that sorted only the longest deadline's (before session 15)
    if when is None or "by_cause" not in when:
        return None
    return int(when["by_cause"].get("process", 0))


def _verdict(predicted: int, held: int, missed: int | None) -> str:
    """Where admission's ``predicted`` N falls against the largest N that held and the least N
    above it that missed (None: none did). "a little earlier": it refuses an N that held, but by
    less than NOT_MUCH_EARLIER of it (issue 13: "where misses begin, and not much earlier"; the
    sweep's ladder steps are 10-15% apart near the knee)."""
    if predicted < held:
        return "a little earlier" if predicted >= NOT_MUCH_EARLIER * held else "earlier"
    return "later" if missed is not None and predicted >= missed else "where misses begin"


@dataclass
class Prediction:
    """Admission control's capacity: the number of these streams a scheduler admits."""

    cost_us: float                # device time per block (what the scheduler sums)
    how: str                      # "session": the Session's calibration; "gpu": the GPU time measured in the runs
    streams: dict[str, int] = field(default_factory=dict)    # deadline -> streams admitted
    reason: dict[str, str] = field(default_factory=dict)     # deadline -> why the next one was refused
    latency_us: float | None = None  # one block alone, release to done (the response bound's L)
    # deadline -> N -> block cost among N rehearsed, as admission counts it for that deadline
    rehearsed_us: dict[str, dict[str, float]] = field(default_factory=dict)
    dispatch_us: dict[str, float] = field(default_factory=dict)   # N -> the dispatcher's serial work per block there
    overlap: dict[str, float] = field(default_factory=dict)       # N -> blocks on the GPU at once there (RehearsalRun.overlap)
    reach_us: dict[str, float] = field(default_factory=dict)      # N -> the rehearsal's latency tail within TAIL_HORIZON_S


@dataclass
class CapacityReport:
    pipeline: str
    spec: str
    period_us: float
    deadlines_ms: list[float]
    machine: str
    settings: dict[str, Any]
    points: list[CapacityPoint] = field(default_factory=list)
    predictions: list[Prediction] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def capacity(self, impl: str, deadline_ms: float, phase: str = "confirm") -> int | None:
        """The largest N of ``impl`` with zero misses at the deadline in a ``phase`` run (None: none)."""
        ok = [p.n for p in self.points if p.impl == impl and p.phase == phase and p.zero_misses(deadline_ms)]
        return max(ok) if ok else None

    def capacity_not_blamed(self, impl: str = "pygpukit-dsp", deadline_ms: float | None = None) -> int | None:
        """The largest N of a confirmation run whose misses over ``deadline_ms`` (default the
        period; if any) all came in episodes of a host slowdown or stall (episode_cause): none the
        process's. Beside the headline, not instead of it: issue 13's target counts every miss."""
        d = self.deadlines_ms[0] if deadline_ms is None else deadline_ms
        ok = [p.n for p in self.points
              if p.impl == impl and p.phase == "confirm" and p.status == "ok" and p.blocks > 0
              and _process_misses(p, d) == 0]
        return max(ok) if ok else None

    def headline(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for d in self.deadlines_ms:
            proj, torch = self.capacity("pygpukit-dsp", d), self.capacity("torch-graph", d)
            out[_key(d)] = {"pygpukit-dsp": proj, "torch-graph": torch,
                            "ratio": (proj / torch) if proj and torch else None,
                            "pygpukit-dsp_coarse": self.capacity("pygpukit-dsp", d, "coarse"),
                            "torch-graph_coarse": self.capacity("torch-graph", d, "coarse")}
        return out

    def floor_verdict(self) -> dict[str, Any] | None:
        """The floor's confirmation at TARGET_STREAMS (None: it did not run): its misses at the
        period and their causes; ``below_machine`` when it missed: the target was below what this
        machine allowed in this run."""
        d = _key(self.deadlines_ms[0])
        runs = [p for p in self.points if p.impl == FLOOR and p.phase == "confirm" and p.n == TARGET_STREAMS
                and p.status == "ok" and p.blocks > 0]
        if not runs:
            return None
        f = runs[-1]
        misses = int(f.misses.get(d, 0))
        return {"n": f.n, "seconds": f.seconds, "blocks": f.blocks, "misses": misses, "p99_us": f.p99_us,
                "by_cause": f.extra.get("misses_when", {}).get("by_cause", {}), "below_machine": misses > 0}

    def torch_missed_smallest(self) -> tuple[int, str] | None:
        """The smallest N at which a PyTorch + graph run missed at the period, and that run's kind
        ("coarse" / "confirm"): PyTorch holds fewer streams than that (more never miss less)."""
        d = self.deadlines_ms[0]
        missed = [p for p in self.points if p.impl == "torch-graph" and p.status == "ok" and p.blocks > 0
                  and not p.zero_misses(d)]
        if not missed:
            return None
        p = min(missed, key=lambda p: (p.n, p.phase != "confirm"))
        return p.n, p.phase

    def admission_verdict(self, deadline_ms: float, how: str = "session",
                          impl: str = "pygpukit-dsp") -> dict[str, Any] | None:
        """Does admission (its prediction ``how``) refuse where misses begin, and not much earlier?

        ``held``: the largest N confirmed with zero misses; ``missed``: the smallest N above it
        that missed (any run; None when the sweep found none). ``verdict``: "where misses begin"
        when held <= predicted < missed; "a little earlier" or "earlier" (``fraction`` = predicted
        / held, at least NOT_MUCH_EARLIER or not) when it refuses N that held; "later" when it
        admits an N that missed. None: nothing to compare."""
        pred = next((p for p in self.predictions if p.how == how), None)
        held = self.capacity(impl, deadline_ms)
        held_p = self.capacity_not_blamed(impl, deadline_ms)
        if pred is None or (held is None and held_p is None) or _key(deadline_ms) not in pred.streams:
            return None
        n = pred.streams[_key(deadline_ms)]
        out: dict[str, Any] = {"predicted": n, "held": held, "missed": None, "verdict": None, "fraction": None}
        if held is not None:
            above = [p.n for p in self.points if p.impl == impl and p.status == "ok" and p.blocks > 0
                     and p.n > held and not p.zero_misses(deadline_ms)]
            missed = min(above) if above else None
            out.update({"missed": missed, "verdict": _verdict(n, held, missed), "fraction": n / held})
        if held_p is not None and (held is None or held_p > held):
            # the same with only the misses the process is blamed for (episode_cause): a host
            # slowdown or stall is not something admission, which budgets the GPU, can refuse
            above_p = [p.n for p in self.points if p.impl == impl and p.status == "ok" and p.blocks > 0
                       and p.n > held_p and _process_misses(p, deadline_ms) != 0 and not p.zero_misses(deadline_ms)]
            missed_p = min(above_p) if above_p else None
            out["process"] = {"held": held_p, "missed": missed_p, "verdict": _verdict(n, held_p, missed_p),
                              "fraction": n / held_p}
        return out

    def _no_verdict_line(self, deadline_ms: float) -> str | None:
        """The Session's prediction at a deadline where no confirmation run held, counting every
        miss or only the process's: each confirmed N's misses, their episodes and the process's
        share (misses at every N alike are not where a capacity begins)."""
        pred = next((p for p in self.predictions if p.how == "session"), None)
        runs = sorted((p for p in self.points if p.impl == "pygpukit-dsp" and p.phase == "confirm"
                       and p.status == "ok" and p.blocks > 0), key=lambda p: p.n)
        if pred is None or not runs or _key(deadline_ms) not in pred.streams:
            return None

        def one(p: CapacityPoint) -> str:
            when = p.extra.get("misses_when_at", {}).get(_key(deadline_ms), {})
            own = _process_misses(p, deadline_ms)
            eps = when.get("episodes")
            return (f"N={p.n}: {p.misses.get(_key(deadline_ms), 0)}" +
                    (f" in {eps} episode{'s' if eps != 1 else ''}" if eps is not None else "") +
                    (f", {own} the process's" if own is not None else ""))

        return (f"- admission at {deadline_ms:.2f} ms (the Session's calibration and rehearsal, the streams' "
                f"staggered phases declared): predicted {pred.streams[_key(deadline_ms)]} streams; no confirmation "
                f"run held at this deadline, counting every miss or the process's: " + "; ".join(one(p) for p in runs))

    def targets(self) -> list[tuple[str, bool | None, str]]:
        d = _key(self.deadlines_ms[0])
        h = self.headline().get(d, {})
        proj, ratio = h.get("pygpukit-dsp"), h.get("ratio")
        secs = self.settings.get("confirm_s", 0)
        detail = "not measured" if proj is None else f"{proj} streams"
        fv = self.floor_verdict()
        if fv is not None and (proj is None or proj < TARGET_STREAMS):
            if fv["below_machine"]:
                detail += (f"; the floor (bare round trips, no pipeline) missed {fv['misses']} blocks at "
                           f"{fv['n']} streams over {fv['seconds']:g} s in this run: the target was below what this "
                           "machine allowed in this run")
            elif any(p.impl == "pygpukit-dsp" and p.status == "ok" and p.blocks > 0
                     and not p.zero_misses(self.deadlines_ms[0]) for p in self.points):
                detail += (f"; the floor held {fv['n']} streams with zero misses over {fv['seconds']:g} s in this "
                           "run: the miss is the project's")
            else:
                top = max((p.n for p in self.points if p.impl == "pygpukit-dsp" and p.status == "ok"), default=0)
                detail += (f"; the floor held {fv['n']} streams with zero misses over {fv['seconds']:g} s in this "
                           f"run, and the project missed nothing up to {top} streams, where its sweep stopped")
        rdetail, rmet = ("not measured", None) if ratio is None else (f"{ratio:.2f}x", ratio >= TARGET_RATIO)
        missed = self.torch_missed_smallest()
        if ratio is None and proj and h.get("torch-graph") is None and missed:
            # no N confirmed for PyTorch: it holds fewer than the smallest N it missed at
            n, phase = missed
            ladder = self.settings.get("torch_ladder") or []
            where = "the smallest of its ladder" if ladder and n == ladder[0] else \
                ("over the confirmation" if phase == "confirm" else "in the coarse sweep")
            bound = proj / n
            rdetail = (f"PyTorch + graph held no N over the confirmation (it missed at {n} streams, {where}; it "
                       f"holds fewer): more than {proj}/{n} = {bound:.1f}x")
            rmet = True if bound >= TARGET_RATIO else None
        return [(f">= {TARGET_STREAMS} W1 streams with zero misses at {self.deadlines_ms[0]:.2f} ms over {secs:g} s",
                 None if proj is None else proj >= TARGET_STREAMS, detail),
                (f">= {TARGET_RATIO:g}x the streams PyTorch + CUDA graph holds", rmet, rdetail)]

    def markdown(self) -> str:
        keys = [_key(d) for d in self.deadlines_ms]
        lines = [f"### Capacity: concurrent realtime {self.pipeline} streams on one GPU", "",
                 f"{self.spec}; one block every {self.period_us:.1f} us per stream, phases staggered over the "
                 f"period; latency from release; coarse runs {self.settings.get('coarse_s')} s, confirmation "
                 f"{self.settings.get('confirm_s')} s (after {self.settings.get('warmup_s')} s warm-up); "
                 f"{self.machine}", "",
                 "| implementation | N | run | blocks | p50 us | p99 us | p99.9 us | max us | "
                 + " | ".join(f"misses > {k} ms" for k in keys) + " | late | GPU busy | dispatcher busy | CPU cores |",
                 "|---|---:|---|---:|---:|---:|---:|---:|" + "---:|" * len(keys) + "---:|---:|---:|---:|"]
        for p in self.points:
            if p.status != "ok":
                cells = [p.impl, str(p.n), f"{p.phase} {p.seconds:g} s"] + [""] * (8 + len(keys)) + \
                    [f"{p.status}: {p.reason}"]
                lines.append("| " + " | ".join(cells) + " |")
                continue
            miss = " | ".join(str(p.misses.get(k, "")) for k in keys)
            busy = "" if p.gpu_busy is None else f"{p.gpu_busy:.1%}" + ("*" if p.gpu_busy_how == "estimated" else "")
            held = p.extra.get("dispatcher_busy")
            lines.append(f"| {p.impl} | {p.n} | {p.phase} {p.seconds:g} s | {p.blocks} | {p.p50_us:.1f} | "
                         f"{p.p99_us:.1f} | {p.p999_us:.1f} | {p.max_us:.1f} | {miss} | {p.late} | {busy} | "
                         f"{'' if held is None else f'{held:.1%}'} | {p.cpu_cores:.2f} |")
        for key in keys:
            episodes = [p for p in self.points if p.extra.get("misses_when_at", {}).get(key, {}).get("episodes")]
            if not episodes:
                continue
            lines += ["", f"When the misses over {key} ms happened (misses within "
                          f"{EPISODE_GAP_NS // 1_000_000} ms of each other are one episode; the stall probe's longest "
                          "gap in it: a thread on another CPU that only reads the clock; the watched threads' longest "
                          "gap: a driver thread or the dispatcher's worker making no progress, bench/off_cpu.py):", ""]
            for p in episodes:
                w = p.extra["misses_when_at"][key]
                top = "; ".join(f"{e['misses']} misses of {e['streams']} streams ({e.get('driver_threads', '?')} driver "
                                f"threads) at {e['at_s']} s over {e['span_ms']} ms"
                                + (f", stall {e['longest_stall_us']} us" if "longest_stall_us" in e else "")
                                + (f", slowest fill {e['fill_x_median']}x its median" if "fill_x_median" in e else "")
                                + (f", slowest submit {e['submit_x_median']}x its median"
                                   if "submit_x_median" in e else "")
                                + (f", steal {e['steal_ms']} ms (one CPU {e['steal_max_cpu_ms']} ms)"
                                   if "steal_ms" in e else "")
                                + (f", {off_cpu.words(e['off_cpu'])}" if "off_cpu" in e else "")
                                + (f", {e['slow_steps']['steps']} slow dispatcher steps (longest "
                                   f"{e['slow_steps']['longest_us']:g} us)" if e.get("slow_steps", {}).get("steps") else "")
                                + (f": {CAUSE_WORDS[e['cause']]}" if "cause" in e else "")
                                + (f" ({e['cause_note']})" if "cause_note" in e else "")
                                for e in w.get("list", [])[:4])
                bc = w.get("by_cause", {})
                causes = ", ".join(f"{CAUSE_WORDS[c]} {bc.get(c, 0)}" for c in EPISODE_CAUSES)
                lines.append(f"- {p.impl} N={p.n} {p.phase}: {w['episodes']} episodes (misses by cause: {causes}); "
                             f"largest: {top}")
        watched = [p for p in self.points if p.extra.get("off_cpu")]
        if watched:
            def gaps_line(p: CapacityPoint) -> str:
                o = p.extra["off_cpu"]
                kinds = ", ".join(f"{off_cpu.KIND_WORDS[k]} {o['by_kind'][k]} (longest {o['longest_us'][k]:g} us)"
                                  for k in off_cpu.KINDS if o["by_kind"].get(k))
                return f"{p.impl} N={p.n} {p.phase}: {kinds or 'none'}"
            lines += ["", f"Gaps of {off_cpu.WATCH_GAP_US:g} us or more in the watched threads (the driver threads and "
                          "the dispatcher's worker; timed part), by where the time went: " +
                      "; ".join(gaps_line(p) for p in watched)]
        stolen = [p for p in self.points if p.extra.get("steal", {}).get("available")]
        if stolen:
            lines += ["", "Steal (/proc/stat: CPU time the hypervisor took from this guest's vCPUs) per run, ms per "
                          "second over every CPU: " + ", ".join(f"{p.impl} N={p.n} {p.phase} "
                                                               f"{p.extra['steal']['ms_per_s']:g}" for p in stolen)]
        steps = [p for p in self.points if p.extra.get("host_steps_us")]
        if steps:
            def step(p: CapacityPoint, k: str) -> str:
                v = p.extra["host_steps_us"].get(k)
                return f"{v['p50']:.1f} / {v['p99']:.1f}" if v else "-"
            lines += ["", "Host work per block, p50 / p99 us (fill: the copy into the pinned slot; submit: the "
                          "hand-over, through the dispatcher for pygpukit-dsp): " +
                      "; ".join(f"{p.impl} N={p.n} {p.phase} fill {step(p, 'fill')}, submit {step(p, 'submit')}"
                                for p in steps)]
        timed = [(p, p.extra["dispatch"]) for p in self.points
                 if (p.extra.get("dispatch") or {}).get("step_ns") and p.extra["dispatch"].get("launches")]
        if timed:
            def per_block(d: dict[str, Any]) -> str:
                per = {k: v / d["launches"] / 1e3 for k, v in d["step_ns"].items()}
                return (f"{sum(per.values()):.1f} (" + ", ".join(f"{k} {v:.1f}" for k, v in per.items()) + ")")
            lines += ["", "The dispatcher's time under its lock per block launched, us (take_posts: the scheduler's "
                          "submit; poll: the completions; decide: the scheduler's next; launch: the event records and "
                          "the graph launch): " + "; ".join(f"{p.impl} N={p.n} {p.phase} {per_block(d)}"
                                                            for p, d in timed)]
        slow = [(p, p.extra["dispatch"]) for p in self.points
                if any((p.extra.get("dispatch") or {}).get("slow_steps", {}).values())]
        if slow:
            def kinds(d: dict[str, Any]) -> str:
                return ", ".join(f"{k} {n} (longest {d['longest_step_ns'][k] / 1e3:.0f} us)"
                                 for k, n in d["slow_steps"].items() if n)
            lines += ["", "Dispatcher steps that held its lock 200 us or more (every hand-over waited behind them), "
                          "by kind: " + "; ".join(f"{p.impl} N={p.n} {p.phase}: {kinds(d)}" for p, d in slow)]
        lines += ["", "Largest N with zero misses (confirmed over the confirmation run; coarse sweep in brackets):", "",
                  "| deadline | pygpukit-dsp | PyTorch + CUDA graph | ratio | admission predicted (Session's "
                  "calibration, the phases declared) | admission predicted (GPU time measured in the runs) |", "|---|---:|---:|---:|---:|---:|"]
        pred = {p.how: p for p in self.predictions}

        def cell(p: Prediction | None, k: str) -> str:
            if p is None:
                return ""
            alone = f", {p.latency_us:.1f} us alone" if p.latency_us is not None else ""
            n = p.streams.get(k)
            # the rehearsals that decided it: at the N admitted and the least N refused above it
            costs = p.rehearsed_us.get(k, {})
            above = sorted((int(m) for m in costs if n is not None and int(m) > n))
            shown = [m for m in ([n] if str(n) in costs else []) + above[:1]]
            def rehearsed(m: int) -> str:
                beside = ([f"dispatcher {p.dispatch_us[str(m)]:.1f}"] if str(m) in p.dispatch_us else []) + \
                         ([f"{p.overlap[str(m)]:.2f} blocks at once on the GPU"] if str(m) in p.overlap else []) + \
                         ([f"tail reaches {p.reach_us[str(m)] / 1e3:.2f} ms"] if str(m) in p.reach_us else [])
                return f"{costs[str(m)]:.1f} us among {m}" + (f" ({', '.join(beside)})" if beside else "")

            among = ("; rehearsed: " + ", ".join(rehearsed(m) for m in shown)) if shown else ""
            why = f"; the next refused: {p.reason[k]}" if p.reason.get(k) else ""
            return f"{'' if n is None else n} ({p.cost_us:.1f} us device{alone}{among}{why})"

        for d in self.deadlines_ms:
            h = self.headline()[_key(d)]
            cells = [cell(pred.get(how), _key(d)) for how in ("session", "gpu")]
            ratio = f"{h['ratio']:.2f}x" if h["ratio"] else ""
            lines.append(f"| {d:.2f} ms | {h['pygpukit-dsp'] or '-'} [{h['pygpukit-dsp_coarse'] or '-'}] | "
                         f"{h['torch-graph'] or '-'} [{h['torch-graph_coarse'] or '-'}] | {ratio} | {cells[0]} | {cells[1]} |")
        lines += ["", "Targets (issue 13):"]
        for name, met, detail in self.targets():
            lines.append(f"- {name}: {'not measured' if met is None else '**met**' if met else '**not met**'} ({detail})")
        def words(w: dict[str, Any]) -> str:
            return {"where misses begin": "it refuses where misses begin",
                    "a little earlier": f"it refuses a little earlier ({w['fraction']:.2f}x the N that held: "
                                        f"not much earlier)",
                    "earlier": f"it refuses earlier ({w['fraction']:.2f}x the N that held)",
                    "later": "it admits an N that missed"}[w["verdict"]]

        def process_line(vp: dict[str, Any], who: str) -> str:
            beyond_p = f", and missed by its own doing at {vp['missed']}" if vp["missed"] is not None else \
                " (no larger N missed by its own doing in the sweep)"
            return f"  - counting only the misses the process is blamed for{who} held {vp['held']}{beyond_p}: {words(vp)}"

        for d in self.deadlines_ms:
            v = self.admission_verdict(d)
            if v is None:
                line = self._no_verdict_line(d)
                if line:
                    lines.append(line)
                continue
            beyond = f", and missed at {v['missed']}" if v["missed"] is not None else \
                " (no larger N missed in the sweep)"
            held_words = (f"the project held {v['held']}{beyond}: {words(v)}" if v["held"] is not None else
                          "the project held no N over the confirmation (every confirmation run missed)")
            lines.append(f"- admission at {d:.2f} ms (the Session's calibration and rehearsal, the streams' "
                         f"staggered phases declared): predicted {v['predicted']} streams; {held_words}")
            if "process" in v:
                lines.append(process_line(v["process"], " (host slowdowns and stalls aside): the project"))
        d_short = min(self.deadlines_ms)
        how_a = SESSION_ALIGNED if any(p.how == SESSION_ALIGNED for p in self.predictions) else "session"
        va = self.admission_verdict(d_short, how=how_a, impl=ALIGNED)
        aligned_missed = sorted(p.n for p in self.points if p.impl == ALIGNED and p.status == "ok" and p.blocks > 0
                                and not p.zero_misses(d_short))
        pred_s = next((p for p in self.predictions if p.how == how_a), None)
        what = (f"- admission at {d_short:.2f} ms against the same streams with every phase 0 (all blocks released "
                "at once: what its response bound assumes for streams that declare no phase, and how they are rehearsed)"
                if how_a == SESSION_ALIGNED else
                f"- admission at {d_short:.2f} ms against the same streams with every phase 0 (all blocks released "
                "at once: what its response bound assumes, since nothing fixes the phases of a session's streams)")
        if va is not None:
            beyond = f", and missed at {va['missed']}" if va["missed"] is not None else \
                " (no larger N missed in its sweep)"
            lines.append(f"{what}: predicted {va['predicted']}; " +
                         (f"they held {va['held']}{beyond}: {words(va)}" if va["held"] is not None else
                          "they held no N over the confirmation" +
                          (f", and missed at {aligned_missed[0]}" if aligned_missed else "")))
            if "process" in va:
                lines.append(process_line(va["process"], ": they"))
        elif aligned_missed and pred_s is not None and _key(d_short) in pred_s.streams:
            n = pred_s.streams[_key(d_short)]
            lines.append(f"{what}: predicted {n}; they held no N over the confirmation, and missed at "
                         f"{aligned_missed[0]}" + (": it admits an N that missed" if n >= aligned_missed[0] else ""))
        if any(p.impl == ALIGNED and "misses_when_at" in p.extra for p in self.points):
            blamed = sorted((p.n, p.phase, _process_misses(p, d_short)) for p in self.points
                            if p.impl == ALIGNED and p.status == "ok" and p.blocks > 0 and not p.zero_misses(d_short))
            if blamed:
                lines.append(f"  - the aligned runs' misses at {d_short:.2f} ms the process is blamed for: "
                             + ", ".join(f"N={n} {ph} {'-' if m is None else m}" for n, ph, m in blamed))
        pairs = [(a, f) for a in self.points if a.impl == ALIGNED and a.phase == "coarse" and a.blocks
                 for f in self.points if f.impl == FLOOR_ALIGNED and f.n == a.n and f.status == "ok" and f.blocks]
        if pairs:
            lines.append("  - released at once, the project beside the floor (bare round trips, no pipeline, no "
                         "scheduler), p50 / p99.9 us and misses at " + f"{d_short:.2f} ms: " + "; ".join(
                             f"N={a.n} {a.p50_us:.0f} / {a.p999_us:.0f} ({a.misses.get(_key(d_short), 0)}) against "
                             f"{f.p50_us:.0f} / {f.p999_us:.0f} ({f.misses.get(_key(d_short), 0)})" for a, f in pairs))
        nb = self.capacity_not_blamed()
        if nb is not None and nb != self.capacity("pygpukit-dsp", self.deadlines_ms[0]):
            lines.append(f"- beside them: the largest confirmed N whose misses at {keys[0]} ms all came in episodes of "
                         f"a host slowdown or stall (none the process's): {nb}")
        lines += ["", "GPU busy: the sum of the blocks' event-timed GPU time over the wall time (kernels of different "
                      "streams overlap, so it can pass 100%); * PyTorch: estimated as N x the block's GPU time x the "
                      "block rate. Dispatcher busy: the time its steps held the dispatcher's lock over the wall "
                      "time (every block passes through it: a second serial resource beside the GPU). CPU cores: "
                      "process CPU seconds per wall second (every thread). Admission's rehearsals: \"X us among N\" is "
                      "the block cost admitted among N streams, the larger of the GPU's share and the dispatcher's "
                      "work counted so that its lock is held at most " + ", ".join(
                          f"{dispatch_busy_max(int(d * 1e6)):.0%} of the time at {d:.2f} ms" for d in self.deadlines_ms)
                      + " (admission.dispatch_busy_max, dispatch_cost_ns); \"tail reaches\": how far the "
                      f"rehearsal's latency from release reaches within {TAIL_HORIZON_S:g} s (admission.LatencyTail)."]
        lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["headline"] = self.headline()
        d["capacity_not_blamed"] = self.capacity_not_blamed()
        d["floor_verdict"] = self.floor_verdict()
        d["targets"] = [{"name": n, "met": m, "detail": t} for n, m, t in self.targets()]
        return d


# ----------------------------------------------------------------------------- helpers


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _figures(point: CapacityPoint, lat_ns: np.ndarray, deadlines_ms: tuple[float, ...] | list[float]) -> None:
    point.blocks = int(lat_ns.size)
    if lat_ns.size == 0:
        point.status, point.reason = "failed", "no timed block"
        return
    us = lat_ns.astype(np.float64) / 1e3
    point.p50_us, point.p99_us, point.p999_us = (float(v) for v in np.percentile(us, [50, 99, 99.9]))
    point.max_us = float(us.max())
    point.misses = {_key(d): int((us > d * 1e3).sum()) for d in deadlines_ms}


EPISODE_CAUSES = ("host_slow", "host_stall", "process")
CAUSE_WORDS = {"host_slow": "host slowdown", "host_stall": "host stall", "process": "the process's"}


GPU_FULL = 0.9                # a run whose GPU was this busy missed under its own load, whatever the fills did
CPU_FULL = 0.9                # ... and a run whose process used this share of its CPUs
DISPATCHER_FULL = DISPATCH_BUSY_MAX  # ... and a run whose dispatcher's lock was held this share of the time
                              # (admission's own bound on it: past it the lock's queue is the process's load)


def own_load(when: dict[str, Any], gpu_busy: float | None, cpu_cores: float | None = None,
             cores: int | None = None, dispatcher_busy: float | None = None) -> None:
    """A run whose GPU was GPU_FULL busy or more, whose dispatcher's lock was held DISPATCHER_FULL
    of the time or more (its steps, which every block passes through: at 384 W1 streams on the
    H100 it was held 111% of the wall time with the GPU 87% busy, and one 2-s episode of 144,000
    misses held a fill 35x its median somewhere), or whose process used CPU_FULL of the CPUs it
    may run on or more: every episode is the process's (its own load; slow fills there came with
    it: at 384-512 streams on the H200 the fills ran 6-34x their median with the GPU 97-218%
    busy), not the host's. The CPU share counts the threads' spinning too: a process that keeps
    every CPU busy slows its own copies."""
    if not when.get("list"):
        return
    if gpu_busy is not None and gpu_busy >= GPU_FULL:
        note = f"GPU {gpu_busy:.0%} busy: the run's own load"
    elif dispatcher_busy is not None and dispatcher_busy >= DISPATCHER_FULL:
        note = f"the dispatcher's lock held {dispatcher_busy:.0%} of the time: the run's own load"
    elif cpu_cores is not None and cores and cpu_cores >= CPU_FULL * cores:
        note = f"the process used {cpu_cores:.1f} of {cores} CPUs: the run's own load"
    else:
        return
    for ep in when["list"]:
        if ep["cause"] != "process":
            ep["cause"], ep["cause_note"] = "process", note
    total = sum(when.get("by_cause", {}).values())  # every episode's misses (the list keeps the 12 largest)
    when["by_cause"] = {c: (total if c == "process" else 0) for c in EPISODE_CAUSES}


def episode_cause(ep: dict[str, Any]) -> str:
    """Whose episode it was, by W3's rules (contention.miss_causes) applied to the episode: a
    *host slowdown* when a miss's fill (a plain copy into the pinned slot: fixed CPU work, no lock,
    no wait) ran HOST_SLOW_FACTOR times its median or more (the CPUs under the driver threads ran
    slow, or their vCPUs were preempted beneath the guest); a *host stall* when the stall probe on
    another CPU stopped for HOST_STALL_US, the hypervisor's steal shows inside it, or a driver
    thread or the dispatcher's worker lost HOST_STALL_US with its vCPU stopped beneath the guest
    (off_cpu.within: away without being switched out); else the process's. A whole episode takes
    the cause: its other misses are the backlog behind it."""
    if ep.get("fill_x_median", 0.0) >= HOST_SLOW_FACTOR:
        return "host_slow"
    if ep.get("longest_stall_us", 0.0) >= HOST_STALL_US or ep.get("steal_ms", 0.0) > 0:
        return "host_stall"
    if (ep.get("off_cpu") or {}).get("stolen_us", 0.0) >= HOST_STALL_US:
        return "host_stall"
    return "process"


def miss_episodes(res: dict[str, Any], period_ns: int, n: int, deadline_ms: float,
                  stalls: tuple[np.ndarray, np.ndarray] | None, threads: int = 1,
                  steal: StealSampler | None = None, gaps: off_cpu.Gaps | None = None,
                  slow_log: list[tuple[int, int, str]] | None = None) -> dict[str, Any]:
    """When the misses at ``deadline_ms`` happened: grouped into episodes (misses whose releases lie
    within EPISODE_GAP_NS of each other), each with its first release (s from the timed start), its
    misses, the streams it hit and the longest stall-probe gap (the host holding a CPU) inside it.
    Many streams missing together at one moment is a stall (host or a shared lock); one stream
    missing alone is that stream's driver. ``n``: the streams, stream i's phase i * period / n (0:
    every phase 0, the aligned runs). ``threads``: the driver threads (stream i is driven by
    thread i % threads); an episode on one thread's streams only is that thread's stall.
    ``steal``: the steal time sampled during the run (bench/steal.py): each episode gets the steal
    on every CPU around it (the hypervisor running something else on this guest's vCPUs).
    ``gaps``: the watched threads' gaps (off_cpu.py): each episode gets those from a deadline
    before its first missed release to its end (``off_cpu``); ``slow_log``: the dispatcher's slow
    steps (start, ns, kind): each episode gets those inside the same window (``slow_steps``)."""
    timed_from, over_ns = int(res["timed_from_ns"]), int(deadline_ms * 1e6)
    fills, submits = res.get("fill_ns"), res.get("submit_ns")
    rel, who, fill, submit = [], [], [], []
    for i, lat in enumerate(res["latency_ns"]):
        a = np.asarray(lat, dtype=np.int64)
        if a.size == 0:
            continue
        phase = i * period_ns // n if n else 0  # n 0: every phase 0 (aligned)
        first = -(-(timed_from - int(res["start_ns"]) - phase) // period_ns)  # first timed block
        k = np.flatnonzero(a > over_ns)
        rel.append(int(res["start_ns"]) + phase + (first + k) * period_ns)
        who.append(np.full(k.size, i))
        if fills is not None:
            fill.append(np.asarray(fills[i], dtype=np.int64)[k])
        if submits is not None:
            submit.append(np.asarray(submits[i], dtype=np.int64)[k])
    fill_p50 = float(np.median(np.concatenate([np.asarray(f, dtype=np.int64) for f in fills]))) if fills else 0.0
    submit_p50 = (float(np.median(np.concatenate([np.asarray(f, dtype=np.int64) for f in submits])))
                  if submits else 0.0)
    out: dict[str, Any] = {"episodes": 0, "list": [], "by_cause": {c: 0 for c in EPISODE_CAUSES}}
    if not rel or sum(r.size for r in rel) == 0:
        return out
    r, w = np.concatenate(rel), np.concatenate(who)
    order = np.argsort(r)
    r, w = r[order], w[order]
    f = np.concatenate(fill)[order] if fill else None
    sub = np.concatenate(submit)[order] if submit else None
    cuts = np.flatnonzero(np.diff(r) > EPISODE_GAP_NS) + 1
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, r.size]):
        t0, t1 = int(r[a]), int(r[b - 1]) + over_ns
        ep = {"at_s": round((t0 - timed_from) / 1e9, 4), "span_ms": round((t1 - t0) / 1e6, 2),
              "misses": int(b - a), "streams": int(np.unique(w[a:b]).size),
              "driver_threads": int(np.unique(w[a:b] % max(1, threads)).size)}
        if f is not None and fill_p50 > 0:
            # the copy into the pinned slot is fixed CPU work: many times its median = the CPU ran slow
            ep["fill_x_median"] = round(float(f[a:b].max()) / fill_p50, 1)
        if sub is not None and submit_p50 > 0:
            # the hand-over (through the dispatcher): slow with fills at their median = the process's
            # own path (a lock, the scheduler), not a slow CPU
            ep["submit_x_median"] = round(float(sub[a:b].max()) / submit_p50, 1)
        if stalls is not None:
            g0, glen = stalls
            inside = (g0 < t1) & (g0 + glen > t0 - 10_000_000)
            ep["longest_stall_us"] = round(float(glen[inside].max()) / 1e3, 1) if inside.any() else 0.0
        if steal is not None:
            st = steal.within(t0 - 10_000_000, t1)
            if st is not None:
                ep["steal_ms"], ep["steal_max_cpu_ms"] = st["ms"], st["max_cpu_ms"]
        if gaps is not None:
            ep["off_cpu"] = off_cpu.within(gaps, t0 - over_ns, t1)
        if slow_log is not None:
            inside_log = [(a, ns, k) for a, ns, k in slow_log if a < t1 and a + ns > t0 - over_ns]
            ep["slow_steps"] = {"steps": len(inside_log),
                                "longest_us": round(max((ns for _, ns, _ in inside_log), default=0) / 1e3, 1),
                                "kinds": sorted({k for _, _, k in inside_log})}
        ep["cause"] = episode_cause(ep)
        out["list"].append(ep)
    out["episodes"] = len(out["list"])
    out["by_cause"] = {c: sum(e["misses"] for e in out["list"] if e["cause"] == c) for c in EPISODE_CAUSES}
    out["list"] = sorted(out["list"], key=lambda e: -e["misses"])[:12]
    return out


PREDICT_REGISTER_MAX = 2000   # register at most this many streams in the scratch scheduler (each holds a
                              # ~270 KB latency histogram); beyond it the documented rule is applied


def predict(cost_ns: int, period_ns: int, deadlines_ms: tuple[float, ...] | list[float], how: str,
            u_max: float = 0.9, margin_ns: int = 50_000, latency_ns: int | None = None,
            phased: bool = False) -> Prediction:
    """Streams of this device cost (and own latency alone) and period a fresh scheduler admits at
    each deadline (its defaults).

    The documented admission rule (docs/scheduler.md: n C / P <= U_max and n C + margin + (L - C)
    <= the deadline) gives the count; when it is at most PREDICT_REGISTER_MAX the scheduler itself
    confirms it (streams registered until it refuses, its answer kept). ``phased``: the streams
    declare the sweep's staggered phases (:func:`admits_all`): the largest N the scheduler admits
    whole, by bisection up to the utilisation bound."""
    from pygpukit_dsp_core import AdmissionRefused, Scheduler

    c = max(1, int(cost_ns))
    lat = int(latency_ns) if latency_ns is not None and latency_ns > c else None
    pred = Prediction(cost_us=cost_ns / 1e3, how=how, latency_us=lat / 1e3 if lat else None)
    excess = (lat - c) if lat else 0
    extra = {"latency_ns": lat} if lat else {}
    for d in deadlines_ms:
        deadline_ns = int(d * 1e6)
        if phased:
            def whole(n: int) -> tuple[bool, str]:
                return admits_all(n, c, period_ns, deadline_ns, u_max=u_max, margin_ns=margin_ns, latency_ns=lat,
                                  phased=True)

            hi = min(PREDICT_REGISTER_MAX, int(u_max * period_ns // c) + 1)
            pred.streams[_key(d)], why = largest_admitted(whole, hi)
            pred.reason[_key(d)] = why or "the documented rule (not registered: too many streams)"
            continue
        rule = max(0, min(int(u_max * period_ns // c), int((deadline_ns - margin_ns - excess) // c)))
        if rule > PREDICT_REGISTER_MAX:
            pred.streams[_key(d)] = rule
            pred.reason[_key(d)] = "the documented rule (not registered: too many streams)"
            continue
        sched = Scheduler(u_max=u_max, safety_margin_ns=margin_ns)
        n = 0
        try:
            while n <= PREDICT_REGISTER_MAX:
                sched.register_stream(f"s{n}", "realtime", period_ns=period_ns, deadline_ns=deadline_ns, cost_ns=c,
                                      **extra)
                n += 1
        except AdmissionRefused as exc:
            pred.reason[_key(d)] = f"{exc.reason}"
        pred.streams[_key(d)] = n
        del sched
    return pred


def largest_admitted(test: Callable[[int], tuple[bool, str]], hi: int) -> tuple[int, str]:
    """The largest n <= ``hi`` that ``test`` admits (``test(n)``: (admitted, why not)), by
    bisection (admission is monotone in n), and the reason of the least n it refused ("" when
    it admits ``hi``)."""
    ok, why = test(hi)
    if ok:
        return hi, ""
    lo, refusal = 0, why  # test(lo) holds; test(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok, why = test(mid)
        if ok:
            lo = mid
        else:
            hi, refusal = mid, why
    return lo, refusal


def staggered_phases(n: int, period_ns: int) -> list[int]:
    """The sweep's phases: stream i released at i * period / n."""
    return [i * period_ns // n for i in range(n)]


def admits_all(n: int, cost_ns: int, period_ns: int, deadline_ns: int, *, u_max: float = 0.9,
               margin_ns: int = 50_000, latency_ns: int | None = None, phased: bool = False) -> tuple[bool, str]:
    """Does a fresh scheduler admit all ``n`` of these streams, registered in order (``phased``:
    each declaring its sweep phase, :func:`staggered_phases`, as a Session does for the clocks it
    paces; else none, the critical instant)? (True, "") or (False, the refusal's reason)."""
    from pygpukit_dsp_core import AdmissionRefused, Scheduler

    c = max(1, int(cost_ns))
    extra = {"latency_ns": int(latency_ns)} if latency_ns is not None and latency_ns > c else {}
    phases = staggered_phases(n, period_ns) if phased else [None] * n
    sched = Scheduler(u_max=u_max, safety_margin_ns=margin_ns)
    try:
        for i, ph in enumerate(phases):
            sched.register_stream(f"s{i}", "realtime", period_ns=period_ns, deadline_ns=deadline_ns, cost_ns=c,
                                  phase_ns=ph, **extra)
    except AdmissionRefused as exc:
        return False, f"{exc.reason}"
    return True, ""


def session_prediction(cost: Any, period_ns: int, deadlines_ms: tuple[float, ...] | list[float],
                       loaded_ns: Callable[[int, int], int], n_max: int, u_max: float = 0.9,
                       say: Callable[[str], None] = lambda _line: None, phased: bool = False,
                       how: str = "session", tail: Callable[[int], Any] | None = None) -> Prediction:
    """What a Session admits of these streams (its calibration ``cost``, a BlockCost, alone),
    at each deadline: the largest N (up to ``n_max``, the most streams there are engines for) for
    which admission, as ``admission.admit`` does it, admits all N. Up to where N streams costed
    alone fill half a bound (admission.crowded) that is the rule with the cost alone; past it the
    Session rehearses the N streams together and admits them with the larger of the cost alone and
    ``loaded_ns(N, deadline_ns)`` (the block cost among N rehearsed, as admission counts it for
    streams of that deadline: :func:`admission.rehearse` with the phases the streams will have,
    ``RehearsalRun.costs``), so the largest N is searched by bisection (the cost grows with N).
    ``phased``: the streams declare the sweep's staggered phases (a Session's own clocks,
    :func:`admission.assign_phases`); else no phase (every block may come at once).
    ``tail(N)``: that rehearsal's latency tail (an admission.LatencyTail, or None); admission refuses
    N whose tail reaches past the deadline within TAIL_HORIZON_S ("latency_tail", as
    ``admission._check_tails``)."""
    from ..admission import TAIL_HORIZON_S, crowded, horizon_blocks

    c0, lat = int(cost.device_ns), int(cost.latency_ns)
    pred = Prediction(cost_us=c0 / 1e3, how=how, latency_us=lat / 1e3 if lat > c0 else None)
    cache: dict[tuple[int, int], int] = {}
    told: set[int] = set()

    def fits(n: int, d: float, c: int) -> tuple[bool, str]:
        return admits_all(n, c, period_ns, int(d * 1e6), u_max=u_max, latency_ns=lat, phased=phased)

    def admits(n: int, d: float) -> tuple[bool, str]:
        deadline_ns = int(d * 1e6)
        if crowded([c0] * n, [period_ns] * n, [deadline_ns] * n, u_max):
            if (n, deadline_ns) not in cache:
                cache[n, deadline_ns] = int(loaded_ns(n, deadline_ns))
                pred.rehearsed_us.setdefault(_key(d), {})[str(n)] = cache[n, deadline_ns] / 1e3
            t = tail(n) if tail is not None else None
            reach_ns = t.reach_ns(horizon_blocks([period_ns] * n)) if t is not None else None
            if reach_ns is not None:
                pred.reach_us[str(n)] = reach_ns / 1e3
            if n not in told:
                told.add(n)
                say(f"capacity: admission's rehearsal of {n} streams ({how}): {cache[n, deadline_ns] / 1e3:.1f} us "
                    f"per block among them at {d:.2f} ms" + (
                        f"; {t.describe()}, reaching {pred.reach_us[str(n)] / 1e3:.2f} ms within "
                        f"{TAIL_HORIZON_S:g} s" if t is not None else ""))
            ok, why = fits(n, d, max(c0, cache[n, deadline_ns]))
            if ok and reach_ns is not None and reach_ns > deadline_ns:
                return False, "latency_tail"
            return ok, why
        return fits(n, d, c0)

    for d in deadlines_ms:
        hi, why_alone = largest_admitted(lambda n: fits(n, d, c0), n_max)  # costed alone: no rehearsal
        n, refusal = largest_admitted(lambda n: admits(n, d), hi)
        pred.streams[_key(d)] = n
        if n == hi:  # the rule with the cost alone (or the engines) decided it
            pred.reason[_key(d)] = why_alone or f"no more engines than {n_max}"
        else:
            pred.reason[_key(d)] = f"{refusal} (rehearsed)"
    return pred


def _ladder_runs(run_one: Callable[[int, float, str], CapacityPoint], ladder: tuple[int, ...] | list[int],
                 coarse_s: float, confirm_s: float, deadlines_ms: tuple[float, ...] | list[float],
                 points: list[CapacityPoint], say: Callable[[str], None], impl: str,
                 until: float | None = None, overhead_s: float = 1.0, stop_after: int = STOP_AFTER_MISSING,
                 confirm_tries: int = CONFIRM_TRIES, period_ms: float | None = None) -> None:
    """Coarse sweep up the ladder, then the confirmation runs (module doc). ``until``
    (perf_counter): runs that would end after it are left out (noted as skipped points).
    ``period_ms`` (default the first deadline): the deadline where every miss counts; at any other
    a run holds when the process is blamed for none of its misses (_held_at)."""
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
        if pt.status != "ok" or not _held_at(pt, deadlines_ms[0], deadlines_ms[0] == every):
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
        # whose misses all came in the host's episodes (_held_at): there a host stall of a few ms
        # misses at any N, and stepping down would only find where the stalls happened to miss
        first = d == every
        good = [p.n for p in coarse if _held_at(p, d, first)]
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
            if _held_at(pt, d, first):
                break


def _held_at(p: CapacityPoint, deadline_ms: float, first: bool) -> bool:
    """Whether a run held at a deadline for the ladder: no miss, or (``first`` False: not the
    period) none that its episodes blame on the process."""
    if p.zero_misses(deadline_ms):
        return True
    return not first and p.status == "ok" and p.blocks > 0 and _process_misses(p, deadline_ms) == 0


# ----------------------------------------------------------------------------- pygpukit-dsp


def _paced_run(pt: CapacityPoint, targets: list[Any], period_ns: int, inputs: list[np.ndarray], warmup_s: float,
               seconds: float, deadlines_ms: tuple[float, ...] | list[float], threads: int, spin_us: int,
               aligned: bool = False, dispatch: Any = None) -> float:
    """``_native.run_paced`` over ``targets`` (engines or floors; stream i's phase i * period / N,
    or 0 for every stream when ``aligned``), the stall probe and the steal sampler beside it, the
    driver threads and ``dispatch``'s worker (a CudaDispatch, if any) watched (off_cpu.py); fills
    ``pt``'s latency figures, misses by episode, steal, gaps, late count and CPU use. Returns the
    wall time."""
    from .. import _native

    n = len(targets)
    watch = off_cpu.WATCH_GAP_US if _native.OffCpuMeter.available() else 0.0
    if dispatch is not None and watch:
        dispatch.watch_off_cpu(watch)
    probe = start_probe()
    steal = StealSampler().start()
    cpu0, t0 = _cpu_s(), time.perf_counter()
    phases = [0] * n if aligned else staggered_phases(n, period_ns)
    try:
        res = _native.run_paced(targets, [period_ns] * n, phases, [inputs] * n, warmup_s, seconds, threads, spin_us,
                                watch_gap_us=watch)
    finally:
        stalls = stop_probe(probe)
        steal.stop()
    wall = time.perf_counter() - t0
    pt.cpu_cores = (_cpu_s() - cpu0) / wall
    lat = np.concatenate([np.asarray(a, dtype=np.int64) for a in res["latency_ns"]])
    _figures(pt, lat, deadlines_ms)
    gaps: off_cpu.Gaps | None = None
    slow_log = None
    if watch:
        gaps = [(f"driver thread {i}", g) for i, g in enumerate(res.get("thread_gaps", []))]
        if dispatch is not None:
            gaps.append(("dispatcher's worker", dispatch.off_cpu_gaps()))
            slow_log = [tuple(x) for x in dispatch.stats().get("slow_log", [])]
        pt.extra["off_cpu"] = off_cpu.summary(gaps, int(res["timed_from_ns"]), int(res["end_ns"]))
    pt.extra["misses_when_at"] = {_key(d): miss_episodes(res, period_ns, 0 if aligned else n, d, stalls, threads, steal,
                                                         gaps, slow_log)
                                  for d in deadlines_ms}
    pt.extra["misses_when"] = pt.extra["misses_when_at"][_key(max(deadlines_ms))]
    pt.extra["steal"] = steal.summary()
    pt.extra["host_steps_us"] = host_steps_us(res)
    pt.late = int(sum(res["late"]))
    return wall


def host_steps_us(res: dict[str, Any]) -> dict[str, dict[str, float]]:
    """p50 / p99 / max of the timed blocks' fill (the copy into the pinned slot) and submit (the
    hand-over), us: the host's fixed work per block beside its latency."""
    out: dict[str, dict[str, float]] = {}
    for step in ("fill", "submit"):
        parts = [np.asarray(a, dtype=np.int64) for a in res.get(f"{step}_ns", [])]
        v = np.concatenate(parts) if parts else np.empty(0, np.int64)
        if v.size:
            out[step] = {"p50": float(np.percentile(v, 50)) / 1e3, "p99": float(np.percentile(v, 99)) / 1e3,
                         "max": float(v.max()) / 1e3}
    return out


class _ProjectStreams:
    """Up to max(ladder) W1 engines, opened once; each run attaches the first N to a fresh scheduler
    and dispatcher (the Session's one-GPU path) and drives them natively."""

    def __init__(self, pipeline: "Pipeline", inputs: list[np.ndarray], *, threads: int, spin_us: int,
                 dispatcher_spin_us: int, device: int = 0, engine_kwargs: dict[str, Any] | None = None,
                 time_every: int | None = None):
        from ..backends import choose_backend
        from ..backends.cuda_engine import CudaEngine

        self.pipeline, self.inputs, self.threads, self.spin_us = pipeline, inputs, threads, spin_us
        self.dispatcher_spin_us, self.device = dispatcher_spin_us, device
        self.time_every = time_every or DEFAULT_TIME_EVERY  # CudaDispatch.time_every
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
        from ..admission import calibration_pace, measure_engine_cost

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
        from ..admission import rehearse

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
        return int(np.median(run.costs(deadline_ns=self.period_ns if deadline_ns is None else deadline_ns)))

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

        from ..backends.cuda_dispatch import CudaDispatch

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
            wall = _paced_run(pt, [e._engine for e in engines], P, self.inputs, warmup_s, seconds, deadlines_ms,
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


class _FloorStreams:
    """The capacity floor: N bare round trips (``_native.RoundTripFloor``: the W1 block to the GPU
    and its output's size back, no pipeline, no scheduler, one CUDA stream each), released by the
    same driver threads on the same staggered clocks as the project's streams. Where the floor
    itself misses at N, N streams were more than this machine allowed in that run, whatever they
    ran (the paced rotation's floor, bench/cadence.py, does the same for one stream)."""

    def __init__(self, chain: Any, inputs: list[np.ndarray], *, threads: int, spin_us: int, device: int = 0):
        from .. import _native

        self.device = _native.Device(device)
        self.inputs = [np.ascontiguousarray(x) for x in inputs]
        self.in_bytes, self.out_bytes = int(chain.input.block_nbytes), int(chain.output.block_nbytes)
        self.period_ns = int(round(chain.input.block_period * 1e9))
        self.threads, self.spin_us = threads, spin_us
        self.floors: list[Any] = []

    def run(self, n: int, seconds: float, phase: str, warmup_s: float,
            deadlines_ms: tuple[float, ...] | list[float], aligned: bool = False) -> CapacityPoint:
        from .. import _native

        while len(self.floors) < n:
            self.floors.append(_native.RoundTripFloor(self.device, self.in_bytes, self.out_bytes))
        pt = CapacityPoint(FLOOR_ALIGNED if aligned else FLOOR, n, seconds, phase)
        _paced_run(pt, self.floors[:n], self.period_ns, self.inputs, warmup_s, seconds, deadlines_ms, self.threads,
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


class _TorchStreams:
    """Up to max(ladder) torch-graph W1 baselines, one Python thread and one CUDA stream each."""

    def __init__(self, pipeline: "Pipeline", inputs: list[np.ndarray]):
        from .baselines.torch_impl import TorchBaseline, import_torch

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
        cpu0, t0, steal0 = _cpu_s(), time.perf_counter(), steal_ticks()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        pt.cpu_cores = (_cpu_s() - cpu0) / wall
        pt.extra["steal"] = steal_summary(steal0, steal_ticks(), wall)
        if errors:
            pt.status, pt.reason = "failed", f"{type(errors[0]).__name__}: {errors[0]}"
            return pt
        _figures(pt, np.concatenate([np.asarray(x, dtype=np.int64) for x in lat]), deadlines_ms)
        pt.late = int(sum(late))
        pt.gpu_busy, pt.gpu_busy_how = n * self.gpu_ns / P, "estimated"
        return pt

    def close(self) -> None:
        for impl in self.impls:
            with contextlib.suppress(Exception):
                impl.close()
        self.impls, self.streams = [], []


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
                 time_every: int | None = None, progress: Callable[[str], None] | None = None) -> CapacityReport:
    """The capacity sweep (module doc) of ``pipeline`` (W1); with ``floor``, the floor's runs
    (:func:`floor_plan`); with ``aligned``, the project's streams again with every phase 0 (all
    released at once) up the ladder to the first N at which the process is blamed for misses at the
    shortest deadline, where admission's response bound is judged (:data:`ALIGNED`); with
    ``baseline``, PyTorch + graph. ``time_every``: the dispatcher's (CudaDispatch; None: its
    default)."""
    from ..errors import ConfigError
    from .harness import _input_blocks, _source_format, machine_description

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
    chain = p.specs(_source_format(p))
    inputs = _input_blocks(p, chain, POOL)
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
    proj = _ProjectStreams(p, inputs, threads=threads, spin_us=spin_us, dispatcher_spin_us=dispatcher_spin_us,
                           engine_kwargs=engine_kwargs, time_every=time_every)
    try:
        cost = proj.session_cost()
        report.settings["session_cost"] = asdict(cost)
        report.predictions.append(session_prediction(cost, period_ns, deadlines_ms,
                                                     lambda n, d: proj.rehearsed_ns(n, deadline_ns=d),
                                                     n_max=max(ladder), say=say, phased=True, tail=proj.tail))
        report.predictions[-1].dispatch_us = proj.dispatch_us(aligned=False)
        report.predictions[-1].overlap = proj.overlap(aligned=False)
        say(f"capacity: admission with the Session's calibration ({cost.describe()}), the streams' phases "
            f"declared, admits {report.predictions[-1].streams}")
        if aligned:
            report.predictions.append(session_prediction(
                cost, period_ns, deadlines_ms, lambda n, d: proj.rehearsed_ns(n, aligned=True, deadline_ns=d),
                n_max=max(ladder), say=say, phased=False, how=SESSION_ALIGNED,
                tail=lambda n: proj.tail(n, aligned=True)))
            report.predictions[-1].dispatch_us = proj.dispatch_us(aligned=True)
            report.predictions[-1].overlap = proj.overlap(aligned=True)
            say(f"capacity: admission with no phase declared (every block may come at once) admits "
                f"{report.predictions[-1].streams}")
        _ladder_runs(lambda n, s, ph: proj.run(n, s, ph, warmup_s, deadlines_ms), ladder, coarse_s, confirm_s,
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
            _ladder_runs(lambda n, s, ph: proj.run(n, s, ph, warmup_s, deadlines_ms, aligned=True), ladder_a,
                         coarse_s, confirm_s, short, report.points, say, ALIGNED, until=until_aligned,
                         overhead_s=warmup_s + 1, stop_after=1, confirm_tries=1, period_ms=deadlines_ms[0])
    finally:
        proj.close()
    if floor:
        floors = _FloorStreams(chain, inputs, threads=threads, spin_us=spin_us)
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
            torch_streams = _TorchStreams(p, inputs)
        except Exception as exc:  # no torch / no GPU for it: reported, not fatal
            report.points.append(CapacityPoint("torch-graph", 0, 0.0, "coarse", status="skipped",
                                               reason=f"{type(exc).__name__}: {exc}"))
        else:
            try:
                _ladder_runs(lambda n, s, ph: torch_streams.run(n, s, ph, warmup_s, deadlines_ms), torch_ladder,
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
