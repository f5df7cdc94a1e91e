"""The public objects of pygpukit_dsp have reprs that say what they are (not <... object at 0x...>)."""

from __future__ import annotations

import re

import pygpukit_dsp
from pygpukit_dsp import Pipeline, QoS, Session, stages
from pygpukit_dsp.io import NullSource, NumpySink


def test_session_repr():
    s = Session([Pipeline(name="a"), Pipeline(name="b")])
    assert repr(s) == "Session(pipelines=['a', 'b'], backend=None, device=None)"
    s = Session([Pipeline(name="a")], backend="cpu", device="auto", u_max=0.5)
    assert repr(s) == "Session(pipelines=['a'], backend='cpu', device='auto', u_max=0.5)"


def test_run_handle_repr_says_its_pipelines_and_state():
    p = Pipeline([stages.Gain(db=-6)], name="quiet", sample_rate=1000, channels=1, block_size=100, backend="cpu",
                 source=NullSource(duration_s=0.5), sink=NumpySink())
    with p.start() as run:
        assert re.fullmatch(r"RunHandle\(pipelines=\['quiet'\], state='(running|ended)'\)", repr(run))
        run.wait()
    assert repr(run) == "RunHandle(pipelines=['quiet'], state='ended')"


def test_no_public_class_has_the_default_repr():
    objects = [Pipeline(name="x"), QoS(cls="realtime"), Session([Pipeline(name="x")]), stages.Fir(taps=[1.0]),
               NullSource(), NumpySink(), pygpukit_dsp.SignalSpec(48000.0, 1, 256)]
    for obj in objects:
        assert " object at 0x" not in repr(obj), type(obj)
    public = {getattr(pygpukit_dsp, n) for n in pygpukit_dsp.__all__ if isinstance(getattr(pygpukit_dsp, n), type)}
    assert {type(o) for o in objects} >= {Pipeline, QoS, Session}
    assert all(cls.__repr__ is not object.__repr__ for cls in public)
