"""The radar and correlator stages on the GPU against their counterparts: correlate against
cupyx (``cupyx.signal.pulse_compression`` and ``cupyx.scipy.signal.fftconvolve``), cfar,
synthesizer and xcorr against NumPy (the CPU stages). For xcorr also the achieved FP32 TFLOP/s
and the share of the card's FP32 peak.

    python benchmarks/stages_radar.py            # on a machine with a GPU, CuPy for the cupyx rows

Ours is GPU-resident: the GPU time of a block's work on the engine's compute stream
(``CudaEngine.set_gpu_timing``: CUDA events around the block's ops), median over blocks. cupyx:
CUDA events around the call on device arrays, median. NumPy: wall time of the CPU stage's
``process`` on one block, median. A ratio above 1 means ours is faster.

xcorr flops: 8 real flops per complex multiply-add, counting the useful ones, C(C+1)/2 pairs
x F frames x bins per block (cublas's gemm computes all C*C entries: "gemm" shows that count
too), for both methods (``kernel``: the tiled FP32 kernel, ``cublas``).
The FP32 peak is SM count x FP32 cores per SM x 2 x clock, from
``cupy.cuda.runtime.getDeviceProperties`` (128 FP32 cores per SM on compute capability 8.6,
8.9, 9.0 and 10.x/12.x; 64 on 8.0 and 7.x).
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.backends.cuda_engine import CudaEngine
from pygpukit_dsp.backends.cuda_ops.xcorr import KERNEL_MAX_INPUTS
from pygpukit_dsp.pipeline import Pipeline, SpecChain
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages import Cfar, Correlate, Synthesizer, Xcorr

REPEATS = 20


def ours_gpu_s(stage, spec: SignalSpec, x: np.ndarray) -> float:
    """Median GPU time (s) of one full block of ``x`` through ``stage`` on the cuda engine."""
    chain = SpecChain((spec, stage.output_spec(spec)))
    eng = CudaEngine(Pipeline([stage]), chain, BackendChoice("cuda", "benchmark"))
    try:
        eng.set_gpu_timing(True)
        times = []
        for _ in range(REPEATS + 2):
            eng.process(x)
            times.append(eng.last_gpu_ns * 1e-9)
        return statistics.median(times[2:])
    finally:
        eng.close()


def numpy_s(stage, spec: SignalSpec, x: np.ndarray, repeats: int = 5) -> float:
    proc = stage.cpu(spec)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        proc.process(x)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def cupy_s(fn, repeats: int = REPEATS) -> float:
    import cupy as cp

    fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) * 1e-3)
    return statistics.median(times)


def fp32_peak_flops() -> tuple[float, str]:
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    major, minor = props["major"], props["minor"]
    cores = 64 if (major, minor) in ((7, 0), (7, 2), (7, 5), (8, 0)) or major < 7 else 128
    sms, clock_hz = props["multiProcessorCount"], props["clockRate"] * 1e3
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    peak = sms * cores * 2 * clock_hz
    return peak, (f"{name}: {sms} SMs x {cores} FP32 cores x 2 x {clock_hz / 1e9:.3f} GHz = "
                  f"{peak / 1e12:.1f} TFLOP/s")


def row(name: str, ours: float, other: float | None, other_name: str) -> None:
    if other is None:
        print(f"{name:<44} ours {ours * 1e6:10.1f} us   {other_name}: not available")
    else:
        print(f"{name:<44} ours {ours * 1e6:10.1f} us   {other_name} {other * 1e6:10.1f} us   "
              f"ratio {other / ours:7.2f}")


def bench_correlate(rng) -> None:
    C, B, L = 8, 65536, 1024
    r = np.exp(1j * np.pi * 0.8 * np.arange(L) ** 2 / L).astype(np.complex64)
    x = (rng.standard_normal((C, B)) + 1j * rng.standard_normal((C, B))).astype(np.complex64)
    spec = SignalSpec(1e7, C, B, dtype="complex64")
    ours = ours_gpu_s(Correlate(reference=r), spec, x)
    name = f"correlate {C} ch x {B}, L={L} complex"
    try:
        import cupy as cp
        import cupyx.scipy.signal as cxs

        xd, rd = cp.asarray(x), cp.asarray(r)
        taps = cp.conj(rd[::-1])[None, :]
        row(name, ours, cupy_s(lambda: cxs.fftconvolve(xd, taps, mode="full", axes=1)[:, :B]),
            "cupyx.scipy.signal.fftconvolve")
        try:
            import cupyx.signal as cxsig

            row(name, ours, cupy_s(lambda: cxsig.pulse_compression(xd, rd, normalize=False)),
                "cupyx.signal.pulse_compression")
        except (ImportError, AttributeError) as exc:
            print(f"{name:<44} cupyx.signal.pulse_compression: not available ({exc})")
    except ImportError as exc:
        row(name, ours, None, f"cupyx ({exc})")


def bench_cfar(rng) -> None:
    C, B = 8, 262144
    x = (rng.standard_normal((C, B)) + 1j * rng.standard_normal((C, B))).astype(np.complex64)
    spec = SignalSpec(1e7, C, B, dtype="complex64")
    st = Cfar(guard=4, train=32, pfa=1e-6)
    row(f"cfar time {C} ch x {B}, guard 4 train 32", ours_gpu_s(st, spec, x), numpy_s(st, spec, x), "numpy")
    X = (rng.standard_normal((4, 256, 4096)) + 1j * rng.standard_normal((4, 256, 4096))).astype(np.complex64)
    fspec = SignalSpec(1e3, 4, 256, dtype="complex64", domain="frames", bins=4096)
    row("cfar bins 4 ch x 256 frames x 4096", ours_gpu_s(st, fspec, X), numpy_s(st, fspec, X), "numpy")


def bench_synthesizer(rng) -> None:
    M, T, C, rows = 64, 8, 4, 4096
    y = (rng.standard_normal((C * M, rows)) + 1j * rng.standard_normal((C * M, rows))).astype(np.complex64)
    spec = SignalSpec(1e5, C * M, rows, dtype="complex64")
    st = Synthesizer(channels=M, taps_per_channel=T)
    row(f"synthesizer M={M} T={T}, {C} out x {rows * M}", ours_gpu_s(st, spec, y), numpy_s(st, spec, y), "numpy")


def bench_xcorr(rng) -> None:
    C, bins, F, N = 64, 1024, 256, 64
    X = (rng.standard_normal((C, F, bins)) + 1j * rng.standard_normal((C, F, bins))).astype(np.complex64)
    spec = SignalSpec(1e3, C, F, dtype="complex64", domain="frames", bins=bins)
    numpy = numpy_s(Xcorr(integrate=N), spec, X, repeats=2)
    useful = 8.0 * C * (C + 1) / 2 * F * bins
    gemm = 8.0 * C * C * F * bins
    try:
        peak, how = fp32_peak_flops()
    except ImportError:
        peak, how = float("nan"), "FP32 peak unknown (no CuPy to read the device's properties)"
    print(f"FP32 peak: {how}")
    for method in ("tensor", "kernel", "cublas"):
        if method in ("tensor", "kernel") and C > KERNEL_MAX_INPUTS:
            print(f"xcorr ({method}): not timed at C={C} (the {method} method takes at most {KERNEL_MAX_INPUTS} inputs)")
            continue
        ours = ours_gpu_s(Xcorr(integrate=N, method=method), spec, X)
        row(f"xcorr ({method}) C={C} bins={bins} F={F} N={N}", ours, numpy, "numpy")
        line = f"xcorr ({method}): {useful / ours / 1e12:.2f} TFLOP/s useful ({100 * useful / ours / peak:.1f}% of peak)"
        if method == "cublas":
            line += f", gemm {gemm / ours / 1e12:.2f} TFLOP/s ({100 * gemm / ours / peak:.1f}%)"
        print(line)
    # what auto picks between: the two one-launch methods over the inputs they take
    for c in (8, 16, 24, 32, 48, 64):
        Xc = np.ascontiguousarray(X[:c])
        sc = SignalSpec(1e3, c, F, dtype="complex64", domain="frames", bins=bins)
        t = {m: ours_gpu_s(Xcorr(integrate=N, method=m), sc, Xc) for m in ("tensor", "kernel")}
        print(f"xcorr C={c} bins={bins} F={F} N={N}: tensor {t['tensor'] * 1e6:.1f} us, kernel {t['kernel'] * 1e6:.1f} us, "
              f"tensor/kernel {t['tensor'] / t['kernel']:.2f}")


def main() -> int:
    rng = np.random.default_rng(0)
    for bench in (bench_correlate, bench_cfar, bench_synthesizer, bench_xcorr):
        bench(rng)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
