"""What admission hands back: one :class:`AdmissionResult` per stream, and the schedulers.

Layer: executor (admission). Imports the records of cost.py, placement.py, rehearsal.py and
calibration.py; never the bench.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .calibration import Calibration
from .cost import BlockCost
from .placement import Placement
from .rehearsal import Rehearsal

if TYPE_CHECKING:
    from pygpukit_dsp_core import Scheduler


@dataclass
class AdmissionResult:
    """One stream's admission (``StreamRunner.admission``): admitted or refused, why, and the
    figures it was decided on.

    An admitted stream has its ``placement`` (where it runs and why), the ``cost_ns`` its
    scheduler admitted it with (None: it reserves none) and where that came from
    (``cost_source``, ``measured``, ``measured_on``), the ``rehearsal`` of its GPU when admission
    ran its realtime streams together, and its release ``phase_ns`` when the Session staggers its
    clock. A refused one (``AdmissionError.result``) has the check that refused it (``reason``) and
    the ``figures`` behind it, as the error has them."""

    stream: str
    admitted: bool
    qos: str                                  # its QoS class
    device: str                               # "cpu" | "cuda" | "cuda:N" ("auto": refused by every GPU)
    placement: Placement | None = None        # where it runs and why (None: refused)
    cost_ns: int | None = None                # the cost its scheduler admitted it with (None: none reserved)
    cost_source: str | None = None            # declared (qos.cost_us) | measured | measured on '...'
    measured: BlockCost | None = None         # what admission measured (or shared) before the first block
    measured_on: str | None = None            # the alike stream whose measurement it shares
    rehearsal: Rehearsal | None = None        # its GPU's realtime streams run together, when they were
    phase_ns: int | None = None               # its release phase, when the Session staggers its clock
    period_ns: int | None = None              # its block period (realtime)
    calibration: Calibration | None = None    # the machine's figures of its GPU, when admission read them
    reason: str | None = None                 # refused: the check (utilisation_bound, ..., latency_tail)
    figures: dict[str, Any] = field(default_factory=dict)  # refused: the figures behind it

    @property
    def gpu(self) -> int | None:
        return None if self.placement is None else self.placement.gpu

    def summary_text(self) -> str | None:
        """``RunSummary.admission``: what admission measured for it (its cost, the rehearsal) and
        its release phase; None when it measured nothing and declared no phase."""
        parts = []
        if self.measured is not None:
            shared = f" (measured on '{self.measured_on}', the same kind of stream)" if self.measured_on else ""
            parts.append(self.measured.describe() + shared)
            if self.rehearsal is not None:
                parts.append(self.rehearsal.describe())
        if self.phase_ns is not None and self.period_ns:
            parts.append(f"blocks released at {self.phase_ns / 1e3:.1f} us of each {self.period_ns / 1e3:.1f}-us "
                         "period (the Session staggers the clocks it paces)")
        return "; ".join(parts) if parts else None

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready values."""
        reh = self.rehearsal
        return {"stream": self.stream, "admitted": self.admitted, "qos": self.qos, "device": self.device,
                "placement": None if self.placement is None else self.placement.to_dict(),
                "cost_ns": self.cost_ns, "cost_source": self.cost_source,
                "measured": None if self.measured is None else self.measured.to_dict(),
                "measured_on": self.measured_on,
                "rehearsal": None if reh is None else {
                    "streams": reh.streams, "device_ns": reh.device_ns, "alone_ns": reh.alone_ns,
                    "dispatch_ns": reh.dispatch_ns, "dispatch_counted_ns": reh.dispatch_cost_ns,
                    "dispatcher_share": reh.dispatcher_share, "overlap": reh.overlap, "cost_ns": reh.cost_ns,
                    "reach_ns": reh.reach_ns, "deadline_ns": reh.deadline_ns},
                "phase_ns": self.phase_ns,
                "calibration": None if self.calibration is None else self.calibration.to_dict(),
                "reason": self.reason, "figures": dict(self.figures)}


class Admission(Mapping[str, "Scheduler"]):
    """What ``admit`` made: each device's scheduler by device key ("cpu", "cuda" for GPU 0,
    "cuda:N"; a mapping, as ``start_dispatch`` takes it) and each stream's
    :class:`AdmissionResult` by pipeline name (``results``)."""

    def __init__(self, schedulers: dict[str, "Scheduler"], results: dict[str, AdmissionResult]):
        self.schedulers = schedulers
        self.results = results

    def __getitem__(self, device: str) -> "Scheduler":
        return self.schedulers[device]

    def __iter__(self) -> Iterator[str]:
        return iter(self.schedulers)

    def __len__(self) -> int:
        return len(self.schedulers)

    def __repr__(self) -> str:
        return f"Admission(devices={list(self.schedulers)}, streams={list(self.results)})"
