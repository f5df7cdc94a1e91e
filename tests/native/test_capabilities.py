"""pygpukit_dsp/capabilities.py and native/core/capabilities.cpp."""

from __future__ import annotations

import sys

import pytest

from pygpukit_dsp import _native
from pygpukit_dsp.capabilities import capabilities, cuda_usable, summary_lines, usable_from

from .conftest import run_python

LIBRARIES = ("driver", "nvrtc", "cufft", "cublas")


def _caps(**overrides):
    caps = {
        "native": {"found": True, "path": "/x/_native.so", "version": "", "reason": ""},
        "driver": {"found": True, "path": "/lib/libcuda.so.1", "version": "13.0", "reason": ""},
        "nvrtc": {"found": True, "path": "/w/libnvrtc.so.13", "version": "13.0", "reason": "",
                  "archs": [80, 90]},
        "cufft": {"found": True, "path": "/w/libcufft.so.12", "version": "12.0.0", "reason": ""},
        "cublas": {"found": True, "path": "/w/libcublas.so.13", "version": "13.0.0", "reason": ""},
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "sm": (9, 0), "arch": "sm_90",
                  "memory_bytes": 80 * 2**30, "multiprocessors": 132, "usable": True, "reason": ""}],
        "gpus_reason": "",
    }
    caps.update(overrides)
    return caps


def test_every_library_is_either_found_or_has_a_reason():
    caps = capabilities()
    for name in LIBRARIES + ("native",):
        entry = caps[name]
        assert set(entry) >= {"found", "path", "version", "reason"}
        assert entry["found"] == (entry["reason"] == ""), name
    assert isinstance(caps["nvrtc"]["archs"], list)
    if caps["gpus"]:
        assert caps["gpus_reason"] == ""
        for gpu in caps["gpus"]:
            assert set(gpu) >= {"index", "name", "sm", "memory_bytes", "multiprocessors", "usable",
                                "reason"}
    else:
        assert caps["gpus_reason"]


def test_without_a_driver_cuda_usable_says_driver_not_detected():
    out = run_python("""
        from pygpukit_dsp.capabilities import cuda_usable
        print(cuda_usable())
    """, GK_LIBCUDA="libcuda_missing_for_test.so.1")
    assert out.startswith("(False, 'CUDA driver not detected (libcuda_missing_for_test.so.1: "
                          "cannot open shared object file")


def test_capabilities_without_the_native_module_reports_why(monkeypatch):
    import pygpukit_dsp

    monkeypatch.delattr(pygpukit_dsp, "_native", raising=False)
    monkeypatch.setitem(sys.modules, "pygpukit_dsp._native", None)
    caps = capabilities()
    for name in LIBRARIES + ("native",):
        assert caps[name]["found"] is False
        assert "pygpukit_dsp._native is not available" in caps[name]["reason"]
    ok, why = usable_from(caps)
    assert not ok and "pygpukit_dsp._native is not available" in why


def test_sm_refusal_message():
    assert _native.sm_refusal(0, "NVIDIA T4", 7, 5) == (
        "GPU 0 (NVIDIA T4) is SM 7.5; pygpukit-dsp needs SM 8.0 or newer")
    assert _native.sm_refusal(1, "Tesla V100", 7, 0).startswith("GPU 1 (Tesla V100) is SM 7.0;")
    for sm in ((8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)):
        assert _native.sm_refusal(0, "GPU", *sm) is None
    assert _native.MIN_SM == (8, 0)


@pytest.mark.parametrize("overrides, expected", [
    ({"driver": {"found": False, "path": "", "version": "",
                 "reason": "libcuda.so.1: cannot open shared object file"}},
     "CUDA driver not detected (libcuda.so.1: cannot open shared object file)"),
    ({"gpus": [], "gpus_reason": "No GPU devices found (cuDeviceGetCount == 0)"},
     "No GPU devices found (cuDeviceGetCount == 0)"),
    ({"gpus": [{"index": 0, "name": "NVIDIA T4", "sm": (7, 5), "arch": "sm_75",
                "memory_bytes": 16 * 2**30, "multiprocessors": 40, "usable": False,
                "reason": "GPU 0 (NVIDIA T4) is SM 7.5; pygpukit-dsp needs SM 8.0 or newer"}]},
     "GPU 0 (NVIDIA T4) is SM 7.5; pygpukit-dsp needs SM 8.0 or newer"),
    ({"nvrtc": {"found": False, "path": "", "version": "", "reason": "libnvrtc.so.13 not found",
                "archs": []}},
     "NVRTC JIT compiler not available (libnvrtc.so.13 not found)"),
])
def test_cuda_usable_reasons(overrides, expected):
    assert usable_from(_caps(**overrides)) == (False, expected)


