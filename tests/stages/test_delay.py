from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.delay import Delay

from .conftest import assert_documented, config_error, run_stage, signal, stream


def test_documented():
    assert_documented(Delay)


def delayed(x: np.ndarray, d: int) -> np.ndarray:
    y = np.zeros_like(x)
    y[..., d:] = x[..., :x.shape[-1] - d]
    return y


@pytest.mark.parametrize("d", [0, 1, 37, 300])  # 300 > block size
@pytest.mark.parametrize("block", [64, 100])
@pytest.mark.parametrize("complex_", [False, True])
def test_uniform_delay(rng, d, block, complex_):
    x = signal(rng, (2, 1000), complex_)
    spec = SignalSpec(1000, 2, block, dtype="complex64" if complex_ else "float32")
    out = run_stage(Delay(samples=d), spec, x)
    np.testing.assert_array_equal(out, delayed(x, d))


def test_per_channel_delays(rng):
    x = signal(rng, (3, 500))
    out = run_stage(Delay(samples=[0, 5, 130]), SignalSpec(1000, 3, 64), x)
    for c, d in enumerate([0, 5, 130]):
        np.testing.assert_array_equal(out[c], delayed(x[c], d))


def test_reset(rng):
    proc = Delay(samples=10).cpu(SignalSpec(1000, 1, 16))
    x = signal(rng, (1, 64))
    first = stream(proc, x, 16)
    proc.reset()
    np.testing.assert_array_equal(stream(proc, x, 16), first)


def test_rules():
    assert ">= 0" in str(config_error(Delay, samples=-1))
    err = config_error(Delay(samples=[1, 2]).output_spec, SignalSpec(1000, 3, 16))
    assert "2 delays" in str(err) and "3 channels" in str(err)
    frames = SignalSpec(100, 1, 4, dtype="complex64", domain="frames", bins=8)
    assert "time-domain" in str(config_error(Delay(samples=1).output_spec, frames))
    assert "did you mean 'samples'" in str(config_error(Delay, sample=3))
