"""Host settings a realtime thread may use, and whether this process may (the paced bench's
settings table, bench/cadence.py; benchmarks/host_jitter.py): SCHED_FIFO, mlockall, the PM QoS
request that keeps CPUs out of deep idle states. Each is tried on the calling thread and undone.
qos.cpu's pinning is pygpukit_dsp/affinity.py."""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import struct
from typing import Any, Iterator


def sched_fifo_allowed() -> bool:
    """Whether this process may put a thread under SCHED_FIFO (tried on the calling thread, undone)."""
    try:
        old = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        os.sched_setscheduler(0, old[0], old[1])
        return True
    except (PermissionError, OSError, AttributeError):
        return False


@contextlib.contextmanager
def fifo(priority: int = 10) -> Iterator[None]:
    old = os.sched_getscheduler(0), os.sched_getparam(0)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    try:
        yield
    finally:
        os.sched_setscheduler(0, old[0], old[1])


def mlockall() -> str | None:
    """mlockall(MCL_CURRENT | MCL_FUTURE); None when it worked, else why not."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mlockall(1 | 2) != 0:
        return os.strerror(ctypes.get_errno())
    return None


@contextlib.contextmanager
def locked() -> Iterator[None]:
    why = mlockall()
    if why is not None:
        raise OSError(f"mlockall failed: {why}")
    try:
        yield
    finally:
        ctypes.CDLL(None).munlockall()


CPU_DMA_LATENCY = "/dev/cpu_dma_latency"


def wake_latency_limit() -> str | None:
    """Whether this process may hold the PM QoS request /dev/cpu_dma_latency; None when it may,
    else why not."""
    try:
        with open(CPU_DMA_LATENCY, "wb", buffering=0):
            return None
    except OSError as exc:
        return f"{CPU_DMA_LATENCY}: {exc.strerror or exc}"


@contextlib.contextmanager
def shallow_idle(limit_us: int = 0) -> Iterator[None]:
    """The CPUs kept out of idle states that take longer than ``limit_us`` to leave (the kernel's
    PM QoS request, held while the file stays open): a sleeping core then keeps its caches (deep
    C-states flush a core's L1/L2) and wakes at once. Costs idle power, not CPU time."""
    with open(CPU_DMA_LATENCY, "wb", buffering=0) as f:
        f.write(struct.pack("i", limit_us))
        yield


def host_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {"sched_fifo_allowed": sched_fifo_allowed(), "cpus": len(os.sched_getaffinity(0)),
                             "cpu_dma_latency": wake_latency_limit() or "writable"}
    try:
        facts["memlock_limit"] = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    except (ValueError, OSError):
        pass
    return facts
