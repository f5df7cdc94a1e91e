"""Pinning the thread that runs a stream's blocks to one CPU (``qos.cpu``; docs/benchmarks.md,
"Paced W1": pinning the caller was the host setting that moved the paced tail most)."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator

from .errors import ConfigError


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on (empty where the OS cannot say: not Linux)."""
    getter = getattr(os, "sched_getaffinity", None)
    return set(getter(0)) if getter is not None else set()


def _ranges(cpus: set[int]) -> str:
    out: list[str] = []
    for c in sorted(cpus):
        if out and out[-1].split("-")[-1] == str(c - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)


def resolve_cpu(value: int | str | None, where: str | None = None) -> int | None:
    """``qos.cpu`` as a CPU number: ``auto`` is the last CPU this process may use (interrupts and
    housekeeping tend to land on the first ones); a number must be one this process may use."""
    if value is None:
        return None
    cpus = allowed_cpus()
    if not cpus or not hasattr(os, "sched_setaffinity"):
        raise ConfigError("qos.cpu needs a system that can pin a thread to a CPU (Linux)", where=where,
                          hint="remove qos.cpu on this system")
    if value == "auto":
        return max(cpus)
    if value not in cpus:
        raise ConfigError(f"qos.cpu {value}: this process may run on CPUs {_ranges(cpus)} only", where=where,
                          hint=f"pick one of them, or cpu: auto (CPU {max(cpus)} here)")
    return int(value)


_reserved: set[int] = set()   # CPUs held by a pinned stream thread of this process (pinned())
_lock = threading.Lock()


def reserved_cpus() -> set[int]:
    """The CPUs that pinned() currently holds for a stream's thread."""
    with _lock:
        return set(_reserved)


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return []


@contextlib.contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    """The calling thread on CPU ``cpu`` alone, and the process's other threads off it, for the
    block; everything as it was after. None: nothing changes.

    A pinned thread that shares its CPU with a busy thread of its own process (the dispatcher's
    spin, a throughput pump, a stall probe) waits for it: a W3 run pinned that way lost ms per
    block. So every other thread of the process is moved off the CPU (``/proc/self/task``), and
    threads the project starts meanwhile step off it (:func:`leave_reserved`, :func:`spare_cpu`).
    A thread that the pinned thread itself starts inherits its CPU (Linux) unless it steps off.
    """
    if cpu is None:
        yield
        return
    me = threading.get_native_id()
    old = os.sched_getaffinity(0)
    moved: list[tuple[int, set[int]]] = []
    os.sched_setaffinity(0, {cpu})
    with _lock:
        _reserved.add(cpu)
    try:
        for tid in _threads():
            if tid == me:
                continue
            try:
                mask = os.sched_getaffinity(tid)
                if cpu in mask and len(mask) > 1:
                    os.sched_setaffinity(tid, mask - {cpu})
                    moved.append((tid, mask))
            except OSError:  # the thread ended meanwhile
                pass
        yield
    finally:
        with _lock:
            _reserved.discard(cpu)
        for tid, mask in moved:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, mask)
        os.sched_setaffinity(0, old)


def leave_reserved() -> None:
    """The calling thread (one the project starts) off the CPUs pinned() holds: the process's
    CPUs but those. Called first thing in helper threads that a pinned thread may start."""
    free = _process_cpus - reserved_cpus()
    if free and free != _process_cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, free)


def spare_cpu() -> int:
    """A CPU of the process that pinned() does not hold (the lowest), for a helper thread pinned
    on purpose (the stall probe); -1 when there is none."""
    free = sorted(_process_cpus - reserved_cpus())
    return free[0] if free else -1


_process_cpus: set[int] = allowed_cpus()  # at import, before any pinning
