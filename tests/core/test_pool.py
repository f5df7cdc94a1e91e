"""MemoryPoolPolicy and Grant (src/pool.rs)."""

from __future__ import annotations

import pytest

from pygpukit_dsp_core import Grant, MemoryPoolPolicy, PoolBudgetExceeded, PoolError


def test_miss_then_reuse_in_the_same_class():
    p = MemoryPoolPolicy(cache_budget_bytes=1 << 20)
    g = p.acquire(1000)
    assert isinstance(g, Grant)
    assert (g.bytes, g.reused, g.evicted) == (1024, False, [])
    assert p.release(g.block) == []
    again = p.acquire(900)
    assert (again.block, again.reused) == (g.block, True)
    assert p.block_info(g.block) == {"block": g.block, "bytes": 1024, "requested": 900, "state": "in_use"}
    s = p.stats()
    assert (s["hits"], s["misses"], s["bytes_in_use"], s["bytes_requested_in_use"]) == (1, 1, 1024, 900)


def test_lru_eviction_under_the_cache_budget():
    p = MemoryPoolPolicy(cache_budget_bytes=2048)
    a, b, c = (p.acquire(1024).block for _ in range(3))
    assert p.release(a) == [] and p.release(b) == []
    assert p.release(c) == [a]
    assert p.cached_lru_order() == [b, c]
    assert p.block_info(a) is None
    assert p.trim(1024) == [b]
    assert p.trim() == [c]
    assert p.stats()["evictions"] == 3


def test_device_budget_evicts_then_refuses():
    p = MemoryPoolPolicy(cache_budget_bytes=1 << 20, device_budget_bytes=4096)
    a = p.acquire(2048).block
    p.release(a)
    big = p.acquire(3000)
    assert (big.bytes, big.evicted) == (3072, [a])
    with pytest.raises(PoolBudgetExceeded) as info:
        p.acquire(2048)
    assert (info.value.requested, info.value.in_use, info.value.budget) == (2048, 3072, 4096)
    assert isinstance(info.value, PoolError)
    assert p.stats()["device_budget_bytes"] == 4096


def test_errors():
    p = MemoryPoolPolicy()
    g = p.acquire(10)
    p.release(g.block)
    with pytest.raises(PoolError, match="already released"):
        p.release(g.block)
    with pytest.raises(PoolError, match="unknown block id 77"):
        p.release(77)
    p.discard(g.block)
    assert p.stats()["blocks_cached"] == 0
    with pytest.raises(ValueError, match="0 bytes"):
        p.acquire(0)
    with pytest.raises(ValueError, match="power of two"):
        MemoryPoolPolicy(min_block_bytes=300)
    with pytest.raises(ValueError, match="device_budget_bytes"):
        MemoryPoolPolicy(device_budget_bytes=0)


def test_size_classes_and_stats_keys():
    p = MemoryPoolPolicy(min_block_bytes=256, steps_per_doubling=4)
    assert [p.class_size(n) for n in (1, 257, 513, 64 << 20)] == [256, 320, 640, 64 << 20]
    assert set(p.stats()) == {
        "hits", "misses", "evictions", "bytes_in_use", "bytes_cached", "blocks_in_use", "blocks_cached",
        "bytes_requested_in_use", "peak_bytes_in_use", "peak_bytes_reserved", "cache_budget_bytes",
        "device_budget_bytes", "to_free",
    }
    assert p.stats()["device_budget_bytes"] is None
    assert "hits=0" in repr(p)
