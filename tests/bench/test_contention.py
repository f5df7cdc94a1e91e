"""The W3 contention bench: its bench file, its report and verdicts, its timing loops, the run's
orchestration (with stand-in engines on the CPU), the CLI without a GPU, and a tiny GPU run."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import pygpukit_dsp
from pygpukit_dsp.bench import contention
from pygpukit_dsp.bench.contention import (ContentionReport, ContentionRow, LatencyFigures, OutputCheck,
                                           SETTLE_BLOCKS, _split, load_contention, run_w3)
from pygpukit_dsp.errors import ConfigError, ConfigErrors
from pygpukit_dsp.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[2]
W3 = ROOT / "benchmarks" / "w3.yaml"
NO_DRIVER = {"GK_LIBCUDA": "/nonexistent/libcuda.so.1"}

PIPES = """pipelines:
  - name: fast
    sample_rate: 1000
    block_size: 16
    channels: 2
    qos: {class: realtime, deadline_ms: 1}
    source: {type: synth, signal: noise, seed: 1}
    stages: [{type: gain, linear: 2.0}]
  - name: bulk
    sample_rate: 1000
    block_size: 64
    channels: 1
    dtype: complex64
    qos: {class: throughput}
    source: {type: synth, signal: noise, seed: 2}
    stages: [{type: gain, linear: 0.5}]
