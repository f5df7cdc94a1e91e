"""How a flowgraph with branches and python stages is cut for the cuda backend
(backends/cuda_python_graph.py): native regions by level between the python stages, an identity
stage for a source that a python stage (or a later region) reads, each region's inputs and what
leaves it, the refusals. No GPU needed: nothing here opens an engine."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import Graph, stages
from pygpukit_dsp.backends.cuda_python_graph import plan_python_graph
from pygpukit_dsp.errors import UnsupportedError


def twice(x):
    return x * 2


def _py(name, **kw):
    return stages.Python(twice, name=name, framework="cupy", **kw)


def _graph(*build) -> Graph:
    g = Graph(name="g", sample_rate=8000, channels=2, block_size=64)
    for fn in build:
        fn(g)
    return g


def branches(g: Graph) -> None:
    """source -> fir -> (py -> gain) and (power); add(fir, gain) -> sink 'sum', power -> 'pw'."""
    g.add(stages.Fir(taps=[0.5, 0.5], name="lp"), "source")
    g.add(_py("py"), "lp")
    g.add(stages.Gain(db=-6, name="lo"), "py")
    g.add(stages.Power(name="pw"), "lp")
    g.add(stages.Add(name="sum"), "lp", "lo")
    g.sink(_null(), "sum", name="sum")
    g.sink(_null(), "pw", name="pw")


def _steps(plan):
    return [(s.kind, s.names, s.reads, s.gives) for s in plan.steps]


def test_a_branched_graph_is_cut_into_native_regions_by_level_around_its_python_stages():
    g = _graph(branches)
    plan = plan_python_graph(g, g.specs())
    assert _steps(plan) == [
        ("native", ("lp", "pw"), ("source",), ("lp", "pw")),   # level 0: one region, both branches
        ("python", ("py",), ("lp",), ("py",)),
        ("native", ("lo", "sum"), ("py", "lp"), ("sum",)),     # level 1 reads the python output and lp
    ]
    region, specs = plan.regions[2]
    assert specs.sources == ("py", "lp") and specs.outputs == {"sum": "sum"}
    assert [st.name for st in region.stages] == ["lo", "sum"] and region.topology().stage_inputs["sum"] == ("lp", "lo")
    assert plan.specs.outputs == g.specs().outputs


def test_a_source_a_python_stage_reads_enters_through_an_identity_stage_at_level_zero():
    def build(g):
        g.add(_py("first"), "source")
        g.add(stages.Gain(db=3, name="up"), "first")
        g.add(stages.Add(name="both"), "source", "up")  # reads the source again, at level 1

    g = _graph(build)
    plan = plan_python_graph(g, g.specs())
    assert _steps(plan) == [
        ("native", ("source.input",), ("source",), ("source.input",)),
        ("python", ("first",), ("source.input",), ("first",)),
        ("native", ("up", "both"), ("first", "source.input"), ("both",)),
    ]
    entry = plan.topo.stage("source.input")
    assert entry.type == "gain" and entry.params.linear == 1.0
    assert plan.specs.nodes["source.input"] == g.specs().nodes["source"]


def test_two_python_stages_in_parallel_share_a_level_and_a_region_reads_both():
    def build(g):
        g.add(stages.Gain(db=1, name="in"), "source")
        g.add(_py("a"), "in")
        g.add(_py("b"), "in")
        g.add(stages.Combine(name="both"), "a", "b")

    g = _graph(build)
    plan = plan_python_graph(g, g.specs())
    assert [(s.kind, s.names) for s in plan.steps] == [("native", ("in",)), ("python", ("a",)), ("python", ("b",)),
                                                       ("native", ("both",))]
    assert plan.steps[-1].reads == ("a", "b")


def test_a_higher_region_of_inputs_of_different_sizes_is_cut_into_its_connected_parts():
    def build(g):
        g.add(stages.Gain(db=1, name="in"), "source")
        g.add(_py("a"), "in")
        g.add(stages.Python(lambda x: x[:, ::2].copy(), name="half", framework="cupy",
                            output={"block_size": 32}), "in")
        g.add(stages.Gain(db=2, name="ga"), "a")
        g.add(stages.Gain(db=3, name="gh"), "half")
        g.sink(_null(), "ga", name="full")
        g.sink(_null(), "gh", name="halved")

    g = _graph(build)
    plan = plan_python_graph(g, g.specs())
    natives = [s.names for s in plan.steps if s.kind == "native"]
    assert natives == [("in",), ("ga",), ("gh",)]


def test_a_python_stage_whose_frames_output_a_stage_reads_is_refused_naming_it():
    def build(g):
        g.add(stages.Python(lambda x: x.reshape(x.shape[0], 4, 16), name="framer", framework="cupy",
                            output={"domain": "frames", "bins": 16, "block_size": 4}), "source")
        g.add(stages.Power(name="pw"), "framer")
        g.add(stages.Gain(db=1, name="other"), "source")
        g.sink(_null(), "pw", name="a")
        g.sink(_null(), "other", name="b")

    g = _graph(build)
    with pytest.raises(UnsupportedError) as info:
        plan_python_graph(g, g.specs())
    assert info.value.stage == "framer" and info.value.backend == "cuda"


def test_the_cpu_backend_runs_the_same_graph_with_numpy_functions():
    g = _graph(branches)
    x = np.random.default_rng(1).standard_normal((2, 200)).astype(np.float32)
    out = g.process(x, backend="cpu")
    lp = np.concatenate([x[:, :1] * 0.5, 0.5 * (x[:, 1:] + x[:, :-1])], axis=1)
    assert np.allclose(out["sum"], lp + 2 * lp * 10 ** (-6 / 20), atol=1e-5)
    assert np.allclose(out["pw"], lp ** 2, atol=1e-5)


def _null():
    from pygpukit_dsp.io import NullSink

    return NullSink()


# ----------------------------------------------------------------------------- on the GPU


def running_offset(x, state):
    """y = x + the sum of every earlier block's samples, per channel (a state that must carry)."""
    y = x + state["acc"][:, None]
    state["acc"] += x.sum(axis=1)
    return y


