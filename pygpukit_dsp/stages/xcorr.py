"""xcorr: a correlator's X-engine (cross-power of every pair of inputs, integrated over frames)."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ..errors import ConfigError
from ..signal import SignalSpec
from ._common import require_multiple
from .base import Stage, StageParams, register_stage

MAX_INPUTS = 1024  # C: the output has C(C+1)/2 rows


class XcorrParams(StageParams):
    integrate: int = Field(..., ge=1, description="N: frames integrated into one output frame (the "
                           "mean over each run of N frames). The input block_size (frames per "
                           "block) must be a multiple of N.")
    bins: int | None = Field(None, ge=1, description="For time-domain input (a channelizer's output, "
                             "C*M channels): M, the subchannels per input; channel c*M + k is input "
                             "c's bin k and each sample a frame. Not used with frames-domain input.")
    method: Literal["auto", "tensor", "kernel", "cublas"] = Field(
        "auto", description="The cuda backend's implementation: 'tensor' (FP16 tensor cores at FP32 "
        "accuracy by two-part splits, at most 64 inputs), 'kernel' (a tiled FP32 kernel, "
        "at most 64 inputs), 'cublas' (cublasCgemmStridedBatched per bin and run); 'auto' takes "
        "'tensor' up to 64 inputs, 'cublas' above. "
        "The cpu backend computes the same values either way.")


def pair_index(C: int) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) of every output row: the pairs i <= j in row-major order
    ((0,0), (0,1), ..., (0,C-1), (1,1), ..., (C-1,C-1)); row p of pair (i, j) is
    ``i*C - i*(i-1)//2 + (j - i)``."""
    return np.triu_indices(C)


class XcorrProcessor:
    def __init__(self, inputs: int, integrate: int, time_bins: int | None = None):
        self.i, self.j = pair_index(inputs)
        self.N = integrate
        self.time_bins = time_bins  # time-domain input: (C*M, n) -> frames (C, n, M)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        if self.time_bins is not None:
            M = self.time_bins
            x = x.reshape(x.shape[0] // M, M, x.shape[1]).transpose(0, 2, 1)
        C, F, bins = x.shape
        N = self.N
        groups = -(-F // N)
        out = np.empty((self.i.size, groups, bins), np.complex64)
        xd = x.astype(np.complex128)
        for g in range(groups):
            seg = xd[:, g * N:min((g + 1) * N, F)]  # a final partial group: the frames that remain
            # R[i, j, b] = mean_f X_i[f, b] conj(X_j[f, b])
            R = np.einsum("ifb,jfb->ijb", seg, seg.conj()) / seg.shape[1]
            out[:, g] = R[self.i, self.j]
        return out

    def reset(self) -> None:
        """Every full block holds whole runs of N frames: no streaming state."""


@register_stage
class Xcorr(Stage):
    """Correlator X-engine: ``(C, F, bins)`` frames -> ``(C(C+1)/2, F/N, bins)`` complex64.

    Time-domain input from a channelizer (``C*M`` channels) is read with ``bins: M`` as the
    frames ``X_c[f, k] = x[c*M + k, f]``.

    Output row ``p`` is the pair ``(i, j)``, ``i <= j``, in row-major order (row
    ``i*C - i*(i-1)/2 + (j - i)``); output frame ``g`` is the mean over input frames
    ``g*N .. g*N + N - 1`` of ``X_i * conj(X_j)``, per bin. Rows with ``i == j`` are the
    auto-powers (real). The input block_size must be a multiple of N, so runs never straddle
    blocks; a final partial block gives ``ceil(F'/N)`` frames, the last the mean of the frames
    that remain. Real input is taken as complex. Output rate: the frame rate / N.
    """

    type = "xcorr"
    summary = "Correlator X-engine: mean of X_i conj(X_j) for every pair i <= j over N frames"
    Params = XcorrParams

    def state_bytes(self, spec: SignalSpec) -> int:
        C, bins = self.inputs_and_bins(spec)
        # the float64 copy of the block and the products of one run of frames (C x C x bins)
        return C * C * bins * 16 + C * spec.block_size * bins * 16

    def inputs_and_bins(self, spec: SignalSpec) -> tuple[int, int]:
        """(C, bins) of the input: its channels and bins, or for time-domain input (C*M, n)
        with ``bins: M``, (C, M)."""
        M = self.params.bins
        if spec.domain == "frames":
            if M is not None and M != spec.bins:
                raise ConfigError(f"bins: {M} is given, but the input frames have {spec.bins} bins",
                                  where=self.where, path=("bins",),
                                  hint="leave bins out for frames-domain input")
            return spec.channels, spec.bins
        if M is None:
            raise ConfigError("xcorr needs frames-domain input (C, F, bins), or time-domain input "
                              "from a channelizer with 'bins: M' (its subchannels per input)",
                              where=self.where,
                              hint="add fft or stft before xcorr, or set bins to the channelizer's channels")
        if spec.channels % M:
            raise ConfigError(f"the input's {spec.channels} channels are not a multiple of bins = {M}",
                              where=self.where, path=("bins",),
                              hint="bins is the channelizer's channels (M); its output has C*M channels")
        return spec.channels // M, M

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        C, bins = self.inputs_and_bins(spec)
        if C > MAX_INPUTS:
            raise ConfigError(f"xcorr takes at most {MAX_INPUTS} inputs, got {C}", where=self.where)
        N = self.params.integrate
        require_multiple(spec, N, "integrate (frames per output frame)", unit="frames",
                         where=self.where)
        return SignalSpec(sample_rate=spec.sample_rate / N, channels=C * (C + 1) // 2,
                          block_size=spec.block_size // N, dtype="complex64", domain="frames",
                          bins=bins)

    def cpu(self, spec: SignalSpec) -> XcorrProcessor:
        self.output_spec(spec)
        C, _ = self.inputs_and_bins(spec)
        return XcorrProcessor(C, self.params.integrate,
                              self.params.bins if spec.domain == "time" else None)
