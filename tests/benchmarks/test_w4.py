"""benchmarks/w4.py: the dry run (cpu engines, the CuPy code on NumPy) writes its JSON with the
hand-written math matching the graph; on the fake CUDA driver (kernels that do nothing, so the
figures and values mean nothing) the graph engine makes one H2D per source, one D2H per sink and
one graph launch per block, the two chains twice the copies, the joined chains three each way."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "w4.py"


def _run(tmp_path: Path, backend: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--backend", backend, "--blocks", "5", "--warmup", "1",
                           "--json", str(tmp_path / "out.json")], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)


def test_the_graph_validates():
    proc = subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", "validate", str(ROOT / "benchmarks" / "w4.yaml")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "2 sinks" in proc.stdout


def test_cpu_dry_run_writes_results_and_the_math_matches(tmp_path: Path):
    proc = _run(tmp_path, "cpu")
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["workload"] == "w4" and out["backend"] == "cpu" and out["blocks"] == 5
    assert set(out["results"]) == {"ours", "joined", "separate", "numpy", "chain_spectrum", "chain_carriers", "floor"}
    assert set(out["absent"]) == {"cupy", "torch_graph"}
    assert set(out["ratios"]) == {"ours_over_joined", "ours_over_separate", "bound_over_separate",
                                  "ours_over_costlier_chain"}
    costlier = max(out["results"][c]["p50_us"] for c in ("chain_spectrum", "chain_carriers"))
    assert out["ratios"]["bound_over_separate"] == pytest.approx(costlier / out["results"]["separate"]["p50_us"])
    for name in ("joined", "separate", "numpy"):
        r = out["results"][name]
        assert r["matches_ours"] is True and r["max_rel_err"] < 1e-3
        assert {"p50_us", "p99_us", "mean_us", "max_us", "blocks"} <= set(r)
    assert out["results"]["ours"]["blocks"] == 5


def test_copies_and_launches_per_block_on_the_fake_driver(tmp_path: Path, fake_engine_driver: str):
    import pygpukit_dsp
    from pygpukit_dsp.capabilities import capabilities

    if not capabilities()["cufft"]["found"]:
        pytest.skip("the channelizer's op needs cuFFT (pip install nvidia-cufft)")
    env = dict(os.environ, GK_LIBCUDA=fake_engine_driver, GK_JIT_DISK_CACHE="0",
               PYTHONPATH=os.pathsep.join([str(Path(pygpukit_dsp.__file__).resolve().parents[1]),
                                           os.environ.get("PYTHONPATH", "")]))
    proc = _run(tmp_path, "cuda", env)
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["backend"] == "cuda", proc.stderr[-4000:]
    ours = out["results"]["ours"]["counters"]
    assert ours["blocks_per_block"] == 1
    assert ours["h2d_copies_per_block"] == 1 and ours["d2h_copies_per_block"] == 2
    assert ours["graph_launches_per_block"] == 1
    sep = out["results"]["separate"]["counters"]
    assert sep["h2d_copies_per_block"] == 2 and sep["d2h_copies_per_block"] == 2
    joined = out["results"]["joined"]["counters"]  # the channelizer's chain, then one per branch
    assert joined["h2d_copies_per_block"] == 3 and joined["d2h_copies_per_block"] == 3
    assert {"cupy", "torch_graph"} <= set(out["absent"])   # neither is installed here
