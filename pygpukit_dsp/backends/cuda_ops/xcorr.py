"""CUDA lowering of ``xcorr``: the X-engine as cublasCgemmStridedBatched over bins and runs of
frames, between a gather kernel and a pair-packing kernel (native/ops/xcorr.cpp,
kernels/xcorr.cu)."""

from __future__ import annotations

from ...signal import SignalSpec
from ...stages.xcorr import Xcorr
from ..cuda_lowering import OpDesc, lowering


@lowering("xcorr")
def lower_xcorr(stage: Xcorr, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    inputs, bins = stage.inputs_and_bins(spec_in)
    return OpDesc("xcorr", stage.name, spec_in, spec_out,
                  {"inputs": inputs, "bins": bins, "integrate": stage.params.integrate})
