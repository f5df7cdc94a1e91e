"""Latency QoS of a stream, as written under ``qos:`` in YAML."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, model_validator

from .errors import ConfigError, ConfigErrors
from .stages.base import StageParams, pydantic_errors
from .stages.params_doc import model_signature

DEFAULT_REALTIME_SPIN_US = 200  # the paced wait's spin window of a realtime stream (bench/cadence.py's default)


class _CalledWithConfigErrors(type(StageParams)):  # type: ignore[misc]
    """``QoS(...)`` raises ConfigError(s) naming the field and what it allows, as YAML's ``qos:`` does,
    instead of pydantic's ValidationError; validation from YAML (``model_validate``) is untouched."""

    def __call__(model, /, *args: Any, **data: Any):  # noqa: N805 ("cls" is a keyword QoS takes)
        if "cls" in data:  # the spelling qos.cls reads back
            if "class_" in data or "class" in data:
                raise ConfigError("QoS: give the class once (class_, cls or 'class'), got two")
            data["class_"] = data.pop("cls")
        try:
            return super().__call__(*args, **data)
        except ValidationError as exc:
            errors = pydantic_errors(exc, model, "QoS")
            raise (errors[0] if len(errors) == 1 else ConfigErrors(errors)) from None


class QoS(StageParams, metaclass=_CalledWithConfigErrors):
    """A stream's latency QoS: ``QoS(class_="realtime", deadline_ms=5)`` in Python, ``qos: {class:
    realtime, deadline_ms: 5}`` in YAML. ``class_`` is YAML's ``class`` (a Python keyword); ``cls=``
    is accepted too, and ``QoS(**{"class": ...})``; ``qos.cls`` reads it back. A value that is not
    allowed raises ConfigError naming the field and what it takes.

    ``class``: realtime | throughput | best_effort.

    * realtime: a block must finish within ``deadline_ms`` of its arrival (default:
      one block period, block_size / sample_rate).
    * throughput: keep at least ``min_rate`` samples/s; no per-block deadline.
    * best_effort: whatever is left.

    Every class reports deadline misses against ``deadline_ms`` (or the block period).

    ``spin_us``: a stream whose source is paced by a clock (``rate: realtime``) sleeps until this
    long before each block is due and spins from there (natively, without the GIL), instead of
    sleeping to the due time: the thread is running, not waking, when the block arrives. Default:
    200 us for realtime streams (about 4% of one core at 5.33 ms blocks: sensible on a laptop),
    0 (sleep) for the others; a value of one block period or more spins through every period
    (one busy core per stream). docs/benchmarks.md, "Paced W1", measures the choices.

    ``cpu``: pin the thread that runs the stream's blocks (reads the source, hands each block to
    the engine and waits for it, writes the sink) to one CPU for the run: a CPU number this
    process may use, or ``auto`` (the last one). Unset: not pinned. The process's other threads
    (the dispatcher, other streams' threads) are moved off that CPU while the run lasts, so the
    stream's thread never waits for one of them there. Pinning costs no CPU time
    (docs/benchmarks.md, "Paced W1" and "W3", measure it).
    """

    class_: Literal["realtime", "throughput", "best_effort"] = Field(
        "best_effort", alias="class", description="QoS class")
    deadline_ms: float | None = Field(None, gt=0, description="per-block deadline (default: block period)")
    min_rate: float | None = Field(None, gt=0, description="throughput: minimum samples/s")
    cost_us: float | None = Field(None, gt=0, description="declared GPU cost of one block (else measured)")
    spin_us: int | None = Field(None, ge=0, le=1_000_000,
                                description="paced sources: spin this long before each block is due instead "
                                "of sleeping (default: 200 for realtime, 0 otherwise)")
    cpu: Annotated[int, Field(ge=0)] | Literal["auto"] | None = Field(
        None, description="pin the thread that runs the stream's blocks to this CPU (auto: the last CPU the "
        "process may use)")

    # built at once: a deferred build would replace the keyword signature set below (model_signature)
    model_config = {**StageParams.model_config, "populate_by_name": True, "defer_build": False}
    # FILE:LINE:COL of a YAML value, by key (set by the loader): errors found at run time point there
    _where: dict[str, str] = PrivateAttr(default_factory=dict)

    def where_of(self, key: str) -> str | None:
        return self._where.get(key)

    @model_validator(mode="after")
    def _check(self) -> "QoS":
        if self.min_rate is not None and self.class_ != "throughput":
            raise ValueError("min_rate applies to class 'throughput' only")
        return self

    @property
    def cls(self) -> str:
        return self.class_

    def spin_window_us(self) -> int:
        """``spin_us``, or its default for the class (200 us realtime, 0 otherwise)."""
        if self.spin_us is not None:
            return int(self.spin_us)
        return DEFAULT_REALTIME_SPIN_US if self.class_ == "realtime" else 0

    def deadline_s(self, block_period_s: float) -> float:
        return self.deadline_ms / 1e3 if self.deadline_ms else block_period_s

    def to_config(self) -> dict:
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude_none=True)


QoS.__signature__ = model_signature(QoS)  # type: ignore[misc]  # (*, class_: Literal[...] = 'best_effort', ...)
