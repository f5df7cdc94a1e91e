"""delay on CUDA (native/ops/delay.cpp, kernels/delay.cu) against the CPU stage.

Tolerance: exact (a delay line only moves samples). Cases: per-channel delays including 0 and
delays longer than a block, one delay for every channel, complex64, block sizes that do and
don't divide the signal, and a zero delay (a plain device copy).
"""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends.cuda_ops.delay import lower_delay
from pygpukit_dsp.signal import SignalSpec


def test_lowering_gives_one_integer_delay_per_channel():
    spec = SignalSpec(1000.0, 3, 64)
    desc = lower_delay(stages.Delay(samples=5), spec, spec)
    assert desc.kind == "delay"
    np.testing.assert_array_equal(desc.params["delays"], [5, 5, 5])
    desc = lower_delay(stages.Delay(samples=[0, 2, 900]), spec, spec)
    np.testing.assert_array_equal(desc.params["delays"], [0, 2, 900])


@pytest.mark.gpu
@pytest.mark.parametrize("samples,block", [([0, 3, 17, 700], 256), ([1, 1, 1, 1], 100), (5, 7),
                                           ([0, 0, 0, 0], 64)])
def test_delay_float32(samples, block):
    x = np.random.default_rng(block).standard_normal((4, 2000 + 13)).astype(np.float32)
    p = Pipeline([stages.Delay(samples=samples)], sample_rate=48000, block_size=block)
    y = p.process(x, backend="cuda")
    np.testing.assert_array_equal(y, p.process(x, backend="cpu"))
    assert y.shape == x.shape


@pytest.mark.gpu
def test_delay_complex64_longer_than_a_block():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 3000)) + 1j * rng.standard_normal((2, 3000))).astype(np.complex64)
    p = Pipeline([stages.Delay(samples=[333, 1])], sample_rate=1e6, block_size=128)
    y = p.process(x, backend="cuda")
    np.testing.assert_array_equal(y, p.process(x, backend="cpu"))
    np.testing.assert_array_equal(y[0, 333:], x[0, :-333])
    assert not np.any(y[0, :333])


@pytest.mark.gpu
def test_delay_state_resets():
    from pygpukit_dsp.backends import BackendChoice
    from pygpukit_dsp.backends.cuda_engine import CudaEngine

    p = Pipeline([stages.Delay(samples=[10, 20])], sample_rate=1000, channels=2, block_size=32)
    eng = CudaEngine(p, p.specs(), BackendChoice("cuda", "test"))
    x = np.random.default_rng(2).standard_normal((2, 32)).astype(np.float32)
    try:
        first = eng.process(x)
        eng.process(x)
        eng.reset()
        np.testing.assert_array_equal(eng.process(x), first)
    finally:
        eng.close()
