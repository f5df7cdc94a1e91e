from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.xcorr import Xcorr, pair_index

from .conftest import assert_documented, config_error, rel_err, run_stage, signal


def test_documented():
    assert_documented(Xcorr)


def einsum_reference(X: np.ndarray, N: int) -> np.ndarray:
    """(C, F, bins) -> (C(C+1)/2, ceil(F/N), bins): mean over each run of N frames (the last run
    the frames that remain) of X_i conj(X_j), pairs i <= j row-major."""
    C, F, bins = X.shape
    X = X.astype(np.complex128)
    rows = []
    for i in range(C):
        for j in range(i, C):
            runs = [np.einsum("fb,fb->b", X[i, s:s + N], X[j, s:s + N].conj()) / X[i, s:s + N].shape[0]
                    for s in range(0, F, N)]
            rows.append(np.stack(runs))
    return np.stack(rows)


def test_pair_order():
    i, j = pair_index(4)
    assert list(zip(i.tolist(), j.tolist()))[:5] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 1)]
    for p, (a, b) in enumerate(zip(i, j)):
        assert p == a * 4 - a * (a - 1) // 2 + (b - a)


@pytest.mark.parametrize("C,N,block,bins", [(3, 4, 8, 5), (5, 1, 3, 7), (8, 6, 12, 16)])
@pytest.mark.parametrize("complex_", [False, True])
def test_matches_einsum(rng, C, N, block, bins, complex_):
    F = block * 4 + N * 2 - 1  # a short final block with a partial run
    X = signal(rng, (C, F, bins), complex_)
    spec = SignalSpec(100, C, block, dtype="complex64" if complex_ else "float32", domain="frames", bins=bins)
    st = Xcorr(integrate=N)
    out = run_stage(st, spec, X)
    assert out.dtype == np.complex64 and out.shape == (C * (C + 1) // 2, -(-F // N), bins)
    assert rel_err(out, einsum_reference(X, N)) < 1e-6


def test_auto_powers_are_real_and_nonnegative(rng):
    X = signal(rng, (4, 16, 8), True)
    out = run_stage(Xcorr(integrate=16), SignalSpec(10, 4, 16, dtype="complex64", domain="frames", bins=8), X)
    i, j = pair_index(4)
    auto = out[i == j]
    assert np.all(auto.real > 0) and np.all(auto.imag == 0)


def test_channelizer_time_domain_input(rng):
    C, M, n = 3, 4, 40
    x = signal(rng, (C * M, n), True)
    spec = SignalSpec(100, C * M, 8, dtype="complex64")
    st = Xcorr(integrate=4, bins=M)
    out_spec = st.output_spec(spec)
    assert (out_spec.channels, out_spec.block_size, out_spec.bins, out_spec.domain) == (6, 2, M, "frames")
    out = run_stage(st, spec, x)
    X = x.reshape(C, M, n).transpose(0, 2, 1)  # X_c[f, k] = x[c*M + k, f]
    assert rel_err(out, einsum_reference(X, 4)) < 1e-6


def test_spec_and_rules():
    frames = SignalSpec(1000, 4, 32, dtype="complex64", domain="frames", bins=64)
    out = Xcorr(integrate=8).output_spec(frames)
    assert (out.channels, out.block_size, out.sample_rate, out.bins) == (10, 4, 125, 64)
    err = config_error(Xcorr(integrate=5).output_spec, frames)
    assert "multiple of" in str(err) and "30 or 35" in str(err)
    err = config_error(Xcorr(integrate=2).output_spec, SignalSpec(1000, 4, 32))
    assert "bins" in str(err) and err.hint
    assert config_error(Xcorr(integrate=2, bins=3).output_spec, SignalSpec(1000, 4, 32)).path == ("bins",)
    assert config_error(Xcorr(integrate=2, bins=3).output_spec, frames).path == ("bins",)
    assert "integrate" in str(config_error(Xcorr, integrate=0))
