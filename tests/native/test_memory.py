"""native/core/memory.cpp: the device memory pool, DeviceBuffer, PinnedBuffer and copies."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import _native

from .conftest import run_python


def test_pool_reuses_a_released_block_of_the_same_size_class(fake_libcuda):
    out = run_python(f"""
        import ctypes
        from pygpukit_dsp import _native
        fake = ctypes.CDLL({fake_libcuda!r})
        d = _native.Device(0)
        a = _native.DeviceBuffer(d, 1000)
        first = a.ptr
        del a
        s = d.memory_stats()
        print(s['in_use_bytes'], s['cached_bytes'], d.cached_blocks())
        b = _native.DeviceBuffer(d, 1024)          # same 1024-byte class: reused
        s = d.memory_stats()
        print(b.ptr == first, s['requests'], s['reuses'], s['driver_allocations'],
              fake.fake_cuda_live_device_allocs())
        c = _native.DeviceBuffer(d, 3 * 2**20 + 1)  # 3 MiB + 1 -> 3.5 MiB class
        print(d.memory_stats()['in_use_bytes'] - 1024)
    """, GK_LIBCUDA=fake_libcuda)
    assert out.splitlines() == [
        "0 1024 [(1024, 1)]",
        "True 2 1 1 1",
        str(7 * 2**19),
    ]


def test_the_most_recently_released_block_is_reused_first(fake_libcuda):
    out = run_python("""
        from pygpukit_dsp import _native
        d = _native.Device(0)
        a, b = _native.DeviceBuffer(d, 4096), _native.DeviceBuffer(d, 4096)
        pa, pb = a.ptr, b.ptr
        del a
        del b                                   # b released last
        c = _native.DeviceBuffer(d, 4000)
        print(c.ptr == pb, c.ptr != pa)
    """, GK_LIBCUDA=fake_libcuda)
    assert out.strip() == "True True"


def test_trim_frees_cached_blocks_oldest_first_and_caching_can_be_turned_off(fake_libcuda):
    out = run_python(f"""
        import ctypes
        from pygpukit_dsp import _native
        fake = ctypes.CDLL({fake_libcuda!r})
        d = _native.Device(0)
        a, b, c = (_native.DeviceBuffer(d, n) for n in (512, 1024, 2048))
        del a      # released first: the oldest in the cache
        del b
        del c
        print(d.memory_stats()['cached_bytes'], fake.fake_cuda_live_device_allocs())
        print(d.trim_memory_cache(keep_bytes=2048), d.cached_blocks())
        print(d.trim_memory_cache(), fake.fake_cuda_live_device_allocs())
        d.set_memory_caching(False)
        x = _native.DeviceBuffer(d, 4096)
        del x
        s = d.memory_stats()
        print(s['caching'], s['cached_bytes'], s['reserved_bytes'], fake.fake_cuda_live_device_allocs())
    """, GK_LIBCUDA=fake_libcuda)
    assert out.splitlines() == [
        "3584 3",
        "1536 [(2048, 1)]",
        "2048 0",
        "False 0 0 0",
    ]


def test_out_of_memory_frees_the_cache_and_retries_once(fake_libcuda):
    out = run_python("""
        from pygpukit_dsp import _native
        from pygpukit_dsp.errors import DeviceError
        d = _native.Device(0)
        a = _native.DeviceBuffer(d, 600_000)
        del a                                   # cached: 600 KB still held from the driver
        b = _native.DeviceBuffer(d, 700_000)    # fits only once the cache is freed
        print(d.memory_stats()['cached_bytes'], d.memory_stats()['driver_frees'])
        try:
            _native.DeviceBuffer(d, 900_000)
        except DeviceError as exc:
            print(exc)
            print(exc.call, exc.code_name)
    """, GK_LIBCUDA=fake_libcuda, FAKE_CUDA_ALLOC_LIMIT="1000000")
    lines = out.splitlines()
    assert lines[0] == "0 1"
    assert lines[1] == ("cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory) while "
                        "allocating 900096 bytes on GPU 0")
    assert lines[2] == "cuMemAlloc_v2 CUDA_ERROR_OUT_OF_MEMORY"


def test_pinned_buffer_is_a_zero_copy_numpy_view_and_round_trips(fake_libcuda):
    out = run_python("""
        import numpy as np
        from pygpukit_dsp import _native
        d = _native.Device(0)
        pinned = _native.PinnedBuffer(d, 4096)
        view = np.frombuffer(pinned, dtype=np.float32)
        view[:] = np.arange(1024, dtype=np.float32)
        assert np.asarray(pinned).ctypes.data == pinned.ptr == view.ctypes.data
        dev = _native.DeviceBuffer(d, 4096)
        s = _native.Stream(d)
        dev.copy_from_host(pinned, stream=s)
        back = np.zeros(1024, np.float32)
        dev.copy_to_host(back)
        print(np.array_equal(back, view), len(pinned), pinned.nbytes)
        part = np.zeros(4, np.float32)
        dev.copy_to_host(part, offset=8)
        print(part.tolist())
    """, GK_LIBCUDA=fake_libcuda)
    assert out.splitlines() == ["True 4096 4096", "[2.0, 3.0, 4.0, 5.0]"]


def test_device_to_device_copy_memset_and_range_checks(fake_libcuda):
    out = run_python("""
        import numpy as np
        from pygpukit_dsp import _native
        d = _native.Device(0)
        a = _native.DeviceBuffer(d, 16)
        b = _native.DeviceBuffer(d, 16)
        a.copy_from_host(np.arange(16, dtype=np.uint8))
        b.memset(7)
        b.copy_from(a, nbytes=4, dst_offset=2, src_offset=10)
        out = np.zeros(16, np.uint8)
        b.copy_to_host(out)
        print(out.tolist())
        for bad in (lambda: a.copy_from_host(np.zeros(17, np.uint8)),
                    lambda: a.copy_to_host(np.zeros(4, np.uint8), offset=13),
                    lambda: b.copy_from(a, nbytes=8, src_offset=12),
                    lambda: _native.DeviceBuffer(d, 0)):
            try:
                bad()
            except ValueError as exc:
                print('ValueError:', exc)
        try:
            a.copy_from_host(np.zeros((4, 4), np.uint8)[:, 1])
        except TypeError as exc:
            print('TypeError:', exc)
        try:
            a.copy_to_host(b'read-only bytes.')
        except TypeError as exc:
            print('TypeError:', exc)
    """, GK_LIBCUDA=fake_libcuda)
    lines = out.splitlines()
    assert lines[0] == str([7, 7, 10, 11, 12, 13] + [7] * 10)
    assert lines[1] == ("ValueError: copy_from_host: 17 bytes at offset 0 does not fit in a "
                        "DeviceBuffer of 16 bytes")
    assert lines[2].startswith("ValueError: copy_to_host: 4 bytes at offset 13")
    assert lines[3].startswith("ValueError: copy_from_device (source): 8 bytes at offset 12")
    assert lines[4] == "ValueError: DeviceBuffer size must be at least 1 byte"
    assert lines[5].startswith("TypeError: copy_from_host needs a C-contiguous buffer")
    assert lines[6].startswith("TypeError: copy_to_host needs a C-contiguous writable buffer")


def test_everything_is_freed_when_the_objects_go(fake_libcuda):
    out = run_python(f"""
        import ctypes, gc
        import numpy as np
        from pygpukit_dsp import _native
        fake = ctypes.CDLL({fake_libcuda!r})
        d = _native.Device(0)
        objs = [_native.DeviceBuffer(d, 1 << 20), _native.PinnedBuffer(d, 1 << 20),
                _native.Stream(d), _native.Event(d, timing=True)]
        view = np.frombuffer(objs[1], dtype=np.uint8)
        del objs, d
        gc.collect()
        print(fake.fake_cuda_live_host_allocs())      # the NumPy view keeps the pinned memory
        del view
        gc.collect()
        print(fake.fake_cuda_live_device_allocs(), fake.fake_cuda_live_host_allocs(),
              fake.fake_cuda_live_streams(), fake.fake_cuda_live_events(),
              fake.fake_cuda_retained_contexts())
    """, GK_LIBCUDA=fake_libcuda)
    assert out.splitlines() == ["1", "0 0 0 0 0"]


@pytest.mark.gpu
def test_pinned_round_trip_through_the_gpu(gpu_device):
    rng = np.random.default_rng(1234)
    n = 2 * 1024 * 1024 + 3
    data = rng.standard_normal(n).astype(np.float32)
    src = _native.PinnedBuffer(gpu_device, data.nbytes)
    dst = _native.PinnedBuffer(gpu_device, data.nbytes)
    np.frombuffer(src, dtype=np.float32)[:] = data
    dev = _native.DeviceBuffer(gpu_device, data.nbytes)
    stream = _native.Stream(gpu_device)
    dev.copy_from_host(src, stream=stream)
    dev.copy_to_host(dst, stream=stream)
    stream.synchronize()
    np.testing.assert_array_equal(np.frombuffer(dst, dtype=np.float32), data)


@pytest.mark.gpu
def test_pageable_copies_device_to_device_and_memset(gpu_device):
    data = np.arange(4096, dtype=np.int32)
    a = _native.DeviceBuffer(gpu_device, data.nbytes)
    b = _native.DeviceBuffer(gpu_device, data.nbytes)
    a.copy_from_host(data)
    b.memset(0xFF)
    b.copy_from(a, nbytes=400, dst_offset=800, src_offset=0)
    out = np.empty_like(data)
    b.copy_to_host(out)
    expected = np.full_like(data, -1)
    expected[200:300] = data[:100]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.gpu
def test_pool_reuse_on_the_gpu(gpu_device):
    buf = _native.DeviceBuffer(gpu_device, 777_777)
    ptr = buf.ptr
    before = gpu_device.memory_stats()
    del buf
    again = _native.DeviceBuffer(gpu_device, 777_777)
    after = gpu_device.memory_stats()
    assert again.ptr == ptr  # the most recently released block of the class comes back first
    assert after["reuses"] == before["reuses"] + 1
    assert after["driver_allocations"] == before["driver_allocations"]


def test_an_up_front_grant_serves_the_acquires_that_follow_with_one_driver_allocation(fake_libcuda):
    out = run_python(f"""
        import ctypes
        from pygpukit_dsp import _native
        fake = ctypes.CDLL({fake_libcuda!r})
        d = _native.Device(0)
        kept = _native.DeviceBuffer(d, 4096)
        del kept                                     # a cached 4 KiB block: not granted again
        sizes = [4096, 3 * 2**20 + 1, 1000, 1000]
        print(d.reserve_memory(sizes), d.memory_stats()['grants'], fake.fake_cuda_live_device_allocs())
        bufs = [_native.DeviceBuffer(d, n) for n in sizes]
        s = d.memory_stats()
        print(s['driver_allocations'], s['reuses'], s['cached_bytes'], s['in_use_bytes'] == s['reserved_bytes'])
        ptrs = sorted(b.ptr for b in bufs[1:])
        print(all(p % 512 == 0 for p in ptrs), ptrs[1] - ptrs[0], ptrs[2] - ptrs[1])
        print(d.reserve_memory([64]), d.reserve_memory([4096, 4096]) > 0, d.trim_memory_cache())
    """, GK_LIBCUDA=fake_libcuda)
    lines = out.splitlines()
    granted = 7 * 2**19 + 1024 + 1024
    assert lines[0] == f"{granted} 1 2"          # the cached 4 KiB block + one grant
    assert lines[1] == f"2 4 0 True"               # 4 acquires, all from the cache
    assert lines[2] == f"True {7 * 2**19} 1024"     # carved back to back, 512-aligned, largest first
    # one missing block is not worth a grant; two are; an unused grant is freed whole by trim
    assert lines[3] == f"0 True {2 * 4096}"


def test_a_grant_goes_back_to_the_driver_only_when_all_its_blocks_are_back(fake_libcuda):
    out = run_python(f"""
        import ctypes
        from pygpukit_dsp import _native
        fake = ctypes.CDLL({fake_libcuda!r})
        d = _native.Device(0)
        d.reserve_memory([8192, 4096, 4096])
        a, b, c = (_native.DeviceBuffer(d, n) for n in (8192, 4096, 4096))
        del a, b
        print(d.trim_memory_cache(), fake.fake_cuda_live_device_allocs(), d.memory_stats()['cached_bytes'])
        loose = _native.DeviceBuffer(d, 100_000)   # a plain block beside the grant
        del loose
        print(d.trim_memory_cache(), fake.fake_cuda_live_device_allocs())
        del c
        print(d.trim_memory_cache(), fake.fake_cuda_live_device_allocs())
        s = d.memory_stats()
        print(s['reserved_bytes'], s['cached_bytes'], s['granted_bytes'], s['driver_frees'])
        d.reserve_memory([512, 512])
        x, y = _native.DeviceBuffer(d, 512), _native.DeviceBuffer(d, 512)
        d.set_memory_caching(False)                 # carved blocks stay until the grant is whole
        del x
        print(fake.fake_cuda_live_device_allocs(), d.memory_stats()['cached_bytes'])
        del y
        print(fake.fake_cuda_live_device_allocs(), d.memory_stats()['reserved_bytes'])
    """, GK_LIBCUDA=fake_libcuda)
    assert out.splitlines() == [
        "0 1 12288",        # c is in use: the grant stays, with a and b cached in it
        "100352 1",          # the plain block goes
        "16384 0",           # all back: the grant goes whole
        "0 0 0 2",
        "1 512",
        "0 0",
    ]
