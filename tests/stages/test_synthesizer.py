from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.channelizer import Channelizer
from pygpukit_dsp.stages.synthesizer import Synthesizer

from .conftest import assert_documented, config_error, rel_err, run_stage, signal, stream


def test_documented():
    assert_documented(Synthesizer)


def direct_definition(h: np.ndarray, y: np.ndarray, M: int) -> np.ndarray:
    """x[n] = sum_k upfirdn(f_k, y_k, up=M)[n], f_k[l] = M conj(h_k[T*M - 1 - l]),
    h_k[l] = h[l] exp(2j pi k l / M), h zero-padded to T*M taps."""
    T = -(-h.size // M)
    hp = np.zeros(T * M)
    hp[:h.size] = h
    l = np.arange(T * M)
    C = y.shape[0] // M
    rows = y.shape[1]
    out = np.zeros((C, rows * M), np.complex128)
    for c in range(C):
        for k in range(M):
            hk = hp * np.exp(2j * np.pi * k * l / M)
            fk = M * np.conj(hk[::-1])
            out[c] += ss.upfirdn(fk, y[c * M + k].astype(np.complex128), up=M)[:rows * M]
    return out


@pytest.mark.parametrize("M,T", [(4, 8), (8, 3), (5, 1)])
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("block", [7, 16])  # rows per block; 7 leaves a short final block
def test_matches_direct_definition(rng, M, T, complex_, block):
    rows = 101
    y = signal(rng, (2 * M, rows), complex_)
    spec = SignalSpec(1000, 2 * M, block, dtype="complex64" if complex_ else "float32")
    out = run_stage(Synthesizer(channels=M, taps_per_channel=T), spec, y)
    assert out.shape == (2, rows * M) and out.dtype == np.complex64
    assert rel_err(out, direct_definition(ss.firwin(M * T, 1 / M), y, M)) < 1e-5


def test_explicit_prototype_not_a_multiple_of_m(rng):
    h = ss.firwin(37, 1 / 8)
    y = signal(rng, (8, 90), True)
    out = run_stage(Synthesizer(channels=8, taps=h), SignalSpec(1000, 8, 9, dtype="complex64"), y)
    assert rel_err(out, direct_definition(h, y, 8)) < 1e-5


def reconstruction_error_db(M: int, prototype: dict, block: int, n_rows: int = 3000) -> tuple[float, int]:
    rng = np.random.default_rng(7)
    x = signal(rng, (2, M * n_rows), True)
    spec = SignalSpec(M * 1000.0, 2, M * block, dtype="complex64")
    ch, syn = Channelizer(channels=M, **prototype), Synthesizer(channels=M, **prototype)
    y = run_stage(ch, spec, x)
    z = run_stage(syn, ch.output_spec(spec), y)
    d = syn.delay()
    e = z[:, d:] - x[:, :x.shape[1] - d]
    return 10 * np.log10(np.sum(np.abs(e) ** 2) / np.sum(np.abs(x[:, :x.shape[1] - d]) ** 2)), d


@pytest.mark.parametrize("M,T,bound_db", [(8, 8, -12.0), (16, 16, -15.0), (8, 32, -18.0)])
def test_channelizer_then_synthesizer_reconstructs_the_input_delayed(M, T, bound_db):
    """Measured (white complex noise, firwin prototype): -12.7 dB at T = 8, -15.7 dB at T = 16,
    -18.7 dB at T = 32: the aliasing of a critically sampled bank, about 3 dB less per doubling."""
    err, d = reconstruction_error_db(M, {"taps_per_channel": T}, block=16)
    assert d == M * T - 1
    assert err < bound_db


def test_rectangular_prototype_reconstructs_exactly():
    M = 8
    err, d = reconstruction_error_db(M, {"taps": np.ones(M) / M}, block=5)
    assert d == M - 1 and err < -120


def test_state_continues_across_blocks_and_reset(rng):
    y = signal(rng, (4, 200), True)
    st = Synthesizer(channels=4, taps_per_channel=6)
    proc = st.cpu(SignalSpec(1000, 4, 3, dtype="complex64"))
    whole = st.cpu(SignalSpec(1000, 4, 200, dtype="complex64")).process(y)
    first = stream(proc, y, 3)
    np.testing.assert_allclose(first, whole, rtol=1e-5, atol=1e-5)
    proc.reset()
    np.testing.assert_array_equal(stream(proc, y, 3), first)


def test_spec():
    out = Synthesizer(channels=4).output_spec(SignalSpec(12000, 12, 64, dtype="complex64"))
    assert (out.channels, out.sample_rate, out.block_size, out.dtype) == (3, 48000, 256, "complex64")


def test_rules():
    err = config_error(Synthesizer(channels=4).output_spec, SignalSpec(1000, 6, 64))
    assert "multiple" in str(err) and err.hint
    assert "not both" in str(config_error(Synthesizer, channels=4, taps=[1.0, 2.0], taps_per_channel=4))
    assert "channels" in str(config_error(Synthesizer, channels=1))
    frames = SignalSpec(100, 4, 4, dtype="complex64", domain="frames", bins=8)
    assert "time-domain" in str(config_error(Synthesizer(channels=2).output_spec, frames))
