"""The latency bench's report (``gk-stream bench``; bench/harness.py runs it): one row per
implementation with its latency percentiles, the ratios to the project, Markdown and JSON; and the
schedules it is timed in."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

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

@dataclass
class ImplResult:
    name: str
    kind: str                        # "project" | "baseline"
    status: str = "ok"               # "ok" | "skipped" | "mismatch" | "failed"
    reason: str = ""
    reason_code: str = ""            # skipped: why, for a program (baselines.ops.SKIP_CODES)
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

    def timed_in(self) -> dict[str, Any]:
        """How the latency bench's blocks were timed: paired turns (``turn_blocks`` each, the first
        ``untimed_per_turn`` untimed) or rounds of ``round_blocks``."""
        if self.schedule == "paired" and len(self.results) > 1:
            return {"schedule": "paired", "turn_blocks": PAIR_BLOCKS, "untimed_per_turn": PAIR_SKIP}
        return {"schedule": "rounds", "round_blocks": ROUND_BLOCKS}

    def markdown(self) -> str:
        if self.mode != "latency":
            return self._markdown_throughput()
        t = self.timed_in()
        paired = t["schedule"] == "paired"
        how = (f"{self.blocks} timed blocks per implementation, paired: the project and one "
               f"baseline at a time, in turns of {t['turn_blocks']} blocks (the first {t['untimed_per_turn']} "
               "untimed)" if paired else f"{self.blocks} timed blocks, interleaved in rounds of {t['round_blocks']}")
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
            lat = r.latency_us
            if r.status in ("skipped", "failed") or not lat:  # a mismatch found before any timing, too
                lines.append(f"| {r.name} | | | | | | " + ("| " if paired else "") + f"| | {r.status}: {r.reason} |")
                continue
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
        if self.mode == "latency":
            d["timed_in"] = self.timed_in()
        return d


def _ratio(v: float | None) -> str:
    return f"{v:.2f}x" if v is not None else ""


def percentiles(us: np.ndarray) -> dict[str, float]:
    return {
        "p50": float(np.percentile(us, 50)), "p99": float(np.percentile(us, 99)),
        "p999": float(np.percentile(us, 99.9)), "max": float(us.max()), "min": float(us.min()),
        "mean": float(us.mean()),
    }
