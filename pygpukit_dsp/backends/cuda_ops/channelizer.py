"""CUDA lowering of ``channelizer``: polyphase branches + an M-point cuFFT across them.

The op (native/ops/channelizer.cpp, kernels/channelizer.cu) computes, for every decimated
sample m and branch p, ``v[m][p] = sum_r h[p + M*r] * x[(m - r)*M - p]`` (history of earlier
blocks on the device), then cuFFT's unnormalised inverse transform over p gives subchannel k
(centred at k*fs/M, FFT order), written to output channel ``c*M + k``.
"""

from __future__ import annotations

import numpy as np

from ...signal import SignalSpec
from ...stages.base import Stage
from ..cuda_lowering import OpDesc, lowering


@lowering("channelizer")
def lower_channelizer(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    prototype = np.ascontiguousarray(stage.prototype(), dtype=np.float64)
    return OpDesc("channelizer", stage.name, spec_in, spec_out,
                  {"channels": stage.params.channels, "prototype": prototype})
