"""The C ABI exported in capsules (src/capi.rs, native/include/gk/sched_abi.h)."""

from __future__ import annotations

import ctypes
import gc
import shutil
import subprocess
from pathlib import Path

import pytest

import pygpukit_dsp_core as core

REPO = Path(__file__).resolve().parents[2]
HEADER_DIR = REPO / "native" / "include"
SMOKE_C = Path(__file__).with_name("c") / "abi_smoke.c"

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_Import.restype = ctypes.c_void_p
_api.PyCapsule_Import.argtypes = [ctypes.c_char_p, ctypes.c_int]


def capsule_pointer(capsule, name: str) -> int:
    assert _api.PyCapsule_GetName(capsule).decode() == name
    pointer = _api.PyCapsule_GetPointer(capsule, name.encode())
    assert pointer
    return pointer


def test_table_capsule_name_and_version():
    capsule = core.sched_abi_capsule()
    pointer = capsule_pointer(capsule, "pygpukit_dsp_core._sched_abi_v1")
    assert core.SCHED_ABI_CAPSULE_NAME == "pygpukit_dsp_core._sched_abi_v1"
    abi_version, struct_size = (ctypes.c_uint32 * 2).from_address(pointer)
    assert abi_version == core.ABI_VERSION == 1
    assert struct_size == 8 + 27 * ctypes.sizeof(ctypes.c_void_p)
    # The same static table every time, and importable by name as C++ does.
    assert capsule_pointer(core.sched_abi_capsule(), core.SCHED_ABI_CAPSULE_NAME) == pointer
    assert _api.PyCapsule_Import(core.SCHED_ABI_CAPSULE_NAME.encode(), 0) == pointer


def test_handle_capsules_are_named_and_keep_the_object_alive():
    scheduler = core.Scheduler(clock="simulated")
    stream = scheduler.register_stream("audio", "realtime", period_ns=5_000_000, cost_ns=10_000)
    capsule = scheduler.capsule()
    capsule_pointer(capsule, core.SCHED_HANDLE_CAPSULE_NAME)
    pool_capsule = core.MemoryPoolPolicy().capsule()
    capsule_pointer(pool_capsule, core.POOL_HANDLE_CAPSULE_NAME)
    # The capsule owns a reference: the scheduler outlives the Python object.
    del scheduler
    gc.collect()
    abi = _Abi(capsule_pointer(core.sched_abi_capsule(), core.SCHED_ABI_CAPSULE_NAME))
    handle = ctypes.c_void_p(capsule_pointer(capsule, core.SCHED_HANDLE_CAPSULE_NAME))
    task = ctypes.c_uint64()
    assert abi.submit(handle, stream, 0, ctypes.byref(task), None) == 0
    assert task.value == 1
    del capsule, pool_capsule
    gc.collect()


class _Abi:
    """The first entries of gk_sched_abi_v1, called through ctypes."""

    def __init__(self, table: int):
        fns = (ctypes.c_void_p * 27).from_address(table + 8)
        u64, u32, i32, vp = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int32, ctypes.c_void_p
        self.last_error = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)(fns[0])
        self.sched_now_ns = ctypes.CFUNCTYPE(u64, vp)(fns[4])
        self.submit = ctypes.CFUNCTYPE(i32, vp, u32, u64, ctypes.POINTER(u64), ctypes.POINTER(u64))(fns[10])
        self.drop_task = ctypes.CFUNCTYPE(i32, vp, u64)(fns[13])


def test_errors_come_back_as_codes_with_messages():
    abi = _Abi(capsule_pointer(core.sched_abi_capsule(), core.SCHED_ABI_CAPSULE_NAME))
    scheduler = core.Scheduler(clock="simulated", start_ns=42)
    capsule = scheduler.capsule()
    handle = ctypes.c_void_p(capsule_pointer(capsule, core.SCHED_HANDLE_CAPSULE_NAME))
    assert abi.sched_now_ns(handle) == 42
    assert abi.drop_task(handle, 7) == -3  # GK_ERR_UNKNOWN_TASK
    buf = ctypes.create_string_buffer(256)
    n = abi.last_error(buf, 256)
    assert buf.value.decode() == "unknown task id 7 (never submitted, or finished long ago)"
    assert n == len(buf.value)
    assert abi.submit(None, 1, 0, None, None) == -12  # GK_ERR_NULL_POINTER


@pytest.fixture(scope="module")
def smoke_lib(tmp_path_factory):
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler found (cc/gcc/clang): the C-side ABI check needs one")
    out = tmp_path_factory.mktemp("abi") / "libabi_smoke.so"
    cmd = [compiler, "-std=c11", "-Wall", "-Werror", "-shared", "-fPIC", f"-I{HEADER_DIR}", str(SMOKE_C), "-o", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stderr}"
    return ctypes.CDLL(str(out))


def test_c_program_drives_the_whole_table(smoke_lib):
    table = capsule_pointer(core.sched_abi_capsule(), core.SCHED_ABI_CAPSULE_NAME)
    msg = ctypes.create_string_buffer(512)
    smoke_lib.gk_abi_smoke.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    assert smoke_lib.gk_abi_smoke(table, msg, 512) == 0, msg.value.decode()


def test_c_and_python_share_one_scheduler(smoke_lib):
    scheduler = core.Scheduler(clock="simulated")
    stream = scheduler.register_stream("audio", "realtime", period_ns=5_000_000, cost_ns=10_000)
    task, _ = scheduler.submit(stream)
    scheduler.next()
    scheduler.complete(task, 10_000)
    table = capsule_pointer(core.sched_abi_capsule(), core.SCHED_ABI_CAPSULE_NAME)
    capsule = scheduler.capsule()
    handle = capsule_pointer(capsule, core.SCHED_HANDLE_CAPSULE_NAME)
    completed, c_task = ctypes.c_uint64(), ctypes.c_uint64()
    msg = ctypes.create_string_buffer(512)
    fn = smoke_lib.gk_abi_shared
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64),
                   ctypes.POINTER(ctypes.c_uint64), ctypes.c_char_p, ctypes.c_size_t]
    assert fn(table, handle, stream, ctypes.byref(completed), ctypes.byref(c_task), msg, 512) == 0, msg.value.decode()
    assert completed.value == 1
    assert scheduler.stream_stats(stream)["submitted"] == 2
    assert scheduler.task_state(c_task.value) == "ready"
