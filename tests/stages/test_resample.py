from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.resample import Resample

from .conftest import assert_documented, config_error, rel_err, run_stage, signal, stream

N = 1200


def test_documented():
    assert_documented(Resample)


def check_against_resample_poly(stage: Resample, x: np.ndarray, block: int, window) -> np.ndarray:
    complex_ = np.iscomplexobj(x)
    spec = SignalSpec(48000, x.shape[0], block, dtype="complex64" if complex_ else "float32")
    out = run_stage(stage, spec, x)
    up, down = stage.ratio
    assert out.shape[1] == -(-x.shape[1] * up // down)  # ceil(N*up/down)
    ref = ss.resample_poly(x.astype(np.complex128 if complex_ else np.float64), stage.params.up,
                           stage.params.down, axis=-1, window=window)
    assert ref.shape == out.shape
    D = stage.delay_out_samples
    assert rel_err(out[:, D:], ref[:, :ref.shape[1] - D]) < 1e-5
    return out


@pytest.mark.parametrize("up,down", [(3, 2), (2, 3), (1, 4), (5, 1), (4, 6), (160, 147)])
@pytest.mark.parametrize("complex_", [False, True])
def test_default_filter(rng, up, down, complex_):
    stage = Resample(up=up, down=down)
    d = stage.ratio[1]
    x = signal(rng, (2, N if up < 100 else 3000), complex_)
    for block in (d * 8, d * 7):  # 1200 = 150*8: divides; 7*d leaves a partial block
        check_against_resample_poly(stage, x, block, ("kaiser", 5.0))


def test_taps_as_length(rng):
    stage = Resample(up=3, down=2, taps=31)
    h = ss.firwin(31, 1 / 3, window=("kaiser", 5.0))
    np.testing.assert_allclose(stage.filter()[0], h * 3)
    check_against_resample_poly(stage, signal(rng, (1, N)), 64, h)


def test_explicit_taps(rng):
    h = ss.firwin(24, 0.2)  # even length too
    stage = Resample(up=2, down=5, taps=h.tolist())
    check_against_resample_poly(stage, signal(rng, (1, N)), 100, h)


def test_delay_formula():
    # default 3/2: half_len = 30, n_pre_pad = 2 - 30 % 2 = 2, D = 32 // 2 = 16
    assert Resample(up=3, down=2).delay_out_samples == 16
    assert Resample(up=4, down=4).delay_out_samples == 0


@pytest.mark.parametrize("taps", [None, 31, 24, [0.25, 0.5, 0.25]])
def test_the_delay_needs_only_the_filter_length(monkeypatch, taps):
    """delay_out_samples is the half length's, not the taps': it designs nothing (no SciPy)."""
    stage = Resample(up=3, down=2, taps=taps)
    h, half_len = stage.filter()
    expected = (half_len + 2 - half_len % 2) // 2
    assert half_len == (h.size - 1) // 2

    def no_design(*args):
        raise AssertionError("designed a filter for the delay")

    monkeypatch.setattr("pygpukit_dsp.stages.resample.resample_filter", no_design)
    assert stage.delay_out_samples == expected


def test_identity_ratio(rng):
    x = signal(rng, (1, 100))
    np.testing.assert_array_equal(run_stage(Resample(up=3, down=3), SignalSpec(8000, 1, 32), x), x)


def test_spec_and_gcd_reduction():
    stage = Resample(up=4, down=6)
    assert stage.ratio == (2, 3)
    out = stage.output_spec(SignalSpec(48000, 2, 300))
    assert (out.sample_rate, out.block_size) == (32000, 200)


def test_block_divisibility_message():
    err = config_error(Resample(up=4, down=6).output_spec, SignalSpec(48000, 1, 256))
    assert "multiple of 3" in str(err) and "255 or 258" in str(err) and "reduced to 2/3" in str(err)


def test_reset(rng):
    proc = Resample(up=2, down=3).cpu(SignalSpec(48000, 1, 60))
    x = signal(rng, (1, 240))
    first = stream(proc, x, 60)
    proc.reset()
    np.testing.assert_array_equal(stream(proc, x, 60), first)


def test_rules():
    assert "up" in str(config_error(Resample, up=0, down=1))
    assert "taps" in str(config_error(Resample, up=2, down=1, taps=0))
    assert "1-D" in str(config_error(Resample, up=2, down=1, taps=[[1, 2]]))
    assert "did you mean 'down'" in str(config_error(Resample, up=2, dwn=1))
    frames = SignalSpec(100, 1, 4, dtype="complex64", domain="frames", bins=8)
    assert "time-domain" in str(config_error(Resample(up=2, down=1).output_spec, frames))


@pytest.mark.parametrize("complex_", [False, True])
def test_long_filter_small_blocks_computes_only_the_blocks_outputs(rng, complex_):
    """A history longer than the block (found by the parameter fuzz: 20001 taps at 2/1 in blocks of
    16 took seconds per block) takes the direct path; the stream is still upfirdn over the signal."""
    st = Resample(up=2, down=1, taps=20001)
    spec = SignalSpec(48000, 2, 16, dtype="complex64" if complex_ else "float32")
    assert st.cpu(spec).direct and not st.cpu(spec.with_(block_size=16384)).direct
    x = signal(rng, (2, 16 * 40 + 5), complex_)
    ref = ss.upfirdn(st.padded_filter(), x.astype(np.complex128 if complex_ else np.float64), 2, 1, axis=-1)
    out = run_stage(st, spec, x)
    assert out.shape == (2, 2 * x.shape[1])
    assert rel_err(out, ref[:, :out.shape[1]]) < 1e-6
