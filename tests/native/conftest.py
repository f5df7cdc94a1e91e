"""Fixtures for the native-layer tests.

The CUDA driver is opened once per process, so tests that need a particular driver (a missing
one, or the fake one in fake_libcuda.c that lets the C++ device/memory/stream code run without a
GPU) run their body in a fresh interpreter through ``run_python``.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pygpukit_dsp import _native
from pygpukit_dsp.capabilities import capabilities

HERE = Path(__file__).resolve().parent
PACKAGE_PARENT = Path(_native.__file__).resolve().parent.parent


PACKAGE_DIR = Path(_native.__file__).resolve().parent

# Registers a bare `pygpukit_dsp` package so that its submodules (_native, errors, _libs,
# capabilities) import without running pygpukit_dsp/__init__.py, which pulls in SciPy and would
# cost each subprocess over a second.
_BARE_PACKAGE = f"""
import sys, types
_pkg = types.ModuleType("pygpukit_dsp")
_pkg.__path__ = [{str(PACKAGE_DIR)!r}]
sys.modules["pygpukit_dsp"] = _pkg
"""


def run_python(code: str, *, full_package: bool = False, **env: str) -> str:
    """Run ``code`` in a new interpreter with extra environment variables; return its stdout.

    Fails the test (showing stderr) when the code exits non-zero. ``full_package`` runs the
    package's __init__ too (by default only the submodules the native layer needs are loaded).
    """
    environ = dict(os.environ)
    environ.update(env)
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(PACKAGE_PARENT)] + [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    source = textwrap.dedent(code)
    if not full_package:
        source = _BARE_PACKAGE + source
    # cwd outside the checkout: `python -c` puts the cwd first on sys.path, and the source tree's
    # pygpukit_dsp (without a built _native when installed with pip) must not shadow the one tested.
    proc = subprocess.run([sys.executable, "-c", source], env=environ, cwd=HERE.anchor,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        pytest.fail(f"subprocess failed (exit {proc.returncode}):\n--- stdout\n{proc.stdout}"
                    f"\n--- stderr\n{proc.stderr}")
    return proc.stdout


@pytest.fixture(scope="session")
def fake_libcuda(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Path of the fake libcuda built from fake_libcuda.c (for GK_LIBCUDA)."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to build the fake CUDA driver")
    out = tmp_path_factory.mktemp("fake_cuda") / "libcuda_fake.so.1"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(out),
                    str(HERE / "fake_libcuda.c")], check=True)
    return str(out)


def _nvrtc_wheel_installed() -> bool:
    for dist in ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12"):
        try:
            importlib.metadata.version(dist)
            return True
        except importlib.metadata.PackageNotFoundError:
            continue
    return False


@pytest.fixture(scope="session")
def nvrtc_available() -> None:
    """NVRTC must be usable. On Linux x86-64 with NVIDIA's NVRTC wheel installed a missing NVRTC
    is a failure (it means the loader is broken), elsewhere a skip."""
    nvrtc = capabilities()["nvrtc"]
    if nvrtc["found"]:
        return
    message = f"NVRTC not available: {nvrtc['reason']}"
    if sys.platform.startswith("linux") and platform.machine() == "x86_64" and _nvrtc_wheel_installed():
        pytest.fail("the nvidia-cuda-nvrtc wheel is installed but the loader did not find it: "
                    + message)
    pytest.skip(message)


@pytest.fixture()
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private on-disk kernel cache and an empty in-memory one."""
    folder = tmp_path / "kernels"
    monkeypatch.setenv("GK_CACHE_DIR", str(folder))
    monkeypatch.delenv("GK_JIT_DISK_CACHE", raising=False)
    _native.clear_jit_memory_cache()
    return folder


@pytest.fixture(scope="session")
def gpu_device() -> "_native.Device":
    return _native.Device(0)
