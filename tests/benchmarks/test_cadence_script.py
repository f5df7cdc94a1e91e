"""benchmarks/cadence.py (scripts/gpu_run.sh's ``cadence`` section) and benchmarks/capacity.py on
the fake CUDA driver with mapped host memory (its kernels do nothing, so the figures mean
nothing; NumPy's output check fails there, as it must): the parts run in one process, the files
are written after each part, the budget leaves parts out and says so, the capacity sweep's
structure (coarse runs up the ladder, confirmations, admission's prediction, the plot)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]



def _env(driver: str, **extra: str) -> dict[str, str]:
    import pygpukit_dsp

    return dict(os.environ, GK_LIBCUDA=driver, GK_JIT_DISK_CACHE="0",
                PYTHONPATH=os.pathsep.join([str(Path(pygpukit_dsp.__file__).resolve().parents[1]),
                                            os.environ.get("PYTHONPATH", "")]), **extra)


@pytest.fixture(scope="module")
def cadence_run(fake_engine_driver: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cadence_out")
    env = _env(fake_engine_driver, CADENCE_PARTS="w1,w1_64,settings,capacity", CADENCE_BLOCKS="30", CADENCE_WARMUP="5",
               SETTINGS_BLOCKS="12", CADENCE_COMPARE="numpy,torch", CAPACITY_LADDER="2,4",
               CAPACITY_TORCH_LADDER="2", CAPACITY_COARSE_S="0.25", CAPACITY_CONFIRM_S="0.3",
               CAPACITY_MIN_S="1", CADENCE_BUDGET_S="600")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cadence.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=out)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def test_every_part_reports_into_one_json_and_markdown(cadence_run: Path):
    data = json.loads((cadence_run / "cadence.json").read_text())
    md = (cadence_run / "cadence.md").read_text()
    assert data["parts"] == ["w1", "w1_64", "settings", "capacity"] and data["skipped"] == {}
    assert set(data["elapsed_s"]) == {"w1", "w1_64", "settings", "capacity"}
    w1 = data["w1"]
    assert [r["key"] for r in w1["rows"]] == ["project", "back_to_back", "floor", "floor_back_to_back", "numpy", "torch"]
    rows = {r["key"]: r for r in w1["rows"]}
    for key in ("project", "back_to_back", "floor", "floor_back_to_back"):
        assert rows[key]["status"] == "ok" and rows[key]["figures"]["blocks"] == 30
    # the floor (the bare round trip, same rotation) judged against what each target allows
    assert set(w1["floor_checks"]) == set(w1["floor_verdicts"]) == {"p50", "p99"}
    for q, c in w1["floor_checks"].items():
        assert c["floor_us"] == rows["floor"]["figures"][q] and c["base_us"] == rows["back_to_back"]["figures"][q]
        assert c["below_machine"] == (c["floor_us"] > c["allowed_us"])
    # what the paced sleeps learned, within the guard's cap (native/engine/wake.h: 1 ms)
    assert 0 <= w1["host"]["wake_guard_us"] <= 1000
    assert rows["numpy"]["status"] == "mismatch"  # the fake driver computes nothing
    assert rows["torch"]["status"] in ("skipped", "ok", "mismatch")
    # the project's paced blocks were traced: their phases, python in from the release
    assert rows["project"]["breakdown"]["blocks"] == 30
    assert w1["spin_us"] == 200 and w1["prewarm"] is True and w1["warm_us"] == 100
    assert data["w1_64"]["pipeline"] == "w1_b64" and data["w1_64"]["period_us"] == pytest.approx(1333.33, abs=0.01)
    settings = {s["key"]: s for s in data["settings"]["settings"]}
    assert {"sleep_python", "native_sleep", "spin200_prewarm", "spin200_warm", "spin_period",
            "completion_no_spin", "no_wake_guard", "out_array"} <= set(settings)
    # the removed experiments have no rows any more
    assert not {"overlap_fill", "prewarm_lines"} & set(settings)
    assert settings["spin200_prewarm"]["status"] == "ok"  # the fake driver maps host memory: the prewarm runs
    assert all(s["figures"]["blocks"] == 12 for s in settings.values() if s["status"] == "ok")
    assert "| implementation | p50 us |" in md  # the parts' reports, rendered into one file


def test_capacity_sweeps_confirms_and_predicts(cadence_run: Path):
    cap = json.loads((cadence_run / "cadence.json").read_text())["capacity"]
    proj = [p for p in cap["points"] if p["impl"] == "pygpukit-dsp"]
    assert [(p["n"], p["phase"]) for p in proj if p["phase"] == "coarse"] == [(2, "coarse"), (4, "coarse")]
    for p in proj:
        if p["status"] == "ok":
            # every stream's blocks over the run (the warm-up untimed): about N x seconds / period
            # every stream's blocks over the run: never more than its clock released
            expect = p["n"] * p["seconds"] / (256 / 48000)
            assert 0 < p["blocks"] <= expect + p["n"] + 1
            assert set(p["misses"]) == {"5.33", "2.00"} and p["cpu_cores"] > 0
            assert p["extra"]["dispatch"]["posted"] >= p["blocks"]
            assert set(p["extra"]["host_steps_us"]) == {"fill", "submit"}
            # the driver threads and the dispatcher's worker were watched (bench/off_cpu.py)
            assert set(p["extra"]["off_cpu"]["per_thread"]) >= {"driver thread 0", "dispatcher's worker"}
            assert p["extra"]["dispatcher_busy"] > 0  # the share of the run its lock was held
    # the aligned runs go up the same ladder until one misses at 2 ms (on a busy 2-core VM the fake
    # driver's first may: then it is the only one)
    aligned = [p for p in cap["points"] if p["impl"] == "pygpukit-dsp, aligned" and p["phase"] == "coarse"]
    ns = [p["n"] for p in aligned]
    assert ns == [2, 4] or (ns == [2] and aligned[0]["misses"]["2.00"] > 0)
    assert all(p["status"] == "ok" and set(p["misses"]) == {"5.33", "2.00"} for p in aligned)
    assert set(aligned[0]["extra"]["misses_when_at"]) == {"5.33", "2.00"}  # episodes at every deadline
    assert {pr["how"] for pr in cap["predictions"]} >= {"session"}
    session = next(pr for pr in cap["predictions"] if pr["how"] == "session")
    assert session["streams"]["5.33"] >= session["streams"]["2.00"] >= 1
    assert set(cap["headline"]) == {"5.33", "2.00"}
    torch = [p for p in cap["points"] if p["impl"] == "torch-graph"]
    assert torch and all(p["status"] in ("skipped", "ok") for p in torch)
    # the floor: 4 streams confirmed at most, so the floor ran at the target's 100 (bare round trips)
    floor = [p for p in cap["points"] if p["impl"] == "floor" and p["phase"] == "confirm"]
    assert [p["n"] for p in floor] == [100] and floor[0]["status"] == "ok"
    assert 0 < floor[0]["blocks"] <= 100 * 0.3 / (256 / 48000) + 101 and "misses_when" in floor[0]["extra"]
    assert floor[0]["extra"]["host_steps_us"]["submit"]["p50"] > 0
    # the capacity target read with the floor at the target's N (the project held fewer than 100)
    streams = cap["targets"][0]
    assert cap["floor_verdict"]["n"] == streams["floor"]["n"] == 100 and streams["key"] == "streams"
    assert streams["met"] is not True  # None when no N held over the confirmation
    assert streams["floor"]["reading"] in (("below_machine",) if cap["floor_verdict"]["below_machine"] else
                                           ("project_missed", "sweep_stopped"))
    assert (cadence_run / "capacity.png").stat().st_size > 1000


def test_a_budget_too_small_leaves_parts_out_and_says_so(fake_engine_driver: str, tmp_path: Path):
    env = _env(fake_engine_driver, CADENCE_PARTS="w1,capacity", CADENCE_BUDGET_S="1", CAPACITY_MIN_S="60")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cadence.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "cadence.json").read_text())
    assert set(data["skipped"]) == {"w1", "capacity"} and "w1" not in data and "capacity" not in data
    assert (tmp_path / "cadence.md").read_text().strip()  # the report is written, saying what was left out


def test_capacity_script_writes_its_three_files(fake_engine_driver: str, tmp_path: Path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "capacity.py"), "--ladder", "2", "--coarse-s",
                           "0.2", "--confirm-s", "0", "--no-torch", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=300, env=_env(fake_engine_driver), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "o" / "capacity.json").read_text())
    # the project's streams at N = 2, then again with every phase 0 (the aligned run), and the floor
    # released at once at that N (a host slow enough to make the project miss adds a floor run at N)
    points = [(p["impl"], p["n"], p["phase"]) for p in data["points"]]
    assert points[:2] == [("pygpukit-dsp", 2, "coarse"), ("pygpukit-dsp, aligned", 2, "coarse")]
    assert ("floor, aligned", 2, "coarse") in points[2:]
    assert all(impl.startswith("floor") and n == 2 for impl, n, _ in points[2:])
    assert {p["how"] for p in data["predictions"]} >= {"session", "session, aligned"}
    assert (tmp_path / "o" / "capacity.md").read_text().strip() == proc.stdout.strip()
    assert (tmp_path / "o" / "capacity.png").exists()


REHEARSED_SCRIPT = r"""
import json, sys
from pygpukit_dsp import Pipeline
sys.path.insert(0, sys.argv[2])  # benchmarks/: the studies package
from studies import capacity as cap
from studies.capacity.streams import ProjectStreams
from pygpukit_dsp.bench.inputs import input_blocks, source_format

