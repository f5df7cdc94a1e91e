"""add and multiply, block by block, against NumPy on the whole signals."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages import Add, Multiply
from pygpukit_dsp.stages.base import InputMismatch

from .conftest import assert_documented, signal
from .test_routing import run_fan_in


def test_documented():
    for cls in (Add, Multiply):
        assert_documented(cls)
        assert cls.input_count == (2, None) and cls.takes_several() and cls.inputs_text() == "2 or more"


@pytest.mark.parametrize("block_size", [1, 6, 50])
def test_add_and_multiply_real(rng, block_size):
    xs = [signal(rng, (3, 200)) for _ in range(3)]
    specs = [SignalSpec(16000, 3, block_size)] * 3
    np.testing.assert_allclose(run_fan_in(Add(), specs, xs, block_size), xs[0] + xs[1] + xs[2], rtol=1e-6)
    np.testing.assert_allclose(run_fan_in(Multiply(), specs[:2], xs[:2], block_size), xs[0] * xs[1], rtol=1e-6)


def test_a_real_signal_times_a_complex_oscillator_is_a_mixer(rng):
    n, fs, f = 400, 8000.0, 1000.0
    x = signal(rng, (1, n))
    lo = np.exp(-2j * np.pi * f * np.arange(n) / fs).astype(np.complex64)[None]
    specs = [SignalSpec(fs, 1, 64), SignalSpec(fs, 1, 64, dtype="complex64")]
    assert Multiply().output_spec(specs).dtype == "complex64"
    y = run_fan_in(Multiply(), specs, [x, lo], 64)
    np.testing.assert_allclose(y, x * lo, rtol=1e-6)
    tone = np.cos(2 * np.pi * f * np.arange(n) / fs).astype(np.float32)[None]
    shifted = run_fan_in(Multiply(), specs, [tone, lo], 64)
    assert abs(shifted.mean() - 0.5) < 0.01  # the tone at f moved to 0 Hz (and to -2f)


def test_frames_domain(rng):
    a, b = signal(rng, (2, 6, 5), True), signal(rng, (2, 6, 5), True)
    spec = SignalSpec(100, 2, 3, dtype="complex64", domain="frames", bins=5)
    np.testing.assert_allclose(run_fan_in(Add(), [spec, spec], [a, b], 3), a + b, rtol=1e-6)


def test_the_inputs_are_not_changed(rng):
    a, b = signal(rng, (1, 8)), signal(rng, (1, 8))
    keep = a.copy()
    Add().cpu([SignalSpec(1, 1, 8)] * 2).process([a, b])
    np.testing.assert_array_equal(a, keep)


def test_a_last_block_is_cut_to_the_shortest(rng):
    a, b = signal(rng, (1, 4)), signal(rng, (1, 6))
    y = Add().cpu([SignalSpec(1, 1, 8)] * 2).process([a, b], final=True)
    np.testing.assert_allclose(y, a + b[:, :4])


@pytest.mark.parametrize("change, what", [({"sample_rate": 4000}, "sample rate"), ({"block_size": 16}, "block size"),
                                          ({"domain": "frames", "bins": 4}, "domain"), ({"channels": 3}, "channels")])
@pytest.mark.parametrize("cls", [Add, Multiply])
def test_inputs_of_another_spec_are_refused(cls, change, what):
    first = SignalSpec(8000, 2, 8)
    with pytest.raises(InputMismatch) as info:
        cls().output_spec([first, first.with_(**change)])
    assert (info.value.first, info.value.other) == (0, 1)
    assert info.value.message.startswith(f"the inputs differ in {what}")


def test_reset_is_harmless(rng):
    proc = Add().cpu([SignalSpec(1, 1, 4)] * 2)
    a = signal(rng, (1, 4))
    y = proc.process([a, a])
    proc.reset()
    np.testing.assert_array_equal(proc.process([a, a]), y)
