"""Flowgraphs on the GPU: one CUDA graph launch per block, one H2D per source and one D2H per sink,
each sink equal to the cpu backend's (and to its path run as a chain), several sinks on one path's
output on the chain engine, final blocks of odd sizes,
chunked (paced in units) equal to whole blocks, and the graph stages' ops against their CPU stages."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import Graph, Pipeline, stages
from pygpukit_dsp.backends import BackendChoice, open_backend
from pygpukit_dsp.backends.cuda_engine import CudaEngine
from pygpukit_dsp.backends.cuda_graph_engine import CudaGraphEngine
from pygpukit_dsp.io import NullSink
from pygpukit_dsp.io.base import StreamFormat

from .compare import rel_err, signal

pytestmark = pytest.mark.gpu


def _close(gpu: dict, cpu: dict, rtol: float) -> None:
    assert set(gpu) == set(cpu)
    for name in cpu:
        assert gpu[name].shape == cpu[name].shape and gpu[name].dtype == cpu[name].dtype, name
        assert rel_err(gpu[name], cpu[name]) < rtol, (name, rel_err(gpu[name], cpu[name]))


@pytest.mark.parametrize("path, rtol", [("pipelines/sdr_receiver.yaml", 3e-5), ("pipelines/mic_array.yaml", 5e-5)])
def test_example_graph_on_cuda_equals_cpu_per_sink(path, rtol):
    g = Graph.from_yaml(path)
    spec = g.specs().input
    n = spec.block_size * 5 + spec.block_size // 3 + 1  # a short final block
    x = signal(spec.channels, n, spec.is_complex, seed=11)
    _close(g.process(x, backend="cuda"), g.process(x, backend="cpu"), rtol)


def test_sdr_receiver_sinks_equal_their_paths_run_as_chains_on_cuda():
    g = Graph.from_yaml("pipelines/sdr_receiver.yaml")
    x = signal(1, 4096 * 4, True, seed=2)
    out = g.process(x, backend="cuda")
    ch, pick, narrow = g.stages[0], g.stages[2], g.stages[3]
    power = Pipeline([ch, g.stages[1]], sample_rate=1024000, block_size=4096, dtype="complex64", backend="cuda")
    carriers = Pipeline([ch, pick, narrow], sample_rate=1024000, block_size=4096, dtype="complex64", backend="cuda")
    assert rel_err(out["power"], power.process(x)) < 1e-5
    assert rel_err(out["carriers"], carriers.process(x)) < 1e-5


def mixed(block: int) -> Graph:
    """Two sources (float32 a, complex64 b: 2 channels each) through select, add, multiply, combine."""
    g = Graph(name="mixed", sample_rate=8000, channels=2, block_size=block)
    g.source(name="a")
    g.source(name="b")
    g.add(stages.Select(name="swap", channels=[1, 0]), "a")
    g.add(stages.Add(name="sum"), "swap", "a")
    g.add(stages.Multiply(name="mixd"), "a", "b")                  # real times complex: complex64
    g.add(stages.Gain(name="lo", db=-3), "mixd")
    g.add(stages.Combine(name="both"), "sum", "lo", "b")           # 6 channels, complex64
    g.add(stages.Multiply(name="sq"), "sum", "sum", "swap")
    for name in ("sum", "both", "sq", "lo"):
        g.sink(NullSink(), name, name=name)
    return g


def _mixed_inputs(n: int) -> dict[str, np.ndarray]:
    return {"a": signal(2, n, False, seed=5), "b": signal(2, n, True, seed=6)}


@pytest.mark.parametrize("block, n", [(37, 37 * 4 + 11), (256, 256 * 3), (1000, 999)])
def test_two_sources_and_the_graph_stages_equal_cpu(block, n):
    g, x = mixed(block), _mixed_inputs(n)
    _close(g.process(x, backend="cuda"), g.process(x, backend="cpu"), 1e-6)


# what mixed()'s sources deliver (_mixed_inputs): b is complex
MIXED_FORMAT = {"a": StreamFormat(8000, 2, "float32"), "b": StreamFormat(8000, 2, "complex64")}


def _engine(g: Graph, fmt=None, **options) -> CudaGraphEngine:
    return CudaGraphEngine(g, g.specs(fmt), BackendChoice("cuda", "test"), **options)


@pytest.mark.parametrize("options", [{}, {"single_stream": True}, {"mapped_io": True},
                                     {"mapped_io": True, "use_graph": True, "single_stream": True}])
def test_counters_one_copy_per_source_and_sink_one_launch_per_block(options):
    g = mixed(64)
    x = _mixed_inputs(64 * 10 + 5)
    eng = _engine(g, MIXED_FORMAT, **options)
    try:
        cpu = open_backend(g, g.specs(MIXED_FORMAT), "cpu")
        for k in range(10):
            blocks = (x["a"][:, 64 * k:64 * (k + 1)], x["b"][:, 64 * k:64 * (k + 1)])
            got, want = eng.process(blocks), cpu.process(blocks)
            for a, b in zip(got, want):
                assert rel_err(a, b) < 1e-6
        c = eng.counters()
        assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["completion_waits"]) == (10, 20, 40, 10)
        assert c["graph_launches"] == 10 and c["eager_blocks"] == 0
        last = eng.process((x["a"][:, 640:], x["b"][:, 640:]), final=True)
        assert all(o.shape[1] == 5 for o in last)
        c = eng.counters()
        assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["graph_launches"], c["eager_blocks"]) == \
            (11, 22, 44, 10, 1)
    finally:
        eng.close()


class _CountingFills:
    """The native engine, counting the source slices it fills natively: fill_bytes() calls, and
    each source of a process_graph() call (a full block's fills, run and outputs in one call)."""

    def __init__(self, engine):
        self._native, self.fills, self.graph_calls = engine, 0, 0

    def fill_bytes(self, *args):
        self.fills += 1
        return self._native.fill_bytes(*args)

    def process_graph(self, slot, ins, outs):
        self.fills += len(ins)
        self.graph_calls += 1
        return self._native.process_graph(slot, ins, outs)

    def __getattr__(self, name):
        return getattr(self._native, name)


@pytest.mark.parametrize("options", [{}, {"mapped_io": True}])
def test_contiguous_full_blocks_fill_their_slices_natively_and_equal_strided_ones(options):
    g = mixed(64)
    x = _mixed_inputs(64 * 6 + 9)
    fast, slow = _engine(g, MIXED_FORMAT, **options), _engine(g, MIXED_FORMAT, **options)
    fast._engine, slow._engine = _CountingFills(fast._engine), _CountingFills(slow._engine)
    cpu = open_backend(g, g.specs(MIXED_FORMAT), "cpu")
    try:
        for k in range(7):
            strided = (x["a"][:, 64 * k:64 * (k + 1)], x["b"][:, 64 * k:64 * (k + 1)])
            contiguous = tuple(np.ascontiguousarray(b) for b in strided)
            assert not strided[0].flags.c_contiguous and contiguous[0].flags.c_contiguous
            final = k == 6  # 9 items: the partial final block goes through the slices' views
            got, ref, want = fast.process(contiguous, final), slow.process(strided, final), cpu.process(strided, final)
            for a, b, c in zip(got, ref, want):
                assert np.array_equal(a, b) and rel_err(a, c) < 1e-6
        assert fast._engine.fills == 2 * 6 and slow._engine.fills == 0
        # each slot's first block makes its views (two slots); the next four go in one call each
        assert fast._engine.graph_calls == 4 and slow._engine.graph_calls == 0
    finally:
        fast.close()
        slow.close()


def test_submit_collect_views_per_sink_and_a_graph_run_accounts_each_sink(tmp_path):
    g = mixed(128)
    x = _mixed_inputs(128 * 2)
    eng = _engine(g, MIXED_FORMAT)
    try:
        s0 = eng.submit((x["a"][:, :128], x["b"][:, :128]))
        s1 = eng.submit((x["a"][:, 128:], x["b"][:, 128:]))
        first = [o.copy() for o in eng.collect(s0)]
        second = [o.copy() for o in eng.collect(s1)]
        names = eng.output_names
    finally:
        eng.close()
    want = g.process(x, backend="cpu")
    assert sorted(names) == sorted(("sum", "both", "sq", "lo"))
    for k, name in enumerate(names):
        assert rel_err(np.concatenate([first[k], second[k]], axis=1), want[name]) < 1e-6


def test_a_chain_keeps_its_counters_and_output():
    p = Pipeline([stages.Gain(db=-3), stages.Power()], sample_rate=48000, channels=3, block_size=100)
    eng = CudaEngine(p, p.specs(), BackendChoice("cuda", "test"))
    try:
        x = signal(3, 100, False, seed=1)
        for _ in range(5):
            y = eng.process(x)
        assert not eng.native.is_graph
        c = eng.counters()
        assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["graph_launches"]) == (5, 5, 5, 5)
        np.testing.assert_array_equal(y, p.process(x, backend="cpu"))
    finally:
        eng.close()


