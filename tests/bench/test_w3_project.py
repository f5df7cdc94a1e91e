"""The causes of W1's misses in W3 (pygpukit_dsp/bench/w3_project.py, miss_causes): host stalls,
host slowdowns, a vCPU held beneath the guest, episodes, and the facts beside the process's."""

import numpy as np

from pygpukit_dsp.bench.trace import Breakdown, OverBlock, PhaseFigures
from pygpukit_dsp.bench.w3_pacing import W1Run
from pygpukit_dsp.bench.w3_project import Timed, miss_causes


def test_misses_are_split_into_host_stalls_and_the_process_s():
    starts = np.array([0, 100_000_000, 200_000_000], dtype=np.int64)  # apart: one episode each
    ends = starts + np.array([50_000, 1_500_000, 1_800_000])
    timed = Timed()
    timed.runs.append(W1Run(ends - starts, [], 0, 0, 0, starts, ends))
    fig = PhaseFigures("x", 0, 0, 0)
    over = [OverBlock(1, 1500.0, {"wake": 1500.0}, "wake", None), OverBlock(2, 1800.0, {"hand-over": 1800.0},
                                                                           "hand-over", None)]
    bd = Breakdown(3, 1, [], fig, None, 1000.0, over)
    # the probe stopped 400 us during block 1, 60 us (below the threshold) during block 2
    stalls = (np.array([100_500_000, 200_100_000, 300_000_000]), np.array([400_000, 60_000, 900_000]))
    c = miss_causes(timed, bd, stalls)
    assert (c["misses"], c["host_stall"], c["process"], c["probe_gaps"]) == (2, 1, 1, 2)
    assert [b["cause"] for b in c["blocks"]] == ["host_stall", "process"] and c["blocks"][0]["probe_stall_us"] == 400.0
    assert miss_causes(timed, bd, None)["probe"] == "none"


def test_a_miss_whose_copies_ran_three_times_slower_is_a_host_slowdown():
    starts = np.array([0, 100_000_000, 200_000_000], dtype=np.int64)
    ends = starts + np.array([50_000, 1_500_000, 1_800_000])
    timed = Timed()
    timed.runs.append(W1Run(ends - starts, [], 0, 0, 0, starts, ends))
    phases = [PhaseFigures("fill", 8.0, 12.0, 9.0), PhaseFigures("copy out", 1.0, 2.0, 1.0),
              PhaseFigures("python in", 0.1, 3.0, 1.0)]
    # block 1: fill 55 + copy out 12 us (>= 3x the 9 us median, and 20 us over it): the CPU ran slow;
    # block 2: the copies took their usual time, the wait did not: the process's
    over = [OverBlock(1, 1500.0, {"fill": 55.0, "copy out": 12.0, "python in": 1400.0}, "python in", None),
            OverBlock(2, 1800.0, {"fill": 9.0, "copy out": 1.0, "python in": 1780.0}, "python in", None)]
    bd = Breakdown(3, 1, phases, PhaseFigures("total", 0, 0, 0), None, 1000.0, over)
    c = miss_causes(timed, bd, (np.array([], dtype=np.int64), np.array([], dtype=np.int64)))
    assert (c["host_stall"], c["host_slow"], c["process"]) == (0, 1, 1)
    assert [b["cause"] for b in c["blocks"]] == ["host_slow", "process"]
    # one period after the slow one (5.33 ms, as two W1 blocks in a row on an H100): one episode,
    # the host's
    near = Timed()
    s2 = np.array([0, 100_000_000, 105_333_333], dtype=np.int64)
    near.runs.append(W1Run(ends - starts, [], 0, 0, 0, s2, s2 + (ends - starts)))
    c = miss_causes(near, bd, (np.array([], dtype=np.int64), np.array([], dtype=np.int64)))
    assert (c["host_slow"], c["process"], c["episode"]) == (2, 0, 1)
    assert c["blocks"][1]["episode_of"] == 1
    # an episode is the misses near a host's miss, not a chain of them: block 1 (15 ms after the
    # slow block 0) joins it, block 2 (15 ms after block 1, 30 ms after block 0) does not
    over0 = [OverBlock(0, 1500.0, {"fill": 55.0, "copy out": 12.0, "python in": 1400.0}, "python in", None),
             OverBlock(1, 1800.0, {"fill": 9.0, "copy out": 1.0, "python in": 1780.0}, "python in", None),
             OverBlock(2, 1800.0, {"fill": 9.0, "copy out": 1.0, "python in": 1780.0}, "python in", None)]
    chain = Timed()
    s3 = np.array([0, 15_000_000, 30_000_000], dtype=np.int64)
    chain.runs.append(W1Run(ends - starts, [], 0, 0, 0, s3, s3 + (ends - starts)))
    bd0 = Breakdown(3, 1, phases, PhaseFigures("total", 0, 0, 0), None, 1000.0, over0)
    c = miss_causes(chain, bd0, (np.array([], dtype=np.int64), np.array([], dtype=np.int64)))
    assert [(b["cause"], b.get("episode_of")) for b in c["blocks"]] == [("host_slow", None), ("host_slow", 0),
                                                                        ("process", None)]


