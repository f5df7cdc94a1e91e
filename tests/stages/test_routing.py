"""select and combine, block by block, against NumPy on the whole signal."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.limits import MAX_CHANNELS
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages import Combine, Select
from pygpukit_dsp.stages.base import InputMismatch

from .conftest import assert_documented, config_error, run_stage, signal


def run_fan_in(stage, specs, xs, block_size):
    """Stream several inputs of one length in step through a stage that reads a list of them."""
    out_spec = stage.output_spec(specs)
    proc = stage.cpu(specs)
    n = xs[0].shape[1]
    outs = []
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        y = proc.process([x[:, start:stop] for x in xs], final=stop == n)
        assert y.dtype == out_spec.np_dtype
        if stop - start == block_size:
            assert y.shape == out_spec.block_shape
        outs.append(y)
    return np.concatenate(outs, axis=1)


def test_documented():
    assert_documented(Select)
    assert_documented(Combine)
    assert (Select.input_count, Combine.input_count) == ((1, 1), (2, None))
    assert not Select.takes_several() and Combine.takes_several()


@pytest.mark.parametrize("block_size", [1, 7, 64])
@pytest.mark.parametrize("complex_", [False, True])
def test_select_picks_and_reorders(rng, block_size, complex_):
    x = signal(rng, (6, 300), complex_)
    spec = SignalSpec(48000, 6, block_size, dtype="complex64" if complex_ else "float32")
    sel = Select(channels=[3, 5, 0, 3])
    assert sel.output_spec(spec) == spec.with_(channels=4)
    np.testing.assert_array_equal(run_stage(sel, spec, x), x[[3, 5, 0, 3]])


def test_select_in_the_frames_domain(rng):
    x = signal(rng, (3, 10, 5), complex_=True)
    spec = SignalSpec(100, 3, 4, dtype="complex64", domain="frames", bins=5)
    np.testing.assert_array_equal(run_stage(Select(channels=[2, 1]), spec, x), x[[2, 1]])


def test_select_output_does_not_alias_its_input(rng):
    x = signal(rng, (2, 8))
    y = Select(channels=[0, 1]).cpu(SignalSpec(1, 2, 8)).process(x)
    y[:] = 0
    assert np.any(x != 0)


def test_select_refuses_a_channel_the_input_lacks():
    err = config_error(Select(channels=[1, 4]).output_spec, SignalSpec(1000, 4, 8))
    assert err.message.startswith("channel 4 is not in the input, which has 4 channels")
    assert config_error(Select, channels=[]).path == ("channels",)
    assert config_error(Select, channels=[-1]).path == ("channels",)
    assert config_error(Select, channels=[MAX_CHANNELS]).path == ("channels",)
    assert config_error(Select).path == ("channels",)


@pytest.mark.parametrize("block_size", [1, 5, 32])
def test_combine_stacks_channels_and_promotes_to_complex(rng, block_size):
    a, b = signal(rng, (2, 100)), signal(rng, (3, 100), complex_=True)
    specs = [SignalSpec(8000, 2, block_size), SignalSpec(8000, 3, block_size, dtype="complex64")]
    comb = Combine()
    assert comb.output_spec(specs) == specs[1].with_(channels=5)
    y = run_fan_in(comb, specs, [a, b], block_size)
    np.testing.assert_array_equal(y, np.concatenate([a.astype(np.complex64), b]))
    three = run_fan_in(comb, [specs[0]] * 3, [a, a, a], block_size)
    assert three.dtype == np.float32 and np.array_equal(three, np.concatenate([a, a, a]))


def test_combine_in_the_frames_domain(rng):
    a, b = signal(rng, (1, 6, 4), True), signal(rng, (2, 6, 4), True)
    spec = SignalSpec(100, 1, 3, dtype="complex64", domain="frames", bins=4)
    y = run_fan_in(Combine(), [spec, spec.with_(channels=2)], [a, b], 3)
    np.testing.assert_array_equal(y, np.concatenate([a, b]))


def test_combine_cuts_a_last_block_to_the_shortest(rng):
    a, b = signal(rng, (1, 5)), signal(rng, (1, 3))
    y = Combine().cpu([SignalSpec(1, 1, 8)] * 2).process([a, b], final=True)
    np.testing.assert_array_equal(y, np.concatenate([a[:, :3], b]))


@pytest.mark.parametrize("change, what", [({"sample_rate": 4000}, "sample rate"), ({"block_size": 16}, "block size"),
                                          ({"domain": "frames", "bins": 4}, "domain")])
def test_combine_refuses_inputs_that_disagree(change, what):
    first = SignalSpec(8000, 2, 8)
    with pytest.raises(InputMismatch) as info:
        Combine().output_spec([first, first, first.with_(**change)])
    assert (info.value.first, info.value.other) == (0, 2)
    assert info.value.message.startswith(f"the inputs differ in {what}")
    Combine().output_spec([first, first.with_(channels=5)])  # channels may differ: they add up


def test_to_config():
    assert Select(channels=[2, 0]).to_config() == {"type": "select", "channels": [2, 0]}
    assert Combine(name="both").to_config() == {"type": "combine", "name": "both"}
