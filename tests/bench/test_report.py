"""The latency report's table (pygpukit_dsp/bench/report.py)."""

from __future__ import annotations

from pygpukit_dsp.bench.report import BenchReport, ImplResult


def _report(*results: ImplResult) -> BenchReport:
    return BenchReport(pipeline="p", mode="latency", backend="cpu", backend_reason="test", input_spec="in",
                       output_spec="out", blocks=10, warmup=1, samples_per_block=64, machine="here",
                       results=list(results))


def test_a_baseline_refused_before_it_was_timed_is_a_row_with_its_reason():
    project = ImplResult("project", "project", latency_us={"p50": 10.0, "p99": 30.0, "p999": 31.0, "max": 32.0},
                         samples_per_s=1e6)
    wrong = ImplResult("numpy", "baseline", status="mismatch", reason="relative error 8e-03 > 2e-03")
    rows = [line for line in _report(project, wrong).markdown().splitlines() if line.startswith("| numpy ")]
    assert len(rows) == 1 and "mismatch: relative error 8e-03 > 2e-03" in rows[0]
