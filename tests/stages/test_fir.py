from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp.errors import ConfigError, ConfigErrors
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.fir import (PLAIN_WINDOWS, DirectFir, Fir, MatmulFir, OverlapSaveFir, check_window, plan_fir,
                                     window_needs_scipy)

from .conftest import assert_documented, config_error, rel_err, run_stage, signal, stream

N = 1500
METHODS = ["direct", "matmul", "overlap_save"]


def lfilter_ref(taps: np.ndarray, x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)
    if taps.ndim == 1:
        return ss.lfilter(taps, 1.0, x64, axis=-1)
    return np.stack([ss.lfilter(t, 1.0, xc) for t, xc in zip(taps, x64)])


def test_documented():
    assert_documented(Fir)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("L", [1, 5, 64, 300])
@pytest.mark.parametrize("block", [100, 128])  # 1500 = 15*100; 128 leaves a partial block
def test_matches_lfilter_real(rng, method, L, block):
    x = signal(rng, (3, N))
    taps = rng.standard_normal(L)
    stage = Fir(taps=taps, method=method)
    out = run_stage(stage, SignalSpec(48000, 3, block), x)
    assert out.dtype == np.float32
    assert rel_err(out, lfilter_ref(taps, x)) < 1e-5


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("taps_complex,x_complex", [(True, False), (False, True), (True, True)])
def test_matches_lfilter_complex(rng, method, taps_complex, x_complex):
    x = signal(rng, (2, N), complex_=x_complex)
    taps = rng.standard_normal(40) + (1j * rng.standard_normal(40) if taps_complex else 0)
    stage = Fir(taps=taps, method=method)
    spec = SignalSpec(48000, 2, 96, dtype="complex64" if x_complex else "float32")
    out = run_stage(stage, spec, x)
    assert out.dtype == np.complex64
    assert rel_err(out, lfilter_ref(taps, x)) < 1e-5


@pytest.mark.parametrize("method", METHODS)
def test_per_channel_taps(rng, method):
    x = signal(rng, (3, N))
    taps = rng.standard_normal((3, 33))
    out = run_stage(Fir(taps=taps, method=method), SignalSpec(48000, 3, 128), x)
    assert rel_err(out, lfilter_ref(taps, x)) < 1e-5


def test_partitioned_overlap_save_long_filter(rng):
    # 2000 taps with 64-sample blocks: several partitions in a frequency-domain delay line
    x = signal(rng, (2, 4000))
    taps = rng.standard_normal(2000) * np.exp(-np.arange(2000) / 500)
    stage = Fir(taps=taps, method="overlap_save")
    proc = stage.cpu(SignalSpec(48000, 2, 64))
    assert isinstance(proc, OverlapSaveFir) and proc.K > 1
    out = stream(proc, x, 64)
    assert rel_err(out, lfilter_ref(taps, x)) < 1e-5


@pytest.mark.parametrize("step,K", [(32, 1), (32, 4), (64, 2)])
def test_overlap_save_sub_blocks(rng, step, K):
    # several chunks per block, with and without a frequency-domain delay line
    x = signal(rng, (2, 1000))
    taps = rng.standard_normal(100)
    proc = OverlapSaveFir(taps, 2, 128, np.dtype(np.float32), step, K)
    out = stream(proc, x, 128)
    assert rel_err(out, lfilter_ref(taps, x)) < 1e-5


@pytest.mark.parametrize("P", [16, 64])
def test_matmul_sub_blocks(rng, P):
    x = signal(rng, (4, 1000))
    taps = rng.standard_normal(50)
    proc = MatmulFir(taps, 4, 128, np.dtype(np.float32), P)
    assert rel_err(stream(proc, x, 128), lfilter_ref(taps, x)) < 1e-5


@pytest.mark.parametrize("method", METHODS)
def test_reset_restarts_state(rng, method):
    x = signal(rng, (2, 512))
    proc = Fir(taps=rng.standard_normal(20), method=method).cpu(SignalSpec(48000, 2, 128))
    first = stream(proc, x, 128)
    proc.process(signal(rng, (2, 128)))  # leave history behind
    proc.reset()
    np.testing.assert_array_equal(stream(proc, x, 128), first)


def test_w1_shape_does_not_use_per_tap_loop():
    # 64 ch x 256 samples x 256 taps: the per-tap loop would cost ~50x more
    method, *_ = plan_fir(256, 64, 256, False)
    assert method in ("matmul", "overlap_save")
    proc = Fir(taps=np.ones(256)).cpu(SignalSpec(48000, 64, 256))
    assert not isinstance(proc, DirectFir)


