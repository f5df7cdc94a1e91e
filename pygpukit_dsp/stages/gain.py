"""gain: multiply every sample by a constant, given in dB or as a linear factor."""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, model_validator

from ..signal import SignalSpec
from ._common import exactly_one
from .base import Stage, StageParams, register_stage


class GainParams(StageParams):
    db: float | None = Field(None, description="Gain in decibels (amplitude): factor = 10**(db/20).")
    linear: float | None = Field(None, description="Gain as a linear factor (may be negative or 0).")

    @model_validator(mode="after")
    def _one_of(self) -> "GainParams":
        exactly_one(self, ("db", "linear"))
        # the factor is applied in float32: beyond its range every sample would be inf
        top = float(np.finfo(np.float32).max)
        if self.db is not None and self.db > 20 * math.log10(top):
            raise ValueError(f"db {self.db:g} is above the limit of {20 * math.log10(top):.1f} dB "
                             "(the largest float32 factor)")
        if self.linear is not None and abs(self.linear) > top:
            raise ValueError(f"linear {self.linear:g} is beyond float32's range (|linear| <= {top:.4g})")
        return self

    @property
    def factor(self) -> float:
        return float(self.linear) if self.linear is not None else float(10.0 ** (self.db / 20.0))


class GainProcessor:
    def __init__(self, factor: float, dtype: str):
        self.factor = np.float32(factor)  # a float32 scalar keeps float32/complex64 blocks in place
        self.dtype = dtype

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        return np.multiply(x, self.factor, dtype=self.dtype)

    def reset(self) -> None:
        """Gain has no streaming state."""


@register_stage
class Gain(Stage):
    """Multiply by a constant: ``y = x * 10**(db/20)`` or ``y = x * linear``.

    Any domain (time or frames), real or complex; the output spec equals the input spec.
    """

    type = "gain"
    summary = "Multiply by a constant gain (db or linear)"
    Params = GainParams

    @property
    def factor(self) -> float:
        return self.params.factor

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        return spec

    def cpu(self, spec: SignalSpec) -> GainProcessor:
        self.output_spec(spec)
        return GainProcessor(self.factor, spec.dtype)
