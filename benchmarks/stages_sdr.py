"""The SDR stages on the GPU, input resident, against their CuPy/cupyx counterparts (and NumPy).

Each case is one stage in a pipeline timed by the cuda engine's own resident loop (CUDA graph
replays of one block, transfers excluded: EngineInstrument.time_resident) and the counterpart on
the same block already on the GPU, timed with CUDA events per call:

    shift         CuPy x * exp(2j*pi*f*n/fs) (cupyx.signal.freq_shift refuses complex64 and
                  complex128 blocks in CuPy 14.2: "Type is mismatched")
    fir decimate  cupyx.scipy.signal.upfirdn(h, x, 1, D)       (computes only the kept outputs)
    ddc           freq_shift, then upfirdn(h, ., 1, D)
    fm_demod      CuPy: angle(x[1:] * conj(x[:-1])), de-emphasis by cupyx.scipy.signal.lfilter;
                  and NumPy on the host
    hilbert       cupyx.scipy.signal.hilbert (FFT over the block; not streaming)

The counterparts keep no state between blocks (they do less than a streaming stage). The ratio
is the counterpart's time over the stage's: above 1 the stage is faster; the target is >= 1.5.

    python benchmarks/stages_sdr.py [--samples 1048576] [--channels 1] [--iterations 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

FS = 2.4e6
FREQ = 250e3
TAPS = 127
DECIMATE = 8


@dataclass
class Case:
    name: str
    stage: dict          # make_stage arguments (type included)
    dtype: str           # the input's
    counterparts: tuple[str, ...]


CASES = (
    Case("shift", {"type": "shift", "freq_hz": FREQ}, "complex64", ("cupy x * exp(2j pi f n / fs)",)),
    Case("fir decimate", {"type": "fir", "design": {"numtaps": TAPS, "cutoff_hz": FS / DECIMATE / 2},
                          "decimate": DECIMATE}, "complex64", ("cupyx upfirdn",)),
    Case("ddc", {"type": "ddc", "freq_hz": FREQ, "design": {"numtaps": TAPS, "cutoff_hz": FS / DECIMATE / 2},
                 "decimate": DECIMATE}, "complex64", ("freq_shift + upfirdn",)),  # freq_shift: the CuPy product
    Case("fm_demod", {"type": "fm_demod", "gain": 1.0}, "complex64", ("cupy angle", "numpy")),
    Case("fm_demod 75us", {"type": "fm_demod", "gain": 1.0, "deemphasis_us": 75}, "complex64",
         ("cupy angle + lfilter", "numpy + scipy lfilter")),
    Case("hilbert", {"type": "hilbert", "numtaps": TAPS}, "float32", ("cupyx.scipy.signal.hilbert",)),
)


def make_block(channels: int, samples: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((channels, samples))
    if dtype == "complex64":
        x = x + 1j * rng.standard_normal((channels, samples))
    return np.ascontiguousarray(x.astype(dtype))


def pipeline_of(case: Case, channels: int, samples: int):
    from pygpukit_dsp.pipeline import Pipeline
    from pygpukit_dsp.stages import make_stage

    params = dict(case.stage)
    return Pipeline([make_stage(params.pop("type"), **params)], sample_rate=FS, channels=channels,
                    block_size=samples, dtype=case.dtype)


def time_stage(case: Case, block: np.ndarray, iterations: int) -> float:
    """Mean seconds per block of the stage on the cuda engine, input resident (CUDA graph replays)."""
    from pygpukit_dsp.backends import open_backend

    p = pipeline_of(case, block.shape[0], block.shape[1])
    engine = open_backend(p, p.specs(), "cuda")
    try:
        engine.process(block)  # the first block: graphs captured, kernels loaded
        inst = engine.instrument()
        inst.time_resident(max(5, iterations // 10), block)
        return float(np.mean(inst.time_resident(iterations, block)))
    finally:
        engine.close()


def cupy_counterpart(name: str, case: Case, cp) -> Callable:
    import cupyx.scipy.signal as css
    import scipy.signal as ss

    h = cp.asarray(ss.firwin(TAPS, FS / DECIMATE / 2, fs=FS))
    a = float(np.exp(-1.0 / (FS * 75e-6)))

    def fm(x):
        return cp.angle(x[:, 1:] * cp.conj(x[:, :-1]))

    def cupy_shift(freq):
        # cupyx.signal.freq_shift refused both complex64 and complex128 blocks on the H200 (CuPy 14.2,
        # "Type is mismatched"): the same product written in CuPy, the phase in float64
        def shift(x):
            n = cp.arange(x.shape[-1], dtype=cp.float64)
            return (x * cp.exp(2j * np.pi * freq / FS * n)).astype(cp.complex64)
        return shift

    if name == "cupy x * exp(2j pi f n / fs)":
        return cupy_shift(FREQ)
    if name == "cupyx upfirdn":
        return lambda x: css.upfirdn(h, x, 1, DECIMATE, axis=-1)
    if name == "freq_shift + upfirdn":
        return lambda x: css.upfirdn(h, cupy_shift(-FREQ)(x), 1, DECIMATE, axis=-1)
    if name == "cupy angle":
        return fm
    if name == "cupy angle + lfilter":
        b_, a_ = cp.asarray([1.0 - a]), cp.asarray([1.0, -a])
        return lambda x: css.lfilter(b_, a_, fm(x), axis=-1)
    if name == "cupyx.scipy.signal.hilbert":
        return lambda x: css.hilbert(x, axis=-1)
    raise KeyError(name)


def numpy_counterpart(name: str) -> Callable:
    import scipy.signal as ss

    a = float(np.exp(-1.0 / (FS * 75e-6)))

    def fm(x):
        return np.angle(x[:, 1:] * np.conj(x[:, :-1]))

    if name == "numpy":
        return fm
    if name == "numpy + scipy lfilter":
        return lambda x: ss.lfilter([1.0 - a], [1.0, -a], fm(x), axis=-1)
    raise KeyError(name)


def time_cupy(fn: Callable, block: np.ndarray, iterations: int, cp) -> float:
    x = cp.asarray(block)
    for _ in range(max(3, iterations // 10)):
        fn(x)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iterations):
        fn(x)
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / 1e3 / iterations


def time_numpy(fn: Callable, block: np.ndarray, iterations: int) -> float:
    fn(block)
    n = max(3, iterations // 20)
    t0 = time.perf_counter()
    for _ in range(n):
        fn(block)
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1 << 20, help="samples per channel per block (a multiple of 8)")
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    import cupy as cp

    rows = []
    print(f"# SDR stages, GPU-resident: {args.channels} ch x {args.samples} samples per block, "
          f"{TAPS} taps, decimate {DECIMATE}; {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}\n")
    print(f"| stage | ours (us) | counterpart | theirs (us) | ratio (theirs / ours) |")
    print("|---|---|---|---|---|")
    for case in CASES:
        block = make_block(args.channels, args.samples, case.dtype)
        ours = time_stage(case, block, args.iterations)
        for name in case.counterparts:
            if name.startswith("numpy"):
                theirs = time_numpy(numpy_counterpart(name), block, args.iterations)
            else:
                theirs = time_cupy(cupy_counterpart(name, case, cp), block, args.iterations, cp)
            ratio = theirs / ours
            rows.append({"stage": case.name, "ours_us": ours * 1e6, "counterpart": name,
                         "theirs_us": theirs * 1e6, "ratio": ratio})
            flag = "" if ratio >= 1.5 else "  (below 1.5x)"
            print(f"| {case.name} | {ours * 1e6:.1f} | {name} | {theirs * 1e6:.1f} | {ratio:.2f}x{flag} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples": args.samples, "channels": args.channels, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
