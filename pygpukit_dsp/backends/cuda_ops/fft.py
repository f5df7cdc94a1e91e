"""CUDA lowerings of ``fft``, ``rfft``, ``ifft`` and ``irfft``: batched cuFFT plans.

One plan per op over channels x frames (native/ops/fft.cpp): C2C for complex input, R2C for
real input (``fft`` of real input fills the upper half of each frame with the Hermitian
mirror), C2C inverse + a 1/n scale for ``ifft``, and for ``irfft`` a scaled copy into scratch
(C2R overwrites its input) then C2R. NumPy's normalisation throughout. cuFFT plans any length.
"""

from __future__ import annotations

from ...signal import SignalSpec
from ...stages.base import Stage
from ..cuda_lowering import OpDesc, lowering


@lowering("fft")
def lower_fft(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    return OpDesc("fft", stage.name, spec_in, spec_out, {"n": stage.frame_length(spec_in)})


@lowering("rfft")
def lower_rfft(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    return OpDesc("rfft", stage.name, spec_in, spec_out, {"n": stage.frame_length(spec_in)})


@lowering("ifft")
def lower_ifft(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    return OpDesc("ifft", stage.name, spec_in, spec_out, {"n": stage.samples_per_frame(spec_in)})


@lowering("irfft")
def lower_irfft(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    return OpDesc("irfft", stage.name, spec_in, spec_out, {"n": stage.samples_per_frame(spec_in)})
