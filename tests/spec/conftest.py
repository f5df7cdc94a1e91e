"""Small stand-in stages, registered only while a spec test runs (the real ones may change)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import Field, ValidationInfo, field_validator, model_validator

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.base import STAGES, Stage, StageParams


class _Identity:
    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        return x

    def reset(self) -> None:
        return None


class XGainParams(StageParams):
    gain: float = Field(1.0, description="linear gain")


class XGain(Stage):
    type = "xgain"
    Params = XGainParams

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        return spec

    def cpu(self, spec: SignalSpec) -> _Identity:
        return _Identity()


class XDesign(StageParams):
    numtaps: int = Field(..., ge=1)
    cutoff_hz: float = Field(..., gt=0)


class XFilterParams(StageParams):
    design: XDesign | None = None
    taps: list[float] | None = None
    taps_file: str | None = None
    mode: str = "direct"

    @field_validator("taps_file")
    @classmethod
    def _exists(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None:
            full = Path(info.context["base_dir"]) / v
            if not full.is_file():
                raise ValueError(f"file {full} does not exist")
        return v

    @model_validator(mode="after")
    def _one(self) -> "XFilterParams":
        if sum(x is not None for x in (self.design, self.taps, self.taps_file)) != 1:
            raise ValueError("give exactly one of design, taps, taps_file")
        return self


class XFilter(Stage):
    type = "xfilter"
    Params = XFilterParams

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        if self.params.mode not in ("direct", "fft"):  # a check done by the stage, not by pydantic
            raise ConfigError(f"mode '{self.params.mode}' is not direct or fft", path=("mode",))

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        return spec

    def cpu(self, spec: SignalSpec) -> _Identity:
        return _Identity()


@pytest.fixture(autouse=True)
def dummy_stages():
    added = []
    for cls in (XGain, XFilter):
        if cls.type not in STAGES:
            STAGES[cls.type] = cls
            added.append(cls.type)
    yield
    for name in added:
        STAGES.pop(name, None)
