"""fm_demod on the CPU against NumPy/SciPy: the discriminator over odd blocks, x[-1] = 0, the
de-emphasis filter and its state, a real input, and located parameter errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.fm import FmDemod, deemphasis_pole

from .conftest import assert_documented, rel_err, run_stage
from .sdr_helpers import FS, iq, yaml_error

N = 3 * 1000 + 233


def discriminator(x: np.ndarray, gain: float = 1.0) -> np.ndarray:
    before = np.concatenate([np.zeros((x.shape[0], 1), x.dtype), x[:, :-1]], axis=1)
    return gain * np.angle(x * np.conj(before))


def test_documented():
    assert_documented(FmDemod)


@pytest.mark.parametrize("gain", [1.0, 3.5, -0.5])
def test_the_discriminator_over_blocks(rng, gain):
    x = iq(rng, 3, N)
    y = run_stage(FmDemod(gain=gain), SignalSpec(FS, 3, 1000, dtype="complex64"), x)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, discriminator(x.astype(np.complex128), gain), rtol=0, atol=2e-6 * abs(gain))


def test_the_stream_starts_from_zero(rng):
    x = iq(rng, 2, 10)
    y = run_stage(FmDemod(), SignalSpec(FS, 2, 10, dtype="complex64"), x)
    np.testing.assert_array_equal(y[:, 0], np.angle(x[:, 0].astype(np.complex128) * np.conj(0j)))


@pytest.mark.parametrize("us", [50, 75])
def test_deemphasis_is_the_one_pole_lfilter(rng, us):
    x = iq(rng, 3, N)
    fs = 240000.0
    y = run_stage(FmDemod(gain=2.0, deemphasis_us=us), SignalSpec(fs, 3, 1000, dtype="complex64"), x)
    a = np.exp(-1.0 / (fs * us * 1e-6))
    assert deemphasis_pole(us, fs) == pytest.approx(a, rel=1e-15)
    ref = ss.lfilter([1 - a], [1, -a], discriminator(x.astype(np.complex128), 2.0), axis=-1)
    assert rel_err(y, ref) < 1e-6


def test_deemphasis_gains_one_at_dc_and_cuts_high_audio():
    fs = 48000.0
    a = deemphasis_pole(75, fs)
    w, h = ss.freqz([1 - a], [1, -a], worN=[0.0, 2122.0, 15000.0], fs=fs)
    mag_db = 20 * np.log10(np.abs(h))
    assert abs(mag_db[0]) < 1e-9 and -4.5 < mag_db[1] < -2.0 and mag_db[2] < -12  # corner 1/(2 pi tau)


def test_state_carries_across_blocks_of_any_size(rng):
    x = iq(rng, 2, 3000)
    outs = [run_stage(FmDemod(deemphasis_us=50), SignalSpec(FS, 2, b, dtype="complex64"), x)
            for b in (1, 7, 1000, 3000)]
    for y in outs[1:]:
        np.testing.assert_allclose(y, outs[0], rtol=0, atol=2e-6)


def test_reset_forgets_the_previous_sample_and_filter(rng):
    x = iq(rng, 1, 500)
    proc = FmDemod(deemphasis_us=75).cpu(SignalSpec(FS, 1, 500, dtype="complex64"))
    first = proc.process(x)
    proc.process(x)
    proc.reset()
    np.testing.assert_array_equal(proc.process(x), first)


def test_a_real_input_gives_pi_where_the_product_is_negative(rng):
    x = iq(rng, 2, 1500, complex_=False)
    y = run_stage(FmDemod(), SignalSpec(FS, 2, 1000), x)
    before = np.concatenate([np.zeros((2, 1)), x[:, :-1]], axis=1)
    np.testing.assert_allclose(y, np.angle(x.astype(np.float64) * before), atol=1e-6)
    assert set(np.unique(np.round(y[:, 1:], 6))) <= {0.0, np.float32(np.pi).round(6)}


def test_a_tone_comes_back():
    fs, f0, dev = 240000.0, 1000.0, 75000.0
    t = np.arange(24000) / fs
    phase = 2 * np.pi * dev * np.cumsum(np.sin(2 * np.pi * f0 * t)) / fs
    x = np.exp(1j * phase)[None, :].astype(np.complex64)
    y = run_stage(FmDemod(gain=fs / (2 * np.pi * dev)), SignalSpec(fs, 1, 2400, dtype="complex64"), x)
    np.testing.assert_allclose(y[0, 1:], np.sin(2 * np.pi * f0 * t[1:]), atol=1e-3)


def test_deemphasis_takes_50_or_75(tmp_path):
    with pytest.raises(ConfigError):
        FmDemod(deemphasis_us=60)
    err = yaml_error(tmp_path, """
        - type: fm_demod
          deemphasis_us: 60
    """)
    assert err.where and "p.yaml:" in err.where and "deemphasis_us" in str(err)
    err = yaml_error(tmp_path, """
        - type: fm_demod
          gian: 2
    """)
    assert "did you mean 'gain'" in str(err)
