"""Kernels compiled when the wheel is built (native/tools/ship_kernels.cpp) and the loader's
order: shipped image for the device's arch, then the disk cache, then NVRTC (native/jit/shipped.cpp).

The first test checks the installed package (what the wheel put in pygpukit_dsp/_kernels/): a
CUBIN of every embedded kernel for every shipped architecture, built from the sources this
module embeds. The others load modules through the fake driver (tests/native/fake_libcuda.c,
which accepts ELF images only), with a private disk cache, in a fresh interpreter each.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pygpukit_dsp import _native

from .conftest import run_python

ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90")
PTX = ("compute_90",)
ELF_MAGIC = b"\x7fELF"
REPO = Path(__file__).resolve().parents[2]


def _shipped() -> dict:
    """The manifest of the installed package; skips only where shipping was turned off or the
    platform has no NVRTC wheel to build with."""
    shipped = _native.shipped_kernels()
    if shipped["found"]:
        return shipped
    reason = shipped["reason"]
    if "GK_SHIP_KERNELS" in reason:
        pytest.skip(f"this build was made without shipped kernels: {reason}")
    if sys.platform.startswith("linux") and platform.machine() == "x86_64":
        pytest.fail("the package ships no compiled kernels although the build requirements bring "
                    f"NVRTC on Linux x86-64: {reason}")
    pytest.skip(f"no shipped kernels on this platform: {reason}")


def test_the_wheel_holds_a_cubin_for_every_kernel_and_arch():
    shipped = _shipped()
    folder = Path(shipped["dir"])
    images = {(i["kernel"], i["arch"]): i for i in shipped["images"]}
    kernels = sorted(_native.embedded_kernels())
    assert len(kernels) >= 13
    assert set(shipped["archs"]) >= set(ARCHS) and set(shipped["ptx"]) >= set(PTX)
    for name in kernels:
        for arch in ARCHS + PTX:
            image = images.get((name, arch))
            assert image is not None, f"no shipped image of {name} for {arch}"
            assert image["kind"] == ("ptx" if arch.startswith("compute_") else "cubin")
            assert image["current"], f"{image['file']} was built from other sources than this module's"
            data = (folder / image["file"]).read_bytes()
            assert len(data) == image["bytes"]
            assert hashlib.sha256(data).hexdigest() == image["sha256"]
            assert len(image["key"]) == 64 and len(image["source_sha256"]) == 64
            assert image["options"] == ["-std=c++17", "-default-device"]
            if image["kind"] == "cubin":
                assert data[:4] == ELF_MAGIC
            else:
                assert b".version" in data[:4096] and f".target sm_{arch[8:]}".encode() in data[:4096]
    assert len(shipped["images"]) == len(kernels) * (len(ARCHS) + len(PTX))
    # the manifest the module read is the JSON file next to the images
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format"] == "pygpukit-dsp shipped kernels v1"
    assert manifest["nvrtc"] == shipped["nvrtc"] != ""


def test_a_shipped_key_is_the_disk_cache_key_of_the_same_compile(nvrtc_available, cache_dir):
    shipped = _shipped()
    nvrtc = _native.capabilities(math_libraries=False)["nvrtc"]["version"]
    if nvrtc != shipped["nvrtc"]:
        pytest.skip(f"the kernels were shipped by NVRTC {shipped['nvrtc']}, this process has {nvrtc}")
    image = next(i for i in shipped["images"] if i["kernel"] == "elementwise" and i["arch"] == "sm_90")
    assert _native.compile_embedded("elementwise", "sm_90").key == image["key"]


def test_capabilities_report_the_shipped_kernels_and_can_leave_math_libraries_closed():
    caps = _native.capabilities(math_libraries=False)
    assert "cufft" not in caps and "cublas" not in caps
    assert caps["kernels"]["dir"] == _native.shipped_kernels_dir()
    full = _native.capabilities()
    assert "cufft" in full and "cublas" in full and full["kernels"] == caps["kernels"]


def _copy_shipped(tmp_path: Path) -> Path:
    shipped = _shipped()
    target = tmp_path / "_kernels"
    shutil.copytree(shipped["dir"], target)
    return target


LOAD_ALL = """
    import json
    from pygpukit_dsp import _native
    d = _native.Device(0)
    held = [d.load_module(name) for name in sorted(_native.embedded_kernels())]
    held.append(d.load_module('elementwise'))   # again, while loaded: the device's module cache
    print(json.dumps({'stats': _native.jit_stats(), 'loads': _native.kernel_loads()}))
