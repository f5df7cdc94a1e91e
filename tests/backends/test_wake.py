"""The wake guard (native/engine/wake.cpp): a thread that sleeps until shortly before a release
learns how late its wake-ups come and sleeps that much less. The rule is checked on its own; the
wait it serves (``_native.wait_until``, used by every paced wait) is never early, whatever the
guard, and each thread learns its own."""

from __future__ import annotations

import threading

import pytest

native = pytest.importorskip("pygpukit_dsp._native")

MS = 1_000_000


def test_the_guard_is_the_largest_lateness_seen_halving_every_10_s():
    nxt = native.wake_guard_next
    assert nxt(0, 30_000, 0) == 30_000                     # learns a late wake-up
    assert nxt(100_000, 30_000, 0) == 100_000              # keeps a larger one
    assert nxt(100_000, 30_000, 10_000 * MS) == 50_000     # ... halved after 10 s
    assert nxt(100_000, 0, 20_000 * MS) == 25_000
    assert nxt(100_000, 2 * MS, 0) == 100_000              # a stall over 1 ms is not chased
    assert nxt(0, 1 * MS, 0) == 1 * MS


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
