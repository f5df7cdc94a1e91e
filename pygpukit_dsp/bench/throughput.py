"""Throughput modes of ``gk-stream bench`` (W2): GPU-resident and streamed from pinned memory.

* ``resident``: the input block is already in device memory; each block's compute is timed
  with CUDA events (transfers excluded). Figure: samples/s from the mean per-block time.
* ``streamed``: blocks come from pinned host memory, every byte crossing PCIe, several blocks
  in flight. Figure: samples/s over the whole run, and its fraction of the pinned H2D
  bandwidth measured in the same run divided by the bytes per sample (the PCIe bound).

Both need the cuda backend: they time the GPU engine's own paths, done in C++.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UnsupportedError

if TYPE_CHECKING:
    from ..pipeline import Pipeline

from .inputs import first_block_note, first_block_times, input_blocks, machine_description, source_format
from .report import BenchReport, ImplResult, percentiles

STREAMED_SLOTS = 2  # the engine's slots: block n+1 uploads while block n computes


def run_throughput_bench(pipeline: "Pipeline", *, backend: str | None, blocks: int, warmup: int,
                         compare: list[str], mode: str, progress: bool) -> BenchReport:
    from ..backends import choose_backend, open_backend
    from .baselines import BaselineSkipped, build_baseline
    from .baselines.ops import UNSUPPORTED_MODE

    chain = pipeline.specs(source_format(pipeline))
    choice = choose_backend(pipeline, chain, backend or pipeline.backend)
    if choice.name != "cuda":
        raise UnsupportedError(pipeline.name, choice.name,
                               f"bench mode '{mode}' times the GPU engine; use --backend cuda on a GPU "
                               f"machine, or --mode latency ({choice.reason})")
    block = input_blocks(pipeline, chain, 1)[0]
    spb = int(np.prod(chain.input.block_shape))
    bytes_per_sample = chain.input.np_dtype.itemsize
    results: list[ImplResult] = []
    extra_lines: list[str] = []

    engine = open_backend(pipeline, chain, "cuda")
    try:
        proj = ImplResult(name="pygpukit-dsp (cuda)", kind="project")
        t0 = time.perf_counter()
        engine.process(block)                       # first block through the whole path
        proj.first_block_us = (time.perf_counter() - t0) * 1e6
        inst = engine.instrument()  # the timing loops (the engine's benchmark entry points)
        if mode == "resident":
            inst.time_resident(max(1, warmup))
            per_block = np.asarray(inst.time_resident(blocks), dtype=np.float64)
            proj.latency_us = percentiles(per_block * 1e6)
            proj.samples_per_s = spb / per_block.mean()
        else:
            bw = inst.measure_h2d_bandwidth(chain.input.block_nbytes, 10)
            inst.time_streamed(max(1, min(warmup, 4)), STREAMED_SLOTS)
            secs, _ = inst.time_streamed(blocks, STREAMED_SLOTS)
            proj.samples_per_s = blocks * spb / secs
            bound = bw / bytes_per_sample
            proj.latency_us = {"mean": secs / blocks * 1e6}
            extra_lines.append(f"pinned H2D bandwidth measured in this run: {bw / 1e9:.2f} GB/s -> PCIe bound "
                               f"{bound / 1e9:.2f} Gsamples/s; project reaches {proj.samples_per_s / bound:.3f} "
                               f"of it")
        results.append(proj)
    finally:
        engine.close()

    for name in compare:
        r = ImplResult(name=name, kind="baseline")
        try:
            impl = build_baseline(name, pipeline, chain)
        except BaselineSkipped as exc:
            r.status, r.reason, r.reason_code = "skipped", str(exc), exc.code
            results.append(r)
            continue
        try:
            if mode == "resident":
                if not hasattr(impl, "time_resident"):
                    raise BaselineSkipped(f"{name} has no GPU-resident mode", UNSUPPORTED_MODE)
                impl.time_resident(block, max(1, min(warmup, 20)))
                per_block = np.asarray(impl.time_resident(block, blocks), dtype=np.float64)
                r.latency_us = percentiles(per_block * 1e6)
                r.samples_per_s = spb / per_block.mean()
            else:
                if not hasattr(impl, "time_streamed"):
                    raise BaselineSkipped(f"{name} has no streamed mode", UNSUPPORTED_MODE)
                impl.time_streamed(block, 2)
                secs = impl.time_streamed(block, blocks)
                r.latency_us = {"mean": secs / blocks * 1e6}
                r.samples_per_s = blocks * spb / secs
        except BaselineSkipped as exc:
            r.status, r.reason, r.reason_code = "skipped", str(exc), exc.code
        finally:
            impl.close()
        results.append(r)

    first = first_block_times(pipeline, chain, block)
    extra_lines.append(first_block_note(first))
    report = BenchReport(
        pipeline=pipeline.name, mode=mode, backend=choice.name, backend_reason=choice.reason,
        input_spec=chain.input.describe(), output_spec=chain.output.describe(), blocks=blocks,
        warmup=warmup, samples_per_block=spb, machine=machine_description(), results=results,
        notes=extra_lines, first_block=first)
    return report