def test_a_miss_whose_thread_never_switched_yet_did_not_run_is_a_host_stall():
    starts = np.array([0, 100_000_000, 200_000_000, 300_000_000], dtype=np.int64)
    ends = starts + np.array([50_000, 1_500_000, 1_800_000, 1_400_000])
    # per block: voluntary and involuntary switches, ns not running. Block 1: none, 1.3 ms not
    # running (held beneath the guest); block 2: slept once (a late wake-up could be the guest's);
    # block 3: no switch and running all along (spinning on something of the process's)
    sw = np.array([[0, 0, 0], [0, 0, 1_300_000], [1, 0, 1_300_000], [0, 0, 20_000]], dtype=np.int64)
    timed = Timed()
    timed.runs.append(W1Run(ends - starts, [], 0, 0, 0, starts, ends, sw))
    over = [OverBlock(i, (ends[i] - starts[i]) / 1e3, {"python in": 1300.0}, "python in", None) for i in (1, 2, 3)]
    bd = Breakdown(4, 1, [], PhaseFigures("total", 0, 0, 0), None, 1000.0, over)
    c = miss_causes(timed, bd, (np.array([], dtype=np.int64), np.array([], dtype=np.int64)))
    assert [b["cause"] for b in c["blocks"]] == ["host_stall", "process", "process"]
    assert (c["host_stall"], c["vcpu_held"], c["process"]) == (1, 1, 2)
    assert [(b["switches"], b["off_cpu_us"]) for b in c["blocks"]] == [([0, 0], 1300.0), ([1, 0], 1300.0),
                                                                      ([0, 0], 20.0)]


def test_the_process_s_misses_say_how_late_the_thread_came_back_and_whether_the_collector_ran():
    starts = np.array([0, 100_000_000, 200_000_000], dtype=np.int64)
    ends = starts + np.array([50_000, 1_500_000, 1_800_000])
    timed = Timed()
    # block 1 came back from its sleep 1.3 ms late; block 2 on time, with a 900-us gen-2
    # collection inside it (between its release and its call)
    timed.add(W1Run(ends - starts, [], 0, 0, 0, starts, ends), {}, np.array([2.0, 1300.0, 3.0]))
    phases = [PhaseFigures("fill", 8.0, 12.0, 9.0), PhaseFigures("copy out", 1.0, 2.0, 1.0)]
    over = [OverBlock(1, 1500.0, {"fill": 8.0, "copy out": 1.0, "python in": 1400.0}, "python in", None),
            OverBlock(2, 1800.0, {"fill": 9.0, "copy out": 1.0, "python in": 1780.0}, "python in", None)]
    bd = Breakdown(3, 1, phases, PhaseFigures("total", 0, 0, 0), None, 1000.0, over)
    no_stalls = (np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    gc_spans = (np.array([200_050_000]), np.array([200_950_000]), np.array([2]))
    c = miss_causes(timed, bd, no_stalls, gc_spans)
    assert (c["process"], c["process_late_back"], c["process_gc"]) == (2, 1, 1)
    assert [(b["back_late_us"], b["gc_us"], b["gc_generation"]) for b in c["blocks"]] == [(1300.0, 0.0, -1),
                                                                                          (3.0, 900.0, 2)]
    assert c["gc_collections"] == 1 and c["gc_max_us"] == 900.0
    # a run without the stamps (no warm_us) says nothing about them
    bare = Timed()
    bare.runs.append(W1Run(ends - starts, [], 0, 0, 0, starts, ends))
    assert [b["back_late_us"] for b in miss_causes(bare, bd, no_stalls)["blocks"]] == [None, None]
