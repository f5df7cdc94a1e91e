"""Every stage's parameters, fuzzed ("Bad input, fuzzed").

For every registered stage type (new ones are covered automatically) hypothesis draws a parameter
mapping from the stage's pydantic ``Params`` (plausible and adversarial values: NaN, inf, negative,
huge, wrong types, unknown keys) and an input format, builds the stage, propagates the specs and
streams a small random signal through it on the CPU. The only allowed outcomes are a ConfigError
or UnsupportedError (raised before the first block) or output that matches the propagated spec.
Runs GK_FUZZ_EXAMPLES examples per stage type (default below).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from pygpukit_dsp.errors import ConfigError, StreamFault, UnsupportedError
from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.stages import STAGES, make_stage

from .fuzz_values import SEEDS, fuzz_settings, stage_params

EXAMPLES_PER_STAGE = 100
STAGE_TYPES = sorted(STAGES)
RAN: Counter = Counter()  # (stage type, outcome) -> examples, reported at the end of the module


@st.composite
def stream_format(draw):
    """Pipeline fields and an optional front stage that turns samples into frames."""
    front = draw(st.sampled_from([None, None, None, "fft", "rfft", "stft"]))
    n = draw(st.sampled_from([1, 2, 4, 8, 16]))
    hop = draw(st.sampled_from([1, 2, 4, n])) if front == "stft" else n
    block_size = hop * draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]))
    if draw(st.integers(0, 12)) == 0:  # far more than any machine holds, or plain wrong
        block_size = draw(st.sampled_from([2**40, 10**12, 2**62, 0, -4]))
    channels = draw(st.sampled_from([1, 2, 3, 4, 8]))
    if draw(st.integers(0, 12)) == 0:
        channels = draw(st.sampled_from([0, -1, 2**31, 10**9, 10**12]))
    sample_rate = draw(st.sampled_from([48000.0, 44100.0, 8000.0, 1.0, 0.001, 1e9, 1e300, 2.5e6]))
    dtype = draw(st.sampled_from(["float32", "complex64"]))
    return front, n, hop, block_size, channels, sample_rate, dtype


def _front_stage(front: str | None, n: int, hop: int):
    if front is None:
        return []
    if front == "stft":
        return [make_stage("stft", name="front", nfft=n, hop=hop)]
    return [make_stage(front, name="front", n=n)]


@pytest.mark.parametrize("stage_type", STAGE_TYPES)
@fuzz_settings(EXAMPLES_PER_STAGE)
@given(data=st.data())
def test_stage_parameters_fuzzed(stage_type, data):
    params = data.draw(stage_params(stage_type), label="params")
    front, n, hop, block_size, channels, sample_rate, dtype = data.draw(stream_format(), label="format")
    try:
        stages = _front_stage(front, n, hop) + [make_stage(stage_type, **params)]
        pipe = Pipeline(stages, sample_rate=sample_rate, channels=channels, block_size=block_size,
                        dtype=dtype, backend="cpu")
        chain = pipe.specs()
        length = data.draw(st.integers(0, min(3 * block_size, 2048)), label="samples")
        if channels > 64:
            length = 0  # the test's own input stays small; the pipeline still sees every channel
        rng = np.random.default_rng(length)
        x = rng.standard_normal((channels, length)).astype(np.float32)
        if dtype == "complex64":
            x = (x + 1j * rng.standard_normal(x.shape)).astype(np.complex64)
        y = pipe.process(x, backend="cpu")
    except (ConfigError, UnsupportedError) as exc:
        note(f"rejected: {exc}")
        RAN[stage_type, "ConfigError" if isinstance(exc, ConfigError) else "UnsupportedError"] += 1
        assert str(exc).strip()
        return
    except StreamFault as exc:  # a python stage's function failing on a block (its documented outcome)
        if stage_type != "python":
            raise
        note(f"faulted: {exc}")
        assert exc.part and exc.part.startswith("stage ")
        RAN[stage_type, "StreamFault"] += 1
        return
    RAN[stage_type, "ran"] += 1
    out = chain.output
    assert y.dtype == out.np_dtype
    assert y.shape[0] == out.channels
    assert y.ndim == len(out.block_shape)
    if out.domain == "frames":
        assert y.shape[2] == out.bins


@pytest.mark.parametrize("stage_type", STAGE_TYPES)
def test_every_stage_type_has_seeds_that_stream(stage_type):
    """The fuzz mutates SEEDS: each must stream (on time-domain input, or after an fft), so that
    mutations start from a working stage. A new stage type needs an entry in fuzz_values.SEEDS."""
    assert stage_type in SEEDS, f"add valid parameter sets of '{stage_type}' to SEEDS in fuzz_values.py"
    x = np.random.default_rng(0).standard_normal((2, 40)).astype(np.float32)
    for params in SEEDS[stage_type]:
        outcomes = []
        for front in ([], [make_stage("fft", name="front", n=4)]):
            pipe = Pipeline(front + [make_stage(stage_type, **params)], sample_rate=48000, channels=2,
                            block_size=8, backend="cpu")
            try:
                outcomes.append(pipe.process(x, backend="cpu").shape[0])
            except UnsupportedError:
                outcomes.append("unsupported")
            except ConfigError as exc:
                outcomes.append(str(exc))
        if stage_type == "kernel":
            assert outcomes == ["unsupported"] * 2  # cuda only: refused on the cpu before any block
        elif STAGES[stage_type].takes_several():  # reads several inputs: refused in a chain (a graph's stage:
            assert all(isinstance(o, str) for o in outcomes)  # tests/stages/test_routing.py, test_arith.py)
        else:
            assert any(isinstance(o, int) for o in outcomes), (params, outcomes)


def test_fuzz_counts():
    """The module's count, for the record (pytest -s shows it); every stage type was fuzzed."""
    if not RAN:
        pytest.skip("run together with test_stage_parameters_fuzzed")
    print(f"\nstage parameter fuzz: {sum(RAN.values())} examples over {len(STAGE_TYPES)} stage types")
    for t in STAGE_TYPES:
        print(f"  {t:<12} " + ", ".join(f"{k} {RAN[t, k]}" for k in ("ran", "ConfigError", "UnsupportedError")))
    assert {t for t, _ in RAN} == set(STAGE_TYPES)
    assert sum(RAN[t, "ran"] for t in STAGE_TYPES) > len(STAGE_TYPES)
