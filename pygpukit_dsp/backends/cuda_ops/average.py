"""CUDA lowering of ``average`` (native op ``average``: mean of runs of frames, double sums)."""

from __future__ import annotations

from ...signal import SignalSpec
from ...stages.average import Average
from ..cuda_lowering import OpDesc, lowering


@lowering("average")
def lower_average(stage: Average, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    return OpDesc("average", stage.name, spec_in, spec_out, {"frames": int(stage.params.frames)})
