"""Measuring the machine's figures (calibration.py): the reference streams rehearsed on a GPU.

Layer: executor (admission). Imports the policy, the calibration's records and cache, the
rehearsal and, when it measures, the pipeline, the gain stage, the null source and sink and the
CUDA backend; never the bench.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import numpy as np

from .calibration import Calibration, GpuIdentity, gpu_identity, load, save
from .policy import DEFAULT_POLICY, AdmissionPolicy
from .rehearsal import rehearse


def calibration_for(gpu: int, *, policy: AdmissionPolicy = DEFAULT_POLICY, remeasure: bool = False,
                    caps: dict[str, Any] | None = None) -> Calibration:
    """GPU ``gpu``'s calibration: the cached one for its driver, else (or with ``remeasure``)
    measured now (:func:`measure`) and cached. A cache that cannot be written leaves the
    measurement in force for this process (the next one measures again)."""
    identity = gpu_identity(gpu, caps)
    if not remeasure:
        cached = _MEMO.get(identity) or load(identity)
        if cached is not None:
            _MEMO[identity] = cached
            return cached
    cal = measure(identity, policy)
    try:
        cal = save(cal)
    except OSError:
        pass  # not cached: measured again by the next process
    _MEMO[identity] = cal
    return cal


_MEMO: dict[GpuIdentity, Calibration] = {}  # this process's calibrations (a session admits several GPUs)


def cached(gpu: int, caps: dict[str, Any] | None = None) -> Calibration | None:
    """GPU ``gpu``'s cached calibration for its driver, without measuring (None: none yet)."""
    identity = gpu_identity(gpu, caps)
    return _MEMO.get(identity) or load(identity)


def reference_engines(gpu: int, policy: AdmissionPolicy = DEFAULT_POLICY) -> tuple[list[Any], Any]:
    """The reference streams' CUDA engines on GPU ``gpu`` and their input spec (module doc)."""
    from .. import stages
    from ..backends import choose_backend
    from ..backends.cuda_engine import CudaEngine
    from ..io import NullSink, NullSource
    from ..pipeline import Pipeline

    p = Pipeline([stages.Gain(db=0)], name="admission_calibration", sample_rate=48_000,
                 channels=policy.machine_channels, block_size=policy.machine_block_size, backend="cuda",
                 qos={"class": "realtime"}, source=NullSource(duration_s=1.0), sink=NullSink())
    chain = p.specs()
    choice = choose_backend(p, chain, "cuda")
    engines: list[Any] = []
    try:
        for _ in range(policy.machine_streams):
            engines.append(CudaEngine(p, chain, choice, device=gpu))
    except BaseException:
        for e in engines:
            e.close()
        raise
    return engines, chain.input


def measure(identity: GpuIdentity, policy: AdmissionPolicy = DEFAULT_POLICY) -> Calibration:
    """Rehearse the reference streams on the GPU (module doc) and return their figures."""
    engines, spec = reference_engines(identity.index, policy)
    period = max(1, int(spec.block_period * 1e9))
    n = len(engines)
    phases = [k * period // n for k in range(n)]  # staggered, as a Session paces its own clocks
    runs = []
    try:
        for k in range(policy.machine_windows):  # the warm-up once: the engines stay warm between windows
            runs.append(rehearse(engines, [spec] * n, [period] * n, device=identity.index, phases_ns=phases,
                                 seconds=policy.machine_window_s, tail_s=policy.machine_window_s, policy=policy,
                                 warmup_s=policy.machine_warmup_s if k == 0 else 0.05))
    finally:
        for e in engines:
            e.close()
    stamp = datetime.datetime.fromtimestamp(time.time(), datetime.timezone.utc).isoformat(timespec="seconds")
    return Calibration(gpu_index=identity.index, gpu_name=identity.name, pci_bus_id=identity.pci_bus_id,
                       driver=identity.driver,
                       dispatch_ns=int(np.median([r.dispatch_ns for r in runs])),
                       hold_ns=int(min(r.hold_ns for r in runs)),
                       overlap=round(float(np.median([r.overlap for r in runs])), 3), streams=n, period_ns=period,
                       windows=len(runs), blocks=int(sum(r.blocks for r in runs)), measured_at=stamp,
                       hold_windows_ns=tuple(int(r.hold_ns) for r in runs))


def admission_report(gpus: list[int], *, remeasure: bool = False, policy: AdmissionPolicy = DEFAULT_POLICY,
                     caps: dict[str, Any] | None = None) -> dict[str, Any]:
    """``gk-stream devices``' ``admission``: the policy's tunables, and each of ``gpus``' calibration
    by GPU index (None: not measured yet; the whole None without a GPU). ``remeasure``: measure
    each again and cache it (``gk-stream devices --calibrate``)."""
    cals: dict[str, Any] = {}
    for gpu in gpus:
        cal = calibration_for(gpu, policy=policy, remeasure=True, caps=caps) if remeasure else cached(gpu, caps)
        cals[str(gpu)] = None if cal is None else cal.to_dict()
    return {"policy": policy.to_dict(), "calibration": cals or None}
