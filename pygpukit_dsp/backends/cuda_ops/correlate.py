"""CUDA lowering of ``correlate``: fir's native op (native/ops/fir.cpp) with the taps
``conj(r[::-1])``, planned by fir's cost rule (direct form for short references, overlap-save
through cuFFT for long ones; pygpukit_dsp/backends/cuda_ops/fir.py states the rule)."""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...signal import SignalSpec
from ...stages.correlate import Correlate
from ..cuda_lowering import OpDesc, lowering
from .fir import plan_cuda_fir


@lowering("correlate")
def lower_correlate(stage: Correlate, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    taps = stage.taps()
    h_complex = bool(np.iscomplexobj(taps))
    taps = taps.astype(np.complex128 if h_complex else np.float64)
    try:
        plan = plan_cuda_fir(taps.size, spec_in.channels, spec_in.block_size, spec_in.is_complex,
                             h_complex, stage.params.method)
    except UnsupportedError as exc:
        raise UnsupportedError(stage.name, "cuda", exc.reason) from None
    params: dict = {"taps": taps, "method": plan.method}
    if plan.method == "overlap_save":
        rows = taps[None, :]
        spectrum = (np.fft.fft(rows, plan.nfft, axis=-1) if spec_out.is_complex
                    else np.fft.rfft(rows, plan.nfft, axis=-1))
        params.update(nfft=plan.nfft, step=plan.step,
                      spectrum=np.ascontiguousarray(spectrum / plan.nfft))
    return OpDesc("fir", stage.name, spec_in, spec_out, params)
