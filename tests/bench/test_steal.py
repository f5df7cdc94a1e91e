"""Steal time (pygpukit_dsp/bench/steal.py): read from a /proc/stat of our own making (each CPU's
8th number), summed between readings, sampled from a thread (the capacity sweep puts it on its miss
episodes: tests/benchmarks/test_capacity.py). /proc/stat itself is read once to show that this
kernel's format parses."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from pygpukit_dsp.bench import steal


def _stat(path: Path, steals: list[int]) -> None:
    lines = [f"cpu  10 0 10 1000 0 0 0 {sum(steals)} 0 0"]
    lines += [f"cpu{i} 5 0 5 500 0 0 0 {s} 0 0" for i, s in enumerate(steals)]
    tmp = path.with_suffix(".new")
    tmp.write_text("\n".join(lines + ["intr 1 2 3", "ctxt 99"]) + "\n")
    tmp.replace(path)  # whole, as the kernel serves it: the sampler never reads half a file


def test_steal_ticks_reads_each_cpu_not_the_total(tmp_path: Path):
    f = tmp_path / "stat"
    _stat(f, [3, 0, 7])
    assert steal.steal_ticks(str(f)).tolist() == [3, 0, 7]
    f.write_text("cpu  1 2 3\ncpu0 1 2 3\n")  # a kernel without the steal column
    assert steal.steal_ticks(str(f)) is None
    assert steal.steal_ticks(str(tmp_path / "missing")) is None


def test_this_kernels_proc_stat_parses():
    v = steal.steal_ticks()
    assert v is None or (v.ndim == 1 and v.size >= 1 and (v >= 0).all())


def test_steal_summary_in_ms_and_the_cpu_that_lost_most():
    s = steal.steal_summary(np.array([0, 10, 0]), np.array([1, 30, 0]), wall_s=2.0)
    t = steal.TICK_MS
    assert s == {"available": True, "ms": 21 * t, "ms_per_s": round(21 * t / 2, 2), "max_cpu": 1,
                 "max_cpu_ms": 20 * t}
    assert steal.steal_summary(None, np.array([1]), 1.0) == {"available": False}


def test_the_sampler_records_and_finds_the_steal_around_a_moment(tmp_path: Path):
    f = tmp_path / "stat"
    _stat(f, [0, 0])
    s = steal.StealSampler(interval_s=0.002, path=str(f)).start()
    time.sleep(0.05)
    t0 = time.perf_counter_ns()
    _stat(f, [0, 4])      # CPU 1 lost 4 ticks here
    time.sleep(0.05)
    t1 = time.perf_counter_ns()
    s.stop()
    assert s.times == sorted(s.times) and s.times[1] < t0 and s.times[-1] > t1  # samples before and after it
    assert s.within(t0, t1) == {"ms": 4 * steal.TICK_MS, "max_cpu_ms": 4 * steal.TICK_MS}
    assert s.within(s.times[0], s.times[1] - 1) == {"ms": 0.0, "max_cpu_ms": 0.0}  # before it
    assert s.summary()["max_cpu"] == 1
    # a kernel without it: nothing sampled, nothing claimed
    bare = steal.StealSampler(path=str(tmp_path / "missing")).start().stop()
    assert not bare.available and bare.summary() == {"available": False} and bare.within(0, 1) is None
