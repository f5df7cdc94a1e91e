"""Where a thread's time went while it made no progress (benchmarks/studies/off_cpu.py and the
native instrument.OffCpuMeter it reads): a gap's split into ran / queued / away, away being stolen (never
switched out: the vCPU stopped beneath the guest) or asleep; the gaps around a miss episode; a
run's summary; and the meter on this thread, asleep and busy."""
from __future__ import annotations

import time

import numpy as np
import pytest

from studies import off_cpu

MS = 1_000_000


def row(at, gap, window, ran, queued, switches):
    return np.array([at, gap, window, ran, queued, switches], dtype=np.int64)


def test_a_gap_is_split_by_where_its_time_went():
    assert off_cpu.split(row(0, 2 * MS, 2.1 * MS, 0.1 * MS, 0, 0))["kind"] == "stolen"  # never switched out
    assert off_cpu.split(row(0, 2 * MS, 2.1 * MS, 0.1 * MS, 0, 1))["kind"] == "asleep"
    assert off_cpu.split(row(0, 2 * MS, 2.1 * MS, 0.1 * MS, 1.8 * MS, 1))["kind"] == "queued"
    busy = off_cpu.split(row(5, 2 * MS, 2.1 * MS, 2.05 * MS, 0, 0))
    assert busy["kind"] == "ran" and busy["away_us"] == pytest.approx(50.0, abs=0.01) and busy["at_ns"] == 5
    # clocks a little apart never make away negative
    assert off_cpu.split(row(0, 1 * MS, 1 * MS, 1.01 * MS, 0, 0))["away_us"] == 0.0


def test_the_gaps_around_an_episode_say_the_most_each_kind_took_and_the_longest():
    gaps = [("driver thread 0", np.stack([row(10 * MS, 2 * MS, 2.1 * MS, 0.1 * MS, 0, 0),       # stolen 2 ms
                                          row(50 * MS, 0.5 * MS, 0.6 * MS, 0.05 * MS, 0, 2)])),  # asleep, later
            ("dispatcher's worker", np.stack([row(11 * MS, 0.3 * MS, 0.35 * MS, 0.02 * MS, 0.3 * MS, 1)]))]
    w = off_cpu.within(gaps, 9 * MS, 13 * MS)
    assert w["gaps"] == 2 and w["stolen_us"] == pytest.approx(2000.0) and w["queued_us"] == pytest.approx(300.0)
    # the asleep gap lies outside the window: what is asleep here is the worker's 30 us not queued
    assert w["asleep_us"] == pytest.approx(30.0)
    assert w["longest"]["who"] == "driver thread 0" and w["longest"]["kind"] == "stolen"
    assert w["longest"]["gap_us"] == pytest.approx(2000.0) and w["longest"]["switches"] == 0
    quiet = off_cpu.within(gaps, 20 * MS, 30 * MS)
    assert quiet["gaps"] == 0 and quiet["longest"] is None
    assert off_cpu.words(w) and off_cpu.words(quiet)  # the report's words render for both
    assert off_cpu.within(None, 0, 1) is None  # nothing was watched
    s = off_cpu.summary(gaps)
    assert s["by_kind"] == {"stolen": 1, "queued": 1, "asleep": 1, "ran": 0}
    assert s["longest_us"]["stolen"] == 2000.0 and s["per_thread"] == {"driver thread 0": 2, "dispatcher's worker": 1}
    assert off_cpu.summary(gaps, 40 * MS, 60 * MS)["per_thread"] == {"driver thread 0": 1, "dispatcher's worker": 0}
    assert off_cpu.summary(None) is None


def _meter():
    from pygpukit_dsp._native import instrument

    if not instrument.OffCpuMeter.available():
        pytest.skip("this system keeps no per-thread scheduler accounting (/proc/thread-self/schedstat)")
    return instrument.OffCpuMeter()


def test_the_meter_tells_a_thread_asleep_from_one_running_without_ticks():
    m = _meter()
    with pytest.raises(ValueError, match="must be > 0"):
        m.start(0)
    # a threshold of 30 ms and stretches of 60 ms: a host busy with other work (two CPU hogs on two
    # cores) preempts a thread for a few ms at a time, so only the stretches made here count
    m.start(30_000)
    for _ in range(50):
        m.tick()
    assert m.gaps().shape == (0, 6)
    time.sleep(0.06)                     # asleep: switched out
    m.tick()
    t = time.perf_counter()
    while time.perf_counter() - t < 0.06:  # on a CPU, no tick
        pass
    m.tick()
    m.rest()
    time.sleep(0.06)                     # a sleep on purpose after rest(): no gap
    m.tick()
    m.tick()
    gaps = m.gaps()
    assert gaps.shape == (2, 6)
    asleep, busy = (off_cpu.split(r) for r in gaps)
    # the two stretches without a tick, in order, each at least as long as the 60 ms it did not tick
    assert asleep["at_ns"] < busy["at_ns"] and asleep["gap_us"] >= 60_000 and busy["gap_us"] >= 60_000
    assert asleep["switches"] >= 1  # it slept: switched out
    assert busy["ran_us"] > 0       # it spun: its CPU clock moved
