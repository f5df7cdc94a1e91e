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
    assert {(x["kernel"], x["source"], x["image"]) for x in res["loads"]} == {
        ("elementwise", "shipped", "sm_90"), ("delay", "shipped", "sm_90")}
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
    assert {"fir_mix", "stft"} <= {x["kernel"] for x in res["loads"]}
    assert not cache.exists() or not any(cache.iterdir())
