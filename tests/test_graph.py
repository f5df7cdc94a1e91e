"""Graph, the builder: nodes by name, the one-path case as a Pipeline, process() of several sinks and
sources, and each sink equal to its path run as a chain."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import Graph, Pipeline, stages
from pygpukit_dsp.errors import ConfigError, StreamFault
from pygpukit_dsp.io import NullSink, NumpySink, SynthSource

RNG = np.random.default_rng(7)


def receiver() -> Graph:
    """The issue's example: a channelizer read by a power stage and by a select, two sinks."""
    g = Graph(name="rx", sample_rate=64000, block_size=64, dtype="complex64", backend="cpu")
    x = g.source(name="iq")
    ch = g.add(stages.Channelizer(channels=4, taps_per_channel=4, name="ch"), x)
    pw = g.add(stages.Power(name="pw"), ch)
    sel = g.add(stages.Select(channels=[3, 1], name="sel"), ch)
    lo = g.add(stages.Gain(db=-6, name="lo"), sel)
    g.add(stages.Add(name="mixd"), sel, lo)
    g.sink(NumpySink(), pw, name="power")
    g.sink(NumpySink(), "mixd")
    return g


def iq(n: int, channels: int = 1) -> np.ndarray:
    return (RNG.standard_normal((channels, n)) + 1j * RNG.standard_normal((channels, n))).astype(np.complex64)


def test_the_builder_returns_names_and_keeps_the_wiring():
    g = receiver()
    assert list(g.sources) == ["iq"] and [st.name for st in g.stages] == ["ch", "pw", "sel", "lo", "mixd"]
    assert g.stage_inputs["mixd"] == ("sel", "lo") and g.sink_inputs == {"power": "pw", "mixd": "mixd"}
    assert g.branch()[0] == "ch" and g.as_chain() is None
    assert repr(g) == "Graph(name='rx', sources=['iq'], stages=['ch', 'pw', 'sel', 'lo', 'mixd'], sinks=['power', 'mixd'])"


def test_process_returns_each_sink_and_equals_each_path_run_as_a_chain():
    g = receiver()
    x = iq(1000)
    out = g.process(x)
    assert set(out) == {"power", "mixd"}
    chain = dict(sample_rate=64000, block_size=64, dtype="complex64", backend="cpu")
    ch = stages.Channelizer(channels=4, taps_per_channel=4)
    power = Pipeline([ch, stages.Power()], **chain).process(x)
    sel = Pipeline([ch, stages.Select(channels=[3, 1])], **chain).process(x)
    np.testing.assert_array_equal(out["power"], power)
    np.testing.assert_allclose(out["mixd"], sel + sel * np.float32(10 ** (-6 / 20)), rtol=1e-6)


def test_default_names_get_a_suffix_and_no_inputs_read_the_entry_above():
    g = Graph(sample_rate=100, channels=1, block_size=4, backend="cpu")
    a = g.add(stages.Gain(linear=2.0))               # reads the input process() feeds: 'source'
    b = g.add(stages.Gain(linear=3.0))               # reads the entry above
    c = g.add("gain", a, linear=5.0)                 # a type name with its parameters
    g.add(stages.Add(), b, c)
    assert (a, b, c) == ("gain", "gain_2", "gain_3") and g.stage_inputs["gain"] == ("source",)
    y = g.process(np.ones((1, 10), np.float32))      # no sinks: the last stage's output
    np.testing.assert_allclose(y, np.full((1, 10), 2 * 3 + 2 * 5))


def test_builder_errors():
    g = Graph(sample_rate=100, channels=1, block_size=4)
    fir = g.add(stages.Fir(taps=[1.0], name="lp"))
    with pytest.raises(ConfigError, match="did you mean 'lp'"):
        g.add(stages.Gain(db=1), "lpp")
    with pytest.raises(ConfigError, match="already has a node named 'lp'"):
        g.add(stages.Fir(taps=[1.0], name="lp"), fir)
    with pytest.raises(ConfigError, match=r"takes 2 or more inputs, got 1"):
        g.add(stages.Add(), fir)
    with pytest.raises(ConfigError, match="takes 1 inputs, got 2"):
        g.add(stages.Gain(db=1), fir, "source")
    g.add(stages.Power(), fir)
    g.add(stages.Gain(db=1), fir)
    with pytest.raises(ConfigError, match="stage 'power' \\(power\\): nothing reads its output"):
        g.process(np.ones((1, 8), np.float32))


