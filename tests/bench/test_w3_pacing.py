"""W3's timing loops and load (pygpukit_dsp/bench/w3_pacing.py, w3_pumps.py): W1 paced at its
period, the feed of W1's input, the timed blocks' segments, the W2 pump."""

import time

import numpy as np
import pytest

from pygpukit_dsp.bench.w3_pacing import W1_CHECK_BLOCKS, Feed, paced_w1, split_blocks
from pygpukit_dsp.bench.w3_pumps import Pump, start_pump, wait_started


def test_paced_loop_keeps_the_period_times_each_block_and_keeps_the_last_outputs():
    inputs = [np.full((1, 4), i, np.float32) for i in range(4)]
    calls = []

    def process(x):
        calls.append(time.perf_counter_ns())
        return x * 2

    period = 2_000_000
    run = paced_w1(process, inputs, warmup=3, blocks=9, period_ns=period)
    assert len(calls) == 12 and run.lat_ns.shape == (9,) and (run.lat_ns > 0).all()
    # blocks go at their own arrival times: the typical gap is one period (a late wake-up
    # shortens the gap after it, so neither the mean nor the shortest gap shows the clock)
    assert np.median(np.diff(calls)) >= period * 0.95
    assert [float(o[0, 0]) for o in run.outputs] == [2 * (i % 4) for i in range(6, 12)]
    assert 0 <= calls[3] - run.t_start < period and run.t_end >= calls[-1]


def test_paced_loop_counts_blocks_slower_than_a_period():
    def slow(x):
        time.sleep(0.003)
        return x

    run = paced_w1(slow, [np.zeros((1, 1))], warmup=0, blocks=6, period_ns=1_000_000)
    assert run.overruns == 6


def test_the_feed_keeps_each_output_without_copying_it_inside_the_timed_call():
    # the feed's return ends W1's latency: a copy of the output there would be timed (the PyTorch
    # baseline's copy comes after its stamp), so it keeps the new array process() returned
    made = []

    def process(x, **_):
        made.append(x * 2)
        return made[-1]

    feed = Feed(process, [np.full((1, 4), i, np.float32) for i in range(3)])
    ys = [feed(None) for _ in range(2)] + [feed.at(None, 0, 0, False) for _ in range(W1_CHECK_BLOCKS)]
    assert feed.count == 2 + W1_CHECK_BLOCKS
    assert all(a is b for a, b in zip(feed.last, ys[-W1_CHECK_BLOCKS:]))
    assert [float(y[0, 0]) for y in feed.last] == [2 * (i % 3) for i in range(2, feed.count)]


def test_pump_rate_counts_blocks_in_the_window():
    pump = Pump(stamps=[5, 10, 20, 30, 40])
    assert pump.rate(10, 40, 100) == pytest.approx(3 * 100 / 30e-9)


def test_pump_errors_reach_the_caller():
    def body(pump):
        raise RuntimeError("device lost")

    pump = start_pump(body)
    with pytest.raises(RuntimeError, match="device lost"):
        wait_started(pump)


@pytest.mark.parametrize("blocks,segments,parts", [(12, 3, [4, 4, 4]), (10, 3, [4, 3, 3]), (2, 5, [1, 1])])
def test_timed_blocks_split_evenly_over_segments(blocks, segments, parts):
    assert split_blocks(blocks, segments) == parts
