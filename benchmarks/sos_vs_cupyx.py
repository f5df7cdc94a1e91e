"""sos on the cuda backend against cupyx.scipy.signal.sosfilt, GPU-resident.

The filter: an 8-section elliptic band-pass (scipy.signal.ellip(8, 0.5, 60, [0.1, 0.25],
btype="bandpass", output="sos")). For each shape (channels x block samples, float32):

* ours: a one-stage pipeline on the cuda backend; the input block already on the GPU, each block
  timed with CUDA events (EngineInstrument.time_resident: the op's launches, or its CUDA graph);
* cupyx: ``cupyx.scipy.signal.sosfilt(sos, x, axis=-1)`` on a device array (sos float64 as
  designed, so cupyx computes in float64 as we do), CUDA events around each call. Without zi:
  each call starts from a zero state, less work than our streaming op (which also reads and
  writes its state), and CuPy's zi layout differs between versions (2 or 4 values per section).

p50 / p99 over ``--blocks`` blocks after ``--warmup`` blocks; the ratio is cupyx p50 / ours p50
(> 1: ours is faster). The first block of each side is checked against scipy.signal.sosfilt.
    python benchmarks/sos_vs_cupyx.py [--blocks 1000] [--warmup 100] [--json out.json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import scipy.signal as ss

SHAPES = [(16, 65536), (1, 1 << 20)]
SOS = ss.ellip(8, 0.5, 60, [0.1, 0.25], btype="bandpass", output="sos")


def percentiles(seconds: list[float]) -> dict[str, float]:
    us = np.asarray(seconds) * 1e6
    return {"p50_us": float(np.percentile(us, 50)), "p99_us": float(np.percentile(us, 99))}


def max_err_over_rms(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(y - ref)) / np.sqrt(np.mean(ref ** 2)))


def ours(x: np.ndarray, blocks: int, warmup: int) -> tuple[dict[str, float], str]:
    from pygpukit_dsp import Pipeline
    from pygpukit_dsp.backends import open_backend
    from pygpukit_dsp.backends.cuda_ops.sos_scan import takes_scan
    from pygpukit_dsp.stages.sos import Sos

    channels, n = x.shape
    p = Pipeline([Sos(sos=SOS)], sample_rate=48000, channels=channels, block_size=n, dtype="float32")
    engine = open_backend(p, p.specs(), "cuda")
    try:
        y = engine.process(x)  # the first block through the whole path (plans, graph), from zero state
        res = {"max_err_over_rms": max_err_over_rms(y.astype(np.float64), ss.sosfilt(SOS, x.astype(np.float64)))}
        inst = engine.instrument()
        inst.time_resident(warmup)
        res.update(percentiles(inst.time_resident(blocks)))
    finally:
        engine.close()
    return res, "scan" if takes_scan(SOS.shape[0], channels, n) else "one thread per lane"


def cupyx(x: np.ndarray, blocks: int, warmup: int) -> dict[str, float]:
    import cupy as cp
    import cupyx.scipy.signal as cs

    xd, sos = cp.asarray(x), cp.asarray(SOS)
    y = cs.sosfilt(sos, xd, axis=-1)
    res = {"max_err_over_rms": max_err_over_rms(cp.asnumpy(y), ss.sosfilt(SOS, x.astype(np.float64)))}
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for i in range(warmup + blocks):
        start.record()
        cs.sosfilt(sos, xd, axis=-1)
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    res.update(percentiles(times))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    rows = []
    for channels, n in SHAPES:
        x = np.random.default_rng(channels).standard_normal((channels, n)).astype(np.float32)
        mine, form = ours(x, args.blocks, args.warmup)
        theirs = cupyx(x, args.blocks, args.warmup)
        ratio = theirs["p50_us"] / mine["p50_us"]
        rows.append({"channels": channels, "block": n, "sections": int(SOS.shape[0]), "form": form,
                     "ours": mine, "cupyx": theirs, "ratio_cupyx_over_ours_p50": ratio})
        print(f"{channels:3d} ch x {n:8d}  ours ({form}) p50 {mine['p50_us']:9.1f} us  p99 {mine['p99_us']:9.1f} us"
              f" | cupyx sosfilt p50 {theirs['p50_us']:9.1f} us  p99 {theirs['p99_us']:9.1f} us"
              f" | ratio {ratio:5.2f}x | max err/rms ours {mine['max_err_over_rms']:.1e}"
              f" cupyx {theirs['max_err_over_rms']:.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
