"""CUDA lowering of ``resample``: the streaming polyphase kernel with device history.

The op (native/ops/resample.cpp, kernels/resample.cu) computes each output sample k of a block
as ``sum_l h[phi + up*l] * x[floor(k*down/up) - l]`` with ``phi = k*down mod up`` and the
stage's own padded filter (``Resample.padded_filter()``), so it has the CPU stage's causal
alignment (``delay_out_samples``) and output counts (``ceil(m*up/down)`` on a final block). A
ratio that reduces to 1/1 copies the block.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...signal import SignalSpec
from ...stages.base import Stage
from ..cuda_lowering import OpDesc, lowering

MAX_FACTOR = 1 << 16  # the kernel's index math is 32-bit


@lowering("resample")
def lower_resample(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    up, down = stage.ratio
    if max(up, down) >= MAX_FACTOR:
        raise UnsupportedError(stage.name, "cuda", f"up/down = {up}/{down} after reduction; the "
                               f"CUDA resampler takes factors below {MAX_FACTOR}")
    params: dict = {"up": up, "down": down}
    if up != down:
        params["taps"] = np.ascontiguousarray(stage.padded_filter(), dtype=np.float64)
    return OpDesc("resample", stage.name, spec_in, spec_out, params)
