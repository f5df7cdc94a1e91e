"""The machine's figures admission needs, and their cache per GPU and driver.

Layer: executor (admission). Imports capabilities (to name the GPU and its driver); never the
bench. calibrate.py measures the figures; this module holds them and keeps them.

Three figures of one GPU under one driver (:class:`Calibration`):

* ``dispatch_ns``: the dispatcher's serial work per block among many streams (the time its steps
  held its lock over the blocks it launched). Before a rehearsal measures a session's own
  streams, admission reads it to judge whether light streams would fill the lock (``crowded``).
* ``hold_ns``: how long a block may find the dispatcher's lock held under load: the longest lock
  step of each timed window, the least over the windows: a hold the load itself makes in every
  fraction of a second. A window's longer steps are the host's (a thread descheduled while it
  held the lock, which a 2-core or virtualised host does at any load), and no share of the lock
  keeps such a stall off a block's latency. The Rust scheduler's device model bounds the lock's share with it:
  ``min(dispatcher_busy_cap, 1 - hold / shortest deadline)``.
* ``overlap``: how many blocks ran on the GPU at once while it was busy (reported; a session's
  rehearsal measures its own streams' overlap).

They are measured by rehearsing a reference set (``AdmissionPolicy.machine_*``: 64 light realtime
streams of a gain, 16 channels x 64 samples at 48 kHz, their phases staggered) through a scratch
dispatcher on the GPU, in ``machine_windows`` windows. The result is cached as JSON under
:func:`cache_dir` (``$GK_CACHE_DIR/calibration`` when GK_CACHE_DIR is set, else
``$XDG_CACHE_HOME/pygpukit-dsp/calibration`` or ``~/.cache/pygpukit-dsp/calibration``: the
kernel cache's root), one file per GPU (name and PCI bus id) and driver version, measured on
first need (calibrate.py, ``calibration_for``) and redone by ``gk-stream devices --calibrate``.
CPU streams need none.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class GpuIdentity:
    """What a calibration is kept under: the GPU (its name and PCI bus id, or its index when the
    driver gives no bus id) and the driver's version."""

    index: int
    name: str
    pci_bus_id: str
    driver: str

    @property
    def file_name(self) -> str:
        where = self.pci_bus_id or f"gpu{self.index}"
        raw = f"{self.name}_{where}_driver-{self.driver or 'unknown'}"
        return re.sub(r"[^A-Za-z0-9.-]+", "-", raw).strip("-") + ".json"


@dataclass(frozen=True)
class Calibration:
    """The machine's figures of one GPU under one driver (module doc), and how they were measured."""

    gpu_index: int
    gpu_name: str
    pci_bus_id: str
    driver: str
    dispatch_ns: int         # the dispatcher's serial work per block among the reference streams
    hold_ns: int             # the longest lock step a window met, the least over the windows
    overlap: float           # blocks on the GPU at once while it was busy, among them
    streams: int             # the reference streams
    period_ns: int           # their block period
    windows: int             # timed windows
    blocks: int              # blocks launched in the windows that measured the dispatcher's work
    measured_at: str         # when (UTC, ISO 8601)
    hold_windows_ns: tuple[int, ...] = ()  # each window's longest lock step (hold_ns is the least)
    path: str | None = None  # where it is cached (None: not cached)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hold_windows_ns": list(self.hold_windows_ns)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Calibration":
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["hold_windows_ns"] = tuple(int(v) for v in values.get("hold_windows_ns", ()))
        return cls(**values)

    @property
    def identity(self) -> GpuIdentity:
        return GpuIdentity(self.gpu_index, self.gpu_name, self.pci_bus_id, self.driver)

    def describe(self) -> str:
        return (f"GPU {self.gpu_index} ({self.gpu_name}), driver {self.driver or 'unknown'}: the dispatcher's work "
                f"{self.dispatch_ns / 1e3:.1f} us per block, its lock held up to {self.hold_ns / 1e3:.0f} us, "
                f"{self.overlap:.2f} blocks on the GPU at once ({self.streams} reference streams, "
                f"{self.measured_at})")


# The figures of the machine admission was studied on (NVIDIA H200, driver 580.159.04, 2026-11-27,
# W1 streams: docs/scheduler.md, "The lock's bound"): what the calculators below the public
# surface use when they are given no calibration (the capacity bench's report, tests without a
# GPU). Admission itself always uses its GPU's own calibration.
REFERENCE = Calibration(gpu_index=0, gpu_name="NVIDIA H200 (reference figures)", pci_bus_id="",
                        driver="580.159.04", dispatch_ns=12_000, hold_ns=800_000, overlap=1.86, streams=384,
                        period_ns=5_333_333, windows=0, blocks=0, measured_at="2026-11-27")


def cache_dir() -> Path:
    """Where calibrations are cached (module doc)."""
    root = os.environ.get("GK_CACHE_DIR")
    if root:
        return Path(root) / "calibration"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "pygpukit-dsp" / "calibration"


def gpu_identity(gpu: int, caps: dict[str, Any] | None = None) -> GpuIdentity:
    """The identity of GPU ``gpu`` on this machine; DeviceError when the driver does not list it."""
    from ..capabilities import capabilities
    from ..errors import DeviceError

    caps = capabilities(math_libraries=False) if caps is None else caps
    listed = {g.get("index"): g for g in caps.get("gpus", [])}
    if gpu not in listed:
        why = caps.get("gpus_reason") or f"the driver lists GPUs {sorted(listed)}"
        raise DeviceError(f"no GPU {gpu} to calibrate admission on: {why}")
    g = listed[gpu]
    return GpuIdentity(int(gpu), str(g.get("name", "")), str(g.get("pci_bus_id", "") or ""),
                       str(caps.get("driver", {}).get("version", "") or ""))


def load(identity: GpuIdentity) -> Calibration | None:
    """The cached calibration of this GPU and driver (None: none, or unreadable)."""
    path = cache_dir() / identity.file_name
    try:
        data = json.loads(path.read_text())
        cal = Calibration.from_dict(data)
    except (OSError, ValueError, TypeError):
        return None
    if (cal.gpu_name, cal.pci_bus_id, cal.driver) != (identity.name, identity.pci_bus_id, identity.driver):
        return None  # another GPU's or driver's figures under this name (a file copied by hand)
    return replace(cal, gpu_index=identity.index, path=str(path))  # the index may differ (CUDA_VISIBLE_DEVICES)


def save(cal: Calibration) -> Calibration:
    """Cache ``cal`` (written whole, then renamed: a reader never sees half a file); the
    calibration with its ``path``. OSError when the folder cannot be written."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / cal.identity.file_name
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**cal.to_dict(), "path": None}, indent=2) + "\n")
    tmp.replace(path)
    return replace(cal, path=str(path))
