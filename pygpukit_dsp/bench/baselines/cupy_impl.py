"""CuPy eager baseline: the NumPy code on the GPU, one H2D and one D2H per block."""

from __future__ import annotations

import numpy as np

from . import BaselineSkipped
from .numpy_impl import ArrayBaseline


def import_cupy():
    try:
        import cupy
    except ImportError as exc:
        raise BaselineSkipped(f"cupy is not installed ({exc})") from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise BaselineSkipped("cupy sees no GPU")
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise BaselineSkipped(f"cupy cannot use a GPU: {exc}") from None
    return cupy


class CupyBaseline(ArrayBaseline):
    def __init__(self, pipeline, chain):
        cp = import_cupy()
        super().__init__(pipeline, chain, cp, "cupy")

    def process(self, x: np.ndarray) -> np.ndarray:
        cp = self.xp
        y = self.compute(cp.asarray(x))
        return cp.asnumpy(y)  # synchronous D2H: the block is done when this returns
