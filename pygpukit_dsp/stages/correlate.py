"""correlate: streaming correlation with a known waveform (a radar's pulse compression).

Over the whole stream ``x`` of one channel the output is
``scipy.signal.correlate(x, r, mode="full")[:len(x)]``. SciPy defines the full correlation as
the convolution of ``x`` with ``conj(r[::-1])``, so with ``L = len(r)``::

    y[n] = sum_k x[n - (L - 1) + k] * conj(r[k])      (x[j] = 0 for j < 0)

i.e. the FIR filter with taps ``conj(r[::-1])``: sample ``n`` is the correlation of the
reference with the ``L`` samples ending at ``n``, so an echo of ``r`` starting at sample ``s``
peaks at ``n = s + L - 1``. The filtering reuses fir's implementations (direct, block-Toeplitz
matmul, FFT overlap-save for long references) and, on the GPU, fir's native op.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..errors import ConfigError
from ..limits import MAX_TAPS, limit
from ..signal import SignalSpec
from ._common import check_file_exists, exactly_one, load_array_file, output_dtype, require_domain
from .base import NumberArray, Stage, StageParams, register_stage
from .fir import DirectFir, MatmulFir, OverlapSaveFir, plan_fir


class CorrelateParams(StageParams):
    reference: NumberArray | None = Field(
        None, description="The known waveform r (real or complex), shape (L,): "
        "y = scipy.signal.correlate(x, r, mode='full')[:len(x)] per channel.")
    reference_file: str | None = Field(
        None, description="A file with the reference: .npy, or text readable by numpy.loadtxt "
        "(complex values as '1+2j'). Relative paths are resolved against the YAML file's folder.")
    method: Literal["auto", "direct", "matmul", "overlap_save"] = Field(
        "auto", description="Implementation, as fir's: 'direct', 'matmul', 'overlap_save' (FFT, "
        "for long references); 'auto' picks the cheapest for the length, channels and block size.")

    @field_validator("reference")
    @classmethod
    def _reference_shape(cls, v: np.ndarray | None) -> np.ndarray | None:
        if v is not None:
            _check_reference(v)
        return v

    @field_validator("reference_file")
    @classmethod
    def _file_exists(cls, v: str | None, info: ValidationInfo) -> str | None:
        return check_file_exists(v, info)

    @model_validator(mode="after")
    def _one_of(self) -> "CorrelateParams":
        exactly_one(self, ("reference", "reference_file"))
        return self


def _check_reference(r: np.ndarray) -> None:
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"the reference must be a 1-D list of samples, got shape {r.shape}")
    limit(r.size, MAX_TAPS, "the reference length", "samples")


@register_stage
class Correlate(Stage):
    """Streaming correlation with a known waveform ``r`` (matched filter, pulse compression).

    The concatenated output of channel ``c`` equals
    ``scipy.signal.correlate(x[c], r, mode="full")[:len(x[c])]``:
    ``y[n] = sum_k x[n - (L-1) + k] * conj(r[k])``, zeros before the stream's start. An echo
    of ``r`` starting at input sample ``s`` peaks at output sample ``s + L - 1``. Real or
    complex input and reference; complex64 out if either is complex, else float32. Time
    domain, any block size, output blocks as long as the input blocks.
    """

    type = "correlate"
    summary = "Correlation with a known waveform (pulse compression, matched filter)"
    Params = CorrelateParams

    def __init__(self, params: CorrelateParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
        if self.params.reference is not None:
            r = self.params.reference
        else:
            r = load_array_file(self.resolve_path(self.params.reference_file), param="reference_file")
            try:
                _check_reference(r)
            except ValueError as exc:
                raise ConfigError(f"reference_file: {exc}", path=("reference_file",)) from None
        self.reference = r

    def taps(self) -> np.ndarray:
        """The FIR taps that compute the correlation: ``conj(r[::-1])``."""
        r = self.reference
        return np.ascontiguousarray(np.conj(r[::-1]) if np.iscomplexobj(r) else r[::-1])

    def state_bytes(self, spec: SignalSpec) -> int:
        L = self.reference.size
        return 4 * spec.channels * (L + spec.block_size) * 8 + 16 * L

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where)
        return spec.with_(dtype=output_dtype(np.iscomplexobj(self.reference), spec.is_complex))

    def cpu(self, spec: SignalSpec) -> DirectFir | MatmulFir | OverlapSaveFir:
        out = self.output_spec(spec)
        taps = self.taps()
        method, step, K, _ = plan_fir(taps.size, spec.channels, spec.block_size, out.is_complex,
                                      self.params.method)
        if method == "direct":
            return DirectFir(taps, spec.channels, spec.block_size, out.np_dtype)
        if method == "matmul":
            return MatmulFir(taps, spec.channels, spec.block_size, out.np_dtype, step)
        return OverlapSaveFir(taps, spec.channels, spec.block_size, out.np_dtype, step, K)
