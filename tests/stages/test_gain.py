from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.gain import Gain

from .conftest import assert_documented, config_error, run_stage, signal


def test_documented():
    assert_documented(Gain)


@pytest.mark.parametrize("complex_", [False, True])
def test_db_and_linear(rng, complex_):
    x = signal(rng, (2, 300), complex_)
    spec = SignalSpec(48000, 2, 128, dtype="complex64" if complex_ else "float32")
    out = run_stage(Gain(db=-6.0), spec, x)
    np.testing.assert_allclose(out, x * 10 ** (-6 / 20), rtol=1e-6)
    np.testing.assert_allclose(run_stage(Gain(linear=-2.5), spec, x), x * -2.5, rtol=1e-6)


def test_frames_domain(rng):
    x = signal(rng, (1, 10, 5), complex_=True)
    spec = SignalSpec(100, 1, 4, dtype="complex64", domain="frames", bins=5)
    assert Gain(linear=2).output_spec(spec) == spec
    np.testing.assert_allclose(run_stage(Gain(linear=2), spec, x), 2 * x)


def test_exactly_one():
    assert "none was given" in str(config_error(Gain))
    assert "'db' and 'linear'" in str(config_error(Gain, db=1, linear=2))


def test_unknown_parameter_did_you_mean():
    assert "did you mean 'linear'" in str(config_error(Gain, lineer=2))


def test_reset_is_harmless(rng):
    proc = Gain(linear=3).cpu(SignalSpec(1, 1, 4))
    x = signal(rng, (1, 4))
    a = proc.process(x)
    proc.reset()
    np.testing.assert_array_equal(proc.process(x), a)


def test_to_config_round_trip():
    assert Gain(db=3.0).to_config() == {"type": "gain", "db": 3.0}
