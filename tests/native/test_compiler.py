"""native/jit/compiler.cpp: NVRTC compilation, embedded kernels, in-memory and on-disk caches.

These run on any Linux x86-64 machine with the nvidia-cuda-nvrtc wheel (no GPU needed); every
embedded kernel file is compiled for sm_80 and sm_90, which is how CI catches a broken kernel.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pygpukit_dsp import _native
from pygpukit_dsp.errors import CompileError, GkError

ARCHS = ("sm_80", "sm_90")
KERNEL_DIR = Path(__file__).resolve().parents[2] / "native" / "ops" / "kernels"
ELF_MAGIC = b"\x7fELF"

pytestmark = pytest.mark.usefixtures("nvrtc_available")


def _source(tag: str) -> str:
    # A distinct source per test keeps cache keys apart between tests.
    return f'// {tag}\nextern "C" __global__ void scale(float* x, float a) {{ x[threadIdx.x] *= a; }}\n'


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(_native.embedded_kernels()))
def test_every_embedded_kernel_compiles(name: str, arch: str, cache_dir: Path):
    result = _native.compile_embedded(name, arch)
    assert result.cubin[:4] == ELF_MAGIC
    assert (result.name, result.arch, result.cache) == (name, arch, "compiled")
    assert "error" not in result.log.lower()


def test_the_elementwise_file_is_embedded_with_its_entry_points(cache_dir: Path):
    kernels = _native.embedded_kernels()
    assert "elementwise" in kernels
    assert "gk_common.cuh" in _native.embedded_headers()
    if KERNEL_DIR.is_dir():  # running from a source checkout: the embedded text is the file
        assert kernels["elementwise"] == (KERNEL_DIR / "elementwise.cu").read_text()
        assert _native.embedded_headers()["gk_common.cuh"] == (KERNEL_DIR / "gk_common.cuh").read_text()
    cubin = _native.compile_embedded("elementwise", "sm_90").cubin
    for entry in ("gk_gain_f32", "gk_gain_c64", "gk_power_f32", "gk_power_c64", "gk_magnitude_f32",
                  "gk_magnitude_c64", "gk_db_f32", "gk_power_db_c64"):
        assert entry.encode() in cubin  # extern "C": unmangled


def test_a_broken_kernel_raises_compile_error_with_name_and_log(cache_dir: Path):
    source = 'extern "C" __global__ void k(float* x) { x[0] = undefined_symbol_here; }'
    with pytest.raises(CompileError) as info:
        _native.compile("broken_kernel", source, "sm_80")
    err = info.value
    assert isinstance(err, GkError)
    assert err.kernel == "broken_kernel"
    assert 'identifier "undefined_symbol_here" is undefined' in err.log
    assert "broken_kernel.cu" in err.log
    assert str(err).startswith("kernel 'broken_kernel' failed to compile:\n")


def test_an_unknown_option_is_a_compile_error(cache_dir: Path):
    with pytest.raises(CompileError) as info:
        _native.compile("opt", _source("opt"), "sm_80", options=["--no-such-option"])
    assert "NVRTC_ERROR_INVALID_OPTION" in info.value.log
    assert "--no-such-option" in info.value.log


@pytest.mark.parametrize("arch", ["compute_80", "sm80", "sm_", "90", "sm_90ab"])
def test_an_invalid_architecture_is_a_value_error(arch: str):
    with pytest.raises(ValueError, match="is not a real GPU architecture"):
        _native.compile("k", _source("arch"), arch)


def test_an_unknown_embedded_name_lists_the_available_ones():
    with pytest.raises(ValueError, match=r"no embedded kernel file named 'nope' \(available: .*elementwise"):
        _native.compile_embedded("nope", "sm_80")


def test_user_kernels_can_include_the_common_header(cache_dir: Path):
    source = ('#include "gk_common.cuh"\n'
              'extern "C" __global__ void sq(float* y, gk_size_t n) {\n'
              '  for (gk_size_t i = gk_thread_index(); i < n; i += gk_grid_stride()) y[i] *= y[i];\n'
              '}\n')
    assert _native.compile("sq", source, "sm_80").cubin[:4] == ELF_MAGIC


def test_options_are_exactly_what_was_asked():
    assert _native.nvrtc_options("sm_90") == ["--gpu-architecture=sm_90", "-std=c++17",
                                              "-default-device"]
    opts = _native.nvrtc_options("sm_80", fast_math=True, line_info=True, options=["-DX=1"])
    assert opts == ["--gpu-architecture=sm_80", "-std=c++17", "-default-device",
                    "--use_fast_math", "-lineinfo", "-DX=1"]


def test_second_compile_hits_the_memory_cache_then_the_disk_cache(cache_dir: Path):
    source = _source("caches")
    first = _native.compile("scale", source, "sm_80")
    assert first.cache == "compiled"
    assert Path(first.cache_path).parent == cache_dir and Path(first.cache_path).is_file()
    second = _native.compile("scale", source, "sm_80")
    assert (second.cache, second.key, second.cubin) == ("memory", first.key, first.cubin)
    _native.clear_jit_memory_cache()
    before = _native.jit_stats()
    third = _native.compile("scale", source, "sm_80")
    assert (third.cache, third.cubin) == ("disk", first.cubin)
    assert _native.jit_stats()["disk_hits"] == before["disk_hits"] + 1


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped"])
def test_a_corrupt_disk_entry_is_ignored_and_rewritten(cache_dir: Path, damage: str):
    source = _source(f"corrupt-{damage}")
    first = _native.compile("scale", source, "sm_90")
    entry = Path(first.cache_path)
    data = entry.read_bytes()
    if damage == "garbage":
        entry.write_bytes(b"not a cache entry")
    elif damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    else:
        entry.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    _native.clear_jit_memory_cache()
    rejected = _native.jit_stats()["disk_rejected"]
    again = _native.compile("scale", source, "sm_90")
    assert again.cache == "compiled" and again.cubin == first.cubin
    assert _native.jit_stats()["disk_rejected"] == rejected + 1
    assert entry.read_bytes() == data  # rewritten intact
    _native.clear_jit_memory_cache()
    assert _native.compile("scale", source, "sm_90").cache == "disk"


def test_the_key_depends_on_source_arch_and_options(cache_dir: Path):
    source = _source("keys")
    base = _native.compile("scale", source, "sm_80").key
    assert _native.compile("scale", source, "sm_90").key != base
    assert _native.compile("scale", source, "sm_80", fast_math=True).key != base
    assert _native.compile("scale", source, "sm_80", line_info=True).key != base
    assert _native.compile("scale", source + " ", "sm_80").key != base
    assert _native.compile("scale", source, "sm_80").key == base


def test_cache_folder_from_environment(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("GK_CACHE_DIR", str(tmp_path / "here"))
    assert _native.jit_cache_dir() == str(tmp_path / "here")
    monkeypatch.delenv("GK_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _native.jit_cache_dir() == str(tmp_path / ".cache" / "pygpukit-dsp" / "kernels")
    monkeypatch.setenv("GK_JIT_DISK_CACHE", "0")
    assert _native.jit_cache_dir() == ""


def test_disk_cache_off_compiles_without_writing(cache_dir: Path, monkeypatch):
    monkeypatch.setenv("GK_JIT_DISK_CACHE", "0")
    result = _native.compile("scale", _source("no-disk"), "sm_80")
    assert result.cache == "compiled" and result.cache_path == ""
    assert not cache_dir.exists()


def test_an_unwritable_cache_folder_does_not_stop_compilation(tmp_path: Path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("GK_CACHE_DIR", str(blocker / "kernels"))
    _native.clear_jit_memory_cache()
    errors = _native.jit_stats()["disk_write_errors"]
    result = _native.compile("scale", _source("unwritable"), "sm_80")
    assert result.cache == "compiled" and result.cache_path == ""
    assert _native.jit_stats()["disk_write_errors"] == errors + 1


def test_concurrent_compiles_of_one_kernel_agree(cache_dir: Path):
    source = _source("threads")
    results: list[bytes] = []
    failures: list[BaseException] = []

    def work() -> None:
        try:
            results.append(_native.compile("scale", source, "sm_90").cubin)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert len(results) == 4 and len(set(results)) == 1
