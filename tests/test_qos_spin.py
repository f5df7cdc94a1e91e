"""qos.spin_us: a clock-paced source spins the last spin_us before each block instead
of sleeping to it; the default is 200 us for realtime streams and 0 (a plain sleep) otherwise."""
from __future__ import annotations

import time

import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.io._common import Pacer, set_pacer_spin
from pygpukit_dsp.qos import DEFAULT_REALTIME_SPIN_US, QoS


def test_spin_window_defaults_by_class():
    assert QoS.model_validate({"class": "realtime"}).spin_window_us() == DEFAULT_REALTIME_SPIN_US == 200
    assert QoS.model_validate({"class": "throughput"}).spin_window_us() == 0
    assert QoS.model_validate({"class": "best_effort", "spin_us": 50}).spin_window_us() == 50
    assert QoS.model_validate({"class": "realtime", "spin_us": 0}).spin_window_us() == 0
    assert QoS.model_validate({"class": "realtime", "spin_us": 100}).to_config() == {"class": "realtime",
                                                                                     "spin_us": 100}


def test_spin_us_is_validated_in_yaml(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("version: 1\nname: p\nsample_rate: 1000\nblock_size: 10\nchannels: 1\n"
                 "qos: {class: realtime, spin_us: -5}\nstages: [{type: gain, db: 0}]\n")
    with pytest.raises(ConfigError) as info:
        Pipeline.from_yaml(str(f))
    assert "spin_us" in str(info.value) and "p.yaml:6" in str(info.value)


@pytest.mark.parametrize("spin", [0, 300])
def test_pacer_is_never_early_with_or_without_a_spin(spin):
    p = Pacer(2000.0, spin_us=spin)
    p.wait_until(0)  # the clock starts
    t0 = p._t0
    for n in (4, 8, 12):  # 2, 4, 6 ms
        p.wait_until(n)
        assert time.perf_counter() >= t0 + n / 2000.0


def test_set_pacer_spin_reaches_wrapped_sources():
    class Inner:
        _pacer = Pacer(1000.0)

    class Outer:
        _pacer = Pacer(1000.0)
        inner = Inner()

    assert set_pacer_spin(Outer(), 120) == 2 and Outer._pacer.spin_us == Inner._pacer.spin_us == 120
    assert set_pacer_spin(object(), 120) == 0


@pytest.mark.parametrize("qos,expect", [({"class": "realtime"}, 200), ({"class": "best_effort"}, 0),
                                        ({"class": "realtime", "spin_us": 75}, 75)])
def test_the_runner_gives_the_source_its_streams_spin_window(qos, expect):
    from pygpukit_dsp.io import SynthSource
    from pygpukit_dsp.runner import StreamRunner

    src = SynthSource(signal="noise", seed=1, rate="realtime")
    p = Pipeline([stages.Gain(db=0)], sample_rate=48000, channels=2, block_size=256, qos=qos, source=src)
    r = StreamRunner(p, backend="cpu")
    try:
        assert src._pacer is not None and src._pacer.spin_us == expect
        summary = r.run(blocks=3)
        assert summary.blocks == 3
    finally:
        r._close(quiet=True)
