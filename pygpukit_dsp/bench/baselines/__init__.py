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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    from ...pipeline import Pipeline, SpecChain
    from ...signal import SignalSpec


class BaselineSkipped(Exception):
    """This baseline cannot run here (library missing, no GPU, or an unsupported stage)."""


@dataclass
class Op:
    """One stage, resolved to plain numbers for a baseline to implement."""

    kind: str
    spec_in: "SignalSpec"
    spec_out: "SignalSpec"
    params: dict[str, Any] = field(default_factory=dict)


def resolve_ops(pipeline: "Pipeline", chain: "SpecChain", supported: set[str], who: str) -> list[Op]:
    ops: list[Op] = []
    for st, s_in, s_out in zip(pipeline.stages, chain.specs[:-1], chain.specs[1:]):
        if st.type not in supported:
            raise BaselineSkipped(f"{who} baseline has no '{st.type}' stage")
        p: dict[str, Any] = {}
        if st.type == "fir":
            p["taps"] = np.asarray(st.taps_for(s_in))
        elif st.type == "mix":
            p["matrix"] = np.asarray(st.matrix)
        elif st.type == "gain":
            p["factor"] = st.params.factor
        elif st.type == "stft":
            p.update(window=np.asarray(st.window()), hop=st.hop, nfft=st.params.nfft)
        elif st.type in ("fft", "rfft"):
            p["n"] = st.frame_length(s_in)
        elif st.type == "db":
            p.update(scale=st.params.scale, ref=st.params.ref,
                     floor=10.0 ** (st.params.floor_db / st.params.scale))
        elif st.type == "average":
            p["frames"] = st.params.frames
        ops.append(Op(st.type, s_in, s_out, p))
    return ops


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
