"""cfar on CUDA (native/ops/cfar.cpp, kernels/cfar.cu) against the CPU stage.

Thresholds: float32 sums of the training cells against the CPU's float64 running sums,
relative error < 1e-5 per cell. Masks: equal except where the cell's power is within 1e-4
(relative) of its threshold (a float32 rounding can flip such a cell).
"""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit_dsp.backends.cuda_ops  # noqa: F401
from pygpukit_dsp.backends.cuda_ops.cfar import lower_cfar
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.cfar import Cfar, bin_coefficients

from .compare import both, run_both, signal


def power_of(x: np.ndarray) -> np.ndarray:
    return np.abs(x.astype(np.complex128)) ** 2 if np.iscomplexobj(x) else x.astype(np.float64)


def check_mask(gpu: np.ndarray, cpu: np.ndarray, power: np.ndarray, thr: np.ndarray) -> None:
    differ = gpu != cpu
    borderline = np.abs(power - thr) <= 1e-4 * np.abs(thr)
    assert not np.any(differ & ~borderline)
    assert differ.mean() < 1e-3


def test_lowering_passes_the_coefficients():
    st = Cfar(guard=1, train=4, pfa=1e-2)
    s = SignalSpec(1000, 2, 64)
    desc = lower_cfar(st, s, st.output_spec(s))
    assert desc.kind == "cfar" and desc.params["mask"] is True
    assert desc.params["coef"] == pytest.approx(8 * (1e-2 ** (-1 / 8) - 1) / 8)
    f = SignalSpec(100, 2, 4, dtype="complex64", domain="frames", bins=32)
    desc = lower_cfar(st, f, st.output_spec(f))
    np.testing.assert_array_equal(desc.params["coef"], bin_coefficients(st.params, 32))


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("guard,train,block", [(2, 8, 1000), (0, 1, 37), (4, 40, 64), (3, 300, 256)])
def test_time_matches_cpu(complex_: bool, guard: int, train: int, block: int):
    x = signal(3, block * 4 + 77, complex_, seed=train)  # a short final block; 300 > block: history
    if not complex_:
        x = x ** 2
    x[:, x.shape[1] // 2] = 50.0  # a target
    thr_gpu, thr_cpu = both(Cfar(guard=guard, train=train, pfa=1e-3, output="threshold"), x, block)
    np.testing.assert_allclose(thr_gpu, thr_cpu, rtol=1e-5, atol=1e-6)
    m_gpu, m_cpu = both(Cfar(guard=guard, train=train, pfa=1e-3), x, block)
    D = guard + train
    delayed = np.concatenate([np.zeros((3, D)), power_of(x)[:, :x.shape[1] - D]], axis=1)
    check_mask(m_gpu, m_cpu, delayed, thr_cpu)


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("guard,train,bins", [(1, 4, 33), (2, 16, 1024), (0, 1, 3)])
def test_bins_match_cpu(complex_: bool, guard: int, train: int, bins: int):
    rng = np.random.default_rng(bins)
    X = rng.standard_normal((2, 4 * 8 + 3, bins))
    X = (X + 1j * rng.standard_normal(X.shape)).astype(np.complex64) if complex_ else (X ** 2).astype(np.float32)
    spec = SignalSpec(100, 2, 8, dtype="complex64" if complex_ else "float32", domain="frames", bins=bins)
    thr_gpu, thr_cpu = run_both([Cfar(guard=guard, train=train, scale=5.0, output="threshold")], spec, X)
    np.testing.assert_allclose(thr_gpu, thr_cpu, rtol=1e-5, atol=1e-6)
    m_gpu, m_cpu = run_both([Cfar(guard=guard, train=train, scale=5.0)], spec, X)
    check_mask(m_gpu, m_cpu, power_of(X), thr_cpu)
