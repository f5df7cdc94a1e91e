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


def _unsupported_stages(pipeline: "Pipeline", chain: "SpecChain") -> list[UnsupportedError]:
    from .cuda_lowering import unsupported_reason

    errors = []
    for st, spec in zip(pipeline.stages, chain.specs[:-1]):
        why = unsupported_reason(st, spec)
        if why:
            errors.append(UnsupportedError(st.name, "cuda", why))
    return errors


def check_supported(pipeline: "Pipeline", chain: "SpecChain") -> None:
    """Raise DeviceError (no usable GPU) or UnsupportedError (a stage) unless every stage can run on CUDA."""
    from ..capabilities import cuda_usable

    ok, why = cuda_usable()
    if not ok:
        raise DeviceError(f"backend 'cuda' cannot run: {why}")
    errors = _unsupported_stages(pipeline, chain)
    if errors:
        raise errors[0]


def usable_for(pipeline: "Pipeline", chain: "SpecChain") -> tuple[bool, str]:
    """For ``backend: auto``: (True, GPU description) or (False, the reason cpu is chosen)."""
    from ..capabilities import cuda_usable

    ok, why = cuda_usable()
    if not ok:
        return False, why
    errors = _unsupported_stages(pipeline, chain)
    if errors:
        e = errors[0]
        return False, f"stage '{e.stage}' has no CUDA implementation for this input ({e.reason})"
    return True, why


def __getattr__(name: str):
    # The engine wrapper imports the native module; keep `import pygpukit_dsp.backends.cuda` light.
    if name == "CudaEngine":
        from .cuda_engine import CudaEngine

        return CudaEngine
    raise AttributeError(name)
