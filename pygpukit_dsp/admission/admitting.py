"""``admit``: a session's streams admitted by the Rust scheduler of their devices, before any block flows.

Layer: executor (admission). Imports the other admission modules, the device keys, the errors,
and when it runs the capabilities (the usable GPUs); never the bench.

Every stream is registered under its QoS class with the scheduler of the device that runs its
blocks: one ``pygpukit_dsp_core.Scheduler`` per GPU in use (device keys ``"cuda"`` for GPU 0,
``"cuda:1"``, ... for the others) and one for its CPU streams (the host's dispatcher thread). The
scheduler models one device's serial resources (its queue and, for a GPU, its dispatcher), so
CPU work never counts against a GPU's bounds, one GPU's streams never against another's, and each
dispatcher only ever sees tasks of its own streams.

Python measures and builds each request (request.py: the cost alone; rehearsal.py: the streams
of a crowded GPU together; calibrate.py: the machine's figures of the GPU), the scheduler decides,
and a refusal becomes an AdmissionError carrying the scheduler's figures, raised before the first
block. What was decided for each stream is its :class:`AdmissionResult`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..devices import device_of, gpu_of, is_gpu
from ..errors import AdmissionError, ConfigError
from .calibrate import calibration_for
from .calibration import Calibration
from .cost import cost_key
from .model import new_scheduler
from .phases import assign_phases
from .placement import Placement, fixed_placement, place, requested_device
from .policy import DEFAULT_POLICY, AdmissionPolicy
from .rehearsal import Rehearsal, RehearsalRun, crowded, gpu_share_ns, horizon_blocks, rehearse
from .request import StreamRequest, register, stream_registration
from .result import Admission, AdmissionResult

if TYPE_CHECKING:
    from pygpukit_dsp_core import Scheduler

    from ..runner import StreamRunner

CalibrationLookup = Callable[[int], Calibration]


def admit(runners: list["StreamRunner"], *, u_max: float | None = None, policy: AdmissionPolicy | None = None,
          gpus: Sequence[int] | None = None, calibration: CalibrationLookup | None = None) -> Admission:
    """Register every runner's stream with its device's new scheduler, in order; place
    ``device: auto`` streams on the GPU with the most headroom that admits them.

    Returns an :class:`Admission`: ``{"cpu": Scheduler, "cuda": Scheduler, "cuda:1": Scheduler,
    ...}`` for the devices in use (a stream's id is ``scheduler.stream_id(pipeline name)``), and
    each stream's :class:`AdmissionResult` (``.results``, by pipeline name). ``policy``: the
    tunables (default ``DEFAULT_POLICY``; ``u_max`` replaces its bound). ``gpus``: the GPUs auto
    may use (default: every usable GPU, ``capabilities.usable_gpus()``). ``calibration(gpu)``: a
    GPU's machine figures (default: its cached calibration, measured on first need:
    calibrate.calibration_for). AdmissionError on the first refusal (for an auto stream: refused
    by every GPU), its ``result`` the refused stream's; ConfigError when two pipelines share a
    name (the scheduler and the QoS lines tell streams apart by name).
    """
    policy = (policy or DEFAULT_POLICY).with_u_max(u_max)
    lookup = calibration or (lambda gpu: calibration_for(gpu, policy=policy))
    seen: set[str] = set()
    for r in runners:
        name = r.pipeline.name
        if name in seen:
            raise ConfigError(f"two pipelines of the session are named '{name}'",
                              where=r.pipeline.where, hint="give every pipeline of a session a unique name")
        seen.add(name)

    schedulers: dict[str, "Scheduler"] = {}
    measured: dict[str, tuple[Any, str]] = {}
    requests: list[StreamRequest] = []
    placements: dict[str, Placement] = {}
    phases = assign_phases(runners)
    for r in runners:
        device, requested = device_of(r), requested_device(r)
        req = stream_registration(r, measured, phases.get(r.pipeline.name), policy)
        requests.append(req)
        if is_gpu(device) and requested == "auto":
            if gpus is None:
                from ..capabilities import usable_gpus

                gpus = usable_gpus()
            candidates = list(gpus) or [gpu_of(device) or 0]  # none known: where its engine is
            placements[req.name] = _refusing(req, lambda: place(
                r, schedulers, candidates, policy.u_max, lambda g: new_scheduler(policy),
                lambda sched: register(sched, req)), "auto")
            continue
        sched = schedulers.get(device)
        fresh = sched is None
        if sched is None:
            sched = new_scheduler(policy)
        refusal = register(sched, req)
        if refusal is not None:
            _refuse(req, device, *refusal)
        if fresh:
            schedulers[device] = sched
        placements[req.name] = fixed_placement(device, requested)
    rehearsals: dict[str, Rehearsal] = {}
    calibrations: dict[str, Calibration] = {}
    for device in [d for d in schedulers if is_gpu(d)]:
        here = [q for q in requests if placements[q.name].device == device]
        schedulers[device] = _rehearse_if_crowded(device, schedulers[device], here, policy, lookup,
                                                  rehearsals, calibrations)
    results = {}
    for q in requests:
        place_ = placements[q.name]
        sched = schedulers[place_.device]
        figures = sched.stream_admission(sched.stream_id(q.name))
        results[q.name] = AdmissionResult(
            q.name, True, q.runner.pipeline.qos.cls, place_.device, place_, cost_ns=figures["cost_ns"],
            cost_source=q.cost_source, measured=q.measured, measured_on=q.measured_on,
            rehearsal=rehearsals.get(q.name), phase_ns=q.kw.get("phase_ns"), period_ns=q.kw.get("period_ns"),
            calibration=calibrations.get(place_.device))
    return Admission(schedulers, results)


def _refused_result(req: StreamRequest, device: str, figures: dict[str, Any]) -> AdmissionResult:
    return AdmissionResult(req.name, False, req.runner.pipeline.qos.cls, device, cost_ns=req.kw.get("cost_ns"),
                           cost_source=req.cost_source, measured=req.measured, measured_on=req.measured_on,
                           phase_ns=req.kw.get("phase_ns"), period_ns=req.kw.get("period_ns"),
                           reason=str(figures.get("reason", "")) or None, figures=dict(figures))


def _refuse(req: StreamRequest, device: str, message: str, figures: dict[str, Any]) -> None:
    """Raise the AdmissionError of ``req``'s refusal on ``device``, its ``result`` attached."""
    figures["device"] = device
    err = AdmissionError(req.name, message, figures)
    err.result = _refused_result(req, device, figures)  # type: ignore[attr-defined]
    raise err


