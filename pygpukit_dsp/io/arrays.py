"""``numpy``: stream from an in-memory array or a ``.npy`` file; collect output into an array."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator, Field, PlainSerializer, model_validator

from ..errors import ConfigError, StreamFault
from ..signal import SignalSpec
from ..stages.base import _array_to_yaml, _to_number_array
from .base import IoParams, Sink, Source, StreamFormat, register_sink, register_source
from ._common import (Counters, ExistingFile, Pacer, PartialFile, PathStr, Rate, check_block, mismatch, not_open,
                      write_failure)


def _as_signal_array(v: Any) -> np.ndarray:
    if isinstance(v, np.ndarray) and v.dtype.kind in "biuf":
        a = v
    elif isinstance(v, np.ndarray) and v.dtype.kind == "c":
        a = v
    else:
        try:
            a = np.asarray(v)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"expected an array of numbers ({exc})") from None
        if a.dtype.kind not in "biufc":
            a = _to_number_array(v)  # lists holding complex strings such as "1-2j"
    if a.ndim not in (1, 2):
        raise ValueError(f"expected shape (channels, n) or (n,), got shape {a.shape}")
    return a


SignalArray = Annotated[np.ndarray, BeforeValidator(_as_signal_array), PlainSerializer(_array_to_yaml)]


class NumpySourceParams(IoParams):
    array: SignalArray | None = Field(
        None, description="the samples, shape (channels, n) or (n,) (Python: any array; YAML: a list)")
    path: ExistingFile | None = Field(None, description=".npy file holding the samples")
    sample_rate: float | None = Field(None, gt=0, description="sample rate in Hz (default: the pipeline's)")
    rate: Rate = Field("asap", description="asap | realtime (pace reads at the sample rate)")

    @model_validator(mode="after")
    def _one_input(self) -> "NumpySourceParams":
        if (self.array is None) == (self.path is None):
            raise ValueError("give exactly one of 'array' (in Python) or 'path' (a .npy file)")
        return self


def _signal_dtype(a: np.ndarray) -> str | None:
    if a.dtype.kind == "c":
        return "complex64"
    if a.dtype.kind in "biuf":
        return "float32"
    return None


@register_source
class NumpySource(Counters, Source):
    """Streams a real (float32) or complex (complex64) array of shape ``(channels, n)`` or ``(n,)``."""

    type = "numpy"
    Params = NumpySourceParams
    summary = "NumPy array (Python) or .npy file"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self.realtime = self.params.rate == "realtime"
        self._data: np.ndarray | None = None
        self._init_counters()

    def input_files(self) -> list[Path]:
        return [] if self.params.path is None else [self.resolve_path(self.params.path)]

    def open(self, request: StreamFormat) -> StreamFormat:
        p = self.params
        what = "numpy source" if p.path is None else f"numpy file '{p.path}'"
        if p.path is not None:
            full = self.resolve_path(p.path)
            try:
                data = np.load(full, mmap_mode="r", allow_pickle=False)
            except Exception as exc:
                raise ConfigError(f"cannot load {full} as a .npy array: {exc}", where=self.where,
                                  path=("path",), hint="save it with numpy.save(path, array)") from None
            if not isinstance(data, np.ndarray):
                raise ConfigError(f"{full} is not a single .npy array", where=self.where, path=("path",),
                                  hint="save one array with numpy.save(path, array)")
        else:
            data = p.array
        dtype = _signal_dtype(data)
        if dtype is None:
            raise ConfigError(f"{what} holds {data.dtype} values, not numbers", where=self.where)
        if data.ndim == 1:
            data = data[None, :]
        elif data.ndim != 2:
            raise ConfigError(f"{what} has shape {data.shape}; expected (channels, n) or (n,)",
                              where=self.where)
        channels = data.shape[0]
        if request.channels is not None and request.channels != channels:
            hint = None
            if data.shape[1] == request.channels:
                hint = f"the array looks like (n, channels) = {data.shape}; pass its transpose (array.T)"
            raise mismatch(f"{what} of shape {data.shape}", "channels", channels, request.channels,
                           where=self.where, hint=hint)
        if request.dtype is not None and request.dtype != dtype:
            raise mismatch(what, "dtype", dtype, request.dtype, where=self.where)
        sr = p.sample_rate
        if sr is not None and request.sample_rate is not None and float(sr) != float(request.sample_rate):
            raise mismatch(what, "sample_rate", f"{sr:g}",
                           f"{request.sample_rate:g}", where=self.where)
        sr = sr or request.sample_rate
        if sr is None:
            raise ConfigError(f"{what} needs sample_rate: set it at the pipeline level or in the source",
                              where=self.where, hint="e.g. 'sample_rate: 48000'")
        self._data, self._np_dtype, self._pos = data, np.dtype(dtype), 0
        self._pacer = Pacer(sr) if self.realtime else None
        return StreamFormat(sample_rate=float(sr), channels=channels, dtype=dtype, length=data.shape[1])

    def read(self, n: int) -> np.ndarray:
        if self._data is None:
            raise not_open("numpy source", "read")
        chunk = self._data[:, self._pos:self._pos + int(n)]
        self._pos += chunk.shape[1]
        self._counts["samples"] += chunk.shape[1]
        if self._pacer is not None and chunk.shape[1]:
            self._pacer.wait_until(self._pos)
        return np.array(chunk, dtype=self._np_dtype, order="C")  # always a copy the caller may keep

    def to_config(self) -> dict[str, Any]:
        cfg = super().to_config()
        if "array" in cfg and self.params.array.size > 65536:
            raise ConfigError(f"a numpy source holding {self.params.array.size} values is too large to "
                              "write into YAML", hint="save the array with numpy.save and use 'path:'")
        return cfg

    def close(self) -> None:
        self._data = None


class NumpySinkParams(IoParams):
    path: PathStr | None = Field(None, description="optional .npy file written at close")


@register_sink
class NumpySink(Counters, Sink):
    """Collects every output block; :meth:`result` concatenates them along the streaming axis.

    With ``path``: ``NAME.partial`` is created when opened (so a path that cannot be written is an
    error before the first block), the blocks are saved into it at close and it is renamed; a run
    that collected nothing leaves no file, and a save that fails keeps ``NAME.partial``.
    """

    type = "numpy"
    Params = NumpySinkParams
    summary = "collect the output into a NumPy array (optionally saved as .npy)"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._spec: SignalSpec | None = None
        self._blocks: list[np.ndarray] = []
        self._saved = False
        self._out: PartialFile | None = None
        self._init_counters()

    def output_files(self) -> list[Path]:
        return [] if self.full_path is None else [self.full_path]

    def open(self, spec: SignalSpec) -> None:
        if self.full_path is not None:
            self._out = PartialFile(self.full_path, f"numpy sink '{self.params.path}'", where=self.where)
            self._out.create().close()
        self._spec, self._blocks, self._saved = spec, [], False

    def write(self, block: np.ndarray) -> None:
        if self._spec is None:
            raise not_open("numpy sink", "write")
        block = check_block(block, self._spec, "numpy sink")
        self._blocks.append(np.array(block, dtype=self._spec.np_dtype))  # the engine may reuse its buffer
        self._counts["samples"] += block.shape[1]

    def result(self) -> np.ndarray:
        """Everything written so far: ``(channels, n)`` in time, ``(channels, frames, bins)`` in frames."""
        if self._spec is None:
            raise not_open("numpy sink", "result")
        if not self._blocks:
            shape = list(self._spec.block_shape)
            shape[1] = 0
            return np.zeros(shape, dtype=self._spec.np_dtype)
        if len(self._blocks) > 1:
            self._blocks = [np.concatenate(self._blocks, axis=1)]
        return self._blocks[0]

    @property
    def full_path(self) -> Path | None:
        return None if self.params.path is None else self.resolve_path(self.params.path)

    def close(self) -> None:
        if self._out is None or self._saved or self._spec is None:
            return
        self._saved = True
        out = self._out
        data = self.result()
        if data.shape[1] == 0:
            out.discard()
            return
        try:
            with open(out.partial, "wb") as f:  # np.save(name) would append ".npy" to other names
                np.save(f, data)
        except OSError as exc:
            raise StreamFault(f"writing {out.partial} failed: {write_failure(out.path, exc, data.nbytes)}; the "
                              f"incomplete file keeps the name {out.partial.name}") from exc
        out.commit()
