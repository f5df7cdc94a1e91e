"""choose_backend: the backend is decided once, before the first block, and says why."""

import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends import choose_backend
from pygpukit_dsp.errors import ConfigError


def _choice(p: Pipeline, requested: str):
    return choose_backend(p, p.propagate(p.input_spec()), requested)


@pytest.mark.parametrize("requested", ["auto", "cuda"])
def test_a_pipeline_without_stages_runs_on_the_host_and_says_so(requested: str):
    # a reader that only passes its source on (pipelines/cluster.yaml): no GPU engine, with or
    # without a GPU, and the reason names the request and why
    p = Pipeline([], name="reader", sample_rate=48000, channels=1, block_size=4096)
    choice = _choice(p, requested)
    assert choice.name == "cpu" and choice.device is None
    assert "no stages" in choice.reason and choice.reason.startswith("auto" if requested == "auto" else "cuda requested")


def test_cpu_requested_is_cpu_and_an_unknown_backend_is_refused():
    p = Pipeline([stages.Gain(linear=2.0)], sample_rate=48000, channels=1, block_size=256)
    assert _choice(p, "cpu").reason == "requested"
    with pytest.raises(ConfigError, match="unknown backend 'gpu'"):
        _choice(p, "gpu")
