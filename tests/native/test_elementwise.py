"""native/ops/kernels/elementwise.cu on the GPU, against NumPy.

Exact equality where the GPU does the same single IEEE operation as NumPy (x*g, x*x, |x|);
tolerances where NVRTC contracts a*b+c*d into FMAs or uses its own hypotf/log10f.
"""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import _native

pytestmark = pytest.mark.gpu

N = 1_000_003  # odd: exercises the vector body and the scalar tail
BLOCK = 256


@pytest.fixture(scope="module")
def module(gpu_device):
    return gpu_device.load_module("elementwise")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(20240607)
    real = rng.standard_normal(N).astype(np.float32) * 3
    real[:5] = [0.0, -0.0, -2.0, 1e-30, 4.0]
    cplx = (rng.standard_normal(N) + 1j * rng.standard_normal(N)).astype(np.complex64)
    cplx[:3] = [0, 1e-20 + 0j, 3 - 4j]
    return real, cplx


def upload(device, array: np.ndarray) -> "_native.DeviceBuffer":
    buf = _native.DeviceBuffer(device, array.nbytes)
    buf.copy_from_host(np.ascontiguousarray(array))
    return buf


def download(buf, dtype, n: int) -> np.ndarray:
    out = np.empty(n, dtype)
    buf.copy_to_host(out)
    return out


def grid_for(n: int) -> int:
    return max(1, min((n + BLOCK - 1) // BLOCK, 4096))


def run(device, module, name: str, x: np.ndarray, out_dtype, *scalars, n: int | None = None):
    n = x.size if n is None else n
    xb = upload(device, x)
    yb = _native.DeviceBuffer(device, max(1, n * np.dtype(out_dtype).itemsize))
    stream = _native.Stream(device)
    module.function(name).launch(grid_for(n), BLOCK, [yb, xb, *scalars, np.uint64(n)], stream=stream)
    stream.synchronize()
    return download(yb, out_dtype, n)


def test_gain_f32(gpu_device, module, data):
    x, _ = data
    y = run(gpu_device, module, "gk_gain_f32", x, np.float32, np.float32(1.5))
    np.testing.assert_array_equal(y, x * np.float32(1.5))


def test_gain_c64(gpu_device, module, data):
    _, x = data
    g = np.complex64(0.5 - 2j)
    y = run(gpu_device, module, "gk_gain_c64", x, np.complex64, g)
    np.testing.assert_allclose(y, x * g, rtol=1e-6, atol=1e-5)


def test_power_f32(gpu_device, module, data):
    x, _ = data
    np.testing.assert_array_equal(run(gpu_device, module, "gk_power_f32", x, np.float32), x * x)


def test_power_c64(gpu_device, module, data):
    _, x = data
    y = run(gpu_device, module, "gk_power_c64", x, np.float32)
    np.testing.assert_allclose(y, (x.real * x.real + x.imag * x.imag), rtol=1e-6, atol=1e-30)


def test_magnitude_f32(gpu_device, module, data):
    x, _ = data
    np.testing.assert_array_equal(run(gpu_device, module, "gk_magnitude_f32", x, np.float32), np.abs(x))


def test_magnitude_c64(gpu_device, module, data):
    _, x = data
    y = run(gpu_device, module, "gk_magnitude_c64", x, np.float32)
    np.testing.assert_allclose(y, np.abs(x), rtol=1e-6, atol=1e-30)
    assert y[2] == 5.0


@pytest.mark.parametrize("scale, ref, floor_db", [(20.0, 2.0, -80.0), (10.0, 1.0, -120.0)])
def test_db_f32(gpu_device, module, data, scale, ref, floor_db):
    x, _ = data
    y = run(gpu_device, module, "gk_db_f32", x, np.float32, np.float32(scale), np.float32(ref),
            np.float32(floor_db))
    with np.errstate(divide="ignore"):
        expected = np.maximum(scale * np.log10(np.abs(x.astype(np.float64)) / ref), floor_db)
    np.testing.assert_allclose(y, expected.astype(np.float32), rtol=0, atol=2e-4)
    assert y[0] == y[1] == floor_db  # log10(0) -> floor


def test_power_db_c64(gpu_device, module, data):
    _, x = data
    y = run(gpu_device, module, "gk_power_db_c64", x, np.float32, np.float32(0.5), np.float32(-150.0))
    with np.errstate(divide="ignore"):
        expected = np.maximum(10 * np.log10(np.abs(x.astype(np.complex128)) ** 2 / 0.5), -150.0)
    np.testing.assert_allclose(y, expected.astype(np.float32), rtol=0, atol=2e-4)
    assert y[0] == -150.0


def test_in_place(gpu_device, module, data):
    x, _ = data
    buf = upload(gpu_device, x)
    module.function("gk_gain_f32").launch(grid_for(N), BLOCK, [buf, buf, np.float32(-2), np.uint64(N)])
    gpu_device.synchronize()
    np.testing.assert_array_equal(download(buf, np.float32, N), x * np.float32(-2))


def test_unaligned_pointers_take_the_scalar_path(gpu_device, module, data):
    x, xc = data
    n = 1001
    xb, yb = upload(gpu_device, x[: n + 1]), _native.DeviceBuffer(gpu_device, (n + 1) * 4)
    yb.memset(0)
    # Both pointers 4 bytes past a 16-byte boundary.
    module.function("gk_gain_f32").launch(
        grid_for(n), BLOCK, [np.uint64(yb.ptr + 4), np.uint64(xb.ptr + 4), np.float32(3), np.uint64(n)])
    gpu_device.synchronize()
    y = download(yb, np.float32, n + 1)
    assert y[0] == 0.0
    np.testing.assert_array_equal(y[1:], x[1 : n + 1] * np.float32(3))
    # Complex input 8 bytes past a 16-byte boundary.
    cb, pb = upload(gpu_device, xc[: n + 1]), _native.DeviceBuffer(gpu_device, (n + 1) * 4)
    module.function("gk_power_c64").launch(
        grid_for(n), BLOCK, [np.uint64(pb.ptr + 4), np.uint64(cb.ptr + 8), np.uint64(n)])
    gpu_device.synchronize()
    p = download(pb, np.float32, n + 1)[1:]
    np.testing.assert_allclose(p, np.abs(xc[1 : n + 1]) ** 2, rtol=2e-6)


def test_one_small_block_covers_any_length(gpu_device, module, data):
    x, _ = data
    xb, yb = upload(gpu_device, x), _native.DeviceBuffer(gpu_device, x.nbytes)
    module.function("gk_power_f32").launch(1, 32, [yb, xb, np.uint64(N)])
    gpu_device.synchronize()
    np.testing.assert_array_equal(download(yb, np.float32, N), x * x)


def test_zero_length_writes_nothing(gpu_device, module):
    yb = _native.DeviceBuffer(gpu_device, 16)
    yb.memset(0x7F)
    xb = _native.DeviceBuffer(gpu_device, 16)
    module.function("gk_gain_f32").launch(1, BLOCK, [yb, xb, np.float32(0), np.uint64(0)])
    gpu_device.synchronize()
    assert (download(yb, np.uint8, 16) == 0x7F).all()


def test_kernel_parameters_are_known_to_the_driver(module):
    sizes = module.function("gk_db_f32").parameter_sizes
    assert sizes is None or sizes == [8, 8, 4, 4, 4, 8]