def test_long_filter_uses_partitions():
    method, step, K, _ = plan_fir(48000, 2, 256, False)
    assert (method, K) == ("overlap_save", 188) and step == 256


# --- design -------------------------------------------------------------------------


@pytest.mark.parametrize("design", [
    {"numtaps": 31, "cutoff_hz": 4000.0},
    {"numtaps": 63, "cutoff_hz": [2000.0, 6000.0], "pass_zero": False},
    {"numtaps": 41, "cutoff_hz": 8000.0, "window": ["kaiser", 8.0], "pass_zero": "highpass"},
])
def test_design_matches_firwin(rng, design):
    fs = 32000.0
    stage = Fir(design=design)
    args = dict(design)
    window = args.pop("window", "hamming")
    expected = ss.firwin(args.pop("numtaps"), args.pop("cutoff_hz"), fs=fs,
                         window=tuple(window) if isinstance(window, list) else window, **args)
    spec = SignalSpec(fs, 2, 100)
    np.testing.assert_allclose(stage.taps_for(spec), expected)
    x = signal(rng, (2, 700))
    assert rel_err(run_stage(stage, spec, x), lfilter_ref(expected, x)) < 1e-5


def test_design_cutoff_above_nyquist():
    stage = Fir(design={"numtaps": 31, "cutoff_hz": 30000.0})
    err = config_error(stage.output_spec, SignalSpec(48000, 1, 64))
    assert "24000" in str(err) and err.path == ("design", "cutoff_hz")


def test_design_even_highpass_hint():
    stage = Fir(design={"numtaps": 30, "cutoff_hz": 1000.0, "pass_zero": False})
    err = config_error(stage.output_spec, SignalSpec(48000, 1, 64))
    assert "odd numtaps" in str(err) and "31" in str(err) and err.path == ("design", "numtaps")


@pytest.mark.parametrize("bad,msg", [
    ({"numtaps": 31, "cutoff_hz": [3000.0, 1000.0]}, "increasing"),
    ({"numtaps": 31, "cutoff_hz": -5.0}, "> 0"),
    ({"numtaps": 0, "cutoff_hz": 100.0}, "numtaps"),
    ({"numtaps": 31, "cutoff_hz": 100.0, "window": "nosuchwindow"}, "window"),
])
def test_design_validation(bad, msg):
    assert msg in str(config_error(Fir, design=bad))


def test_design_unknown_key_did_you_mean():
    err = config_error(Fir, design={"numtaps": 31, "cutof_hz": 100.0})
    assert "cutoff_hz" in str(err)


# --- files --------------------------------------------------------------------------


def test_taps_file_npy_relative_to_base_dir(tmp_path, rng):
    taps = rng.standard_normal(17)
    np.save(tmp_path / "h.npy", taps)
    stage = Fir(taps_file="h.npy", base_dir=tmp_path)
    x = signal(rng, (1, 300))
    assert rel_err(run_stage(stage, SignalSpec(8000, 1, 64), x), lfilter_ref(taps, x)) < 1e-5


def test_taps_file_text_complex(tmp_path, rng):
    (tmp_path / "h.txt").write_text("1+1j\n0.5-2j\n0.25\n")
    stage = Fir(taps_file=str(tmp_path / "h.txt"))
    np.testing.assert_allclose(stage.taps_for(SignalSpec(8000, 1, 64)), [1 + 1j, 0.5 - 2j, 0.25])


def test_taps_file_text_per_channel(tmp_path):
    (tmp_path / "h.txt").write_text("1 2 3\n4 5 6\n")
    stage = Fir(taps_file="h.txt", base_dir=tmp_path)
    assert stage.output_spec(SignalSpec(8000, 2, 64)).channels == 2
    assert stage.taps_for(SignalSpec(8000, 2, 64)).shape == (2, 3)


def test_missing_taps_file_is_config_error_with_path(tmp_path):
    err = config_error(Fir, taps_file="nope.npy", base_dir=tmp_path)
    assert "file not found" in str(err) and err.path == ("taps_file",)
    assert str(tmp_path) in str(err)


def test_unreadable_taps_file(tmp_path):
    (tmp_path / "h.txt").write_text("not numbers here\n")
    err = config_error(Fir, taps_file="h.txt", base_dir=tmp_path)
    assert "cannot read" in str(err)


# --- rules --------------------------------------------------------------------------


