"""xcorr on CUDA (native/ops/xcorr.cpp: the tiled kernel, or gather, cublasCgemmStridedBatched and
pack, or the tensor-core kernel) against the CPU stage (float64 einsum), each method. Relative error ||cuda - cpu|| / ||cpu|| < 1e-5 (float32 sums of N
products), including the mean of a final partial run and a channelizer's time-domain input.
"""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit_dsp.backends.cuda_ops  # noqa: F401
from pygpukit_dsp.backends.cuda_ops.xcorr import KERNEL_MAX_INPUTS, lower_xcorr
from pygpukit_dsp.errors import UnsupportedError
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.channelizer import Channelizer
from pygpukit_dsp.stages.xcorr import Xcorr

from .compare import both, rel_err, run_both
from .test_cuda_engine import fake_driver, last_json, run_python  # noqa: F401  (fake_driver: a fixture)

TOL = 1e-5


def frames(C: int, F: int, bins: int, complex_: bool, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((C, F, bins))
    if complex_:
        return (X + 1j * rng.standard_normal(X.shape)).astype(np.complex64)
    return X.astype(np.float32)


def test_lowering_passes_inputs_bins_and_n():
    st = Xcorr(integrate=4)
    s = SignalSpec(100, 6, 16, dtype="complex64", domain="frames", bins=32)
    desc = lower_xcorr(st, s, st.output_spec(s))
    assert desc.kind == "xcorr" and desc.params == {"inputs": 6, "bins": 32, "integrate": 4, "method": "tensor"}
    st = Xcorr(integrate=2, bins=8, method="cublas")
    t = SignalSpec(100, 24, 16, dtype="complex64")
    assert lower_xcorr(st, t, st.output_spec(t)).params == {"inputs": 3, "bins": 8, "integrate": 2,
                                                             "method": "cublas"}
    many = SignalSpec(100, 65, 4, dtype="complex64", domain="frames", bins=8)
    assert lower_xcorr(Xcorr(integrate=2), many, Xcorr(integrate=2).output_spec(many)).params["method"] == "cublas"
    at_64 = SignalSpec(100, 64, 4, dtype="complex64", domain="frames", bins=8)
    assert lower_xcorr(Xcorr(integrate=2), at_64, Xcorr(integrate=2).output_spec(at_64)).params["method"] == "tensor"
    for method in ("tensor", "kernel"):
        given = lower_xcorr(Xcorr(integrate=2, method=method), at_64, Xcorr(integrate=2).output_spec(at_64)).params
        assert given["method"] == method
        with pytest.raises(UnsupportedError, match=f"'{method}' takes at most 64"):
            lower_xcorr(Xcorr(integrate=2, method=method), many, Xcorr(integrate=2).output_spec(many))


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["tensor", "kernel", "cublas"])
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("C,N,block,bins", [(5, 3, 6, 7), (16, 8, 32, 128), (56, 16, 32, 256), (64, 16, 32, 256),
                                            (33, 1, 4, 40), (24, 5, 10, 9)])
