"""CUDA lowering of ``hilbert`` (native op ``hilbert``: kernels/hilbert.cu).

The op uses the transformer's shape: ``h[d + m] = -h[d - m]`` and ``h = 0`` at even ``m``, so
``imag y[n] = sum_{odd m <= d} h[d + m] * (x[n - d - m] - x[n - d + m])`` and ``real y[n] =
x[n - d]``: (d + 1) / 2 multiply-adds per output, the input window of a CTA in shared memory.
Longer transformers than its window holds (48 KiB: 12033 taps) are refused on cuda before the
first block: on the ``fir`` op with the complex taps ``delta[k - d] + j h[k]`` they differed from
the cpu backend by 4e-4 (relative, 12035 taps, H200, 2026-12-02), more than float32 rounding.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...signal import SignalSpec
from ...stages.base import Stage
from ...stages.hilbert import hilbert_taps
from ..cuda_lowering import OpDesc, lowering

THREADS = 256              # hilbert.cpp's kThreads
SHARED_BYTES = 48 * 1024   # a CTA's window: (THREADS + numtaps - 1) floats
MAX_TAPS = SHARED_BYTES // 4 - THREADS + 1


def odd_taps(numtaps: int) -> np.ndarray:
    """h[d + 2j + 1] for j < (d + 1) / 2, d = (numtaps - 1) / 2."""
    d = (numtaps - 1) // 2
    return np.ascontiguousarray(hilbert_taps(numtaps)[d + 1::2])


@lowering("hilbert")
def lower_hilbert(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    L = stage.params.numtaps
    if (THREADS + L - 1) * 4 > SHARED_BYTES:
        raise UnsupportedError(stage.name, "cuda", f"hilbert takes at most {MAX_TAPS} taps on cuda (got {L}); "
                               "use fewer taps, or backend: cpu")
    if spec_in.block_size >= 1 << 31:
        raise UnsupportedError(stage.name, "cuda", "hilbert takes blocks of fewer than 2^31 samples on cuda")
    return OpDesc("hilbert", stage.name, spec_in, spec_out, {"numtaps": L, "odd_taps": odd_taps(L)})
