from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.channelizer import Channelizer

from .conftest import assert_documented, config_error, rel_err, run_stage, signal, stream


def test_documented():
    assert_documented(Channelizer)


def direct_definition(h: np.ndarray, x: np.ndarray, M: int) -> np.ndarray:
    """y_k[m] = sum_l h[l] exp(+2j pi k l / M) x[m M - l], output channel c*M + k."""
    L = h.size
    out = []
    for xc in x.astype(np.complex128):
        for k in range(M):
            hk = h * np.exp(2j * np.pi * k * np.arange(L) / M)
            out.append(ss.lfilter(hk, 1.0, xc)[::M])
    return np.array(out)


@pytest.mark.parametrize("M,T", [(4, 8), (8, 3), (5, 1)])
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("blocks_of", [8, 7])  # block = M*blocks_of: 7 leaves a partial block
def test_matches_direct_definition(rng, M, T, complex_, blocks_of):
    n = M * 56 + 3  # +3: the final block is zero-padded to a multiple of M
    x = signal(rng, (2, n), complex_)
    stage = Channelizer(channels=M, taps_per_channel=T)
    spec = SignalSpec(48000, 2, M * blocks_of, dtype="complex64" if complex_ else "float32")
    out = run_stage(stage, spec, x)
    ref = direct_definition(ss.firwin(M * T, 1 / M), x, M)
    assert out.shape == (2 * M, -(-n // M)) and out.dtype == np.complex64
    assert rel_err(out, ref) < 1e-5


def test_explicit_prototype_any_length(rng):
    h = ss.firwin(37, 0.2)  # not a multiple of M
    x = signal(rng, (1, 400), complex_=True)
    out = run_stage(Channelizer(channels=4, taps=h.tolist()), SignalSpec(1000, 1, 40, dtype="complex64"), x)
    assert rel_err(out, direct_definition(h, x, 4)) < 1e-5


def test_tone_lands_in_its_channel():
    M, fs = 8, 8000.0
    t = np.arange(8 * 512) / fs
    x = np.exp(2j * np.pi * 3 * fs / M * t)[None].astype(np.complex64)  # centre of channel 3
    out = run_stage(Channelizer(channels=M), SignalSpec(fs, 1, 64, dtype="complex64"), x)
    power = (np.abs(out[:, 100:]) ** 2).mean(axis=1)
    assert power.argmax() == 3 and power[3] > 1e3 * np.delete(power, 3).max()


def test_spec():
    out = Channelizer(channels=4).output_spec(SignalSpec(48000, 3, 256))
    assert (out.channels, out.sample_rate, out.block_size, out.dtype) == (12, 12000, 64, "complex64")


def test_reset(rng):
    proc = Channelizer(channels=4).cpu(SignalSpec(1000, 1, 32))
    x = signal(rng, (1, 128))
    first = stream(proc, x, 32)
    proc.reset()
    np.testing.assert_array_equal(stream(proc, x, 32), first)


def test_rules():
    err = config_error(Channelizer(channels=6).output_spec, SignalSpec(1000, 1, 256))
    assert "multiple of 6" in str(err) and "252 or 258" in str(err)
    assert "not both" in str(config_error(Channelizer, channels=4, taps=[1.0, 2.0], taps_per_channel=4))
    assert "channels" in str(config_error(Channelizer, channels=1))
    assert "did you mean 'taps_per_channel'" in str(config_error(Channelizer, channels=4, taps_per_chanel=2))
    frames = SignalSpec(100, 1, 4, dtype="complex64", domain="frames", bins=8)
    assert "time-domain" in str(config_error(Channelizer(channels=2).output_spec, frames))
