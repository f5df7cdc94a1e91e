"""The project's engine paced (bench only): each block handed over before it is due and waited for
natively, through the engine's instrument (``CudaEngine.instrument()``; docs/cuda.md, "Paced
blocks"). The product's engine API is ``CudaEngine.process(block, final, out)``; a paced wait is
measuring apparatus: the cadence bench (bench/cadence.py) and W3 (bench/contention.py) use it.

Layer: the bench. Imports nothing of the executor beyond the engine it is given.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


class PacedEngine:
    """``engine`` (a CudaEngine) with paced blocks: :meth:`process` with a release time runs the
    block through ``engine.instrument()``, on the engine's slots in turn (each call is synchronous,
    so every slot is free again when it returns)."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.instrument = engine.instrument()
        self._slots = int(engine.slots)
        self._next = 0
        self._dtype = engine.chain.input.np_dtype

    def process(self, block: np.ndarray, release_ns: int | None = None, *, spin_us: int = 0, prewarm: bool = False,
                warm_us: int = 0, arrive: Callable[[], Any] | None = None,
                out: np.ndarray | None = None) -> np.ndarray:
        """One block; its output as ``CudaEngine.process`` returns it (``out``: filled and returned).

        ``release_ns`` None: ``engine.process`` (back to back). Else (``time.perf_counter_ns``'s
        clock) the call first waits natively for that time, without the GIL: it sleeps until
        ``spin_us`` before it and spins from there (``prewarm``: at the start of the spin the slot's
        pinned pages are touched on the host and, with mapped I/O, read once by the GPU), then runs
        the block; its latency is then measured from ``release_ns``. ``warm_us`` (< ``spin_us``): the
        wait comes back to Python this long before the release and goes native again for the rest
        (``wait_release``, then ``process``), so that the interpreter's own path (the GIL, these
        frames, the binding) is warm when the block is due: after a sleep the way back to Python
        cost ~10 us more. ``arrive`` (with ``warm_us``): called then, before the block is read; a
        bench writes the block there, as a live source would just have written it.
        """
        if release_ns is None:
            return self.engine.process(block, out=out)
        x = np.ascontiguousarray(block, dtype=self._dtype)
        slot = self._next
        self._next = (slot + 1) % self._slots
        release = int(release_ns)
        if warm_us > 0:
            self.instrument.wait_release(slot, release, int(spin_us), bool(prewarm), release - int(warm_us) * 1000)
            if arrive is not None:
                arrive()
            return self.instrument.process(slot, x, False, out, release, int(spin_us), False)
        return self.instrument.process(slot, x, False, out, release, int(spin_us), bool(prewarm))
