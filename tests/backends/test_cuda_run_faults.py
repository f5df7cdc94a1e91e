"""A run on the CUDA backend that faults releases the engine's device memory (GPU machine)."""

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, StreamFault, stages
from pygpukit_dsp.io import CallbackSink, SynthSource

pytestmark = pytest.mark.gpu


def _w1_like(sink):
    mix = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
    return Pipeline([stages.Fir(design={"numtaps": 256, "cutoff_hz": 8000}), stages.Mix(matrix=mix)],
                    name="w1f", sample_rate=48000, channels=64, block_size=256, backend="cuda",
                    qos={"class": "realtime"}, source=SynthSource(signal="noise", seed=1), sink=sink)


def test_a_sink_fault_on_cuda_names_the_block_and_releases_device_memory():
    from pygpukit_dsp import _native

    dev = _native.Device(0)
    ok = _w1_like(CallbackSink(fn=lambda block: None)).run(blocks=20)  # module, plans and handles made
    assert ok.backend == "cuda" and ok.blocks == 20
    dev.trim_memory_cache(0)
    in_use0, free0 = dev.memory_stats()["in_use_bytes"], dev.memory_info()[0]

    calls = [0]

    def failing(block):
        calls[0] += 1
        if calls[0] > 30:
            raise OSError("disk gone")

    with pytest.raises(StreamFault, match=r"sink 'callback' failed at block 30: .*disk gone") as e:
        _w1_like(CallbackSink(fn=failing)).run(blocks=100)
    assert e.value.summary.backend == "cuda" and e.value.summary.blocks == 30
    assert dev.memory_stats()["in_use_bytes"] == in_use0  # every engine buffer went back to the pool
    dev.trim_memory_cache(0)
    assert dev.memory_info()[0] >= free0 - (8 << 20)  # and from the pool to the driver