"""


def _file(tmp_path, bench: str, pipes: str = PIPES) -> Path:
    p = tmp_path / "w3.yaml"
    p.write_text("version: 1\n" + bench + pipes)
    return p


# ----------------------------------------------------------------------------- the bench file


def test_w3_yaml_names_w1_realtime_and_w2_throughput_with_the_issue_defaults():
    bench = load_contention(W3)
    st = bench.settings
    assert (bench.realtime.name, bench.throughput.name) == ("w1", "w2")
    assert (st.blocks, st.warmup, st.period_ms, st.quantum_ns) == (3000, 300, None, 40_000)
    assert st.throughput_mode == "resident" and st.throughput_seconds == 3.0
    assert bench.realtime.qos.deadline_ms == 1
    assert bench.realtime.qos.spin_us > 5333  # W1's thread spins through its 5.33-ms period
    assert [s.type for s in bench.realtime.stages] == ["fir", "mix"]
    assert [s.type for s in bench.throughput.stages] == ["stft", "power", "average"]


def test_pipeline_loader_and_a_plain_bench_file_pass_over_the_bench_mapping():
    assert [p.name for p in Pipeline.load_all(W3)] == ["w1", "w2"]  # gk-stream run/validate read it
    assert load_contention(ROOT / "benchmarks" / "w1.yaml") is None   # no 'bench:': a latency bench


def test_defaults_pick_the_pipelines_by_qos_class(tmp_path):
    bench = load_contention(_file(tmp_path, "bench: {kind: contention}\n"))
    assert (bench.realtime.name, bench.throughput.name) == ("fast", "bulk")
    st = bench.settings
    assert (st.blocks, st.warmup, st.period_ms, st.quantum_ns, st.throughput_seconds, st.spin_us) == \
        (3000, 300, None, 250_000, 3.0, None)


def test_overrides_are_read(tmp_path):
    bench = load_contention(_file(tmp_path, "bench:\n  kind: contention\n  realtime: fast\n  throughput: bulk\n"
                                  "  blocks: 500\n  warmup: 0\n  period_ms: 1\n  quantum_ns: 100000\n"
                                  "  throughput_seconds: 0.5\n  spin_us: 0\n"))
    st = bench.settings
    assert (st.blocks, st.warmup, st.period_ms, st.quantum_ns, st.throughput_seconds, st.spin_us) == \
        (500, 0, 1.0, 100_000, 0.5, 0)


def _error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as ei:
        load_contention(path)
    e = ei.value
    return e.errors[0] if isinstance(e, ConfigErrors) else e


def test_unknown_key_points_at_the_key_with_a_did_you_mean(tmp_path):
    e = _error(_file(tmp_path, "bench:\n  kind: contention\n  blokcs: 5\n"))
    assert e.where == f"{tmp_path / 'w3.yaml'}:4:3"
    assert "unknown parameter 'blokcs'" in e.message and "did you mean 'blocks'" in e.hint


@pytest.mark.parametrize("line, col, text", [
    ("  blocks: 2\n", 11, "greater than or equal to 6"),
    ("  period_ms: -1\n", 14, "greater than 0"),
    ("  throughput_mode: streamed\n", 20, "only 'resident'"),
    ("  quantum_ns: 10\n", 15, "greater than or equal to 1000"),
])
def test_bad_values_point_at_the_value(tmp_path, line, col, text):
    e = _error(_file(tmp_path, "bench:\n  kind: contention\n" + line))
    assert e.where == f"{tmp_path / 'w3.yaml'}:4:{col}"
    assert text in e.message


def test_pipeline_names_and_classes_are_checked(tmp_path):
    e = _error(_file(tmp_path, "bench:\n  kind: contention\n  realtime: fats\n"))
    assert e.where.endswith(":4:13") and "no pipeline named 'fats'" in e.message and "'fast'" in e.hint
    e = _error(_file(tmp_path, "bench:\n  kind: contention\n  realtime: bulk\n"))
    assert e.where.endswith(":4:13") and "qos class throughput" in e.message
    no_rt = PIPES.replace("class: realtime, deadline_ms: 1", "class: best_effort")
    e = _error(_file(tmp_path, "bench:\n  kind: contention\n", no_rt))
    assert e.where.endswith(":3:3") and "0 pipelines have qos class realtime" in e.message


def test_bench_kind_and_shape_are_checked(tmp_path):
    e = _error(_file(tmp_path, "bench:\n  kind: latency\n"))
    assert e.where.endswith(":3:9") and "unknown bench kind 'latency'" in e.message
    e = _error(_file(tmp_path, "bench:\n  blocks: 10\n"))
    assert "missing required parameter 'kind'" in e.message and e.where.endswith(":3:3")
    e = _error(_file(tmp_path, "bench: [1, 2]\n"))
    assert e.where.endswith(":2:8") and "bench must be a mapping" in e.message


# ----------------------------------------------------------------------------- the report


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


# ----------------------------------------------------------------------------- timing loops


def test_paced_loop_keeps_the_period_times_each_block_and_keeps_the_last_outputs():
    inputs = [np.full((1, 4), i, np.float32) for i in range(4)]
    calls = []

    def process(x):
        calls.append(time.perf_counter_ns())
        return x * 2

    period = 2_000_000
    run = contention._paced_w1(process, inputs, warmup=3, blocks=9, period_ns=period)
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

    run = contention._paced_w1(slow, [np.zeros((1, 1))], warmup=0, blocks=6, period_ns=1_000_000)
    assert run.overruns == 6


def test_the_feed_keeps_each_output_without_copying_it_inside_the_timed_call():
    # the feed's return ends W1's latency: a copy of the output there would be timed (the PyTorch
    # baseline's copy comes after its stamp), so it keeps the new array process() returned
    made = []

    def process(x, **_):
        made.append(x * 2)
        return made[-1]

    feed = contention._Feed(process, [np.full((1, 4), i, np.float32) for i in range(3)])
    ys = [feed(None) for _ in range(2)] + [feed.at(None, 0, 0, False) for _ in range(contention.W1_CHECK_BLOCKS)]
    assert feed.count == 2 + contention.W1_CHECK_BLOCKS
    assert all(a is b for a, b in zip(feed.last, ys[-contention.W1_CHECK_BLOCKS:]))
    assert [float(y[0, 0]) for y in feed.last] == [2 * (i % 3) for i in range(2, feed.count)]


def test_pump_rate_counts_blocks_in_the_window():
    pump = contention._Pump(stamps=[5, 10, 20, 30, 40])
    assert pump.rate(10, 40, 100) == pytest.approx(3 * 100 / 30e-9)


def test_pump_errors_reach_the_caller():
    def body(pump):
        raise RuntimeError("device lost")

    pump = contention._start_pump(body)
    with pytest.raises(RuntimeError, match="device lost"):
        contention._wait_started(pump)


# ----------------------------------------------------------------------------- orchestration


class _FakeNative:
    def __init__(self):
        self.submitted = 0

    def submit(self, slot, n, final):
        self.submitted += 1


class _FakeEngine:
    """What run_w3 uses of a CudaEngine, computing on the CPU backend (no GPU here)."""

    def __init__(self, pipeline, chain):
        from pygpukit_dsp.backends import open_backend

        self.cpu = open_backend(pipeline, chain, "cpu")
        self.units_per_block = 4
        self._engine, self._items = _FakeNative(), chain.input.block_size
        self.resident = False
        self.closed = False

    _processed = 0

    released = 0  # blocks handed over with a release time (issue 13's native wait)

    def process(self, x, *, release_ns=None, spin_us=0, prewarm=False, warm_us=0, arrive=None):
        if release_ns is not None:  # as CudaEngine: wait for the release inside the call
            from pygpukit_dsp import _native

            if warm_us > 0:  # back in Python warm_us before the release, then the rest
                _native.wait_until(int(release_ns) - warm_us * 1000, int(spin_us))
                if arrive is not None:
                    arrive()
            _native.wait_until(int(release_ns), int(spin_us))
            self.released += 1
        t = time.perf_counter_ns()
        y = self.cpu.process(x)
        self._processed += 1
        if self._trace is not None:  # the stamps CudaEngine.block_trace() has, on one clock
            now = time.perf_counter_ns()
            self._trace.append([t, t, t, t, now, now, 1000, 1, now])
        return y

    _trace: list | None = None

    def set_trace(self, capacity):
        self._trace = [] if capacity else None

    def block_trace(self):
        from pygpukit_dsp.backends.cuda_engine import TRACE_FIELDS

        rows = np.array(self._trace or [], dtype=np.int64).reshape(-1, len(TRACE_FIELDS))
        return {name: rows[:, i] for i, name in enumerate(TRACE_FIELDS)}

    def set_resident(self, on=True):
        self.resident = on

    def pump_resident(self, seconds):
        assert self.resident
        self._stop_pump = False
        stamps, end = [], time.monotonic() + seconds
        while not self._stop_pump and time.monotonic() < end:
            self._engine.submit(0, self._items, False)
            time.sleep(0.0002)
            stamps.append(time.monotonic_ns())
        return stamps

    def stop_pump(self):
        self._stop_pump = True

    def reset(self):
        self.cpu.reset()

    def close(self):
        self.closed = True


class _FakeDispatch:
    attached: list = []

    def __init__(self, scheduler, *, device_index=0, spin_us=200):
        self.scheduler, self.spin_us = scheduler, spin_us

    def attach(self, engine, sid):
        _FakeDispatch.attached.append((engine, sid))

    def stats(self):
        return {"launches": 0}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@pytest.fixture
def fake_gpu(monkeypatch):
    from pygpukit_dsp.backends import cuda_dispatch

    engines = []

    def engine(self, pipeline, chain):
        engines.append(_FakeEngine(pipeline, chain))
        return engines[-1]

    monkeypatch.setattr(contention, "_require_cuda", lambda *a: None)
    monkeypatch.setattr(contention._ProjectRun, "_engine", engine)
    monkeypatch.setattr(cuda_dispatch, "CudaDispatch", _FakeDispatch)
    monkeypatch.setattr(contention, "W2_WARM_S", 0.01)
    _FakeDispatch.attached = []
    return engines


def test_run_w3_orchestrates_the_project_runs(tmp_path, fake_gpu):
    bench = load_contention(_file(tmp_path, "bench: {kind: contention, period_ms: 1, quantum_ns: 100000, "
                                            "segments: 3}\n"))
    lines = []
    # wait=None: latency from the hand-over (a stall of this shared test host while waiting for a
    # release would count as a miss from the release; the release waits have their own test)
    rep = run_w3(bench, blocks=12, warmup=2, throughput_seconds=0.05, baseline=False, progress=lines.append,
                 wait=None)
    solo, load = rep.row("project_solo"), rep.row("project_load")
    assert solo.w1.blocks == load.w1.blocks == 12 and solo.w1.misses == 0
    assert solo.w2_samples_per_s > 0 and load.w2_samples_per_s > 0
    assert rep.checks_passed and [c.project for c in rep.checks] == [True, True]
    # W2 alone; then W1 and W2 on one dispatcher (interleaved); then W1's reference run, not
    # attached; every engine closed
    assert len(fake_gpu) == 4 and all(e.closed for e in fake_gpu)
    assert [sid for _, sid in _FakeDispatch.attached] == [1, 1, 2]
    assert fake_gpu[0].resident and fake_gpu[0]._engine.submitted > 0  # W2 alone ran resident blocks
    assert fake_gpu[2].resident and fake_gpu[2]._engine.submitted > 0  # ... and under load
    # W1 as one stream from reset: warm-up, 3 x 2 segments (20 settle blocks each), the timed blocks
    assert fake_gpu[3]._processed == 2 + 6 * SETTLE_BLOCKS + 2 * 12
    assert load.extra["scheduler_w1"]["period_ns"] == 1_000_000 and load.extra["segments"] == 3
    assert load.extra["scheduler_w2"]["units_per_block"] == 4
    assert rep.settings["period_ns"] == 1_000_000 and rep.deadline_us == 1000.0
    assert any("3 alternating segments" in ln for ln in lines)
    assert len(rep.targets()) == 3
    # both kinds traced: the breakdown covers exactly the timed blocks
    assert solo.extra["w1_breakdown"].blocks == load.extra["w1_breakdown"].blocks == 12
    assert "Where W1's time went, pygpukit-dsp, alone" in rep.markdown()
    # ... and lists the blocks over W1's deadline (none here), with the deadline it used
    assert solo.extra["w1_breakdown"].deadline_us == load.extra["w1_breakdown"].deadline_us == 1000.0
    assert rep.markdown().count("Blocks over the 1000 us deadline: 0") == 2


def test_w1_waits_for_its_release_inside_its_call_by_default(tmp_path, fake_gpu):
    # issue 13: W1's blocks are handed over before their release and wait natively (latency from
    # the release); wait=None keeps the earlier method (a Python wait, latency from the hand-over)
    bench = load_contention(_file(tmp_path, "bench: {kind: contention, period_ms: 1, segments: 1}\n"))
    rep = run_w3(bench, blocks=8, warmup=2, throughput_seconds=0.02, baseline=False)
    w1 = fake_gpu[1]  # the interleaved run's W1 engine
    assert w1.released == 2 + 2 * SETTLE_BLOCKS + 2 * 8
    assert rep.settings["release_wait"] == {"spin_us": 200, "prewarm": True, "warm_us": 100}
    fake_gpu.clear()
    rep = run_w3(bench, blocks=8, warmup=2, throughput_seconds=0.02, baseline=False, wait=None)
    assert fake_gpu[1].released == 0 and rep.settings["release_wait"] is None
    # the spin window is the realtime pipeline's qos.spin_us (200 us by default, above)
    spun = load_contention(_file(tmp_path, "bench: {kind: contention, period_ms: 1, segments: 1}\n",
                                 PIPES.replace("deadline_ms: 1}", "deadline_ms: 1, spin_us: 1100}")))
    fake_gpu.clear()
    rep = run_w3(spun, blocks=8, warmup=2, throughput_seconds=0.02, baseline=False)
    assert rep.settings["release_wait"]["spin_us"] == 1100


def test_each_timed_w1_block_counts_its_thread_s_context_switches_and_time_off_the_cpu():
    from pygpukit_dsp.bench.contention import _paced_w1

    def sleepy(x):
        time.sleep(0.002)  # a voluntary switch, 2 ms not running
        return x

    run = _paced_w1(sleepy, [np.zeros(4)], warmup=1, blocks=3, period_ns=3_000_000)
    assert run.switches.shape == (3, 3)
    assert (run.switches[:, 0] >= 1).all() and (run.switches[:, 2] >= 1_500_000).all()


@pytest.mark.parametrize("blocks,segments,parts", [(12, 3, [4, 4, 4]), (10, 3, [4, 3, 3]), (2, 5, [1, 1])])
def test_timed_blocks_split_evenly_over_segments(blocks, segments, parts):
    assert _split(blocks, segments) == parts


def test_without_pytorch_the_baseline_rows_are_skipped(tmp_path, fake_gpu, monkeypatch):
    from pygpukit_dsp.bench.baselines import BaselineSkipped, torch_w3

    def no_torch(*a, **k):
        raise BaselineSkipped("torch is not installed")

    monkeypatch.setattr(torch_w3, "TorchW3", no_torch)
    bench = load_contention(_file(tmp_path, "bench: {kind: contention, period_ms: 1}\n"))
    rep = run_w3(bench, blocks=6, warmup=0, throughput_seconds=0.02)
    torch_rows = [r for r in rep.rows if r.key.startswith("torch")]
    assert [r.status for r in torch_rows] == ["skipped"] * 3
    assert all(r.reason == "torch is not installed" for r in torch_rows)
    assert rep.checks_passed and "skipped: torch is not installed" in rep.markdown()


class _FakeStream:
    def __init__(self, priority):
        self.priority = priority


class _FakeTorchW3:
    """TorchW3's surface, computing on the CPU backend: exercises the baseline rows' plumbing."""

    def __init__(self, w1, c1, w2, c2):
        from pygpukit_dsp.backends import open_backend

        self.w1 = open_backend(w1, c1, "cpu")
        self.w2 = open_backend(w2, c2, "cpu")
        self.w2_note = "PyTorch bulk ran eager (test)"
        self.closed = False

    def streams(self, high):
        return _FakeStream(-5 if high else 0), _FakeStream(0)

    def w1_process(self, x):
        return self.w1.process(x)

    def w1_reset(self):
        self.w1.reset()

    def w1_run(self, stream, fn):
        self.w1.reset()
        return fn()

    def w2_pump(self, stream, blocks):
        def body(pump):
            self.w2.reset()
            pump.outputs = [np.array(self.w2.process(b), copy=True) for b in blocks]
            pump.started.set()
            while not pump.stop.is_set():
                time.sleep(0.0002)
                pump.stamps.append(time.perf_counter_ns())
        return body

    def close(self):
        self.closed = True


def test_pytorch_rows_priorities_and_checks(tmp_path, fake_gpu, monkeypatch):
    from pygpukit_dsp.bench.baselines import torch_w3

    monkeypatch.setattr(torch_w3, "TorchW3", _FakeTorchW3)
    bench = load_contention(_file(tmp_path, "bench: {kind: contention, period_ms: 1}\n"))
    rep = run_w3(bench, blocks=8, warmup=1, throughput_seconds=0.02)
    rows = {r.key: r for r in rep.rows}
    assert all(rows[k].status == "ok" and rows[k].w1.blocks == 8 and rows[k].w2_samples_per_s > 0
               for k in ("torch_solo", "torch_same", "torch_high"))
    assert rows["torch_high"].extra == {"w1_priority": -5, "w2_priority": 0}
    assert rows["torch_same"].extra == {"w1_priority": 0, "w2_priority": 0}
    assert rep.w1_p99_ratio("torch_high") is not None and rep.w2_kept("torch_same") is not None
    baseline_checks = [c for c in rep.checks if not c.project]
    assert len(baseline_checks) == 4 and all(c.ok for c in baseline_checks)
    assert "PyTorch bulk ran eager (test)" in rep.notes


def test_a_pytorch_failure_is_reported_not_fatal(tmp_path, fake_gpu, monkeypatch):
    from pygpukit_dsp.bench.baselines import torch_w3

    class Broken(_FakeTorchW3):
        def w2_pump(self, stream, blocks):
            def body(pump):
                raise RuntimeError("CUDA error: out of memory")
            return body

    monkeypatch.setattr(torch_w3, "TorchW3", Broken)
    bench = load_contention(_file(tmp_path, "bench: {kind: contention, period_ms: 1}\n"))
    rep = run_w3(bench, blocks=6, warmup=0, throughput_seconds=0.02)
    rows = {r.key: r for r in rep.rows}
    assert rows["torch_solo"].w1 is not None and rows["torch_solo"].w2_samples_per_s is None
    assert rows["torch_same"].status == "failed" and "out of memory" in rows["torch_same"].reason
    assert rep.row("project_load").status == "ok" and all(t.met is not None for t in rep.targets())


# ----------------------------------------------------------------------------- CLI


def _gk(*args, env=None):
    package_parent = Path(pygpukit_dsp.__file__).resolve().parents[1]
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join([str(package_parent), *filter(None, [full_env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", *map(str, args)], cwd=ROOT.anchor,
                          capture_output=True, text=True, env=full_env, timeout=120)


def test_cli_w3_without_a_gpu_is_a_device_error_without_traceback():
    r = _gk("bench", W3, env=NO_DRIVER)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "the contention bench (W3) needs a usable GPU" in r.stderr and "driver" in r.stderr


def test_cli_w3_refuses_the_cpu_backend_and_flags_of_other_benches():
    r = _gk("bench", W3, "--backend", "cpu")
    assert r.returncode == 2 and "backend 'cpu' cannot run it" in r.stderr
    r = _gk("bench", W3, "--compare", "torch")
    assert r.returncode == 2 and "--compare does not apply to a contention bench file" in r.stderr
    # a paced bench's flags too (--cpu was ignored here before: W3 pins by the pipeline's qos.cpu)
    for flag in (["--cpu", "1"], ["--spin-us", "0"], ["--no-prewarm"]):
        r = _gk("bench", W3, *flag)
        assert r.returncode == 2 and f"{flag[0]} does not apply to a contention bench file" in r.stderr, r.stderr
    r = _gk("bench", ROOT / "benchmarks" / "w1.yaml", "--period-ms", "1")
    assert r.returncode == 2 and "--period-ms applies to contention bench files only" in r.stderr


def test_cli_passes_overrides_and_fails_on_a_failed_project_check(tmp_path, monkeypatch, capsys):
    from pygpukit_dsp import cli

    seen = {}

    def fake_run(bench, **kw):
        seen.update(kw, realtime=bench.realtime.name)
        rep = _report()
        rep.checks.append(OutputCheck("pygpukit-dsp w2 under load = alone", 0.1, 1e-5, False))
        return rep

    monkeypatch.setattr(contention, "run_w3", fake_run)
    js, md = tmp_path / "w3.json", tmp_path / "w3.md"
    rc = cli.main(["bench", str(W3), "--blocks", "500", "--warmup", "0", "--period-ms", "1", "--quiet",
                   "--json", str(js), "--markdown", str(md)])
    assert rc == 1 and "output check failed: pygpukit-dsp w2 under load = alone" in capsys.readouterr().err
    assert seen == {"backend": None, "blocks": 500, "warmup": 0, "period_ms": 1.0, "progress": None,
                    "realtime": "w1"}
    assert json.loads(js.read_text())["checks_passed"] is False and "**CHECK FAILED**" in md.read_text()


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_tiny_w3_run_on_the_gpu():
    rep = run_w3(load_contention(W3), blocks=50, warmup=10, period_ms=1.0, throughput_seconds=0.3)
    assert [r.key for r in rep.rows] == ["project_solo", "project_load", "torch_solo", "torch_same", "torch_high"]
    for key in ("project_solo", "project_load"):
        r = rep.row(key)
        assert r.status == "ok" and r.w1.blocks == 50 and 0 < r.w1.p50 <= r.w1.p99 <= r.w1.max
        assert r.w2_samples_per_s > 0
    assert rep.row("project_load").extra["scheduler_w2"]["completed"] > 0
    assert all(r.status in ("ok", "skipped") for r in rep.rows), [(r.key, r.reason) for r in rep.rows]
    assert rep.checks and rep.checks_passed, [c for c in rep.checks if not c.ok]
    assert len(rep.targets()) == 3 and all(t.met is not None for t in rep.targets())
    json.dumps(rep.to_dict())
    assert "| pygpukit-dsp, W1 + W2 on one scheduler |" in rep.markdown()
    # the W1 latency of both project runs broken into phases from the engine's trace
    load_bd = rep.row("project_load").extra["w1_breakdown"]
    assert load_bd.blocks == 50 and load_bd.gpu is not None and load_bd.gpu.p50_us > 0
    assert "Where W1's time went, pygpukit-dsp, W1 + W2 on one scheduler" in rep.markdown()


def test_misses_are_split_into_host_stalls_and_the_process_s():
    from pygpukit_dsp.bench.contention import _Timed, _W1Run, miss_causes
    from pygpukit_dsp.bench.trace import Breakdown, OverBlock, PhaseFigures

    starts = np.array([0, 100_000_000, 200_000_000], dtype=np.int64)  # apart: one episode each
    ends = starts + np.array([50_000, 1_500_000, 1_800_000])
    timed = _Timed()
    timed.runs.append(_W1Run(ends - starts, [], 0, 0, 0, starts, ends))
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
    from pygpukit_dsp.bench.contention import _Timed, _W1Run, miss_causes
    from pygpukit_dsp.bench.trace import Breakdown, OverBlock, PhaseFigures

    starts = np.array([0, 100_000_000, 200_000_000], dtype=np.int64)
    ends = starts + np.array([50_000, 1_500_000, 1_800_000])
    timed = _Timed()
    timed.runs.append(_W1Run(ends - starts, [], 0, 0, 0, starts, ends))
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
    # one period after the slow one (5.33 ms, as in session 14's run Z: blocks 2441 and 2442):
    # one episode, the host's
    near = _Timed()
    s2 = np.array([0, 100_000_000, 105_333_333], dtype=np.int64)
    near.runs.append(_W1Run(ends - starts, [], 0, 0, 0, s2, s2 + (ends - starts)))
    c = miss_causes(near, bd, (np.array([], dtype=np.int64), np.array([], dtype=np.int64)))
    assert (c["host_slow"], c["process"], c["episode"]) == (2, 0, 1)
    assert c["blocks"][1]["episode_of"] == 1
    # an episode is the misses near a host's miss, not a chain of them: block 1 (15 ms after the
    # slow block 0) joins it, block 2 (15 ms after block 1, 30 ms after block 0) does not
    over0 = [OverBlock(0, 1500.0, {"fill": 55.0, "copy out": 12.0, "python in": 1400.0}, "python in", None),
             OverBlock(1, 1800.0, {"fill": 9.0, "copy out": 1.0, "python in": 1780.0}, "python in", None),
             OverBlock(2, 1800.0, {"fill": 9.0, "copy out": 1.0, "python in": 1780.0}, "python in", None)]
    chain = _Timed()
    s3 = np.array([0, 15_000_000, 30_000_000], dtype=np.int64)
    chain.runs.append(_W1Run(ends - starts, [], 0, 0, 0, s3, s3 + (ends - starts)))
    bd0 = Breakdown(3, 1, phases, PhaseFigures("total", 0, 0, 0), None, 1000.0, over0)
    c = miss_causes(chain, bd0, (np.array([], dtype=np.int64), np.array([], dtype=np.int64)))
    assert [(b["cause"], b.get("episode_of")) for b in c["blocks"]] == [("host_slow", None), ("host_slow", 0),
                                                                        ("process", None)]


def test_a_miss_whose_thread_never_switched_yet_did_not_run_is_a_host_stall():
    from pygpukit_dsp.bench.contention import _Timed, _W1Run, miss_causes
    from pygpukit_dsp.bench.trace import Breakdown, OverBlock, PhaseFigures

    starts = np.array([0, 100_000_000, 200_000_000, 300_000_000], dtype=np.int64)
    ends = starts + np.array([50_000, 1_500_000, 1_800_000, 1_400_000])
    # per block: voluntary and involuntary switches, ns not running. Block 1: none, 1.3 ms not
    # running (held beneath the guest); block 2: slept once (a late wake-up could be the guest's);
    # block 3: no switch and running all along (spinning on something of the process's)
    sw = np.array([[0, 0, 0], [0, 0, 1_300_000], [1, 0, 1_300_000], [0, 0, 20_000]], dtype=np.int64)
    timed = _Timed()
    timed.runs.append(_W1Run(ends - starts, [], 0, 0, 0, starts, ends, sw))
    over = [OverBlock(i, (ends[i] - starts[i]) / 1e3, {"python in": 1300.0}, "python in", None) for i in (1, 2, 3)]
    bd = Breakdown(4, 1, [], PhaseFigures("total", 0, 0, 0), None, 1000.0, over)
    c = miss_causes(timed, bd, (np.array([], dtype=np.int64), np.array([], dtype=np.int64)))
    assert [b["cause"] for b in c["blocks"]] == ["host_stall", "process", "process"]
    assert (c["host_stall"], c["vcpu_held"], c["process"]) == (1, 1, 2)
    assert [(b["switches"], b["off_cpu_us"]) for b in c["blocks"]] == [([0, 0], 1300.0), ([1, 0], 1300.0),
                                                                      ([0, 0], 20.0)]


def test_the_process_s_misses_say_how_late_the_thread_came_back_and_whether_the_collector_ran():
    from pygpukit_dsp.bench.contention import _Timed, _W1Run, miss_causes
    from pygpukit_dsp.bench.trace import Breakdown, OverBlock, PhaseFigures

    starts = np.array([0, 100_000_000, 200_000_000], dtype=np.int64)
    ends = starts + np.array([50_000, 1_500_000, 1_800_000])
    timed = _Timed()
    # block 1 came back from its sleep 1.3 ms late; block 2 on time, with a 900-us gen-2
    # collection inside it (between its release and its call)
    timed.add(_W1Run(ends - starts, [], 0, 0, 0, starts, ends), {}, np.array([2.0, 1300.0, 3.0]))
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
    bare = _Timed()
    bare.runs.append(_W1Run(ends - starts, [], 0, 0, 0, starts, ends))
    assert [b["back_late_us"] for b in miss_causes(bare, bd, no_stalls)["blocks"]] == [None, None]


def test_run_w3_reports_miss_causes_from_its_stall_probe(tmp_path, fake_gpu):
    bench = load_contention(_file(tmp_path, "bench: {kind: contention, period_ms: 1, segments: 1}\n"))
    rep = run_w3(bench, blocks=8, warmup=2, throughput_seconds=0.02, baseline=False)
    for key in ("project_solo", "project_load"):
        c = rep.row(key).extra["miss_causes"]
        assert c["misses"] == c["host_stall"] + c["host_slow"] + c["process"] == \
            len(rep.row(key).extra["w1_breakdown"].over)
    assert "probe_max_gap_us" in rep.row("project_solo").extra
    assert "W1's misses by cause" in rep.markdown() and "can be blamed for" in rep.markdown()
    # the run recorded the collector and when each paced wait came back to Python
    c = rep.row("project_solo").extra["miss_causes"]
    assert "gc_collections" in c and "garbage collections during the interleaved run" in rep.markdown()
    assert len(rep.row("project_solo").extra["w1_breakdown"].over) == 0 or all(
        b["back_late_us"] is not None for b in c["blocks"])
