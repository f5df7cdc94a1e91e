"""hilbert on the CPU: x delayed by (numtaps - 1) / 2 plus j times the FIR Hilbert transform,
over odd blocks; the negative-frequency image measured at 127 taps; refused inputs."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.hilbert import Hilbert, hilbert_taps

from .conftest import assert_documented, config_error, rel_err, run_stage
from .sdr_helpers import FS, iq, yaml_error

N = 3 * 1000 + 111


def test_documented():
    assert_documented(Hilbert)


@pytest.mark.parametrize("numtaps", [3, 31, 127, 255])
def test_output_is_the_delayed_input_plus_j_hilbert(rng, numtaps):
    x = iq(rng, 3, N, complex_=False)
    st = Hilbert(numtaps=numtaps)
    d = st.delay_samples
    assert d == (numtaps - 1) // 2
    y = run_stage(st, SignalSpec(FS, 3, 1000), x)
    assert y.dtype == np.complex64 and y.shape == x.shape
    xd = x.astype(np.float64)
    delayed = np.concatenate([np.zeros((3, d)), xd[:, :N - d]], axis=1)
    np.testing.assert_allclose(y.real, delayed, rtol=0, atol=1e-6)
    assert rel_err(y.imag, ss.lfilter(hilbert_taps(numtaps), 1, xd, axis=-1)) < 2e-6


def test_taps_are_the_windowed_ideal_transformer():
    h = hilbert_taps(7)
    m = np.arange(7) - 3
    ideal = np.where(m % 2 != 0, 2 / (np.pi * np.where(m == 0, 1, m)), 0.0)
    np.testing.assert_allclose(h, ideal * np.hamming(7))
    np.testing.assert_allclose(h, -h[::-1])  # antisymmetric


def image_db(numtaps: int, f: float, n: int = 1 << 15) -> float:
    """Power at -f over power at +f of the output for a cosine at f (cycles per sample), measured
    with a Blackman-Harris window after the filter has settled."""
    st = Hilbert(numtaps=numtaps)
    t = np.arange(n + numtaps)
    x = np.cos(2 * np.pi * f * t)[None, :].astype(np.float32)
    y = run_stage(st, SignalSpec(1.0, 1, 1024), x)[0, numtaps:].astype(np.complex128)
    spectrum = np.abs(np.fft.fft(y * ss.windows.blackmanharris(n))) ** 2
    k = int(round(f * n))
    pos = spectrum[k - 3:k + 4].sum()
    neg = spectrum[n - k - 3:n - k + 4].sum()
    return 10 * np.log10(neg / pos)


def test_the_image_is_40_db_down_from_0_05_to_0_45_fs_at_127_taps():
    freqs = np.linspace(0.05, 0.45, 17)
    images = [image_db(127, f) for f in freqs]
    assert max(images) <= -40.0, dict(zip(freqs.round(3), np.round(images, 1)))
    assert max(images) <= -55.0  # measured: about -60 dB at the band edges (Hamming window)


def test_few_taps_leave_a_stronger_image():
    assert image_db(15, 0.05) > -40.0


def test_numtaps_must_be_odd(tmp_path):
    with pytest.raises(ConfigError) as info:
        Hilbert(numtaps=128)
    assert "odd" in str(info.value) and "129" in str(info.value)
    (tmp_path / "p.yaml").write_text("version: 1\nname: h\nsample_rate: 48000\nblock_size: 1000\n"
                                     "channels: 1\nstages:\n  - type: hilbert\n    numtaps: 64\n")
    from pygpukit_dsp.pipeline import Pipeline

    with pytest.raises(ConfigError) as info:
        Pipeline.from_yaml(tmp_path / "p.yaml")
    assert info.value.where and "p.yaml:" in info.value.where


def test_a_complex_input_is_refused_where_the_stage_is(tmp_path):
    err = config_error(Hilbert().output_spec, SignalSpec(FS, 1, 100, dtype="complex64"))
    assert "real" in err.message
    err = yaml_error(tmp_path, """
        - type: hilbert
    """)  # yaml_error's pipeline is complex64
    assert err.where and ":8:" in err.where and "real" in err.message
