"""average: mean of each run of consecutive frames (spectrum averaging)."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from ..signal import SignalSpec
from ._common import require_domain, require_multiple
from .base import Stage, StageParams, register_stage


class AverageParams(StageParams):
    frames: int = Field(..., ge=1, description="Number of consecutive frames averaged into one output "
                        "frame. The input block_size (frames per block) must be a multiple of it.")


class AverageProcessor:
    def __init__(self, frames: int, out_dtype: np.dtype):
        self.frames = frames
        self.out_dtype = out_dtype
        # accumulate in double precision: float32 sums of thousands of frames drift
        self.acc_dtype = np.complex128 if out_dtype.kind == "c" else np.float64

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        c, f, bins = x.shape
        full = f // self.frames
        rest = f - full * self.frames
        groups = x[:, :full * self.frames].reshape(c, full, self.frames, bins)
        y = groups.mean(axis=2, dtype=self.acc_dtype).astype(self.out_dtype)
        if rest:  # final partial block: the mean of the frames that remain
            tail = x[:, full * self.frames:].mean(axis=1, dtype=self.acc_dtype).astype(self.out_dtype)
            y = np.concatenate([y, tail[:, None, :]], axis=1)
        return y

    def reset(self) -> None:
        """Every full block holds whole groups of frames: no streaming state."""


@register_stage
class Average(Stage):
    """Average each run of ``frames`` consecutive frames (e.g. Welch-style |X|^2 averaging).

    Frames domain ``(C, F, bins)`` -> ``(C, F/frames, bins)`` at ``frame_rate/frames``; the
    input block_size must be a multiple of ``frames``, so groups never straddle blocks.
    Real or complex input, same dtype out (sums are taken in float64). A final partial
    block yields ``ceil(F'/frames)`` frames, the last one the mean of the frames that remain.
    """

    type = "average"
    summary = "Average runs of consecutive frames"
    Params = AverageParams

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "frames", where=self.where,
                       hint="add fft, rfft or stft (then power) before average")
        require_multiple(spec, self.params.frames, "frames (the averaging length)", unit="frames",
                         where=self.where)
        k = self.params.frames
        return spec.with_(block_size=spec.block_size // k, sample_rate=spec.sample_rate / k)

    def cpu(self, spec: SignalSpec) -> AverageProcessor:
        out = self.output_spec(spec)
        return AverageProcessor(self.params.frames, out.np_dtype)
