"""mix on CUDA (native/ops/mix.cpp, kernels/mix.cu, cuBLAS) against the CPU stage.

Both implementations are checked: the small-matrix kernel (C_out * C_in <= 4096, e.g. the W1
mix 16 x 64 on 64 ch x 256 samples) and cuBLAS (larger matrices; strided-batched per bin),
for every real/complex combination of matrix and input, in the time and frames domains, with
one matrix or one per bin. The method is forced by building the native engine directly.

Tolerance: relative error (Frobenius) <= 1e-5: float32 sums in a different order than NumPy's
BLAS.
"""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.backends.cpu import CpuEngine
from pygpukit_dsp.backends.cuda_ops.mix import KERNEL_MAX_ENTRIES, lower_mix
from pygpukit_dsp.pipeline import SpecChain
from pygpukit_dsp.signal import SignalSpec

RTOL = 1e-5


def rel_err(y: np.ndarray, ref: np.ndarray) -> float:
    assert y.shape == ref.shape, (y.shape, ref.shape)
    assert y.dtype == ref.dtype, (y.dtype, ref.dtype)
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


def array(shape, complex_: bool, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if complex_:
        a = a + 1j * rng.standard_normal(shape)
    return a


def cpu_stream(stage, spec_in: SignalSpec, x: np.ndarray) -> np.ndarray:
    chain = SpecChain((spec_in, stage.output_spec(spec_in)))
    eng = CpuEngine(Pipeline([stage]), chain, BackendChoice("cpu", "test"))
    n, bs = x.shape[1], spec_in.block_size
    return np.concatenate([eng.process(x[:, s:s + bs], final=s + bs >= n) for s in range(0, n, bs)], axis=1)


def native_stream(stage, spec_in: SignalSpec, x: np.ndarray, method: str, use_graph: bool = True) -> np.ndarray:
    """The mix op alone in a native engine with the method forced; blocks as the CPU gets them."""
    from pygpukit_dsp import _native
    from pygpukit_dsp.backends.cuda_engine import op_dict

    spec_out = stage.output_spec(spec_in)
    desc = lower_mix(stage, spec_in, spec_out)
    desc.params["method"] = method
    engine = _native.StreamEngine(_native.Device(0), [op_dict(desc)], use_graph=use_graph)
    outs = []
    try:
        n, bs = x.shape[1], spec_in.block_size
        for s in range(0, n, bs):
            block = x[:, s:s + bs]
            slot = engine.input_slot(0)
            slot[...] = 0
            slot[:, :block.shape[1]] = block
            engine.submit(0, block.shape[1], s + bs >= n)
            m = engine.wait(0)
            outs.append(np.array(engine.output_slot(0)[:, :m]))
        return np.concatenate(outs, axis=1)
    finally:
        engine.close()


# ------------------------------------------------------------------ lowering (no GPU)


def test_lowering_passes_the_matrix_as_float64_or_complex128():
    spec = SignalSpec(1000.0, 3, 16)
    st = stages.Mix(matrix=[[1, 2, 3], [4, 5, 6]])
    desc = lower_mix(st, spec, st.output_spec(spec))
    assert desc.kind == "mix" and desc.params["method"] == "auto"
    assert desc.params["matrix"].dtype == np.float64 and desc.params["matrix"].shape == (2, 3)
    st = stages.Mix(matrix=[["1+1j", 0, 0]])
    assert lower_mix(st, spec, st.output_spec(spec)).params["matrix"].dtype == np.complex128


def test_cost_rule_threshold_is_the_w1_size_and_above():
    assert 16 * 64 <= KERNEL_MAX_ENTRIES  # W1 runs the one-launch kernel
    assert 64 * 64 <= KERNEL_MAX_ENTRIES < 65 * 64


# ------------------------------------------------------------------ GPU


@pytest.mark.gpu
def test_w1_mix_16x64_on_64_channels_of_256_samples():
    m = array((16, 64), False, 1)
    x = array((64, 256 * 8 + 100), False, 2).astype(np.float32)
    p = Pipeline([stages.Mix(matrix=m)], sample_rate=48000, block_size=256)
    assert rel_err(p.process(x, backend="cuda"), p.process(x, backend="cpu")) < RTOL


COMBOS = [(False, False), (False, True), (True, False), (True, True)]  # (matrix complex, input complex)


@pytest.mark.gpu
@pytest.mark.parametrize("m_complex,x_complex", COMBOS)
@pytest.mark.parametrize("method", ["kernel", "cublas"])
def test_time_domain_all_dtype_combinations(m_complex, x_complex, method):
    c_out, c_in = 5, 7
    stage = stages.Mix(matrix=array((c_out, c_in), m_complex, 3))
    spec = SignalSpec(1000.0, c_in, 100, "complex64" if x_complex else "float32")
    x = array((c_in, 100 * 3 + 42), x_complex, 4).astype(spec.np_dtype)
    assert rel_err(native_stream(stage, spec, x, method), cpu_stream(stage, spec, x)) < RTOL


@pytest.mark.gpu
@pytest.mark.parametrize("m_complex,x_complex", COMBOS)
@pytest.mark.parametrize("method", ["kernel", "cublas"])
def test_frames_domain_one_matrix(m_complex, x_complex, method):
    stage = stages.Mix(matrix=array((3, 4), m_complex, 5))
    spec = SignalSpec(100.0, 4, 8, "complex64" if x_complex else "float32", "frames", 33)
    x = array((4, 8 * 2 + 5, 33), x_complex, 6).astype(spec.np_dtype)
    assert rel_err(native_stream(stage, spec, x, method), cpu_stream(stage, spec, x)) < RTOL


@pytest.mark.gpu
@pytest.mark.parametrize("m_complex,x_complex", COMBOS)
@pytest.mark.parametrize("method", ["kernel", "cublas"])
def test_frames_domain_one_matrix_per_bin(m_complex, x_complex, method):
    bins = 17
    stage = stages.Mix(matrix=array((bins, 6, 4), m_complex, 7))
    spec = SignalSpec(100.0, 4, 8, "complex64" if x_complex else "float32", "frames", bins)
    x = array((4, 8 * 3 + 3, bins), x_complex, 8).astype(spec.np_dtype)
    assert rel_err(native_stream(stage, spec, x, method), cpu_stream(stage, spec, x)) < RTOL


@pytest.mark.gpu
def test_eager_and_graph_agree_for_cublas():
    stage = stages.Mix(matrix=array((9, 5, 3), True, 9))
    spec = SignalSpec(100.0, 3, 4, "complex64", "frames", 9)
    x = array((3, 4 * 4, 9), True, 10).astype(np.complex64)
    np.testing.assert_array_equal(native_stream(stage, spec, x, "cublas", use_graph=True),
                                  native_stream(stage, spec, x, "cublas", use_graph=False))


@pytest.mark.gpu
def test_large_matrix_auto_picks_cublas_and_matches():
    # 96 x 80 > 4096 entries: cuBLAS through the pipeline's own lowering ("auto")
    m = array((96, 80), False, 11)
    x = array((80, 512 * 2 + 17), False, 12).astype(np.float32)
    p = Pipeline([stages.Mix(matrix=m)], sample_rate=48000, block_size=512)
    assert rel_err(p.process(x, backend="cuda"), p.process(x, backend="cpu")) < RTOL


@pytest.mark.gpu
def test_many_output_rows_and_long_rows_with_the_kernel():
    # more than 8 output rows (several row chunks) and more columns than one grid pass
    stage = stages.Mix(matrix=array((21, 3), False, 13))
    spec = SignalSpec(1000.0, 3, 70000)
    x = array((3, 70000 + 999), False, 14).astype(np.float32)
    assert rel_err(native_stream(stage, spec, x, "kernel"), cpu_stream(stage, spec, x)) < RTOL
