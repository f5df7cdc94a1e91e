"""pygpukit_dsp/bench/trace.py: the latency breakdown of traced blocks."""
from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.backends.cuda_engine import TRACE_FIELDS
from pygpukit_dsp.bench.trace import PHASES, breakdown, markdown


def _trace(n: int, slow: int | None = None) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """n calls 10 us apart: 1 us per phase, except a 500 us GPU wait in call `slow`."""
    start = np.arange(n, dtype=np.int64) * 10_000_000
    cols = {"call": start + 1000}
    cols["filled"] = cols["call"] + 1000
    cols["launch_begin"] = cols["filled"] + 1000
    cols["launched"] = cols["launch_begin"] + 1000
    cols["done_seen"] = cols["launched"] + 1000
    if slow is not None:
        cols["done_seen"][slow] += 500_000
    cols["woke"] = cols["done_seen"] + 1000
    cols["gpu_ns"] = np.full(n, 700, dtype=np.int64)
    cols["scheduled"] = np.ones(n, dtype=np.int64)
    cols["copied"] = cols["woke"] + 1000
    end = cols["copied"] + 1000
    assert set(cols) == set(TRACE_FIELDS)
    return cols, start, end


def test_phases_sum_to_the_callers_latency_and_the_tail_names_its_phase():
    cols, start, end = _trace(200, slow=17)
    b = breakdown(cols, start, end)
    assert [p.name for p in b.phases] == [name for name, _, _ in PHASES]
    assert b.blocks == 200 and b.tail_blocks == 2
    assert all(p.p50_us == pytest.approx(1.0) for p in b.phases)
    gpu_seen = b.phases[4]
    assert gpu_seen.tail_mean_us == pytest.approx((501 + 1) / 2)  # the slow block and one other
    assert sum(p.tail_mean_us for p in b.phases) == pytest.approx(b.total.tail_mean_us)
    assert b.total.p50_us == pytest.approx(8.0)
    assert b.gpu is not None and b.gpu.p50_us == pytest.approx(0.7) and b.gpu_blocks == 200
    assert "| phase | p50 us |" in "\n".join(markdown("W1", b))  # the table renders


def test_takes_the_last_records_and_leaves_out_untimed_calls():
    cols, start, end = _trace(10)
    older = {k: np.concatenate([v[:3], v]) for k, v in cols.items()}  # 3 older records in the ring
    keep = np.array([True] * 9 + [False])
    b = breakdown(older, start, end, keep=keep)
    assert b.blocks == 9


def test_no_gpu_row_for_blocks_without_device_time():
    cols, start, end = _trace(10)
    cols["gpu_ns"][:] = 0
    b = breakdown(cols, start, end)
    assert b.gpu is None and b.gpu_blocks == 0


def test_the_gpu_row_covers_the_timed_blocks_when_a_dispatcher_timed_a_sample():
    cols, start, end = _trace(16)
    cols["gpu_ns"][:] = 0
    cols["gpu_ns"][::8] = 900  # CudaDispatch.time_every: one block in 8 timed
    b = breakdown(cols, start, end)
    assert b.gpu is not None and b.gpu.p50_us == pytest.approx(0.9) and b.gpu_blocks == 2 and b.blocks == 16
    assert b.to_dict()["gpu_blocks"] == 2


def test_mismatched_stamps_are_refused():
    cols, start, end = _trace(10)
    with pytest.raises(ValueError, match="records, 20 needed"):
        breakdown(cols, np.zeros(20, np.int64), np.zeros(20, np.int64))
    with pytest.raises(ValueError, match="not of the same blocks"):
        breakdown(cols, start + 5_000_000, end + 5_000_000)
    with pytest.raises(ValueError, match="one bool per call"):
        breakdown(cols, start, end, keep=np.zeros(10, bool))


def test_a_trace_without_the_copy_out_stamp_counts_the_copy_in_python_out():
    cols, start, end = _trace(10)
    del cols["copied"]
    got = {p.name: p.p50_us for p in breakdown(cols, start, end).phases}
    assert got["copy out"] == 0 and got["python out"] == pytest.approx(2.0)


def test_overlapped_fill_records_are_split_in_their_own_order():
    # overlap_fill: call -> launch -> copy in -> completion; the phases still add up
    cols, start, end = _trace(10)
    cols["launch_begin"] = cols["call"] + 1000
    cols["launched"] = cols["launch_begin"] + 2000
    cols["filled"] = cols["launched"] + 5000
    cols["done_seen"] = cols["filled"] + 9000
    cols["woke"] = cols["done_seen"] + 1000
    cols["copied"] = cols["woke"] + 1000
    end = cols["copied"] + 1000
    b = breakdown(cols, start, end)
    got = {p.name: p.p50_us for p in b.phases}
    assert got == pytest.approx({"python in": 1, "fill": 5, "hand-over": 1, "launch": 2, "GPU + seen": 9,
                                 "wake": 1, "copy out": 1, "python out": 1})
    assert sum(got.values()) == pytest.approx(b.total.p50_us)


def test_blocks_over_the_deadline_are_listed_with_their_largest_phase():
    cols, start, end = _trace(50, slow=17)  # block 17: 500 us more in GPU + seen
    for k in ("launch_begin", "launched", "done_seen", "woke", "copied"):
        cols[k][30] += 300_000               # block 30: 300 us more in hand-over (calls are 10 ms apart)
    end[30] += 300_000
    b = breakdown(cols, start, end, deadline_ns=200_000)
    assert [o.index for o in b.over] == [17, 30] and b.deadline_us == 200.0
    assert [o.largest for o in b.over] == ["GPU + seen", "hand-over"]
    assert b.over[0].total_us == pytest.approx(508.0) and b.over[0].phases_us["GPU + seen"] == pytest.approx(501.0)
    assert b.over[1].gpu_us == pytest.approx(0.7)
    assert b.over[1].total_us == pytest.approx(308.0) and b.over[1].phases_us["hand-over"] == pytest.approx(301.0)
    assert b.over_by_phase() == {"GPU + seen": 1, "hand-over": 1}
    assert "| phase |" in "\n".join(markdown("W3", b))
    # without a deadline: no block is over one
    bare = breakdown(cols, start, end)
    assert bare.over == [] and bare.deadline_us is None


def test_many_blocks_over_the_deadline_are_summed_up_by_phase():
    cols, start, end = _trace(30)
    b = breakdown(cols, start, end, deadline_ns=5_000)  # every block (8 us) is over
    assert len(b.over) == 30 and b.over_by_phase() == {"python in": 30}  # every phase 1 us: the first named
    assert "| phase |" in "\n".join(markdown("W3", b))  # the table renders; the list is cut at MAX_OVER_LISTED
