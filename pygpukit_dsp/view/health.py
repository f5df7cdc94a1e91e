"""The health panel's figures: each running stream's counters, read from a Session a few times a second.

Latency and misses are the scheduler's (hand-over to finish on the stream's dispatcher, as the run
summary's ``scheduler`` line); blocks are the runner's; xruns are what the stream's sound card (or
any source and sink) counted as overflows, underflows, ring overruns and underruns; busy is the
device time of the stream's blocks as a share of the wall time since it started (on the cpu
backend the engine's time on the host: the panel names the device it measured).
"""

from __future__ import annotations

import time
from typing import Any

from ..summary import SchedulerAccounting

XRUN_KEYS = ("input_overflows", "output_underflows", "ring_overruns", "ring_underruns")


def stream_health(name: str, live: dict[str, Any], sched: dict[str, Any] | None, device: str | None,
                  elapsed_s: float) -> dict[str, Any]:
    """One stream's row of the panel, from StreamRunner.live_stats and the scheduler's stream_stats."""
    source, sink = live.get("source_stats", {}), live.get("sink_stats", {})
    xruns = sum(int(d.get(k, 0)) for d in (source, sink) for k in ("overflows", "underflows"))
    audio = live.get("audio") or {}
    xruns += sum(int(audio.get(k) or 0) for k in XRUN_KEYS)
    host = live.get("latency_us", {})
    row: dict[str, Any] = {
        "stream": name, "blocks": int(live.get("blocks", 0)), "samples_in": int(live.get("samples_in", 0)),
        "xruns": xruns, "view_dropped": int(sink.get("view_dropped", 0)),
        "host_p50_us": round(float(host.get("p50", 0.0)), 1), "host_p99_us": round(float(host.get("p99", 0.0)), 1),
        "device": device, "elapsed_s": round(elapsed_s, 3),
    }
    if sched is not None and device is not None:
        acc = SchedulerAccounting.from_stats(device, sched)
        row.update(p50_us=round(acc.latency_us.get("p50", 0.0), 1), p99_us=round(acc.latency_us.get("p99", 0.0), 1),
                   misses=acc.missed, drops=acc.dropped, busy_ms=round(acc.busy_us / 1e3, 3),
                   busy=round(acc.busy_us / 1e6 / elapsed_s, 4) if elapsed_s > 0 else 0.0,
                   deadline_us=acc.deadline_us, latency_from="scheduler")
    else:  # before the dispatch started, or a stream the scheduler does not know: the runner's figures
        row.update(p50_us=row["host_p50_us"], p99_us=row["host_p99_us"], misses=int(live.get("misses", 0)),
                   drops=0, busy_ms=0.0, busy=0.0, deadline_us=None, latency_from="host")
    return row


class SessionHealth:
    """Reads a Session's streams; call it from any thread (the viewer's)."""

    def __init__(self, session: Any):
        self.session = session
        self._t0: float | None = None

    def __call__(self) -> dict[str, Any]:
        s = self.session
        live = s.live_stats()
        if live and self._t0 is None:
            self._t0 = time.monotonic()
        elapsed = time.monotonic() - self._t0 if self._t0 is not None else 0.0
        dispatch = s.dispatch
        rows = []
        for name, figures in live.items():
            sched = device = None
            if dispatch is not None:
                try:
                    device = dispatch.device_of(name)
                    sched = dispatch.stream_stats(name)
                except Exception:  # not attached yet, or its dispatcher failed: the runner's figures stand
                    sched = device = None
            rows.append(stream_health(name, figures, sched, device, elapsed))
        return {"streams": rows, "running": bool(live) and not s.stopping}
