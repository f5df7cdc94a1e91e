"""Running a graph: every source read in step, every sink written and accounted in the summary."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pygpukit_dsp import Graph, Session, stages
from pygpukit_dsp.errors import ConfigError, StreamFault
from pygpukit_dsp.graph_runner import GraphRunner, open_runner
from pygpukit_dsp.io import NumpySink, NumpySource, SynthSource
from pygpukit_dsp.runner import StreamRunner
from pygpukit_dsp.summary import RunSummary, SinkAccount

RNG = np.random.default_rng(11)


def two_sources(a: np.ndarray, b: np.ndarray, *, qos=None) -> tuple[Graph, NumpySink, NumpySink]:
    g = Graph(name="pair", sample_rate=1000, block_size=16, backend="cpu", qos=qos)
    g.source(NumpySource(array=a), name="a")
    g.source(NumpySource(array=b), name="b")
    g.add(stages.Add(name="sum"), "a", "b")
    g.add(stages.Combine(name="both"), "a", "b")
    s1, s2 = NumpySink(), NumpySink()
    g.sink(s1, "sum")
    g.sink(s2, "both", name="stacked")
    return g, s1, s2


def test_several_sources_in_step_several_sinks_each_accounted():
    a, b = RNG.standard_normal((2, 100)).astype(np.float32), RNG.standard_normal((2, 70)).astype(np.float32)
    g, s1, s2 = two_sources(a, b)
    summary = g.run()
    # b ends after 70 samples: the stream ends there; its short last block (6 samples) cuts a's to 6
    np.testing.assert_allclose(s1.result(), a[:, :70] + b, rtol=1e-6)
    np.testing.assert_array_equal(s2.result(), np.concatenate([a[:, :70], b]))
    assert (summary.blocks, summary.samples_in, summary.samples_out, summary.ended_by) == (5, 70, 70, "source end")
    assert [(x.name, x.type, x.input, x.blocks, x.samples) for x in summary.sinks] == [
        ("sum", "numpy", "sum", 5, 70), ("stacked", "numpy", "both", 5, 70)]
    assert summary.sink("stacked").spec == "4 ch x 16 float32 samples @ 1000 Hz"
    assert [(x.name, x.samples) for x in summary.sources] == [("a", 70), ("b", 70)]
    assert summary.backend == "cpu" and summary.scheduler.submitted == 5
    d = json.loads(json.dumps(summary.to_dict()))
    assert d["sinks"][1] == {"name": "stacked", "type": "numpy", "input": "both", "spec": summary.sinks[1].spec,
                             "unit": "samples", "blocks": 5, "samples": 70, "stats": summary.sinks[1].stats}
    back = RunSummary(**{k: v for k, v in d.items() if k in RunSummary.__dataclass_fields__})
    assert isinstance(back.sinks[0], SinkAccount) and back.sinks == summary.sinks
    text = summary.format()
    assert "sink stacked (numpy) <- both: 4 ch x 16 float32 samples @ 1000 Hz, 5 blocks, 70 written" in text


def test_the_runner_of_a_graph_and_of_one_path():
    a = RNG.standard_normal((1, 40)).astype(np.float32)
    g, _, _ = two_sources(a, a)
    r = open_runner(g)
    try:
        assert isinstance(r, GraphRunner) and r.source is g.sources["a"] and list(r.sinks) == ["sum", "stacked"]
        assert r.chain.input.channels == 1 and r.engine.choice.name == "cpu"
    finally:
        r._close()
    one = Graph(name="one", sample_rate=1000, channels=1, block_size=8, backend="cpu")
    one.source(NumpySource(array=a))
    one.sink(NumpySink(), one.add(stages.Gain(db=1)))
    r = open_runner(one)
    try:
        assert type(r) is StreamRunner and r.pipeline.name == "one"  # one path: as every Pipeline runs
    finally:
        r._close()


def test_a_realtime_graph_is_admitted_with_its_measured_cost():
    a = RNG.standard_normal((1, 64)).astype(np.float32)
    g, s1, _ = two_sources(a, a, qos={"class": "realtime", "deadline_ms": 500})
    [summary] = Session([g]).run()
    assert summary.qos_class == "realtime" and summary.admission and s1.result().shape == (1, 64)


def test_a_sink_that_fails_is_named_and_the_others_are_finalised(tmp_path):
    class Broken(NumpySink):
        def write(self, block):
            raise OSError("disk on fire")

    g = Graph(name="f", sample_rate=1000, channels=1, block_size=8, backend="cpu")
    g.source(SynthSource(signal="noise", duration_s=0.1))
    g.sink(NumpySink(path=str(tmp_path / "ok.npy")), g.add(stages.Gain(db=1)), name="ok")
    g.sink(Broken(), g.add(stages.Power(), "source"), name="bad")
    with pytest.raises(StreamFault) as info:
        g.run()
    assert info.value.part == "sink 'bad' (sink 'numpy')" and info.value.block == 0
    assert info.value.summary.ended_by == "fault"
    assert np.load(tmp_path / "ok.npy").shape == (1, 8)  # the block it took, written at close


def test_two_sinks_may_not_write_one_file(tmp_path):
    g = Graph(name="f", sample_rate=1000, channels=1, block_size=8, backend="cpu")
    g.source(SynthSource(signal="noise", duration_s=0.1))
    path = str(tmp_path / "x.npy")
    g.sink(NumpySink(path=path), g.add(stages.Gain(db=1)), name="one")
    g.sink(NumpySink(path=path), g.add(stages.Power(), "source"), name="two")
    with pytest.raises(ConfigError, match="sinks 'one' and 'two' both write"):
        g.run()


def test_a_graph_without_a_source_component_is_refused_before_running():
    g = Graph(name="bare", sample_rate=1000, channels=1, block_size=8, backend="cpu")
    g.source(name="x")
    g.source(SynthSource(), name="y")
    g.add(stages.Add(), "x", "y")
    with pytest.raises(ConfigError, match="has no source for 'x'"):
        g.run()


def test_a_chain_accounts_its_one_source_and_sink_by_graph_names():
    from pygpukit_dsp import Pipeline

    p = Pipeline([stages.Gain(db=1), stages.Power(name="pw")], name="c", sample_rate=1000, channels=1, block_size=8,
                 backend="cpu", source=SynthSource(signal="noise", duration_s=0.02), sink=NumpySink())
    summary = p.run()
    assert [(a.name, a.input, a.blocks, a.samples) for a in summary.sinks] == [("pw", "pw", 3, 20)]
    assert [(a.name, a.type, a.samples) for a in summary.sources] == [("source", "synth", 20)]
    assert "sink pw" not in summary.format()  # one sink: the summary's lines as they always were


def test_a_path_with_several_sinks_on_its_output_runs_on_the_chain_engine():
    """A second sink beside the first (a view beside a file) costs no graph engine: the path's chain
    engine runs and its output goes to each sink, each accounted."""
    from pygpukit_dsp.backends.cpu import CpuEngine, CpuGraphEngine

    x = RNG.standard_normal((2, 100)).astype(np.float32)
    g = Graph(name="tee", sample_rate=1000, block_size=16, backend="cpu")
    g.source(NumpySource(array=x), name="x")
    y = g.add(stages.Gain(db=6, name="g"), "x")
    g.add(stages.Fir(taps=[0.5, 0.25], name="f"), y)
    first, second = NumpySink(), NumpySink()
    g.sink(first, "f", name="one")
    g.sink(second, "f", name="two")
    assert g.as_chain() is None and [st.name for st in g.fanned_chain().stages] == ["g", "f"]
    r = open_runner(g)
    assert isinstance(r, GraphRunner) and isinstance(r.engine, CpuEngine)
    summary = r.run()  # closes what it opened
    np.testing.assert_array_equal(first.result(), second.result())
    ref = g.process(x)  # the graph engine (process() of a graph): the same values
    np.testing.assert_allclose(first.result(), ref["one"], rtol=1e-6)
    assert [(s.name, s.blocks, s.samples) for s in summary.sinks] == [("one", 7, 100), ("two", 7, 100)]
    branched = Graph(name="split", sample_rate=1000, block_size=16, backend="cpu")  # a sink on a middle stage
    branched.source(NumpySource(array=x), name="x")
    branched.add(stages.Gain(db=6, name="g"), "x")
    branched.add(stages.Fir(taps=[0.5, 0.25], name="f"), "g")
    branched.sink(NumpySink(), "g", name="mid")
    branched.sink(NumpySink(), "f", name="end")
    assert branched.fanned_chain() is None
    r = open_runner(branched)
    try:
        assert isinstance(r.engine, CpuGraphEngine)
    finally:
        r._close()
