"""The ``python`` stage on a machine with a usable GPU: the cuda backend has no implementation of it
(the block runs as one captured CUDA graph, and a Python call cannot be part of one), so
``backend: cuda`` refuses a pipeline holding one before the first block, and ``auto`` runs it on
the cpu backend, says why, and gives the cpu backend's result (state between blocks included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends import choose_backend
from pygpukit_dsp.errors import UnsupportedError

pytestmark = pytest.mark.gpu


def _ema(x, state):
    a = np.float32(state["alpha"])
    acc = state.setdefault("acc", np.zeros(x.shape[0], x.dtype))
    y = np.empty_like(x)
    for t in range(x.shape[1]):
        acc[:] = a * x[:, t] + (np.float32(1) - a) * acc
        y[:, t] = acc
    return y


def _pipeline(backend: str) -> Pipeline:
    return Pipeline([stages.Gain(db=-6), stages.Python(_ema, name="smooth", state={"alpha": 0.2})],
                    sample_rate=8000, channels=2, block_size=64, backend=backend)


def test_cuda_refuses_a_python_stage_before_the_first_block():
    p = _pipeline("cuda")
    with pytest.raises(UnsupportedError) as info:
        choose_backend(p, p.specs(), "cuda")
    assert info.value.stage == "smooth" and info.value.backend == "cuda" and "'python'" in info.value.reason


def test_auto_runs_it_on_the_cpu_backend_and_says_why():
    p = _pipeline("auto")
    choice = choose_backend(p, p.specs(), "auto")
    assert choice.name == "cpu" and "stage 'smooth' cannot run on CUDA" in choice.reason
    x = np.random.default_rng(0).standard_normal((2, 1000)).astype(np.float32)
    np.testing.assert_array_equal(p.process(x), _pipeline("cpu").process(x))


def test_gk_stream_run_with_backend_cuda_exits_2_naming_the_stage(tmp_path):
    (tmp_path / "gk_gpu_fns.py").write_text("def double(x):\n    return x * 2\n")
    (tmp_path / "p.yaml").write_text(textwrap.dedent("""\
        version: 1
        name: py
        sample_rate: 8000
        channels: 1
        block_size: 64
        backend: cuda
        source: {type: synth, signal: sine, freq_hz: 100, duration_s: 0.05}
        stages:
          - {type: python, name: twice, function: "gk_gpu_fns:double"}
        sink: {type: "null"}
    """))
    import pygpukit_dsp

    here = str(Path(pygpukit_dsp.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
    stats = tmp_path / "stats.json"
    r = subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", "run", str(tmp_path / "p.yaml")],
                       capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path.anchor)
    assert r.returncode == 2 and "stage 'twice' is not supported on backend 'cuda'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", "run", str(tmp_path / "p.yaml"), "--backend",
                        "auto", "--stats-json", str(stats)], capture_output=True, text=True, env=env, timeout=120,
                       cwd=tmp_path.anchor)
    assert r.returncode == 0, r.stderr
    data = json.loads(stats.read_text())
    assert data["backend"] == "cpu" and "stage 'twice' cannot run on CUDA" in data["backend_reason"]
    assert data["python_stages"]["twice"]["calls"] == data["blocks"]
