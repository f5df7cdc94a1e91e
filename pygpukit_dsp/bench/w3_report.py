"""W3's report (the contention bench, bench/contention.py): its rows, output checks and targets,
as a Markdown table and a JSON dict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .latency import LatencyFigures
from .stall_probe import EPISODE_GAP_NS, HOST_SLOW_FACTOR, HOST_STALL_US
from .trace import Breakdown
from .trace import markdown as breakdown_markdown
from .w3_pumps import W2_IN_FLIGHT

# Targets (H100).
P99_RATIO_TARGET = 1.5      # W1 p99 under load / W1 p99 alone
MISSES_TARGET = 0           # W1 blocks over the deadline under load
W2_KEPT_TARGET = 0.70       # W2 samples/s under load / alone

W2_CHECK_BLOCKS = 2         # normal (non-resident) W2 blocks from reset at the start of every W2 run
SELF_RTOL = 1e-5            # same implementation alone vs under load: same kernels, same data
LATE_BACK_US = 100.0        # a paced W1 thread back from its sleep this late or later: a late wake-up
SLOW_PHASES = ("fill", "copy out")  # fixed CPU work of a block: plain copies, no lock, no wait (stall_probe.py)


@dataclass
class ContentionRow:
    """One line of the table: a W1 run and/or a W2 run of one implementation and setting."""

    key: str                          # project_solo project_load torch_solo torch_same torch_high
    label: str
    status: str = "ok"                # ok | skipped | failed
    reason: str = ""
    reason_code: str = ""             # skipped: why, for a program (baselines.ops.SKIP_CODES)
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
    key: str = ""                     # what is judged: w1_p99_load_over_solo, w1_misses_under_load, w2_kept, ...
    value: float | None = None        # its measured value (None: not measured)
    limit: float | None = None        # the bound it is held to (at most, or for w2_kept at least)


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
        """The three targets, judged on pygpukit-dsp's rows."""
        solo, load = self.row("project_solo"), self.row("project_load")
        measured = all(r is not None and r.status == "ok" and r.w1 is not None for r in (solo, load))
        out: list[TargetVerdict] = []
        name, key = f"W1 p99 under load <= {P99_RATIO_TARGET:g}x its solo p99", "w1_p99_load_over_solo"
        ratio = self.w1_p99_ratio("project_load")
        if ratio is None or not measured:
            out.append(TargetVerdict(name, None, "not measured", key, None, P99_RATIO_TARGET))
        else:
            out.append(TargetVerdict(name, ratio <= P99_RATIO_TARGET,
                                     f"{ratio:.2f}x: {load.w1.p99:.1f} / {solo.w1.p99:.1f} us",
                                     key, ratio, P99_RATIO_TARGET))
        name, key = f"zero W1 deadline misses at {self.deadline_us / 1e3:g} ms under load", "w1_misses_under_load"
        if not measured:
            out.append(TargetVerdict(name, None, "not measured", key, None, MISSES_TARGET))
        else:
            out.append(TargetVerdict(name, load.w1.misses <= MISSES_TARGET,
                                     f"{load.w1.misses} of {load.w1.blocks} blocks; alone {solo.w1.misses}",
                                     key, load.w1.misses, MISSES_TARGET))
        name, key = f"W2 keeps >= {W2_KEPT_TARGET:.0%} of its solo throughput", "w2_kept"
        kept = self.w2_kept("project_load")
        if kept is None:
            out.append(TargetVerdict(name, None, "not measured", key, None, W2_KEPT_TARGET))
        else:
            out.append(TargetVerdict(name, kept >= W2_KEPT_TARGET,
                                     f"{kept:.1%}: {load.w2_samples_per_s / 1e9:.1f} / "
                                     f"{solo.w2_samples_per_s / 1e9:.1f} Gsamples/s", key, kept, W2_KEPT_TARGET))
        return out

    def process_miss_target(self) -> TargetVerdict | None:
        """Beside the targets: zero W1 misses under load that the process can be blamed for (its
        misses by cause, bench/w3_project.py miss_causes: the host's stalls and slowdowns aside).
        None: the load run sorted no misses by cause."""
        load = self.row("project_load")
        c = load.extra.get("miss_causes") if load is not None and load.status == "ok" else None
        if c is None:
            return None
        return TargetVerdict("zero W1 misses under load that the process can be blamed for",
                             c["process"] <= MISSES_TARGET, f"{c['process']} of {c['misses']}",
                             "w1_process_misses_under_load", c["process"], MISSES_TARGET)

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
        lines += ["", "Targets:"]
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
                                 + ", ".join(f"block {b['index']} {or_dash(b.get('back_late_us'))} / {b.get('gc_us', 0):g}"
                                             f" / {or_dash(b.get('gpu_us'))}"
                                             for b in c["blocks"] if b["cause"] == "process"))
                if "gc_collections" in c:
                    lines.append(f"  - garbage collections during the interleaved run: {c['gc_collections']}, "
                                 f"the longest {c['gc_max_us']:.0f} us")
            pt = self.process_miss_target()
            if pt is not None:
                lines.append(f"- {pt.name}: {'**met**' if pt.met else '**not met**'} ({pt.detail})")
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
        pt = self.process_miss_target()
        d["process_miss_target"] = None if pt is None else asdict(pt)
        d["checks_passed"] = self.checks_passed
        d["ratios"] = {r.key: {"w1_p99_load_over_solo": self.w1_p99_ratio(r.key), "w2_kept": self.w2_kept(r.key)}
                       for r in self.rows if r.solo_key}
        return d


def or_dash(v: Any) -> str:
    return "-" if v is None else f"{v:g}"


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


def output_check(name: str, got: list[np.ndarray] | None, ref: list[np.ndarray] | None, tol: float, *,
           project: bool = True) -> OutputCheck:
    if got is None or ref is None:
        return OutputCheck(name, None, tol, False, "not run", project)
    try:
        err = _rel_err(got, ref)
    except ValueError as exc:
        return OutputCheck(name, None, tol, False, str(exc), project)
    return OutputCheck(name, err, tol, err <= tol, "", project)


def w1_line(f: LatencyFigures) -> str:
    return f"W1 p50 {f.p50:.1f} us, p99 {f.p99:.1f} us, max {f.max:.1f} us, misses {f.misses}"
