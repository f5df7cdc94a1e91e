"""xcorr on CUDA (native/ops/xcorr.cpp: gather, cublasCgemmStridedBatched, pack) against the
CPU stage (float64 einsum). Relative error ||cuda - cpu|| / ||cpu|| < 1e-5 (float32 sums of N
products), including the mean of a final partial run and a channelizer's time-domain input.
"""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit_dsp.backends.cuda_ops  # noqa: F401
from pygpukit_dsp.backends.cuda_ops.xcorr import lower_xcorr
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.channelizer import Channelizer
from pygpukit_dsp.stages.xcorr import Xcorr

from .compare import both, rel_err, run_both

TOL = 1e-5


def frames(C: int, F: int, bins: int, complex_: bool, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((C, F, bins))
    if complex_:
        return (X + 1j * rng.standard_normal(X.shape)).astype(np.complex64)
    return X.astype(np.float32)


def test_lowering_passes_inputs_bins_and_n():
    st = Xcorr(integrate=4)
    s = SignalSpec(100, 6, 16, dtype="complex64", domain="frames", bins=32)
    desc = lower_xcorr(st, s, st.output_spec(s))
    assert desc.kind == "xcorr" and desc.params == {"inputs": 6, "bins": 32, "integrate": 4}
    st = Xcorr(integrate=2, bins=8)
    t = SignalSpec(100, 24, 16, dtype="complex64")
    assert lower_xcorr(st, t, st.output_spec(t)).params == {"inputs": 3, "bins": 8, "integrate": 2}


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("C,N,block,bins", [(5, 3, 6, 7), (16, 8, 32, 128), (64, 16, 32, 256), (33, 1, 4, 40)])
def test_matches_cpu(complex_: bool, C: int, N: int, block: int, bins: int):
    X = frames(C, block * 3 + N + 1, bins, complex_, seed=C)  # a final block with a partial run
    spec = SignalSpec(100, C, block, dtype="complex64" if complex_ else "float32", domain="frames", bins=bins)
    gpu, cpu = run_both([Xcorr(integrate=N)], spec, X)
    assert gpu.shape == cpu.shape == (C * (C + 1) // 2, -(-X.shape[1] // N), bins)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_after_a_channelizer():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((4, 16 * 64 * 5)) + 1j * rng.standard_normal((4, 16 * 64 * 5))).astype(np.complex64)
    gpu, cpu = both([Channelizer(channels=16, taps_per_channel=8), Xcorr(integrate=8, bins=16)], x, 16 * 64)
    assert gpu.shape == (10, 5 * 8, 16)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_splits_over_bins():
    from .test_cuda_chunked import check_split_stream, frames_spec

    units = check_split_stream([Xcorr(integrate=4)], frames_spec(8, 16, 512, True), kinds=["xcorr"],
                               partial=16)
    assert units > 1
