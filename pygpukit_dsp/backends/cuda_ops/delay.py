"""CUDA lowering of ``delay`` (native op ``delay``: per-channel delay line, history on the GPU)."""

from __future__ import annotations

import numpy as np

from ...signal import SignalSpec
from ...stages.delay import Delay
from ..cuda_lowering import OpDesc, lowering


@lowering("delay")
def lower_delay(stage: Delay, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    delays = stage.delays_for(spec_in)  # one integer per channel (validated by the stage)
    return OpDesc("delay", stage.name, spec_in, spec_out, {"delays": np.asarray(delays, dtype=np.float64)})