def _refusing(req: StreamRequest, call: Callable[[], Placement], device: str) -> Placement:
    """``call()``, an AdmissionError it raises given ``req``'s refused result."""
    try:
        return call()
    except AdmissionError as err:
        if getattr(err, "result", None) is None:
            err.result = _refused_result(req, device, err.figures)  # type: ignore[attr-defined]
        raise


def _rehearse_if_crowded(device: str, sched: "Scheduler", here: list[StreamRequest], policy: AdmissionPolicy,
                         lookup: CalibrationLookup, rehearsals: dict[str, Rehearsal],
                         calibrations: dict[str, Calibration]) -> "Scheduler":
    """Admission's second look at one GPU: when its realtime streams are crowded (:func:`crowded`,
    with the GPU's calibration), they are rehearsed together (:func:`rehearse`) and every stream
    of the GPU is registered again, in the same order, by a new scheduler with the device model's
    dispatcher figures (returned): a measured kind of stream with the larger of its cost alone and
    its share of the GPU among the others, and its dispatcher work per block; every realtime
    stream with its kind's latency tail. A declared ``qos.cost_us`` stays the stream's cost (its
    streams are rehearsed as load; when every cost is declared there is nothing to learn).
    AdmissionError on a refusal, with the rehearsal's figures."""
    # a stream whose runner's thread runs its blocks (python stages on cuda) cannot be released by
    # native threads: its measured cost alone stands
    rt = [q for q in here if q.runner.pipeline.qos.cls == "realtime"
          and not getattr(q.runner.engine, "queued_by_runner", False)]
    if len(rt) < 2 or all(q.declared for q in rt):
        return sched
    gpu = gpu_of(device) or 0
    calibration = calibrations[device] = lookup(gpu)
    deadlines = [int(q.kw["deadline_ns"]) for q in rt]
    if not crowded([q.kw["cost_ns"] for q in rt], [q.kw["period_ns"] for q in rt], deadlines, policy.u_max,
                   calibration=calibration, policy=policy):
        return sched
    _check_hold(device, here, rt, policy, calibration)
    run = rehearse([q.runner.engine for q in rt], [q.runner.chain.input for q in rt], deadlines, device=gpu,
                   phases_ns=[q.kw.get("phase_ns") for q in rt], policy=policy)
    final = new_scheduler(policy, calibration)
    shortest = min(deadlines)
    share = final.dispatcher_share(shortest)
    counted = final.counted_dispatch_ns(run.dispatch_ns, shortest) if run.dispatch_ns else None
    kinds = _kinds(rt, run, policy)
    again: dict[str, dict[str, Any]] = {}
    for q in rt:
        device_ns, tail, horizon = kinds[cost_key(q.runner)]
        among = final.counted_cost_ns(gpu_share_ns(device_ns, run.overlap), run.dispatch_ns or None, shortest)
        rehearsals[q.name] = Rehearsal(len(rt), policy.rehearsal_s + policy.rehearsal_tail_s, device_ns,
                                       q.kw["cost_ns"], run.dispatch_ns, run.overlap, tail, horizon,
                                       policy.tail_horizon_s, shortest, share, counted, policy.dispatcher_busy_cap,
                                       among)
        kw = dict(q.kw)
        if not q.declared:
            kw["cost_ns"] = max(int(kw["cost_ns"]), gpu_share_ns(device_ns, run.overlap))
            if run.dispatch_ns > 0:
                kw["dispatch_ns"] = int(run.dispatch_ns)
        reach = rehearsals[q.name].reach_ns
        if reach is not None:
            kw["tail_reach_ns"] = max(1, int(reach))
        again[q.name] = kw
    for q in here:
        refusal = register(final, q, again.get(q.name))
        if refusal is not None:
            message, figures = refusal
            figures["device"] = device
            if q.name in rehearsals:
                figures["rehearsal"] = rehearsals[q.name].describe()
            _refuse(q, device, message, figures)
    _check_tails(device, final, rt, rehearsals, policy)
    return final


