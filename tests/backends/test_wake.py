"""The wake guard (native/engine/wake.cpp): a thread that sleeps until shortly before a release
learns how late its wake-ups come (a high quantile) and sleeps that much less. The rule is
checked on its own; the wait it serves (``_native.wait_until``, used by every paced wait) is never
early, whatever the guard, and each thread learns its own."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

native = pytest.importorskip("pygpukit_dsp._native")

MS = 1_000_000


def test_the_guard_tracks_a_high_quantile_of_the_lateness():
    nxt, up, down = native.wake_guard_next, 50_000, 100
    assert nxt(0, 30_000) == up                    # a wake-up later than the guard: one step up
    assert nxt(100_000, 30_000) == 100_000 - down  # one within it: a small step down
    assert nxt(100_000, 2 * MS) == 100_000         # a stall over 1 ms is not chased
    assert nxt(990_000, 995_000) == 1 * MS         # never past 1 ms
    assert nxt(50, 0) == 0
    # fed a lateness distribution, it settles where about 0.2% of wake-ups exceed it
    rng = np.random.default_rng(5)
    late = rng.exponential(20_000, 400_000).astype(np.int64)  # p99.8 of Exp(20 us): 124 us
    g = 0
    for v in late.tolist():
        g = nxt(g, v)
    assert 80_000 < g < 200_000 and (late[-100_000:] > g).mean() < 0.01


def test_a_paced_wait_is_never_early_whatever_the_guard():
    native.set_wake_guard_us(5000)  # more than half of every sleep below: capped at half
    try:
        for spin_us in (0, 100):
            for _ in range(5):
                t = native.monotonic_ns() + 3 * MS
                native.wait_until(t, spin_us)
                assert native.monotonic_ns() >= t
    finally:
        native.set_wake_guard_us(0)


def test_each_thread_learns_its_own_guard():
    native.set_wake_guard_us(0)
    for _ in range(20):
        native.wait_until(native.monotonic_ns() + 2 * MS, 0)
    mine = native.wake_guard_us()
    assert 0 <= mine <= 1000  # whatever this host's lateness, within the rule's cap
    seen: list[float] = []
    th = threading.Thread(target=lambda: seen.append(native.wake_guard_us()))
    th.start()
    th.join()
    assert seen == [0.0]  # a new thread has learned nothing yet
    with pytest.raises(ValueError, match=">= 0"):
        native.set_wake_guard_us(-1)
    native.set_wake_guard_us(0)
    assert native.wake_guard_us() == 0.0


def test_spin_zero_stays_a_plain_sleep_whatever_the_guard():
    # spin_us is the caller's spin budget: the guard at most doubles it, so 0 never spins (a guard
    # applied here would spin ~1.5 ms of each 3-ms wait: ~4.5 ms of this thread's CPU time)
    native.set_wake_guard_us(5000)
    try:
        cpu0 = time.thread_time()
        for _ in range(3):
            t = native.monotonic_ns() + 3 * MS
            native.wait_until(t, 0)
            assert native.monotonic_ns() >= t
        assert time.thread_time() - cpu0 < 0.0015
    finally:
        native.set_wake_guard_us(0)
