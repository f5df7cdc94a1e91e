"""Admission: a session's streams admitted by the Rust scheduler of their devices before any block flows.

Layer: executor. The package's modules, one concept each:

* ``policy.py``: :class:`AdmissionPolicy`, every tunable with its meaning and unit (``DEFAULT_POLICY``);
* ``calibration.py``: :class:`Calibration`, the machine's figures of a GPU (the dispatcher's work per
  block, its lock's hold, the GPU's overlap), cached per GPU and driver; ``calibrate.py`` measures
  them (``calibration_for``: cached, or measured on first need; ``gk-stream devices --calibrate``);
* ``cost.py``: a stream's block cost measured alone (:class:`BlockCost`, ``measure_engine_cost``);
* ``rehearsal.py``: a crowded GPU's realtime streams run together (``rehearse``, :class:`LatencyTail`);
* ``model.py``: the Rust scheduler's device model, made with the policy and the calibration;
* ``request.py``: the request each stream makes of its scheduler, and the refusal's rendering;
* ``placement.py``: where a stream runs (:class:`Placement`; ``device: auto`` by headroom);
* ``phases.py``: the release phases of the clocks a Session paces (``assign_phases``, ``start_clocks``);
* ``result.py``: :class:`AdmissionResult` per stream and :class:`Admission` (the schedulers);
* ``admitting.py``: ``admit``, the entry point.

Python measures and builds the requests; the scheduler (rust/pygpukit-core/src/scheduler/
admission.rs, device_model.rs) decides; a refusal is an AdmissionError with the figures.
docs/scheduler.md, "Admission", describes the model. Names load when first used (importing the
package loads none of NumPy, the native modules or the scheduler).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AdmissionPolicy": "policy", "DEFAULT_POLICY": "policy", "DEFAULT_U_MAX": "policy", "check_u_max": "policy",
    "Calibration": "calibration", "GpuIdentity": "calibration", "REFERENCE_CALIBRATION": "calibration",
    "cache_dir": "calibration", "gpu_identity": "calibration",
    "calibration_for": "calibrate", "cached_calibration": "calibrate", "measure_calibration": "calibrate",
    "BlockCost": "cost", "measure_engine_cost": "cost", "measure_block_cost": "cost", "calibration_pace": "cost",
    "cost_key": "cost", "units_per_block": "cost",
    "LatencyTail": "rehearsal", "Rehearsal": "rehearsal", "RehearsalRun": "rehearsal", "rehearse": "rehearsal",
    "crowded": "rehearsal", "gpu_overlap": "rehearsal", "gpu_share_ns": "rehearsal", "horizon_blocks": "rehearsal",
    "new_scheduler": "model", "dispatcher_share": "model", "counted_dispatch_ns": "model", "counted_cost_ns": "model",
    "dispatch_busy_max": "model",
    "StreamRequest": "request", "stream_registration": "request",
    "Placement": "placement", "headroom": "placement",
    "assign_phases": "phases", "start_clocks": "phases",
    "AdmissionResult": "result", "Admission": "result",
    "admit": "admitting",
}
# names of the modules' own that differ from the package's
_RENAMED = {"REFERENCE_CALIBRATION": "REFERENCE", "cached_calibration": "cached", "measure_calibration": "measure"}
# the capacity bench's names (pygpukit_dsp/bench/capacity.py) until it reads DEFAULT_POLICY
_POLICY_NAMES = {"DISPATCH_BUSY_MAX": "dispatcher_busy_cap", "TAIL_HORIZON_S": "tail_horizon_s"}

__all__ = sorted([*_EXPORTS, *_POLICY_NAMES])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        value = getattr(module, _RENAMED.get(name, name))
    elif name in _POLICY_NAMES:
        from .policy import DEFAULT_POLICY

        value = getattr(DEFAULT_POLICY, _POLICY_NAMES[name])
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
