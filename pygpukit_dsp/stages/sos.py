"""sos: a streaming IIR filter as cascaded second-order sections (biquads)."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from ..errors import ConfigError
from ..signal import SignalSpec
from ._common import exactly_one, output_dtype, require_domain
from ._design_rules import iirfilter_refusal
from .base import RealArray, Stage, StageParams, register_stage


class SosDesign(StageParams):
    kind: Literal["butter", "cheby1", "cheby2", "ellip", "bessel"] = Field(
        "butter", description="Filter family (scipy.signal.iirfilter's ftype).")
    order: int = Field(..., ge=1, le=64, description="Filter order (band filters get 2*order poles).")
    cutoff_hz: float | list[float] = Field(
        ..., description="Cutoff in Hz; [low, high] for bandpass/bandstop.")
    btype: Literal["lowpass", "highpass", "bandpass", "bandstop"] = Field(
        "lowpass", description="Band type.")
    # at most 300 dB: 10**(dB/10) overflows float64 near 3000 dB, and float64 resolves ~300 dB
    rp: float | None = Field(None, gt=0, le=300, description="Passband ripple in dB (cheby1, ellip).")
    rs: float | None = Field(None, gt=0, le=300, description="Stopband attenuation in dB (cheby2, ellip).")

    @field_validator("cutoff_hz")
    @classmethod
    def _cutoffs(cls, v: float | list[float]) -> float | list[float]:
        edges = [v] if isinstance(v, (int, float)) else list(v)
        if any(not math.isfinite(e) or e <= 0 for e in edges):
            raise ValueError(f"cutoff frequencies must be > 0 Hz, got {v}")
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise ValueError(f"band edges must be strictly increasing, got {v}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "SosDesign":
        needs = {"cheby1": ("rp",), "cheby2": ("rs",), "ellip": ("rp", "rs")}.get(self.kind, ())
        missing = [n for n in needs if getattr(self, n) is None]
        if missing:
            what = {"rp": "rp (passband ripple, dB, e.g. 1.0)", "rs": "rs (stopband attenuation, dB, "
                    "e.g. 60.0)"}
            raise ValueError(f"kind '{self.kind}' needs " + " and ".join(what[m] for m in missing))
        n_edges = 1 if isinstance(self.cutoff_hz, (int, float)) else len(self.cutoff_hz)
        want = 2 if self.btype in ("bandpass", "bandstop") else 1
        if n_edges != want:
            shape = "a list [low_hz, high_hz]" if want == 2 else "a single frequency"
            raise ValueError(f"btype '{self.btype}' needs cutoff_hz as {shape}, got {self.cutoff_hz}")
        return self

    def check(self, sample_rate: float) -> None:
        """Raise the ConfigError that designing at ``sample_rate`` would raise for what iirfilter
        refuses in its checks, its analog prototype and its gain scaling, without SciPy; what only
        the design finds (NaN sections, SciPy's arithmetic failing at float64's edges) is found by
        :meth:`sos`."""
        edges = [self.cutoff_hz] if isinstance(self.cutoff_hz, (int, float)) else self.cutoff_hz
        if max(edges) >= sample_rate / 2:
            raise ConfigError(f"design: cutoff_hz {self.cutoff_hz} is not below the Nyquist frequency",
                              hint=f"cutoff frequencies must be below sample_rate/2 = {sample_rate / 2:g} Hz",
                              path=("design", "cutoff_hz"))
        refusal = iirfilter_refusal(self.kind, self.order, self._wn(), self.btype, self.rp, self.rs,
                                    sample_rate)
        if refusal is not None:
            raise ConfigError(f"design: {refusal.message}", hint=refusal.hint, path=("design",))

    def _wn(self) -> float | list[float]:
        edges = [self.cutoff_hz] if isinstance(self.cutoff_hz, (int, float)) else self.cutoff_hz
        return edges[0] if len(edges) == 1 else list(edges)  # scipy refuses [f] for a lowpass: pass f

    def sos(self, sample_rate: float) -> np.ndarray:
        """The sections iirfilter designs at ``sample_rate``; a ConfigError for what it refuses or
        for NaN or infinite coefficients."""
        self.check(sample_rate)
        import scipy.signal as ssig  # SciPy loads when a filter is designed, not with the catalog

        try:
            with np.errstate(all="ignore"):
                sos = ssig.iirfilter(self.order, self._wn(), rp=self.rp, rs=self.rs, btype=self.btype,
                                     ftype=self.kind, output="sos", fs=sample_rate)
        except Exception as exc:  # its arithmetic fails in many ways (ValueError, OverflowError,
            # AssertionError, IndexError...) for parameters at float64's edges
            raise ConfigError(f"design: {exc or type(exc).__name__}", path=("design",),
                              hint="SciPy cannot design this filter in float64: move the cutoff away from "
                              "0 Hz and sample_rate/2, or change the order, rp or rs") from None
        if not np.all(np.isfinite(sos)):
            raise ConfigError(f"design: {self.kind} of order {self.order} at {self.cutoff_hz} Hz gives NaN or "
                              "infinite coefficients", hint="lower the order or move the cutoff",
                              path=("design",))
        return sos


class SosParams(StageParams):
    sos: RealArray | None = Field(
        None, description="Second-order sections, shape (n_sections, 6): rows [b0, b1, b2, 1, a1, "
        "a2] as produced by scipy.signal (output='sos').")
    design: SosDesign | None = Field(
        None, description="Design with scipy.signal.iirfilter(output='sos') at the stream's sample rate.")

    @field_validator("sos")
    @classmethod
    def _sos_shape(cls, v: np.ndarray | None) -> np.ndarray | None:
        if v is None:
            return v
        if v.ndim == 1 and v.size == 6:
            v = v[None, :]
        if v.ndim != 2 or v.shape[1] != 6 or v.shape[0] == 0:
            raise ValueError(f"sos must have shape (n_sections, 6), got shape {v.shape}")
        if not np.all(v[:, 3] == 1.0):
            raise ValueError("each section's a0 (column 3) must be 1: divide the row by its a0 "
                             "(scipy.signal.sosfilt has the same rule)")
        return v

    @model_validator(mode="after")
    def _one_of(self) -> "SosParams":
        exactly_one(self, ("sos", "design"))
        return self


class SosProcessor:
    """scipy.signal.sosfilt with its state zi carried across blocks, in float64/complex128."""

    def __init__(self, sos: np.ndarray, channels: int, is_complex: bool, out_dtype: str):
        import scipy.signal as ssig  # SciPy loads when a processor is made, not with the catalog

        self._sosfilt = ssig.sosfilt
        self.sos = np.asarray(sos, dtype=np.float64)
        self.work = np.complex128 if is_complex else np.float64
        self.out_dtype = out_dtype
        self.zi = np.zeros((self.sos.shape[0], channels, 2), self.work)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        if x.shape[-1] == 0:  # an empty final block (sosfilt cannot take one)
            return np.zeros(x.shape, self.out_dtype)
        y, self.zi = self._sosfilt(self.sos, x.astype(self.work), axis=-1, zi=self.zi)
        return y.astype(self.out_dtype)

    def reset(self) -> None:
        self.zi[...] = 0


@register_stage
class Sos(Stage):
    """Streaming IIR filter in second-order sections.

    The concatenated output equals ``scipy.signal.sosfilt(sos, x)`` over the whole signal:
    the section state is carried from block to block in float64 (complex128 for complex
    input) and the output is rounded to the stream dtype. Time-domain input only.
    """

    type = "sos"
    summary = "IIR filter as second-order sections (explicit sos or butter/cheby/ellip/bessel design)"
    Params = SosParams

    def __init__(self, params: SosParams | None = None, **kwargs):
        super().__init__(params, **kwargs)
        self._designed: dict[float, np.ndarray] = {}  # designed sections by sample rate

    def sos_for(self, spec: SignalSpec) -> np.ndarray:
        """The sections used at ``spec.sample_rate``: a design is computed here, on first use (by
        the CPU processor, the CUDA lowering...), not while the specs are propagated."""
        if self.params.sos is not None:
            return self.params.sos
        sos = self._designed.get(spec.sample_rate)
        if sos is None:
            try:
                sos = self.params.design.sos(spec.sample_rate)
            except ConfigError as exc:  # found by the design alone (NaN sections): when the stream opens
                raise ConfigError(f"stage '{self.name}' ({self.type}): {exc.message}",
                                  where=exc.where or self.where, hint=exc.hint, path=exc.path) from None
            self._designed[spec.sample_rate] = sos
        return sos

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        require_domain(spec, "time", where=self.where)
        if self.params.design is not None:  # checked without designing
            self.params.design.check(spec.sample_rate)
        return spec.with_(dtype=output_dtype(spec.is_complex))

    def cpu(self, spec: SignalSpec) -> SosProcessor:
        out = self.output_spec(spec)
        return SosProcessor(self.sos_for(spec), spec.channels, spec.is_complex, out.dtype)
