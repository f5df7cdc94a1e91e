"""Backends execute a pipeline's stages on one kind of hardware.

The policy (DESIGN.md, "Backends and the fallback policy"):

* ``cpu``: NumPy/SciPy implementations of every stage.
* ``cuda``: every stage on the GPU. A missing driver/NVRTC, a GPU below SM 8.0 or a stage
  without a CUDA implementation raises DeviceError/UnsupportedError *before the first
  block*. Never a silent detour through the host.
* ``auto``: chosen once, at start: cuda when a usable GPU is found and every stage has a
  CUDA implementation, else cpu. :class:`BackendChoice` says which and why.

A graph that is not one path (branches, several sources, a stage with several inputs:
docs/graphs.md) runs on either backend: on cuda as one CUDA graph launch per block
(cuda_graph_plan.py, cuda_graph_engine.py), every stage lowered or the graph refused before the
first block naming the stage that cannot run. A graph of one path is a Pipeline and runs as one; on cuda, one that holds python stages runs
as native segments around them (cuda_python_chain.py), a graph with branches as native regions
between them (cuda_python_graph.py).

On cuda the engine runs on one GPU: the pipeline's ``device`` (default 0), or the index a
Session placed a ``device: auto`` stream on (docs/multi-gpu.md). A GPU that does not exist or
cannot be used is a DeviceError before the first block, also under ``auto`` when CUDA itself is
usable (an explicitly named GPU is never swapped for the CPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..errors import ConfigError, UnsupportedError
from ..graph_model import GraphSpecs

if TYPE_CHECKING:
    from ..graph import Graph
    from ..pipeline import Pipeline, SpecChain

@dataclass(frozen=True)
class BackendChoice:
    name: str     # "cpu" | "cuda"
    reason: str   # why, e.g. "requested", "auto: CUDA driver not detected (...)"
    device: int | None = None  # cuda: the GPU index the engine runs on; None on cpu


def requested_gpu(pipeline: "Pipeline", device: int | str | None = None) -> int:
    """The GPU index a pipeline asks for: ``device`` (an override) else ``pipeline.device``;
    unset is GPU 0, and so is ``auto`` outside a Session (nothing to place it against)."""
    from ..devices import check_device

    want = check_device(device) if device is not None else getattr(pipeline, "device", None)
    return want if isinstance(want, int) else 0


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


def choose_backend(pipeline: "Pipeline | Graph", chain: "SpecChain | GraphSpecs", requested: str,
                   device: int | str | None = None) -> BackendChoice:
    """Decide the backend once, before the first block, and say why.

    ``device`` (a GPU index, overriding the pipeline's ``device``) is where a cuda engine runs.
    A graph that is not one path (``chain`` its GraphSpecs) is lowered as a whole
    (cuda_graph_plan.lower_graph): cuda when CUDA is usable and every stage lowers.
    """
    if requested == "cpu":
        return BackendChoice("cpu", "requested")
    if requested not in ("cuda", "auto"):
        raise ConfigError(f"unknown backend '{requested}'", hint="use auto, cuda or cpu")
    if not pipeline.stages:
        # e.g. a reader that only sends its source on (pipelines/cluster.yaml): no computation,
        # so no GPU engine (it would be copies there and back for nothing), whatever was asked
        return BackendChoice("cpu", f"{'auto' if requested == 'auto' else 'cuda requested'}, but the pipeline "
                                    "has no stages: its blocks pass from source to sink on the host")
    from . import cuda

    gpu = requested_gpu(pipeline, device)
    if requested == "cuda":
        cuda.check_supported(pipeline, chain, gpu)  # raises DeviceError / UnsupportedError
        return BackendChoice("cuda", "requested", gpu)
    ok, why = cuda.usable_for(pipeline, chain, gpu)  # DeviceError for a named GPU that cannot run
    if ok:
        return BackendChoice("cuda", f"auto: {why}", gpu)
    return BackendChoice("cpu", f"auto: {why}")


def open_backend(pipeline: "Pipeline | Graph", chain: "SpecChain | GraphSpecs", requested: str,
                 device: int | str | None = None, *, nonfinite: str | None = None) -> Engine:
    """The pipeline's engine on the chosen backend (on cuda: on GPU ``device``, default the
    pipeline's ``device``); every check that can fail before the first block runs here.
    A graph that is not one path (``chain`` its GraphSpecs) gets a
    :class:`cuda_graph_engine.CudaGraphEngine` on cuda, a :class:`cpu.CpuGraphEngine` on cpu.

    ``nonfinite``: what the engine does with NaN/Inf input samples (pygpukit_dsp/nonfinite.py);
    None: the pipeline's ``nonfinite``, else ``error``."""
    from ..nonfinite import DEFAULT_POLICY

    policy = nonfinite or getattr(pipeline, "nonfinite", None) or DEFAULT_POLICY
    from ..limits import check_memory

    choice = choose_backend(pipeline, chain, requested, device)
    if isinstance(chain, GraphSpecs):
        from ..graph_model import memory_items

        check_memory(pipeline, chain, choice.name, items=memory_items(pipeline.topology(), chain),
                     device=choice.device or 0)
        if choice.name == "cuda":
            from .cuda_python_chain import has_python_stage

            if has_python_stage(pipeline.stages):
                from .cuda_python_graph import CudaPythonGraphEngine

                return CudaPythonGraphEngine(pipeline, chain, choice, device=choice.device or 0, nonfinite=policy)
            from .cuda_graph_engine import CudaGraphEngine

            return CudaGraphEngine(pipeline, chain, choice, device=choice.device or 0, nonfinite=policy)
        from .cpu import CpuGraphEngine

        return CpuGraphEngine(pipeline, chain, choice, nonfinite=policy)
    # every engine is opened here: a block that cannot fit is refused before anything is allocated
    check_memory(pipeline, chain, choice.name, device=choice.device or 0)
    if choice.name == "cuda":
        from .cuda_python_chain import CudaPythonChainEngine, has_python_stage

        if has_python_stage(pipeline.stages):
            return CudaPythonChainEngine(pipeline, chain, choice, device=choice.device or 0, nonfinite=policy)
        from .cuda import CudaEngine

        return CudaEngine(pipeline, chain, choice, device=choice.device or 0, nonfinite=policy)
    from .cpu import CpuEngine

    try:
        return CpuEngine(pipeline, chain, choice, nonfinite=policy)
    except UnsupportedError as exc:
        if requested != "auto":
            raise
        # e.g. a custom CUDA kernel on a machine without a usable GPU: say why cpu was chosen.
        why = choice.reason.removeprefix("auto: ")
        raise UnsupportedError(exc.stage, exc.backend, f"{exc.reason}; backend 'auto' chose cpu "
                               f"because {why}") from None
