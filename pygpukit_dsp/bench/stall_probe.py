"""Whose miss is it: the stall probe and the rules the benchmarks blame a late block by.

The probe (``_native.instrument.StallProbe``, native/engine/paced.cpp) is a thread that only reads the clock
and records every gap between two reads of PROBE_THRESHOLD_US or more: time the host did not run
it. Run beside a benchmark (W3's W1, each capacity run), a gap of HOST_STALL_US or more while a
block was late says the host stalled (nothing in the process can fix that). A late block whose
fixed CPU work (plain copies: no lock, no wait) ran HOST_SLOW_FACTOR times its median or more,
and HOST_SLOW_MIN_US more, is a host slowdown: the CPU under its thread ran slow, which a probe on
another CPU cannot see. Used by w3_project.miss_causes (W3) and the capacity study
(benchmarks/studies/capacity: episode_cause)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..affinity import reserved_cpus, spare_cpu

PROBE_THRESHOLD_US = 50.0   # the probe records its gaps from this long
HOST_STALL_US = 100.0       # a probe gap this long during a late block: the host stalled (not the process)
HOST_SLOW_FACTOR = 3.0      # fixed CPU work this many times its median (and >= HOST_SLOW_MIN_US more): the CPU ran slow
HOST_SLOW_MIN_US = 20.0
EPISODE_GAP_NS = 20_000_000   # misses closer than this in release time are one episode (one host event)


def start_probe() -> Any:
    """A started probe, on the spare CPU when a stream holds a reserved one (affinity.py); None
    where the native module has no probe."""
    try:
        from .._native import instrument

        probe = instrument.StallProbe(PROBE_THRESHOLD_US, spare_cpu() if reserved_cpus() else -1)
        probe.start()
        return probe
    except (ImportError, AttributeError):
        return None


def stop_probe(probe: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """Stops it; (starts, lengths) of its gaps in ns (CLOCK_MONOTONIC), None without a probe."""
    if probe is None:
        return None
    starts, lengths = probe.stop()
    return np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
