"""native/core/loader.cpp: run-time loading of the driver, NVRTC, cuFFT and cuBLAS."""

from __future__ import annotations

import os
from pathlib import Path

from pygpukit_dsp import _native

from .conftest import run_python


def test_import_opens_no_cuda_library():
    out = run_python("""
        import pygpukit_dsp
        import pygpukit_dsp._native
        import pygpukit_dsp.capabilities
        maps = open('/proc/self/maps').read()
        print([lib for lib in ('libcuda', 'libnvrtc', 'libcufft', 'libcublas') if lib in maps])
    """, full_package=True)
    assert out.strip() == "[]"


def test_missing_driver_raises_device_error_with_the_reason():
    out = run_python("""
        from pygpukit_dsp import _native
        from pygpukit_dsp.errors import DeviceError
        for call in (lambda: _native.Device(0), _native.device_count):
            try:
                call()
            except DeviceError as exc:
                print('DeviceError:', exc)
        caps = _native.capabilities()
        print('found:', caps['driver']['found'])
        print('reason:', caps['driver']['reason'])
        print('gpus:', caps['gpus'], caps['gpus_reason'])
    """, GK_LIBCUDA="libcuda_that_does_not_exist.so.1")
    lines = out.splitlines()
    assert lines[0].startswith("DeviceError: CUDA driver not detected (libcuda_that_does_not_exist.so.1: ")
    assert "cannot open shared object file" in lines[0]
    assert lines[1].startswith("DeviceError: CUDA driver not detected")
    assert lines[2] == "found: False"
    assert lines[3].startswith("reason: libcuda_that_does_not_exist.so.1: cannot open shared object file")
    assert lines[4].startswith("gpus: [] CUDA driver not detected (")


def test_library_folders_are_searched_before_the_system(nvrtc_available, tmp_path: Path):
    real = _native.capabilities()["nvrtc"]["path"]
    folder = tmp_path / "wheel_lib"
    folder.mkdir()
    (folder / Path(real).name).symlink_to(real)
    out = run_python(f"""
        from pygpukit_dsp import _native
        _native.set_library_dirs([{str(folder)!r}])
        print(_native.capabilities()['nvrtc']['path'])
    """)
    assert out.strip() == str(folder / Path(real).name)


def test_a_broken_library_file_is_reported_with_its_error(tmp_path: Path):
    (tmp_path / "libcufft.so.12").write_bytes(b"this is not an ELF file")
    out = run_python(f"""
        from pygpukit_dsp import _native
        _native.set_library_dirs([{str(tmp_path)!r}])
        status = _native.capabilities()['cufft']
        print(status['found'])
        print(status['reason'])
    """, LD_LIBRARY_PATH="")
    found, reason = out.splitlines()[:2]
    if found == "True":
        # This machine also has cuFFT on the system path (the GPU machine): that copy was used.
        assert reason == ""
    else:
        assert found == "False"
        assert str(tmp_path / "libcufft.so.12") in reason
        assert "ELF" in reason or "too short" in reason


def test_a_broken_driver_file_is_reported_with_its_error(tmp_path: Path):
    broken = tmp_path / "libcuda.so.1"
    broken.write_bytes(b"\0" * 64)
    out = run_python("""
        from pygpukit_dsp import _native
        status = _native.capabilities()['driver']
        print(status['found'])
        print(status['reason'])
    """, GK_LIBCUDA=str(broken))
    found, reason = out.splitlines()[:2]
    assert found == "False"
    assert reason.startswith(str(broken) + ": ")


def test_missing_libraries_name_what_was_searched(tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = run_python(f"""
        from pygpukit_dsp import _native
        _native.set_library_dirs([{str(empty)!r}])
        status = _native.capabilities()['cublas']
        print(status['found'], status['path'] == '')
        print(status['reason'])
    """, LD_LIBRARY_PATH="")
    first, reason = out.splitlines()[:2]
    if first.startswith("True"):
        # This machine has cuBLAS on the system path (the GPU machine): the folder had nothing,
        # so the system copy was used.
        assert "True False" == first
    else:
        assert first == "False True"
        assert "libcublas.so.13 / libcublas.so.12 not found in " + str(empty) in reason


def test_set_library_dirs_round_trips_and_marks_the_loader_configured():
    out = run_python("""
        from pygpukit_dsp import _native
        _native.set_library_dirs(['/a', '/b'])
        print(_native.library_dirs())
    """)
    assert out.strip() == "['/a', '/b']"


def test_first_library_use_configures_the_wheel_folders_automatically():
    out = run_python("""
        from pygpukit_dsp import _native, _libs
        before = _native.library_dirs()
        _native.capabilities()
        print(before == [], _native.library_dirs() == _libs.nvidia_library_dirs())
    """)
    assert out.strip() == "True True"


def test_environment_override_of_library_dirs_reaches_the_loader(tmp_path: Path):
    out = run_python("""
        from pygpukit_dsp import _native
        _native.capabilities()
        print(_native.library_dirs()[0])
    """, GK_CUDA_LIB_DIRS=str(tmp_path))
    assert out.strip() == os.path.abspath(str(tmp_path))


def _cc() -> str:
    import shutil

    import pytest

    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler")
    return compiler


FAKE_NVRTC = r"""
#include <dlfcn.h>
typedef int r;
const char* nvrtcGetErrorString(r e) { (void)e; return "fake"; }
r nvrtcVersion(int* a, int* b) { *a = 13; *b = 0; return 0; }
r nvrtcCreateProgram(void) { return 0; }
r nvrtcDestroyProgram(void) { return 0; }
r nvrtcCompileProgram(void) { return 0; }
r nvrtcGetProgramLogSize(void) { return 0; }
r nvrtcGetProgramLog(void) { return 0; }
r nvrtcGetCUBINSize(void) { return 0; }
r nvrtcGetCUBIN(void) { return 0; }
/* what NVRTC 13.0 does when it compiles: dlopen its builtins by name (its wheel has no RPATH) */
int fake_builtins_found(void) {
    void* h = dlopen("libnvrtc-builtins.so.13.0", RTLD_NOW);
    return h != 0;
}
"""


def test_nvrtc_builtins_next_to_nvrtc_are_found_without_an_rpath(tmp_path: Path):
    import subprocess

    cc = _cc()
    folder = tmp_path / "cu13" / "lib"
    folder.mkdir(parents=True)
    (tmp_path / "nvrtc.c").write_text(FAKE_NVRTC)
    (tmp_path / "builtins.c").write_text("int fake_builtins_marker(void) { return 42; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(folder / "libnvrtc.so.13"), str(tmp_path / "nvrtc.c"),
                    "-ldl"], check=True)
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libnvrtc-builtins.so.13.0", "-o",
                    str(folder / "libnvrtc-builtins.so.13.0"), str(tmp_path / "builtins.c")], check=True)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    out = run_python(f"""
        import ctypes
        from pygpukit_dsp import _native
        _native.set_library_dirs([{str(folder)!r}])
        caps = _native.capabilities(math_libraries=False)
        print(caps['nvrtc']['found'], caps['nvrtc']['version'], caps['nvrtc']['path'])
        print(ctypes.CDLL({str(folder / 'libnvrtc.so.13')!r}).fake_builtins_found())
    """, LD_LIBRARY_PATH=env.get("GK_NO_SUCH_VAR", ""))
    found, flag = out.splitlines()
    assert found == f"True 13.0 {folder / 'libnvrtc.so.13'}"
    assert flag == "1"
