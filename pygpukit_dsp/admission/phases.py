"""Release phases: the clocks a Session paces itself, staggered over their period.

Layer: executor (admission). Imports the sources' pacers (io._common) when it runs; never the bench.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from ..runner import StreamRunner


def assign_phases(runners: list["StreamRunner"]) -> dict[str, int | None]:
    """Release phases for the clocks a Session paces itself (sources with ``rate: realtime``):
    the realtime streams of one block period among them, two or more, are staggered evenly over
    it (stream k of n at k * period / n; :func:`start_clocks` starts their clocks so). Admission
    declares each stream's phase (the response bound then counts only the work that can be in
    front of each block: docs/scheduler.md, "Release phases"). A stream clocked by a device, the
    network or the caller keeps none (None): its block may come at any instant. Returns each
    pipeline's phase by name."""
    from ..io._common import pacers_of

    phases: dict[str, int | None] = {r.pipeline.name: None for r in runners}
    groups: dict[int, list["StreamRunner"]] = {}
    for r in runners:
        if r.pipeline.qos.cls == "realtime" and pacers_of(getattr(r, "source", None)):
            groups.setdefault(max(1, int(r.chain.input.block_period * 1e9)), []).append(r)
    for period, members in groups.items():
        if len(members) < 2:
            continue
        for k, r in enumerate(members):
            phases[r.pipeline.name] = k * period // len(members)
    return phases


def start_clocks(runners: list["StreamRunner"], phases: Mapping[str, int | None] | None = None,
                 lead_s: float = 0.02) -> float:
    """Start the clocks :func:`assign_phases` phased on one epoch ``lead_s`` from now, each at its
    stream's phase (``phases`` by pipeline name; None: each runner's ``admission.phase_ns``);
    returns the epoch (``time.perf_counter`` seconds)."""
    from ..io._common import pacers_of

    epoch = time.perf_counter() + lead_s
    for r in runners:
        if phases is not None:
            phase = phases.get(r.pipeline.name)
        else:
            admitted = getattr(r, "admission", None)
            phase = admitted.phase_ns if admitted is not None else None
        if phase is not None:
            for pacer in pacers_of(r.source):
                pacer.start_at(epoch + phase / 1e9)
    return epoch