p = cap.w1_shaped(Pipeline.from_yaml(sys.argv[1]))
chain = p.specs(source_format(p))
proj = ProjectStreams(p, input_blocks(p, chain, cap.POOL), threads=1, spin_us=100, dispatcher_spin_us=200)
costs = [proj.rehearsed_ns(3), proj.rehearsed_ns(3, aligned=True)]
at_2ms = proj.rehearsed_ns(3, deadline_ns=2_000_000)  # the same rehearsal, counted for a 2 ms deadline
run = proj.rehearsed[3, False][0]
tail = proj.tail(3)
print(json.dumps({"costs": costs, "at_2ms": at_2ms, "rehearsals": len(proj.rehearsed),
                  "run": [run.device_ns, run.dispatch_ns, run.overlap], "dispatch": [proj.dispatch_us(False), proj.dispatch_us(True)],
                  "overlap": [proj.overlap(False), proj.overlap(True)],
                  "tail": None if tail is None else [tail.blocks, tail.threshold_ns, tail.max_ns],
                  "aligned_tail": proj.tail(3, aligned=True) is not None, "unrehearsed": proj.tail(4)}))
"""


def test_the_sweep_s_rehearsals_keep_the_dispatcher_s_work_the_overlap_and_the_tail(fake_engine_driver: str,
                                                                                     tmp_path: Path):
    # the capacity bench's rehearsals on the fake driver (admission.rehearse of 3 W1 engines, staggered
    # and released at once): each N's cost, and beside it what the report shows per N
    proc = subprocess.run([sys.executable, "-c", REHEARSED_SCRIPT, str(ROOT / "benchmarks" / "w1.yaml"),
                           str(ROOT / "benchmarks")],
                          capture_output=True, text=True, timeout=300, env=_env(fake_engine_driver), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(c > 0 for c in res["costs"])
    # one rehearsal per N (and aligned or not), whatever the deadline it is counted for: at 2 ms the
    # dispatcher's work counts 0.9 / 0.6 of itself (its lock held at most 60% of the time)
    device_ns, dispatch_ns, overlap = res["run"]
    assert res["rehearsals"] == 2 and res["at_2ms"] >= res["costs"][0]
    counted = [max(max(1, round(c / max(1.0, overlap))), round(dispatch_ns * 1.5)) for c in device_ns]
    assert res["at_2ms"] == int(np.median(counted))
    for dispatch, overlap in zip(res["dispatch"], res["overlap"]):
        assert set(dispatch) == set(overlap) == {"3"} and dispatch["3"] > 0 and overlap["3"] >= 1.0
    # 3 streams x 1 s at 187.5 blocks/s: the tail of at most about 560 latencies from release
    blocks, threshold_ns, max_ns = res["tail"]
    assert 0 < blocks <= 600 and 0 < threshold_ns <= max_ns
    assert res["aligned_tail"] and res["unrehearsed"] is None
