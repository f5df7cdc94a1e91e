"""Where a thread's time went while it made no progress (native/engine/off_cpu.h).

The capacity sweep's driver threads and the dispatcher's worker tick an ``OffCpuMeter`` as they
go; an interval of ``WATCH_GAP_US`` or more between two ticks is a *gap*, split by the thread's
own accounting: ``ran`` (on a CPU: its code, a driver call, an interrupt), ``queued`` (runnable,
waiting while another thread of the guest had its CPU) and ``away`` (the rest). Away time of a
thread that was never switched out is time its vCPU stopped beneath the guest: the hypervisor ran
something else there (the kernel counts it as steal, not run time, with
CONFIG_PARAVIRT_TIME_ACCOUNTING; the GPU machine's kernel has it). Away time of a thread that was
switched out is sleep: a lock or a system call that blocked. :func:`within` sums the gaps around
a miss episode (studies/capacity), so an episode says whether a thread that had to run was
stopped beneath the guest, preempted inside it, asleep, or running and slow.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

COLUMNS = ("at_ns", "gap_ns", "window_ns", "ran_ns", "queued_ns", "switches")
WATCH_GAP_US = 200.0   # what counts as a gap (the dispatcher's slow step is 200 us too)
KINDS = ("stolen", "queued", "asleep", "ran")
KIND_WORDS = {"stolen": "stopped beneath the guest", "queued": "preempted in the guest",
              "asleep": "asleep (a lock or a system call)", "ran": "running"}

Gaps = list[tuple[str, np.ndarray]]   # (whose: "driver 0", "dispatcher", ...; rows of COLUMNS)


def split(row: np.ndarray | Iterable[int]) -> dict[str, Any]:
    """One gap's time, us: ran, queued, away (window - ran - queued), and its kind: the largest
    share, away being *stolen* (never switched out) or *asleep* (switched out)."""
    at, gap, window, ran, queued, switches = (int(v) for v in row)
    away = max(0, window - ran - queued)
    kind = ("stolen" if switches == 0 else "asleep") if away >= max(ran, queued) else \
        ("queued" if queued >= ran else "ran")
    return {"at_ns": at, "gap_us": gap / 1e3, "window_us": window / 1e3, "ran_us": ran / 1e3,
            "queued_us": queued / 1e3, "away_us": away / 1e3, "switches": switches, "kind": kind}


def within(gaps: Gaps | None, t0_ns: int, t1_ns: int) -> dict[str, Any] | None:
    """The gaps that overlap [t0_ns, t1_ns] (CLOCK_MONOTONIC), over every thread: how many; the
    most time one of them was stopped beneath the guest (``stolen_us``: away, never switched
    out), preempted in the guest (``queued_us``), asleep (``asleep_us``) or running without
    progress (``ran_us``); and the longest gap with whose it was. None: no thread was watched."""
    if gaps is None:
        return None
    out: dict[str, Any] = {"gaps": 0, "stolen_us": 0.0, "queued_us": 0.0, "asleep_us": 0.0, "ran_us": 0.0,
                           "longest": None}
    for who, rows in gaps:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, len(COLUMNS))
        hit = rows[(rows[:, 0] < t1_ns) & (rows[:, 0] + rows[:, 1] > t0_ns)]
        for r in hit:
            g = split(r)
            out["gaps"] += 1
            away_key = "stolen_us" if g["switches"] == 0 else "asleep_us"
            out[away_key] = max(out[away_key], round(g["away_us"], 1))
            out["queued_us"] = max(out["queued_us"], round(g["queued_us"], 1))
            out["ran_us"] = max(out["ran_us"], round(g["ran_us"], 1))
            if out["longest"] is None or g["gap_us"] > out["longest"]["gap_us"]:
                out["longest"] = {"who": who, **{k: (round(v, 1) if isinstance(v, float) else v)
                                                 for k, v in g.items() if k != "at_ns"}}
    return out


def summary(gaps: Gaps | None, t0_ns: int | None = None, t1_ns: int | None = None) -> dict[str, Any] | None:
    """A run's gaps (those overlapping [t0_ns, t1_ns] when given): how many of each kind, the
    longest of each kind (us), and how many per thread."""
    if gaps is None:
        return None
    by = {k: 0 for k in KINDS}
    longest = {k: 0.0 for k in KINDS}
    per: dict[str, int] = {}
    for who, rows in gaps:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, len(COLUMNS))
        if t0_ns is not None and t1_ns is not None:
            rows = rows[(rows[:, 0] < t1_ns) & (rows[:, 0] + rows[:, 1] > t0_ns)]
        per[who] = int(rows.shape[0])
        for r in rows:
            g = split(r)
            by[g["kind"]] += 1
            longest[g["kind"]] = max(longest[g["kind"]], round(g["gap_us"], 1))
    return {"gap_us": WATCH_GAP_US, "by_kind": by, "longest_us": longest, "per_thread": per}


def words(ep_off: dict[str, Any] | None) -> str:
    """An episode's gaps in a few words (the capacity report's episode lines)."""
    if not ep_off or not ep_off.get("gaps"):
        return "no watched thread stopped"
    g = ep_off["longest"]
    return (f"longest gap {g['gap_us']:.0f} us on the {g['who']} ({KIND_WORDS[g['kind']]}: ran {g['ran_us']:.0f}, "
            f"queued {g['queued_us']:.0f}, away {g['away_us']:.0f} us, switched in {g['switches']}x)")
