"""Latency QoS of a stream, as written under ``qos:`` in YAML."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .stages.base import StageParams


class QoS(StageParams):
    """``class``: realtime | throughput | best_effort.

    * realtime: a block must finish within ``deadline_ms`` of its arrival (default:
      one block period, block_size / sample_rate).
    * throughput: keep at least ``min_rate`` samples/s; no per-block deadline.
    * best_effort: whatever is left.

    Every class reports deadline misses against ``deadline_ms`` (or the block period).
    """

    class_: Literal["realtime", "throughput", "best_effort"] = Field(
        "best_effort", alias="class", description="QoS class")
    deadline_ms: float | None = Field(None, gt=0, description="per-block deadline (default: block period)")
    min_rate: float | None = Field(None, gt=0, description="throughput: minimum samples/s")
    cost_us: float | None = Field(None, gt=0, description="declared GPU cost of one block (else measured)")

    model_config = {**StageParams.model_config, "populate_by_name": True}

    @model_validator(mode="after")
    def _check(self) -> "QoS":
        if self.min_rate is not None and self.class_ != "throughput":
            raise ValueError("min_rate applies to class 'throughput' only")
        return self

    @property
    def cls(self) -> str:
        return self.class_

    def deadline_s(self, block_period_s: float) -> float:
        return self.deadline_ms / 1e3 if self.deadline_ms else block_period_s

    def to_config(self) -> dict:
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude_none=True)
