"""CUDA lowering of ``sos``: the biquad cascade with float64 state on the device.

The native op (native/ops/sos.cpp, kernels/sos.cu) runs one thread per channel (two for a
complex channel: the real coefficients filter the real and imaginary parts independently),
direct form II transposed in float64 exactly as scipy.signal.sosfilt, the section state kept
in device memory between blocks. The coefficients sit in shared memory, which caps the
cascade at 1024 sections. For few lanes and long blocks (at most 8 sections, see
:func:`.sos_scan.takes_scan`) the lowering adds the chunking and float64 transition matrices of
the parallel scan along time (:mod:`.sos_scan`), and the op runs that form instead.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...signal import SignalSpec
from ...stages.base import Stage
from ..cuda_lowering import OpDesc, lowering
from .sos_scan import scan_params, scan_plan, takes_scan

MAX_SECTIONS = 1024


@lowering("sos")
def lower_sos(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    sos = np.asarray(stage.sos_for(spec_in), dtype=np.float64)
    if sos.ndim == 1:
        sos = sos[None, :]
    if sos.shape[0] > MAX_SECTIONS:
        raise UnsupportedError(stage.name, "cuda", f"{sos.shape[0]} second-order sections; the "
                               f"CUDA sos op takes at most {MAX_SECTIONS}")
    params: dict[str, object] = {"sos": np.ascontiguousarray(sos)}
    lanes = spec_in.channels * (2 if spec_in.is_complex else 1)
    if takes_scan(sos.shape[0], lanes, spec_in.block_size):
        params.update(scan_params(scan_plan(sos, lanes, spec_in.block_size)))
    return OpDesc("sos", stage.name, spec_in, spec_out, params)
