"""CUDA lowering of ``stft``, and the fused ``stft -> power -> average`` op of workload W2.

``stft`` (native/ops/stft.cpp): a framing kernel builds ``(channels, frames, nfft)`` from
``[history | block]`` with the window applied on the way, then one batched cuFFT (R2C for real
input, C2C for complex); the ``nfft - hop`` samples of history stay on the device.

``stft_power_average`` replaces the three stages when the input is complex64, ``hop == nfft``
(frames do not overlap, so there is no history) and ``nfft`` is a power of two from 256 to
4096: one kernel reads each sample once, multiplies by the window, runs the FFT in registers
and shared memory, and accumulates ``|X|^2`` over the frames of each averaging group; only the
averaged spectra are written. Otherwise the fusion returns None and the three ops run
separately.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...signal import SignalSpec
from ...stages.base import Stage
from ..cuda_lowering import OpDesc, fusion, lowering

FUSED_NFFT = (256, 512, 1024, 2048, 4096)


@lowering("stft")
def lower_stft(stage: Stage, spec_in: SignalSpec, spec_out: SignalSpec) -> OpDesc:
    window = np.ascontiguousarray(stage.window(), dtype=np.float64)
    return OpDesc("stft", stage.name, spec_in, spec_out,
                  {"nfft": stage.params.nfft, "hop": stage.hop, "window": window})


def fused_stft_power_average_reason(stft: Stage, spec_in: SignalSpec) -> str | None:
    """Why the fused op does not apply to this stft (None when it does)."""
    nfft = stft.params.nfft
    if not spec_in.is_complex:
        return "the input is real (the fused op takes complex64)"
    if stft.hop != nfft:
        return f"hop {stft.hop} != nfft {nfft} (the fused op needs non-overlapping frames)"
    if nfft not in FUSED_NFFT:
        return f"nfft {nfft} is not a power of two from 256 to 4096"
    return None


@fusion("stft", "power", "average")
def fuse_stft_power_average(stages: Sequence[Stage], specs: Sequence[SignalSpec]) -> OpDesc | None:
    stft, power, average = stages
    if fused_stft_power_average_reason(stft, specs[0]) is not None:
        return None
    frames_per_block = specs[1].block_size
    if frames_per_block % average.params.frames != 0:
        return None
    window = np.ascontiguousarray(stft.window(), dtype=np.float64)
    return OpDesc("stft_power_average", f"{stft.name}+{power.name}+{average.name}", specs[0],
                  specs[3], {"nfft": stft.params.nfft, "window": window,
                             "frames": average.params.frames})
