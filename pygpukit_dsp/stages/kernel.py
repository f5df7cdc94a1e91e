"""kernel: your own CUDA C kernel as a pipeline stage (cuda backend only).

The source (inline, or a ``.cu`` file next to the YAML) is compiled by NVRTC for the GPU in the
machine when the pipeline starts; a compile error is a :class:`CompileError` with the stage
name, the entry point and NVRTC's log, raised before the first block. No CUDA toolkit is
needed. There is no CPU implementation: on the cpu backend (and with ``backend: auto`` on a
machine without a usable GPU) the pipeline is refused with an :class:`UnsupportedError`
before the first block.

The kernel contract (``T``/``T_out`` are ``float`` for float32, ``float2`` for complex64)::

    extern "C" __global__ void entry(const T* in, T_out* out,
                                     long long channels,  // input channels
                                     long long items_in,  // valid samples (or frames) in this block
                                     long long row_in,    // elements per input channel row
                                     long long row_out,   // elements per output channel row
                                     float p0, float p1, ...,  // the stage's `params`, if any
                                     S* state)                 // only with `state` declared

``in`` and ``out`` are whole blocks, C-contiguous ``(channels, block_size)`` (time domain) or
``(channels, frames, bins)`` (frames domain, ``row = frames * bins``). ``items_in`` equals the
block size except on the last block of a stream, which may be shorter: process only the first
``items_in`` items (``items_in * bins`` elements in the frames domain) of each row. The
output keeps the number of items; ``output`` may change the channel count and the dtype.

State between blocks: ``state: {dtype: float32, shape: [channels]}`` (dtype float32 or complex64;
``shape`` a list of sizes or one size) declares a device buffer that the stage owns: zeroed when
the pipeline starts and on ``reset()``, kept from block to block, and passed to the kernel as one
more argument after all the others (``S*``: ``float*`` for float32, ``float2*`` for complex64;
C-contiguous ``shape``). The kernel reads and writes it as it likes (the launches of one stream
run in order, so block n+1 sees what block n wrote). Without ``state`` the kernel takes the
arguments above and nothing more, as before. ``split: channels`` cannot be combined with state.
``grid: auto`` launches one thread per output element
(``out_channels * row_out`` threads, ``threads`` per block).

``split: channels`` declares that output channel ``c`` depends on input channel ``c`` only: the
scheduler may then split a throughput stream's block into chunks over ranges of channels (each a
launch with ``in``/``out`` offset to the chunk's first channel and ``channels`` its count), so
that it yields to realtime blocks (docs/scheduler.md). The default, ``none``, launches the whole
block at once (a kernel may read other channels).

Example (YAML)::

    - type: kernel
      name: halve
      entry: scale
      params: [0.5]
      source: |
        extern "C" __global__ void scale(const float* in, float* out, long long channels,
                                         long long items, long long row_in, long long row_out,
                                         float g) {
          long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
          long long c = i / row_out, t = i % row_out;
          if (c < channels && t < items) out[c * row_out + t] = g * in[c * row_in + t];
        }
"""

from __future__ import annotations

import re
import math
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..errors import ConfigError, UnsupportedError
from ..limits import MAX_CHANNELS
from ..signal import SignalSpec
from ._common import check_file_exists, exactly_one
from .base import Stage, StageParams, register_stage, validate_params

MAX_STATE_ELEMENTS = 2**31 - 1  # a long long index; the memory check bounds it further
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class KernelOutput(StageParams):
    channels: int | None = Field(None, ge=1, le=MAX_CHANNELS,
                                 description="Output channels (default: the input's).")
    dtype: Literal["float32", "complex64"] | None = Field(
        None, description="Output dtype (default: the input's).")


