"""average on CUDA (native/ops/average.cpp, kernels/average.cu) against the CPU stage.

Frames-domain input is fed to both engines directly (no fft stage needed). Sums are in double
precision on both sides; tolerance relative 1e-6 (the summation order differs, the float32
result almost never does). The final partial block averages the frames that remain.
"""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import stages
from pygpukit_dsp.backends.cuda_ops.average import lower_average
from pygpukit_dsp.signal import SignalSpec

from .compare import run_both


def frames(shape, complex_=False, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) + 10.0  # an offset makes float32 sums drift without double
    if complex_:
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(np.complex64 if complex_ else np.float32)


def test_lowering_passes_the_run_length():
    spec = SignalSpec(100.0, 1, 32, "float32", "frames", 5)
    desc = lower_average(stages.Average(frames=8), spec, stages.Average(frames=8).output_spec(spec))
    assert desc.kind == "average" and desc.params == {"frames": 8}


@pytest.mark.gpu
@pytest.mark.parametrize("k,block,total", [(4, 32, 32 * 5 + 11), (1, 16, 40), (32, 32, 100), (64, 128, 128 * 3),
                                           (3, 12, 12 * 4 + 1)])
def test_average_float32(k, block, total):
    spec = SignalSpec(1000.0, 3, block, "float32", "frames", 37)
    x = frames((3, total, 37), seed=k)
    y, ref = run_both([stages.Average(frames=k)], spec, x)
    assert y.shape == ref.shape == (3, -(-total // k), 37)
    np.testing.assert_allclose(y, ref, rtol=1e-6)


@pytest.mark.gpu
def test_average_complex64_many_frames():
    spec = SignalSpec(1000.0, 2, 4096, "complex64", "frames", 65)
    x = frames((2, 4096 + 1000, 65), complex_=True, seed=9)
    y, ref = run_both([stages.Average(frames=4096)], spec, x)
    assert y.shape == (2, 2, 65) and y.dtype == np.complex64
    np.testing.assert_allclose(y, ref, rtol=1e-6)


@pytest.mark.gpu
def test_power_then_average_chain():
    spec = SignalSpec(1000.0, 2, 64, "complex64", "frames", 129)
    x = frames((2, 64 * 3 + 7, 129), complex_=True, seed=4)
    y, ref = run_both([stages.Power(), stages.Average(frames=16)], spec, x)
    np.testing.assert_allclose(y, ref, rtol=1e-6)
