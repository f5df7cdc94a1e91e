"""A Session's dispatch: every block of every stream goes through its device's scheduler.

After admission (pygpukit_dsp/admission/ registered each stream with the scheduler of its device),
:func:`start_dispatch` attaches each runner's engine to that device's dispatcher:

* CPU streams: :class:`~pygpukit_dsp.backends.cpu_dispatch.CpuDispatcher`, one Python thread
  that runs the blocks of all CPU streams one at a time in the scheduler's order;
* CUDA streams: one ``pygpukit_dsp.backends.cuda_dispatch.CudaDispatch`` per GPU in use (device
  keys "cuda" for GPU 0, "cuda:N"), each one native worker thread with that GPU's context, under
  that GPU's scheduler, launching the blocks of that GPU's engines chunk by chunk in the
  scheduler's order.

The runners keep calling ``engine.process`` / ``submit`` / ``collect`` as before; the
dispatchers decide when each block runs and the schedulers account latency (release to
finish), misses, drops, chunks and busy time per stream. :meth:`Dispatch.close` drains and
stops them all; :meth:`Dispatch.stream_stats` reads a stream's figures, also after the close.
"""

from __future__ import annotations

import contextlib

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .devices import device_key, device_of, gpu_of, is_gpu
from .errors import StreamFault

if TYPE_CHECKING:
    from pygpukit_dsp_core import Scheduler

    from .backends.cpu_dispatch import CpuDispatcher
    from .runner import StreamRunner


class Dispatch:
    """The dispatchers of one session, and where each stream's figures live."""

    def __init__(self, schedulers: Mapping[str, "Scheduler"]):
        self.schedulers = dict(schedulers)
        self.cpu: "CpuDispatcher | None" = None
        self.gpus: dict[int, Any] = {}  # GPU index -> its CudaDispatch, for the GPUs with a stream
        self._streams: dict[str, tuple[str, int]] = {}  # pipeline name -> (device, stream id)
        self._closed = False

    @property
    def cuda(self) -> Any:
        """GPU 0's CudaDispatch (or the only GPU's), None without a CUDA stream; see ``gpus``."""
        if 0 in self.gpus:
            return self.gpus[0]
        if len(self.gpus) == 1:
            return next(iter(self.gpus.values()))
        return None

    def dispatcher(self, device: str) -> Any:
        """The dispatcher of a device key ("cpu", "cuda", "cuda:N"), None when it has none."""
        if device == "cpu":
            return self.cpu
        gpu = gpu_of(device)
        return self.gpus.get(gpu) if gpu is not None else None

    @property
    def streams(self) -> dict[str, tuple[str, int]]:
        """Pipeline name -> (device, scheduler stream id)."""
        return dict(self._streams)

    def device_of(self, name: str) -> str:
        return self._lookup(name)[0]

    def _lookup(self, name: str) -> tuple[str, int]:
        try:
            return self._streams[name]
        except KeyError:
            known = ", ".join(self._streams) or "none"
            raise KeyError(f"no stream named '{name}' in this dispatch (streams: {known})") from None

    def stream_stats(self, name: str) -> dict[str, Any]:
        """The scheduler's figures of the stream ``name`` (see docs/scheduler.md, Accounting)."""
        device, sid = self._lookup(name)
        disp = self.dispatcher(device)
        if disp is not None:
            return disp.stream_stats(sid)
        return dict(self.schedulers[device].stream_stats(sid))

    def stats(self) -> dict[str, dict[str, Any]]:
        """Each dispatcher's counters, by device key ("cpu", "cuda", "cuda:1", ...)."""
        out: dict[str, dict[str, Any]] = {}
        if self.cpu is not None:
            out["cpu"] = self.cpu.stats()
        for gpu, disp in sorted(self.gpus.items()):
            out[device_key(gpu)] = dict(disp.stats())
        return out

    def close(self) -> None:
        """Drain and stop every dispatcher (each is closed even if another fails). Idempotent."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        first: BaseException | None = None
        for disp in (self.cpu, *[d for _, d in sorted(self.gpus.items())]):
            if disp is None:
                continue
            try:
                disp.close()
            except Exception as exc:
                first = first or exc
                errors.append(f"{type(disp).__name__}: {exc}")
        if errors:
            raise StreamFault("while closing the dispatch: " + "; ".join(errors)) from first

    def __enter__(self) -> "Dispatch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_dispatch(runners: list["StreamRunner"],
                   schedulers: "Mapping[str, Scheduler] | Scheduler") -> Dispatch:
    """Attach every runner's engine to its device's dispatcher; returns the running Dispatch.

    ``schedulers`` is what :func:`pygpukit_dsp.admission.admit` returned (device -> scheduler),
    or one scheduler when every runner is on one device. Each runner's stream must be
    registered there under its pipeline's name. Every GPU with a stream gets its own
    CudaDispatch (its own native thread and context, under its own scheduler). On failure
    nothing stays attached.
    """
    devices = [device_of(r) for r in runners]
    if not isinstance(schedulers, Mapping):
        if len(set(devices)) > 1:
            raise ValueError(f"these runners use several devices ({', '.join(sorted(set(devices)))}): give one "
                             "scheduler per device (as admit() returns); a dispatcher must see only its own "
                             "device's tasks")
        schedulers = {d: schedulers for d in devices}
    owners: dict[int, str] = {}
    for device in sorted(set(devices)):
        sched = schedulers.get(device)
        if sched is not None and id(sched) in owners:
            raise ValueError(f"devices {owners[id(sched)]} and {device} share one scheduler: give each device its "
                             "own (as admit() returns); a dispatcher must see only its own device's tasks")
        if sched is not None:
            owners[id(sched)] = device
    dispatch = Dispatch(schedulers)
    try:
        for r, device in zip(runners, devices):
            sched = schedulers.get(device)
            sid = sched.stream_id(r.pipeline.name) if sched is not None else None
            if sid is None:
                raise ValueError(f"stream '{r.pipeline.name}' is not registered with the {device} "
                                 "scheduler: admit the runners first")
            if device == "cpu":
                if dispatch.cpu is None:
                    from .backends.cpu_dispatch import CpuDispatcher

                    dispatch.cpu = CpuDispatcher(sched)
                dispatch.cpu.attach(r.engine, sid)
            elif is_gpu(device):
                gpu = gpu_of(device)
                assert gpu is not None
                if gpu not in dispatch.gpus:
                    from .backends.cuda_dispatch import CudaDispatch  # only with a CUDA stream

                    dispatch.gpus[gpu] = CudaDispatch(sched, device_index=gpu)
                dispatch.gpus[gpu].attach(r.engine, sid)
            else:
                raise ValueError(f"runner '{r.pipeline.name}' runs on unknown device '{device}'")
            dispatch._streams[r.pipeline.name] = (device, sid)
    except BaseException:
        with contextlib.suppress(Exception):  # the error that stopped the start is the one to report
            dispatch.close()
        raise
    return dispatch
