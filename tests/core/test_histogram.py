"""LatencyHistogram (rust/pygpukit-python/src/histogram.rs)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from pygpukit_dsp_core import LatencyHistogram


def exact_percentile(sorted_values: list[int], p: float) -> int:
    rank = max(1, math.ceil(p / 100 * len(sorted_values) - 1e-9))
    return sorted_values[rank - 1]


def test_defaults_and_empty_histogram():
    h = LatencyHistogram()
    assert (h.lowest_ns, h.highest_ns, h.significant_figures) == (1, 3_600_000_000_000, 3)
    assert h.count == 0 and len(h) == 0
    assert h.summary() == {
        "count": 0, "min": 0, "max": 0, "mean": 0.0,
        "p50": 0, "p90": 0, "p99": 0, "p999": 0, "clamped": 0,
    }


@pytest.mark.parametrize("sig", [2, 3, 4])
def test_percentiles_within_stated_precision(sig):
    rng = random.Random(1234 + sig)
    values = [int(rng.lognormvariate(11, 1.5)) for _ in range(5000)]  # ~60 us median, long tail
    h = LatencyHistogram(significant_figures=sig)
    h.record_many(values)
    values.sort()
    for p in (0, 1, 10, 50, 90, 99, 99.9, 100):
        exact = exact_percentile(values, p)
        assert abs(h.percentile(p) - exact) <= max(exact * 10.0**-sig, 1), p
    assert (h.count, h.min, h.max) == (5000, values[0], values[-1])
    assert h.mean == pytest.approx(sum(values) / len(values), rel=1e-12)


def test_summary_keys_and_values():
    h = LatencyHistogram()
    h.record_many(range(1, 1001))
    s = h.summary()
    assert s["p50"] == 500 and s["p90"] == 900 and s["p99"] == 990 and s["p999"] == 999
    assert (s["count"], s["min"], s["max"], s["mean"]) == (1000, 1, 1000, 500.5)


def test_record_n_and_numpy_input():
    h = LatencyHistogram()
    h.record_n(1_000, 3)
    h.record_many(np.array([2_000, 3_000], dtype=np.int64))
    h.record_many(v for v in (4_000,))
    assert h.count == 6
    assert h.percentile(50) == 1_000


def test_values_above_highest_are_clamped_and_counted():
    h = LatencyHistogram(lowest_ns=1, highest_ns=1_000_000)
    h.record_many([10, 5_000_000, 2_000_000])
    assert (h.count, h.clamped, h.max) == (3, 2, 1_000_000)
    assert h.summary()["clamped"] == 2


def test_negative_values_are_rejected_and_nothing_is_recorded():
    h = LatencyHistogram()
    with pytest.raises(ValueError, match="index 2"):
        h.record_many([1, 2, -3])
    assert h.count == 0
    with pytest.raises(ValueError, match=">= 0"):
        h.record(-1)
    with pytest.raises(TypeError):
        h.record("12")


def test_invalid_configuration_and_percentile():
    with pytest.raises(ValueError, match="twice lowest"):
        LatencyHistogram(lowest_ns=100, highest_ns=150)
    with pytest.raises(ValueError, match="significant_figures"):
        LatencyHistogram(significant_figures=6)
    with pytest.raises(ValueError, match="0..=100"):
        LatencyHistogram().percentile(101)


def test_merge_reset_and_self_merge():
    a, b = LatencyHistogram(), LatencyHistogram()
    a.record_many([100, 200])
    b.record_many([300])
    a.merge(b)
    assert (a.count, a.max) == (3, 300)
    a.merge(a)
    assert a.count == 6
    a.reset()
    assert a.count == 0 and a.clamped == 0
    assert "count=0" in repr(a)
