"""CUDA lowering of ``gain`` (native op ``gain``: y = factor * x, float32 or complex64)."""

from __future__ import annotations

from ...signal import SignalSpec
from ...stages.gain import Gain
from ..cuda_lowering import OpDesc, lowering


@lowering("gain")
def lower_gain(stage: Gain, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    # The factor is rounded to float32 by the op, as the CPU stage does (np.float32(factor)).
    return OpDesc("gain", stage.name, spec_in, spec_out, {"factor": float(stage.factor)})
