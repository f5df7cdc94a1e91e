"""benchmarks/multi_gpu.py on the fake CUDA driver with two GPUs (its kernels do nothing, so the
figures mean nothing): the structure of the report, the placement over both GPUs, the W2 parts,
the files written; and the degenerate one-GPU run says so."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# W2's shape is too big for a test; a complex64 stream of the same kind (throughput, one GPU op)
TINY_W2 = """\
version: 1
name: w2tiny
sample_rate: 1.0e6
block_size: 65536
channels: 1
dtype: complex64
qos: {class: throughput}
source: {type: synth, signal: noise, seed: 2}
stages:
  - {type: gain, db: -3}
sink: {type: "null"}
"""



def _run(driver: str, tmp_path: Path, devices: int, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "w2tiny.yaml").write_text(TINY_W2)
    import pygpukit_dsp

    env = dict(os.environ, GK_LIBCUDA=driver, FAKE_CUDA_DEVICES=str(devices), GK_JIT_DISK_CACHE="0",
               PYTHONPATH=os.pathsep.join([str(Path(pygpukit_dsp.__file__).resolve().parents[1]),
                                           os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "multi_gpu.py"), "--w2",
                           str(tmp_path / "w2tiny.yaml"), "--seconds", "0.4", "--blocks-streamed", "20",
                           "--blocks-resident", "50", "--out", str(tmp_path / "out"), *extra],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


def test_two_gpus_report_per_gpu_figures_and_write_json_and_markdown(fake_engine_driver, tmp_path):
    # measured once for the 8 identical streams (admission.cost_key): when each was timed alone,
    # one host hiccup once put 6 of them on one GPU
    proc = _run(fake_engine_driver, tmp_path, 2)
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "out" / "multi_gpu.json").read_text())
    md = (tmp_path / "out" / "multi_gpu.md").read_text()
    assert md.strip() == proc.stdout.strip()  # the table printed is the table written
    assert data["gpus"] == [0, 1]
    w1 = data["w1"]
    assert w1["streams"] == 8 and w1["blocks_per_stream"] == 75  # 4 per GPU; ceil(0.4 s * 187.5)
    assert [g["gpu"] for g in w1["per_gpu"]] == [0, 1]
    for g in w1["per_gpu"]:
        assert g["streams"] == 4 and g["blocks"] == 4 * 75
        assert g["host_latency_us"]["count"] == 4 * 75  # the streams' histograms merged
        assert g["host_latency_us"]["p50"] > 0
    assert sorted(s["gpu"] for s in w1["per_stream"]) == [0] * 4 + [1] * 4
    assert all(s["placement"].startswith(f"GPU {s['gpu']}: auto: ") for s in w1["per_stream"])
    for mode in ("streamed", "resident"):
        m = data["w2"]["modes"][mode]
        assert set(m["alone_gsps"]) == set(m["together_gsps"]) == {"0", "1"}
        assert m["aggregate_gsps"] == pytest.approx(sum(m["together_gsps"].values()))
        assert m["ratio"] == pytest.approx(m["aggregate_gsps"] / m["one_gpu_gsps"])
    assert w1["cost_us"] is None
    assert set(data["w2"]["modes"]) == {"streamed", "resident"}


def test_one_gpu_runs_and_says_it_is_degenerate(fake_engine_driver, tmp_path):
    proc = _run(fake_engine_driver, tmp_path, 1, "--skip", "w2", "--cost-us", "50")
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "out" / "multi_gpu.json").read_text())
    assert data["gpus"] == [0] and "w2" not in data  # one GPU: the placement has nowhere else to go
    assert data["w1"]["cost_us"] == 50
    assert [g["gpu"] for g in data["w1"]["per_gpu"]] == [0] and data["w1"]["streams"] == 4
    assert {s["gpu"] for s in data["w1"]["per_stream"]} == {0}
    assert (tmp_path / "out" / "multi_gpu.md").read_text().strip() == proc.stdout.strip()


def test_no_gpu_is_an_error_with_the_reason(tmp_path):
    env = dict(os.environ, GK_LIBCUDA="/nonexistent/libcuda.so.1")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "multi_gpu.py")], capture_output=True,
                          text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 1 and "no usable GPU" in proc.stderr and "Traceback" not in proc.stderr
