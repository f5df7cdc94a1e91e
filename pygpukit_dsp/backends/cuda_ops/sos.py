"""CUDA lowering of ``sos``: the biquad cascade with float64 state on the device.

The native op (native/ops/sos.cpp, kernels/sos.cu) runs one thread per channel (two for a
complex channel: the real coefficients filter the real and imaginary parts independently),
direct form II transposed in float64 exactly as scipy.signal.sosfilt, the section state kept
in device memory between blocks. The coefficients sit in shared memory, which caps the
cascade at 1024 sections. For few channels and long blocks (at most 8 sections) the op uses a
chunked form instead: chunks filtered in parallel from a zero state, then the true chunk start
states carried through the cascade's precomputed state transition (see docs/cuda.md).
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...signal import SignalSpec
from ...stages.base import Stage
from ..cuda_lowering import OpDesc, lowering

MAX_SECTIONS = 1024


@lowering("sos")
def lower_sos(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    sos = np.asarray(stage.sos_for(spec_in), dtype=np.float64)
    if sos.ndim == 1:
        sos = sos[None, :]
    if sos.shape[0] > MAX_SECTIONS:
        raise UnsupportedError(stage.name, "cuda", f"{sos.shape[0]} second-order sections; the "
                               f"CUDA sos op takes at most {MAX_SECTIONS}")
    return OpDesc("sos", stage.name, spec_in, spec_out, {"sos": np.ascontiguousarray(sos)})
