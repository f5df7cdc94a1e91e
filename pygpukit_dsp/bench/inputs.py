"""What every bench starts from: the machine's description, a pipeline's input blocks (from its
source, or seeded noise), its source's format, and the first block's cost from engine open."""

from __future__ import annotations

import platform
import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from ..io.base import StreamFormat

if TYPE_CHECKING:
    from ..pipeline import Pipeline, SpecChain


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        import os

        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        import os

        cores = os.cpu_count() or 0
    text = f"{platform.system()} {cpu}, {cores} cores, Python {sys.version.split()[0]}"
    try:
        from ..capabilities import capabilities

        gpus = [g for g in capabilities().get("gpus", []) if g.get("usable")]
        if gpus:
            text += f", GPU {gpus[0]['name']}"
    except Exception:  # the description is informative only; never fail a benchmark for it
        pass
    return text


def input_blocks(pipeline: "Pipeline", chain: "SpecChain", n: int) -> list[np.ndarray]:
    """``n`` consecutive full blocks from the pipeline's source (or seeded noise without one)."""
    spec = chain.input
    blocks: list[np.ndarray] = []
    if pipeline.source is not None:
        src = pipeline.source
        src.open(StreamFormat(spec.sample_rate, spec.channels, spec.dtype))
        try:
            while len(blocks) < n:
                parts, have = [], 0
                while have < spec.block_size:
                    chunk = np.asarray(src.read(spec.block_size - have))
                    if chunk.shape[1] == 0:
                        break
                    parts.append(chunk)
                    have += chunk.shape[1]
                if have < spec.block_size:
                    break
                blocks.append(np.ascontiguousarray(np.concatenate(parts, axis=1), spec.np_dtype))
        finally:
            src.close()
    if not blocks:
        rng = np.random.default_rng(1)
        shape = spec.block_shape
        for _ in range(n):
            x = rng.standard_normal(shape)
            if spec.is_complex:
                x = x + 1j * rng.standard_normal(shape)
            blocks.append(np.ascontiguousarray(x, spec.np_dtype))
    return blocks


def first_block_times(pipeline: "Pipeline", chain: "SpecChain", block: np.ndarray) -> dict[str, float | str]:
    """Milliseconds from opening the cuda engine to the first block's output, cold and warm, in
    this process (its CUDA context and libraries already loaded; benchmarks/first_block.py measures
    fresh processes).

    cold: an empty kernel disk cache (a fresh GK_CACHE_DIR, in-memory cache cleared): the kernels
    compiled into the wheel are loaded (NVRTC compiles only what the wheel does not ship, or
    everything with GK_SHIPPED_KERNELS=0). warm: the same again on the disk cache the cold open
    left. Both include the engine's buffers, warm-up block and graph capture; cuFFT plans and
    cuBLAS handles are made once per shape, so the warm open reuses the cold one's.
    ``kernels_cold``: "<n> shipped, <m> NVRTC" for the cold open; ``kernels_<cold|warm>_<source>``:
    how many kernel modules each open took from each source (shipped: an image in the wheel;
    nvrtc: compiled; disk: the kernel disk cache; memory: already loaded in the same open).
    """
    import os
    import tempfile

    from .. import _native
    from ..backends import open_backend

    out: dict[str, float | str] = {}
    old = os.environ.get("GK_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="gk-cold-cache-") as cache:
        os.environ["GK_CACHE_DIR"] = cache
        try:
            for label in ("cold", "warm"):
                _native.clear_jit_memory_cache()
                before = dict(_native.jit_stats())
                t0 = time.perf_counter()
                engine = open_backend(pipeline, chain, "cuda")
                try:
                    engine.process(block)
                    out[f"first_block_{label}_ms"] = (time.perf_counter() - t0) * 1e3
                finally:
                    engine.close()
                after = dict(_native.jit_stats())
                for source, key in (("shipped", "shipped_hits"), ("nvrtc", "compiles"), ("disk", "disk_hits"),
                                    ("memory", "memory_hits")):
                    out[f"kernels_{label}_{source}"] = after.get(key, 0) - before.get(key, 0)
                if label == "cold":
                    out["kernels_cold"] = (f"{after.get('shipped_hits', 0) - before.get('shipped_hits', 0)} shipped, "
                                           f"{after['compiles'] - before['compiles']} NVRTC")
        finally:
            if old is None:
                os.environ.pop("GK_CACHE_DIR", None)
            else:
                os.environ["GK_CACHE_DIR"] = old
    return out


def first_block_note(times: dict) -> str:
    kernels = f"; kernels {times['kernels_cold']}" if "kernels_cold" in times else ""
    return (f"first block from engine open: cold (empty kernel cache) {times['first_block_cold_ms']:.0f} ms, "
            f"warm (disk cache) {times['first_block_warm_ms']:.0f} ms{kernels}")


def source_format(pipeline: "Pipeline") -> StreamFormat:
    if pipeline.source is None:
        return StreamFormat()
    fmt = pipeline.source.open(StreamFormat(pipeline.sample_rate, pipeline.channels, pipeline.dtype))
    pipeline.source.close()
    return fmt
