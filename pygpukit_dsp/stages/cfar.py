"""cfar: cell-averaging constant-false-alarm-rate detection, along time or along the bins of frames.

The input is power: a real input is taken as it is, a complex input as ``|x|^2``. For each cell
under test (CUT) the noise estimate is the mean of the training cells: ``train`` cells on each
side, outside ``guard`` cells on each side of the CUT. The threshold is ``alpha * noise`` with
``alpha = scale``, or from ``pfa`` by the CA-CFAR formula for exponentially distributed noise
power, ``alpha = N * (pfa**(-1/N) - 1)`` where ``N`` is the number of training cells (``2*train``).
The output (float32, the input's shape) is the threshold, or the mask ``1.0 where P(CUT) >
threshold, else 0.0``.

* Time-domain input: each channel along time, delayed by ``D = guard + train`` samples: output
  sample ``n`` is for the CUT ``t = n - D``, whose window ``[t - D, t + D]`` ends at ``n``. The
  input before the stream's start is zero (as in every streaming stage here), so the first
  ``D`` outputs are for CUTs before the start (mask 0) and the thresholds of the first ``2D``
  outputs include those zeros.
* Frames-domain input ``(C, F, bins)``: each frame along its bins, no delay. A CUT near either
  end uses the training cells that fall inside ``[0, bins)`` (``N_b`` of them, at least
  ``train``): the mean of those, and with ``pfa`` ``alpha_b = N_b * (pfa**(-1/N_b) - 1)``.
  ``bins >= 2*(guard + train) + 1`` is required.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ..errors import ConfigError
from ..signal import SignalSpec
from .base import Stage, StageParams, register_stage

MAX_WINDOW = 4096  # guard + train: the GPU keeps a block's window in shared memory


class CfarParams(StageParams):
    guard: int = Field(2, ge=0, description="Guard cells on each side of the cell under test "
                       "(excluded from the noise estimate).")
    train: int = Field(8, ge=1, description="Training cells on each side, outside the guard cells: "
                       "the noise estimate is the mean of the 2*train of them.")
    pfa: float | None = Field(None, ge=1e-30, lt=1.0, description="Probability of false alarm "
                              "(1e-30 to below 1): "
                              "alpha = N*(pfa**(-1/N) - 1), N the number of training cells. The "
                              "default when neither pfa nor scale is given is 1e-3.")
    scale: float | None = Field(None, gt=0.0, le=1e30, description="The threshold factor alpha itself "
                                "(threshold = alpha * noise), instead of pfa.")
    output: Literal["mask", "threshold"] = Field("mask", description="'mask': 1.0 where the cell's "
                                                 "power is above its threshold, else 0.0; "
                                                 "'threshold': the threshold itself.")

    @model_validator(mode="after")
    def _not_both(self) -> "CfarParams":
        if self.pfa is not None and self.scale is not None:
            raise ValueError("give either 'pfa' or 'scale', not both")
        if self.guard + self.train > MAX_WINDOW:
            raise ValueError(f"guard + train = {self.guard + self.train} is above the limit of "
                             f"{MAX_WINDOW} cells per side")
        return self

    @property
    def window(self) -> int:
        """Cells on each side of the CUT: guard + train (also the time-domain delay)."""
        return self.guard + self.train

    def alpha(self, n_train: int) -> float:
        """The threshold factor for ``n_train`` training cells."""
        if self.scale is not None:
            return float(self.scale)
        pfa = 1e-3 if self.pfa is None else self.pfa
        return n_train * (pfa ** (-1.0 / n_train) - 1.0)


def bin_training_counts(bins: int, guard: int, train: int) -> np.ndarray:
    """N_b: the training cells of each bin that fall inside [0, bins)."""
    b = np.arange(bins)
    left = np.clip(b - guard, 0, train)
    right = np.clip(bins - 1 - b - guard, 0, train)
    return (left + right).astype(np.int64)


def bin_coefficients(params: CfarParams, bins: int) -> np.ndarray:
    """threshold[b] = coef[b] * (sum of bin b's training cells): alpha_b / N_b."""
    counts = bin_training_counts(bins, params.guard, params.train)
    return np.array([params.alpha(int(n)) / n for n in counts])


def time_coefficient(params: CfarParams) -> float:
    """threshold = coef * (sum of the 2*train training cells): alpha / (2*train)."""
    n = 2 * params.train
    return params.alpha(n) / n


def _power(x: np.ndarray) -> np.ndarray:
    if np.iscomplexobj(x):
        return x.real.astype(np.float64) ** 2 + x.imag.astype(np.float64) ** 2
    return x.astype(np.float64)


class TimeCfar:
    """Along time: a history of 2*D input samples; running sums through a float64 cumsum."""

    def __init__(self, params: CfarParams, channels: int, block_size: int):
        self.guard, self.train, self.D = params.guard, params.train, params.window
        self.coef = time_coefficient(params)
        self.mask = params.output == "mask"
        self.ext = np.zeros((channels, 2 * self.D + block_size))

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        n, D, g, t = x.shape[-1], self.D, self.guard, self.train
        ext = self.ext
        ext[:, 2 * D:2 * D + n] = _power(x)
        S = np.zeros((ext.shape[0], 2 * D + n + 1))
        np.cumsum(ext[:, :2 * D + n], axis=1, out=S[:, 1:])
        i = np.arange(n)
        # output i (ext index i + 2D): CUT at ext index i + D; left cells [i, i + train),
        # right cells [i + D + guard + 1, i + 2D + 1)
        noise = (S[:, i + t] - S[:, i]) + (S[:, i + 2 * D + 1] - S[:, i + D + g + 1])
        thr = self.coef * noise
        out = (ext[:, i + D] > thr) if self.mask else thr
        ext[:, :2 * D] = ext[:, n:n + 2 * D]
        return out.astype(np.float32)

    def reset(self) -> None:
        self.ext[...] = 0


class BinCfar:
    """Along the bins of each frame: no state."""

    def __init__(self, params: CfarParams, bins: int):
        self.guard, self.train = params.guard, params.train
        self.coef = bin_coefficients(params, bins)
        self.mask = params.output == "mask"
        b = np.arange(bins)
        D = params.window
        # sum over [lo, hi) of each side through a cumsum S (S[j] = sum of cells before j)
        self.l_lo, self.l_hi = np.clip(b - D, 0, bins), np.clip(b - params.guard, 0, bins)
        self.r_lo, self.r_hi = np.clip(b + params.guard + 1, 0, bins), np.clip(b + D + 1, 0, bins)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        P = _power(x)
        S = np.zeros(P.shape[:-1] + (P.shape[-1] + 1,))
        np.cumsum(P, axis=-1, out=S[..., 1:])
        noise = (S[..., self.l_hi] - S[..., self.l_lo]) + (S[..., self.r_hi] - S[..., self.r_lo])
        thr = self.coef * noise
        out = (P > thr) if self.mask else thr
        return out.astype(np.float32)

    def reset(self) -> None:
        """Each frame is detected on its own: no streaming state."""


@register_stage
class Cfar(Stage):
    """Cell-averaging CFAR detector: a threshold or a 0/1 mask, along time or along bins.

    Power ``P`` = the input (real) or ``|x|^2`` (complex). For a cell under test, ``noise`` =
    the mean of its training cells (``train`` on each side beyond ``guard`` guard cells on each
    side), ``threshold = alpha * noise`` with ``alpha = scale`` or ``N*(pfa**(-1/N) - 1)`` (``N``
    training cells; pfa 1e-3 when neither is given); ``output: mask`` gives
    ``P > threshold`` as 1.0/0.0. Time domain: along each channel, output sample ``n`` is for
    the cell ``n - (guard + train)`` (a delay of guard + train samples; zeros before the start).
    Frames domain: along the bins of each frame, no delay; cells near the ends use the training
    cells inside the frame (N_b of them). float32 out, the input's shape.
    """

    type = "cfar"
    summary = "Cell-averaging CFAR: threshold or detection mask, along time or bins"
    Params = CfarParams

    def delay(self, spec: SignalSpec) -> int:
        """Samples between a cell and its output: guard + train along time, 0 along bins."""
        return self.params.window if spec.domain == "time" else 0

    def state_bytes(self, spec: SignalSpec) -> int:
        row = spec.block_size * max(spec.bins, 1)
        return spec.channels * (2 * self.params.window + row + 1) * 8 * 3

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        if spec.domain == "frames":
            need = 2 * self.params.window + 1
            if spec.bins < need:
                raise ConfigError(
                    f"frames of {spec.bins} bins are shorter than the CFAR window 2*(guard + train) "
                    f"+ 1 = {need}", where=self.where,
                    hint="use fewer guard or training cells, or more bins (a longer FFT)")
        return spec.with_(dtype="float32")

    def cpu(self, spec: SignalSpec) -> TimeCfar | BinCfar:
        self.output_spec(spec)
        if spec.domain == "frames":
            return BinCfar(self.params, spec.bins)
        return TimeCfar(self.params, spec.channels, spec.block_size)

