"""The ``python`` stage on the cuda backend (backends/cuda_python_chain.py): its function gets the
block as a CuPy or torch GPU array between the native segments around it, with its state on the
GPU, and the chain gives what the cpu backend gives; a GPU input stays on the GPU (no H2D/D2H);
``auto`` runs a NumPy function (no ``framework``) on the cpu backend and says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pygpukit_dsp import Graph, Pipeline, stages
from pygpukit_dsp.backends import choose_backend, open_backend
from pygpukit_dsp.errors import StreamFault, UnsupportedError
from pygpukit_dsp.io import NumpySink

pytestmark = pytest.mark.gpu

TAPS = (np.hanning(15) / 7.5).astype(np.float32)
SEEN: dict[str, str] = {}


def running_offset(x, state):
    """y = x + the sum of every earlier block's samples, per channel (a state that must carry)."""
    SEEN["x"], SEEN["acc"] = type(x).__module__.split(".")[0], type(state["acc"]).__module__.split(".")[0]
    y = x + state["acc"][:, None]
    state["acc"] += x.sum(axis=1)
    return y


def running_offset_torch(x, state):
    SEEN["x"], SEEN["acc"] = type(x).__module__.split(".")[0], type(state["acc"]).__module__.split(".")[0]
    y = x + state["acc"][:, None]
    state["acc"] += x.sum(dim=1)
    return y


def _state():
    return {"acc": np.zeros(2, np.float32)}


def _chain(backend: str, fn=running_offset, framework: str | None = "cupy", first: bool = False) -> Pipeline:
    py = stages.Python(fn, name="offset", state=_state(), framework=framework)
    body = [py, stages.Fir(taps=TAPS), stages.Gain(db=-6)] if first else \
        [stages.Fir(taps=TAPS), py, stages.Gain(db=-6)]
    return Pipeline(body, sample_rate=8000, channels=2, block_size=256, backend=backend)


def _x(n: int = 2000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, n)).astype(np.float32)


@pytest.mark.parametrize("first", [False, True])
def test_host_blocks_through_native_segments_and_a_cupy_function_match_cpu(first):
    x = _x()
    cpu = _chain("cpu", first=first).process(x)
    p = _chain("cuda", first=first)
    engine = open_backend(p, p.specs(), "cuda")
    try:
        assert [k for k, _ in engine.parts] == (["native", "python", "native"])
        bs = p.block_size
        ys = [engine.process(x[:, s:s + bs], final=s + bs >= x.shape[1]) for s in range(0, x.shape[1], bs)]
        c = engine.counters()
        calls = engine.python_calls()["offset"]["calls"]
    finally:
        engine.close()
    assert SEEN == {"x": "cupy", "acc": "cupy"}  # GPU arrays in, the state on the GPU
    y = np.concatenate(ys, axis=1)
    assert isinstance(ys[0], np.ndarray) and y.shape == cpu.shape
    np.testing.assert_allclose(y, cpu, rtol=1e-4, atol=1e-3 * float(np.abs(cpu).max()))
    assert calls == len(ys) == 8
    assert c["h2d_copies"] == 8 and c["d2h_copies"] == 8 and c["device_blocks"] == 16  # one each way per block


def test_a_cupy_input_stays_on_the_gpu_with_no_host_copy():
    cp = pytest.importorskip("cupy")
    x = _x(1500, seed=1)
    p = _chain("cuda")
    engine = open_backend(p, p.specs(), "cuda")
    try:
        xd = cp.asarray(x)
        bs = p.block_size
        ys = [engine.process(xd[:, s:s + bs], final=s + bs >= x.shape[1]) for s in range(0, x.shape[1], bs)]
        engine.synchronize()
        c = engine.counters()
    finally:
        engine.close()
    assert all(isinstance(y, cp.ndarray) for y in ys)
    assert c["h2d_copies"] == 0 and c["d2h_copies"] == 0 and c["host_blocks"] == 0
    np.testing.assert_allclose(cp.asnumpy(cp.concatenate(ys, axis=1)), _chain("cpu").process(x), rtol=1e-4,
                               atol=1e-3)
    # Pipeline.process of the whole GPU array: a GPU array back, the same values
    y = _chain("cuda").process(xd)
    assert isinstance(y, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(y), _chain("cpu").process(x), rtol=1e-4, atol=1e-3)


def test_a_torch_function_gets_torch_tensors_and_torch_in_gives_torch_out():
    torch = pytest.importorskip("torch")
    x = _x(1024, seed=2)
    p = _chain("cuda", fn=running_offset_torch, framework="torch")
    y = p.process(torch.from_numpy(x).cuda())
    assert isinstance(y, torch.Tensor) and y.is_cuda
    assert SEEN == {"x": "torch", "acc": "torch"}
    np.testing.assert_allclose(y.cpu().numpy(), _chain("cpu").process(x), rtol=1e-4, atol=1e-3)


def test_reset_and_each_run_start_from_the_initial_state():
    x = _x(512, seed=3)
    p = _chain("cuda")
    engine = open_backend(p, p.specs(), "cuda")
    try:
        a = [engine.process(x[:, s:s + 256]) for s in (0, 256)]
        engine.reset()
        b = [engine.process(x[:, s:s + 256]) for s in (0, 256)]
    finally:
        engine.close()
    np.testing.assert_array_equal(np.concatenate(a, axis=1), np.concatenate(b, axis=1))
    assert not np.allclose(a[1], _chain("cuda").process(x[:, 256:512]))  # block 2 carried block 1's sum


