"""native/core/stream.cpp: streams with priorities and events."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import _native

from .conftest import run_python


def test_stream_priorities_within_the_device_range(fake_libcuda):
    out = run_python("""
        from pygpukit_dsp import _native
        d = _native.Device(0)
        high = _native.Stream(d, priority=d.highest_stream_priority)
        low = _native.Stream(d, priority=d.lowest_stream_priority)
        print(high.priority, low.priority, high.handle != low.handle != 0)
        for bad in (d.highest_stream_priority - 1, d.lowest_stream_priority + 1):
            try:
                _native.Stream(d, priority=bad)
            except ValueError as exc:
                print(exc)
        high.synchronize()
        print(high.query())
    """, GK_LIBCUDA=fake_libcuda)
    assert out.splitlines() == [
        "-5 0 True",
        "stream priority -6 is outside GPU 0's range -5 (highest) .. 0 (lowest)",
        "stream priority 1 is outside GPU 0's range -5 (highest) .. 0 (lowest)",
        "True",
    ]


def test_only_timing_events_can_be_timed(fake_libcuda):
    out = run_python("""
        from pygpukit_dsp import _native
        d = _native.Device(0)
        s = _native.Stream(d)
        start, end = _native.Event(d, timing=True), _native.Event(d, timing=True)
        start.record(s)
        end.record(s)
        end.synchronize()
        print(_native.Event.elapsed_ms(start, end) >= 0.0, end.query(), start.timing)
        plain = _native.Event(d)
        plain.record(s)
        s.wait(plain)
        try:
            _native.Event.elapsed_ms(plain, end)
        except ValueError as exc:
            print(exc)
    """, GK_LIBCUDA=fake_libcuda)
    assert out.splitlines() == [
        "True True True",
        "elapsed time needs two events created with timing=True; this one was created without",
    ]


@pytest.mark.gpu
def test_streams_with_priorities_on_the_gpu(gpu_device):
    high = _native.Stream(gpu_device, priority=gpu_device.highest_stream_priority)
    low = _native.Stream(gpu_device, priority=gpu_device.lowest_stream_priority)
    assert gpu_device.highest_stream_priority < gpu_device.lowest_stream_priority
    assert (high.priority, low.priority) == (gpu_device.highest_stream_priority,
                                             gpu_device.lowest_stream_priority)
    high.synchronize()
    low.synchronize()
    assert high.query() and low.query()


@pytest.mark.gpu
def test_event_timing_of_a_copy(gpu_device):
    nbytes = 64 << 20
    host = _native.PinnedBuffer(gpu_device, nbytes)
    dev = _native.DeviceBuffer(gpu_device, nbytes)
    stream = _native.Stream(gpu_device)
    start, end = _native.Event(gpu_device, timing=True), _native.Event(gpu_device, timing=True)
    start.record(stream)
    dev.copy_from_host(host, stream=stream)
    end.record(stream)
    end.synchronize()
    ms = _native.Event.elapsed_ms(start, end)
    # 64 MiB over PCIe takes between ~1 ms (64 GB/s) and a second.
    assert 0.2 < ms < 1000.0


@pytest.mark.gpu
def test_stream_wait_orders_work_across_streams(gpu_device):
    n = 8 << 20
    data = (np.arange(n, dtype=np.uint32) * 2654435761).astype(np.uint32)
    src = _native.PinnedBuffer(gpu_device, data.nbytes)
    np.frombuffer(src, dtype=np.uint32)[:] = data
    dst = _native.PinnedBuffer(gpu_device, data.nbytes)
    dev = _native.DeviceBuffer(gpu_device, data.nbytes)
    upload, download = _native.Stream(gpu_device), _native.Stream(gpu_device)
    uploaded = _native.Event(gpu_device)
    dev.copy_from_host(src, stream=upload)
    uploaded.record(upload)
    download.wait(uploaded)
    dev.copy_to_host(dst, stream=download)
    download.synchronize()
    np.testing.assert_array_equal(np.frombuffer(dst, dtype=np.uint32), data)
