"""The custom ``kernel`` stage on CUDA (native/ops/kernel.cpp): NVRTC compile at start, the
argument contract, format changes, partial final blocks, compile errors.

Tolerance: exact where the kernel does one IEEE float product like the NumPy reference.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends.cuda_ops.kernel import lower_kernel
from pygpukit_dsp.errors import CompileError, UnsupportedError
from pygpukit_dsp.signal import SignalSpec

GAIN_SOURCE = """
extern "C" __global__ void scale(const float* in, float* out, long long channels, long long items,
                                 long long row_in, long long row_out, float g) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long c = i / row_out, t = i % row_out;
    if (c < channels && t < items) out[c * row_out + t] = g * in[c * row_in + t];
}
"""

# Sum of the input channels into one complex output channel, tagging invalid items with -1:
# checks channels, items_in, the rows and a format change (channels and dtype).
DOWNMIX_SOURCE = """
extern "C" __global__ void downmix(const float* in, float2* out, long long channels, long long items,
                                   long long row_in, long long row_out) {
    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t >= row_out) return;
    if (t >= items) { out[t] = make_float2(-1.0f, -1.0f); return; }
    float s = 0.0f;
    for (long long c = 0; c < channels; ++c) s += in[c * row_in + t];
    out[t] = make_float2(s, (float)channels);
}
"""


def test_lowering_reads_the_source_file_and_maps_grid_auto(tmp_path):
    (tmp_path / "k.cu").write_text(GAIN_SOURCE)
    st = stages.Kernel(entry="scale", source_file="k.cu", params=[0.5], threads=128, base_dir=tmp_path)
    spec = SignalSpec(1000.0, 2, 64)
    desc = lower_kernel(st, spec, spec)
    assert desc.kind == "kernel" and desc.params["source"] == GAIN_SOURCE
    assert desc.params["entry"] == "scale" and desc.params["threads"] == 128 and desc.params["grid"] == 0
    np.testing.assert_array_equal(desc.params["params"], [0.5])
    st = stages.Kernel(entry="scale", source=GAIN_SOURCE, grid=7)
    assert lower_kernel(st, spec, spec).params["grid"] == 7


@pytest.mark.gpu
@pytest.mark.parametrize("block", [64, 100])
def test_inline_gain_kernel_equals_numpy(block):
    x = np.random.default_rng(block).standard_normal((3, 1000)).astype(np.float32)
    p = Pipeline([stages.Kernel(entry="scale", source=GAIN_SOURCE, params=[0.25], threads=96)],
                 sample_rate=48000, block_size=block, backend="cuda")
    np.testing.assert_array_equal(p.process(x), x * np.float32(0.25))


@pytest.mark.gpu
def test_kernel_from_a_cu_file_next_to_the_yaml(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "gain.cu").write_text(GAIN_SOURCE)
    (tmp_path / "p.yaml").write_text(textwrap.dedent("""
        version: 1
        name: custom
        sample_rate: 48000
        channels: 2
        block_size: 128
        backend: cuda
        stages:
          - type: kernel
            name: halve
            entry: scale
            source_file: kernels/gain.cu
            params: [0.5]
    """))
    p = Pipeline.from_yaml(tmp_path / "p.yaml")
    x = np.random.default_rng(1).standard_normal((2, 500)).astype(np.float32)
    np.testing.assert_array_equal(p.process(x), x * np.float32(0.5))


@pytest.mark.gpu
def test_format_change_and_items_of_the_final_block():
    st = stages.Kernel(entry="downmix", source=DOWNMIX_SOURCE, output={"channels": 1, "dtype": "complex64"})
    p = Pipeline([st], sample_rate=1000, block_size=64, backend="cuda")
    x = np.random.default_rng(2).standard_normal((4, 64 * 2 + 10)).astype(np.float32)
    y = p.process(x)
    assert y.shape == (1, x.shape[1]) and y.dtype == np.complex64
    np.testing.assert_allclose(y.real[0], x.sum(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(y.imag, 4.0)  # channels passed; never an item past items_in


@pytest.mark.gpu
def test_compile_failure_is_a_compile_error_with_name_and_log():
    bad = 'extern "C" __global__ void scale(const float* in) { this is not C++; }'
    p = Pipeline([stages.Kernel(name="broken", entry="scale", source=bad)], sample_rate=1000, channels=1,
                 block_size=32, backend="cuda")
    with pytest.raises(CompileError) as info:
        p.process(np.zeros((1, 64), np.float32))
    assert "broken" in info.value.kernel and "scale" in info.value.kernel
    assert "error" in info.value.log and "broken.cu" in info.value.log


@pytest.mark.gpu
def test_missing_entry_and_wrong_signature_are_compile_errors():
    p = Pipeline([stages.Kernel(name="k", entry="nothere", source=GAIN_SOURCE, params=[1.0])],
                 sample_rate=1000, channels=1, block_size=32, backend="cuda")
    with pytest.raises(CompileError, match="no kernel named 'nothere'"):
        p.process(np.zeros((1, 32), np.float32))
    from pygpukit_dsp import _native

    # The parameter check needs the driver to report a kernel's parameters (cuFuncGetParamInfo,
    # CUDA 12.4); a driver that cannot must say so (None), and then there is nothing to check.
    dev = _native.Device(0)
    sizes = dev.load_cubin(_native.compile("scale_probe", GAIN_SOURCE, dev.arch).cubin).function("scale").parameter_sizes
    driver = tuple(int(v) for v in _native.capabilities()["driver"]["version"].split(".")[:2])
    assert (sizes is None) == (driver < (12, 4))
    if sizes is None:
        return
    assert len(sizes) == 7
    p = Pipeline([stages.Kernel(name="k2", entry="scale", source=GAIN_SOURCE)],  # no float param given
                 sample_rate=1000, channels=1, block_size=32, backend="cuda")
    with pytest.raises(CompileError, match="takes 7 parameters"):
        p.process(np.zeros((1, 32), np.float32))


@pytest.mark.gpu
def test_too_many_threads_for_the_kernel_is_refused_before_the_first_block():
    # 1024 threads of a kernel that allows fewer (its launch bounds say 256): refused at start,
    # not mid-stream.
    heavy = """
    extern "C" __global__ void __launch_bounds__(256) heavy(const float* in, float* out, long long channels,
                                                            long long items, long long row_in, long long row_out) {
        float acc[64];
        long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
        if (i >= channels * row_out) return;
        #pragma unroll
        for (int k = 0; k < 64; ++k) acc[k] = in[i] * (k + 1);
        float s = 0;
        #pragma unroll
        for (int r = 0; r < 64; ++r) { for (int k = 0; k < 64; ++k) acc[k] = acc[k] * acc[(k + r) & 63] + 1.0f; }
        for (int k = 0; k < 64; ++k) s += acc[k];
        out[i] = s;
    }
    """
    from pygpukit_dsp import _native

    limit = _native.Device(0).load_cubin(
        _native.compile("heavy_probe", heavy, _native.Device(0).arch).cubin).function("heavy").max_threads_per_block
    assert limit <= 256
    p = Pipeline([stages.Kernel(name="h", entry="heavy", source=heavy, threads=1024)], sample_rate=1000,
                 channels=1, block_size=32, backend="cuda")
    with pytest.raises(UnsupportedError, match="threads"):
        p.process(np.zeros((1, 32), np.float32))


# One thread per channel walks its row in order, carrying the running sum in the state buffer
# (one float per channel) from block to block.
RUNNING_SUM_SOURCE = """
extern "C" __global__ void running_sum(const float* in, float* out, long long channels, long long items,
                                       long long row_in, long long row_out, float* state) {
    long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (c >= channels) return;
    float acc = state[c];
    for (long long t = 0; t < items; ++t) {
        acc += in[c * row_in + t];
        out[c * row_out + t] = acc;
    }
    state[c] = acc;
}
"""

# A leaky integrator acc = a * acc + x: the float param comes before the state pointer.
LEAKY_SOURCE = """
extern "C" __global__ void leaky(const float* in, float* out, long long channels, long long items,
                                 long long row_in, long long row_out, float a, float* state) {
    long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (c >= channels) return;
    float acc = state[c];
    for (long long t = 0; t < items; ++t) {
        acc = a * acc + in[c * row_in + t];
        out[c * row_out + t] = acc;
    }
    state[c] = acc;
}
"""


def _running_sum_stage(channels: int) -> stages.Kernel:
    return stages.Kernel(name="rsum", entry="running_sum", source=RUNNING_SUM_SOURCE, threads=32, grid=1,
                         state={"shape": [channels], "dtype": "float32"})


@pytest.mark.gpu
@pytest.mark.parametrize("block", [64, 100])
def test_kernel_state_is_kept_between_blocks(block):
    # 1000 samples: full blocks and a short last one; the sum runs on across every block boundary
    x = np.random.default_rng(block).standard_normal((3, 1000)).astype(np.float32)
    p = Pipeline([_running_sum_stage(3)], sample_rate=48000, block_size=block, backend="cuda")
    y = p.process(x)
    # float32 sums in the same order as np.cumsum's (sequential); tolerance for contraction
    np.testing.assert_allclose(y, np.cumsum(x, axis=1, dtype=np.float32), rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
def test_kernel_state_after_params_and_reset_zeroes_it():
    from pygpukit_dsp.backends import BackendChoice
    from pygpukit_dsp.backends.cuda_engine import CudaEngine

    st = stages.Kernel(name="leak", entry="leaky", source=LEAKY_SOURCE, params=[0.5], threads=32, grid=1,
                       state={"shape": 2})
    p = Pipeline([st], sample_rate=1000, channels=2, block_size=32)
    x = np.random.default_rng(4).standard_normal((2, 96)).astype(np.float32)
    ref = np.empty_like(x)
    acc = np.zeros(2, np.float32)
    for t in range(x.shape[1]):
        acc = np.float32(0.5) * acc + x[:, t]
        ref[:, t] = acc
    eng = CudaEngine(p, p.specs(), BackendChoice("cuda", "test"))
    try:
        ys = [eng.process(x[:, i:i + 32]) for i in range(0, 96, 32)]
        np.testing.assert_allclose(np.concatenate(ys, axis=1), ref, rtol=1e-5, atol=1e-5)
        eng.reset()  # state zeroed: the first block's output again
        np.testing.assert_allclose(eng.process(x[:, :32]), ys[0], rtol=0, atol=0)
    finally:
        eng.close()


@pytest.mark.gpu
def test_declared_state_needs_the_state_argument():
    from pygpukit_dsp import _native

    dev = _native.Device(0)
    sizes = dev.load_cubin(_native.compile("scale_probe2", GAIN_SOURCE, dev.arch).cubin).function("scale").parameter_sizes
    if sizes is None:
        pytest.skip("this driver does not report a kernel's parameters (cuFuncGetParamInfo, CUDA 12.4)")
    p = Pipeline([stages.Kernel(name="k3", entry="scale", source=GAIN_SOURCE, params=[1.0], state={"shape": 1})],
                 sample_rate=1000, channels=1, block_size=32, backend="cuda")
    with pytest.raises(CompileError, match="S\\* state"):
        p.process(np.zeros((1, 32), np.float32))
