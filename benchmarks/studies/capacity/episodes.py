"""When and why a capacity run missed: its misses grouped into episodes, each with its cause (a host
slowdown, a host stall or the process's), the steal and the watched threads' gaps around it."""

from __future__ import annotations

from typing import Any

import numpy as np

from pygpukit_dsp.bench.stall_probe import EPISODE_GAP_NS, HOST_SLOW_FACTOR, HOST_STALL_US
from pygpukit_dsp.bench.steal import StealSampler

from .. import off_cpu
from .settings import CPU_FULL, DISPATCHER_FULL, EPISODE_CAUSES, GPU_FULL


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
    # which load it was (``own_load`` on each episode it made the process's; cause_note in words)
    if gpu_busy is not None and gpu_busy >= GPU_FULL:
        load: dict[str, Any] = {"by": "gpu_busy", "value": gpu_busy}
        note = f"GPU {gpu_busy:.0%} busy: the run's own load"
    elif dispatcher_busy is not None and dispatcher_busy >= DISPATCHER_FULL:
        load = {"by": "dispatcher_busy", "value": dispatcher_busy}
        note = f"the dispatcher's lock held {dispatcher_busy:.0%} of the time: the run's own load"
    elif cpu_cores is not None and cores and cpu_cores >= CPU_FULL * cores:
        load = {"by": "cpu_cores", "value": cpu_cores, "of": cores}
        note = f"the process used {cpu_cores:.1f} of {cores} CPUs: the run's own load"
    else:
        return
    for ep in when["list"]:
        if ep["cause"] != "process":
            ep["cause"], ep["cause_note"], ep["own_load"] = "process", note, dict(load)
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
    ``steal``: the steal time sampled during the run (pygpukit_dsp/bench/steal.py): each episode gets the steal
    on every CPU around it (the hypervisor running something else on this guest's vCPUs).
    ``gaps``: the watched threads' gaps (studies/off_cpu.py): each episode gets those from a deadline
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
