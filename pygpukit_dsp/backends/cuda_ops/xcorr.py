"""CUDA lowering of ``xcorr`` (native/ops/xcorr.cpp, kernels/xcorr_tc.cu and xcorr.cu), three
implementations:

* ``tensor`` (at most 64 inputs; every SM 8.0+ GPU has FP16 tensor cores): one launch that reads the
  input once; the tensor cores multiply 16 x 16 tiles of pairs at FP32 accuracy (each value scaled
  by a power of two per input and split into an FP16 high and low part, three products with FP32
  accumulation), four bins a CTA, 1 to 3 warps a bin;
* ``kernel`` (at most 64 inputs): one launch that reads the input once; each thread accumulates
  an 8 x 8 tile of pairs of one bin in FP32 registers over a run of N frames;
* ``cublas``: a gather kernel to (bins, F, C), cublasCgemmStridedBatched A A^H per bin and run
  (FP32, all C x C entries), a kernel packing the pairs i <= j.

``auto`` takes ``tensor`` up to 64 inputs, cublas above: on an H200 (1024 bins, 256 frames, N = 64)
the tensor kernel took 0.44 to 0.83 of the FP32 kernel's time at 8 to 64 inputs (183 against 288 us
at 64). Figures: docs/benchmarks.md.
"""

from __future__ import annotations

from ...errors import UnsupportedError
from ...signal import SignalSpec
from ...stages.xcorr import Xcorr
from ..cuda_lowering import OpDesc, lowering

KERNEL_MAX_INPUTS = 64  # methods tensor and kernel: the staged rows of their CTAs (native/ops/xcorr.cpp)
AUTO_TENSOR_INPUTS = 64  # auto: tensor up to here, cublas above


@lowering("xcorr")
def lower_xcorr(stage: Xcorr, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    inputs, bins = stage.inputs_and_bins(spec_in)
    method = stage.params.method
    if method == "auto":
        method = "tensor" if inputs <= AUTO_TENSOR_INPUTS else "cublas"
    elif method in ("tensor", "kernel") and inputs > KERNEL_MAX_INPUTS:
        raise UnsupportedError(stage.name, "cuda", f"method '{method}' takes at most {KERNEL_MAX_INPUTS} "
                               f"inputs, got {inputs}; use method: cublas or auto")
    return OpDesc("xcorr", stage.name, spec_in, spec_out,
                  {"inputs": inputs, "bins": bins, "integrate": stage.params.integrate, "method": method})
