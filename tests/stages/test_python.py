"""The ``python`` stage on the cpu backend: the calling convention, state between blocks, reset,
the last short block, the checks on what the function returns, YAML's ``function:`` import errors,
and the per-call accounting in the run's summary. The cuda backend has no implementation of it
(checked here without a GPU: no lowering, so cuda refuses it and auto picks cpu)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pygpukit_dsp import Pipeline
from pygpukit_dsp.errors import ConfigError, StreamFault
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages import Python, stage_class

from .conftest import assert_documented, stream

REPO = Path(__file__).resolve().parents[2]

MODULE = '''
import numpy as np

def ema(x, state):
    """Exponential average per channel; state {"alpha": a} gains "acc" on the first block."""
    a = np.float32(state["alpha"])
    acc = state.setdefault("acc", np.zeros(x.shape[0], x.dtype))
    y = np.empty_like(x)
    for t in range(x.shape[1]):
        acc[:] = a * x[:, t] + (np.float32(1) - a) * acc
        y[:, t] = acc
    return y

def double(x):
    return x * np.float32(2)

NOT_A_FUNCTION = 3
'''

BROKEN_MODULE = "def f(x):\n    return x +\n"


def ema_reference(x: np.ndarray, alpha: float) -> np.ndarray:
    a = np.float32(alpha)
    acc = np.zeros(x.shape[0], np.float32)
    y = np.empty_like(x)
    for t in range(x.shape[1]):
        acc = a * x[:, t] + (np.float32(1) - a) * acc
        y[:, t] = acc
    return y


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "gk_user_fns.py").write_text(MODULE)
    (tmp_path / "gk_user_broken.py").write_text(BROKEN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("gk_user_fns", "gk_user_broken"):
        sys.modules.pop(name, None)
    yield tmp_path
    for name in ("gk_user_fns", "gk_user_broken"):
        sys.modules.pop(name, None)


def running_sum(x, state):
    y = state["acc"][:, None] + np.cumsum(x, axis=1, dtype=np.float64)
    state["acc"] = y[:, -1].copy()
    return y.astype(np.float32)


def test_registered_and_documented():
    assert stage_class("python") is Python
    assert_documented(Python)


def test_stateless_function_is_called_with_the_block_only():
    seen = []

    def f(x):
        seen.append(x.shape)
        return x * np.float32(3)

    spec = SignalSpec(1000.0, 2, 16)
    x = np.random.default_rng(0).standard_normal((2, 40)).astype(np.float32)
    y = stream(Python(f).cpu(spec), x, 16)
    np.testing.assert_array_equal(y, x * np.float32(3))
    assert seen == [(2, 16), (2, 16), (2, 8)]  # the last block is shorter


def test_state_is_kept_between_blocks_and_reset_starts_again():
    initial = {"acc": np.zeros(2)}
    st = Python(running_sum, state=initial)
    spec = SignalSpec(1000.0, 2, 16)
    x = np.random.default_rng(1).standard_normal((2, 45)).astype(np.float32)
    proc = st.cpu(spec)
    y = stream(proc, x, 16)
    np.testing.assert_allclose(y, np.cumsum(x.astype(np.float64), axis=1), rtol=1e-6, atol=1e-6)
    assert not np.any(initial["acc"])  # the stage works on its own copy
    proc.reset()
    np.testing.assert_array_equal(proc.state["acc"], [0.0, 0.0])
    np.testing.assert_array_equal(stream(proc, x, 16), y)


def test_state_may_be_handed_back_as_a_pair():
    def count(x, n):
        return x + np.float32(n), n + 1

    proc = Python(count, state=0).cpu(SignalSpec(1000.0, 1, 4))
    y = stream(proc, np.zeros((1, 10), np.float32), 4)
    np.testing.assert_array_equal(y[0], [0] * 4 + [1] * 4 + [2] * 2)
    assert proc.state == 3


def test_output_format_change_and_the_short_last_block():
    def decimate(x):
        return np.ascontiguousarray(x[:, ::2]).astype(np.complex64)

    st = Python(decimate, output={"block_size": 8, "dtype": "complex64"})
    spec = SignalSpec(1000.0, 2, 16)
    out = st.output_spec(spec)
    assert (out.block_size, out.dtype, out.sample_rate, out.channels) == (8, "complex64", 500.0, 2)
    x = np.arange(2 * 40, dtype=np.float32).reshape(2, 40)
    y = stream(st.cpu(spec), x, 16)
    np.testing.assert_array_equal(y, x[:, ::2])


def test_frames_output_needs_bins():
    with pytest.raises(ConfigError, match="bins"):
        Python(lambda x: x, output={"domain": "frames"}).output_spec(SignalSpec(1000.0, 1, 16))
    st = Python(lambda x: x.reshape(1, 2, 8), output={"domain": "frames", "bins": 8, "block_size": 2})
    out = st.output_spec(SignalSpec(1000.0, 1, 16))
    assert (out.domain, out.block_size, out.bins) == ("frames", 2, 8)


@pytest.mark.parametrize("fn, words", [
    (lambda x: x.astype(np.float64), "float64"),
    (lambda x: x[:, :-1], "shape (2, 15)"),
    (lambda x: x[:1], "shape (1, 16)"),
    (lambda x: x.tolist(), "not a NumPy array"),
])
def test_a_result_of_another_shape_or_dtype_is_a_fault_naming_the_stage(fn, words):
    proc = Python(fn, name="mine").cpu(SignalSpec(1000.0, 2, 16))
    with pytest.raises(StreamFault) as info:
        proc.process(np.zeros((2, 16), np.float32))
    assert info.value.part == "stage 'mine' (python)" and info.value.block == 0
    assert words in str(info.value)


def test_short_last_block_must_keep_its_items():
    proc = Python(lambda x: np.zeros((2, 16), np.float32)).cpu(SignalSpec(1000.0, 2, 16))
    proc.process(np.zeros((2, 16), np.float32))
    with pytest.raises(StreamFault) as info:
        proc.process(np.zeros((2, 5), np.float32), final=True)
    assert info.value.block == 1 and "(2, 5)" in str(info.value)


def test_an_exception_in_the_function_is_a_fault_with_its_block():
    def boom(x):
        raise RuntimeError("bad block")

    proc = Python(boom, name="b").cpu(SignalSpec(1000.0, 1, 8))
    with pytest.raises(StreamFault) as info:
        proc.process(np.zeros((1, 8), np.float32))
    assert info.value.part == "stage 'b' (python)" and "RuntimeError: bad block" in str(info.value)


def test_call_stats_count_calls_and_reset_clears_them():
    proc = Python(lambda x: x).cpu(SignalSpec(1000.0, 1, 8))
    assert proc.call_stats()["calls"] == 0
    stream(proc, np.zeros((1, 20), np.float32), 8)
    stats = proc.call_stats()
    assert stats["calls"] == 3
    assert set(stats) == {"calls", "mean_us", "p50_us", "p99_us", "max_us", "total_us"}
    assert stats["p50_us"] <= stats["p99_us"] <= stats["max_us"] and stats["total_us"] >= 0
    proc.reset()
    assert proc.call_stats()["calls"] == 0


def test_function_by_reference_and_to_config(user_module):
    st = Python("gk_user_fns:ema", state={"alpha": 0.5}, name="smooth")
    assert st.to_config() == {"type": "python", "name": "smooth", "function": "gk_user_fns:ema",
                              "state": {"alpha": 0.5}}
    spec = SignalSpec(1000.0, 2, 16)
    x = np.random.default_rng(3).standard_normal((2, 50)).astype(np.float32)
    np.testing.assert_allclose(stream(st.cpu(spec), x, 16), ema_reference(x, 0.5), rtol=1e-6, atol=1e-6)
    assert Python(running_sum).to_config()["function"] == f"{__name__}:running_sum"
    with pytest.raises(ConfigError, match="cannot be named in YAML"):
        Python(lambda x: x).to_config()


def test_a_module_beside_the_yaml_file_is_found(tmp_path):
    (tmp_path / "gk_beside_fns.py").write_text(MODULE)
    (tmp_path / "p.yaml").write_text("version: 1\nname: py\nsample_rate: 1000\nchannels: 1\nblock_size: 8\n"
                                     "stages:\n  - {type: python, function: 'gk_beside_fns:double'}\n")
    try:
        p = Pipeline.from_yaml(tmp_path / "p.yaml")
        np.testing.assert_array_equal(p.process(np.ones((1, 20), np.float32), backend="cpu"), 2)
    finally:
        sys.modules.pop("gk_beside_fns", None)
    assert str(tmp_path) not in sys.path


@pytest.mark.parametrize("ref, words, hint", [
    ("gk_user_nothere:f", "cannot import module 'gk_user_nothere'", "the YAML file's folder"),
    ("gk_user_fns:emma", "has no attribute 'emma'", "did you mean 'ema'?"),
    ("gk_user_fns:NOT_A_FUNCTION", "is not callable", "name a function"),
    ("gk_user_broken:f", "raised SyntaxError", "fix the module"),
])
def test_yaml_function_errors_are_located_before_the_first_block(user_module, ref, words, hint):
    path = user_module / "p.yaml"
    path.write_text(textwrap.dedent(f"""\
        version: 1
        name: py
        sample_rate: 1000
        channels: 1
        stages:
          - type: python
            function: "{ref}"
    """))
    with pytest.raises(ConfigError) as info:
        Pipeline.from_yaml(path)
    err = info.value
    assert err.where == f"{path}:7:15" and words in err.message and hint in (err.hint or "")


def test_yaml_function_must_be_a_reference(user_module):
    path = user_module / "p.yaml"
    path.write_text("version: 1\nname: py\nsample_rate: 1000\nchannels: 1\nstages:\n"
                    "  - {type: python, function: not a reference}\n")
    with pytest.raises(ConfigError) as info:
        Pipeline.from_yaml(path)
    assert info.value.where == f"{path}:6:30" and "package.module:function" in info.value.message


def test_yaml_pipeline_runs_and_the_summary_reports_each_python_stage(user_module):
    path = user_module / "p.yaml"
    path.write_text(textwrap.dedent("""\
        version: 1
        name: py
        sample_rate: 8000
        channels: 2
        block_size: 64
        backend: cpu
        source: {type: synth, signal: noise, seed: 1, duration_s: 0.05}
        stages:
          - {type: python, name: smooth, function: "gk_user_fns:ema", state: {alpha: 0.25}}
          - {type: python, name: twice, function: "gk_user_fns:double"}
        sink: {type: "null"}
    """))
    p = Pipeline.from_yaml(path)
    summary = p.run()
    assert summary.blocks == 7  # 400 samples: six full blocks and a short one
    assert set(summary.python_stages) == {"smooth", "twice"}
    assert summary.python_stages["smooth"]["calls"] == 7
    d = summary.to_dict()
    assert d["python_stages"]["twice"]["calls"] == 7 and "p99_us" in d["python_stages"]["twice"]
    assert "python stage smooth: 7 calls" in summary.format()


def test_a_python_stage_has_no_single_cuda_op_of_its_own():
    # it runs on cuda between the native parts of a chain or a graph (backends/cuda_python_chain.py,
    # cuda_python_graph.py), never as a native op
    from pygpukit_dsp.backends.cuda_lowering import unsupported_reason

    reason = unsupported_reason(Python(lambda x: x), SignalSpec(1000.0, 1, 16))
    assert reason is not None and "not as a native op" in reason


def test_framework_names_cupy_or_torch_and_is_written_to_yaml_when_set():
    assert Python("os.path:join").params.framework is None
    assert Python("os.path:join", framework="torch").to_config()["framework"] == "torch"
    assert Python("os.path:join").to_config().get("framework") is None
    with pytest.raises(ConfigError) as info:
        Python("os.path:join", framework="jax")
    assert "framework" in str(info.value)


def test_gk_stream_run_with_a_function_from_pythonpath(tmp_path):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "gk_cli_fns.py").write_text(MODULE)
    (tmp_path / "p.yaml").write_text(textwrap.dedent("""\
        version: 1
        name: py
        sample_rate: 8000
        channels: 1
        block_size: 32
        source: {type: synth, signal: sine, freq_hz: 100, duration_s: 0.01}
        stages:
          - {type: python, name: smooth, function: "gk_cli_fns:ema", state: {alpha: 0.5}}
        sink: {type: "null"}
    """))
    import pygpukit_dsp

    package_parent = Path(pygpukit_dsp.__file__).resolve().parents[1]
    env = dict(os.environ, GK_LIBCUDA="/nonexistent/libcuda.so.1",
               PYTHONPATH=os.pathsep.join([str(package_parent), str(tmp_path / "mods")]))
    stats = tmp_path / "stats.json"
    r = subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", "run", str(tmp_path / "p.yaml"), "--stats-json",
                        str(stats)], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path.anchor)
    assert r.returncode == 0, r.stderr
    data = json.loads(stats.read_text())
    assert data["backend"] == "cpu" and data["blocks"] == 3
    assert data["python_stages"]["smooth"]["calls"] == 3
    # the same file without the module on the path: a located config error, exit code 2
    env["PYTHONPATH"] = str(package_parent)
    r = subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", "run", str(tmp_path / "p.yaml")],
                       capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path.anchor)
    assert r.returncode == 2 and f"{tmp_path / 'p.yaml'}:8:" in r.stderr and "Traceback" not in r.stderr


def test_a_graph_with_branches_accounts_its_python_stages(user_module):
    from pygpukit_dsp import Graph

    path = user_module / "g.yaml"
    path.write_text(textwrap.dedent("""\
        version: 1
        name: g
        sample_rate: 8000
        channels: 2
        block_size: 64
        source: {type: synth, signal: noise, seed: 2, duration_s: 0.02}
        stages:
          - {name: smooth, type: python, function: "gk_user_fns:ema", state: {alpha: 0.5}}
          - {name: twice, type: python, function: "gk_user_fns:double", input: source}
        sinks:
          - {type: "null", input: smooth}
          - {type: "null", input: twice}
    """))
    g = Graph.from_yaml(path)
    assert g.branch() is not None  # the source feeds two stages: the cpu graph engine runs it
    summary = g.run()
    assert summary.backend == "cpu" and summary.blocks == 3
    assert {n: c["calls"] for n, c in summary.python_stages.items()} == {"smooth": 3, "twice": 3}
