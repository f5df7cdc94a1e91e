"""Steal time: CPU time the hypervisor gave to something else while this guest's vCPUs wanted to
run (the ``steal`` column of each ``cpuN`` line of /proc/stat, in USER_HZ ticks: 10 ms on most
kernels). A benchmark's misses that coincide with steal were imposed from beneath the guest;
nothing in the process can fix them. The stall probe (a thread that only reads the clock,
contention.py) sees a stall only on its own CPU; steal is counted on every CPU.

:func:`steal_ticks` reads it once (the paced bench takes it around its rotation);
:class:`StealSampler` samples it every ``interval_s`` from a thread (the capacity sweep, whose
runs are native and hold no GIL) so that each miss episode gets the steal inside it."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

PROC_STAT = "/proc/stat"
STEAL_FIELD = 8   # cpuN user nice system idle iowait irq softirq steal ...


def _tick_ms() -> float:
    try:
        return 1000.0 / os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return 10.0


TICK_MS = _tick_ms()


def steal_ticks(path: str = PROC_STAT) -> np.ndarray | None:
    """Each CPU's steal so far (ticks), None where the kernel does not report it."""
    try:
        with open(path) as f:
            rows = [line.split() for line in f if line.startswith("cpu") and line[3:4].isdigit()]
    except OSError:
        return None
    if not rows or any(len(r) <= STEAL_FIELD for r in rows):
        return None
    return np.array([int(r[STEAL_FIELD]) for r in rows], dtype=np.int64)


def steal_summary(before: np.ndarray | None, after: np.ndarray | None, wall_s: float) -> dict[str, Any]:
    """Steal between two readings: ms in all (every CPU), ms per wall second, and the CPU that lost most."""
    if before is None or after is None or before.shape != after.shape or wall_s <= 0:
        return {"available": False}
    d = (after - before) * TICK_MS
    cpu = int(np.argmax(d)) if d.size else -1
    return {"available": True, "ms": round(float(d.sum()), 1), "ms_per_s": round(float(d.sum()) / wall_s, 2),
            "max_cpu": cpu, "max_cpu_ms": round(float(d[cpu]), 1) if cpu >= 0 else 0.0}


class StealSampler:
    """Reads every CPU's steal every ``interval_s`` from a daemon thread until :meth:`stop`."""

    def __init__(self, interval_s: float = 0.01, path: str = PROC_STAT) -> None:
        self.interval_s, self.path = interval_s, path
        self.times: list[int] = []
        self.rows: list[np.ndarray] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.available = steal_ticks(path) is not None

    def start(self) -> "StealSampler":
        if self.available:
            self._thread = threading.Thread(target=self._run, name="steal-sampler", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            t, v = time.perf_counter_ns(), steal_ticks(self.path)
            if v is not None:
                self.times.append(t)
                self.rows.append(v)
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> "StealSampler":
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            v = steal_ticks(self.path)  # one reading at the end: the last moment of the run is covered
            if v is not None:
                self.times.append(time.perf_counter_ns())
                self.rows.append(v)
        return self

    def summary(self) -> dict[str, Any]:
        """Steal over the whole sampling."""
        if len(self.rows) < 2:
            return {"available": False}
        return steal_summary(self.rows[0], self.rows[-1], (self.times[-1] - self.times[0]) / 1e9)

    def within(self, t0_ns: int, t1_ns: int) -> dict[str, float] | None:
        """Steal in the samples around [t0, t1] (perf_counter_ns): ms in all and on the CPU that lost
        most; None without samples around it. One tick is the resolution: a stall shorter than
        a tick may show as 0 or as one tick."""
        if len(self.rows) < 2:
            return None
        t = np.asarray(self.times)
        a = max(0, int(np.searchsorted(t, t0_ns, side="right")) - 1)
        b = min(len(t) - 1, int(np.searchsorted(t, t1_ns, side="left")))
        if b <= a:
            return None
        d = (self.rows[b] - self.rows[a]) * TICK_MS
        return {"ms": round(float(d.sum()), 1), "max_cpu_ms": round(float(d.max()), 1)}
