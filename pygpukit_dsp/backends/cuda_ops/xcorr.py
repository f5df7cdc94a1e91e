"""CUDA lowering of ``xcorr`` (native/ops/xcorr.cpp, kernels/xcorr.cu), two implementations:

* ``kernel`` (at most 64 inputs): one launch that reads the input once; each thread accumulates
  an 8 x 8 tile of pairs of one bin in FP32 registers over a run of N frames;
* ``cublas``: a gather kernel to (bins, F, C), cublasCgemmStridedBatched A A^H per bin and run
  (FP32, all C x C entries), a kernel packing the pairs i <= j.

``auto`` takes the kernel up to 64 inputs (it moves no C x C scratch through memory), cublas above.
From 57 to 64 inputs the kernel's CTA holds 7 bins (36 tiles x 7 = 252 threads), not 8 (a kernel
at the registers its tiles need takes at most 256 threads a CTA); at C = 64, 1024 bins, F = 256,
N = 64 on an H200 it took 297 us (the kernel alone, CUDA events) against cublas's 345 us.
"""

from __future__ import annotations

from ...errors import UnsupportedError
from ...signal import SignalSpec
from ...stages.xcorr import Xcorr
from ..cuda_lowering import OpDesc, lowering

KERNEL_MAX_INPUTS = 64  # method kernel: at most 8 x 8 tiles of 8 x 8 pairs (native/ops/xcorr.cpp)
AUTO_KERNEL_INPUTS = 64  # auto: the kernel up to here, cublas above


@lowering("xcorr")
def lower_xcorr(stage: Xcorr, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    inputs, bins = stage.inputs_and_bins(spec_in)
    method = stage.params.method
    if method == "auto":
        method = "kernel" if inputs <= AUTO_KERNEL_INPUTS else "cublas"
    elif method == "kernel" and inputs > KERNEL_MAX_INPUTS:
        raise UnsupportedError(stage.name, "cuda", f"method 'kernel' takes at most {KERNEL_MAX_INPUTS} "
                               f"inputs, got {inputs}; use method: cublas or auto")
    return OpDesc("xcorr", stage.name, spec_in, spec_out,
                  {"inputs": inputs, "bins": bins, "integrate": stage.params.integrate, "method": method})
