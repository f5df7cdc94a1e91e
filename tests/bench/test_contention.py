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
from pygpukit_dsp.bench import contention, w3_project, w3_pumps
from pygpukit_dsp.bench.contention import load_contention, run_w3
from pygpukit_dsp.bench.latency import LatencyFigures
from pygpukit_dsp.bench.w3_project import SETTLE_BLOCKS
from pygpukit_dsp.bench.w3_report import ContentionReport, ContentionRow, OutputCheck
from pygpukit_dsp.errors import ConfigError, ConfigErrors

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


def test_w3_yaml_names_w1_realtime_and_w2_throughput_with_the_documented_defaults():
    bench = load_contention(W3)
    st = bench.settings
    assert (bench.realtime.name, bench.throughput.name) == ("w1", "w2")
    assert (st.blocks, st.warmup, st.period_ms, st.quantum_ns) == (3000, 300, None, 40_000)
    assert st.throughput_mode == "resident" and st.throughput_seconds == 3.0
    assert bench.realtime.qos.deadline_ms == 1
    assert bench.realtime.qos.spin_us > 5333  # W1's thread spins through its 5.33-ms period
    assert [s.type for s in bench.realtime.stages] == ["fir", "mix"]
    assert [s.type for s in bench.throughput.stages] == ["stft", "power", "average"]


def test_a_plain_pipeline_file_is_no_contention_bench():
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


# ----------------------------------------------------------------------------- orchestration


class _FakeInstrument:
    """What run_w3 uses of an engine's instrument: resident mode, the pump, paced blocks."""

    def __init__(self, engine):
        self.engine = engine
        self.resident = False
        self.submitted = 0  # resident blocks pumped

    def pump_resident(self, seconds):
        assert self.resident
        self._stop_pump = False
        stamps, end = [], time.monotonic() + seconds
        while not self._stop_pump and time.monotonic() < end:
            self.submitted += 1
            time.sleep(0.0002)
            stamps.append(time.monotonic_ns())
        return stamps

    def stop_pump(self):
        self._stop_pump = True

    def wait_release(self, slot, release_ns, spin_us, prewarm, return_at_ns):
        from pygpukit_dsp import _native

        _native.wait_until(int(return_at_ns), int(spin_us))

    def process(self, slot, x, final=False, out=None, release_ns=0, spin_us=0, prewarm=False):
        from pygpukit_dsp import _native

        if release_ns:  # as the native instrument: wait for the release inside the call
            _native.wait_until(int(release_ns), int(spin_us))
            self.engine.released += 1
        return self.engine.process(x)


class _FakeEngine:
    """What run_w3 uses of a CudaEngine, computing on the CPU backend (no GPU here)."""

    def __init__(self, pipeline, chain):
        from pygpukit_dsp.backends import open_backend

        self.cpu = open_backend(pipeline, chain, "cpu")
        self.chain, self.slots = chain, 2
        self.units_per_block = 4
        self.inst = _FakeInstrument(self)
        self.closed = False

    _processed = 0

    released = 0  # blocks handed over with a release time (the native wait of the instrument)

    def instrument(self):
        return self.inst

    def process(self, x, out=None):
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
    monkeypatch.setattr(w3_project.ProjectRun, "_engine", engine)
    monkeypatch.setattr(cuda_dispatch, "CudaDispatch", _FakeDispatch)
    monkeypatch.setattr(w3_pumps, "W2_WARM_S", 0.01)
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
    assert solo.w1.blocks == load.w1.blocks == 12
    assert solo.w2_samples_per_s > 0 and load.w2_samples_per_s > 0
    assert rep.checks_passed and [c.project for c in rep.checks] == [True, True]
    # W2 alone; then W1 and W2 on one dispatcher (interleaved); then W1's reference run, not
    # attached; every engine closed
    assert len(fake_gpu) == 4 and all(e.closed for e in fake_gpu)
    assert [sid for _, sid in _FakeDispatch.attached] == [1, 1, 2]
    assert fake_gpu[0].inst.resident and fake_gpu[0].inst.submitted > 0  # W2 alone ran resident blocks
    assert fake_gpu[2].inst.resident and fake_gpu[2].inst.submitted > 0  # ... and under load
    # W1 as one stream from reset: warm-up, 3 x 2 segments (20 settle blocks each), the timed blocks
    assert fake_gpu[3]._processed == 2 + 6 * SETTLE_BLOCKS + 2 * 12
    assert load.extra["scheduler_w1"]["period_ns"] == 1_000_000 and load.extra["segments"] == 3
    assert load.extra["scheduler_w2"]["units_per_block"] == 4
    assert rep.settings["period_ns"] == 1_000_000 and rep.deadline_us == 1000.0 and rep.settings["segments"] == 3
    assert lines  # one progress line per step
    assert [t.key for t in rep.targets()] == ["w1_p99_load_over_solo", "w1_misses_under_load", "w2_kept"]
    # both kinds traced: the breakdown covers exactly the timed blocks
    assert solo.extra["w1_breakdown"].blocks == load.extra["w1_breakdown"].blocks == 12
    # ... and lists the blocks over W1's deadline, with the deadline it used: the misses counted
    for row in (solo, load):
        assert row.extra["w1_breakdown"].deadline_us == 1000.0
        assert len(row.extra["w1_breakdown"].over) == row.w1.misses
    assert "| run |" in rep.markdown()  # the report renders


