"""select and combine: routing channels in a graph (pick and reorder them; stack those of several
inputs), and the agreement check of the stages that read several inputs (docs/graphs.md)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from pydantic import Field, field_validator

from ..errors import ConfigError
from ..limits import MAX_CHANNELS
from ..signal import SignalSpec
from ._common import output_dtype
from .base import InputMismatch, Stage, StageParams, register_stage
from .elementwise import NoParams


def agreeing_inputs(specs: Sequence[SignalSpec], what: str, *, channels: bool) -> SignalSpec:
    """The first spec, once every input agrees with it in rate, block size, domain and bins (and
    channels when ``channels``); InputMismatch naming the first input that differs, and in what.
    ``what`` says why they must agree (in the hint)."""
    first = specs[0]
    for j, spec in enumerate(specs[1:], start=1):
        fields = [("sample rate", f"{first.sample_rate:g}", f"{spec.sample_rate:g}"),
                  ("block size", first.block_size, spec.block_size),
                  ("domain", first.domain, spec.domain),
                  ("bins", first.bins, spec.bins)]
        if channels:
            fields.append(("channels", first.channels, spec.channels))
        for name, a, b in fields:
            if a != b:
                raise InputMismatch(f"the inputs differ in {name} ({a} and {b})", first=0, other=j,
                                    hint=what)
    return first


class SelectParams(StageParams):
    channels: list[int] = Field(
        ..., min_length=1, description="The input channels to keep, in the order they leave (0-based; a "
        "channel may be named twice): [3, 5] keeps channels 3 and 5, [1, 0] swaps two.")

    @field_validator("channels")
    @classmethod
    def _in_range(cls, v: list[int]) -> list[int]:
        if len(v) > MAX_CHANNELS:
            raise ValueError(f"{len(v)} channels is above the limit of {MAX_CHANNELS} channels")
        bad = [c for c in v if not 0 <= c < MAX_CHANNELS]
        if bad:
            raise ValueError(f"channel numbers count from 0 up to {MAX_CHANNELS - 1}, got {bad[0]}")
        return v


class SelectProcessor:
    def __init__(self, channels: list[int]):
        self.index = np.asarray(channels, dtype=np.intp)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        return x[self.index]  # a new array: the input block is not kept

    def reset(self) -> None:
        """Select has no streaming state."""


@register_stage
class Select(Stage):
    """Pick and reorder channels: ``out[k] = in[channels[k]]``.

    Any domain and dtype; the output has ``len(channels)`` channels, the rest of its spec is the input's.
    """

    type = "select"
    summary = "Pick and reorder channels"
    Params = SelectParams

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        wanted = self.params.channels
        over = [c for c in wanted if c >= spec.channels]
        if over:
            raise ConfigError(f"channel {over[0]} is not in the input, which has {spec.channels} channels "
                              f"(0..{spec.channels - 1})", where=self.where,
                              hint=f"pick channels from 0 to {spec.channels - 1}")
        return spec.with_(channels=len(wanted))

    def cpu(self, spec: SignalSpec) -> SelectProcessor:
        self.output_spec(spec)
        return SelectProcessor(list(self.params.channels))


def common_length(blocks: Sequence[np.ndarray]) -> int:
    """The samples (or frames) every block has: the shortest. Full blocks of inputs of one spec are
    alike; a stream's last block may be shorter on one path than another, and the longer ones are
    cut to it."""
    return min(b.shape[1] for b in blocks)


class CombineProcessor:
    def __init__(self, dtype: str):
        self.dtype = np.dtype(dtype)

    def process(self, blocks: Sequence[np.ndarray], final: bool = False) -> np.ndarray:
        n = common_length(blocks)
        return np.concatenate([b[:, :n] for b in blocks], axis=0, dtype=self.dtype)

    def reset(self) -> None:
        """Combine has no streaming state."""


@register_stage
class Combine(Stage):
    """Stack the channels of its inputs: ``out = [in_1 channels..., in_2 channels..., ...]``.

    Two or more inputs that agree in rate, block size, domain (and bins); their channel counts
    may differ and add up. complex64 when any input is complex, else float32.
    """

    type = "combine"
    summary = "Stack the channels of two or more inputs"
    Params = NoParams
    input_count = (2, None)

    def output_spec(self, specs: Sequence[SignalSpec]) -> SignalSpec:  # type: ignore[override]
        first = agreeing_inputs(specs, "combine stacks the channels of inputs with one rate, block size "
                                "and domain", channels=False)
        total = sum(s.channels for s in specs)
        if total > MAX_CHANNELS:
            raise ConfigError(f"the inputs have {total} channels together, above the limit of {MAX_CHANNELS}",
                              where=self.where)
        return first.with_(channels=total, dtype=output_dtype(*(s.is_complex for s in specs)))

    def cpu(self, specs: Sequence[SignalSpec]) -> CombineProcessor:  # type: ignore[override]
        return CombineProcessor(self.output_spec(specs).dtype)
