"""Hand-written baselines: what a user would write instead, with NumPy, CuPy or PyTorch.

Each baseline takes a pipeline's stages as a list of :class:`Op` (resolved coefficients,
no pygpukit code in the loop) and processes host blocks the way a user would: NumPy on
the CPU; CuPy/PyTorch copying each block to the GPU and back. A pipeline with a stage a
baseline does not implement is reported as skipped, with the reason.

| name          | what                                                               |
|---------------|--------------------------------------------------------------------|
| numpy         | NumPy on the CPU; FIR as an overlap-save loop with numpy.fft        |
| cupy          | CuPy eager: cp.asarray per block, cupy.fft, cp.asnumpy              |
| torch         | PyTorch eager on CUDA: per-block copies, torch.fft                 |
| torch-graph   | PyTorch with the block's ops captured once in a CUDA graph          |
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ...pipeline import Pipeline, SpecChain


from .ops import BaselineSkipped, Op, resolve_ops

__all__ = ["BASELINES", "BaselineSkipped", "Op", "build_baseline", "resolve_ops"]


BuildFn = Callable[["Pipeline", "SpecChain"], Any]


def _numpy(p, c):
    from .numpy_impl import NumpyBaseline

    return NumpyBaseline(p, c)


def _cupy(p, c):
    from .cupy_impl import CupyBaseline

    return CupyBaseline(p, c)


def _torch(p, c):
    from .torch_impl import TorchBaseline

    return TorchBaseline(p, c, graph=False)


def _torch_graph(p, c):
    from .torch_impl import TorchBaseline

    return TorchBaseline(p, c, graph=True)


BASELINES: dict[str, BuildFn] = {"numpy": _numpy, "cupy": _cupy, "torch": _torch, "torch-graph": _torch_graph}


def build_baseline(name: str, pipeline: "Pipeline", chain: "SpecChain"):
    """An object with process(block) -> out, reset(), close(); or BaselineSkipped."""
    return BASELINES[name](pipeline, chain)