"""


def _load_all(fake_libcuda: str, cache: Path, **env: str) -> dict:
    out = run_python(LOAD_ALL, GK_LIBCUDA=fake_libcuda, GK_CACHE_DIR=str(cache), **env)
    return json.loads(out.splitlines()[-1])


def test_an_empty_disk_cache_loads_shipped_cubins_with_no_nvrtc_call(fake_libcuda, tmp_path):
    _shipped()
    cache = tmp_path / "cache"
    result = _load_all(fake_libcuda, cache, FAKE_CUDA_SM="9.0")
    stats, loads = result["stats"], result["loads"]
    n = len(_native.embedded_kernels())
    assert stats["nvrtc_compiles"] == 0 and stats["compiles"] == 0
    assert stats["shipped_hits"] == n + 1 and stats["shipped_reads"] == n
    assert stats["shipped_misses"] == stats["shipped_rejected"] == stats["shipped_load_errors"] == 0
    assert [(x["source"], x["image"], x["device_arch"]) for x in loads] == [("shipped", "sm_90", "sm_90")] * n
    assert not cache.exists() or not any(cache.iterdir())  # nothing written: nothing compiled


@pytest.mark.parametrize("sm, image", [("8.0", "sm_80"), ("8.6", "sm_86"), ("8.9", "sm_89")])
def test_each_shipped_arch_is_taken_for_its_gpu(fake_libcuda, tmp_path, sm, image):
    _shipped()
    result = _load_all(fake_libcuda, tmp_path / "cache", FAKE_CUDA_SM=sm)
    assert {(x["source"], x["image"]) for x in result["loads"]} == {("shipped", image)}
    assert result["stats"]["nvrtc_compiles"] == 0


def test_a_newer_gpu_gets_the_ptx_and_a_refused_image_falls_back_to_nvrtc(fake_libcuda, tmp_path,
                                                                          nvrtc_available):
    _shipped()
    if 120 not in _native.capabilities(math_libraries=False)["nvrtc"]["archs"]:
        pytest.skip("this NVRTC cannot target sm_120")
    out = run_python("""
        import json
        from pygpukit_dsp import _native
        print(json.dumps([s for s in _native.kernel_sources('sm_120') if s['kernel'] == 'io']))
        d = _native.Device(0)
        d.load_module('io')
        print(json.dumps({'stats': _native.jit_stats(), 'loads': _native.kernel_loads()}))
    """, GK_LIBCUDA=fake_libcuda, GK_CACHE_DIR=str(tmp_path / "cache"), FAKE_CUDA_SM="12.0")
    lines = out.splitlines()
    assert json.loads(lines[-2]) == [{"kernel": "io", "source": "shipped", "image": "compute_90",
                                      "note": "PTX, compiled by the driver at first use"}]
    result = json.loads(lines[-1])
    # the fake driver takes ELF only, like a driver too old for the PTX: NVRTC compiles sm_120
    assert result["stats"]["shipped_load_errors"] == 1 and result["stats"]["nvrtc_compiles"] == 1
    (load,) = result["loads"]
    assert (load["source"], load["image"]) == ("nvrtc", "sm_120")
    assert "the driver refused the shipped compute_90 image" in load["note"]


def test_shipped_images_off_means_disk_cache_then_nvrtc(fake_libcuda, tmp_path, nvrtc_available):
    cache = tmp_path / "cache"
    first = _load_all(fake_libcuda, cache, GK_SHIPPED_KERNELS="0")
    n = len(_native.embedded_kernels())
    assert first["stats"]["nvrtc_compiles"] == n and first["stats"]["shipped_hits"] == 0
    assert {x["source"] for x in first["loads"]} == {"nvrtc"}
    assert "GK_SHIPPED_KERNELS=0" in first["loads"][0]["note"]
    second = _load_all(fake_libcuda, cache, GK_SHIPPED_KERNELS="0")
    assert second["stats"]["nvrtc_compiles"] == 0 and {x["source"] for x in second["loads"]} == {"disk"}
    out = run_python("""
        from pygpukit_dsp import _native
        print(sorted({s['source'] for s in _native.kernel_sources('sm_90')}))
    """, GK_CACHE_DIR=str(cache), GK_SHIPPED_KERNELS="0")
    assert out.strip() == "['disk']"


def test_a_corrupt_shipped_image_is_rejected_and_compiled_instead(fake_libcuda, tmp_path, nvrtc_available):
    folder = _copy_shipped(tmp_path)
    victim = folder / "elementwise.sm_90.cubin"
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    out = run_python("""
        import json
        from pygpukit_dsp import _native
        d = _native.Device(0)
        d.load_module('elementwise'); d.load_module('io')
        print(json.dumps({'stats': _native.jit_stats(), 'loads': _native.kernel_loads()}))
    """, GK_LIBCUDA=fake_libcuda, GK_CACHE_DIR=str(tmp_path / "cache"), GK_SHIPPED_KERNELS_DIR=str(folder))
    result = json.loads(out.splitlines()[-1])
    assert result["stats"]["shipped_rejected"] == 1 and result["stats"]["nvrtc_compiles"] == 1
    assert [(x["kernel"], x["source"]) for x in result["loads"]] == [("elementwise", "nvrtc"), ("io", "shipped")]
    assert "does not match its SHA-256" in result["loads"][0]["note"]


def test_images_built_from_other_sources_are_never_loaded(fake_libcuda, tmp_path, nvrtc_available):
    folder = _copy_shipped(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    for image in manifest["images"]:
        if image["kernel"] == "elementwise":
            image["source_sha256"] = "0" * 64
    (folder / "manifest.json").write_text(json.dumps(manifest))
    out = run_python("""
        import json
        from pygpukit_dsp import _native
        print(json.dumps([s for s in _native.kernel_sources('sm_90') if s['kernel'] in ('elementwise', 'io')]))
    """, GK_SHIPPED_KERNELS_DIR=str(folder), GK_CACHE_DIR=str(tmp_path / "cache"))
    rows = json.loads(out.splitlines()[-1])
    assert [(r["kernel"], r["source"]) for r in rows] == [("elementwise", "nvrtc"), ("io", "shipped")]
    assert rows[0]["note"] == "the shipped images of 'elementwise' were built from other sources or options"


def test_without_a_manifest_kernels_compile_at_first_use(fake_libcuda, tmp_path, nvrtc_available):
    out = run_python("""
        import json
        from pygpukit_dsp import _native
        caps = _native.capabilities(math_libraries=False)
        print(json.dumps(caps['kernels']))
        d = _native.Device(0)
        d.load_module('io')
        print(json.dumps(_native.kernel_loads()))
    """, GK_LIBCUDA=fake_libcuda, GK_SHIPPED_KERNELS_DIR=str(tmp_path / "nothing"),
        GK_CACHE_DIR=str(tmp_path / "cache"))
    kernels, loads = (json.loads(x) for x in out.splitlines()[-2:])
    assert kernels["found"] is False and kernels["images"] == 0
    assert "manifest.json: this build ships no compiled kernels" in kernels["reason"]
    assert loads[0]["source"] == "nvrtc"


def _tool() -> Path:
    found = sorted(REPO.glob("build/*/gk_ship_kernels"), key=lambda p: p.stat().st_mtime)
    if not found:
        pytest.skip("gk_ship_kernels is not in build/ (the package was built elsewhere)")
    return found[-1]


def test_the_build_tool_without_nvrtc_writes_an_empty_manifest_and_succeeds(tmp_path):
    tool = _tool()
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "GK_CUDA_LIB_DIRS")}
    proc = subprocess.run([str(tool), "--out", str(tmp_path / "k"), "--lib-dir", str(tmp_path / "none")],
                          env=env, capture_output=True, text=True, timeout=600)
    if "no kernels compiled" not in proc.stdout:
        pytest.skip("this machine has an NVRTC on its system library path")
    assert proc.returncode == 0
    assert "kernels will compile at first use" in proc.stdout
    manifest = json.loads((tmp_path / "k" / "manifest.json").read_text())
    assert manifest["images"] == [] and "NVRTC not found at build time" in manifest["reason"]

    proc = subprocess.run([str(tool), "--out", str(tmp_path / "k"), "--disabled", "GK_SHIP_KERNELS=0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert json.loads((tmp_path / "k" / "manifest.json").read_text())["reason"].startswith("GK_SHIP_KERNELS=0")


def test_the_build_tool_removes_the_images_of_an_earlier_build(tmp_path):
    tool = _tool()
    folder = tmp_path / "k"
    folder.mkdir()
    (folder / "old.sm_75.cubin").write_bytes(ELF_MAGIC)
    (folder / "old.compute_75.ptx").write_text("//")
    (folder / "README").write_text("kept")
    proc = subprocess.run([str(tool), "--out", str(folder), "--disabled", "GK_SHIP_KERNELS=0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert sorted(p.name for p in folder.iterdir()) == ["README", "manifest.json"]


def test_gk_stream_devices_says_where_each_kernel_comes_from(fake_libcuda, tmp_path):
    _shipped()
    code = """
        import sys
        from pygpukit_dsp.cli import main
        sys.exit(main(['devices']))
    """
    out = run_python(code, full_package=True, GK_LIBCUDA=fake_libcuda, FAKE_CUDA_SM="9.0",
                     GK_CACHE_DIR=str(tmp_path / "cache"))
    rows = [line.split() for line in out.splitlines() if line.startswith("kernel  ")]
    n = len(_native.embedded_kernels())
    assert len(rows) == n
    assert {(r[1], r[2], r[4], r[5]) for r in rows} == {("gpu", "0", "shipped", "sm_90")}
    assert any(line.startswith("kernels ") and "images of" in line and "sm_80 sm_86 sm_89 sm_90" in line
               for line in out.splitlines())
    off = run_python(code, full_package=True, GK_LIBCUDA=fake_libcuda, FAKE_CUDA_SM="9.0",
                     GK_CACHE_DIR=str(tmp_path / "cache"), GK_SHIPPED_KERNELS="0")
    sources = {line.split()[4] for line in off.splitlines() if line.startswith("kernel  ")}
    assert sources <= {"nvrtc", "unavailable"} and "ignored (GK_SHIPPED_KERNELS=0)" in off


def test_a_gpu_covered_by_shipped_kernels_is_usable_without_nvrtc(fake_libcuda, tmp_path):
    _shipped()
    out = run_python("""
        from pygpukit_dsp import _libs, _native
        _native.set_library_dirs([%r])          # no NVIDIA wheel folders: no NVRTC
        _libs._configured = True
        from pygpukit_dsp.capabilities import capabilities, cuda_usable
        print(capabilities(math_libraries=False)['nvrtc']['found'])
        print(cuda_usable())
        d = _native.Device(0)
        m = d.load_module('io')
        print(_native.kernel_loads()[0]['source'], _native.jit_stats()['nvrtc_compiles'])
    """ % str(tmp_path / "none"), GK_LIBCUDA=fake_libcuda, FAKE_CUDA_SM="8.6", GK_CACHE_DIR=str(tmp_path / "c"))
    found, usable, loaded = out.splitlines()[-3:]
    if found == "True":
        pytest.skip("this machine has NVRTC on its system library path")
    assert usable.startswith("(True, 'GPU 0 (") and "kernels shipped (sm_86); no NVRTC" in usable
    assert loaded == "shipped 0"
