"""GPU arrays in and out: process(cupy_array) per block against the GPU time of the same blocks.

CudaEngine.process of a CuPy block makes no host copy and no host wait (device-to-device into
the slot, the slot's graph, device-to-device out, ordered on the caller's stream). Over thousands
of blocks after a warm-up this prints:

* call p50 / p99: wall time of each process() call (perf_counter_ns around it);
* GPU per block: CUDA events on the caller's stream around the same loop, divided by the blocks
  (the device time the blocks occupy in stream order, their D2D copies included);
* resident compute: the engine's own timing of one block's graph with no copies
  (EngineInstrument.time_resident);
* the ratio call p50 / GPU per block (the target: <= 1.1), and the engine's H2D/D2H counters over
  the loop (they must not move).

    python benchmarks/device_arrays.py [--pipeline fir|sos|stft] [--channels 16] [--block 131072]
        [--blocks 5000] [--warmup 500] [--reuse-out] [--latency] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import cupy as cp
import numpy as np

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.backends.cuda_engine import CudaEngine

RATE = 48000.0


def pipeline(name: str, channels: int, block: int) -> Pipeline:
    chain = {
        "fir": [stages.Fir(taps=np.hanning(127) / 63.5)],
        "sos": [stages.Sos(design={"kind": "butter", "order": 8, "cutoff_hz": 3000.0})],
        "stft": [stages.Stft(nfft=1024, hop=512), stages.Power()],
    }[name]
    return Pipeline(chain, sample_rate=RATE, channels=channels, block_size=block, backend="cuda")


def measure(args: argparse.Namespace) -> dict:
    p = pipeline(args.pipeline, args.channels, args.block)
    kw = {"single_stream": True, "mapped_io": False} if args.latency else {}
    eng = CudaEngine(p, p.specs(), BackendChoice("cuda", "benchmark"), **kw)
    try:
        x = cp.asarray(np.random.default_rng(0).standard_normal((args.channels, args.block)).astype(np.float32))
        spec = eng.chain.output
        out = cp.empty(spec.block_shape, spec.np_dtype) if args.reuse_out else None
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            for _ in range(args.warmup):
                eng.process(x, out=out)
            stream.synchronize()
            before = eng.counters()
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            calls = np.empty(args.blocks, np.int64)
            clock = time.perf_counter_ns
            t0 = clock()
            start.record(stream)
            for k in range(args.blocks):
                c0 = clock()
                eng.process(x, out=out)
                calls[k] = clock() - c0
            stop.record(stream)
            stop.synchronize()
            wall_ns = clock() - t0
        after = eng.counters()
        gpu_ns = cp.cuda.get_elapsed_time(start, stop) * 1e6 / args.blocks
        resident_ns = float(np.median(eng.instrument().time_resident(200))) * 1e9  # seconds per block
    finally:
        eng.close()
    p50, p99 = (float(v) for v in np.percentile(calls, [50, 99]))
    return {
        "pipeline": args.pipeline, "channels": args.channels, "block": args.block, "blocks": args.blocks,
        "mode": "latency" if args.latency else "throughput", "reuse_out": bool(args.reuse_out),
        "call_p50_us": p50 / 1e3, "call_p99_us": p99 / 1e3, "wall_per_block_us": wall_ns / args.blocks / 1e3,
        "gpu_per_block_us": gpu_ns / 1e3, "resident_compute_us": resident_ns / 1e3,
        "ratio_p50_to_gpu": p50 / gpu_ns if gpu_ns > 0 else None,
        "h2d_copies": after["h2d_copies"] - before["h2d_copies"],
        "d2h_copies": after["d2h_copies"] - before["d2h_copies"],
        "device_blocks": after["device_blocks"] - before["device_blocks"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipeline", choices=("fir", "sos", "stft"), default="fir")
    ap.add_argument("--channels", type=int, default=16)
    ap.add_argument("--block", type=int, default=131072)
    ap.add_argument("--blocks", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--reuse-out", action="store_true", help="one output array for every block (out=)")
    ap.add_argument("--latency", action="store_true", help="latency mode (single stream)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = measure(args)
    if args.json:
        print(json.dumps(r))
        return
    print(f"# process(cupy) per block: {r['pipeline']}, {r['channels']} x {r['block']} float32, {r['blocks']} "
          f"blocks, {r['mode']} mode{', out= reused' if r['reuse_out'] else ''}")
    print(f"call p50 {r['call_p50_us']:.1f} us, p99 {r['call_p99_us']:.1f} us; wall per block "
          f"{r['wall_per_block_us']:.1f} us")
    print(f"GPU per block (events on the caller's stream) {r['gpu_per_block_us']:.1f} us; resident compute "
          f"{r['resident_compute_us']:.1f} us")
    print(f"ratio call p50 / GPU per block: {r['ratio_p50_to_gpu']:.3f} (target <= 1.1)")
    print(f"engine copies over the loop: h2d {r['h2d_copies']}, d2h {r['d2h_copies']}; device blocks "
          f"{r['device_blocks']}")


if __name__ == "__main__":
    main()
