"""Admission of a session's streams by the Rust scheduler, before any block flows.

Every stream is registered with one ``pygpukit_dsp_core.Scheduler`` under its QoS class. A
realtime stream (and a throughput stream with ``min_rate``) needs its per-block cost: the
declared ``qos.cost_us``, or one measured here by running a few blocks of zeros through the
opened engine (then its state is reset). A refusal is an AdmissionError carrying the scheduler's
figures (utilisation of the stream, total already admitted, the bound, and for the response
bound the costs and the shortest deadline), raised before the first block.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from .errors import AdmissionError

if TYPE_CHECKING:
    from .runner import StreamRunner

CALIBRATION_BLOCKS = 8


def measure_block_cost_ns(runner: "StreamRunner", blocks: int = CALIBRATION_BLOCKS) -> int:
    """The slowest of ``blocks`` full blocks of zeros through the runner's engine (after one warm-up)."""
    spec = runner.chain.input
    x = np.zeros(spec.block_shape, spec.np_dtype)
    engine = runner.engine
    engine.process(x)
    worst = 0
    for _ in range(blocks):
        t0 = time.perf_counter_ns()
        engine.process(x)
        worst = max(worst, time.perf_counter_ns() - t0)
    engine.reset()
    return max(1, worst)


def admit(runners: list["StreamRunner"], *, u_max: float = 0.9):
    """Register every runner's stream with a new scheduler; AdmissionError on the first refusal."""
    from pygpukit_dsp_core import AdmissionRefused, Scheduler

    sched = Scheduler(u_max=u_max)
    for r in runners:
        p, spec, q = r.pipeline, r.chain.input, r.pipeline.qos
        kw: dict[str, int | float] = {}
        deadline_ns = max(1, round(q.deadline_s(spec.block_period) * 1e9))
        if q.cls == "realtime":
            kw.update(period_ns=int(spec.block_period * 1e9), deadline_ns=deadline_ns)
        elif q.deadline_ms is not None:
            kw["deadline_ns"] = deadline_ns
        if q.cls == "throughput" and q.min_rate is not None:
            kw["min_rate_hz"] = q.min_rate / spec.block_size
        needs_cost = q.cls == "realtime" or "min_rate_hz" in kw
        if q.cost_us is not None:
            kw["cost_ns"] = int(q.cost_us * 1e3)
        elif needs_cost:
            kw["cost_ns"] = measure_block_cost_ns(r)
        r.admitted_cost_ns = kw.get("cost_ns")
        try:
            sched.register_stream(p.name, q.cls, **kw)
        except AdmissionRefused as e:
            figures = dict(e.figures)
            figures["cost_source"] = "declared (qos.cost_us)" if q.cost_us is not None else "measured"
            raise AdmissionError(p.name, str(e).removeprefix(f"stream '{p.name}' not admitted: "),
                                 figures) from None
    return sched
