"""fir with decimate: D on the CPU against scipy.signal.lfilter(taps, 1, x)[..., ::D]."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.fir import Fir

from .conftest import config_error, rel_err, run_stage
from .sdr_helpers import FS, iq, yaml_error

N = 3 * 1000 + 421


@pytest.mark.parametrize("complex_x", [False, True])
@pytest.mark.parametrize("complex_h", [False, True])
@pytest.mark.parametrize("D,L", [(2, 1), (2, 31), (5, 64), (10, 257), (8, 2000)])
def test_decimating_fir_is_lfilter_then_every_dth(rng, complex_x, complex_h, D, L):
    x = iq(rng, 3, N, complex_x)
    taps = rng.standard_normal(L) / np.sqrt(L)
    if complex_h:
        taps = taps + 1j * rng.standard_normal(L) / np.sqrt(L)
    st = Fir(taps=taps, decimate=D)
    spec = SignalSpec(FS, 3, 1000, dtype="complex64" if complex_x else "float32")
    out = st.output_spec(spec)
    assert (out.sample_rate, out.block_size) == (FS / D, 1000 // D)
    assert out.is_complex == (complex_x or complex_h)
    y = run_stage(st, spec, x)
    ref = ss.lfilter(taps, 1, x.astype(np.complex128 if complex_x else np.float64), axis=-1)[:, ::D]
    assert y.shape == ref.shape == (3, -(-N // D))
    assert rel_err(y, ref) < 2e-6


def test_per_channel_taps_and_a_design(rng):
    x = iq(rng, 2, 4000, False)
    taps = rng.standard_normal((2, 33))
    y = run_stage(Fir(taps=taps, decimate=4), SignalSpec(FS, 2, 400), x)
    ref = np.stack([ss.lfilter(taps[c], 1, x[c].astype(np.float64))[::4] for c in range(2)])
    assert rel_err(y, ref) < 2e-6
    st = Fir(design={"numtaps": 63, "cutoff_hz": 5000.0}, decimate=4)
    y = run_stage(st, SignalSpec(FS, 2, 400), x)
    assert rel_err(y, ss.lfilter(ss.firwin(63, 5000.0, fs=FS), 1, x.astype(np.float64), axis=-1)[:, ::4]) < 2e-6


def test_decimate_one_is_the_plain_filter(rng):
    x = iq(rng, 1, 900, False)
    a = run_stage(Fir(taps=[0.5, 0.25], decimate=1), SignalSpec(FS, 1, 300), x)
    b = run_stage(Fir(taps=[0.5, 0.25]), SignalSpec(FS, 1, 300), x)
    np.testing.assert_array_equal(a, b)


def test_state_carries_across_blocks_of_any_multiple(rng):
    x = iq(rng, 2, 6000)
    taps = ss.firwin(101, 0.1)
    outs = [run_stage(Fir(taps=taps, decimate=6), SignalSpec(FS, 2, b, dtype="complex64"), x)
            for b in (6, 60, 1200, 6000)]
    for y in outs[1:]:
        np.testing.assert_allclose(y, outs[0], rtol=0, atol=2e-6)


def test_block_size_not_a_multiple_is_a_config_error_naming_both():
    err = config_error(Fir(taps=[1.0, 1.0], decimate=7).output_spec, SignalSpec(FS, 1, 1000))
    assert "block_size 1000" in err.message and "decimate = 7" in err.message
    assert "994" in err.hint and "1001" in err.hint


def test_method_is_refused_for_a_decimator():
    with pytest.raises(ConfigError) as info:
        Fir(taps=[1.0], decimate=2, method="overlap_save")
    assert info.value.path == ("decimate",) or "decimate" in str(info.value)
    with pytest.raises(ConfigError):
        Fir(taps=[1.0], decimate=0)


def test_yaml_block_size_error_is_located(tmp_path):
    err = yaml_error(tmp_path, """
        - type: fir
          taps: [0.5, 0.5]
          decimate: 3
    """)
    assert err.where and ":8:" in err.where
    assert "block_size 1000" in err.message and "decimate = 3" in err.message


def test_the_rate_and_block_propagate_to_the_next_stage():
    p = Pipeline([Fir(taps=[1.0, 1.0], decimate=4, name="dec"), Fir(taps=[1.0], decimate=5, name="dec2")],
                 sample_rate=FS, channels=1, block_size=1000)
    out = p.specs().output
    assert (out.sample_rate, out.block_size) == (FS / 20, 50)
    y = p.process(np.arange(2000, dtype=np.float32)[None, :], backend="cpu")
    assert y.shape == (1, 100)
    ref = ss.lfilter([1.0, 1.0], 1, np.arange(2000.0))[::4][::5]
    np.testing.assert_allclose(y[0], ref, rtol=1e-6)


def test_to_config_round_trips_decimate():
    st = Fir(taps=[1.0, 2.0], decimate=3)
    assert st.to_config() == {"type": "fir", "taps": [1.0, 2.0], "decimate": 3}
