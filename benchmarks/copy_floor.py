"""Host-to-device copy floor: what PCIe and host memory give one GPU alone and every GPU at once.

W2 streamed moves every sample host -> GPU (128 MiB per block, complex64); its aggregate over
several GPUs can exceed what the host feeds them together only if the copies themselves do.
This measures the bare copies (CuPy, pinned host memory, one thread and stream per GPU, the
same 128 MiB size), alone and together, so the multi-GPU W2 ratio can be read against it:
    python benchmarks/copy_floor.py [--mib 128] [--copies 60]
"""

from __future__ import annotations

import argparse
import threading
import time

import cupy as cp
import numpy as np


def _copies(gpu: int, nbytes: int, copies: int, barrier: threading.Barrier | None, out: dict) -> None:
    with cp.cuda.Device(gpu):
        host = cp.cuda.alloc_pinned_memory(nbytes)
        src = np.frombuffer(host, np.uint8, nbytes)
        src[:] = 1
        dev = cp.empty(nbytes, cp.uint8)
        stream = cp.cuda.Stream(non_blocking=True)
        for _ in range(5):  # warm-up
            dev.set(src, stream=stream)
        stream.synchronize()
        if barrier is not None:
            barrier.wait()
        t0 = time.perf_counter()
        for _ in range(copies):
            dev.set(src, stream=stream)
        stream.synchronize()
        out[gpu] = (t0, time.perf_counter())


def measure(gpus: list[int], nbytes: int, copies: int) -> dict[int, tuple[float, float]]:
    out: dict[int, tuple[float, float]] = {}
    barrier = threading.Barrier(len(gpus)) if len(gpus) > 1 else None
    threads = [threading.Thread(target=_copies, args=(g, nbytes, copies, barrier, out)) for g in gpus]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--copies", type=int, default=60)
    args = ap.parse_args()
    n = cp.cuda.runtime.getDeviceCount()
    nbytes = args.mib << 20
    gbps = lambda t: nbytes * args.copies / (t[1] - t[0]) / 1e9  # noqa: E731
    alone = {g: gbps(measure([g], nbytes, args.copies)[g]) for g in range(n)}
    together = measure(list(range(n)), nbytes, args.copies)
    print(f"# host -> GPU copy floor: {n} GPU(s), {args.mib} MiB pinned copies x {args.copies}\n")
    print("| GPU | alone GB/s | together GB/s | together / alone |\n|---|---|---|---|")
    for g in range(n):
        tg = gbps(together[g])
        print(f"| {g} | {alone[g]:.1f} | {tg:.1f} | {tg / alone[g]:.3f} |")
    t0 = min(t[0] for t in together.values())
    t1 = max(t[1] for t in together.values())
    agg = n * nbytes * args.copies / (t1 - t0) / 1e9
    mean_alone = sum(alone.values()) / n
    print(f"\naggregate {agg:.1f} GB/s over the common window = **{agg / mean_alone:.2f}x** one GPU alone "
          f"({mean_alone:.1f} GB/s); in complex64 samples: {agg / 8:.2f} Gsamples/s vs {mean_alone / 8:.2f}")


if __name__ == "__main__":
    main()
