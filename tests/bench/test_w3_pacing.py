"""W3's timing loops and load (pygpukit_dsp/bench/w3_pacing.py, w3_pumps.py): W1 paced at its
period, the feed of W1's input, the timed blocks' segments, the W2 pump."""

import numpy as np
import pytest

from pygpukit_dsp.bench.w3_pacing import W1_CHECK_BLOCKS, Feed, paced_w1, split_blocks
from pygpukit_dsp.bench.w3_pumps import Pump, start_pump, wait_started


class _Clock:
    """The paced loop's clock in these tests (w3_pacing.time): it moves only when the loop sleeps
    (a sleep of 0, one spin turn, 1 us) or a fake W1 block runs, so that the schedule is the
    loop's arithmetic, not this host's speed."""

    SPIN_TURN_NS = 1_000

    def __init__(self):
        self.now = 10_000_000

    def perf_counter_ns(self):
        return self.now

    def thread_time_ns(self):
        return 0

    def sleep(self, s):
        self.now += round(s * 1e9) if s > 0 else self.SPIN_TURN_NS


@pytest.fixture
def clock(monkeypatch):
    from pygpukit_dsp.bench import w3_pacing

    c = _Clock()
    monkeypatch.setattr(w3_pacing, "time", c)
    return c


def test_paced_loop_keeps_the_period_times_each_block_and_keeps_the_last_outputs(clock):
    inputs = [np.full((1, 4), i, np.float32) for i in range(4)]
    calls = []
    start = clock.now

    def process(x):
        calls.append(clock.now)
        clock.now += 100_000  # the block's own 100 us
        return x * 2

    period = 2_000_000
    run = paced_w1(process, inputs, warmup=3, blocks=9, period_ns=period)
    assert len(calls) == 12 and run.lat_ns.tolist() == [100_000] * 9
    # every block goes at its own arrival time, one period after the one before
    assert calls == [start + (i + 1) * period for i in range(12)]
    assert [float(o[0, 0]) for o in run.outputs] == [2 * (i % 4) for i in range(6, 12)]
    assert run.t_start == calls[3] and run.t_end == calls[-1] + 100_000 and run.overruns == 0
    assert run.starts.tolist() == calls[3:]


def test_paced_loop_counts_blocks_slower_than_a_period(clock):
    arrived = []

    def slow(x):
        arrived.append(clock.now)
        clock.now += 3_000_000
        return x

    run = paced_w1(slow, [np.zeros((1, 1))], warmup=0, blocks=6, period_ns=1_000_000)
    assert run.overruns == 6
    # a block longer than a period: the next one (already arrived) goes at once
    assert np.diff(arrived).tolist() == [3_000_000] * 5 and run.lat_ns.tolist() == [3_000_000] * 6


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
