"""gk-stream through subprocess: exit codes, messages without tracebacks, outputs."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pygpukit_dsp

ROOT = Path(__file__).resolve().parents[1]
NO_DRIVER = {"GK_LIBCUDA": "/nonexistent/libcuda.so.1"}
# The package under test (installed, or the source tree in a developer build), not whatever
# `python -m` would find first in the current directory.
PACKAGE_PARENT = Path(pygpukit_dsp.__file__).resolve().parents[1]


def gk(*args, env=None, timeout=120):
    """Run gk-stream in a fresh interpreter; paths under pipelines/ and benchmarks/ are made absolute."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_PARENT), *filter(None, [full_env.get("PYTHONPATH")])])
    args = [str(ROOT / a) if str(a).startswith(("pipelines/", "benchmarks/")) else str(a) for a in args]
    return subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", *args], cwd=ROOT.anchor,
                          capture_output=True, text=True, env=full_env, timeout=timeout)


def test_run_demo_cpu_prints_summary_and_stats_json(tmp_path):
    out = tmp_path / "stats.json"
    r = gk("run", "pipelines/demo.yaml", "--backend", "cpu", "--stats-json", out)
    assert r.returncode == 0, r.stderr
    assert "backend=cpu (requested)" in r.stdout
    assert "p99.9" in r.stdout and "deadline misses" in r.stdout
    stats = json.loads(out.read_text())
    assert stats["blocks"] == 235  # 5 s at 48 kHz in blocks of 1024: 234 full + 1 partial
    assert stats["samples_in"] == 240000
    assert stats["latency_us"]["count"] == 235


def test_run_with_block_limit():
    r = gk("run", "pipelines/demo.yaml", "--backend", "cpu", "--blocks", "5")
    assert r.returncode == 0, r.stderr
    assert "blocks 5," in r.stdout and "ended by block limit" in r.stdout


def test_auto_says_why_it_chose_cpu_without_a_driver():
    r = gk("run", "pipelines/demo.yaml", "--blocks", "2", env=NO_DRIVER)
    assert r.returncode == 0, r.stderr
    assert "backend=cpu (auto: " in r.stdout


def test_cuda_without_driver_is_an_error_before_the_first_block():
    r = gk("run", "pipelines/demo.yaml", "--backend", "cuda", "--blocks", "2", env=NO_DRIVER)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "driver" in r.stderr.lower()
    assert "blocks" not in r.stdout


