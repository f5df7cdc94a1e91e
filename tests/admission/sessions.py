"""Shared by the admission tests: the reference calibration for fake GPUs, and the pipelines and
fake runners they admit."""

from dataclasses import replace

import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.admission import DEFAULT_POLICY, REFERENCE_CALIBRATION
from pygpukit_dsp.io import NullSink, NullSource


@pytest.fixture(autouse=True)
def reference_calibration(request, monkeypatch):
    """Fake GPUs have no calibration of their own: admission reads the reference figures (real
    GPUs, in the tests marked gpu, their own)."""
    if request.node.get_closest_marker("gpu") is None:
        from pygpukit_dsp.admission import admitting

        monkeypatch.setattr(admitting, "calibration_for", lambda gpu, **kw: REFERENCE_CALIBRATION)


def crowding(share=1e-9):
    """A policy that rehearses a GPU's realtime streams whatever share of a bound they fill."""
    return replace(DEFAULT_POLICY, rehearsal_share=share)


def realtime_pipeline(name, cost_us=None, block=480, **qos):
    return Pipeline([stages.Gain(db=0)], name=name, sample_rate=48000, channels=1, block_size=block,
                    backend="cpu", qos={"class": "realtime", **({"cost_us": cost_us} if cost_us else {}), **qos},
                    source=NullSource(duration_s=0.05), sink=NullSink())


def fake_runner(name, device, qos, units=None, block=480):
    from types import SimpleNamespace

    from pygpukit_dsp.backends import BackendChoice
    from pygpukit_dsp.qos import QoS
    from pygpukit_dsp.signal import SignalSpec

    engine = SimpleNamespace(choice=BackendChoice(device, "test"))
    if units is not None:
        engine.units_per_block = units
    return SimpleNamespace(pipeline=SimpleNamespace(name=name, qos=QoS(**qos), where=None),
                           chain=SimpleNamespace(input=SignalSpec(48000.0, 1, block)), engine=engine)


def w1_realtime(name):
    import numpy as np

    rng = np.random.default_rng(1)
    return Pipeline([stages.Fir(taps=rng.standard_normal(256) / 16), stages.Mix(matrix=rng.standard_normal((16, 64)))],
                    name=name, sample_rate=48_000, channels=64, block_size=256, backend="cuda",
                    qos={"class": "realtime"}, source=NullSource(duration_s=0.1), sink=NullSink())
