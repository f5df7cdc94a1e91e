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


def _receiver():
    from pygpukit_dsp import Graph

    g = Graph.from_yaml("pipelines/sdr_receiver.yaml")
    return g, g.specs()


@pytest.fixture
def cuda_usable(monkeypatch):
    """CUDA usable (whatever this machine has) and every op kind in the native build."""
    import pygpukit_dsp.capabilities as caps
    from pygpukit_dsp.backends import cuda_graph_plan
    from pygpukit_dsp.backends.cuda_lowering import LOWERINGS, _load_families

    _load_families()
    monkeypatch.setattr(caps, "usable_from", lambda c, device=0: (True, "GPU 0 (test)"))
    monkeypatch.setattr(cuda_graph_plan, "native_op_kinds", lambda: set(LOWERINGS))


def test_auto_chooses_cuda_for_a_graph_whose_stages_all_lower(cuda_usable):
    g, specs = _receiver()
    choice = choose_backend(g, specs, "auto")
    assert (choice.name, choice.reason, choice.device) == ("cuda", "auto: GPU 0 (test)", 0)
    assert choose_backend(g, specs, "cuda") == type(choice)("cuda", "requested", 0)


def test_a_graph_stage_without_a_lowering_sends_auto_to_cpu_and_cuda_refuses_it(cuda_usable, monkeypatch):
    from pygpukit_dsp.backends.cuda_lowering import LOWERINGS
    from pygpukit_dsp.errors import UnsupportedError

    monkeypatch.delitem(LOWERINGS, "select")
    g, specs = _receiver()
    choice = choose_backend(g, specs, "auto")
    assert choice.name == "cpu" and choice.reason.startswith("auto: stage 'pick' cannot run on CUDA")
    with pytest.raises(UnsupportedError) as info:
        choose_backend(g, specs, "cuda")
    assert (info.value.stage, info.value.backend, info.value.exit_code) == ("pick", "cuda", 2)