def test_config_error_exits_2_with_location_and_no_traceback(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("version: 1\nname: x\nsample_rate: 8000\nchannels: 1\nsource: {type: synth}\n"
                 "stages:\n  - {type: fri, taps: [1]}\n")
    r = gk("run", f)
    assert r.returncode == 2
    assert f"{f}:7:" in r.stderr
    assert "did you mean 'fir'" in r.stderr
    assert "Traceback" not in r.stderr


def test_runtime_error_exits_1(tmp_path):
    (tmp_path / "flaky.py").write_text(
        "import numpy as np\nn_calls = 0\n"
        "def read(n):\n    global n_calls\n    n_calls += 1\n"
        "    if n_calls > 2:\n        raise OSError('device unplugged')\n"
        "    return np.zeros((1, n), np.float32)\n")
    f = tmp_path / "p.yaml"
    f.write_text("version: 1\nname: flaky\nsample_rate: 8000\nchannels: 1\nblock_size: 64\nbackend: cpu\n"
                 "source: {type: callback, function: 'flaky:read'}\nstages: [{type: gain, db: 0}]\n"
                 "sink: {type: 'null'}\n")
    r = gk("run", f)
    assert r.returncode == 1
    assert "device unplugged" in r.stderr and "Traceback" not in r.stderr
    assert "blocks 2," in r.stdout  # the summary of what ran is still printed


def test_validate_prints_spec_chain():
    r = gk("validate", "pipelines/demo.yaml")
    assert r.returncode == 0, r.stderr
    assert "pipeline demo: ok" in r.stdout
    assert "frames x 513 bins" in r.stdout


def test_stages_catalog_lists_every_stage_with_defaults():
    from pygpukit_dsp.stages import STAGES

    r = gk("stages")
    assert r.returncode == 0, r.stderr
    for name in STAGES:
        assert f"\n{name}: " in "\n" + r.stdout
    assert "default" in r.stdout
    r = gk("stages", "stf")
    assert r.returncode == 2 and "did you mean 'stft'" in r.stderr


def test_devices_reports_auto_choice():
    r = gk("devices", env=NO_DRIVER)
    assert r.returncode == 0, r.stderr
    assert "auto    -> backend=cpu" in r.stdout
    r = gk("devices", "--json", env=NO_DRIVER)
    data = json.loads(r.stdout)
    assert data["auto"]["backend"] == "cpu" and data["capabilities"]["driver"]["found"] is False
    # the network and recording types: found here (the test extra installs pyzmq and sigmf)
    assert data["io"]["zmq"]["found"] and data["io"]["sigmf"]["found"]
    assert re.search(r"^zmq     pyzmq \S+, libzmq \S+ \(source/sink type 'zmq'\)$", gk("devices", env=NO_DRIVER).stdout,
                     re.M)


def test_bench_w1_cpu_against_numpy(tmp_path):
    js, png = tmp_path / "w1.json", tmp_path / "w1.png"
    r = gk("bench", "benchmarks/w1.yaml", "--backend", "cpu", "--compare", "numpy,cupy", "--blocks", "60",
           "--warmup", "5", "--json", js, "--plot", png)
    assert r.returncode == 0, r.stderr
    assert "| numpy |" in r.stdout and "project paired p50 / p99 us" in r.stdout  # the default schedule
    data = json.loads(js.read_text())
    names = [res["name"] for res in data["results"]]
    assert names == ["pygpukit-dsp (cpu)", "numpy", "cupy"]
    numpy_res = data["results"][1]
    assert numpy_res["status"] == "ok" and numpy_res["max_rel_err"] < 1e-3
    assert set(data["ratios"]["numpy"]) == {"p50", "p99"}
    assert png.stat().st_size > 1000


def test_bench_schedule_rounds_and_where_it_does_not_apply():
    r = gk("bench", "benchmarks/w1.yaml", "--backend", "cpu", "--compare", "numpy", "--blocks", "20",
           "--warmup", "2", "--schedule", "rounds")
    assert r.returncode == 0, r.stderr
    assert "interleaved in rounds of 250" in r.stdout and "project paired" not in r.stdout
    r = gk("bench", "benchmarks/w2.yaml", "--mode", "resident", "--schedule", "paired", "--blocks", "2")
    assert r.returncode == 2 and "--schedule applies to the latency mode" in r.stderr
    r = gk("bench", "benchmarks/w3.yaml", "--schedule", "paired")
    assert r.returncode == 2 and "--schedule does not apply to a contention bench file" in r.stderr
    assert "Traceback" not in r.stderr


def test_bench_unknown_baseline_is_config_error():
    r = gk("bench", "benchmarks/w1.yaml", "--backend", "cpu", "--compare", "numpi")
    assert r.returncode == 2 and "did you mean 'numpy'" in r.stderr


@pytest.mark.parametrize("args", [["run"], ["run", "x.yaml", "--blocks", "0"], ["frobnicate"]])
def test_usage_errors_exit_2(args):
    r = gk(*args)
    assert r.returncode == 2


def test_bench_throughput_modes_need_the_cuda_backend():
    r = gk("bench", "benchmarks/w2.yaml", "--backend", "cpu", "--mode", "resident", "--blocks", "2")
    assert r.returncode == 2
    assert "--backend cuda" in r.stderr and "Traceback" not in r.stderr


def test_run_multi_prints_one_qos_line_per_stream_and_refuses_with_numbers(tmp_path):
    head = "version: 1\nsample_rate: 48000\nchannels: 1\nblock_size: 480\nbackend: cpu\npipelines:\n"
    stream = ("  - name: {n}\n    qos: {{class: realtime, cost_us: {c}}}\n"
              "    source: {{type: 'null', duration_s: 0.1}}\n    stages: [{{type: gain, db: 0}}]\n")
    ok = tmp_path / "ok.yaml"
    ok.write_text(head + stream.format(n="a", c=100) + stream.format(n="b", c=200))
    r = gk("run", ok)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "class realtime" in ln]
    assert len(lines) == 2 and all("deadline" in ln and "p99" in ln and "misses 0" in ln for ln in lines)
    assert all("(cpu, drops 0)" in ln for ln in lines)  # the scheduler's figures, not the host's
    bad = tmp_path / "bad.yaml"
    bad.write_text(head + stream.format(n="a", c=6000) + stream.format(n="b", c=6000))
    r = gk("run", bad)
    assert r.returncode == 2
    assert "stream 'b' not admitted" in r.stderr and "bound=0.9" in r.stderr and "Traceback" not in r.stderr
    # --u-max: the bound of a local run (0.01 + 0.02 of the 10-ms period exceed 0.025)
    r = gk("run", ok, "--u-max", "0.025")
    assert r.returncode == 2 and "stream 'b' not admitted" in r.stderr and "bound=0.025" in r.stderr
    r = gk("run", ok, "--u-max", "1.5")
    assert r.returncode == 2 and "expected a bound in (0, 1]" in r.stderr
    r = gk("run", ok, "--u-max", "0.5", "--cluster", "ray")
    assert r.returncode == 2 and "--u-max applies to a local run" in r.stderr and "Traceback" not in r.stderr


def test_run_multi_example_prints_the_scheduler_qos_line_of_each_stream(tmp_path):
    shutil.copytree(ROOT / "pipelines", tmp_path / "pipelines", ignore=shutil.ignore_patterns("out"))
    js = tmp_path / "multi.json"
    r = gk("run", tmp_path / "pipelines" / "multi.yaml", "--backend", "cpu", "--json", js)
    assert r.returncode == 0, r.stderr
    qos = r.stdout.split("streams (scheduler accounting")[1].splitlines()[1:]
    assert len(qos) == 2
    for line, name, cls, deadline in ((qos[0], "monitor", "realtime", "5333.3"),
                                      (qos[1], "spectrum", "throughput", "32000.0")):
        assert re.fullmatch(rf"  {name} +class {cls} +deadline +{deadline} us  p99 +[0-9.]+ us  "
                            r"misses \d+  \(cpu, drops 0\)", line), line
    assert r.stdout.count("scheduler (cpu dispatcher): latency p50") == 2
    data = json.loads(js.read_text())
    assert [d["pipeline"] for d in data] == ["monitor", "spectrum"]
    for d in data:  # the runner's host figures and the scheduler's, side by side
        assert d["latency_us"]["count"] == d["blocks"] == d["scheduler"]["latency_us"]["count"]
        assert d["scheduler"]["submitted"] == d["blocks"] and d["scheduler"]["device"] == "cpu"
        assert set(d["scheduler"]) >= {"missed", "dropped", "chunks", "busy_us"}
