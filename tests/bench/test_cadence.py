"""The paced bench (pygpukit_dsp/bench/cadence.py, ``gk-stream bench --cadence realtime``): its
structure on the CPU backend (no GPU here) and the timing loop's arithmetic. Benchmarks are never
timed tests: nothing below asserts a latency, only what is counted and reported.
(The CUDA path, with the engine's own release wait, runs on the fake driver in
tests/benchmarks/test_cadence_script.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pygpukit_dsp import Pipeline
from pygpukit_dsp.bench import cadence
from pygpukit_dsp.bench.cadence import (CadenceRow, PacedFigures, _Impl, _rotate, _turn, run_cadence,
                                        with_block_size)
from pygpukit_dsp.cli import main
from pygpukit_dsp.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
W1 = ROOT / "benchmarks" / "w1.yaml"


@pytest.fixture
def short_turns(monkeypatch):
    monkeypatch.setattr(cadence, "SEGMENT_BLOCKS", 10)
    monkeypatch.setattr(cadence, "SETTLE_BLOCKS", 2)


def test_paced_figures_count_misses_over_the_deadline():
    f = PacedFigures.from_ns(np.array([1_000, 2_000, 9_000, 3_000]), 5_000, overruns=1, cpu_per_audio_s=0.5)
    assert (f.blocks, f.misses, f.overruns, f.max) == (4, 1, 1, 9.0)
    assert f.p50 == pytest.approx(2.5) and f.cpu_per_audio_s == 0.5


class _Clock:
    """The rotation's clock in these tests (cadence.time): it moves only when a fake implementation
    waits for its release or runs, so that the latencies are the schedule's arithmetic, not this
    host's speed."""

    def __init__(self):
        self.now = 0

    def perf_counter_ns(self):
        return self.now

    def wait(self, release):
        self.now = max(self.now, release)


@pytest.fixture
def clock(monkeypatch):
    c = _Clock()
    monkeypatch.setattr(cadence, "time", c)
    return c


