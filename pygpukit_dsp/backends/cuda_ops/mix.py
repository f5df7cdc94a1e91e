"""CUDA lowering of ``mix`` (native op ``mix``).

The op picks its implementation by a cost rule (docs/cuda.md): a one-launch small-matrix
kernel when ``C_out * C_in <= 4096`` (the W1 mix, 16 x 64, is latency-bound), cuBLAS gemm
(strided-batched per bin) above that. ``method`` here is always "auto"; tests pass "kernel" or
"cublas" to the native engine directly to check both paths.
"""

from __future__ import annotations

import numpy as np

from ...signal import SignalSpec
from ...stages.mix import Mix
from ..cuda_lowering import OpDesc, lowering

KERNEL_MAX_ENTRIES = 4096  # C_out * C_in handled by the small-matrix kernel (mirrors native/ops/mix.cpp)


@lowering("mix")
def lower_mix(stage: Mix, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    matrix = np.asarray(stage.matrix)
    matrix = matrix.astype(np.complex128 if np.iscomplexobj(matrix) else np.float64)
    return OpDesc("mix", stage.name, spec_in, spec_out, {"matrix": matrix, "method": "auto"})
