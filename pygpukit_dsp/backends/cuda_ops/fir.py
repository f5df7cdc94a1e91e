"""CUDA lowering of ``fir``: direct form for short filters, overlap-save through cuFFT for long ones.

The native op (native/ops/fir.cpp, kernels/fir.cu) has two strategies; this module picks one
with a stated cost rule, in estimated microseconds per block on an H100-class GPU:

* direct: ``3 us + MACs / 1e7`` where ``MACs = channels * block * L_pad * cx`` (``L_pad`` the
  taps rounded up to the kernel's tap stage, 32 or 128; ``cx`` = 1 real, 2 one side complex,
  4 both complex): one kernel with the taps and input window staged through shared memory by
  cp.async, ~10 TMAC/s sustained, plus a history-update launch;
* overlap-save: ``12 us + bytes / 2e6 + flops / 2e7`` for the best power-of-two ``nfft``
  (``step = nfft - L + 1`` new samples per frame, ``q = ceil(block / step)`` frames per channel;
  ``bytes = 48 * nfft * q * channels`` (complex; 24 real), ``flops = 10 * nfft * log2(nfft) *
  q * channels`` (half for real)): framing, forward FFT, spectrum product, inverse FFT and the
  output copy, each a pass over memory.

The cheaper one wins; ``direct`` is limited to 4096 taps. ``method: direct`` or ``matmul``
forces the direct kernel (the GPU has no separate matmul form), ``overlap_save`` forces the FFT
path. W1 (64 ch x 256 samples, 256 taps) costs about 3.4 us direct against 12.5 us overlap-save.

``decimate: D > 1`` lowers to the ``ddc`` op without rotation (backends/cuda_ops/shift.py): only
the kept outputs are computed, one thread each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import UnsupportedError
from ...signal import SignalSpec
from ...stages.base import Stage
from ..cuda_lowering import OpDesc, lowering

DIRECT_MAX_TAPS = 4096
MAX_NFFT = 1 << 26

DIRECT_FIXED_US = 3.0
DIRECT_MACS_PER_US = 1.0e7
OLS_FIXED_US = 12.0
OLS_BYTES_PER_US = 2.0e6
OLS_FLOPS_PER_US = 2.0e7


@dataclass(frozen=True)
class CudaFirPlan:
    """The strategy for one filter: ``nfft``/``step`` are 0 for the direct form."""

    method: str  # "direct" | "overlap_save"
    nfft: int
    step: int
    direct_us: float
    ols_us: float


def direct_taps_padded(L: int) -> int:
    """Taps as the direct kernel walks them: stages of 32 (L <= 32) or 128 taps."""
    stage = 32 if L <= 32 else 128
    return -(-L // stage) * stage


def direct_cost_us(L: int, channels: int, block: int, cx: int) -> float:
    return DIRECT_FIXED_US + channels * block * direct_taps_padded(L) * cx / DIRECT_MACS_PER_US


def ols_cost_us(L: int, channels: int, block: int, nfft: int, real: bool) -> float:
    step = nfft - L + 1
    frames = -(-block // step)
    scale = 0.5 if real else 1.0
    bytes_moved = 48.0 * nfft * frames * channels * scale
    flops = 10.0 * nfft * math.log2(max(nfft, 2)) * frames * channels * scale
    return OLS_FIXED_US + bytes_moved / OLS_BYTES_PER_US + flops / OLS_FLOPS_PER_US


def best_overlap_save(L: int, channels: int, block: int, real: bool) -> tuple[int, int, float]:
    """(nfft, step, cost) of the cheapest power-of-two FFT size, or raise UnsupportedError."""
    best: tuple[int, int, float] | None = None
    k = max(1, math.ceil(math.log2(max(L, 2))))
    top = max(k, math.ceil(math.log2(L - 1 + block)) + 1)
    for e in range(k, top + 1):
        nfft = 1 << e
        if nfft > MAX_NFFT:
            break
        step = nfft - L + 1
        if step < 1:
            continue
        cost = ols_cost_us(L, channels, block, nfft, real)
        if best is None or cost < best[2]:
            best = (nfft, step, cost)
    if best is None:
        raise UnsupportedError("fir", "cuda", f"{L} taps need an FFT longer than {MAX_NFFT}")
    return best


def plan_cuda_fir(L: int, channels: int, block: int, x_complex: bool, h_complex: bool,
                  method: str = "auto") -> CudaFirPlan:
    """Pick the CUDA strategy for a filter of L taps (see the module docstring for the rule)."""
    cx = (2 if x_complex else 1) * (2 if h_complex else 1)
    real = not (x_complex or h_complex)
    direct_us = direct_cost_us(L, channels, block, cx)
    if method in ("direct", "matmul"):
        if L > DIRECT_MAX_TAPS:
            raise UnsupportedError("fir", "cuda", f"method '{method}' runs at most "
                                   f"{DIRECT_MAX_TAPS} taps on CUDA, got {L}; use method: auto "
                                   "or overlap_save")
        return CudaFirPlan("direct", 0, 0, direct_us, math.inf)
    nfft, step, ols_us = best_overlap_save(L, channels, block, real)
    if method == "overlap_save":
        return CudaFirPlan("overlap_save", nfft, step, direct_us, ols_us)
    if L <= DIRECT_MAX_TAPS and direct_us <= ols_us:
        return CudaFirPlan("direct", 0, 0, direct_us, ols_us)
    return CudaFirPlan("overlap_save", nfft, step, direct_us, ols_us)


@lowering("fir")
def lower_fir(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    taps = np.asarray(stage.taps_for(spec_in))
    decimate = getattr(stage.params, "decimate", 1)
    if decimate > 1:  # the polyphase decimating kernel of ddc, without its rotation
        return OpDesc("ddc", stage.name, spec_in, spec_out,
                      {"taps": np.ascontiguousarray(taps), "decimate": int(decimate), "step": 0})
    h_complex = bool(np.iscomplexobj(taps))
    taps = taps.astype(np.complex128 if h_complex else np.float64)
    L = taps.shape[-1]
    try:
        plan = plan_cuda_fir(L, spec_in.channels, spec_in.block_size, spec_in.is_complex, h_complex,
                             stage.params.method)
    except UnsupportedError as exc:
        raise UnsupportedError(stage.name, "cuda", exc.reason) from None
    params: dict = {"taps": taps, "method": plan.method}
    if plan.method == "overlap_save":
        rows = taps if taps.ndim == 2 else taps[None, :]
        if spec_out.is_complex:
            spectrum = np.fft.fft(rows, plan.nfft, axis=-1)
        else:
            spectrum = np.fft.rfft(rows, plan.nfft, axis=-1)
        params.update(nfft=plan.nfft, step=plan.step,
                      spectrum=np.ascontiguousarray(spectrum / plan.nfft))
    return OpDesc("fir", stage.name, spec_in, spec_out, params)
