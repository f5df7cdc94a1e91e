"""Latency figures of one run (percentiles, deadline misses, overruns), shared by the W3 report
(bench/w3_report.py) and the paced bench (bench/cadence.py's PacedFigures)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class LatencyFigures:
    """W1 host wall-clock latency of one run (microseconds), and its deadline misses."""

    blocks: int
    p50: float
    p90: float
    p99: float
    p999: float
    max: float
    mean: float
    misses: int          # blocks over the deadline
    overruns: int = 0    # blocks that took longer than a period (the next one was handed over late)

    @classmethod
    def from_ns(cls, lat_ns: np.ndarray, deadline_ns: int, overruns: int = 0, **extra: Any) -> Any:
        """From latencies in ns; ``extra``: a subclass's own fields (bench/cadence.py's PacedFigures)."""
        us = np.asarray(lat_ns, dtype=np.float64) / 1e3
        p50, p90, p99, p999 = (float(v) for v in np.percentile(us, [50, 90, 99, 99.9]))
        return cls(blocks=int(us.size), p50=p50, p90=p90, p99=p99, p999=p999, max=float(us.max()),
                   mean=float(us.mean()), misses=int((np.asarray(lat_ns) > deadline_ns).sum()),
                   overruns=overruns, **extra)