def test_cuda_usable_names_the_gpu_when_it_is_usable():
    assert usable_from(_caps()) == (
        True, "GPU 0 (NVIDIA H100 80GB HBM3), SM 9.0, driver 13.0, NVRTC 13.0")


KERNELS = {"found": True, "enabled": True, "dir": "/x/_kernels", "nvrtc": "13.0",
           "archs": ["sm_80", "sm_86", "sm_89", "sm_90"], "ptx": ["compute_90"], "images": 65, "kernels": 13,
           "reason": ""}
NO_NVRTC = {"found": False, "path": "", "version": "", "reason": "libnvrtc.so.13 not found", "archs": []}


def test_shipped_kernels_make_nvrtc_optional_for_the_gpus_they_cover():
    assert usable_from(_caps(nvrtc=NO_NVRTC, kernels=KERNELS)) == (
        True, "GPU 0 (NVIDIA H100 80GB HBM3), SM 9.0, driver 13.0, kernels shipped (sm_90); no NVRTC")
    blackwell = [dict(_caps()["gpus"][0], sm=(12, 0), arch="sm_120", name="RTX")]
    assert usable_from(_caps(nvrtc=NO_NVRTC, kernels=KERNELS, gpus=blackwell))[1].endswith(
        "kernels shipped (compute_90); no NVRTC")
    # with NVRTC the verdict is unchanged
    assert usable_from(_caps(kernels=KERNELS))[1].endswith("NVRTC 13.0")
    for kernels in (dict(KERNELS, enabled=False), dict(KERNELS, found=False), None):
        assert usable_from(_caps(nvrtc=NO_NVRTC, kernels=kernels)) == (
            False, "NVRTC JIT compiler not available (libnvrtc.so.13 not found)")


def test_shipped_image_for_picks_the_cubin_then_the_newest_older_ptx():
    from pygpukit_dsp.capabilities import shipped_image_for

    assert shipped_image_for(KERNELS, 86) == "sm_86"
    assert shipped_image_for(KERNELS, 100) == "compute_90"
    assert shipped_image_for(KERNELS, 87) is None  # no sm_87 CUBIN, and compute_90 is newer
    assert shipped_image_for(dict(KERNELS, ptx=["compute_80", "compute_90"]), 87) == "compute_80"


def test_cuda_usable_refuses_a_gpu_index_that_does_not_exist():
    assert usable_from(_caps(), device=3) == (
        False, "GPU 3 does not exist: this machine has 1 GPU(s) (0..0)")


def test_summary_lines_cover_libraries_and_gpus():
    lines = summary_lines(_caps(cufft={"found": False, "path": "", "version": "",
                                      "reason": "libcufft.so.12 not found"}))
    assert "cufft: missing (libcufft.so.12 not found)" in lines
    assert "driver: found 13.0 /lib/libcuda.so.1" in lines
    assert lines[-1] == "GPU 0: NVIDIA H100 80GB HBM3, SM 9.0, 80.0 GiB, 132 SMs (usable)"
    lines = summary_lines(_caps(kernels=KERNELS))
    assert ("kernels: 65 images of 13 kernels shipped: sm_80 sm_86 sm_89 sm_90 + PTX compute_90 "
            "(NVRTC 13.0)") in lines


def test_cuda_usable_agrees_with_capabilities():
    assert cuda_usable() == usable_from(capabilities())


def test_a_fake_sm75_gpu_is_listed_as_unusable_with_the_refusal(fake_libcuda):
    out = run_python("""
        from pygpukit_dsp.capabilities import capabilities, cuda_usable
        gpu = capabilities()['gpus'][0]
        print(gpu['name'], gpu['sm'], gpu['usable'])
        print(cuda_usable()[1])
    """, GK_LIBCUDA=fake_libcuda, FAKE_CUDA_SM="7.5", FAKE_CUDA_NAME="NVIDIA T4")
    assert out.splitlines() == [
        "NVIDIA T4 (7, 5) False",
        "GPU 0 (NVIDIA T4) is SM 7.5; pygpukit-dsp needs SM 8.0 or newer",
    ]


def test_a_driver_without_gpus_reports_no_device(fake_libcuda):
    out = run_python("""
        from pygpukit_dsp import _native
        caps = _native.capabilities()
        print(caps['driver']['found'], caps['driver']['version'], caps['gpus'])
        print(caps['gpus_reason'])
    """, GK_LIBCUDA=fake_libcuda, FAKE_CUDA_INIT_ERROR="100")
    first, reason = out.splitlines()[:2]
    assert first == "True 13.0 []"
    assert reason.startswith("No GPU devices found (cuInit: CUDA_ERROR_NO_DEVICE")
