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


def _named_gpu_error(pipeline: "Pipeline", device: int, why: str) -> DeviceError:
    # where the YAML names the GPU (the device value, else the pipeline), when it came from a file;
    # an override (gk-stream run --device, Session(device=...)) is not in the file
    if getattr(pipeline, "device", None) == device:
        where = getattr(pipeline, "device_where", None) or getattr(pipeline, "where", None)
        at = f" (at {where})" if where and not where.startswith("pipeline '") else ""
    else:
        at = " (the run's device override)"
    return DeviceError(f"pipeline '{pipeline.name}' asks for GPU {device} (device: {device}){at}, which cannot "
                       f"run it: {why}; `gk-stream devices` lists this machine's GPUs (or use device: auto)")


def _lower(pipeline, chain) -> None:
    """Lower a pipeline, or a graph (``chain`` its GraphSpecs) as a whole; UnsupportedError naming
    the first stage that cannot run."""
    from ..graph_model import GraphSpecs

    from .cuda_python_chain import check_python_chain, has_python_stage

    if isinstance(chain, GraphSpecs):
        if has_python_stage(pipeline.stages):  # native regions between its python stages
            from .cuda_python_graph import check_python_graph

            check_python_graph(pipeline, chain)
            return
        from .cuda_graph_plan import lower_graph

        lower_graph(pipeline, chain)
        return

    if has_python_stage(pipeline.stages):  # native segments around its python stages
        check_python_chain(pipeline, chain)
        return
    from .cuda_lowering import lower_pipeline

    lower_pipeline(pipeline, chain)


def check_supported(pipeline: "Pipeline", chain: "SpecChain", device: int = 0) -> None:
    """Raise DeviceError (no usable GPU ``device``) or UnsupportedError (a stage) unless every
    stage can run on CUDA there."""
    from ..capabilities import capabilities, usable_from

    caps = capabilities(math_libraries=False)  # cuFFT/cuBLAS: checked by the ops that use them
    ok, why = usable_from(caps, device)
    if not ok:
        if device != 0 and usable_from(caps, 0)[0]:
            raise _named_gpu_error(pipeline, device, why)
        raise DeviceError(f"backend 'cuda' cannot run: {why}")
    _lower(pipeline, chain)


def usable_for(pipeline: "Pipeline", chain: "SpecChain", device: int = 0) -> tuple[bool, str]:
    """For ``backend: auto``: (True, GPU description) or (False, the reason cpu is chosen).

    CUDA usable but GPU ``device`` missing or unusable is a DeviceError, not a reason to run on
    the CPU: the pipeline named that GPU.
    """
    from ..capabilities import capabilities, usable_from

    caps = capabilities(math_libraries=False)  # cuFFT/cuBLAS: checked by the ops that use them
    ok, why = usable_from(caps, device)
    if not ok:
        if device != 0 and usable_from(caps, 0)[0]:
            raise _named_gpu_error(pipeline, device, why)
        return False, why
    numpy_fn = next((st for st in pipeline.stages if st.type == "python" and st.params.framework is None), None)
    if numpy_fn is not None:
        return False, (f"stage '{numpy_fn.name}' (python) names no framework, so its function takes NumPy "
                       "arrays (framework: cupy or torch runs it on the GPU)")
    try:
        _lower(pipeline, chain)
    except UnsupportedError as e:
        return False, f"stage '{e.stage}' cannot run on CUDA: {e.reason}"
    return True, why


def __getattr__(name: str):
    # The engine wrapper imports the native module; keep `import pygpukit_dsp.backends.cuda` light.
    if name == "CudaEngine":
        from .cuda_engine import CudaEngine

        return CudaEngine
    raise AttributeError(name)
