"""CUDA lowering of ``synthesizer``: an M-point cuFFT over each input row, then the polyphase
branches (native/ops/synthesizer.cpp, kernels/synthesizer.cu)."""

from __future__ import annotations

import numpy as np

from ...signal import SignalSpec
from ...stages.synthesizer import Synthesizer
from ..cuda_lowering import OpDesc, lowering


@lowering("synthesizer")
def lower_synthesizer(stage: Synthesizer, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    prototype = np.ascontiguousarray(stage.prototype(), dtype=np.float64)
    return OpDesc("synthesizer", stage.name, spec_in, spec_out,
                  {"channels": stage.params.channels, "prototype": prototype})