def test_w1_waits_for_its_release_inside_its_call_by_default(tmp_path, fake_gpu):
    # W1's blocks are handed over before their release and wait natively (latency from
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
    from pygpukit_dsp.bench.w3_pacing import paced_w1

    def sleepy(x):
        time.sleep(0.002)  # a voluntary switch, 2 ms not running
        return x

    run = paced_w1(sleepy, [np.zeros(4)], warmup=1, blocks=3, period_ns=3_000_000)
    assert run.switches.shape == (3, 3)
    # each block slept: at least one voluntary switch, and some time not running
    assert (run.switches[:, 0] >= 1).all() and (run.switches[:, 2] > 0).all()


def test_without_pytorch_the_baseline_rows_are_skipped(tmp_path, fake_gpu, monkeypatch):
    from pygpukit_dsp.bench.baselines import BaselineSkipped, torch_w3

    def no_torch(*a, **k):
        raise BaselineSkipped("torch is not installed", "not_installed")

    monkeypatch.setattr(torch_w3, "TorchW3", no_torch)
    bench = load_contention(_file(tmp_path, "bench: {kind: contention, period_ms: 1}\n"))
    rep = run_w3(bench, blocks=6, warmup=0, throughput_seconds=0.02)
    torch_rows = [r for r in rep.rows if r.key.startswith("torch")]
    assert [r.status for r in torch_rows] == ["skipped"] * 3
    assert all(r.reason_code == "not_installed" and r.reason for r in torch_rows)
    assert rep.checks_passed and [c.project for c in rep.checks] == [True, True]  # no baseline checks
    d = rep.to_dict()
    assert [r["reason_code"] for r in d["rows"][2:]] == ["not_installed"] * 3
    assert d["ratios"]["torch_same"] == {"w1_p99_load_over_solo": None, "w2_kept": None}


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


# the report's fixture, as tests/bench/test_w3_report.py builds it
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
    data = json.loads(js.read_text())
    assert data["checks_passed"] is False and [c["ok"] for c in data["checks"]] == [True, False]
    assert "| run |" in md.read_text()  # the Markdown written beside the JSON


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
    d = json.loads(json.dumps(rep.to_dict()))
    assert [r["key"] for r in d["rows"]][:2] == ["project_solo", "project_load"]
    # the W1 latency of both project runs broken into phases from the engine's trace
    load_bd = rep.row("project_load").extra["w1_breakdown"]
    assert load_bd.blocks == 50 and load_bd.gpu is not None and load_bd.gpu.p50_us > 0
    assert rep.row("project_solo").extra["w1_breakdown"].blocks == 50
    assert d["rows"][1]["extra"]["w1_breakdown"]["blocks"] == 50


def test_run_w3_reports_miss_causes_from_its_stall_probe(tmp_path, fake_gpu):
    bench = load_contention(_file(tmp_path, "bench: {kind: contention, period_ms: 1, segments: 1}\n"))
    rep = run_w3(bench, blocks=8, warmup=2, throughput_seconds=0.02, baseline=False)
    for key in ("project_solo", "project_load"):
        c = rep.row(key).extra["miss_causes"]
        assert c["misses"] == c["host_stall"] + c["host_slow"] + c["process"] == \
            len(rep.row(key).extra["w1_breakdown"].over)
    assert "probe_max_gap_us" in rep.row("project_solo").extra
    # the verdict on the process's misses under load, from the load run's causes
    pt = rep.process_miss_target()
    load_causes = rep.row("project_load").extra["miss_causes"]
    assert pt.value == load_causes["process"] and pt.met == (load_causes["process"] == 0)
    assert rep.to_dict()["process_miss_target"]["key"] == "w1_process_misses_under_load"
    # the run recorded the collector and when each paced wait came back to Python
    c = rep.row("project_solo").extra["miss_causes"]
    assert c["gc_collections"] >= 0 and c["gc_max_us"] >= 0
    assert len(rep.row("project_solo").extra["w1_breakdown"].over) == 0 or all(
        b["back_late_us"] is not None for b in c["blocks"])
