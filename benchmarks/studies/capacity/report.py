"""The capacity sweep's report: one point per run, admission's predictions, and the report itself
(the headline, the verdicts against the targets and admission, Markdown and JSON)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pygpukit_dsp.admission import DEFAULT_POLICY, dispatch_busy_max
from pygpukit_dsp.bench.stall_probe import EPISODE_GAP_NS

from .. import off_cpu
from .settings import (ALIGNED, CAUSE_WORDS, EPISODE_CAUSES, FLOOR, FLOOR_ALIGNED, NOT_MUCH_EARLIER, SESSION_ALIGNED,
                       TARGET_RATIO, TARGET_STREAMS, deadline_key)


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
        return self.status == "ok" and self.blocks > 0 and self.misses.get(deadline_key(deadline_ms), 1) == 0


def process_misses(p: "CapacityPoint", deadline_ms: float) -> int | None:
    """The misses over ``deadline_ms`` of a run that its episodes blame on the process (None: its
    misses there were not sorted into episodes)."""
    when = p.extra.get("misses_when_at", {}).get(deadline_key(deadline_ms))
    if when is None and deadline_key(deadline_ms) == max(p.misses, key=float, default=None):
        when = p.extra.get("misses_when")  # a run's JSON that sorted only the longest deadline's (older reports)
    if when is None or "by_cause" not in when:
        return None
    return int(when["by_cause"].get("process", 0))


def verdict(predicted: int, held: int, missed: int | None) -> str:
    """Where admission's ``predicted`` N falls against the largest N that held and the least N
    above it that missed (None: none did). "a little earlier": it refuses an N that held, but by
    less than NOT_MUCH_EARLIER of it (the target: "where misses begin, and not much earlier"; the
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
    reach_us: dict[str, float] = field(default_factory=dict)      # N -> the rehearsal's latency tail within the policy's tail_horizon_s

    def deciding(self, key: str) -> list[int]:
        """The rehearsals that decided the N admitted at deadline ``key``: that N (where it was
        rehearsed) and the least N above it that was rehearsed (and refused)."""
        costs, n = self.rehearsed_us.get(key, {}), self.streams.get(key)
        above = sorted(int(m) for m in costs if n is not None and int(m) > n)
        return ([n] if str(n) in costs else []) + above[:1]


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
        process's. Beside the headline, not instead of it: the target counts every miss."""
        d = self.deadlines_ms[0] if deadline_ms is None else deadline_ms
        ok = [p.n for p in self.points
              if p.impl == impl and p.phase == "confirm" and p.status == "ok" and p.blocks > 0
              and process_misses(p, d) == 0]
        return max(ok) if ok else None

    def headline(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for d in self.deadlines_ms:
            proj, torch = self.capacity("pygpukit-dsp", d), self.capacity("torch-graph", d)
            out[deadline_key(d)] = {"pygpukit-dsp": proj, "torch-graph": torch,
                            "ratio": (proj / torch) if proj and torch else None,
                            "pygpukit-dsp_coarse": self.capacity("pygpukit-dsp", d, "coarse"),
                            "torch-graph_coarse": self.capacity("torch-graph", d, "coarse")}
        return out

    def floor_verdict(self) -> dict[str, Any] | None:
        """The floor's confirmation at TARGET_STREAMS (None: it did not run): its misses at the
        period and their causes; ``below_machine`` when it missed: the target was below what this
        machine allowed in this run."""
        d = deadline_key(self.deadlines_ms[0])
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
        if pred is None or (held is None and held_p is None) or deadline_key(deadline_ms) not in pred.streams:
            return None
        n = pred.streams[deadline_key(deadline_ms)]
        out: dict[str, Any] = {"predicted": n, "held": held, "missed": None, "verdict": None, "fraction": None}
        if held is not None:
            above = [p.n for p in self.points if p.impl == impl and p.status == "ok" and p.blocks > 0
                     and p.n > held and not p.zero_misses(deadline_ms)]
            missed = min(above) if above else None
            out.update({"missed": missed, "verdict": verdict(n, held, missed), "fraction": n / held})
        if held_p is not None and (held is None or held_p > held):
            # the same with only the misses the process is blamed for (episode_cause): a host
            # slowdown or stall is not something admission, which budgets the GPU, can refuse
            above_p = [p.n for p in self.points if p.impl == impl and p.status == "ok" and p.blocks > 0
                       and p.n > held_p and process_misses(p, deadline_ms) != 0 and not p.zero_misses(deadline_ms)]
            missed_p = min(above_p) if above_p else None
            out["process"] = {"held": held_p, "missed": missed_p, "verdict": verdict(n, held_p, missed_p),
                              "fraction": n / held_p}
        return out

    def no_verdict(self, deadline_ms: float) -> dict[str, Any] | None:
        """The Session's prediction at a deadline where no confirmation run held, counting every
        miss or only the process's: ``predicted``, and each confirmed N's ``misses``, their
        ``episodes`` and the process's share (``process``; None where not sorted) in ``runs``
        (misses at every N alike are not where a capacity begins). None: no prediction or no
        confirmation run."""
        key = deadline_key(deadline_ms)
        pred = next((p for p in self.predictions if p.how == "session"), None)
        runs = sorted((p for p in self.points if p.impl == "pygpukit-dsp" and p.phase == "confirm"
                       and p.status == "ok" and p.blocks > 0), key=lambda p: p.n)
        if pred is None or not runs or key not in pred.streams:
            return None
        return {"predicted": pred.streams[key],
                "runs": [{"n": p.n, "misses": p.misses.get(key, 0),
                          "episodes": p.extra.get("misses_when_at", {}).get(key, {}).get("episodes"),
                          "process": process_misses(p, deadline_ms)} for p in runs]}

    def _no_verdict_line(self, deadline_ms: float) -> str | None:
        nv = self.no_verdict(deadline_ms)
        if nv is None:
            return None

        def one(r: dict[str, Any]) -> str:
            eps = r["episodes"]
            return (f"N={r['n']}: {r['misses']}" +
                    (f" in {eps} episode{'s' if eps != 1 else ''}" if eps is not None else "") +
                    (f", {r['process']} the process's" if r["process"] is not None else ""))

        return (f"- admission at {deadline_ms:.2f} ms (the Session's calibration and rehearsal, the streams' "
                f"staggered phases declared): predicted {nv['predicted']} streams; no confirmation "
                f"run held at this deadline, counting every miss or the process's: " + "; ".join(one(r) for r in nv["runs"]))

    def target_records(self) -> list[dict[str, Any]]:
        """The two targets: ``key`` (``streams``: TARGET_STREAMS W1 streams with zero misses at the
        period over the confirmation; ``torch_ratio``: TARGET_RATIO x the streams PyTorch + CUDA
        graph holds), ``met`` (None: not measured or undecided), ``value`` and ``limit``. The
        streams target's ``floor``: where the project held fewer than the target, what the floor's
        confirmation at TARGET_STREAMS says (``reading``: ``below_machine``, it missed: the target
        was below what this machine allowed in this run; ``project_missed``: it held, the miss is
        the project's; ``sweep_stopped``: it held, and the project missed nothing up to ``top``
        streams, where its sweep stopped), else None. The ratio's ``torch_bound``: PyTorch held no
        N over the confirmation, so it holds fewer than the smallest N it missed at (``n``,
        ``where``: ``smallest_of_ladder``, ``confirm`` or ``coarse``) and the ratio is more than
        ``bound``; else None."""
        d = deadline_key(self.deadlines_ms[0])
        h = self.headline().get(d, {})
        proj, ratio = h.get("pygpukit-dsp"), h.get("ratio")
        secs = self.settings.get("confirm_s", 0)
        floor = None
        fv = self.floor_verdict()
        if fv is not None and (proj is None or proj < TARGET_STREAMS):
            floor = {"n": fv["n"], "seconds": fv["seconds"], "misses": fv["misses"]}
            if fv["below_machine"]:
                floor["reading"] = "below_machine"
            elif any(p.impl == "pygpukit-dsp" and p.status == "ok" and p.blocks > 0
                     and not p.zero_misses(self.deadlines_ms[0]) for p in self.points):
                floor["reading"] = "project_missed"
            else:
                floor["reading"] = "sweep_stopped"
                floor["top"] = max((p.n for p in self.points if p.impl == "pygpukit-dsp" and p.status == "ok"),
                                   default=0)
        rmet = None if ratio is None else ratio >= TARGET_RATIO
        bound = None
        missed = self.torch_missed_smallest()
        if ratio is None and proj and h.get("torch-graph") is None and missed:
            # no N confirmed for PyTorch: it holds fewer than the smallest N it missed at
            n, phase = missed
            ladder = self.settings.get("torch_ladder") or []
            bound = {"n": n, "where": "smallest_of_ladder" if ladder and n == ladder[0] else phase,
                     "bound": proj / n, "project": proj}
            rmet = True if bound["bound"] >= TARGET_RATIO else None
        return [{"key": "streams",
                 "name": f">= {TARGET_STREAMS} W1 streams with zero misses at {self.deadlines_ms[0]:.2f} ms over {secs:g} s",
                 "met": None if proj is None else proj >= TARGET_STREAMS, "value": proj, "limit": TARGET_STREAMS,
                 "floor": floor},
                {"key": "torch_ratio", "name": f">= {TARGET_RATIO:g}x the streams PyTorch + CUDA graph holds",
                 "met": rmet, "value": ratio, "limit": TARGET_RATIO, "torch_bound": bound}]

    def targets(self) -> list[tuple[str, bool | None, str]]:
        """target_records() as (name, met, detail in words)."""
        streams, torch = self.target_records()
        detail = "not measured" if streams["value"] is None else f"{streams['value']} streams"
        f = streams["floor"]
        if f is not None:
            detail += {"below_machine": f"; the floor (bare round trips, no pipeline) missed {f['misses']} blocks at "
                                        f"{f['n']} streams over {f['seconds']:g} s in this run: the target was below "
                                        "what this machine allowed in this run",
                       "project_missed": f"; the floor held {f['n']} streams with zero misses over {f['seconds']:g} s "
                                         "in this run: the miss is the project's",
                       "sweep_stopped": f"; the floor held {f['n']} streams with zero misses over {f['seconds']:g} s "
                                        f"in this run, and the project missed nothing up to {f.get('top')} streams, "
                                        "where its sweep stopped"}[f["reading"]]
        b = torch["torch_bound"]
        if b is not None:
            where = {"smallest_of_ladder": "the smallest of its ladder", "confirm": "over the confirmation",
                     "coarse": "in the coarse sweep"}[b["where"]]
            rdetail = (f"PyTorch + graph held no N over the confirmation (it missed at {b['n']} streams, {where}; it "
                       f"holds fewer): more than {b['project']}/{b['n']} = {b['bound']:.1f}x")
        else:
            rdetail = "not measured" if torch["value"] is None else f"{torch['value']:.2f}x"
        return [(streams["name"], streams["met"], detail), (torch["name"], torch["met"], rdetail)]

    def aligned_verdict(self) -> dict[str, Any] | None:
        """Admission at the shortest deadline against the ALIGNED runs (every phase 0: all blocks
        released at once), judged against SESSION_ALIGNED's prediction where there is one (how the
        Session rehearses streams that declare no phase), else the session's (``how``):
        admission_verdict()'s keys; where no aligned N held over its confirmation, ``held`` is None
        and ``missed`` the least aligned N that missed (``verdict`` "later" when the prediction
        admits it). None: nothing to judge."""
        d = min(self.deadlines_ms)
        how = SESSION_ALIGNED if any(p.how == SESSION_ALIGNED for p in self.predictions) else "session"
        v = self.admission_verdict(d, how=how, impl=ALIGNED)
        missed = sorted(p.n for p in self.points if p.impl == ALIGNED and p.status == "ok" and p.blocks > 0
                        and not p.zero_misses(d))
        if v is not None:
            v = {**v, "how": how, "deadline_ms": d}
            if v["held"] is None:
                v["missed"] = missed[0] if missed else None
            return v
        pred = next((p for p in self.predictions if p.how == how), None)
        if not missed or pred is None or deadline_key(d) not in pred.streams:
            return None
        n = pred.streams[deadline_key(d)]
        return {"predicted": n, "held": None, "missed": missed[0], "verdict": "later" if n >= missed[0] else None,
                "fraction": None, "how": how, "deadline_ms": d}

    def aligned_blamed(self) -> list[dict[str, Any]]:
        """The ALIGNED runs that missed at the shortest deadline, with the misses their episodes
        blame on the process (``process``; None where not sorted); [] when no aligned run's misses
        were sorted into episodes."""
        d = min(self.deadlines_ms)
        if not any(p.impl == ALIGNED and "misses_when_at" in p.extra for p in self.points):
            return []
        return [{"n": n, "phase": ph, "process": m} for n, ph, m in sorted(
            (p.n, p.phase, process_misses(p, d)) for p in self.points
            if p.impl == ALIGNED and p.status == "ok" and p.blocks > 0 and not p.zero_misses(d))]

    def aligned_beside_floor(self) -> list[dict[str, Any]]:
        """Each coarse ALIGNED run beside the floor released at once (FLOOR_ALIGNED) at the same N:
        their p50, p99.9 and misses at the shortest deadline."""
        k = deadline_key(min(self.deadlines_ms))

        def figures(p: CapacityPoint) -> dict[str, Any]:
            return {"p50_us": p.p50_us, "p999_us": p.p999_us, "misses": p.misses.get(k, 0)}
        return [{"n": a.n, "project": figures(a), "floor": figures(f)}
                for a in self.points if a.impl == ALIGNED and a.phase == "coarse" and a.blocks
                for f in self.points if f.impl == FLOOR_ALIGNED and f.n == a.n and f.status == "ok" and f.blocks]

    def episode_runs(self) -> dict[str, list[CapacityPoint]]:
        """Deadline -> the runs whose misses over it were sorted into episodes (at least one)."""
        out: dict[str, list[CapacityPoint]] = {}
        for key in (deadline_key(d) for d in self.deadlines_ms):
            runs = [p for p in self.points if p.extra.get("misses_when_at", {}).get(key, {}).get("episodes")]
            if runs:
                out[key] = runs
        return out

    def dispatcher_slow_steps(self) -> list[dict[str, Any]]:
        """The runs whose dispatcher had steps that held its lock 200 us or more: by kind, how many
        (``count``) and the longest (``longest_us``)."""
        out = []
        for p in self.points:
            d = p.extra.get("dispatch") or {}
            if any(d.get("slow_steps", {}).values()):
                out.append({"impl": p.impl, "n": p.n, "phase": p.phase,
                            "steps": {k: {"count": n, "longest_us": d["longest_step_ns"][k] / 1e3}
                                      for k, n in d["slow_steps"].items() if n}})
        return out

    def dispatcher_per_block(self) -> list[dict[str, Any]]:
        """The dispatcher's time under its lock per block launched, us, by step and in all
        (``us``), for each run that timed its steps."""
        out = []
        for p in self.points:
            d = p.extra.get("dispatch") or {}
            if d.get("step_ns") and d.get("launches"):
                per = {k: v / d["launches"] / 1e3 for k, v in d["step_ns"].items()}
                out.append({"impl": p.impl, "n": p.n, "phase": p.phase, "us": sum(per.values()), "steps_us": per})
        return out

    def markdown(self) -> str:
        keys = [deadline_key(d) for d in self.deadlines_ms]
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
        for key, episodes in self.episode_runs().items():
            lines += ["", f"When the misses over {key} ms happened (misses within "
                          f"{EPISODE_GAP_NS // 1_000_000} ms of each other are one episode; the stall probe's longest "
                          "gap in it: a thread on another CPU that only reads the clock; the watched threads' longest "
                          "gap: a driver thread or the dispatcher's worker making no progress, benchmarks/studies/off_cpu.py):", ""]
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
        timed = self.dispatcher_per_block()
        if timed:
            def per_block(t: dict[str, Any]) -> str:
                return f"{t['us']:.1f} (" + ", ".join(f"{k} {v:.1f}" for k, v in t["steps_us"].items()) + ")"
            lines += ["", "The dispatcher's time under its lock per block launched, us (take_posts: the scheduler's "
                          "submit; poll: the completions; decide: the scheduler's next; launch: the event records and "
                          "the graph launch): " + "; ".join(f"{t['impl']} N={t['n']} {t['phase']} {per_block(t)}"
                                                            for t in timed)]
        slow = self.dispatcher_slow_steps()
        if slow:
            def kinds(r: dict[str, Any]) -> str:
                return ", ".join(f"{k} {v['count']} (longest {v['longest_us']:.0f} us)" for k, v in r["steps"].items())
            lines += ["", "Dispatcher steps that held its lock 200 us or more (every hand-over waited behind them), "
                          "by kind: " + "; ".join(f"{r['impl']} N={r['n']} {r['phase']}: {kinds(r)}" for r in slow)]
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
            shown = p.deciding(k)
            def rehearsed(m: int) -> str:
                beside = ([f"dispatcher {p.dispatch_us[str(m)]:.1f}"] if str(m) in p.dispatch_us else []) + \
                         ([f"{p.overlap[str(m)]:.2f} blocks at once on the GPU"] if str(m) in p.overlap else []) + \
                         ([f"tail reaches {p.reach_us[str(m)] / 1e3:.2f} ms"] if str(m) in p.reach_us else [])
                return f"{costs[str(m)]:.1f} us among {m}" + (f" ({', '.join(beside)})" if beside else "")

            among = ("; rehearsed: " + ", ".join(rehearsed(m) for m in shown)) if shown else ""
            why = f"; the next refused: {p.reason[k]}" if p.reason.get(k) else ""
            return f"{'' if n is None else n} ({p.cost_us:.1f} us device{alone}{among}{why})"

        for d in self.deadlines_ms:
            h = self.headline()[deadline_key(d)]
            cells = [cell(pred.get(how), deadline_key(d)) for how in ("session", "gpu")]
            ratio = f"{h['ratio']:.2f}x" if h["ratio"] else ""
            lines.append(f"| {d:.2f} ms | {h['pygpukit-dsp'] or '-'} [{h['pygpukit-dsp_coarse'] or '-'}] | "
                         f"{h['torch-graph'] or '-'} [{h['torch-graph_coarse'] or '-'}] | {ratio} | {cells[0]} | {cells[1]} |")
        lines += ["", "Targets:"]
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
        va = self.aligned_verdict()
        if va is not None:
            what = (f"- admission at {d_short:.2f} ms against the same streams with every phase 0 (all blocks released "
                    "at once: what its response bound assumes for streams that declare no phase, and how they are "
                    "rehearsed)" if va["how"] == SESSION_ALIGNED else
                    f"- admission at {d_short:.2f} ms against the same streams with every phase 0 (all blocks released "
                    "at once: what its response bound assumes, since nothing fixes the phases of a session's streams)")
            if va["held"] is not None:
                beyond = f", and missed at {va['missed']}" if va["missed"] is not None else \
                    " (no larger N missed in its sweep)"
                held_words = f"they held {va['held']}{beyond}: {words(va)}"
            else:
                held_words = ("they held no N over the confirmation"
                              + (f", and missed at {va['missed']}" if va["missed"] is not None else "")
                              + (": it admits an N that missed" if va["verdict"] == "later" else ""))
            lines.append(f"{what}: predicted {va['predicted']}; {held_words}")
            if "process" in va:
                lines.append(process_line(va["process"], ": they"))
        blamed = self.aligned_blamed()
        if blamed:
            lines.append(f"  - the aligned runs' misses at {d_short:.2f} ms the process is blamed for: "
                         + ", ".join(f"N={b['n']} {b['phase']} {'-' if b['process'] is None else b['process']}"
                                     for b in blamed))
        pairs = self.aligned_beside_floor()
        if pairs:
            lines.append("  - released at once, the project beside the floor (bare round trips, no pipeline, no "
                         "scheduler), p50 / p99.9 us and misses at " + f"{d_short:.2f} ms: " + "; ".join(
                             f"N={q['n']} {q['project']['p50_us']:.0f} / {q['project']['p999_us']:.0f} "
                             f"({q['project']['misses']}) against {q['floor']['p50_us']:.0f} / "
                             f"{q['floor']['p999_us']:.0f} ({q['floor']['misses']})" for q in pairs))
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
                      f"rehearsal's latency from release reaches within {DEFAULT_POLICY.tail_horizon_s:g} s (admission.LatencyTail)."]
        lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["headline"] = self.headline()
        d["capacity_not_blamed"] = self.capacity_not_blamed()
        d["floor_verdict"] = self.floor_verdict()
        d["targets"] = [{**r, "detail": t} for r, (_, _, t) in zip(self.target_records(), self.targets())]
        d["admission"] = {deadline_key(x): self.admission_verdict(x) for x in self.deadlines_ms}
        d["no_verdict"] = {deadline_key(x): self.no_verdict(x) for x in self.deadlines_ms
                           if self.admission_verdict(x) is None}
        d["aligned_verdict"] = self.aligned_verdict()
        return d


# ----------------------------------------------------------------------------- helpers
