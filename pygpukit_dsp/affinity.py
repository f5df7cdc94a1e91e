"""Pinning the thread that runs a stream's blocks to one CPU (``qos.cpu``; docs/benchmarks.md,
"Paced W1": pinning the caller was the host setting that moved the paced tail most)."""

from __future__ import annotations

import contextlib
import os
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


@contextlib.contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    """The calling thread on one CPU for the block (``os.sched_setaffinity(0)`` is the calling
    thread on Linux), its earlier CPUs given back after; None: nothing changes."""
    if cpu is None:
        yield
        return
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)
