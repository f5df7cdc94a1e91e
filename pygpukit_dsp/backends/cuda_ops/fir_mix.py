"""CUDA fusion of ``fir`` -> ``mix`` into one op, ``fir_mix`` (one kernel launch per block).

W1 (64 ch x 256 samples, 256 taps, 16 x 64 mix) is latency-bound: each kernel launch on a
block's critical path costs a few microseconds, more than the arithmetic. The fused kernel
(native/ops/kernels/fir_mix.cu) computes the FIR of a (time tile, channel group) per CTA with
the fir op's direct-form code, hands the tile's FIR output over through L2 and lets the last
CTA of each tile apply the matrix; the FIR history is updated in the same launch, as the fir op
does it (two device copies and a phase flag).

The fusion applies when

* the input is real float32 samples (time domain) and the taps are real, ``(L,)`` or
  ``(C_in, L)``;
* the fir's own plan is the direct form (``plan_cuda_fir`` with the stage's ``method``): the
  fused kernel does the direct form's work, so a filter the cost rule sends to overlap-save
  (long filters, or ``method: overlap_save``), or one above the direct form's 4096 taps, keeps
  the two ops;
* the matrix is real and 2-D, ``(C_out, C_in)`` with ``C_out * C_in <= 4096`` (it is held in
  shared memory, as the mix op's small-matrix kernel reads it).

Otherwise it returns None and ``fir`` and ``mix`` run as two ops: complex input, taps or matrix
would need complex variants of the kernel for cases W1 does not have, a per-bin matrix needs
frames (which fir refuses), and large matrices are cheaper through the mix op's cuBLAS path.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import UnsupportedError
from ...signal import SignalSpec
from ...stages.base import Stage
from ..cuda_lowering import OpDesc, fusion
from .fir import plan_cuda_fir

FUSED_MAX_ENTRIES = 4096  # C_out * C_in (mirrors kMaxEntries in native/ops/fir_mix.cpp)


def fir_mix_reason(fir: Stage, mix: Stage, spec_in: SignalSpec) -> str | None:
    """Why ``fir -> mix`` on input ``spec_in`` does not fuse into ``fir_mix`` (None when it does)."""
    if spec_in.domain != "time":
        return "the input is frames, not time-domain samples"
    if spec_in.is_complex:
        return "the input is complex (the fused kernel takes float32)"
    taps = np.asarray(fir.taps_for(spec_in))
    if np.iscomplexobj(taps):
        return "the taps are complex"
    matrix = np.asarray(mix.matrix)
    if matrix.ndim != 2:
        return f"the matrix has shape {matrix.shape} (one per bin); the fused op takes one (C_out, C_in) matrix"
    if np.iscomplexobj(matrix):
        return "the matrix is complex"
    if matrix.size > FUSED_MAX_ENTRIES:
        return f"the matrix has {matrix.size} entries (more than {FUSED_MAX_ENTRIES}: cuBLAS mix)"
    L = taps.shape[-1]
    try:
        plan = plan_cuda_fir(L, spec_in.channels, spec_in.block_size, False, False, fir.params.method)
    except UnsupportedError as exc:
        return exc.reason
    if plan.method != "direct":
        return f"the fir runs as overlap-save ({L} taps), not the direct form the fused kernel does"
    return None


@fusion("fir", "mix")
def fuse_fir_mix(stages: Sequence[Stage], specs: Sequence[SignalSpec]) -> OpDesc | None:
    """One ``fir_mix`` op for a fir followed by a mix, or None (module docstring: when)."""
    fir, mix = stages
    if fir_mix_reason(fir, mix, specs[0]) is not None:
        return None
    taps = np.ascontiguousarray(np.asarray(fir.taps_for(specs[0])), dtype=np.float64)
    matrix = np.ascontiguousarray(np.asarray(mix.matrix), dtype=np.float64)
    return OpDesc("fir_mix", f"{fir.name}+{mix.name}", specs[0], specs[2],
                  {"taps": taps, "matrix": matrix})
