"""CUDA lowering of ``shift`` and ``ddc`` (native ops ``shift`` and ``ddc``: kernels/shift.cu,
kernels/ddc.cu, kernels/nco.cuh).

Both rotate by a 64-bit fixed-point phase: ``step = round(inc * 2^64) mod 2^64`` for ``inc``
cycles per sample (``freq_hz / fs``; ``-freq_hz / fs`` for ddc), made here in exact integer
arithmetic and passed as a signed int64. The phase of sample n is ``step * n mod 2^64`` on the
device, exact for any n; against the float64 ``inc`` it errs by at most ``n * 2^-65`` cycles.

ddc runs as one kernel: ``y[m] = r(mD) * sum_l g[l] x[mD - l]`` with ``r(n) = exp(2j*pi*inc*n)``
and the taps modulated here in float64, ``g[l] = h[l] * exp(-2j*pi*inc*l)``, which equals
``fir(decimate=D)`` of ``shift(inc)``. ``fir`` with ``decimate > 1`` lowers to the same op with
``step = 0`` (backends/cuda_ops/fir.py).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ...signal import SignalSpec
from ...stages.base import Stage
from ..cuda_lowering import OpDesc, lowering


def phase_step(inc: float) -> int:
    """round(inc * 2^64) mod 2^64 as a signed 64-bit integer (the native op's ``step``)."""
    step = round(Fraction(float(inc)) * (1 << 64)) % (1 << 64)
    return step - (1 << 64) if step >= 1 << 63 else step


@lowering("shift")
def lower_shift(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    return OpDesc("shift", stage.name, spec_in, spec_out, {"step": phase_step(stage.cycles_per_sample(spec_in))})


def modulated_taps(taps: np.ndarray, inc: float) -> np.ndarray:
    """g[l] = h[l] * exp(-2j*pi*inc*l), complex128 (rows of per-channel taps alike)."""
    L = taps.shape[-1]
    return np.asarray(taps, dtype=np.complex128) * np.exp(-2j * np.pi * (inc * np.arange(L, dtype=np.float64)))


@lowering("ddc")
def lower_ddc(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    inc = stage.cycles_per_sample(spec_in)
    taps = np.asarray(stage.taps_for(spec_in))
    return OpDesc("ddc", stage.name, spec_in, spec_out,
                  {"taps": np.ascontiguousarray(modulated_taps(taps, inc)), "decimate": int(stage.decimate),
                   "step": phase_step(inc)})
