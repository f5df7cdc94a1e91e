"""W3's report (pygpukit_dsp/bench/w3_report.py): its targets and verdicts, the Markdown table,
the JSON dict; the latency figures (bench/latency.py)."""

import json

import numpy as np
import pytest

from pygpukit_dsp.bench.latency import LatencyFigures
from pygpukit_dsp.bench.w3_report import ContentionReport, ContentionRow, OutputCheck


def _lat(p99: float, misses: int = 0, blocks: int = 3000) -> LatencyFigures:
    return LatencyFigures(blocks=blocks, p50=p99 / 2, p90=p99 * 0.8, p99=p99, p999=p99 * 1.5, max=p99 * 3,
                          mean=p99 / 2, misses=misses)


def _report(load_p99=80.0, load_misses=0, load_w2=200e9, load_status="ok") -> ContentionReport:
    rows = [
        ContentionRow("project_solo", "pygpukit-dsp, alone", w1=_lat(60.0), w2_samples_per_s=273e9),
        ContentionRow("project_load", "pygpukit-dsp, W1 + W2 on one scheduler", status=load_status,
                      reason="" if load_status == "ok" else "DeviceError: boom",
                      w1=_lat(load_p99, load_misses) if load_status == "ok" else None,
                      w2_samples_per_s=load_w2 if load_status == "ok" else None, solo_key="project_solo",
                      extra={"scheduler_w1": {"latency": {"p99": 41_000}, "missed": 0, "submitted": 3300}}),
        ContentionRow("torch_solo", "PyTorch + CUDA graph, alone (priority 0)", w1=_lat(120.0),
                      w2_samples_per_s=37e9),
        ContentionRow("torch_same", "PyTorch, two streams, same priority", w1=_lat(478.0), w2_samples_per_s=30e9,
                      solo_key="torch_solo"),
        ContentionRow("torch_high", "PyTorch, two streams, W1 high priority", status="skipped",
                      reason="torch sees no CUDA GPU", solo_key="torch_solo"),
    ]
    return ContentionReport(realtime="w1", throughput="w2", w1_spec="64 ch x 256 float32", w2_spec="1 ch x 16M",
                            period_us=5333.3, deadline_us=1000.0,
                            settings={"blocks": 3000, "warmup": 300, "quantum_ns": 250_000,
                                      "throughput_mode": "resident", "throughput_seconds": 3.0},
                            machine="test machine", rows=rows,
                            checks=[OutputCheck("pygpukit-dsp w1 under load = alone", 0.0, 1e-5, True)])


def test_targets_met():
    rep = _report()
    assert rep.w1_p99_ratio("project_load") == pytest.approx(80 / 60)
    assert rep.w2_kept("project_load") == pytest.approx(200 / 273)
    assert rep.w1_p99_ratio("torch_same") == pytest.approx(478 / 120)
    assert rep.w1_p99_ratio("project_solo") is None and rep.w1_p99_ratio("torch_high") is None
    verdicts = rep.targets()
    assert [t.met for t in verdicts] == [True, True, True]
    assert "1.33x: 80.0 / 60.0 us" in verdicts[0].detail
    assert "0 of 3000 blocks" in verdicts[1].detail and "1 ms" in verdicts[1].name
    assert "73.3%: 200.0 / 273.0 Gsamples/s" in verdicts[2].detail


def test_targets_not_met_and_not_measured():
    assert [t.met for t in _report(load_p99=91.0, load_misses=2, load_w2=190e9).targets()] == [False, False, False]
    assert [t.met for t in _report(load_p99=90.0, load_w2=191.1e9).targets()] == [True, True, True]  # bounds
    rep = _report(load_status="failed")
    assert [t.met for t in rep.targets()] == [None, None, None]
    assert "not measured" in rep.markdown()


def test_markdown_table_targets_and_checks():
    md = _report(load_misses=3).markdown()
    assert "| run | W1 p50 us | W1 p99 us | W1 p99.9 us | W1 max us | W1 misses > 1000 us | W2 Gsamples/s " \
           "| W1 p99 load/solo | W2 kept |" in md
    assert "| pygpukit-dsp, W1 + W2 on one scheduler | 40.0 | 80.0 | 120.0 | 240.0 | 3 | 200.0 | 1.33x | 73.3% |" in md
    assert "| pygpukit-dsp, alone | 30.0 | 60.0 | 90.0 | 180.0 | 0 | 273.0 |  |  |" in md
    assert "| PyTorch, two streams, W1 high priority | | | | | | | | skipped: torch sees no CUDA GPU |" in md
    assert "zero W1 deadline misses at 1 ms under load: **not met** (3 of 3000 blocks; alone 0)" in md
    assert "W1 p99 under load <= 1.5x its solo p99: **met**" in md
    assert "Outputs: all checks passed" in md
    assert "- pygpukit-dsp, W1 + W2 on one scheduler: p99 41.0 us, missed 0 of 3300" in md


def test_markdown_lists_the_process_s_misses_with_their_facts():
    rep = _report(load_misses=2)
    rep.row("project_load").extra["miss_causes"] = {
        "misses": 2, "host_stall": 0, "host_slow": 1, "process": 1, "process_late_back": 1, "process_gc": 0,
        "probe_gaps": 3, "gc_collections": 4, "gc_max_us": 310.0,
        "blocks": [{"index": 7, "cause": "host_slow"},
                   {"index": 9, "cause": "process", "back_late_us": 1210.5, "gc_us": 0.0, "gpu_us": 14.2}]}
    md = rep.markdown()
    assert "- pygpukit-dsp, W1 + W2 on one scheduler: 2 misses: 0 host stalls, 1 host slowdowns, 1 the process's" in md
    assert "of the process's: 1 came back from the paced sleep >= 100 us late, 0 had the garbage collector" in md
    assert "block 9 1210.5 / 0 / 14.2" in md and "block 7" not in md.split("of the process's")[1]
    assert "garbage collections during the interleaved run: 4, the longest 310 us" in md


def test_a_failed_check_shows_in_the_report():
    rep = _report()
    rep.checks.append(OutputCheck("PyTorch w1 = pygpukit-dsp", 0.5, 2e-3, False, project=False))
    assert not rep.checks_passed
    md = rep.markdown()
    assert "**CHECK FAILED**" in md and "rel err 5.0e-01 (tolerance 2e-03) FAILED" in md


def test_json_has_rows_targets_ratios_and_checks():
    d = json.loads(json.dumps(_report().to_dict()))
    assert [r["key"] for r in d["rows"]] == ["project_solo", "project_load", "torch_solo", "torch_same", "torch_high"]
    assert d["rows"][1]["w1"]["p99"] == 80.0 and d["rows"][1]["w2_samples_per_s"] == 200e9
    assert [t["met"] for t in d["targets"]] == [True, True, True]
    assert d["ratios"]["project_load"]["w2_kept"] == pytest.approx(200 / 273)
    assert d["ratios"]["torch_high"] == {"w1_p99_load_over_solo": None, "w2_kept": None}
    assert d["checks_passed"] is True and d["settings"]["quantum_ns"] == 250_000


def test_latency_figures_count_misses_over_the_deadline():
    ns = np.array([100_000] * 97 + [1_000_000, 1_000_001, 2_000_000], dtype=np.int64)
    f = LatencyFigures.from_ns(ns, deadline_ns=1_000_000, overruns=1)
    assert f.misses == 2 and f.blocks == 100 and f.max == 2000.0 and f.p50 == 100.0 and f.overruns == 1
