"""Where W1's per-block latency goes on the GPU engine (run on the GPU machine).

    python benchmarks/profile_w1.py [--blocks 3000]

Prints p50/p99 (us) of: the full engine.process path; the native submit+wait round trip
alone (input already in the pinned slot); the Python copy into the slot; the GPU time of the
slot's graph (time_resident); the same with eager launches; a one-op pipeline (gain) with the
same shapes as the engine's floor; and a raw PyTorch pinned H2D+D2H round trip of the same
bytes for the PCIe floor.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.backends.cuda_engine import CudaEngine

HERE = Path(__file__).parent


def pct(ns) -> str:
    us = np.asarray(ns, dtype=np.float64) / 1e3
    return f"p50 {np.percentile(us, 50):7.1f}  p99 {np.percentile(us, 99):7.1f}"


def timed(fn, n: int, warm: int = 300) -> list[int]:
    for _ in range(warm):
        fn()
    out = []
    perf = time.perf_counter_ns
    for _ in range(n):
        t0 = perf()
        fn()
        out.append(perf() - t0)
    return out


def engine_for(p: Pipeline, **kw) -> CudaEngine:
    return CudaEngine(p, p.specs(), BackendChoice("cuda", "profile"), **kw)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=3000)
    args = ap.parse_args()
    n = args.blocks
    w1 = Pipeline.from_yaml(HERE / "w1.yaml")
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    rows = []

    for label, kw in [("latency mode, graph", {"single_stream": True}),
                      ("latency mode, eager", {"single_stream": True, "use_graph": False}),
                      ("3 streams, graph", {"single_stream": False}),
                      ("3 streams, eager", {"single_stream": False, "use_graph": False})]:
        eng = engine_for(w1, **kw)
        rows.append((f"W1 engine.process ({label})", pct(timed(lambda: eng.process(x), n))))
        raw = eng._engine
        eng._in[0][...] = x

        def native():
            raw.submit(0, 256, False)
            raw.wait(0)
        rows.append((f"W1 native submit+wait ({label})", pct(timed(native, n))))
        if label == "latency mode, graph":
            dst = eng._in[1]

            def fill():
                dst[:, :256] = x
            rows.append(("python copy into pinned slot (64 KiB)", pct(timed(fill, n))))
            res = np.asarray(eng.time_resident(n)) * 1e9
            rows.append(("W1 GPU time of the slot graph (time_resident)", pct(res)))
            print("counters", eng.counters())
        eng.close()

    null = Pipeline([stages.Gain(linear=1.0), stages.Mix(matrix=np.eye(16, 64, dtype=np.float32))],
                    sample_rate=48000, channels=64, block_size=256, backend="cuda")
    eng = engine_for(null, single_stream=True)
    raw = eng._engine

    def native_null():
        raw.submit(0, 256, False)
        raw.wait(0)
    rows.append(("gain+mix engine: native submit+wait", pct(timed(native_null, n))))
    rows.append(("gain+mix GPU time (time_resident)", pct(np.asarray(eng.time_resident(n)) * 1e9)))
    eng.close()

    try:
        import torch

        hin = torch.empty((64, 256), dtype=torch.float32, pin_memory=True)
        hout = torch.empty((16, 256), dtype=torch.float32, pin_memory=True)
        din = torch.empty((64, 256), dtype=torch.float32, device="cuda")
        dout = din[:16]
        s = torch.cuda.current_stream()

        def rt():
            din.copy_(hin, non_blocking=True)
            hout.copy_(dout, non_blocking=True)
            s.synchronize()
        rows.append(("torch pinned H2D 64 KiB + D2H 16 KiB + sync", pct(timed(rt, n))))
    except Exception as exc:  # informative only
        rows.append(("torch round trip", f"unavailable: {exc}"))

    width = max(len(r[0]) for r in rows)
    for name, val in rows:
        print(f"{name:<{width}}  {val}")


if __name__ == "__main__":
    main()
