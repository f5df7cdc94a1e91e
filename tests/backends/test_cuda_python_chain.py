"""How a chain with python stages is cut for the cuda backend (backends/cuda_python_chain.py): its
native segments and python stages in order, an identity segment first when a python stage leads
(NaN/Inf are found on the GPU where the input arrives), each native segment lowered before the
first block. No GPU needed: nothing here opens an engine."""

from __future__ import annotations

import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends.cuda_python_chain import _segments, check_python_chain, has_python_stage, split_chain
from pygpukit_dsp.errors import UnsupportedError


def twice(x):
    return x * 2


def _py(name="py", **kw):
    return stages.Python(twice, name=name, **kw)


def test_split_chain_gives_the_native_runs_and_each_python_stage_in_order():
    body = [stages.Gain(db=1), stages.Fir(taps=[0.5, 0.5]), _py("a"), _py("b"), stages.Power()]
    assert split_chain(body) == [("native", 0, 2), ("python", 2, 3), ("python", 3, 4), ("native", 4, 5)]
    assert split_chain([_py()]) == [("python", 0, 1)]
    assert split_chain([stages.Gain(db=1)]) == [("native", 0, 1)]
    assert has_python_stage(body) and not has_python_stage([stages.Gain(db=1)])


def test_a_leading_python_stage_gets_an_identity_segment_that_reads_the_input():
    p = Pipeline([_py("lead"), stages.Gain(db=-6)], sample_rate=8000, channels=2, block_size=64)
    parts = _segments(p, p.specs())
    assert [k for k, _, _ in parts] == ["native", "python", "native"]
    kind, seg, sub = parts[0]
    assert [st.type for st in seg.stages] == ["gain"] and seg.stages[0].params.linear == 1.0
    assert seg.stages[0].name == "lead.input" and sub.input == sub.output == p.specs().input
    assert parts[1][1].name == "lead" and parts[2][2].input == p.specs().specs[1]


def test_a_python_stage_whose_frames_output_goes_on_is_refused_naming_it():
    def framer(x):
        return x.reshape(x.shape[0], 4, 16)

    p = Pipeline([stages.Python(framer, name="framer", output={"domain": "frames", "bins": 16, "block_size": 4}),
                  stages.Power()], sample_rate=8000, channels=1, block_size=64)
    with pytest.raises(UnsupportedError) as info:
        check_python_chain(p, p.specs())
    assert info.value.stage == "framer" and info.value.backend == "cuda"


def test_a_missing_framework_is_refused_naming_the_stage(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    p = Pipeline([stages.Gain(db=1), _py("t", framework="torch")], sample_rate=8000, channels=1, block_size=64)
    with pytest.raises(UnsupportedError) as info:
        check_python_chain(p, p.specs())
    assert info.value.stage == "t" and "torch is not installed" in info.value.reason
