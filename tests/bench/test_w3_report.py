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
    assert [t.key for t in verdicts] == ["w1_p99_load_over_solo", "w1_misses_under_load", "w2_kept"]
    assert [t.limit for t in verdicts] == [1.5, 0, 0.70]
    assert verdicts[0].value == pytest.approx(80 / 60) and verdicts[1].value == 0
    assert verdicts[2].value == pytest.approx(200 / 273)


def test_targets_not_met_and_not_measured():
    assert [t.met for t in _report(load_p99=91.0, load_misses=2, load_w2=190e9).targets()] == [False, False, False]
    assert [t.met for t in _report(load_p99=90.0, load_w2=191.1e9).targets()] == [True, True, True]  # bounds
    rep = _report(load_status="failed")
    assert [t.met for t in rep.targets()] == [None, None, None] and [t.value for t in rep.targets()] == [None] * 3
    assert rep.process_miss_target() is None  # nothing sorted by cause


def test_the_report_s_rows_targets_and_checks():
    rep = _report(load_misses=3)
    assert "| run | W1 p50 us |" in rep.markdown()  # the table renders
    d = json.loads(json.dumps(rep.to_dict()))
    load = d["rows"][1]
    assert (load["w1"]["p50"], load["w1"]["p99"], load["w1"]["misses"], load["w2_samples_per_s"]) == (40.0, 80.0, 3, 200e9)
    assert d["ratios"]["project_load"]["w1_p99_load_over_solo"] == pytest.approx(80 / 60)
    assert "project_solo" not in d["ratios"]  # the solo rows are what the others are compared with
    skipped = d["rows"][4]
    assert (skipped["status"], skipped["w1"], skipped["w2_samples_per_s"]) == ("skipped", None, None)
    misses = d["targets"][1]
    assert (misses["key"], misses["met"], misses["value"], misses["limit"]) == ("w1_misses_under_load", False, 3, 0)
    assert d["targets"][0]["met"] is True and d["checks_passed"] is True
    assert d["rows"][1]["extra"]["scheduler_w1"] == {"latency": {"p99": 41_000}, "missed": 0, "submitted": 3300}


def test_misses_the_process_is_blamed_for_are_a_verdict_beside_the_targets():
    rep = _report(load_misses=2)
    rep.row("project_load").extra["miss_causes"] = {
        "misses": 2, "host_stall": 0, "host_slow": 1, "process": 1, "process_late_back": 1, "process_gc": 0,
        "probe_gaps": 3, "gc_collections": 4, "gc_max_us": 310.0,
        "blocks": [{"index": 7, "cause": "host_slow"},
                   {"index": 9, "cause": "process", "back_late_us": 1210.5, "gc_us": 0.0, "gpu_us": 14.2}]}
    pt = rep.process_miss_target()
    assert (pt.key, pt.met, pt.value, pt.limit) == ("w1_process_misses_under_load", False, 1, 0)
    d = json.loads(json.dumps(rep.to_dict()))
    assert d["process_miss_target"]["met"] is False and d["process_miss_target"]["value"] == 1
    assert "| run |" in rep.markdown()  # the causes render beside the table
    rep.row("project_load").extra["miss_causes"].update(host_slow=2, process=0, blocks=[])
    assert rep.process_miss_target().met is True


def test_a_failed_check_fails_the_report():
    rep = _report()
    rep.checks.append(OutputCheck("PyTorch w1 = pygpukit-dsp", 0.5, 2e-3, False, project=False))
    assert not rep.checks_passed
    d = rep.to_dict()
    assert d["checks_passed"] is False
    assert [(c["ok"], c["project"], c["max_rel_err"]) for c in d["checks"]] == [(True, True, 0.0), (False, False, 0.5)]


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
