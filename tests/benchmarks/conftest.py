"""Fixtures for the benchmark scripts' tests."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE_TESTS = Path(__file__).resolve().parents[1] / "backends" / "test_cuda_engine.py"
# benchmarks/ itself: the studies package (benchmarks/studies) the scripts beside it import
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))


@pytest.fixture(scope="session")
def fake_engine_driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fake driver with graph capture and mapped host memory, as test_cuda_engine.py builds it
    (the realtime engine's defaults)."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to build the fake CUDA driver")
    from pygpukit_dsp.capabilities import capabilities

    if not capabilities()["nvrtc"]["found"]:
        pytest.skip("NVRTC is needed to compile the ops' kernels (pip install nvidia-cuda-nvrtc)")
    spec = importlib.util.spec_from_file_location("_gk_engine_tests_bench", ENGINE_TESTS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    folder = tmp_path_factory.mktemp("fake_engine_driver")
    (folder / "graph_api.c").write_text(mod.FAKE_GRAPH_API)
    (folder / "mapped_api.c").write_text(mod.FAKE_MAPPED_API)
    out = folder / "libcuda_fake.so.1"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-DcuDeviceGetAttribute=fake_base_cuDeviceGetAttribute",
                    "-DcuMemHostAlloc=fake_base_cuMemHostAlloc", "-o", str(out), str(mod.FAKE_DRIVER_SOURCE),
                    str(folder / "graph_api.c"), str(folder / "mapped_api.c")], check=True)
    return str(out)
