"""hilbert: a streaming analytic signal from a real input (FIR Hilbert transformer)."""

from __future__ import annotations

import numpy as np
from pydantic import Field, field_validator

from ..errors import ConfigError
from ..limits import MAX_TAPS, limit
from ..signal import SignalSpec
from ._common import require_domain
from .base import Stage, StageParams, register_stage
from .fir import Fir


class HilbertParams(StageParams):
    numtaps: int = Field(127, ge=3, description="Length of the FIR Hilbert transformer, odd; the "
                         "output is delayed by (numtaps - 1) / 2 samples. 127 taps keep the "
                         "negative-frequency image at or below -40 dB from 0.05 to 0.45 fs.")

    @field_validator("numtaps")
    @classmethod
    def _odd(cls, v: int) -> int:
        limit(v, MAX_TAPS, "numtaps", "taps")
        if v % 2 == 0:
            raise ValueError(f"numtaps must be odd (the delay (numtaps - 1) / 2 is then whole), "
                             f"got {v}; use {v + 1}")
        return v


def hilbert_taps(numtaps: int) -> np.ndarray:
    """The Hamming-windowed ideal Hilbert transformer: h[k] = w[k] * 2 / (pi * m) for odd
    m = k - (numtaps - 1) / 2, else 0 (antisymmetric, type III)."""
    d = (numtaps - 1) // 2
    m = np.arange(numtaps) - d
    h = np.zeros(numtaps)
    odd = m % 2 != 0
    h[odd] = 2.0 / (np.pi * m[odd])
    return h * np.hamming(numtaps)


def analytic_taps(numtaps: int) -> np.ndarray:
    """Complex taps whose output is x[n - d] + j * (h * x)[n]: a unit impulse at d = (numtaps-1)/2
    in the real part, the Hilbert transformer in the imaginary part."""
    taps = 1j * hilbert_taps(numtaps)
    taps[(numtaps - 1) // 2] += 1.0
    return taps


@register_stage
class Hilbert(Stage):
    """Analytic signal: ``y[n] = x[n - d] + j * sum_k h[k] x[n - k]``, ``d = (numtaps - 1) / 2``.

    ``h`` is the Hamming-windowed ideal Hilbert transformer (``2 / (pi * m)`` at odd offsets
    ``m = k - d``, 0 at even ones). Real time-domain input, complex64 output at the input's
    rate and block size, delayed by ``d`` samples (both parts: the real part is the input
    itself, d samples late). A tone at f in [0.05, 0.45] fs keeps its image at -f at or below
    -40 dB with 127 taps.
    """

    type = "hilbert"
    summary = "Analytic signal of a real input: x delayed by (numtaps-1)/2 plus j * FIR Hilbert transform"
    Params = HilbertParams

    @property
    def delay_samples(self) -> int:
        return (self.params.numtaps - 1) // 2

    def taps(self) -> np.ndarray:
        return analytic_taps(self.params.numtaps)

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where)
        if spec.is_complex:
            raise ConfigError("needs a real (float32) input: the analytic signal of a complex one is "
                              "not defined", where=self.where,
                              hint="take the real part first, or leave hilbert out: complex input is analytic already")
        return spec.with_(dtype="complex64")

    def state_bytes(self, spec: SignalSpec) -> int:
        return 4 * spec.channels * (self.params.numtaps + spec.block_size) * 8 + 16 * self.params.numtaps

    def as_fir(self) -> Fir:
        """The same filter as a ``fir`` stage with the complex taps of :func:`analytic_taps`."""
        fir = Fir(taps=self.taps(), name=self.name, base_dir=self.base_dir)
        fir.where = self.where
        return fir

    def cpu(self, spec: SignalSpec):
        self.output_spec(spec)
        return self.as_fir().cpu(spec)