def test_a_graph_of_one_path_is_its_pipeline():
    g = Graph(name="p", sample_rate=8000, channels=2, block_size=32, backend="cpu")
    src = SynthSource(signal="noise", duration_s=0.05)
    g.source(src, name="mic")
    g.add(stages.Fir(taps=[0.5, 0.5]))
    g.add(stages.Gain(db=-3))
    sink = NumpySink()
    g.sink(sink, name="out")
    chain = g.as_chain()
    assert isinstance(chain, Pipeline) and [s.type for s in chain.stages] == ["fir", "gain"]
    assert chain.source is src and chain.sink is sink and (chain.source_name, chain.sink_name) == ("mic", "out")
    x = RNG.standard_normal((2, 300)).astype(np.float32)
    np.testing.assert_array_equal(g.process(x), chain.process(x))
    summary = g.run()
    assert summary.backend == "cpu" and [a.name for a in summary.sinks] == ["out"]
    assert Graph.from_pipeline(chain).as_chain().to_config() == chain.to_config()


def test_several_sources_in_step_and_the_shortest_ends_the_stream():
    g = Graph(name="mixer", sample_rate=8000, channels=1, block_size=16, backend="cpu")
    g.source(name="rf")
    g.source(name="lo")
    g.add(stages.Multiply(name="mixed"), "rf", "lo")
    rf = RNG.standard_normal((1, 100)).astype(np.float32)
    lo = np.exp(2j * np.pi * 0.1 * np.arange(90)).astype(np.complex64)[None]
    y = g.process({"rf": rf, "lo": lo})
    assert y.dtype == np.complex64 and y.shape == (1, 90)  # rf's last 10 samples: after lo ended
    np.testing.assert_allclose(y, rf[:, :90] * lo, rtol=1e-6)
    with pytest.raises(ConfigError, match="takes a mapping of arrays by source name"):
        g.process(rf)
    with pytest.raises(ConfigError, match="process\\(\\) got arrays for rf "):
        g.process({"rf": rf})


def test_a_source_read_twice_and_combined():
    g = Graph(sample_rate=1000, channels=3, block_size=8, backend="cpu")
    a = g.add(stages.Select(channels=[2]), "source")
    b = g.add(stages.Gain(linear=-1.0), "source")
    g.add(stages.Combine(), a, b)
    x = RNG.standard_normal((3, 50)).astype(np.float32)
    np.testing.assert_array_equal(g.process(x), np.concatenate([x[[2]], -x]))


def test_nonfinite_input_names_its_source():
    g = Graph(sample_rate=1000, channels=1, block_size=8, backend="cpu")
    g.source(name="a")
    g.source(name="b")
    g.add(stages.Add(), "a", "b")
    b = np.ones((1, 20), np.float32)
    b[0, 11] = np.nan
    with pytest.raises(StreamFault) as info:
        g.process({"a": np.ones((1, 20), np.float32), "b": b})
    assert "source 'b'" in str(info.value) and info.value.block == 1
    y = g.process({"a": np.ones((1, 20), np.float32), "b": b}, nonfinite="zero")
    assert y[0, 11] == 1.0


def test_a_spec_mismatch_names_both_inputs():
    g = Graph(name="m", sample_rate=1000, channels=2, block_size=8)
    up = g.add(stages.Resample(up=2, down=1), "source")
    g.add(stages.Add(name="both"), "source", up)
    with pytest.raises(ConfigError) as info:
        g.specs()
    assert info.value.message.startswith("stage 'both' (add) cannot take its inputs together: source 'source' gives")
    assert "stage 'resample' (resample) gives" in info.value.message and "sample rate (1000 and 2000)" in info.value.message


def test_with_io_and_start_iterate_over_dicts_of_blocks():
    g = Graph(name="two", sample_rate=8000, channels=1, block_size=100, backend="cpu")
    g.source(SynthSource(signal="sine", freq_hz=100, duration_s=0.05))
    g.sink(NullSink(), g.add(stages.Gain(linear=2.0)), name="a")
    g.sink(NullSink(), g.add(stages.Gain(linear=3.0), "source"), name="b")
    with g.start() as run:  # every sink a null one: the blocks come to the loop
        blocks = list(run)
    assert len(blocks) == 4 and set(blocks[0]) == {"a", "b"}
    np.testing.assert_allclose(blocks[0]["b"], 1.5 * blocks[0]["a"], rtol=1e-6)
    with pytest.raises(ConfigError, match="has 2 sinks"):
        g.with_io(sink=NullSink())
    assert g.with_io(source=SynthSource(duration_s=0.02)).sources["source"].params.duration_s == 0.02


def test_memory_is_checked_over_every_edge():
    g = Graph(name="big", sample_rate=1000, channels=4096, block_size=1 << 24, backend="cpu")
    g.add(stages.Gain(db=1), "source")
    g.add(stages.Gain(db=2), "source")
    g.add(stages.Combine(), "gain", "gain_2")
    with pytest.raises(ConfigError, match="per block"):
        g.process(np.zeros((4096, 1), np.float32))
