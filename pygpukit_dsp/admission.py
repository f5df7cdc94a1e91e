"""Admission of a session's streams by the Rust scheduler, before any block flows.

Every stream is registered under its QoS class with the scheduler of the device that runs its
blocks: one ``pygpukit_dsp_core.Scheduler`` for the session's CUDA streams (GPU 0) and one for
its CPU streams (the host's dispatcher thread, see backends/cpu_dispatch.py). The scheduler
models one device as one queue, so CPU work never counts against the GPU's utilisation bound
and each dispatcher only ever sees tasks of its own streams.

A realtime stream (and a throughput stream with ``min_rate``) needs its per-block cost: the
declared ``qos.cost_us``, or one measured here by running a few blocks of zeros through the
opened engine (then its state is reset). Every stream gets its QoS deadline (``deadline_ms``,
default one block period), so the scheduler counts misses as the QoS line reports them. A
refusal is an AdmissionError carrying the scheduler's figures (utilisation of the stream, total
already admitted on that device, the bound, and for the response bound the costs and the
shortest deadline), raised before the first block.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import AdmissionError, ConfigError

if TYPE_CHECKING:
    from pygpukit_dsp_core import Scheduler

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


def device_of(runner: "StreamRunner") -> str:
    """The device whose dispatcher runs the runner's blocks: "cpu" or "cuda"."""
    return runner.engine.choice.name


def units_per_block(runner: "StreamRunner") -> int:
    """Units the scheduler may split a block into: the CUDA engine's units for throughput and
    best-effort streams (paced chunk by chunk); 1 (whole blocks) for realtime and CPU streams."""
    if runner.pipeline.qos.cls == "realtime" or device_of(runner) != "cuda":
        return 1
    return max(1, int(getattr(runner.engine, "units_per_block", 1)))


def stream_registration(runner: "StreamRunner") -> dict[str, Any]:
    """The keyword arguments of ``Scheduler.register_stream`` for a runner (cost measured if needed)."""
    spec, q = runner.chain.input, runner.pipeline.qos
    kw: dict[str, Any] = {"deadline_ns": max(1, round(q.deadline_s(spec.block_period) * 1e9))}
    if q.cls == "realtime":
        kw["period_ns"] = max(1, int(spec.block_period * 1e9))
    if q.cls == "throughput" and q.min_rate is not None:
        kw["min_rate_hz"] = q.min_rate / spec.block_size
    needs_cost = q.cls == "realtime" or "min_rate_hz" in kw
    if q.cost_us is not None:
        kw["cost_ns"] = max(1, int(q.cost_us * 1e3))
    elif needs_cost:
        kw["cost_ns"] = measure_block_cost_ns(runner)
    kw["units_per_block"] = units_per_block(runner)
    return kw


def admit(runners: list["StreamRunner"], *, u_max: float = 0.9) -> dict[str, "Scheduler"]:
    """Register every runner's stream with its device's new scheduler, in order.

    Returns ``{"cpu": Scheduler, "cuda": Scheduler}`` for the devices in use (a stream's id is
    ``scheduler.stream_id(pipeline name)``). AdmissionError on the first refusal; ConfigError when
    two pipelines share a name (the scheduler and the QoS lines tell streams apart by name).
    """
    from pygpukit_dsp_core import AdmissionRefused, Scheduler

    seen: dict[str, "StreamRunner"] = {}
    for r in runners:
        name = r.pipeline.name
        if name in seen:
            raise ConfigError(f"two pipelines of the session are named '{name}'",
                              where=r.pipeline.where, hint="give every pipeline of a session a unique name")
        seen[name] = r

    schedulers: dict[str, Scheduler] = {}
    for r in runners:
        p, q = r.pipeline, r.pipeline.qos
        device = device_of(r)
        sched = schedulers.get(device)
        if sched is None:
            sched = schedulers[device] = Scheduler(u_max=u_max)
        kw = stream_registration(r)
        r.admitted_cost_ns = kw.get("cost_ns")
        try:
            sched.register_stream(p.name, q.cls, **kw)
        except AdmissionRefused as e:
            figures = dict(e.figures)
            figures["cost_source"] = "declared (qos.cost_us)" if q.cost_us is not None else "measured"
            figures["device"] = device
            raise AdmissionError(p.name, str(e).removeprefix(f"stream '{p.name}' not admitted: "),
                                 figures) from None
    return schedulers
