"""python: your own Python function over each block as a pipeline stage, with state between blocks.

The calling convention (docs/stages.md, "python")::

    y = fn(x)                    # a stage without state
    y = fn(x, state)             # with state: the same object every block; change it in place
    y, state = fn(x, state)      # ... or hand back the state the next block gets

``x`` is the block as a NumPy array in the stage's input dtype: ``(channels, n)`` in the time
domain, ``(channels, n, bins)`` in the frames domain, ``n`` the block size except on the last
block of a stream, which may be shorter. ``y`` must have the declared output's shape and dtype
(``output``; default: the input's format): every full block exactly the output block's shape;
the last block keeps ``n`` items when the output keeps the block size, and has at most the
output's block size when ``output.block_size`` changes it. A result of another shape or dtype
(or anything that is not an array) stops the stream with a :class:`StreamFault` naming the stage
and the block; so does an exception the function raises.

``state`` is any object (a dict, an array, a list); the stage keeps a deep copy of the one it was
given and passes it to every block; ``reset()`` (and every new run) starts again from a fresh
deep copy of the initial one. In YAML it is a mapping (or list) of plain values.

``function`` is a callable in Python, or ``"package.module:function"`` in YAML (its module looked
for in the YAML file's folder first, then on ``sys.path`` / ``PYTHONPATH``). A module that cannot be
imported, a missing name or a value that is not callable is a :class:`ConfigError` before the
first block (in YAML at the ``function:`` value's FILE:LINE:COL).

Cost: one Python call per block. The stage times each call (``time.perf_counter_ns`` around it)
and the run's summary reports it per python stage (``RunSummary.python_stages``: calls, mean,
p50, p99 and max microseconds; ``--stats-json`` has it under ``python_stages``).

Backends: the cpu backend calls it with NumPy arrays. On the cuda backend it gets the block as a
GPU array of ``framework`` (``cupy`` or ``torch``; unset: CuPy), called with the engine's CUDA
stream as that framework's current stream, between the native parts before and after it
(backends/cuda_python_chain.py in a chain, cuda_python_graph.py in a graph with branches), and
returns a GPU array by the same rules; NumPy arrays in its state become GPU arrays of that
framework at the start and on reset. ``backend: auto`` puts a pipeline on the GPU only when each
of its python stages names its ``framework`` (a NumPy function is never handed GPU arrays unasked).
"""

from __future__ import annotations

import copy
import importlib
import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

import numpy as np
from pydantic import Field, PlainSerializer, field_validator, model_validator

from ..errors import ConfigError, StreamFault
from ..limits import MAX_CHANNELS
from ..signal import SignalSpec
from .base import Stage, StageParams, did_you_mean, register_stage, validate_params

_REFERENCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
                        r"(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def function_text(fn: Any) -> str:
    """``package.module:function`` for a callable (what YAML writes), or the string itself."""
    if isinstance(fn, str):
        return fn
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}:{getattr(fn, '__qualname__', type(fn).__name__)}"


