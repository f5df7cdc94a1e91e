from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.cfar import Cfar

from .conftest import assert_documented, config_error, run_stage, signal, stream


def test_documented():
    assert_documented(Cfar)


def alpha(pfa: float, n: int) -> float:
    return n * (pfa ** (-1.0 / n) - 1.0)


def numpy_time_reference(x: np.ndarray, guard: int, train: int, pfa=None, scale=None):
    """Threshold and mask along time, cell by cell: output n is for the cell t = n - D (D = guard +
    train), zeros before the stream's start, noise = mean of the 2*train training cells."""
    P = np.abs(x.astype(np.complex128)) ** 2 if np.iscomplexobj(x) else x.astype(np.float64)
    D = guard + train
    C, n = P.shape
    pad = np.concatenate([np.zeros((C, 2 * D)), P], axis=1)  # pad[:, j + 2D] = P[:, j]
    a = scale if scale is not None else alpha(pfa, 2 * train)
    thr = np.empty((C, n))
    mask = np.empty((C, n))
    for i in range(n):
        t = i + D  # the cell's index in pad
        cells = np.concatenate([pad[:, t - D:t - guard], pad[:, t + guard + 1:t + D + 1]], axis=1)
        assert cells.shape[1] == 2 * train
        thr[:, i] = a * cells.mean(axis=1)
        mask[:, i] = pad[:, t] > thr[:, i]
    return thr, mask


def numpy_bins_reference(X: np.ndarray, guard: int, train: int, pfa=None, scale=None):
    """Along bins: the training cells inside [0, bins), N_b of them, alpha from N_b."""
    P = np.abs(X.astype(np.complex128)) ** 2 if np.iscomplexobj(X) else X.astype(np.float64)
    bins = P.shape[-1]
    thr = np.empty(P.shape)
    for b in range(bins):
        idx = [k for k in range(b - guard - train, b - guard) if 0 <= k < bins]
        idx += [k for k in range(b + guard + 1, b + guard + train + 1) if 0 <= k < bins]
        a = scale if scale is not None else alpha(pfa, len(idx))
        thr[..., b] = a * P[..., idx].mean(axis=-1)
    return thr, (P > thr).astype(np.float64)


@pytest.mark.parametrize("guard,train", [(0, 1), (2, 8), (3, 5)])
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("block", [13, 64, 1])  # odd blocks, blocks shorter than the window
def test_time_matches_numpy(rng, guard, train, complex_, block):
    x = signal(rng, (2, 301), complex_)
    if not complex_:
        x = x ** 2  # a real input is power
    x[:, 150] = 1e4 if not complex_ else 100.0  # a target of power 1e4
    spec = SignalSpec(1000, 2, block, dtype="complex64" if complex_ else "float32")
    thr_ref, mask_ref = numpy_time_reference(x, guard, train, pfa=1e-3)
    thr = run_stage(Cfar(guard=guard, train=train, pfa=1e-3, output="threshold"), spec, x)
    mask = run_stage(Cfar(guard=guard, train=train, pfa=1e-3), spec, x)
    assert thr.dtype == np.float32 and mask.dtype == np.float32
    np.testing.assert_allclose(thr, thr_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mask, mask_ref)
    assert mask[:, 150 + guard + train].all()  # the target, delayed by guard + train


@pytest.mark.parametrize("guard,train,bins", [(0, 1, 3), (1, 4, 33), (2, 3, 64)])
@pytest.mark.parametrize("complex_", [False, True])
def test_bins_match_numpy(rng, guard, train, bins, complex_):
    X = signal(rng, (3, 10, bins), complex_)
    spec = SignalSpec(100, 3, 4, dtype="complex64" if complex_ else "float32", domain="frames", bins=bins)
    for kw in ({"pfa": 1e-2}, {"scale": 4.5}):
        thr_ref, mask_ref = numpy_bins_reference(X, guard, train, **kw)
        thr = run_stage(Cfar(guard=guard, train=train, output="threshold", **kw), spec, X)
        mask = run_stage(Cfar(guard=guard, train=train, **kw), spec, X)
        np.testing.assert_allclose(thr, thr_ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(mask, mask_ref)


def test_false_alarm_rate_on_exponential_noise():
    rng = np.random.default_rng(5)
    P = rng.exponential(size=(4, 200_000)).astype(np.float32)  # |complex Gaussian|^2
    mask = run_stage(Cfar(guard=2, train=16, pfa=1e-2), SignalSpec(1000, 4, 4096), P)
    rate = mask[:, 2 * 18:].mean()
    assert 0.008 < rate < 0.012


def test_scale_and_default_pfa(rng):
    x = np.abs(signal(rng, (1, 200)))
    t_scale, _ = numpy_time_reference(x, 1, 4, scale=alpha(1e-3, 8))
    out = run_stage(Cfar(guard=1, train=4, output="threshold"), SignalSpec(1000, 1, 50), x)  # pfa 1e-3
    np.testing.assert_allclose(out, t_scale, rtol=1e-5, atol=1e-7)


def test_state_continues_across_blocks_and_reset(rng):
    x = signal(rng, (2, 500))
    st = Cfar(guard=2, train=6, output="threshold")
    proc = st.cpu(SignalSpec(1000, 2, 37))
    whole = st.cpu(SignalSpec(1000, 2, 500)).process(x)
    first = stream(proc, x, 37)
    np.testing.assert_allclose(first, whole, rtol=1e-6)
    proc.reset()
    np.testing.assert_array_equal(stream(proc, x, 37), first)
    assert st.delay(SignalSpec(1000, 2, 37)) == 8


def test_rules():
    assert "not both" in str(config_error(Cfar, pfa=1e-3, scale=3.0))
    assert "pfa" in str(config_error(Cfar, pfa=1.5))
    assert "train" in str(config_error(Cfar, train=0))
    assert "did you mean 'guard'" in str(config_error(Cfar, gaurd=2))
    frames = SignalSpec(100, 1, 4, dtype="complex64", domain="frames", bins=20)
    err = config_error(Cfar(guard=2, train=8).output_spec, frames)
    assert "21" in str(err) and err.hint
