"""power, magnitude, db: element-wise conversions (any domain)."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ..signal import SignalSpec
from .base import Stage, StageParams, register_stage


class NoParams(StageParams):
    """This stage has no parameters."""


class PowerProcessor:
    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        if np.iscomplexobj(x):
            re, im = x.real, x.imag
            y = np.multiply(re, re, dtype=np.float32)
            y += im * im
            return y
        return np.multiply(x, x, dtype=np.float32)

    def reset(self) -> None:
        """Element-wise: no streaming state."""


class MagnitudeProcessor:
    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        return np.abs(x).astype(np.float32, copy=False)

    def reset(self) -> None:
        """Element-wise: no streaming state."""


@register_stage
class Power(Stage):
    """``|x|^2`` per element (``re^2 + im^2`` for complex). Any domain; float32 output."""

    type = "power"
    summary = "Squared magnitude |x|^2 (float32)"
    Params = NoParams

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        return spec.with_(dtype="float32")

    def cpu(self, spec: SignalSpec) -> PowerProcessor:
        return PowerProcessor()


@register_stage
class Magnitude(Stage):
    """``|x|`` per element. Any domain; float32 output."""

    type = "magnitude"
    summary = "Magnitude |x| (float32)"
    Params = NoParams

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        return spec.with_(dtype="float32")

    def cpu(self, spec: SignalSpec) -> MagnitudeProcessor:
        return MagnitudeProcessor()


class DbParams(StageParams):
    ref: float = Field(1.0, gt=0, description="Reference value: 0 dB is x == ref.")
    floor_db: float = Field(-200.0, description="Lowest output in dB: values below the floor "
                            "(including zeros and negative numbers) give floor_db.")
    kind: Literal["power", "amplitude"] = Field(
        "power", description="'power': 10*log10(x/ref) (after power); 'amplitude': 20*log10(x/ref) "
        "(after magnitude).")

    @property
    def scale(self) -> float:
        return 10.0 if self.kind == "power" else 20.0

    @model_validator(mode="after")
    def _floor_representable(self) -> "DbParams":
        f32 = np.finfo(np.float32)
        lowest = self.scale * math.log10(f32.tiny)  # Python floats: no float32 overflow warnings
        if self.floor_db < lowest:
            raise ValueError(f"floor_db {self.floor_db} is below the float32 range for kind "
                             f"'{self.kind}'; use floor_db >= {math.ceil(lowest)}")
        highest = self.scale * math.log10(f32.max)
        if self.floor_db > highest:
            raise ValueError(f"floor_db {self.floor_db} is above the float32 range for kind "
                             f"'{self.kind}'; use floor_db <= {math.floor(highest)}")
        # the stage multiplies by 1/ref in float32
        if not 1 / float(f32.max) <= self.ref <= 1 / float(f32.tiny):
            raise ValueError(f"ref {self.ref:g} is outside float32's range: use "
                             f"{1 / float(f32.max):.3g} <= ref <= {1 / float(f32.tiny):.3g}")
        return self


def floor_db_f32(floor_db: float) -> np.float32:
    """The float32 output floor: ``floor_db`` itself when float32 holds it, else the next float32
    above it, so that no output is below ``floor_db``."""
    f = np.float32(floor_db)
    return f if f >= floor_db else np.nextafter(f, np.float32(np.inf))


class DbProcessor:
    def __init__(self, params: DbParams, complex_input: bool = False):
        self.scale = np.float32(params.scale)
        self.inv_ref = np.float32(1.0 / params.ref)
        # The level floor keeps zeros and negative values out of the log; the dB floor, applied
        # after it, makes the floor exact: log10 of the rounded level floor can land an ulp below.
        self.floor = np.float32(10.0 ** (params.floor_db / params.scale))
        self.floor_db = floor_db_f32(params.floor_db)
        # complex x is an amplitude: the power kind takes |x|^2, the amplitude kind |x|
        self.complex_level = (PowerProcessor() if params.kind == "power" else MagnitudeProcessor()
                              ) if complex_input else None

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        if self.complex_level is not None:
            x = self.complex_level.process(x)
        y = np.multiply(x, self.inv_ref, dtype=np.float32)
        np.maximum(y, self.floor, out=y)
        np.log10(y, out=y)
        y *= self.scale
        np.maximum(y, self.floor_db, out=y)  # NaN stays NaN
        return y

    def reset(self) -> None:
        """Element-wise: no streaming state."""


@register_stage
class Db(Stage):
    """Decibels: ``max(scale * log10(max(x/ref, floor)), floor_db)`` with ``scale`` 10 (power) or
    20 (amplitude) and ``floor = 10**(floor_db/scale)``: the output is never below ``floor_db``
    (zeros and negative values give ``floor_db``; NaN stays NaN).

    Complex input (a spectrum straight from fft/stft) is taken as an amplitude: the stage
    uses ``|x|^2`` for kind 'power' and ``|x|`` for kind 'amplitude', so both give the same
    level in dB. Any domain; float32 output.
    """

    type = "db"
    summary = "Convert to decibels (10*log10 power or 20*log10 amplitude), floored"
    Params = DbParams

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        return spec.with_(dtype="float32")

    def cpu(self, spec: SignalSpec) -> DbProcessor:
        return DbProcessor(self.params, complex_input=spec.is_complex)
