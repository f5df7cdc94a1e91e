"""The Python garbage collector's pauses during a benchmark run.

A collection runs on whichever thread allocated past the collector's threshold, holding the GIL
for as long as it takes to walk its generations: with PyTorch and CuPy imported a full one walks
hundreds of thousands of objects. A paced block whose Python side ran into one is late for a
reason inside the process. :class:`GcPauses` records every collection's start, end and generation
(``gc.callbacks``) so that a miss can be checked against them (contention.miss_causes)."""

from __future__ import annotations

import gc
import time
from typing import Any

import numpy as np


class GcPauses:
    """``with GcPauses() as p: ...``; then ``p.spans()``: (starts, ends, generations) in
    ``time.perf_counter_ns`` ns, one entry per collection inside the block."""

    def __init__(self) -> None:
        self._events: list[tuple[int, int, int]] = []  # (start, end, generation)
        self._started: int | None = None

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        now = time.perf_counter_ns()
        if phase == "start":
            self._started = now
        elif self._started is not None:
            self._events.append((self._started, now, int(info.get("generation", -1))))
            self._started = None

    def __enter__(self) -> "GcPauses":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            gc.callbacks.remove(self._callback)
        except ValueError:
            pass

    def spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ev = np.asarray(self._events, dtype=np.int64).reshape(-1, 3)
        return ev[:, 0], ev[:, 1], ev[:, 2]


def overlap_ns(spans: tuple[np.ndarray, np.ndarray, np.ndarray] | None, a: int, b: int) -> tuple[int, int]:
    """How long collections ran inside [a, b] (ns), and the oldest generation among them (-1: none)."""
    if spans is None:
        return 0, -1
    s, e, g = spans
    hit = (s < b) & (e > a)
    if not hit.any():
        return 0, -1
    return int((np.minimum(e[hit], b) - np.maximum(s[hit], a)).sum()), int(g[hit].max())