def test_matches_cpu(method: str, complex_: bool, C: int, N: int, block: int, bins: int):
    if method in ("tensor", "kernel") and C > KERNEL_MAX_INPUTS:
        pytest.skip("more inputs than the kernel method takes (test_lowering_passes_inputs_bins_and_n)")
    X = frames(C, block * 3 + N + 1, bins, complex_, seed=C)  # a final block with a partial run
    spec = SignalSpec(100, C, block, dtype="complex64" if complex_ else "float32", domain="frames", bins=bins)
    gpu, cpu = run_both([Xcorr(integrate=N, method=method)], spec, X)
    assert gpu.shape == cpu.shape == (C * (C + 1) // 2, -(-X.shape[1] // N), bins)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["tensor", "kernel", "cublas"])
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("C,N,block,bins", [(64, 64, 64, 8), (20, 35, 35, 5)])
def test_each_pair_is_exact_to_its_own_scale_over_twelve_decades(method: str, complex_: bool, C: int, N: int,
                                                                  block: int, bins: int):
    """Inputs 10^-6 to 10^6 apart, a burst 1000x larger after a run's first 20 frames in every third
    input and an input of zeros: each pair (i, j) within 1e-5 of sqrt(R_ii R_jj), what float32 sums give."""
    rng = np.random.default_rng(7)
    X = frames(C, 2 * block, bins, complex_, seed=C).astype(np.complex128 if complex_ else np.float64)
    X *= 10.0 ** rng.uniform(-6, 6, (C, 1, 1))
    X[::3, 20:] *= 1e3
    X[5] = 0
    X = X.astype(np.complex64 if complex_ else np.float32)
    spec = SignalSpec(100, C, block, dtype="complex64" if complex_ else "float32", domain="frames", bins=bins)
    gpu, cpu = run_both([Xcorr(integrate=N, method=method)], spec, X)
    i, j = np.triu_indices(C)
    power = np.abs(cpu[np.flatnonzero(i == j)])  # R_ii, (C, runs, bins)
    scale = np.sqrt(power[i] * power[j])
    assert np.all(gpu[(i == 5) | (j == 5)] == 0)
    assert np.max(np.abs(gpu - cpu) / np.where(scale > 0, scale, 1.0)) < TOL


@pytest.mark.gpu
def test_more_inputs_than_the_kernel_takes():
    X = frames(70, 8, 16, True, seed=70)
    spec = SignalSpec(100, 70, 8, dtype="complex64", domain="frames", bins=16)
    gpu, cpu = run_both([Xcorr(integrate=4)], spec, X)  # auto: cublas
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["tensor", "kernel", "cublas"])
def test_after_a_channelizer(method: str):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((4, 16 * 64 * 5)) + 1j * rng.standard_normal((4, 16 * 64 * 5))).astype(np.complex64)
    gpu, cpu = both([Channelizer(channels=16, taps_per_channel=8), Xcorr(integrate=8, bins=16, method=method)],
                    x, 16 * 64)
    assert gpu.shape == (10, 5 * 8, 16)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["tensor", "kernel", "cublas"])
def test_splits_over_bins(method: str):
    from .test_cuda_chunked import check_split_stream, frames_spec

    units = check_split_stream([Xcorr(integrate=4, method=method)], frames_spec(8, 16, 512, True),
                               kinds=["xcorr"], partial=6)
    assert units > 1


FAKE_XCORR_SCRIPT = r"""
import json, os
import numpy as np
from pygpukit_dsp import _native

dev = _native.Device(0)
res = {}
METHOD = json.loads(os.environ["XCORR_METHOD"])
cases = {
    "frames": ((64, 8, 40, "complex64"), (2080, 2, 40, "complex64"), {"inputs": 64, "bins": 40, "integrate": 4}),
    "channelizer_output": ((12, 8, 0, "float32"), (6, 4, 4, "complex64"), {"inputs": 3, "bins": 4, "integrate": 2}),
}
for name, (lin, lout, params) in cases.items():
    o = {"kind": "xcorr", "name": name, "in": lin, "out": lout, "params": dict(params, **METHOD)}
    e = _native.StreamEngine(dev, [o], use_graph=True)
    shape = lin[:3] if lin[2] else lin[:2]
    x = np.zeros(shape, np.complex64 if lin[3] == "complex64" else np.float32)
    full = e.process(0, x)
    last = e.process(1, x[:, :3].copy(), True)
    res[name] = [list(full.shape), list(last.shape)]
    e.close()
print(json.dumps(res))
"""


@pytest.mark.parametrize("method", ["kernel", "tensor"])
def test_the_kernel_methods_build_capture_and_take_a_final_block_on_the_fake_driver(fake_driver, method):
    """CPU-only (tests/native/fake_libcuda.c runs no kernel): parameters, kernel names, launches
    and graph capture of the kernel and tensor methods (cublas needs the real library)."""
    import json

    out = last_json(run_python(FAKE_XCORR_SCRIPT, GK_LIBCUDA=fake_driver, GK_JIT_DISK_CACHE="0",
                               XCORR_METHOD=json.dumps({"method": method}), FAKE_CUDA_SM="9.0"))
    assert out == {"frames": [[2080, 2, 40], [2080, 1, 40]], "channelizer_output": [[6, 4, 4], [6, 2, 4]]}