def test_exactly_one_source():
    assert "none was given" in str(config_error(Fir))
    both = str(config_error(Fir, taps=[1.0], design={"numtaps": 3, "cutoff_hz": 10.0}))
    assert "'taps' and 'design'" in both


def test_unknown_parameter_did_you_mean():
    err = config_error(Fir, tapps=[1, 2])
    assert "did you mean 'taps'" in str(err)


def test_taps_shape_rules():
    assert "shape" in str(config_error(Fir, taps=np.ones((2, 2, 2))))
    assert "shape" in str(config_error(Fir, taps=[]))


def test_per_channel_rows_must_match_channels():
    stage = Fir(taps=np.ones((3, 4)))
    err = config_error(stage.output_spec, SignalSpec(48000, 2, 64))
    assert "3 rows" in str(err) and "2 channels" in str(err)


def test_needs_time_domain():
    spec = SignalSpec(100, 1, 4, dtype="complex64", domain="frames", bins=8)
    assert "time-domain" in str(config_error(Fir(taps=[1.0]).output_spec, spec))


def test_output_spec_dtype():
    spec = SignalSpec(48000, 2, 64)
    assert Fir(taps=[1.0, 2.0]).output_spec(spec) == spec
    assert Fir(taps=["1+1j", 2.0]).output_spec(spec).dtype == "complex64"
    assert Fir(taps=[1.0]).output_spec(spec.with_(dtype="complex64")).dtype == "complex64"


def test_errors_collected():
    with pytest.raises(ConfigErrors) as info:
        Fir(tapps=[1], methd="direct")
    assert len(info.value.errors) >= 2


def test_bad_method():
    assert isinstance(config_error(Fir, taps=[1.0], method="fast"), ConfigError)


def test_design_that_gives_nan_taps_is_refused_when_designed():
    """firwin normalises by the gain at DC; a 2-tap hann window has none (found by the parameter fuzz).
    Only the design finds it: the spec check passes, making the processor refuses it."""
    st = Fir(design={"numtaps": 2, "cutoff_hz": 100, "window": "hann"})
    spec = SignalSpec(48000, 1, 16)
    assert st.output_spec(spec) == spec
    with pytest.raises(ConfigError, match="gives NaN taps"):
        st.cpu(spec)


@pytest.mark.parametrize("name", sorted(PLAIN_WINDOWS))
def test_a_window_checked_by_name_alone_is_one_scipy_computes_by_name(name):
    """check_window accepts these names without SciPy: SciPy must give each, finite, at any length."""
    assert check_window(name) == name
    for n in (1, 2, 15, 16, 1025):
        for fftbins in (True, False):  # stft's periodic window, firwin's symmetric one
            w = ss.get_window(name, n, fftbins=fftbins)
            assert w.shape == (n,) and np.all(np.isfinite(w))


@pytest.mark.parametrize("beta", [0, 0.5, -3, 8.0, 14, 100, 699.5, 700])
def test_a_kaiser_window_checked_without_scipy_is_one_scipy_computes_finite(beta):
    """['kaiser', beta] with |beta| <= 700 is accepted without SciPy: SciPy gives it finite at any length."""
    assert not window_needs_scipy(["kaiser", beta]) and check_window(["kaiser", beta]) == ["kaiser", beta]
    for n in (1, 2, 15, 16, 1025):
        for fftbins in (True, False):
            w = ss.get_window(("kaiser", beta), n, fftbins=fftbins)
            assert w.shape == (n,) and np.all(np.isfinite(w))


@pytest.mark.parametrize("window", [["kaiser", 800.0], ["kaiser", float("nan")], ["kaiser"], ["kaiser", 8.0, 1.0],
                                    ["tukey", 0.25], "hann_periodic", ["dpss", 3.0]])
def test_other_windows_are_checked_by_scipy(window):
    assert window_needs_scipy(window)


def test_a_window_that_scipy_refuses_at_numtaps_is_refused_by_the_spec_check():
    """dpss needs NW < M/2: fine at the 16 samples the parameters are checked at, not at 5 taps."""
    st = Fir(design={"numtaps": 5, "cutoff_hz": 1000.0, "window": ["dpss", 3.0]})
    err = config_error(st.output_spec, SignalSpec(48000, 1, 16))
    assert err.path == ("design",) and "numtaps 5" in err.message
    with pytest.raises(ValueError):
        ss.firwin(5, 1000.0, window=("dpss", 3.0), fs=48000)
