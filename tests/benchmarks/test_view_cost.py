"""benchmarks/view_cost.py on the cpu backend (the figures mean nothing here; the structure does):
W2 and W1 each run plain and with a view by gk-stream run, the view run's sink and WebSocket
client are in the report, and each workload's ratio is judged against its target."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("aiohttp", reason="the view needs the 'view' extra (aiohttp)")


def test_view_cost_reports_plain_and_view_runs_of_w2_and_w1(tmp_path):
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "view_cost.py"), "--backend", "cpu",
                           "--pairs", "1", "--seconds", "1", "--w2-blocks", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["backend"] == "cpu" and data["pairs"] == 1 and data["attach"] == "add" and data["client"] is True
    assert data["same_process"] is True
    assert set(data["workloads"]) == {"w2", "w1"}
    for name, figure, target in (("w2", "samples_per_s", 0.98), ("w1", "p99_us", 1.1)):
        w = data["workloads"][name]
        assert w["figure"] == figure and w["target"] == target and len(w["ratios"]) == 1
        assert w["warmup"]["view"] is True and w["warmup"]["client"]["error"] is None  # run first, not counted
        assert w["plain_spread"] == 1.0  # one run without the view
        plain, view = w["runs"]
        assert (plain["view"], view["view"]) == (False, True)
        assert w["ratio"] == pytest.approx(view[figure] / plain[figure])
        assert w["meets"] == (w["ratio"] >= target if name == "w2" else w["ratio"] <= target)
        assert len(plain["sinks"]) == 1 and set(view["sinks"]) == {"out", "view"}
        (plain_sink,) = plain["sinks"].values()
        assert view["sinks"]["view"]["samples"] == view["sinks"]["out"]["samples"] == plain_sink["samples"] > 0
        assert view["client"]["error"] is None and view["client"]["messages"] > 0  # hello, health, frames
    assert data["workloads"]["w2"]["runs"][0]["blocks"] == 2
    assert data["workloads"]["w1"]["runs"][1]["client"]["frames"] > 0


def test_pair_ratios_take_each_pair_in_either_order_and_skip_missing_figures():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import view_cost
    finally:
        sys.path.pop(0)
    runs = [{"view": False, "x": 100.0}, {"view": True, "x": 110.0},
            {"view": True, "x": 90.0}, {"view": False, "x": 100.0},
            {"view": False, "x": None}, {"view": True, "x": 50.0}]
    assert view_cost.pair_ratios(runs, "x") == [1.1, 0.9]


def test_spread_is_max_over_min_of_the_runs_without_the_view():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import view_cost
    finally:
        sys.path.pop(0)
    runs = [{"view": False, "x": 100.0}, {"view": True, "x": 500.0}, {"view": False, "x": 125.0}]
    assert view_cost.spread(runs, "x") == 1.25
    assert view_cost.spread([{"view": True, "x": 1.0}], "x") is None


def test_median_interval_brackets_the_median_and_is_a_point_for_equal_ratios():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import view_cost
    finally:
        sys.path.pop(0)
    lo, hi = view_cost.median_interval([0.9, 1.0, 1.1, 1.2, 0.95])
    assert 0.9 <= lo <= 1.0 <= hi <= 1.2
    assert view_cost.median_interval([1.0, 1.0, 1.0]) == (1.0, 1.0)