class KernelState(StageParams):
    dtype: Literal["float32", "complex64"] = Field("float32", description="Element type of the state buffer.")
    shape: int | list[int] = Field(..., description="Its shape: a list of sizes, or one size (elements).")

    @field_validator("shape")
    @classmethod
    def _positive(cls, v: int | list[int]) -> int | list[int]:
        sizes = [v] if isinstance(v, int) else v
        if not sizes or any(n < 1 for n in sizes):
            raise ValueError(f"shape must be one or more sizes >= 1, got {v!r}")
        if math.prod(sizes) > MAX_STATE_ELEMENTS:
            raise ValueError(f"shape {v!r} holds {math.prod(sizes)} elements; at most {MAX_STATE_ELEMENTS}")
        return v

    @property
    def elements(self) -> int:
        return math.prod([self.shape] if isinstance(self.shape, int) else self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * (8 if self.dtype == "complex64" else 4)


class KernelParams(StageParams):
    source: str | None = Field(None, description="The CUDA C source, inline (a YAML block scalar `|`).")
    source_file: str | None = Field(
        None, description="A .cu file holding the source; relative paths are resolved against the "
        "YAML file's folder.")
    entry: str = Field(..., description="Name of the extern \"C\" __global__ function to launch.")
    threads: int = Field(256, ge=1, le=1024, description="Threads per block.")
    grid: Literal["auto"] | int = Field(
        "auto", description="Blocks per launch: 'auto' for one thread per output element, or a count.")
    output: KernelOutput | None = Field(
        None, description="Output format when the kernel changes it: {channels, dtype}; default: "
        "the input's.")
    params: list[float] = Field(
        default_factory=list, description="Float scalars passed after the fixed arguments (p0, p1, ...).")
    state: KernelState | None = Field(
        None, description="A device buffer kept between blocks, {dtype: float32|complex64, shape: [...]}: "
        "zeroed at start and on reset, passed to the kernel as its last argument (S* state).")
    split: Literal["none", "channels"] = Field(
        "none", description="How the scheduler may split a block into chunks (pacing a throughput stream "
        "beside realtime ones): 'channels' declares that output channel c depends on input channel c only "
        "(equal channel counts), so a chunk is a launch over a range of channels; 'none': one launch per block.")

    @field_validator("entry")
    @classmethod
    def _identifier(cls, v: str) -> str:
        if not _IDENTIFIER.match(v):
            raise ValueError(f"entry must be a C identifier (the kernel's function name), got {v!r}")
        return v

    @field_validator("grid")
    @classmethod
    def _grid(cls, v: str | int) -> str | int:
        if isinstance(v, int) and not 1 <= v <= 2**31 - 1:
            raise ValueError(f"grid must be 'auto' or 1..2147483647 blocks, got {v}")
        return v

    @field_validator("source_file")
    @classmethod
    def _file_exists(cls, v: str | None, info: ValidationInfo) -> str | None:
        return check_file_exists(v, info)

    @model_validator(mode="after")
    def _one_source(self) -> "KernelParams":
        exactly_one(self, ("source", "source_file"))
        if self.source is not None and not self.source.strip():
            raise ValueError("source is empty")
        return self

    @model_validator(mode="after")
    def _split_keeps_channels(self) -> "KernelParams":
        if self.split == "channels" and self.output is not None and self.output.channels is not None:
            raise ValueError("split: channels needs the input's channel count on the output "
                             "(leave output.channels out)")
        if self.split == "channels" and self.state is not None:
            raise ValueError("split: channels cannot be used with state (a chunk of channels would see the "
                             "whole state buffer); leave split out")
        return self


@register_stage
class Kernel(Stage):
    """A custom CUDA C kernel compiled by NVRTC (see the module docstring for the contract).

    Runs only on the cuda backend; ``cpu()`` raises UnsupportedError.
    """

    type = "kernel"
    summary = "Custom CUDA C kernel compiled by NVRTC at start (cuda backend only)"
    Params = KernelParams

    def __init__(self, params: KernelParams | None = None, **kwargs):
        # The stage's own `params` (the float scalars) shares its name with Stage's first
        # argument: a list given as Kernel(params=[0.5], ...) is the scalars, not a model.
        if params is not None and not isinstance(params, StageParams):
            fields = {k: v for k, v in kwargs.items() if k not in ("name", "base_dir")}
            fields["params"] = params
            base_dir = kwargs.get("base_dir")
            params = validate_params(KernelParams, fields,
                                     base_dir=Path(base_dir) if base_dir is not None else Path.cwd(),
                                     what=f"stage '{kwargs.get('name') or self.type}' ({self.type})")
            kwargs = {k: v for k, v in kwargs.items() if k in ("name", "base_dir")}
        super().__init__(params, **kwargs)

    def source_text(self) -> str:
        """The kernel source: inline, or read from ``source_file``."""
        if self.params.source is not None:
            return self.params.source
        path: Path = self.resolve_path(self.params.source_file)
        try:
            return path.read_text()
        except OSError as exc:
            raise ConfigError(f"source_file: cannot read {path}: {exc}", where=self.where,
                              path=("source_file",)) from None

    def output_spec(self, spec: SignalSpec) -> SignalSpec:
        out = self.params.output
        if out is None:
            return spec
        return spec.with_(channels=out.channels or spec.channels, dtype=out.dtype or spec.dtype)

    def state_bytes(self, spec: SignalSpec) -> int:
        return self.params.state.nbytes if self.params.state is not None else 0

    def cpu(self, spec: SignalSpec):
        raise UnsupportedError(self.name, "cpu", "a custom CUDA kernel runs only on the cuda backend")
