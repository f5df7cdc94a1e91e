"""What an engine does before its first block (docs/benchmarks.md, "First block"): kernels from
the images shipped in the wheel (no NVRTC call with an empty disk cache), the edges and slots
from one up-front pool grant, and the constructor's steps timed (build_timings).

The fake-driver tests run the native engine without a GPU (tests/native/fake_libcuda.c plus the
graph entry points of test_cuda_engine.py); the `gpu` test runs W1 and W2 in a fresh process with
an empty kernel cache on the GPU machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pygpukit_dsp import _native

from .test_cuda_engine import fake_driver, last_json, run_python  # noqa: F401 (fixture)

REPO = Path(__file__).resolve().parents[2]


def _need_shipped() -> None:
    if not _native.shipped_kernels()["found"]:
        pytest.skip(f"this build ships no kernels: {_native.shipped_kernels()['reason']}")


FAKE_ENGINE = r"""
import json
import numpy as np
from pygpukit_dsp import _native
dev = _native.Device(0)

def op(kind, params, name):
    return {"kind": kind, "name": name, "in": (3, 4096, 0, "float32"), "out": (3, 4096, 0, "float32"),
            "params": params}

before = dev.memory_stats()
e = _native.StreamEngine(dev, [op("gain", {"factor": 2.0}, "g"), op("delay", {"delays": np.array([1.0, 2.0, 3.0])}, "d")],
                         slots=2)
after = dev.memory_stats()
x = np.ones((3, 4096), np.float32)
e.process(0, x)
print(json.dumps({"stats": _native.jit_stats(), "loads": _native.kernel_loads(),
                  "steps": [s for s, _ in e.build_timings], "ms": [m for _, m in e.build_timings],
                  "grants": after["grants"] - before["grants"],
                  "granted": after["granted_bytes"] - before["granted_bytes"],
                  "allocations": after["driver_allocations"] - before["driver_allocations"]}))
e.close()
"""


def test_an_engine_with_an_empty_disk_cache_loads_shipped_kernels_and_calls_no_nvrtc(fake_driver, tmp_path):
    _need_shipped()
    cache = tmp_path / "cache"
    res = last_json(run_python(FAKE_ENGINE, GK_LIBCUDA=fake_driver, GK_CACHE_DIR=str(cache)))
    assert res["stats"]["nvrtc_compiles"] == 0 and res["stats"]["compiles"] == 0
    # the ops' kernels, and the io kernels (every engine checks its input for NaN/Inf on the GPU)
    assert {(x["kernel"], x["source"], x["image"]) for x in res["loads"]} == {
        ("elementwise", "shipped", "sm_90"), ("delay", "shipped", "sm_90"), ("io", "shipped", "sm_90")}
    assert not cache.exists() or not any(cache.iterdir())


def test_the_edges_and_slots_come_from_one_up_front_grant(fake_driver, tmp_path):
    res = last_json(run_python(FAKE_ENGINE, GK_LIBCUDA=fake_driver, GK_CACHE_DIR=str(tmp_path)))
    block = 3 * 4096 * 4
    # one edge (gain -> delay) and two slots' device input and output: five blocks, one grant
    assert res["grants"] == 1 and res["granted"] == 5 * block
    steps = res["steps"]
    assert steps == ["io kernels", "streams", "op g (gain)", "op d (delay)", "device buffers", "slots",
                     "slots: pinned allocation", "slots: pinned zero fill", "buffer zeroing (GPU)",
                     "warm-up block", "graph capture"]
    assert all(ms >= 0 for ms in res["ms"])


@pytest.mark.gpu
def test_gpu_w1_and_w2_with_an_empty_disk_cache_load_shipped_cubins_and_make_no_nvrtc_call(tmp_path):
    """In a fresh process with an empty kernel cache: every kernel module W1 and W2 load is the
    shipped CUBIN of the GPU's own architecture, and NVRTC is never called (counted by jit_stats)."""
    _need_shipped()
    cache = tmp_path / "cache"
    code = f"""
        import json
        import numpy as np
        from pygpukit_dsp import Pipeline, _native
        from pygpukit_dsp.backends import open_backend
        out = {{"arch": _native.Device(0).arch}}
        for name in ("w1", "w2"):
            p = Pipeline.from_yaml({str(REPO / "benchmarks")!r} + "/" + name + ".yaml")
            chain = p.specs()
            e = open_backend(p, chain, "cuda")
            y = e.process(np.zeros(chain.input.block_shape, chain.input.np_dtype))
            out[name] = [list(y.shape), bool(np.all(np.isfinite(y)))]
            e.close()
        out["stats"] = _native.jit_stats()
        out["loads"] = _native.kernel_loads()
        print(json.dumps(out))
    """
    res = last_json(run_python(code, GK_CACHE_DIR=str(cache), timeout=300))
    assert res["w1"] == [[16, 256], True] and res["w2"][1]
    stats = res["stats"]
    assert stats["nvrtc_compiles"] == 0, stats
    assert stats["compiles"] == 0 and stats["shipped_hits"] >= 2 and stats["shipped_load_errors"] == 0
    assert res["loads"], "no kernel module was loaded"
    assert {(x["source"], x["image"]) for x in res["loads"]} == {("shipped", res["arch"])}, res["loads"]
    kernels = {x["kernel"] for x in res["loads"]}
    # W2's STFT, and W1's fused FIR + mix in the variant this GPU runs (fir_mix_cluster on Hopper)
    assert "stft" in kernels and kernels & {"fir_mix", "fir_mix_cluster"}, kernels
    assert not cache.exists() or not any(cache.iterdir())


