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
from .test_cuda_engine import fake_driver, last_json, run_python  # noqa: F401  (fake_driver: a fixture)


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


FAKE_CFAR_SCRIPT = r"""
import json
import numpy as np
from pygpukit_dsp import _native

dev = _native.Device(0)
res = {}
cases = {
    "time": ((3, 1000, 0, "float32"), {"guard": 2, "train": 8, "mask": True, "coef": 0.5}),
    "time_history_longer_than_the_block": ((2, 37, 0, "complex64"),
                                           {"guard": 4, "train": 40, "mask": False, "coef": 0.5}),
    "bins": ((2, 8, 33, "complex64"), {"guard": 1, "train": 4, "mask": True, "coef": np.ones(33)}),
}
for name, (layout, params) in cases.items():
    o = {"kind": "cfar", "name": name, "in": layout, "out": layout[:3] + ("float32",), "params": params}
    e = _native.StreamEngine(dev, [o], use_graph=True)
    shape = layout[:3] if layout[2] else layout[:2]
    x = np.zeros(shape, np.complex64 if layout[3] == "complex64" else np.float32)
    full = e.process(0, x)
    last = e.process(1, x[:, :3].copy(), True)
    res[name] = [e.units_per_block, list(full.shape), list(last.shape)]
    e.close()
print(json.dumps(res))
"""


def test_the_op_builds_captures_and_takes_a_final_block_on_the_fake_driver(fake_driver):
    """CPU-only (tests/native/fake_libcuda.c runs no kernel): the op's parameters, history, kernel
    names and launches are accepted, graph capture included."""
    out = last_json(run_python(FAKE_CFAR_SCRIPT, GK_LIBCUDA=fake_driver, GK_JIT_DISK_CACHE="0"))
    assert out == {"time": [1, [3, 1000], [3, 3]], "time_history_longer_than_the_block": [1, [2, 37], [2, 3]],
                   "bins": [1, [2, 8, 33], [2, 3, 33]]}
