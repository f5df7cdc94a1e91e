"""The Rust scheduler's device model, as admission hands it its figures.

Layer: executor (admission). Imports the policy, the calibration's records and the Rust core
(``pygpukit_dsp_core``); never the bench.

A device's scheduler is made with the policy's ``u_max``, safety margin and dispatcher cap and,
for a GPU, its calibration's lock hold (:func:`new_scheduler`). The formulas of the dispatcher's
bound live in Rust (rust/pygpukit-core/src/scheduler/device_model.rs); the functions below ask a
scheduler for them so that descriptions and the capacity bench read the same figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .calibration import REFERENCE, Calibration
from .policy import DEFAULT_POLICY, AdmissionPolicy

if TYPE_CHECKING:
    from pygpukit_dsp_core import Scheduler


def new_scheduler(policy: AdmissionPolicy = DEFAULT_POLICY, calibration: Calibration | None = None,
                  u_max: float | None = None) -> "Scheduler":
    """A device's scheduler under ``policy`` (``u_max`` overrides its bound): for a GPU with its
    ``calibration`` (the dispatcher's hold), for the CPU (None) without a dispatcher model."""
    from pygpukit_dsp_core import Scheduler

    if calibration is None:
        return Scheduler(u_max=policy.u_max if u_max is None else u_max, safety_margin_ns=policy.safety_margin_ns)
    return Scheduler(u_max=policy.u_max if u_max is None else u_max, safety_margin_ns=policy.safety_margin_ns,
                     dispatcher_busy_cap=policy.dispatcher_busy_cap, dispatcher_hold_ns=int(calibration.hold_ns))


def dispatcher_share(deadline_ns: int | None = None, *, calibration: Calibration | None = None,
                     policy: AdmissionPolicy = DEFAULT_POLICY) -> float:
    """The share of its time the dispatcher's lock may be held by realtime streams whose shortest
    deadline is ``deadline_ns`` (None: the policy's cap): ``min(cap, 1 - hold / deadline)``, 0 when
    the deadline is no longer than the hold. ``calibration``: the GPU's hold (None: the reference
    figures, calibration.REFERENCE)."""
    return new_scheduler(policy, calibration or REFERENCE).dispatcher_share(
        None if deadline_ns is None else max(1, int(deadline_ns)))


def counted_dispatch_ns(dispatch_ns: int, deadline_ns: int | None = None, *, u_max: float | None = None,
                        calibration: Calibration | None = None, policy: AdmissionPolicy = DEFAULT_POLICY) -> int:
    """The dispatcher's serial work per block as admission counts it against ``u_max`` (the
    policy's by default): scaled by ``u_max / dispatcher_share(deadline_ns)`` (at least 1), so that
    streams filling u_max hold its lock at most that share of the time. ValueError when the
    deadline is no longer than the hold (no share of the lock keeps it)."""
    sched = new_scheduler(policy, calibration or REFERENCE, u_max=u_max)
    return int(sched.counted_dispatch_ns(int(dispatch_ns), None if deadline_ns is None else max(1, int(deadline_ns))))


def counted_cost_ns(cost_ns: int, dispatch_ns: int | None, deadline_ns: int | None = None, *,
                    u_max: float | None = None, calibration: Calibration | None = None,
                    policy: AdmissionPolicy = DEFAULT_POLICY) -> int:
    """The block cost the device model counts for a block of ``cost_ns`` on the GPU and
    ``dispatch_ns`` of the dispatcher's work (None: none counted): the larger of the two, the work
    as :func:`counted_dispatch_ns` counts it. ValueError as there."""
    sched = new_scheduler(policy, calibration or REFERENCE, u_max=u_max)
    return int(sched.counted_cost_ns(int(cost_ns), None if not dispatch_ns else int(dispatch_ns),
                                     None if deadline_ns is None else max(1, int(deadline_ns))))


def dispatch_busy_max(deadline_ns: int | None = None, *, calibration: Calibration | None = None,
                      policy: AdmissionPolicy = DEFAULT_POLICY) -> float:
    """:func:`dispatcher_share` under its former name (the capacity bench's report)."""
    return dispatcher_share(deadline_ns, calibration=calibration, policy=policy)