def test_a_function_that_returns_a_numpy_array_on_cuda_stops_the_stream_naming_the_stage():
    def to_host(x):
        return x.get()

    p = Pipeline([stages.Fir(taps=TAPS), stages.Python(to_host, name="leaky", framework="cupy")],
                 sample_rate=8000, channels=2, block_size=256, backend="cuda")
    with pytest.raises(StreamFault) as info:
        p.process(_x(512))
    assert info.value.part == "stage 'leaky' (python)" and info.value.block == 0


def test_nonfinite_input_before_a_leading_python_stage_is_found_on_the_gpu():
    x = _x(768, seed=4)
    x[1, 300] = np.nan
    y = _chain("cuda", first=True).process(x, nonfinite="zero")
    np.testing.assert_allclose(y, _chain("cpu", first=True).process(x, nonfinite="zero"), rtol=1e-4, atol=1e-3)
    from pygpukit_dsp.nonfinite import NonFiniteInput

    with pytest.raises(NonFiniteInput) as info:
        _chain("cuda", first=True).process(x)
    assert info.value.count.first_block == 1 and info.value.count.first_sample == 300


def test_auto_keeps_a_numpy_function_on_the_cpu_and_runs_a_named_framework_on_the_gpu():
    numpy_fn = _chain("auto", framework=None)
    choice = choose_backend(numpy_fn, numpy_fn.specs(), "auto")
    assert choice.name == "cpu" and "stage 'offset' (python) names no framework" in choice.reason
    gpu_fn = _chain("auto")
    assert choose_backend(gpu_fn, gpu_fn.specs(), "auto").name == "cuda"
    # backend: cuda with no framework: CuPy arrays
    SEEN.clear()
    _chain("cuda", framework=None).process(_x(256))
    assert SEEN["x"] == "cupy"


def test_a_graph_with_branches_runs_a_python_stage_that_reads_its_source_on_cuda():
    def graph(backend):
        g = Graph(name="g", sample_rate=8000, channels=2, block_size=256, backend=backend)
        src = g.source(name="in")
        py = g.add(stages.Python(running_offset, name="offset", state=_state(),
                                 framework="cupy" if backend == "cuda" else None), src)
        g.sink(NumpySink(), py, name="a")
        g.sink(NumpySink(), g.add(stages.Gain(db=-6), src), name="b")
        return g

    x = _x(512 + 100)
    gpu, cpu = graph("cuda").process(x), graph("cpu").process(x)
    assert set(gpu) == set(cpu) == {"a", "b"}
    for name in cpu:
        np.testing.assert_allclose(gpu[name], cpu[name], rtol=1e-4, atol=1e-3, err_msg=name)


def test_a_frames_output_that_goes_on_is_refused_before_the_first_block():
    def frames(x):
        return x.reshape(x.shape[0], 16, 16)

    p = Pipeline([stages.Python(frames, name="framer", framework="cupy",
                                output={"domain": "frames", "bins": 16, "block_size": 16}),
                  stages.Power()], sample_rate=8000, channels=2, block_size=256, backend="cuda")
    with pytest.raises(UnsupportedError) as info:
        choose_backend(p, p.specs(), "cuda")
    assert info.value.stage == "framer"


def test_gk_stream_run_of_a_yaml_python_stage_on_cuda_equals_the_cpu_run(tmp_path):
    (tmp_path / "gk_gpu_fns.py").write_text(textwrap.dedent("""\
        def offset(x, state):
            if "acc" not in state:  # an array of the block's own framework (NumPy, or CuPy on cuda)
                state["acc"] = x[:, 0] * 0
            y = x + state["acc"][:, None]
            state["acc"] += x.sum(axis=1)
            return y
    """))
    outs = {}
    for backend in ("cuda", "cpu"):
        (tmp_path / f"{backend}.yaml").write_text(textwrap.dedent(f"""\
            version: 1
            name: py
            sample_rate: 8000
            channels: 1
            block_size: 64
            backend: {backend}
            source: {{type: synth, signal: sine, freq_hz: 100, duration_s: 0.05}}
            stages:
              - {{type: fir, taps: [0.25, 0.5, 0.25]}}
              - {{type: python, name: offs, function: "gk_gpu_fns:offset", framework: cupy, state: {{}}}}
            sink: {{type: numpy, path: {tmp_path / backend}.npy}}
        """))
        import pygpukit_dsp

        here = str(Path(pygpukit_dsp.__file__).resolve().parents[1])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
        stats = tmp_path / f"{backend}.json"
        r = subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", "run", str(tmp_path / f"{backend}.yaml"),
                            "--stats-json", str(stats)], capture_output=True, text=True, env=env, timeout=180,
                           cwd=tmp_path.anchor)
        assert r.returncode == 0, r.stderr
        data = json.loads(stats.read_text())
        assert data["backend"] == backend
        assert data["python_stages"]["offs"]["calls"] == data["blocks"] == 7
        outs[backend] = np.load(tmp_path / f"{backend}.npy")
    np.testing.assert_allclose(outs["cuda"], outs["cpu"], rtol=1e-4, atol=1e-4)
