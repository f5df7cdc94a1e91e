"""CUDA lowering of ``hilbert``: the ``fir`` op with the stage's complex taps.

``x[n - d] + j * (h * x)[n]`` is one complex-tap FIR of the real input (a unit impulse at d in
the real part, the Hilbert transformer in the imaginary part: ``stages.hilbert.analytic_taps``),
so it runs on the fir op (native/ops/fir.cpp) with the strategy fir's cost rule picks.
"""

from __future__ import annotations

from ...signal import SignalSpec
from ...stages.base import Stage
from ..cuda_lowering import OpDesc, lowering
from .fir import lower_fir


@lowering("hilbert")
def lower_hilbert(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    return lower_fir(stage.as_fir(), spec_in, spec_out)
