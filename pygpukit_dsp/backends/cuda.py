"""The CUDA backend's Python glue: support checks before the first block, and the engine wrapper.

Every CUDA call lives in C++ (``pygpukit_dsp._native``); this module only decides whether a
pipeline can run there (raising DeviceError/UnsupportedError before the first block, never
falling back), lowers each stage to a native op description (``cuda_lowering``), and moves
blocks through the native engine's pinned slots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import DeviceError, UnsupportedError

if TYPE_CHECKING:
    from ..pipeline import Pipeline, SpecChain


def check_supported(pipeline: "Pipeline", chain: "SpecChain") -> None:
    """Raise DeviceError (no usable GPU) or UnsupportedError (a stage) unless every stage can run on CUDA."""
    from ..capabilities import cuda_usable
    from .cuda_lowering import lower_pipeline

    ok, why = cuda_usable()
    if not ok:
        raise DeviceError(f"backend 'cuda' cannot run: {why}")
    lower_pipeline(pipeline, chain)


def usable_for(pipeline: "Pipeline", chain: "SpecChain") -> tuple[bool, str]:
    """For ``backend: auto``: (True, GPU description) or (False, the reason cpu is chosen)."""
    from ..capabilities import cuda_usable
    from .cuda_lowering import lower_pipeline

    ok, why = cuda_usable()
    if not ok:
        return False, why
    try:
        lower_pipeline(pipeline, chain)
    except UnsupportedError as e:
        return False, f"stage '{e.stage}' cannot run on CUDA: {e.reason}"
    return True, why


def __getattr__(name: str):
    # The engine wrapper imports the native module; keep `import pygpukit_dsp.backends.cuda` light.
    if name == "CudaEngine":
        from .cuda_engine import CudaEngine

        return CudaEngine
    raise AttributeError(name)
