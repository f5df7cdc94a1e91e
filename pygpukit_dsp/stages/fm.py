"""fm_demod: the FM discriminator (phase difference of successive samples), optional de-emphasis."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field

from ..signal import SignalSpec
from ._common import require_domain
from .base import Stage, StageParams, register_stage


class FmDemodParams(StageParams):
    gain: float = Field(1.0, description="Output scale: y[n] = gain * angle(x[n] * conj(x[n-1])) "
                        "(radians per sample times gain; fs / (2*pi*deviation_hz) gives +-1 at "
                        "full deviation).")
    deemphasis_us: Literal[50, 75] | None = Field(
        None, description="De-emphasis time constant in microseconds (50: Europe, 75: the Americas), "
        "a one-pole low-pass after the discriminator: y = lfilter([1 - a], [1, -a], d) with "
        "a = exp(-1 / (fs * tau)). Not set: none.")


def deemphasis_pole(deemphasis_us: float, sample_rate: float) -> float:
    """a = exp(-1 / (fs * tau)), tau = deemphasis_us * 1e-6."""
    return math.exp(-1.0 / (sample_rate * deemphasis_us * 1e-6))


class FmDemodProcessor:
    """State: the last input sample of every channel (0 before the stream) and the de-emphasis
    filter's last output."""

    def __init__(self, channels: int, gain: float, pole: float | None, complex_in: bool):
        self.gain, self.pole, self.complex_in = gain, pole, complex_in
        self.prev = np.zeros(channels, np.complex128 if complex_in else np.float64)
        self.zi = np.zeros((channels, 1))
        if pole is not None:
            import scipy.signal as ssig  # SciPy loads when a processor is made, not with the catalog

            self._lfilter = ssig.lfilter

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        n = x.shape[-1]
        if n == 0:
            return np.zeros((x.shape[0], 0), np.float32)
        xd = x.astype(self.prev.dtype)
        before = np.concatenate([self.prev[:, None], xd[:, :-1]], axis=1)
        # numpy.angle of the product, signed zeros included (a real one: pi where it is negative)
        d = np.angle(xd * np.conj(before)) if self.complex_in else np.angle(xd * before)
        d *= self.gain
        self.prev = xd[:, -1].copy()
        if self.pole is not None:
            a = self.pole
            d, self.zi = self._lfilter([1.0 - a], [1.0, -a], d, axis=-1, zi=self.zi)
        return d.astype(np.float32)

    def reset(self) -> None:
        self.prev[...] = 0
        self.zi[...] = 0


@register_stage
class FmDemod(Stage):
    """FM discriminator: ``y[n] = gain * angle(x[n] * conj(x[n-1]))``, ``x[-1] = 0`` at the start.

    Complex input (a real one gives angle(x[n] * x[n-1]): pi where the product is negative,
    else 0), float32 output at the input's rate and block size, no delay. ``deemphasis_us`` (50 or 75) adds the broadcast
    de-emphasis, ``lfilter([1 - a], [1, -a])`` with ``a = exp(-1 / (fs * tau))`` (unit gain at 0
    Hz), its state carried across blocks.
    """

    type = "fm_demod"
    summary = "FM discriminator gain * angle(x[n] * conj(x[n-1])), optional 50/75 us de-emphasis"
    Params = FmDemodParams

    def pole(self, spec: SignalSpec) -> float | None:
        us = self.params.deemphasis_us
        return None if us is None else deemphasis_pole(us, spec.sample_rate)

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where)
        return spec.with_(dtype="float32")

    def state_bytes(self, spec: SignalSpec) -> int:
        return 48 * spec.channels * spec.block_size

    def cpu(self, spec: SignalSpec) -> FmDemodProcessor:
        self.output_spec(spec)
        return FmDemodProcessor(spec.channels, self.params.gain, self.pole(spec), spec.is_complex)
