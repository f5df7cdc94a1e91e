"""Backends run a pipeline's stages on one kind of hardware.

The policy (DESIGN.md, "Backends and the fallback policy"):

* ``cpu``: NumPy/SciPy implementations of every stage.
* ``cuda``: every stage on the GPU. A missing driver/NVRTC, a GPU below SM 8.0 or a stage
  without a CUDA implementation raises DeviceError/UnsupportedError *before the first
  block*. Never a silent detour through the host.
* ``auto``: chosen once, at start: cuda when a usable GPU is found and every stage has a
  CUDA implementation, else cpu. :class:`BackendChoice` says which and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..errors import ConfigError, UnsupportedError

if TYPE_CHECKING:
    from ..pipeline import Pipeline, SpecChain


@dataclass(frozen=True)
class BackendChoice:
    name: str     # "cpu" | "cuda"
    reason: str   # why, e.g. "requested", "auto: CUDA driver not detected (...)"


class Engine(Protocol):
    """A pipeline's stages, opened on one backend, ready to process blocks."""

    choice: BackendChoice

    def process(self, block: np.ndarray, final: bool = False) -> np.ndarray:
        """Process one input block (channels, n) and return the output block."""

    def reset(self) -> None:
        """Forget all streaming state."""

    def counters(self) -> dict[str, int]:
        """Transfer/wait counters (cuda) or processed-block counters (cpu)."""

    def close(self) -> None:
        """Release every resource; further process() calls are errors."""


def choose_backend(pipeline: "Pipeline", chain: "SpecChain", requested: str) -> BackendChoice:
    """Decide the backend once, before the first block, and say why."""
    if requested == "cpu":
        return BackendChoice("cpu", "requested")
    if requested not in ("cuda", "auto"):
        raise ConfigError(f"unknown backend '{requested}'", hint="use auto, cuda or cpu")
    from . import cuda

    if requested == "cuda":
        cuda.check_supported(pipeline, chain)  # raises DeviceError / UnsupportedError
        return BackendChoice("cuda", "requested")
    ok, why = cuda.usable_for(pipeline, chain)
    if ok:
        return BackendChoice("cuda", f"auto: {why}")
    return BackendChoice("cpu", f"auto: {why}")


def open_backend(pipeline: "Pipeline", chain: "SpecChain", requested: str) -> Engine:
    from ..limits import check_memory

    choice = choose_backend(pipeline, chain, requested)
    # every engine is opened here: a block that cannot fit is refused before anything is allocated
    check_memory(pipeline, chain, choice.name)
    if choice.name == "cuda":
        from .cuda import CudaEngine

        return CudaEngine(pipeline, chain, choice)
    from .cpu import CpuEngine

    try:
        return CpuEngine(pipeline, chain, choice)
    except UnsupportedError as exc:
        if requested != "auto":
            raise
        # e.g. a custom CUDA kernel on a machine without a usable GPU: say why cpu was chosen.
        why = choice.reason.removeprefix("auto: ")
        raise UnsupportedError(exc.stage, exc.backend, f"{exc.reason}; backend 'auto' chose cpu "
                               f"because {why}") from None