# cuFFT and cuBLAS stand-ins that count what is made (opened through the loader's folders).
FAKE_MATH = r"""
#include <stdlib.h>
static long g_plans = 0, g_handles = 0, g_destroyed = 0;
long fake_plans_made(void) { return g_plans; }
long fake_handles_made(void) { return g_handles; }
long fake_destroyed(void) { return g_destroyed; }
int cufftGetProperty(int type, int* value) { *value = type == 0 ? 12 : 0; return 0; }
int cufftCreate(int* plan) { static int next = 1; *plan = next++; return 0; }
int cufftDestroy(int plan) { (void)plan; ++g_destroyed; return 0; }
int cufftSetAutoAllocation(int plan, int on) { (void)plan; (void)on; return 0; }
int cufftSetWorkArea(int plan, void* area) { (void)plan; (void)area; return 0; }
int cufftMakePlanMany64(int plan, int rank, long long* n, long long* inembed, long long istride,
                        long long idist, long long* onembed, long long ostride, long long odist, int type,
                        long long batch, size_t* work) {
    (void)plan; (void)rank; (void)n; (void)inembed; (void)istride; (void)idist; (void)onembed;
    (void)ostride; (void)odist; (void)type; (void)batch; ++g_plans; *work = 4096; return 0; }
int cufftSetStream(int plan, void* s) { (void)plan; (void)s; return 0; }
int cufftExecC2C(int plan, void* i, void* o, int d) { (void)plan; (void)i; (void)o; (void)d; return 0; }
int cufftExecR2C(int plan, void* i, void* o) { (void)plan; (void)i; (void)o; return 0; }
int cufftExecC2R(int plan, void* i, void* o) { (void)plan; (void)i; (void)o; return 0; }
int cublasGetProperty(int type, int* value) { *value = type == 0 ? 13 : 0; return 0; }
int cublasCreate_v2(void** h) { *h = malloc(8); ++g_handles; return 0; }
int cublasDestroy_v2(void* h) { free(h); ++g_destroyed; return 0; }
int cublasSetStream_v2(void* h, void* s) { (void)h; (void)s; return 0; }
int cublasSetWorkspace_v2(void* h, void* w, size_t n) { (void)h; (void)w; (void)n; return 0; }
int cublasSetMathMode(void* h, int m) { (void)h; (void)m; return 0; }
int cublasSgemm_v2(void) { return 0; }
int cublasCgemm_v2(void) { return 0; }
int cublasSgemmStridedBatched(void) { return 0; }
int cublasCgemmStridedBatched(void) { return 0; }
"""


@pytest.fixture(scope="module")
def fake_math_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    import shutil
    import subprocess

    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler")
    folder = tmp_path_factory.mktemp("fake_math")
    (folder / "math.c").write_text(FAKE_MATH)
    lib = folder / "libfakemath.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(lib), str(folder / "math.c")], check=True)
    for name in ("libcufft.so.12", "libcublas.so.13", "libcublasLt.so.13"):
        (folder / name).symlink_to(lib)
    return str(folder)