def test_latency_runs_from_the_release_and_late_blocks_are_overruns(clock):
    # an implementation that takes 1.5 periods: every block ends after the next release
    period = 2_000_000
    calls: list[int | None] = []

    def slow(x, release):
        if release is not None:
            clock.wait(release)
        calls.append(release)
        clock.now += 3 * period // 2

    impl = _Impl(CadenceRow("slow", "slow", "baseline"), slow)
    _turn(impl, [np.zeros((1, 4), np.float32)], 0, 4, period, settle=1)
    assert len(impl.lat) == 4 and len(calls) == 5
    # the settling block ended 1.5 periods after its release, past the first timed one's: the clock
    # restarted one period later, and keeps its schedule
    assert calls[0] == period and calls[1] == 7 * period // 2
    assert np.all(np.diff(calls[1:]) == period)
    # each block's latency is counted from its release, so the queueing behind the previous one adds up
    assert impl.lat == [3 * period // 2, 2 * period, 5 * period // 2, 3 * period]
    assert impl.starts == calls[1:] and impl.overruns == 4 and impl.audio_s == pytest.approx(4 * period / 1e9)


def test_back_to_back_turns_time_the_call_itself(clock):
    def run(x, release):
        assert release is None
        clock.now += 1_000_000

    impl = _Impl(CadenceRow("b2b", "b2b", "back_to_back"), run, paced=False)
    _turn(impl, [np.zeros((1, 4), np.float32)], 0, 3, 10_000_000, settle=1)
    assert impl.lat == [1_000_000] * 3 and impl.overruns == 0


def test_turns_rotate_and_a_failing_baseline_is_reported(short_turns):
    seen: list[str] = []
    ok = _Impl(CadenceRow("project", "p", "project"), lambda x, r: seen.append("p"), paced=False)

    def broken(x, r):
        raise RuntimeError("boom")

    bad = _Impl(CadenceRow("bad", "b", "baseline"), broken, paced=False)
    _rotate([ok, bad], [np.zeros((1, 4), np.float32)], 25, 1_000_000)
    assert len(ok.lat) == 25 and bad.row.status == "failed" and "boom" in bad.row.reason


def test_with_block_size_keeps_the_stages_and_renames():
    p = Pipeline.from_yaml(str(W1))
    q = with_block_size(p, 64)
    assert q.block_size == 64 and q.name == "w1_b64" and q.stages is p.stages and p.block_size == 256
    assert with_block_size(p, None) is p
    assert q.specs().input.block_period == pytest.approx(64 / 48000)


def test_cpu_paced_run_has_every_row_ratio_and_setting(short_turns):
    p = Pipeline.from_yaml(str(W1))
    rep = run_cadence(p, backend="cpu", blocks=20, warmup=3, compare=["numpy"],
                      block_size=64, settings=True, settings_blocks=10)
    assert [r.key for r in rep.rows] == ["project", "back_to_back", "numpy"]
    assert rep.period_us == pytest.approx(64 / 48000 * 1e6) and rep.deadline_us == pytest.approx(rep.period_us, rel=1e-3)
    for r in rep.rows:
        assert r.status == "ok" and r.figures.blocks == 20
    assert rep.row("numpy").max_rel_err < 2e-3  # checked against the project first
    paced = rep.row("project").figures
    assert paced.cpu_per_audio_s is not None and paced.cpu_per_audio_s > 0
    assert rep.row("back_to_back").figures.cpu_per_audio_s is None
    r = rep.ratios()
    assert set(r) == {"paced_over_back_to_back_p50", "paced_over_back_to_back_p99"}  # no torch here
    names = [t[0] for t in rep.targets()]
    assert len(names) == 3 and rep.targets()[2][1] is None
    keys = [s.key for s in rep.settings]
    assert keys[:4] == ["sleep_python", "native_sleep", "spin50", "spin200"]
    assert "spin200_warm" in keys and "spin_period" in keys and "fifo" in keys and "mlockall" in keys
    assert "pinned_spin1000" in keys and "pinned_spin_period" in keys
    for s in rep.settings:
        assert s.status in ("ok", "skipped")
        if s.status == "ok":
            assert s.figures.blocks == 10 and s.figures.cpu_per_audio_s > 0
        else:
            assert s.reason  # why it could not run here (EPERM, RLIMIT_MEMLOCK)
    assert "| implementation | p50 us |" in rep.markdown()  # the report renders
    # the host's own idle cost, measured beside: the same copy paced and back to back
    f = rep.idle_floor
    assert f["bytes"] > 0 and f["paced_p50_us"] > 0 and f["b2b_p50_us"] > 0 and f["p50_ratio"] > 0
    # steal over the rotation, where the kernel reports it (the CPU backend has no floor rows)
    assert rep.steal.get("available") in (True, False) and rep.floor_checks() == {} and rep.floor_verdicts() == {}
    if rep.steal["available"]:
        assert rep.steal["ms"] >= 0
    d = json.loads(json.dumps(rep.to_dict()))  # serialisable as gk-stream --json writes it
    assert [t["key"] for t in d["targets"]] == ["paced_over_back_to_back_p50", "paced_over_back_to_back_p99",
                                                "paced_over_torch_graph_p99"]
    assert [t["met"] is None for t in d["targets"]] == [False, False, True]  # no PyTorch + graph row here
    assert d["targets"][0]["ratio"] == r["paced_over_back_to_back_p50"] and d["targets"][0]["target"] == 1.3
    assert [s["key"] for s in d["settings"]] == keys and d["floor_checks"] == {}


def _report_with(rows: dict[str, tuple[float, float]]) -> cadence.CadenceReport:
    rep = cadence.CadenceReport(pipeline="w1", spec="", backend="cuda", period_us=5333.3, deadline_us=5333.3,
                                blocks=100, warmup=10, spin_us=200, prewarm=True, machine="m")
    for key, (p50, p99) in rows.items():
        lat = np.r_[np.full(50, p50 * 1e3), np.full(49, p50 * 1e3), [p99 * 1e3] * 2].astype(np.int64)
        rep.rows.append(CadenceRow(key, key, "floor" if key.startswith("floor") else key,
                                   figures=PacedFigures.from_ns(lat, 5_333_000, 0)))
    return rep


def test_the_floor_says_whether_a_target_is_below_what_the_machine_allowed():
    # back to back p99 30 us: the p99 target allows 45 us; the bare round trip paced took 300 us
    rep = _report_with({"project": (30, 400), "back_to_back": (22, 30), "floor": (12, 300),
                        "floor_back_to_back": (8, 15)})
    c = rep.floor_checks()
    assert set(c) == {"p50", "p99"}  # no PyTorch + graph row: nothing to judge against
    assert c["p99"]["below_machine"] and c["p99"]["allowed_us"] == pytest.approx(45.0)
    assert (c["p99"]["floor_us"], c["p99"]["floor_back_to_back_us"]) == (pytest.approx(300.0), pytest.approx(15.0))
    # 12 us paced against the 28.6 us the p50 target allows: the floor is within it
    assert not c["p50"]["below_machine"] and c["p50"]["allowed_us"] == pytest.approx(1.3 * 22)
    assert [met for _, met, _ in rep.targets()] == [False, False, None]  # paced / back to back: 1.36x, 13.3x
    d = rep.to_dict()
    assert d["floor_checks"] == json.loads(json.dumps(c)) and set(d["floor_verdicts"]) == {"p50", "p99"}
    assert "| implementation |" in rep.markdown()
    # without the floor's rows (CPU backend) there is no verdict
    assert _report_with({"project": (30, 40), "back_to_back": (22, 30)}).floor_checks() == {}


def test_the_floor_judges_the_target_against_pytorch_too():
    # PyTorch + graph paced p99 257 us: the target allows the project 128.5 us; the bare round trip
    # paced took 241 (a host whose hiccups add ~200 us to everyone's tail)
    rows = {"project": (30, 216), "back_to_back": (22, 36), "floor": (26, 241), "floor_back_to_back": (25, 33),
            "torch-graph": (124, 257)}
    rep = _report_with(rows)
    t = rep.floor_checks()["torch"]
    assert t["below_machine"] and t["floor_us"] == pytest.approx(241.0) and t["allowed_us"] == pytest.approx(128.5)
    torch_target = rep.to_dict()["targets"][2]
    assert torch_target["met"] is False and torch_target["ratio"] == pytest.approx(216 / 257)
    rows["floor"] = (26, 100)
    assert not _report_with(rows).floor_checks()["torch"]["below_machine"]


def test_unknown_baseline_and_bad_spin_are_config_errors():
    p = Pipeline.from_yaml(str(W1))
    with pytest.raises(ConfigError, match="unknown baseline"):
        run_cadence(p, backend="cpu", compare=["numpyy"])
    with pytest.raises(ConfigError, match="spin-us"):
        run_cadence(p, backend="cpu", spin_us=-1)


def test_cli_cadence_writes_json(tmp_path, short_turns, capsys):
    out = tmp_path / "c.json"
    rc = main(["bench", str(W1), "--backend", "cpu", "--cadence", "realtime", "--block-size", "64", "--blocks", "12",
               "--warmup", "2", "--compare", "numpy", "--json", str(out), "--quiet"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["pipeline"] == "w1_b64" and [r["key"] for r in data["rows"]] == ["project", "back_to_back", "numpy"]
    assert set(data["ratios"]) == {"paced_over_back_to_back_p50", "paced_over_back_to_back_p99"}
    assert len(data["targets"]) == 3 and data["warm_us"] == 100
    assert "| implementation |" in capsys.readouterr().out  # the report printed


@pytest.mark.parametrize("args,msg", [
    (["--block-size", "64"], "applies to a paced bench only"),
    (["--settings"], "applies to a paced bench only"),
    (["--cadence", "realtime", "--mode", "resident"], "does not apply to a paced bench"),
])
def test_cli_cadence_flags_are_checked(args, msg, capsys):
    assert main(["bench", str(W1), "--backend", "cpu", *args]) == 2
    assert msg in capsys.readouterr().err


def test_the_main_rotation_runs_pinned_to_the_cpu_asked_for():
    import os

    from pygpukit_dsp.affinity import allowed_cpus

    last = max(allowed_cpus())
    p = Pipeline.from_yaml(str(W1))
    rep = run_cadence(p, backend="cpu", blocks=4, warmup=1, cpu="auto")
    assert rep.cpu == last and rep.to_dict()["cpu"] == last
    assert os.sched_getaffinity(0) == allowed_cpus()  # given back
    assert run_cadence(p, backend="cpu", blocks=4, warmup=1, cpu="none").cpu is None
    with pytest.raises(ConfigError, match="qos.cpu 4096"):
        run_cadence(p, backend="cpu", blocks=4, warmup=1, cpu=4096)


@pytest.mark.parametrize("hooked", [True, False])
def test_each_block_is_written_fresh_before_the_call_reads_it(hooked: bool):
    import numpy as np

    from pygpukit_dsp.bench import cadence as c

    seen: list[np.ndarray] = []

    class Recorder:
        def process(self, x):
            seen.append(x.copy())
            return x

    rec = Recorder()
    call = c._baseline_call(rec, c._waiter(spin_us=50, warm_us=20)) if hooked else (
        lambda x, release: rec.process(x))
    impl = c._Impl(c.CadenceRow("r", "r", "baseline"), call, arrival=c._Arrival())
    pool = [np.full((2, 8), float(v), np.float32) for v in range(5)]
    c._turn(impl, pool, 0, 6, 200_000, 2)  # 2 settling + 6 timed blocks, 0.2 ms apart
    assert [float(s[0, 0]) for s in seen] == [0, 1, 2, 3, 4, 0, 1, 2]
    # the pool itself is never handed over: every call got the staging array, written just in time
    assert all(s.shape == (2, 8) for s in seen)
