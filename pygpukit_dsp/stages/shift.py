"""shift and ddc: frequency translation, and the frequency-translating decimating FIR of a receiver.

* ``shift``: ``y[c, n] = x[c, n] * exp(2j*pi*freq_hz*n/fs)``, ``n`` counted from the stream's
  start, output complex64 (a real input gives a complex output);
* ``ddc``: ``fir(decimate=D)`` of ``shift(-freq_hz)``: the carrier at ``freq_hz`` moved to 0 Hz,
  filtered and decimated.

The phase is exact over any stream length: the sample index is a Python integer and the phase
of a block's first sample is ``frac(freq_hz/fs * n0)`` in exact rational arithmetic (the
float64 ratio times an integer), rounded once to float64; inside a block the phase is that
plus ``freq_hz/fs * i`` in float64. So a block starting at n0 = 10**10 gives what the direct
formula gives there, and hours of stream keep a continuous phase.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from ..signal import SignalSpec
from ._common import require_domain
from .base import Stage, StageParams, register_stage, validate_params
from .fir import Fir, FirParams, FirTapsParams


class ShiftParams(StageParams):
    freq_hz: float = Field(..., description="Frequency shift in Hz (negative: down): y[n] = x[n] * "
                           "exp(2j*pi*freq_hz*n/fs), n counted from the stream's start.")


def cycles_at(inc: float, n0: int) -> float:
    """frac(inc * n0) in [0, 1), exact for the float64 ``inc`` and integer ``n0``, rounded once."""
    p, q = float(inc).as_integer_ratio()  # q is a power of two
    return ((p * int(n0)) % q) / q


class ShiftProcessor:
    """Multiplies block samples by exp(2j*pi*inc*(n0 + i)); ``sample_index`` (n0) is its state."""

    def __init__(self, inc: float, block_size: int):
        self.inc = float(inc)
        self.sample_index = 0
        # exp(2j*pi*inc*i) for the offsets of a block, times the block's base phasor
        self._offsets = np.exp(2j * np.pi * (self.inc * np.arange(block_size, dtype=np.float64)))

    def phasors(self, n: int) -> np.ndarray:
        base = np.exp(2j * np.pi * cycles_at(self.inc, self.sample_index))
        return base * self._offsets[:n]

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        n = x.shape[-1]
        y = (x * self.phasors(n)).astype(np.complex64)
        self.sample_index += n
        return y

    def reset(self) -> None:
        self.sample_index = 0


@register_stage
class Shift(Stage):
    """Frequency shift: ``y[c, n] = x[c, n] * exp(2j*pi*freq_hz*n/fs)``, ``n`` from the stream's start.

    Output complex64 at the input's rate and block size (a real input gives a complex output);
    time domain. The phase of each block's first sample is computed exactly from the sample
    index (no accumulated rounding), so it stays continuous over any stream length. No delay.
    """

    type = "shift"
    summary = "Frequency shift by freq_hz: x * exp(2j*pi*freq_hz*n/fs), phase exact over the stream"
    Params = ShiftParams

    def cycles_per_sample(self, spec: SignalSpec) -> float:
        return self.params.freq_hz / spec.sample_rate

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where)
        return spec.with_(dtype="complex64")

    def state_bytes(self, spec: SignalSpec) -> int:
        return 16 * spec.block_size + 8 * spec.channels * spec.block_size

    def cpu(self, spec: SignalSpec) -> ShiftProcessor:
        self.output_spec(spec)
        return ShiftProcessor(self.cycles_per_sample(spec), spec.block_size)


class DdcParams(FirTapsParams):
    freq_hz: float = Field(..., description="The frequency in Hz brought to 0 Hz (the input is "
                           "shifted by -freq_hz before the filter).")
    decimate: int = Field(1, ge=1, description="Keep every D-th filter output (outputs 0, D, 2D...), "
                          "computing only those; the output rate is the input's / D; block_size "
                          "must be a multiple of D.")


class DdcProcessor:
    def __init__(self, shift: ShiftProcessor, fir):
        self.shift, self.fir = shift, fir

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        return self.fir.process(self.shift.process(x, final), final)

    def reset(self) -> None:
        self.shift.reset()
        self.fir.reset()


@register_stage
class Ddc(Stage):
    """Digital down-converter: ``fir(taps, decimate=D)`` of ``shift(-freq_hz)``.

    ``y[m] = sum_k h[k] * x[mD - k] * exp(-2j*pi*freq_hz*(mD - k)/fs)``: the channel at
    ``freq_hz`` moved to 0 Hz, low-pass filtered by the taps (given, from a file, or a firwin
    design at the input rate) and decimated by D, only the kept outputs computed. Output
    complex64 at rate / D in blocks of block_size / D; block_size must be a multiple of D; a
    final partial block of n samples gives ceil(n / D) outputs. Delay: the filter's own
    ((L - 1) / 2 input samples for a linear-phase design).
    """

    type = "ddc"
    summary = "Digital down-converter: shift by -freq_hz, FIR low-pass and decimate in one stage"
    Params = DdcParams

    def __init__(self, params: DdcParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
        p = self.params
        fir_params = validate_params(FirParams, {"taps": p.taps, "taps_file": p.taps_file, "design": p.design,
                                                 "decimate": p.decimate},
                                     base_dir=self.base_dir, what=f"stage '{self.name}' ({self.type})")
        self._fir = Fir(fir_params, name=self.name, base_dir=self.base_dir)

    @property
    def fir(self) -> Fir:
        """The filter as a ``fir`` stage (decimate included), located where this stage is."""
        self._fir.where = self.where
        return self._fir

    @property
    def decimate(self) -> int:
        return self.params.decimate

    def taps_for(self, spec: SignalSpec) -> np.ndarray:
        return self.fir.taps_for(spec)

    def cycles_per_sample(self, spec: SignalSpec) -> float:
        """The shift in cycles per input sample: -freq_hz / fs."""
        return -self.params.freq_hz / spec.sample_rate

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where)
        return self.fir.output_spec(spec.with_(dtype="complex64"))

    def state_bytes(self, spec: SignalSpec) -> int:
        return 24 * spec.block_size * spec.channels + self.fir.state_bytes(spec.with_(dtype="complex64"))

    def cpu(self, spec: SignalSpec) -> DdcProcessor:
        self.output_spec(spec)
        return DdcProcessor(ShiftProcessor(self.cycles_per_sample(spec), spec.block_size),
                            self.fir.cpu(spec.with_(dtype="complex64")))