def _plain(value: Any) -> Any:
    """State as YAML data: arrays as (nested) lists, tuples as lists, mappings by key."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


FunctionRef = Annotated[str | Callable[..., Any], PlainSerializer(function_text)]
StateValue = Annotated[Any, PlainSerializer(_plain)]


class PythonOutput(StageParams):
    channels: int | None = Field(None, ge=1, le=MAX_CHANNELS, description="Output channels (default: the input's).")
    dtype: Literal["float32", "complex64"] | None = Field(None, description="Output dtype (default: the input's).")
    domain: Literal["time", "frames"] | None = Field(
        None, description="Output domain (default: the input's); frames needs bins.")
    bins: int | None = Field(None, ge=1, description="Values per frame of a frames-domain output "
                                                     "(default: the input's).")
    block_size: int | None = Field(
        None, ge=1, description="Items (samples or frames) per full output block (default: the input's).")
    sample_rate: float | None = Field(
        None, gt=0, description="Rate of the output's streaming axis, items per second (default: the input's, "
        "scaled by block_size / the input's block size).")


class PythonParams(StageParams):
    function: FunctionRef = Field(
        ..., description="The function: a callable in Python, or 'package.module:function' in YAML "
        "(its module imported from the YAML file's folder first, then from sys.path / PYTHONPATH).")
    output: PythonOutput | None = Field(
        None, description="Output format when the function changes it: {channels, dtype, domain, bins, "
        "block_size, sample_rate}; default: the input's.")
    state: StateValue = Field(
        None, description="The state passed to every call as fn(x, state) (any object; in YAML a mapping "
        "or list); a fresh deep copy at start and on reset. None: the function is called as fn(x).")
    framework: Literal["cupy", "torch"] | None = Field(
        None, description="The GPU arrays the function takes on the cuda backend: cupy or torch (the cpu "
        "backend gives it NumPy arrays). None: a NumPy function; backend auto then runs the pipeline on "
        "the cpu backend, and backend cuda gives it CuPy arrays.")

    @field_validator("function")
    @classmethod
    def _reference(cls, v: Any) -> Any:
        if isinstance(v, str) and not _REFERENCE.match(v.strip()):
            raise ValueError(f"function must be written 'package.module:function', got {v!r}")
        return v.strip() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _frames_have_bins(self) -> "PythonParams":
        out = self.output
        if out is not None and out.domain == "time" and out.bins is not None:
            raise ValueError("output.bins is for a frames-domain output (domain: frames)")
        return self


def resolve_function(ref: str | Callable[..., Any], base_dir: Path | None = None) -> Callable[..., Any]:
    """The callable a ``function`` parameter names, its module searched in ``base_dir`` (the YAML
    file's folder) first, then on sys.path; ConfigError (at ``function``) when it can't be had."""
    if not isinstance(ref, str):
        if not callable(ref):
            raise ConfigError(f"function must be callable, got {type(ref).__name__}", path=("function",))
        return ref
    module_name, _, attr = ref.partition(":")
    folder = str(base_dir) if base_dir is not None else None
    hint = ("the module is imported from " + (f"{folder} (the YAML file's folder), then " if folder else "") +
            "sys.path: put it there or its folder on PYTHONPATH (or install its package)")
    added = folder is not None and folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        value: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        raise ConfigError(f"function '{ref}': cannot import module '{module_name}' (no module named "
                          f"'{missing}')", hint=hint, path=("function",)) from None
    except Exception as exc:  # the module's own code failed (a SyntaxError, an exception at import)
        raise ConfigError(f"function '{ref}': importing module '{module_name}' raised "
                          f"{type(exc).__name__}: {exc}", hint="fix the module so that it imports",
                          path=("function",)) from None
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    owner = module_name
    for part in attr.split("."):
        if not hasattr(value, part):
            names = [n for n in dir(value) if not n.startswith("_")]
            raise ConfigError(f"function '{ref}': '{owner}' has no attribute '{part}'",
                              hint=did_you_mean(part, names) or f"define {part} in module '{module_name}'",
                              path=("function",))
        value, owner = getattr(value, part), f"{owner}.{part}"
    if not callable(value):
        raise ConfigError(f"function '{ref}' is not callable (its value is of type {type(value).__name__})",
                          hint="name a function (def fn(x, state): ...) or another callable", path=("function",))
    return value


@register_stage
class Python(Stage):
    """A Python function over each block, with state kept between blocks (see the module docstring
    for the calling convention). NumPy arrays on the cpu backend; CuPy or torch GPU arrays on the
    cuda backend, in a pipeline of one path."""

    type = "python"
    summary = "Your own Python function over each block, with state between blocks (NumPy, or GPU arrays on cuda)"
    Params = PythonParams

    def __init__(self, params: PythonParams | Callable[..., Any] | str | None = None, **kwargs: Any):
        # Python(fn, output=..., state=...): the first argument is the function, not a Params model
        if params is not None and not isinstance(params, StageParams):
            fields = {k: v for k, v in kwargs.items() if k not in ("name", "base_dir")}
            fields["function"] = params
            name = kwargs.get("name")
            params = validate_params(PythonParams, fields, what=f"stage '{name or self.type}' ({self.type})")
            kwargs = {k: v for k, v in kwargs.items() if k in ("name", "base_dir")}
        super().__init__(params, **kwargs)
        self.function = resolve_function(self.params.function, self.base_dir)

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        out = self.params.output
        if out is None:
            return spec
        domain = out.domain or spec.domain
        bins = 0 if domain == "time" else (out.bins or spec.bins)
        if domain == "frames" and bins < 1:
            raise ConfigError("output.domain: frames needs output.bins (the input has no bins)",
                              path=("output", "bins"))
        block_size = out.block_size or spec.block_size
        rate = out.sample_rate or spec.sample_rate * block_size / spec.block_size
        return SignalSpec(sample_rate=rate, channels=out.channels or spec.channels, block_size=block_size,
                          dtype=out.dtype or spec.dtype, domain=domain, bins=bins)

    def to_config(self) -> dict[str, Any]:
        ref = function_text(self.params.function)
        if not isinstance(self.params.function, str):  # YAML can name it only if its module:qualname finds it
            try:
                found = resolve_function(ref) if _REFERENCE.match(ref) else None
            except ConfigError:
                found = None
            if found is not self.params.function:
                raise ConfigError(f"stage '{self.name}' (python): its function {ref} cannot be named in YAML",
                                  hint="define it at the top level of an importable module and use "
                                       "function: 'package.module:function'", path=("function",))
        cfg = super().to_config()
        cfg["function"] = ref
        return cfg

    def cpu(self, spec: SignalSpec) -> "PythonProcessor":
        return PythonProcessor(self, spec, self.output_spec(spec))


class PythonProcessor:
    """The running stage: calls the function once per block, checks what it returns, times the call."""

    def __init__(self, stage: Python, spec_in: SignalSpec, spec_out: SignalSpec):
        from pygpukit_dsp_core import LatencyHistogram  # the runner's histogram (HDR, Rust)

        self.stage_name = stage.name
        self._fn = stage.function
        self._fn_text = function_text(stage.params.function)
        self._initial = stage.params.state
        self._has_state = self._initial is not None
        self._state = self._fresh_state()
        self._out = spec_out
        self._keeps_items = spec_out.block_size == spec_in.block_size
        self._full = spec_in.block_size
        self._part = f"stage '{stage.name}' (python)"
        self._hist = LatencyHistogram()
        self._blocks = 0
        self._total_ns = 0

    def _fresh_state(self) -> Any:
        """The state of a new run: a deep copy of the initial one."""
        return copy.deepcopy(self._initial)

    @property
    def state(self) -> Any:
        """The state the next block gets."""
        return self._state

    def _fault(self, what: str) -> StreamFault:
        return StreamFault(f"{self._part} at block {self._blocks}: {self._fn_text} {what}",
                           part=self._part, block=self._blocks)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        y = self._check(self._call(x), int(x.shape[1]) if x.ndim >= 2 else 0)
        self._blocks += 1
        return y

    def _call(self, x: Any) -> Any:
        """The function on one block, timed; what it returned (the state taken from a pair)."""
        t0 = time.perf_counter_ns()
        try:
            result = self._fn(x, self._state) if self._has_state else self._fn(x)
        except Exception as exc:
            raise self._fault(f"raised {type(exc).__name__}: {exc}") from exc
        dt = time.perf_counter_ns() - t0
        self._hist.record(max(dt, 1))
        self._total_ns += dt
        if self._has_state and isinstance(result, tuple) and len(result) == 2:
            result, self._state = result
        return result

    def _check(self, y: Any, n_in: int) -> np.ndarray:
        out = self._out
        if not isinstance(y, np.ndarray):
            raise self._fault(f"returned {type(y).__name__}, not a NumPy array of shape {out.block_shape}")
        self._check_format(y.dtype, tuple(y.shape), n_in)
        return y

    def _check_format(self, dtype: Any, shape: tuple[int, ...], n_in: int) -> None:
        """StreamFault unless an array of ``dtype`` and ``shape`` is this block's output (``n_in``
        items came in)."""
        out = self._out
        if dtype != out.np_dtype:
            raise self._fault(f"returned a {dtype} array; the stage's output is {out.dtype} (declare "
                              "output: {dtype: ...} or convert with .astype)")
        want = list(out.block_shape)
        if n_in < self._full:  # the last block of the stream
            if self._keeps_items:
                want[1] = n_in
            elif len(shape) == len(want) and 0 <= shape[1] <= out.block_size:
                want[1] = shape[1]
        if list(shape) != want:
            raise self._fault(f"returned shape {shape}; this block's output must have shape "
                              f"{tuple(want)} (declare output: {{channels, block_size, ...}} if the function "
                              "changes the format)")

    def reset(self) -> None:
        self._state = self._fresh_state()
        self._hist.reset()
        self._blocks = 0
        self._total_ns = 0

    def call_stats(self) -> dict[str, float]:
        """The Python calls so far: count, and mean, p50, p99 and max microseconds per call."""
        s = self._hist.summary()
        n = int(s["count"])
        if n == 0:
            return {"calls": 0, "mean_us": 0.0, "p50_us": 0.0, "p99_us": 0.0, "max_us": 0.0, "total_us": 0.0}
        return {"calls": n, "mean_us": self._total_ns / n / 1e3, "p50_us": s["p50"] / 1e3,
                "p99_us": s["p99"] / 1e3, "max_us": s["max"] / 1e3, "total_us": self._total_ns / 1e3}
