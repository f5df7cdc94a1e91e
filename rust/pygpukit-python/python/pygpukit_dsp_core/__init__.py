"""Rust core of pygpukit-dsp: scheduler, memory-pool policy, latency histogram.

Everything here is a thin re-export of the compiled module ``_pygpukit_dsp_core``;
see ``docs/scheduler.md`` for the model and examples.
"""

from __future__ import annotations

from ._pygpukit_dsp_core import (
    ABI_VERSION,
    POOL_HANDLE_CAPSULE_NAME,
    SCHED_ABI_CAPSULE_NAME,
    SCHED_HANDLE_CAPSULE_NAME,
    AdmissionRefused,
    Completion,
    Decision,
    Grant,
    IllegalTransition,
    LatencyHistogram,
    MemoryPoolPolicy,
    PoolBudgetExceeded,
    PoolError,
    Scheduler,
    SchedulerError,
    __version__,
    sched_abi_capsule,
)

# The table as a module attribute, so C/C++ can also take it with
# PyCapsule_Import("pygpukit_dsp_core._sched_abi_v1", 0).
_sched_abi_v1 = sched_abi_capsule()

__all__ = [
    "ABI_VERSION",
    "POOL_HANDLE_CAPSULE_NAME",
    "SCHED_ABI_CAPSULE_NAME",
    "SCHED_HANDLE_CAPSULE_NAME",
    "AdmissionRefused",
    "Completion",
    "Decision",
    "Grant",
    "IllegalTransition",
    "LatencyHistogram",
    "MemoryPoolPolicy",
    "PoolBudgetExceeded",
    "PoolError",
    "Scheduler",
    "SchedulerError",
    "__version__",
    "sched_abi_capsule",
]
