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
