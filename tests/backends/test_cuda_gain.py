"""gain on CUDA (native/ops/gain.cpp) against the CPU stage: float32 and complex64, any domain.

Tolerance: exact. The GPU multiplies each float by float32(factor), the same single IEEE
product NumPy computes for float32 and complex64 * float32.
"""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends.cuda_ops.gain import lower_gain
from pygpukit_dsp.signal import SignalSpec

from .compare import run_both


def test_lowering_passes_the_linear_factor():
    spec = SignalSpec(48000.0, 2, 64)
    desc = lower_gain(stages.Gain(db=-6.0), spec, spec)
    assert desc.kind == "gain" and desc.params == {"factor": pytest.approx(10 ** (-6 / 20))}


@pytest.mark.gpu
@pytest.mark.parametrize("block", [64, 100, 1000])
def test_gain_float32_time_domain(block):
    x = np.random.default_rng(block).standard_normal((3, 1000 + 37)).astype(np.float32)
    p = Pipeline([stages.Gain(db=4.5)], sample_rate=48000, block_size=block)
    np.testing.assert_array_equal(p.process(x, backend="cuda"), p.process(x, backend="cpu"))


@pytest.mark.gpu
def test_gain_complex64_and_negative_linear_factor():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((2, 999)) + 1j * rng.standard_normal((2, 999))).astype(np.complex64)
    p = Pipeline([stages.Gain(linear=-0.37)], sample_rate=1e6, block_size=128)
    y = p.process(x, backend="cuda")
    assert y.dtype == np.complex64
    np.testing.assert_array_equal(y, p.process(x, backend="cpu"))


@pytest.mark.gpu
def test_gain_frames_domain_complex():
    rng = np.random.default_rng(3)
    spec = SignalSpec(100.0, 2, 8, "complex64", "frames", 33)
    x = (rng.standard_normal((2, 21, 33)) + 1j * rng.standard_normal((2, 21, 33))).astype(np.complex64)
    y, ref = run_both([stages.Gain(db=12.0)], spec, x)
    assert y.shape == ref.shape == x.shape
    np.testing.assert_array_equal(y, ref)
