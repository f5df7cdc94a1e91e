"""shift and ddc on the CPU against NumPy/SciPy: the formulas over odd blocks, the phase at
n = 10**10, the rate and block size after decimation, and located errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.shift import Ddc, Shift, cycles_at

from .conftest import assert_documented, config_error, rel_err, run_stage
from .sdr_helpers import FS, iq, yaml_error

N = 3 * 1000 + 357  # 1000-sample blocks and a short final one


def shifted(x: np.ndarray, freq_hz: float, n0: int = 0) -> np.ndarray:
    n = n0 + np.arange(x.shape[-1], dtype=np.float64)
    return x.astype(np.complex128) * np.exp(2j * np.pi * freq_hz * n / FS)


def test_documented():
    assert_documented(Shift)
    assert_documented(Ddc)


@pytest.mark.parametrize("complex_", [True, False])
@pytest.mark.parametrize("freq_hz", [1234.5, -7000.0, 30000.0])
def test_shift_is_the_formula_over_blocks(rng, complex_, freq_hz):
    x = iq(rng, 3, N, complex_)
    spec = SignalSpec(FS, 3, 1000, dtype="complex64" if complex_ else "float32")
    st = Shift(freq_hz=freq_hz)
    assert st.output_spec(spec) == spec.with_(dtype="complex64")  # a real input gives a complex output
    y = run_stage(st, spec, x)
    assert y.dtype == np.complex64 and y.shape == x.shape
    np.testing.assert_allclose(y, shifted(x, freq_hz), rtol=0, atol=2e-6)


def test_shift_block_size_does_not_matter(rng):
    x = iq(rng, 2, 2000)
    outs = [run_stage(Shift(freq_hz=999.0), SignalSpec(FS, 2, b, dtype="complex64"), x) for b in (1, 7, 1000, 2000)]
    for y in outs[1:]:
        np.testing.assert_allclose(y, outs[0], atol=1e-6)


def test_shift_phase_at_ten_to_the_ten_is_the_direct_formula(rng):
    x = iq(rng, 3, N)
    st = Shift(freq_hz=1234.567)
    spec = SignalSpec(FS, 3, 1000, dtype="complex64")
    proc = st.cpu(spec)
    proc.sample_index = 10**10  # as after 10**10 samples (58 hours at 48 kHz)
    y = np.concatenate([proc.process(x[:, s:s + 1000]) for s in range(0, N, 1000)], axis=1)
    assert proc.sample_index == 10**10 + N
    np.testing.assert_allclose(y, shifted(x, 1234.567, 10**10), rtol=0, atol=2e-5)


def test_the_block_phase_is_exact_in_rational_arithmetic():
    inc = 1234.567 / FS
    from fractions import Fraction

    for n0 in (0, 1, 10**10, 2**62 + 12345):
        exact = Fraction(inc) * n0
        assert cycles_at(inc, n0) == float(exact - (exact.numerator // exact.denominator))
    assert 0.0 <= cycles_at(-inc, 10**12) < 1.0


def test_shift_reset_starts_the_phase_again(rng):
    x = iq(rng, 1, 500)
    proc = Shift(freq_hz=100.0).cpu(SignalSpec(FS, 1, 500, dtype="complex64"))
    a = proc.process(x)
    proc.process(x)
    proc.reset()
    np.testing.assert_array_equal(proc.process(x), a)


def test_shift_needs_samples():
    from pygpukit_dsp.stages.fft import Fft

    frames = Fft(n=8).output_spec(SignalSpec(FS, 1, 64))
    assert "time-domain" in str(config_error(Shift(freq_hz=1.0).output_spec, frames))


# ---------------------------------------------------------------------------------------------
# ddc

def ddc_reference(x: np.ndarray, freq_hz: float, taps: np.ndarray, D: int) -> np.ndarray:
    return ss.lfilter(taps, 1, shifted(x, -freq_hz), axis=-1)[:, ::D]


@pytest.mark.parametrize("complex_", [True, False])
@pytest.mark.parametrize("D,numtaps", [(1, 31), (4, 63), (5, 64), (8, 127)])
def test_ddc_is_fir_decimate_of_the_shift(rng, complex_, D, numtaps):
    x = iq(rng, 3, N, complex_)
    taps = ss.firwin(numtaps, 0.8 / D)
    st = Ddc(freq_hz=6000.0, taps=taps, decimate=D)
    spec = SignalSpec(FS, 3, 1000, dtype="complex64" if complex_ else "float32")
    out = st.output_spec(spec)
    assert (out.sample_rate, out.block_size, out.dtype) == (FS / D, 1000 // D, "complex64")
    y = run_stage(st, spec, x)
    ref = ddc_reference(x, 6000.0, taps, D)
    assert y.shape == ref.shape == (3, -(-N // D))  # the final partial block gives ceil(n / D)
    assert rel_err(y, ref) < 2e-6


def test_ddc_brings_the_carrier_to_zero_hz():
    n = np.arange(48000)
    x = np.exp(2j * np.pi * 10000.0 * n / FS)[None, :].astype(np.complex64)
    st = Ddc(freq_hz=10000.0, design={"numtaps": 63, "cutoff_hz": 2000.0}, decimate=8)
    y = run_stage(st, SignalSpec(FS, 1, 960, dtype="complex64"), x)
    settled = y[0, 100:]
    np.testing.assert_allclose(settled, settled[0] * np.ones_like(settled), atol=1e-4)  # DC
    assert abs(abs(settled[0]) - 1.0) < 1e-3


def test_ddc_with_a_design_and_per_channel_taps(rng):
    x = iq(rng, 2, 2400)
    st = Ddc(freq_hz=-3000.0, design={"numtaps": 41, "cutoff_hz": 4000.0}, decimate=3)
    y = run_stage(st, SignalSpec(FS, 2, 600, dtype="complex64"), x)
    assert rel_err(y, ddc_reference(x, -3000.0, ss.firwin(41, 4000.0, fs=FS), 3)) < 2e-6
    taps = np.stack([ss.firwin(21, 0.2), ss.firwin(21, 0.3)])
    st = Ddc(freq_hz=500.0, taps=taps, decimate=2)
    y = run_stage(st, SignalSpec(FS, 2, 600, dtype="complex64"), x)
    ref = np.stack([ddc_reference(x[c:c + 1], 500.0, taps[c], 2)[0] for c in range(2)])
    assert rel_err(y, ref) < 2e-6


def test_ddc_block_size_not_a_multiple_of_decimate_names_both():
    err = config_error(Ddc(freq_hz=1.0, taps=[1.0, 0.5], decimate=3).output_spec,
                       SignalSpec(FS, 1, 1000, dtype="complex64"))
    assert "block_size 1000" in err.message and "decimate = 3" in err.message
    assert "999" in err.hint and "1002" in err.hint


def test_ddc_needs_exactly_one_filter():
    with pytest.raises(ConfigError):
        Ddc(freq_hz=1.0, decimate=2)
    with pytest.raises(ConfigError):
        Ddc(freq_hz=1.0, taps=[1.0], design={"numtaps": 3, "cutoff_hz": 100.0})


def test_ddc_yaml_errors_are_located(tmp_path):
    err = yaml_error(tmp_path, """
        - type: ddc
          freq_hz: 1000
          taps: [0.5, 0.5]
          decimate: 0
    """)
    assert err.where and err.where.startswith(str(tmp_path / "p.yaml")) and "decimate" in str(err)
    err = yaml_error(tmp_path, """
        - type: ddc
          freq_hz: 1000
          taps: [0.5, 0.5]
          decimate: 3
    """)
    assert err.where and ":8:" in err.where and "decimate = 3" in err.message  # the stage's line


def test_shift_yaml_needs_freq_hz(tmp_path):
    err = yaml_error(tmp_path, """
        - type: shift
          freq: 10
    """)
    assert err.where and "p.yaml:" in err.where and "freq_hz" in str(err)
