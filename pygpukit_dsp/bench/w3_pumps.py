"""W3's load (the contention bench, bench/contention.py): W2 running in a background thread
(:class:`Pump`), the project's W2 as normal blocks from reset and then resident blocks back to back,
natively (the engine's instrument: ``pump_resident``)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..affinity import leave_reserved
from ..errors import DeviceError

W2_IN_FLIGHT = 2            # the engine's two slots
PUMP_MAX_SECONDS = 3600.0   # a pump runs until stopped; this only bounds a forgotten one
W2_WARM_S = 0.3             # W2 runs this long before its solo window opens
PUMP_START_TIMEOUT_S = 120.0


@dataclass
class Pump:
    """A W2 loop running in a background thread (see :func:`start_pump`)."""

    stop: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)  # resident loop running
    stamps: list[int] = field(default_factory=list)  # perf_counter_ns of every completed block
    outputs: list[np.ndarray] = field(default_factory=list)  # the checked (normal) blocks' outputs
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def count(self, t0: int, t1: int) -> int:
        """Blocks completed in (t0, t1]."""
        stamps = np.asarray(self.stamps, dtype=np.int64)
        return int(((stamps > t0) & (stamps <= t1)).sum())

    def rate(self, t0: int, t1: int, samples_per_block: int) -> float:
        """Samples/s of the blocks completed in (t0, t1]."""
        return self.count(t0, t1) * samples_per_block / ((t1 - t0) / 1e9)


PumpBody = Callable[[Pump], None]


def start_pump(body: PumpBody) -> Pump:
    pump = Pump()

    def run() -> None:
        try:
            leave_reserved()  # started by W1's thread, which may be pinned (qos.cpu): not on its CPU
            body(pump)
        except BaseException as exc:  # handed to the main thread by finish_pump
            pump.error = exc
        finally:
            pump.started.set()

    pump.thread = threading.Thread(target=run, name="w3-throughput", daemon=True)
    pump.thread.start()
    return pump


def wait_started(pump: Pump) -> None:
    if not pump.started.wait(PUMP_START_TIMEOUT_S):
        raise DeviceError(f"the W2 loop did not start within {PUMP_START_TIMEOUT_S:.0f} s")
    if pump.error is not None:
        raise pump.error


def finish_pump(pump: Pump) -> None:
    pump.stop.set()
    if pump.thread is not None:
        pump.thread.join()
    if pump.error is not None:
        raise pump.error


def timed_window(pump: Pump, seconds: float) -> tuple[int, int]:
    """Let a started pump warm up, then time a ``seconds`` window of it; finish it either way."""
    try:
        wait_started(pump)
        time.sleep(W2_WARM_S)
        t0 = time.perf_counter_ns()
        time.sleep(seconds)
        return t0, time.perf_counter_ns()
    finally:
        finish_pump(pump)


def project_pump(engine: Any, blocks: list[np.ndarray]) -> PumpBody:
    """W2 alone: normal blocks from reset first (they upload the data; their outputs are
    checked), then the resident loop until stopped."""
    resident = resident_pump(engine)

    def body(pump: Pump) -> None:
        pump.outputs = [np.array(engine.process(b), copy=True) for b in blocks]
        engine.instrument().resident = True
        resident(pump)
    return body


def resident_pump(engine: Any) -> PumpBody:
    """W2's resident loop, natively (the engine's instrument: pump_resident, no Python and no GIL per
    block), until stopped. The engine must be in resident mode (``instrument().resident``)."""
    def body(pump: Pump) -> None:
        inst = engine.instrument()
        watcher = threading.Thread(target=lambda: (pump.stop.wait(), inst.stop_pump()),
                                   name="w3-pump-stop", daemon=True)
        watcher.start()
        offset = time.perf_counter_ns() - time.monotonic_ns()
        pump.started.set()
        try:
            stamps = inst.pump_resident(PUMP_MAX_SECONDS)
        finally:
            pump.stop.set()
            watcher.join()
        pump.stamps.extend(t + offset for t in stamps)
    return body
