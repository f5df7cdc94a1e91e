"""Where a stream runs: its device, and for ``device: auto`` the GPU admission places it on.

Layer: executor (admission). Imports the device keys and the errors; never the bench.

A stream with ``device: auto`` is *placed*: its cost is known (declared or measured on the GPU
its engine was opened on), then the GPUs are tried in order of admission headroom (most first:
:func:`headroom`) and the first that admits it keeps it; when that is not the GPU its engine is
on, the runner opens its engine again there (``StreamRunner.move_to_gpu``). Refused by every
GPU: an AdmissionError with each GPU's reason. Each stream's :class:`Placement` says where it
runs and why (the run summary prints it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..devices import device_key, device_of, gpu_of
from ..errors import AdmissionError

if TYPE_CHECKING:
    from pygpukit_dsp_core import Scheduler

    from ..runner import StreamRunner


@dataclass
class Placement:
    """Where a stream runs and why (``RunSummary.placement`` carries ``reason``)."""

    device: str                   # "cpu" | "cuda" | "cuda:N"
    gpu: int | None               # the GPU index (None on cpu)
    requested: Any                # the pipeline's device: None (GPU 0), an index, or "auto"
    reason: str
    headroom: dict[int, float] = field(default_factory=dict)  # auto: each GPU's, before it was placed
    refused: dict[int, str] = field(default_factory=dict)     # auto: GPUs that refused it, and why

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "gpu": self.gpu, "requested": self.requested, "reason": self.reason,
                "headroom": {str(k): v for k, v in self.headroom.items()},
                "refused": {str(k): v for k, v in self.refused.items()}}


def headroom(scheduler: "Scheduler | None", qos_class: str, u_max: float) -> float:
    """What a device's scheduler can still admit, as a fraction of the device.

    A realtime stream is bound by both admission checks, so its headroom is
    ``min(U_max - realtime utilisation, 1 - realtime utilisation - reserved throughput)``; any
    other stream's is the part of the device nobody reserved, ``1 - realtime - reserved``. A
    device without a scheduler yet (nothing placed there) has all of it.
    """
    if scheduler is None:
        rt = reserved = 0.0
    else:
        st = scheduler.stats()
        rt, reserved = float(st["realtime_utilisation"]), float(st["throughput_reserved"])
        u_max = float(st.get("u_max", u_max))
    free = 1.0 - rt - reserved
    return min(u_max - rt, free) if qos_class == "realtime" else free


def _stream_count(scheduler: "Scheduler | None") -> int:
    return 0 if scheduler is None else len(scheduler.stats()["streams"])


def requested_device(runner: "StreamRunner") -> Any:
    """The device the runner's pipeline asked for: None (GPU 0), an index, or "auto"."""
    return getattr(runner, "device_request", getattr(runner.pipeline, "device", None))


def fixed_placement(device: str, requested: Any) -> Placement:
    """The placement of a stream that runs where it asked (or on the CPU)."""
    gpu = gpu_of(device)
    if gpu is None:
        reason = f"backend {device}"
    elif requested is None:
        reason = f"GPU {gpu}: the default (the pipeline sets no device)"
    else:
        reason = f"GPU {gpu}: requested (device: {requested})"
    return Placement(device, gpu, requested, reason)


def place(r: "StreamRunner", schedulers: dict[str, "Scheduler"], gpus: list[int], u_max: float,
          new_scheduler: Callable[[int], "Scheduler"],
          register: Callable[["Scheduler"], Any]) -> Placement:
    """Admit an auto stream on the GPU with the most headroom that takes it; move its engine there.
    ``new_scheduler(gpu)``: a scheduler for a GPU that has none yet; ``register(scheduler)``: its
    registration there, None when admitted, else (the refusal's message, its figures)."""
    cls = r.pipeline.qos.cls
    room = {g: headroom(schedulers.get(device_key(g)), cls, u_max) for g in gpus}
    count = {g: _stream_count(schedulers.get(device_key(g))) for g in gpus}
    # most headroom first; then the GPU with fewer streams (streams that reserve nothing leave the
    # headroom alone: they spread by count); then the lower index
    order = sorted(gpus, key=lambda g: (-round(room[g], 9), count[g], g))
    refused: dict[int, str] = {}
    first: tuple[str, dict[str, Any]] | None = None
    for g in order:
        key = device_key(g)
        sched = schedulers.get(key)
        fresh = sched is None
        if sched is None:
            sched = new_scheduler(g)
        refusal = register(sched)
        if refusal is not None:
            refused[g] = refusal[0]
            if first is None:
                first = refusal
            continue
        if fresh:
            schedulers[key] = sched
        if gpu_of(device_of(r)) != g:
            try:
                r.move_to_gpu(g)
            except BaseException:
                sched.unregister_stream(sched.stream_id(r.pipeline.name))
                raise
        why = _why(g, order, room, count, refused)
        return Placement(key, g, "auto", f"GPU {g}: {why}", headroom=room, refused=refused)
    assert first is not None
    message, figures = first
    figures["device"] = "auto"
    figures["gpus_tried"] = ", ".join(f"GPU {g}" for g in order)
    detail = "; ".join(f"GPU {g}: {refused[g]}" for g in order)
    raise AdmissionError(r.pipeline.name, f"no GPU admits it (device: auto over {len(order)} GPU(s)): {detail}",
                         figures)


def _why(g: int, order: list[int], room: dict[int, float], count: dict[int, int],
         refused: dict[int, str]) -> str:
    """The placement reason of an auto stream admitted on GPU ``g`` (tried in ``order``)."""
    listing = ", ".join(f"GPU {o} {room[o]:.4f}" for o in order)
    if len(order) == 1:
        return f"auto: the only usable GPU (headroom {room[g]:.4f})"
    if refused:
        tried = "; ".join(f"GPU {o} refused it ({refused[o]})" for o in refused)
        return f"auto: {tried}; GPU {g} admitted it (headroom {listing})"
    nxt = order[1]
    if round(room[g], 9) > round(room[nxt], 9):
        return f"auto: the most admission headroom ({listing})"
    if count[g] < count[nxt]:
        return (f"auto: headroom tied with GPU {nxt} ({room[g]:.4f}); fewer streams here "
                f"({count[g]} vs {count[nxt]})")
    return f"auto: headroom ({room[g]:.4f}) and stream count ({count[g]}) tied with GPU {nxt}; the lower index"
