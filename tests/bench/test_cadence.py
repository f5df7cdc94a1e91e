"""The paced bench (pygpukit_dsp/bench/cadence.py, ``gk-stream bench --cadence realtime``): its
structure on the CPU backend (no GPU here) and the timing loop's arithmetic. Benchmarks are never
timed tests: nothing below asserts a latency, only what is counted and reported.
(The CUDA path, with the engine's own release wait, runs on the fake driver in
tests/benchmarks/test_cadence_script.py.)"""

from __future__ import annotations

import json
import time
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


def test_latency_runs_from_the_release_and_late_blocks_are_overruns():
    # an implementation that takes 1.5 periods: every block ends after the next release
    period = 2_000_000
    calls: list[tuple[int | None, int]] = []

    def slow(x, release):
        if release is not None:
            while time.perf_counter_ns() < release:
                pass
        calls.append((release, time.perf_counter_ns()))
        time.sleep(1.5 * period / 1e9)

    impl = _Impl(CadenceRow("slow", "slow", "baseline"), slow)
    _turn(impl, [np.zeros((1, 4), np.float32)], 0, 4, period, settle=1)
    assert len(impl.lat) == 4 and len(calls) == 5
    releases = [r for r, _ in calls[1:]]
    assert np.all(np.diff(releases) == period)  # the clock keeps its schedule
    # each block's latency is counted from its release, so the queueing behind the previous one adds up
    assert all(lat >= 1.5 * period for lat in impl.lat) and impl.lat[-1] > impl.lat[0]
    assert impl.overruns == 4 and impl.audio_s == pytest.approx(4 * period / 1e9)


def test_back_to_back_turns_time_the_call_itself():
    impl = _Impl(CadenceRow("b2b", "b2b", "back_to_back"), lambda x, r: time.sleep(0.001), paced=False)
    _turn(impl, [np.zeros((1, 4), np.float32)], 0, 3, 10_000_000, settle=1)
    assert len(impl.lat) == 3 and all(1_000_000 <= v < 9_000_000 for v in impl.lat) and impl.overruns == 0


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
    spin_all = next(s for s in rep.settings if s.key == "spin_period")
    sleep = next(s for s in rep.settings if s.key == "native_sleep")
    # spinning through every period costs most of a core, sleeping almost none
    assert spin_all.figures.cpu_per_audio_s > 0.5 > sleep.figures.cpu_per_audio_s
    md = rep.markdown()
    assert "at its real cadence" in md and "| numpy, paced |" in md and "Host settings" in md
    # the host's own idle cost, measured beside: the same copy paced and back to back
    f = rep.idle_floor
    assert f["bytes"] > 0 and f["paced_p50_us"] > 0 and f["b2b_p50_us"] > 0 and f["p50_ratio"] > 0
    assert "Host floor, same run" in md
    # steal over the rotation, where the kernel reports it (the CPU backend has no floor rows)
    assert rep.steal.get("available") in (True, False) and rep.floor_verdicts() == {}
    if rep.steal["available"]:
        assert rep.steal["ms"] >= 0 and "Steal over the rotation" in md
    json.dumps(rep.to_dict())  # serialisable as gk-stream --json writes it


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
    v = rep.floor_verdicts()
    assert "below what this machine allowed" in v["p99"] and "45.0 us" in v["p99"]
    assert "the floor is within it" in v["p50"]  # 12 us paced against the 28.6 us the p50 target allows
    md = rep.markdown()
    assert "paced p99 <= 1.5x back to back: **not met**" in md and md.count("below what this machine allowed") == 1
    assert "torch" not in v  # no PyTorch + graph row: nothing to judge against
    # without the floor's rows (CPU backend) there is no verdict
    assert _report_with({"project": (30, 40), "back_to_back": (22, 30)}).floor_verdicts() == {}


def test_the_floor_judges_the_target_against_pytorch_too():
    # PyTorch + graph paced p99 257 us: the target allows the project 128.5 us; the bare round trip
    # paced took 241 (a host whose hiccups add ~200 us to everyone's tail)
    rows = {"project": (30, 216), "back_to_back": (22, 36), "floor": (26, 241), "floor_back_to_back": (25, 33),
            "torch-graph": (124, 257)}
    rep = _report_with(rows)
    v = rep.floor_verdicts()["torch"]
    assert "p99 241.0 us against the 128.5 us" in v and "below what this machine allowed" in v
    md = rep.markdown()
    assert "paced p99 <= 0.5x PyTorch + CUDA graph paced: **not met** (0.84x); the bare round trip paced: p99 241.0" in md
    rows["floor"] = (26, 100)
    assert "the floor is within it" in _report_with(rows).floor_verdicts()["torch"]


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
    assert "ratios" in data and "targets" in data and data["warm_us"] == 100
    assert "| pygpukit-dsp (cpu), paced |" in capsys.readouterr().out


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
    assert rep.cpu == last and f"pinned to CPU {last}" in rep.markdown()
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