def _kinds(rt: list[StreamRequest], run: RehearsalRun,
           policy: AdmissionPolicy) -> dict[str, tuple[int, Any, float]]:
    """Each kind of stream's (:func:`cost_key`) device time among the rehearsed streams (the
    median of its streams'), latency tail and the blocks its streams release within the tail's
    horizon."""
    members: dict[str, list[int]] = {}  # kind of stream -> its streams' places in rt
    for i, q in enumerate(rt):
        members.setdefault(cost_key(q.runner), []).append(i)
    return {k: (int(np.median([run.device_ns[i] for i in ix])), run.tail(ix, policy),
                horizon_blocks([rt[i].kw["period_ns"] for i in ix], policy.tail_horizon_s))
            for k, ix in members.items()}


def _check_hold(device: str, here: list[StreamRequest], rt: list[StreamRequest], policy: AdmissionPolicy,
                calibration: Calibration) -> None:
    """Before the rehearsal measures their dispatcher work: may the GPU's realtime streams have it
    counted at all (the device model's dispatcher_hold)? AdmissionError naming the stream whose
    deadline is within the lock's hold."""
    from pygpukit_dsp_core import AdmissionRefused

    probe = new_scheduler(policy, calibration)
    for q in here:
        register(probe, q)  # admitted as they were by the first look
    try:
        probe.check_dispatcher_hold()
    except AdmissionRefused as e:
        hold = int(e.figures.get("dispatcher_hold_ns", calibration.hold_ns))
        d = int(e.shortest_deadline_ns)
        req = next(q for q in rt if q.name == e.stream)
        _refuse(req, device,
                f"its {d / 1e3:.0f} us deadline is no longer than the {hold / 1e3:.0f} us a block may find the "
                f"dispatcher's lock held among the {len(rt)} realtime streams of its GPU (a poll that finds a batch "
                "of completions, or the host pausing the thread that holds it): lengthen qos.deadline_ms, or run "
                "fewer realtime streams on this GPU",
                {"reason": "dispatcher_hold", "device": device, "deadline_ns": d, "hold_ns": hold, "streams": len(rt)})


def _check_tails(device: str, final: "Scheduler", rt: list[StreamRequest], rehearsals: dict[str, Rehearsal],
                 policy: AdmissionPolicy) -> None:
    """The device model's latency-tail check over the rehearsed streams: AdmissionError naming the
    last stream whose tail reaches past its deadline within the tail's horizon, with the figures."""
    from pygpukit_dsp_core import AdmissionRefused

    try:
        final.check_latency_tails()
    except AdmissionRefused as e:
        reh = rehearsals[e.stream]
        reach, d = int(e.figures["tail_reach_ns"]), int(e.shortest_deadline_ns)
        req = next(q for q in rt if q.name == e.stream)
        _refuse(req, device,
                f"rehearsed with the {reh.streams} realtime streams of its GPU, its kind of stream's latency from "
                f"release reaches {reach / 1e3:.0f} us within {policy.tail_horizon_s:g} s, past its {d / 1e3:.0f} us "
                "deadline (the dispatcher's queue at this load: run fewer realtime streams on this GPU, or "
                "lengthen qos.deadline_ms)",
                {"reason": "latency_tail", "device": device, "reach_ns": reach, "deadline_ns": d,
                 "horizon_s": policy.tail_horizon_s,
                 "rehearsal": reh.describe()})