def test_plans_and_handles_are_made_once_per_shape_and_reused_by_the_next_engine(fake_driver, fake_math_dir,
                                                                                  tmp_path):
    code = f"""
        import ctypes, json
        import numpy as np
        from pygpukit_dsp import Pipeline, _libs, _native, stages
        from pygpukit_dsp.backends.cuda_engine import op_dict
        from pygpukit_dsp.backends.cuda_lowering import lower_pipeline
        _native.set_library_dirs([{fake_math_dir!r}])
        _libs._configured = True
        math = ctypes.CDLL({fake_math_dir!r} + "/libcufft.so.12")
        dev = _native.Device(0)
        p = Pipeline([stages.Stft(nfft=256, hop=256)], sample_rate=48000, channels=2, block_size=1024)
        ops = [op_dict(o) for o in lower_pipeline(p, p.specs())]
        mix = {{"kind": "mix", "name": "m", "in": (4, 256, 0, "float32"), "out": (4, 256, 0, "float32"),
               "params": {{"matrix": np.eye(4), "method": "cublas"}}}}
        rows = []
        for _ in range(3):
            for spec in (ops, [mix]):
                e = _native.StreamEngine(dev, spec)
                e.close()
                del e
            rows.append([math.fake_plans_made(), math.fake_handles_made(), math.fake_destroyed(),
                         dev.library_objects()])
        dev.clear_library_objects()
        rows.append([math.fake_destroyed(), dev.library_objects()["idle"]])
        print(json.dumps(rows))
    """
    rows = last_json(run_python(code, GK_LIBCUDA=fake_driver, GK_CACHE_DIR=str(tmp_path)))
    plans, handles = rows[0][0], rows[0][1]
    assert plans >= 1 and handles == 1
    made = rows[0][3]["made"]
    assert made == plans + handles and rows[0][3]["idle"] == made  # kept when the engine closed
    for row in rows[1:3]:
        # the second and third engines plan nothing and create no handle: all taken idle
        assert row[:3] == [plans, handles, 0]
        assert row[3]["made"] == made and row[3]["idle"] == made
    assert rows[2][3]["reused"] == 2 * made
    assert rows[3] == [made, 0]  # clearing destroys every idle plan and handle


def test_out_of_memory_destroys_the_idle_plans_before_it_gives_up(fake_driver, fake_math_dir, tmp_path):
    code = f"""
        import json
        from pygpukit_dsp import Pipeline, _libs, _native, stages
        from pygpukit_dsp.backends.cuda_engine import op_dict
        from pygpukit_dsp.backends.cuda_lowering import lower_pipeline
        _native.set_library_dirs([{fake_math_dir!r}])
        _libs._configured = True
        dev = _native.Device(0)
        p = Pipeline([stages.Stft(nfft=256, hop=256)], sample_rate=48000, channels=2, block_size=1024)
        e = _native.StreamEngine(dev, [op_dict(o) for o in lower_pipeline(p, p.specs())])
        e.close()
        del e
        idle = dev.library_objects()["idle"]
        big = _native.DeviceBuffer(dev, 999_000)   # fits only once the idle plan's work area is gone
        print(json.dumps([idle, dev.library_objects(), dev.memory_stats()["in_use_bytes"]]))
    """
    idle, objects, in_use = last_json(run_python(code, GK_LIBCUDA=fake_driver, GK_CACHE_DIR=str(tmp_path),
                                                 FAKE_CUDA_ALLOC_LIMIT="1000000"))
    assert idle == 1 and objects["idle"] == 0 and objects["destroyed"] == 1
    assert in_use == 999_424  # the 999000-byte request's size class, alone


def test_a_pinned_input_slot_is_zeroed_when_first_used_not_when_built(fake_driver, tmp_path):
    code = """
        import json
        import numpy as np
        from pygpukit_dsp import _native
        dev = _native.Device(0)
        spec = [{"kind": "delay", "name": "d", "in": (2, 4096, 0, "float32"), "out": (2, 4096, 0, "float32"),
                 "params": {"delays": np.zeros(2)}}]
        res = []
        for first in ("view", "submit", "fill"):
            junk = _native.PinnedBuffer(dev, 2 * 4096 * 4)    # freed garbage the slots may get
            np.frombuffer(junk, np.uint8)[:] = 0xFF
            del junk
            e = _native.StreamEngine(dev, spec, use_graph=False)
            if first == "view":
                res.append(bool(np.all(e.input_slot(1) == 0)))
            elif first == "submit":                           # never written: a block of zeros
                e.submit(1, 4096)
                e.wait(1)
                res.append(bool(np.all(e.output_slot(1) == 0)))
            else:
                e.fill(1, np.full((2, 100), 3, np.float32))  # a short block: the tail zeroed
                res.append(bool(np.all(e.input_slot(1)[:, :100] == 3) and np.all(e.input_slot(1)[:, 100:] == 0)))
            e.close()
        print(json.dumps(res))
    """
    assert last_json(run_python(code, GK_LIBCUDA=fake_driver, GK_CACHE_DIR=str(tmp_path))) == [True, True, True]