def test_chunked_graph_equals_whole_blocks():
    g = Graph(name="chunked", sample_rate=48000, channels=8, block_size=4096)
    g.source(name="x")
    g.add(stages.Fir(name="lp", taps=np.hanning(31) / 15.5), "x")
    g.add(stages.Gain(name="hi", db=2), "x")
    g.add(stages.Add(name="sum"), "lp", "hi")
    g.add(stages.Power(name="pw"), "sum")
    g.sink(NullSink(), "pw", name="pw")
    g.sink(NullSink(), "lp", name="lp")
    whole, split = _engine(g), _engine(g)
    try:
        units = split.units_per_block
        assert units > 1
        cuts = list(range(1, units, max(1, units // 7)))
        for k in range(3):
            x = signal(8, 4096, False, seed=20 + k)
            for a, b in zip(whole.process(x), split.process_split(x, cuts)):
                np.testing.assert_array_equal(a, b)
        assert split.counters()["chunks"] > 0
    finally:
        whole.close()
        split.close()


@pytest.mark.parametrize("dtype", ["float32", "complex64"])
@pytest.mark.parametrize("block, n", [(33, 33 * 3 + 7), (512, 1000)])
def test_select_on_cuda_equals_cpu(dtype, block, n):
    p = Pipeline([stages.Select(channels=[4, 0, 0, 2])], sample_rate=1000, channels=5, block_size=block,
                 dtype=dtype)
    x = signal(5, n, dtype == "complex64", seed=3)
    np.testing.assert_array_equal(p.process(x, backend="cuda"), p.process(x, backend="cpu"))


@pytest.mark.parametrize("kind", ["add", "multiply", "combine"])
@pytest.mark.parametrize("dtype", ["float32", "complex64"])
@pytest.mark.parametrize("block, n", [(33, 33 * 3 + 7), (512, 1000)])
def test_stage_of_several_inputs_on_cuda_equals_cpu(kind, dtype, block, n):
    cls = {"add": stages.Add, "multiply": stages.Multiply, "combine": stages.Combine}[kind]
    g = Graph(name=kind, sample_rate=1000, channels=3, block_size=block, dtype=dtype)
    names = [g.source(name=f"s{i}") for i in range(3)]
    g.add(cls(name="op"), *names)
    x = {nm: signal(3, n, dtype == "complex64", seed=30 + i) for i, nm in enumerate(names)}
    gpu, cpu = g.process(x, backend="cuda"), g.process(x, backend="cpu")
    assert gpu.shape == cpu.shape and gpu.dtype == cpu.dtype
    assert rel_err(gpu, cpu) < 1e-6
    if kind != "multiply":  # sums and copies round alike; a complex product may be fused on the CPU
        np.testing.assert_array_equal(gpu, cpu)


@pytest.mark.parametrize("qos", [None, {"class": "realtime"}, {"class": "throughput"}])
def test_a_graph_run_on_cuda_writes_and_accounts_each_sink(qos):
    # under the scheduler as one stream: realtime (its block cost measured by admission),
    # throughput (paced in units: chunks of the graph's ops), best effort
    from pygpukit_dsp.io import NumpySink, SynthSource

    results = {}
    for backend in ("cuda", "cpu"):
        g = Graph(name="run", sample_rate=8000, channels=2, block_size=64, backend=backend, qos=qos)
        g.source(SynthSource(signal="noise", duration_s=0.05, seed=4), name="mic")
        g.add(stages.Gain(name="lo", db=-6), "mic")
        g.add(stages.Power(name="pw"), "mic")
        g.add(stages.Add(name="both"), "lo", "pw")
        sinks = {"lo": NumpySink(), "both": NumpySink()}
        for name, sink in sinks.items():
            g.sink(sink, name, name=name)
        summary = g.run()
        assert summary.backend == backend and summary.scheduler.submitted == 7
        assert [(a.name, a.input, a.blocks) for a in summary.sinks] == [("lo", "lo", 7), ("both", "both", 7)]
        assert summary.blocks == 7 and all(a.samples == 400 for a in summary.sinks)  # a short last block
        results[backend] = {name: sink.result() for name, sink in sinks.items()}
    for name in ("lo", "both"):
        assert rel_err(results["cuda"][name], results["cpu"][name]) < 1e-6


@pytest.mark.parametrize("qos", [{"class": "realtime"}, {"class": "throughput"}])
def test_several_sinks_on_a_paths_output_run_on_the_chain_engine_on_cuda(qos):
    """A view beside a file: the path's CudaEngine (no graph engine), its output given to each sink."""
    from pygpukit_dsp.graph_runner import open_runner
    from pygpukit_dsp.io import NumpySink, SynthSource

    results = {}
    for backend in ("cuda", "cpu"):
        g = Graph(name="tee", sample_rate=8000, channels=2, block_size=64, backend=backend, qos=qos)
        g.source(SynthSource(signal="noise", duration_s=0.05, seed=4), name="mic")
        g.add(stages.Fir(name="f", taps=[0.5, 0.3, 0.2]), "mic")
        sinks = {"one": NumpySink(), "two": NumpySink()}
        for name, sink in sinks.items():
            g.sink(sink, "f", name=name)
        r = open_runner(g)
        if backend == "cuda":
            assert type(r.engine) is CudaEngine
        summary = r.run()
        assert [(a.name, a.blocks, a.samples) for a in summary.sinks] == [("one", 7, 400), ("two", 7, 400)]
        results[backend] = {name: sink.result() for name, sink in sinks.items()}
    np.testing.assert_array_equal(results["cuda"]["one"], results["cuda"]["two"])
    assert rel_err(results["cuda"]["one"], results["cpu"]["one"]) < 1e-6
