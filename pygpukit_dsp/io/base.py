"""What every source and sink is, and their registries.

A source delivers a time-domain signal of shape ``(channels, n)``; a sink takes
the pipeline's output blocks. Both have a ``type`` (the YAML name) and a pydantic
``Params`` model, like stages.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel

from ..errors import ConfigError
from ..registry import Registry
from ..signal import SignalSpec
from ..stages.base import StageParams, did_you_mean, params_config, params_repr, validate_params

IoParams = StageParams  # same rules: unknown keys are errors, values frozen


@dataclass(frozen=True)
class StreamFormat:
    """What a source delivers. Fields left None in a request mean "no preference"."""

    sample_rate: float | None = None
    channels: int | None = None
    dtype: str | None = None
    length: int | None = None  # total samples per channel, when known (files, arrays)


class _Component(abc.ABC):
    type: ClassVar[str] = ""
    Params: ClassVar[type[BaseModel]] = IoParams
    summary: ClassVar[str] = ""
    kind: ClassVar[str] = "component"
    # Set by the runner when a run aborts (a second Ctrl-C): close() then finalises what it
    # wrote but does not wait for queued output (a sound card's ring) to play out.
    aborting: bool = False

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        from ..stages.params_doc import install_constructor_doc

        install_constructor_doc(cls)  # keyword signature and docstring from the Params model

    def __init__(self, params: BaseModel | None = None, *, base_dir: str | Path | None = None,
                 **kwargs: Any):
        self.base_dir = Path(base_dir) if base_dir is not None else Path.cwd()
        if params is None:
            params = validate_params(self.Params, kwargs, base_dir=self.base_dir,
                                     what=f"{self.kind} '{self.type}'")
        elif kwargs:
            raise TypeError("pass either a Params instance or keyword parameters, not both")
        self.params = params
        self.where: str | None = None  # FILE:LINE:COL in the YAML file, if any

    def resolve_path(self, p: str | Path) -> Path:
        p = Path(p).expanduser()
        return p if p.is_absolute() else self.base_dir / p

    def to_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"type": self.type}
        cfg.update(params_config(self.params))
        return cfg

    def __repr__(self) -> str:
        return f"{type(self).__name__}({params_repr(self.params)})"

    def close(self) -> None:
        """Release resources; a sink flushes and finalises its output here."""

    def interrupt(self, *, abort: bool = False) -> None:
        """The run is stopping: a read or write waiting on a device returns now (another thread or a
        signal handler calls this); ``abort``: close() will not wait for queued output either."""
        if abort:
            self.aborting = True

    def describe(self) -> str:
        """The component as a fault message names it: its type, and its file when it has one."""
        path = getattr(self.params, "path", None)
        return f"{self.kind} '{self.type}'" + (f" ({path})" if path else "")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Source(_Component):
    kind = "source"
    realtime: bool = False  # True: read() is paced by a clock (sound card, `rate: realtime`)
    # What a run does with NaN/Inf samples from this source when the pipeline sets no `nonfinite`
    # (pygpukit_dsp/nonfinite.py): data sources stop at the first (error); live audio zeroes them.
    nonfinite_default: ClassVar[str] = "error"

    @abc.abstractmethod
    def open(self, request: StreamFormat) -> StreamFormat:
        """Prepare to read. ``request`` holds the pipeline's sample_rate/channels/dtype
        (None where the YAML did not set them). Return the format actually delivered;
        raise ConfigError when the source cannot match a requested value."""

    @abc.abstractmethod
    def read(self, n: int) -> np.ndarray:
        """Return up to ``n`` samples as ``(channels, m)``; ``m == 0`` means the stream ended."""


class Sink(_Component):
    kind = "sink"

    @abc.abstractmethod
    def open(self, spec: SignalSpec) -> None:
        """Prepare to receive blocks of ``spec``; raise ConfigError if it cannot take them."""

    @abc.abstractmethod
    def write(self, block: np.ndarray) -> None:
        """Take one output block (its length may be shorter for the last block)."""


# every source and sink type by its YAML name (io/__init__.py declares the built-in ones with their
# modules: a module is imported when one of its types is first looked up)
SOURCES: Registry[type[Source]] = Registry("source")
SINKS: Registry[type[Sink]] = Registry("sink")


def register_source(cls: type[Source]) -> type[Source]:
    SOURCES.register(cls.type, cls)
    return cls


def register_sink(cls: type[Sink]) -> type[Sink]:
    SINKS.register(cls.type, cls)
    return cls


def _lookup(table: Registry, kind: str, type_name: str, where: str | None):
    try:
        return table[type_name]
    except KeyError:
        hint = did_you_mean(type_name, sorted(table)) or f"known {kind}s: {', '.join(sorted(table))}"
        raise ConfigError(f"unknown {kind} type '{type_name}'", where=where, hint=hint,
                          path=("type",)) from None


def source_class(type_name: str, *, where: str | None = None) -> type[Source]:
    return _lookup(SOURCES, "source", type_name, where)


def sink_class(type_name: str, *, where: str | None = None) -> type[Sink]:
    return _lookup(SINKS, "sink", type_name, where)
