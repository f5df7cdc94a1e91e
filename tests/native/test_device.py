"""native/core/device.cpp: device discovery, properties, SM check, primary context.

Tests marked ``gpu`` use the real GPU; the others drive the same C++ through the fake driver
(tests/native/fake_libcuda.c) in a subprocess.
"""

from __future__ import annotations

import pytest

from pygpukit_dsp import _native

from .conftest import run_python


def test_a_gpu_below_sm80_is_refused_with_a_clear_message(fake_libcuda):
    out = run_python("""
        from pygpukit_dsp import _native
        from pygpukit_dsp.errors import DeviceError
        try:
            _native.Device(0)
        except DeviceError as exc:
            print(exc)
    """, GK_LIBCUDA=fake_libcuda, FAKE_CUDA_SM="7.5", FAKE_CUDA_NAME="NVIDIA T4")
    assert out.strip() == "GPU 0 (NVIDIA T4) is SM 7.5; pygpukit-dsp needs SM 8.0 or newer"


def test_properties_come_from_the_driver(fake_libcuda):
    out = run_python("""
        from pygpukit_dsp import _native
        d = _native.Device(0)
        p = d.properties()
        print(d.name, d.sm, d.arch, d.index)
        print(p['multiprocessors'], p['l2_cache_bytes'], p['max_shared_per_block_optin'],
              p['total_memory'], p['warp_size'])
        print(d.highest_stream_priority, d.lowest_stream_priority)
        print(d.memory_info()[1])
        print(repr(d))
    """, GK_LIBCUDA=fake_libcuda, FAKE_CUDA_SM="8.6", FAKE_CUDA_NAME="NVIDIA A10")
    assert out.splitlines() == [
        "NVIDIA A10 (8, 6) sm_86 0",
        f"132 {50 * 2**20} {227 * 1024} {80 * 2**30} 32",
        "-5 0",
        str(80 * 2**30),
        "<Device 0: NVIDIA A10, sm_86>",
    ]


def test_one_live_device_object_per_index_and_context_released_at_the_end(fake_libcuda):
    out = run_python(f"""
        import ctypes, gc
        from pygpukit_dsp import _native
        fake = ctypes.CDLL({fake_libcuda!r})
        a = _native.Device(0)
        b = _native.Device(0)
        print(a == b, fake.fake_cuda_retained_contexts())
        del a, b
        gc.collect()
        print(fake.fake_cuda_retained_contexts())
    """, GK_LIBCUDA=fake_libcuda)
    assert out.splitlines() == ["True 1", "0"]


def test_an_index_that_does_not_exist_is_a_device_error(fake_libcuda):
    out = run_python("""
        from pygpukit_dsp import _native
        from pygpukit_dsp.errors import DeviceError
        print(_native.device_count())
        try:
            _native.Device(2)
        except DeviceError as exc:
            print(exc)
    """, GK_LIBCUDA=fake_libcuda, FAKE_CUDA_DEVICES="2")
    assert out.splitlines() == ["2", "GPU index 2 does not exist: this machine has 2 GPU(s) (0..1)"]


def test_cuinit_failure_is_reported_with_the_cuda_error(fake_libcuda):
    out = run_python("""
        from pygpukit_dsp import _native
        from pygpukit_dsp.errors import DeviceError
        try:
            _native.Device(0)
        except DeviceError as exc:
            print(exc)
            print(exc.call, exc.code, exc.code_name)
    """, GK_LIBCUDA=fake_libcuda, FAKE_CUDA_INIT_ERROR="100")
    message, attrs = out.splitlines()[:2]
    assert message == ("No GPU devices found (cuInit: CUDA_ERROR_NO_DEVICE, "
                       "no CUDA-capable device is detected)")
    assert attrs == "cuInit 100 CUDA_ERROR_NO_DEVICE"


@pytest.mark.gpu
def test_real_device_properties(gpu_device):
    p = gpu_device.properties()
    assert gpu_device.sm >= _native.MIN_SM
    assert gpu_device.arch == "sm_%d%d" % gpu_device.sm
    assert p["name"] and p["name"] == gpu_device.name
    assert p["total_memory"] > 2**30
    assert p["multiprocessors"] > 0 and p["l2_cache_bytes"] > 0
    assert p["max_shared_per_block_optin"] >= p["max_shared_per_block"] > 0
    assert p["warp_size"] == 32
    free, total = gpu_device.memory_info()
    assert 0 < free <= total == p["total_memory"]
    assert _native.Device(0) == gpu_device
    assert _native.device_count() >= 1
    gpu_device.synchronize()


@pytest.mark.gpu
def test_real_device_matches_capabilities(gpu_device):
    gpu = _native.capabilities()["gpus"][0]
    assert gpu["usable"] and gpu["reason"] == ""
    assert (gpu["name"], gpu["sm"], gpu["memory_bytes"]) == (
        gpu_device.name, gpu_device.sm, gpu_device.properties()["total_memory"])
