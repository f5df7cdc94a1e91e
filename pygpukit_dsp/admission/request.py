"""The request a stream makes of its device's Rust scheduler, and the refusal rendered from its answer.

Layer: executor (admission). Imports the cost measurement, the policy and the errors; never the
bench. Python measures and builds the request here; the scheduler decides (register_stream).

Registration (``Scheduler.register_stream``'s keyword arguments, :func:`stream_registration`):
``period_ns`` (realtime: block size / sample rate), ``deadline_ns`` (``qos.deadline_ms``, default
one block period: every stream's, so the scheduler counts misses as the QoS line reports them),
``min_rate_hz`` (throughput: ``qos.min_rate / block_size``), ``cost_ns`` (``qos.cost_us``, else
measured when the class reserves time: the device time), ``latency_ns`` (realtime: the block's
latency alone when more than its cost), ``phase_ns`` (realtime: its release phase when the
Session staggers its clock), ``units_per_block``. After a rehearsal (admitting.py) a realtime
stream's request adds its dispatcher work per block (``dispatch_ns``) and its tail's reach
(``tail_reach_ns``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .cost import BlockCost, cost_key, measure_block_cost, units_per_block
from .policy import DEFAULT_POLICY, AdmissionPolicy

if TYPE_CHECKING:
    from pygpukit_dsp_core import Scheduler

    from ..runner import StreamRunner


@dataclass
class StreamRequest:
    """One stream's registration: the runner, the scheduler's keyword arguments, and where its
    cost came from."""

    runner: "StreamRunner"
    kw: dict[str, Any]
    measured: BlockCost | None = None   # what admission measured (or shared) for it
    measured_on: str | None = None      # the alike stream whose measurement it shares

    @property
    def name(self) -> str:
        return self.runner.pipeline.name

    @property
    def declared(self) -> bool:
        """Its cost is declared (``qos.cost_us``)."""
        return self.runner.pipeline.qos.cost_us is not None

    @property
    def cost_source(self) -> str | None:
        if self.declared:
            return "declared (qos.cost_us)"
        if self.measured_on:
            return f"measured on '{self.measured_on}' (the same kind of stream)"
        return "measured" if self.measured is not None else None


def stream_registration(runner: "StreamRunner", measured: dict[str, tuple[BlockCost, str]] | None = None,
                        phase_ns: int | None = None, policy: AdmissionPolicy = DEFAULT_POLICY) -> StreamRequest:
    """The runner's request (module doc; its cost measured if needed: ``cost_ns`` its device time,
    ``latency_ns`` its own latency alone). ``measured``: costs already measured in this admission,
    by :func:`cost_key`, with the stream they were measured on (read and filled). A declared
    ``qos.cost_us`` is the device time, and its latency."""
    spec, q = runner.chain.input, runner.pipeline.qos
    kw: dict[str, Any] = {"deadline_ns": max(1, round(q.deadline_s(spec.block_period) * 1e9))}
    if q.cls == "realtime":
        kw["period_ns"] = max(1, int(spec.block_period * 1e9))
    if q.cls == "throughput" and q.min_rate is not None:
        kw["min_rate_hz"] = q.min_rate / spec.block_size
    needs_cost = q.cls == "realtime" or "min_rate_hz" in kw
    req = StreamRequest(runner, kw)
    if q.cost_us is not None:
        kw["cost_ns"] = max(1, int(q.cost_us * 1e3))
    elif needs_cost:
        key = cost_key(runner) if measured is not None else None
        if measured is not None and key in measured:
            cost, req.measured_on = measured[key]
        else:
            cost = measure_block_cost(runner, policy=policy)
            if measured is not None and key is not None:
                measured[key] = (cost, runner.pipeline.name)
        req.measured = cost
        kw["cost_ns"] = cost.device_ns
        if q.cls == "realtime" and cost.latency_ns > cost.device_ns:
            kw["latency_ns"] = cost.latency_ns
    if q.cls == "realtime" and phase_ns is not None:
        kw["phase_ns"] = int(phase_ns)
    kw["units_per_block"] = units_per_block(runner)
    return req


def register(sched: "Scheduler", req: StreamRequest,
             kw: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]] | None:
    """Register ``req``'s stream (with ``kw``, default its own); None when admitted, else (the
    refusal's message, its figures: the scheduler's, where its cost came from and what was measured)."""
    from pygpukit_dsp_core import AdmissionRefused

    p = req.runner.pipeline
    try:
        sched.register_stream(p.name, p.qos.cls, **(req.kw if kw is None else kw))
    except AdmissionRefused as e:
        figures = dict(e.figures)
        figures["cost_source"] = req.cost_source or "measured"
        if not req.declared and req.measured is not None:
            figures["measured"] = req.measured.describe()
        return str(e).removeprefix(f"stream '{p.name}' not admitted: "), figures
    return None