def running_offset_torch(x, state):
    y = x + state["acc"][:, None]
    state["acc"] += x.sum(dim=1)
    return y


def stateful(framework: str | None):
    """source -> lp -> (offset -> lo) and pw, add(lp, lo); offset keeps a state between blocks."""
    fn = running_offset_torch if framework == "torch" else running_offset

    def build(g):
        g.add(stages.Fir(taps=np.hanning(15) / 7.5, name="lp"), "source")
        g.add(stages.Python(fn, name="offset", framework=framework, state={"acc": np.zeros(2, np.float32)}), "lp")
        g.add(stages.Gain(db=-6, name="lo"), "offset")
        g.add(stages.Power(name="pw"), "lp")
        g.add(stages.Add(name="sum"), "lp", "lo")
        g.sink(_null(), "sum", name="sum")
        g.sink(_null(), "pw", name="pw")

    return _graph(build)


def _x(n: int = 64 * 9 + 17, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, n)).astype(np.float32)


def _close(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name in want:
        a = got[name] if isinstance(got[name], np.ndarray) else _host(got[name])
        assert a.shape == want[name].shape, name
        np.testing.assert_allclose(a, want[name], rtol=1e-4, atol=1e-4 * np.abs(want[name]).max(), err_msg=name)


def _host(y):
    from pygpukit_dsp.arrays_interop import to_host

    return to_host(y)


@pytest.mark.gpu
@pytest.mark.parametrize("framework", ["cupy", "torch"])
def test_gpu_a_branched_graph_with_a_stateful_python_stage_equals_the_cpu_backend(framework):
    pytest.importorskip(framework)
    x = _x()
    want = stateful(None).process(x, backend="cpu")
    _close(stateful(framework).process(x, backend="cuda"), want)


@pytest.mark.gpu
def test_gpu_host_blocks_make_one_copy_per_source_and_per_output_and_gpu_blocks_none():
    cp = pytest.importorskip("cupy")
    from pygpukit_dsp.backends import open_backend
    from pygpukit_dsp.backends.cuda_python_graph import CudaPythonGraphEngine

    g, x = stateful("cupy"), _x(64 * 4)
    want = stateful(None).process(x, backend="cpu")
    engine = open_backend(g, g.specs(), "cuda")
    try:
        assert isinstance(engine, CudaPythonGraphEngine) and engine.output_names == ("sum", "pw")
        host = [engine.process(x[:, s:s + 64]) for s in range(0, 128, 64)]
        c = engine.counters()
        assert (c["h2d_copies"], c["d2h_copies"], c["host_blocks"]) == (2, 4, 2)
        assert (c["segments"], c["python_parts"]) == (2, 1) and c["graph_launches"] == 4
        dev = [engine.process(cp.asarray(x[:, s:s + 64])) for s in range(128, 256, 64)]
        engine.synchronize()
        c2 = engine.counters()
        assert (c2["h2d_copies"], c2["d2h_copies"], c2["host_blocks"]) == (2, 4, 2)
        assert all(isinstance(y, cp.ndarray) for pair in dev for y in pair)
        got = {name: np.concatenate([b[k] for b in host] + [cp.asnumpy(b[k]) for b in dev], axis=1)
               for k, name in enumerate(engine.output_names)}
        _close(got, want)
        assert engine.python_calls()["offset"]["calls"] == 4
    finally:
        engine.close()


@pytest.mark.gpu
def test_gpu_a_source_a_python_stage_reads_is_cleaned_of_nan_first():
    pytest.importorskip("cupy")

    def build(g, framework):
        g.add(stages.Python(twice, name="first", framework=framework), "source")
        g.add(stages.Gain(db=3, name="up"), "first")
        g.add(stages.Add(name="both"), "source", "up")

    x = _x(64 * 3)
    x[1, 70] = np.nan
    cuda = _graph(lambda g: build(g, "cupy"))
    cpu = _graph(lambda g: build(g, None))
    got = cuda.process(x, backend="cuda", nonfinite="zero")
    want = cpu.process(x, backend="cpu", nonfinite="zero")
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_a_graph_run_takes_gpu_arrays_from_its_callback_source_and_gives_them_to_its_sinks():
    cp = pytest.importorskip("cupy")
    from pygpukit_dsp.io import CallbackSink, CallbackSource

    x = _x(64 * 7 + 20)
    pos = [0]

    def produce(n):
        if pos[0] >= x.shape[1]:
            return None
        part = cp.asarray(x[:, pos[0]:pos[0] + n])
        pos[0] += n
        return part

    got: dict[str, list] = {"lp": [], "pw": []}
    seen: set[str] = set()

    def keep(name):
        def write(b):
            seen.add(type(b).__module__.split(".")[0])
            got[name].append(cp.asnumpy(b))
        return write

    g = Graph(name="g", sample_rate=8000, channels=2, block_size=64, backend="cuda")
    g.source(CallbackSource(fn=produce))
    g.add(stages.Fir(taps=np.hanning(15) / 7.5, name="lp"), "source")
    g.add(stages.Power(name="pw"), "lp")
    g.sink(CallbackSink(fn=keep("lp"), device_arrays=True), "lp", name="lp")
    g.sink(CallbackSink(fn=keep("pw"), device_arrays=True), "pw", name="pw")
    summary = g.run()
    plain = Graph(name="g", sample_rate=8000, channels=2, block_size=64)
    plain.add(stages.Fir(taps=np.hanning(15) / 7.5, name="lp"), "source")
    plain.add(stages.Power(name="pw"), "lp")
    plain.sink(_null(), "lp", name="lp")
    plain.sink(_null(), "pw", name="pw")
    want = plain.process(x, backend="cpu")
    assert seen == {"cupy"} and summary.blocks == 8
    _close({k: np.concatenate(v, axis=1) for k, v in got.items()}, want)
    c = summary.engine_counters
    assert c["device_blocks"] == summary.blocks
    # host blocks (admission's calibration, of zeros) copied each way; the run's blocks were not
    assert c["h2d_copies"] == c["blocks"] - c["device_blocks"]
