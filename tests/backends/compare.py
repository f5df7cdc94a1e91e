"""Helpers shared by the CUDA op tests: seeded signals and cuda-vs-cpu runs of one pipeline."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.stages.base import Stage


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / ||b|| (0-safe)."""
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def signal(channels: int, n: int, complex_: bool, seed: int) -> np.ndarray:
    """Seeded standard-normal float32 (or complex64) samples of shape (channels, n)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((channels, n))
    if complex_:
        return (x + 1j * rng.standard_normal((channels, n))).astype(np.complex64)
    return x.astype(np.float32)


def both(stages: Stage | Sequence[Stage], x: np.ndarray, block: int,
         rate: float = 48000.0) -> tuple[np.ndarray, np.ndarray]:
    """(cuda output, cpu output) of the same pipeline streamed block by block over ``x``."""
    chain = [stages] if isinstance(stages, Stage) else list(stages)
    p = Pipeline(chain, sample_rate=rate, block_size=block)
    cpu = p.process(x, backend="cpu")
    gpu = p.process(x, backend="cuda")
    assert gpu.shape == cpu.shape and gpu.dtype == cpu.dtype
    return gpu, cpu


def run_both(stage_list: Sequence[Stage], spec_in, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cuda, cpu) outputs of the engines themselves, fed blocks of ``spec_in`` (partial final block).

    Unlike :func:`both`, the input spec is given whole (frames-domain inputs, any dtype), and no
    lowering-level fusion is bypassed: the engines are built from the stages directly.
    """
    from pygpukit_dsp.backends import BackendChoice
    from pygpukit_dsp.backends.cpu import CpuEngine
    from pygpukit_dsp.backends.cuda_engine import CudaEngine
    from pygpukit_dsp.pipeline import SpecChain

    specs = [spec_in]
    for st in stage_list:
        specs.append(st.output_spec(specs[-1]))
    chain, pipeline = SpecChain(tuple(specs)), Pipeline(list(stage_list))
    out = {}
    for name, cls in (("cuda", CudaEngine), ("cpu", CpuEngine)):
        eng = cls(pipeline, chain, BackendChoice(name, "test"))
        try:
            n, bs = x.shape[1], spec_in.block_size
            out[name] = np.concatenate([eng.process(x[:, s:s + bs], final=s + bs >= n)
                                        for s in range(0, n, bs)], axis=1)
        finally:
            eng.close()
    return out["cuda"], out["cpu"]
