"""CuPy eager baseline: the NumPy code on the GPU, one H2D and one D2H per block."""

from __future__ import annotations

import numpy as np

from .ops import NO_GPU, NOT_INSTALLED, BaselineSkipped
from .numpy_impl import ArrayBaseline


def import_cupy():
    try:
        import cupy
    except ImportError as exc:
        raise BaselineSkipped(f"cupy is not installed ({exc})", NOT_INSTALLED) from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise BaselineSkipped("cupy sees no GPU", NO_GPU)
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise BaselineSkipped(f"cupy cannot use a GPU: {exc}", NO_GPU) from None
    return cupy


class CupyBaseline(ArrayBaseline):
    def __init__(self, pipeline, chain):
        cp = import_cupy()
        super().__init__(pipeline, chain, cp, "cupy")

    def process(self, x: np.ndarray) -> np.ndarray:
        cp = self.xp
        y = self.compute(cp.asarray(x))
        return cp.asnumpy(y)  # synchronous D2H: the block is done when this returns

    # -- throughput modes (W2) -------------------------------------------------------------
    def time_resident(self, block: np.ndarray, iterations: int) -> list[float]:
        """Seconds per block with the input already on the GPU (CUDA events around each block)."""
        cp = self.xp
        xd = cp.asarray(block)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(iterations):
            start.record()
            self.compute(xd)
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return times

    def time_streamed(self, block: np.ndarray, blocks: int, slots: int = 2) -> float:
        """Wall seconds for ``blocks`` blocks from pinned host memory, double-buffered on streams.

        Each slot has its own CUDA stream: H2D, compute and D2H of slot k overlap the other
        slots' work. Valid for stateless pipelines (W2); stateful ops would race across streams.
        """
        import time

        import cupyx

        cp = self.xp
        pinned = [cupyx.empty_pinned(block.shape, block.dtype) for _ in range(slots)]
        for p in pinned:
            p[...] = block
        dev = [cp.empty(block.shape, block.dtype) for _ in range(slots)]
        streams = [cp.cuda.Stream(non_blocking=True) for _ in range(slots)]
        y0 = self.compute(dev[0])
        out = [cupyx.empty_pinned(y0.shape, y0.dtype) for _ in range(slots)]
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for i in range(blocks):
            k = i % slots
            with streams[k]:
                dev[k].set(pinned[k], stream=streams[k])
                y = self.compute(dev[k])
                y.get(stream=streams[k], out=out[k])
        for s in streams:
            s.synchronize()
        return time.perf_counter() - t0
