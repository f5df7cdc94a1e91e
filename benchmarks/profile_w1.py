"""Where W1's per-block latency goes on the GPU engine (run on the GPU machine).

    python benchmarks/profile_w1.py [--rounds 15] [--per-round 200]

Engine configurations are measured interleaved (round after round) so that machine drift
falls on all of them alike. Prints p50/p99 (us) of engine.process and of the native
submit+wait round trip (input already in the pinned slot) for each configuration, the GPU time
of W1's ops (time_resident), and a raw PyTorch pinned H2D+D2H round trip of the same bytes.
W1 lowers to one fused fir_mix op; the "unfused" configuration builds its engine with
GK_DISABLE_FUSIONS=1 (fir and mix as two ops). "inline submit" runs process() on the calling
thread (the worker is only used by submit+wait); the other latency-mode rows turn it off.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from pygpukit_dsp import Pipeline
from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.backends.cuda_engine import CudaEngine

HERE = Path(__file__).parent
CONFIGS = {
    "latency mode, graph": {"single_stream": True, "inline_submit": False},
    "latency mode, eager": {"single_stream": True, "use_graph": False, "inline_submit": False},
    "latency mode, eager, inline submit": {"single_stream": True, "use_graph": False, "inline_submit": True},
    "latency mode, eager, inline submit, unfused": {"single_stream": True, "use_graph": False,
                                                    "inline_submit": True, "disable_fusions": True},
    "3 streams, graph": {"single_stream": False},
    "3 streams, eager": {"single_stream": False, "use_graph": False},
}


def make_engine(w1: Pipeline, disable_fusions: bool = False, **kw) -> CudaEngine:
    if not disable_fusions:
        return CudaEngine(w1, w1.specs(), BackendChoice("cuda", "profile"), **kw)
    before = os.environ.get("GK_DISABLE_FUSIONS")
    os.environ["GK_DISABLE_FUSIONS"] = "1"  # read by lower_pipeline when the engine is built
    try:
        return CudaEngine(w1, w1.specs(), BackendChoice("cuda", "profile"), **kw)
    finally:
        if before is None:
            del os.environ["GK_DISABLE_FUSIONS"]
        else:
            os.environ["GK_DISABLE_FUSIONS"] = before


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--per-round", type=int, default=200)
    args = ap.parse_args()
    w1 = Pipeline.from_yaml(HERE / "w1.yaml")
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    engines = {k: make_engine(w1, **kw) for k, kw in CONFIGS.items()}
    samples: dict[str, list[int]] = {}
    fns = {}
    for k, eng in engines.items():
        raw = eng._engine
        eng._in[1][...] = x

        def native(raw=raw):
            raw.submit(1, 256, False)
            raw.wait(1)

        def process(eng=eng):
            eng._next = 0
            eng.process(x)
        def numpy_copy(eng=eng, raw=raw):
            eng._in[1][...] = x  # ordinary (cached) stores, then the same hand-over
            raw.submit(1, 256, False)
            raw.wait(1)
        fns[f"{k}: process"] = process
        fns[f"{k}: native submit+wait"] = native
        fns[f"{k}: numpy copy+submit+wait"] = numpy_copy
    try:
        import torch

        hin = torch.empty((64, 256), dtype=torch.float32, pin_memory=True)
        hout = torch.empty((16, 256), dtype=torch.float32, pin_memory=True)
        din = torch.empty((64, 256), dtype=torch.float32, device="cuda")
        stream = torch.cuda.current_stream()

        def rt():
            din.copy_(hin, non_blocking=True)
            hout.copy_(din[:16], non_blocking=True)
            stream.synchronize()
        fns["torch pinned H2D 64 KiB + D2H 16 KiB + sync"] = rt
    except Exception as exc:  # informative only
        print("torch round trip unavailable:", exc)
    perf = time.perf_counter_ns
    for r in range(args.rounds):
        for name, fn in fns.items():
            for _ in range(20):
                fn()
            out = samples.setdefault(name, [])
            for _ in range(args.per_round):
                t0 = perf()
                fn()
                out.append(perf() - t0)
    eng = engines["latency mode, graph"]
    gpu = np.asarray(eng.time_resident(2000)) * 1e6
    for e in engines.values():
        e.close()
    width = max(map(len, samples))
    for name, ns in samples.items():
        us = np.asarray(ns) / 1e3
        print(f"{name:<{width}}  p50 {np.percentile(us, 50):7.1f}  p99 {np.percentile(us, 99):7.1f}")
    print(f"{'W1 ops GPU time (time_resident, graph)':<{width}}  p50 {np.percentile(gpu, 50):7.1f}  "
          f"p99 {np.percentile(gpu, 99):7.1f}")


if __name__ == "__main__":
    main()
