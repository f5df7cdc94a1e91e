"""The cpu backend of a graph: choose_backend's decision for a graph without CUDA, and
CpuGraphEngine's blocks (one per source in, one per output out)."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import Graph, stages
from pygpukit_dsp.backends import choose_backend, open_backend
from pygpukit_dsp.backends.cpu import CpuGraphEngine
from pygpukit_dsp.errors import DeviceError, StreamFault
from pygpukit_dsp.io import NullSink
from pygpukit_dsp.io.base import StreamFormat


def mixer() -> Graph:
    g = Graph(name="mix", sample_rate=1000, channels=1, block_size=4)
    g.source(name="a")
    g.source(name="b")
    g.add(stages.Multiply(name="p"), "a", "b")
    g.add(stages.Add(name="s"), "a", "b")
    g.sink(NullSink(), "p")
    g.sink(NullSink(), "s")
    return g


def test_choose_backend_for_a_graph_without_cuda(monkeypatch):
    # CUDA unusable (whatever this machine has): auto chooses cpu and gives the reason; cuda
    # requested is a DeviceError before the first block
    import pygpukit_dsp.capabilities as caps

    monkeypatch.setattr(caps, "usable_from", lambda c, device=0: (False, "CUDA driver not detected (test)"))
    g = mixer()
    specs = g.specs({"a": StreamFormat(), "b": StreamFormat()})
    assert choose_backend(g, specs, "cpu").reason == "requested"
    auto = choose_backend(g, specs, "auto")
    assert (auto.name, auto.reason, auto.device) == ("cpu", "auto: CUDA driver not detected (test)", None)
    with pytest.raises(DeviceError, match="driver not detected"):
        choose_backend(g, specs, "cuda")


def test_the_engine_takes_a_block_per_source_and_gives_one_per_output():
    g = mixer()
    engine = open_backend(g, g.specs(), "cpu")
    assert isinstance(engine, CpuGraphEngine) and engine.choice.name == "cpu"
    a, b = np.arange(4, dtype=np.float32)[None], np.full((1, 4), 2.0, np.float32)
    p, s = engine.process((a, b))
    np.testing.assert_array_equal(p, 2 * a)
    np.testing.assert_array_equal(s, a + 2)
    zeros = engine.zero_block()
    assert len(zeros) == 2 and zeros[0].shape == (1, 4)
    with pytest.raises(ValueError, match="reads 2 sources"):
        engine.process((a,))
    with pytest.raises(ValueError, match="process\\(out=...\\) is for a chain"):
        engine.process((a, b), out=np.zeros((1, 4), np.float32))
    assert engine.counters() == {"blocks": 1}
    engine.close()
    with pytest.raises(StreamFault):
        engine.process((a, b))


def test_a_complex_block_into_a_real_source_is_refused_not_cast():
    g = Graph(name="two", sample_rate=8000, channels=1, block_size=16)
    g.source(name="a")
    g.add(stages.Gain(name="g", db=0), "a")
    g.sink(NullSink(), "g", name="out")
    eng = open_backend(g, g.specs(), "cpu")  # the source's format: float32
    with pytest.raises(ValueError, match="imaginary"):
        eng.process(np.ones((1, 16), np.complex64))
