"""``callback``: a Python function produces the input or consumes the output.

In Python pass ``fn=``; in YAML name an importable function as ``function: "module:attr"``
(the YAML file's folder is searched first while importing it).

* source: ``fn(n) -> array | None``; the array is ``(channels, m)`` or ``(m,)`` for one
  channel, any ``m``; ``None`` (or an empty array) ends the stream.
* sink: ``fn(block)`` for every output block. The block's buffer may be reused after
  the call returns: copy it to keep it.

GPU arrays (pygpukit_dsp/arrays_interop.py): a source may return arrays that live on the GPU
(``__cuda_array_interface__`` or a CUDA ``__dlpack__``: CuPy, torch, ...; float32/complex64 as
the pipeline's dtype, never converted); on the cuda backend they reach the engine with no host
copy (another backend refuses them at the first block). A sink with ``device_arrays: true``
receives such blocks as GPU arrays of the input's framework, ready in stream order on the
stream the source's arrays were made on; without it, a GPU block is copied to NumPy by its
framework before ``fn`` sees it, and ``device_arrays: true`` with host blocks is a fault.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, field_validator, model_validator

from ..arrays_interop import concatenate, inspect, is_device_array, to_host
from ..errors import ConfigError, StreamFault
from ..signal import SignalSpec
from ..stages.base import did_you_mean
from .base import IoParams, Sink, Source, StreamFormat, register_sink, register_source
from ._common import Counters, Pacer, Rate, check_block, not_open


class _CallbackParams(IoParams):
    fn: Callable[..., Any] | None = Field(None, exclude=True, description="Python only: the function")
    function: str | None = Field(None, description="importable function as 'module:attr'")

    @field_validator("function")
    @classmethod
    def _spec(cls, v: str | None) -> str | None:
        if v is None:
            return v
        mod, sep, attr = v.partition(":")
        if not sep or not mod.strip() or not attr.strip():
            raise ValueError(f"'{v}' is not of the form 'module:function' (e.g. 'my_dsp:make_block')")
        return v

    @model_validator(mode="after")
    def _one(self) -> "_CallbackParams":
        if (self.fn is None) == (self.function is None):
            raise ValueError("give exactly one of 'function: \"module:attr\"' (YAML) or fn= (Python)")
        return self


def import_callable(spec: str, base_dir: Path) -> Callable[..., Any]:
    """Import ``"module:attr"`` (``attr`` may be dotted), searching ``base_dir`` first."""
    mod_name, _, attr = spec.partition(":")
    folder = str(base_dir)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(mod_name.strip())
    except ImportError as exc:
        raise ConfigError(f"cannot import module '{mod_name}' for function '{spec}': {exc}",
                          path=("function",),
                          hint=f"the module must be importable; {folder} (the YAML file's folder) is "
                               "searched first") from None
    except Exception as exc:
        raise ConfigError(f"importing module '{mod_name}' failed: {type(exc).__name__}: {exc}",
                          path=("function",)) from None
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    obj: Any = module
    for part in attr.strip().split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise ConfigError(f"'{mod_name}' has no attribute '{attr}'", path=("function",),
                              hint=did_you_mean(part, names))
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"'{spec}' is a {type(obj).__name__}, not a function", path=("function",))
    return obj


class _CallbackComponent(Counters):
    params: _CallbackParams
    base_dir: Path

    def _resolve(self) -> Callable[..., Any]:
        if self.params.fn is not None:
            return self.params.fn
        return import_callable(self.params.function, self.base_dir)

    @property
    def fn_name(self) -> str:
        return self.params.function or getattr(self._fn, "__qualname__", repr(self._fn))

    def to_config(self) -> dict[str, Any]:
        if self.params.function is None:
            raise ConfigError(f"a callback {self.kind} given as a Python function cannot be written to YAML",
                              hint="put the function in a module and use function: 'module:attr'")
        return super().to_config()


class CallbackSourceParams(_CallbackParams):
    rate: Rate = Field("asap", description="asap | realtime (pace reads at the sample rate)")


@register_source
class CallbackSource(_CallbackComponent, Source):
    """Samples from ``fn(n)``; returned arrays of any length are re-cut into reads of ``n``."""

    type = "callback"
    Params = CallbackSourceParams
    summary = "Python function fn(n) -> array | None"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._fn = self._resolve()
        self.realtime = self.params.rate == "realtime"
        self._fmt: StreamFormat | None = None
        self._init_counters()

    def open(self, request: StreamFormat) -> StreamFormat:
        if request.sample_rate is None:
            raise ConfigError("callback source needs sample_rate: set it at the pipeline level",
                              where=self.where, hint="e.g. 'sample_rate: 48000'")
        self._fmt = StreamFormat(sample_rate=float(request.sample_rate), channels=request.channels or 1,
                                 dtype=request.dtype or "float32", length=None)
        self._rest: np.ndarray | None = None
        self._ended = False
        self._pacer = Pacer(request.sample_rate) if self.realtime else None
        return self._fmt

    def _call(self, n: int) -> np.ndarray | None:
        try:
            out = self._fn(n)
        except Exception as exc:
            raise StreamFault(f"callback source '{self.fn_name}' raised {type(exc).__name__}: {exc}") from exc
        if out is None:
            return None
        if is_device_array(out):
            return self._device_part(out)
        arr = np.asarray(out)
        if arr.ndim == 1:
            arr = arr[None, :]
        channels = self._fmt.channels
        if arr.ndim != 2 or arr.shape[0] != channels:
            raise StreamFault(f"callback source '{self.fn_name}' returned shape {np.shape(out)}; expected "
                              f"({channels}, m)" + (" or (m,)" if channels == 1 else ""))
        if arr.dtype.kind == "c" and self._fmt.dtype == "float32":
            raise StreamFault(f"callback source '{self.fn_name}' returned complex samples but the pipeline "
                              "is float32 (set dtype: complex64)")
        if arr.dtype.kind not in "biufc":
            raise StreamFault(f"callback source '{self.fn_name}' returned {arr.dtype} values, not numbers")
        return arr.astype(self._fmt.dtype, copy=False)

    def _device_part(self, out: Any) -> Any:
        """A GPU array from fn, checked as it is (its layout, the pipeline's dtype and channels)."""
        try:
            info = inspect(out, what=f"callback source '{self.fn_name}''s GPU array")
        except ConfigError as exc:
            raise StreamFault(exc.message) from None
        channels = self._fmt.channels
        if info.shape[0] != channels or str(info.dtype) != self._fmt.dtype:
            raise StreamFault(f"callback source '{self.fn_name}' returned a GPU array of shape {info.shape}, "
                              f"{info.dtype}; expected ({channels}, m), {self._fmt.dtype} (GPU arrays are not converted)")
        return out.reshape(1, -1) if len(out.shape) == 1 else out

    def read(self, n: int) -> np.ndarray:
        if self._fmt is None:
            raise not_open("callback source", "read")
        n = int(n)
        parts = [] if self._rest is None else [self._rest]
        have = 0 if self._rest is None else self._rest.shape[1]
        self._rest = None
        while have < n and not self._ended:
            arr = self._call(n - have)
            if arr is None or arr.shape[1] == 0:
                self._ended = True
                break
            parts.append(arr)
            have += arr.shape[1]
        if not parts:
            return np.zeros((self._fmt.channels, 0), dtype=self._fmt.dtype)
        device = is_device_array(parts[0])
        if len(parts) == 1:
            joined = parts[0]
        elif device:  # joined on the GPU by its framework
            try:
                joined = concatenate(parts, f"callback source '{self.fn_name}'")
            except ConfigError as exc:
                raise StreamFault(exc.message) from None
        else:
            joined = np.concatenate(parts, axis=1)
        if joined.shape[1] > n:
            self._rest = joined[:, n:]
            joined = joined[:, :n]
        self._counts["samples"] += joined.shape[1]
        if self._pacer is not None and joined.shape[1]:
            self._pacer.wait_until(self._counts["samples"])
        return joined if device else np.ascontiguousarray(joined)


class CallbackSinkParams(_CallbackParams):
    """``function`` or ``fn``: called as fn(block) for every output block."""

    device_arrays: bool = Field(False, description="hand GPU blocks over as GPU arrays of the input's framework "
                                                   "(cuda backend, a source of GPU arrays); false: NumPy arrays")


@register_sink
class CallbackSink(_CallbackComponent, Sink):
    """Hands every output block to ``fn(block)``."""

    type = "callback"
    Params = CallbackSinkParams
    summary = "Python function fn(block) called for every output block"

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._fn = self._resolve()
        self._spec: SignalSpec | None = None
        self._init_counters()

    def open(self, spec: SignalSpec) -> None:
        self._spec = spec

    def write(self, block: np.ndarray) -> None:
        if self._spec is None:
            raise not_open("callback sink", "write")
        what = f"callback sink '{self.fn_name}'"
        if is_device_array(block):
            if not self.params.device_arrays:
                try:
                    block = to_host(block)  # the sink takes NumPy: its framework copies the block
                except ConfigError as exc:
                    raise StreamFault(f"{what}: {exc.message}") from None
            else:
                self._check_device_block(block, what)
        elif self.params.device_arrays:
            raise StreamFault(f"{what} takes GPU arrays (device_arrays: true) but the stream's blocks are host "
                              "arrays: give it a source of GPU arrays on the cuda backend, or drop device_arrays")
        if not is_device_array(block):
            block = check_block(block, self._spec, what)
        try:
            self._fn(block)
        except Exception as exc:
            raise StreamFault(f"callback sink '{self.fn_name}' raised {type(exc).__name__}: {exc}") from exc
        self._counts["samples"] += int(block.shape[1])

    def _check_device_block(self, block: Any, what: str) -> None:
        expected = self._spec.block_shape
        shape = tuple(int(s) for s in block.shape)
        if len(shape) != len(expected) or shape[0] != expected[0] or shape[2:] != tuple(expected[2:]):
            raise StreamFault(f"{what}: got a GPU block of shape {shape}, expected {expected} (or shorter along axis 1)")
