from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.sos import Sos

from .conftest import assert_documented, config_error, rel_err, run_stage, signal, stream

N = 2000
FS = 48000.0


def test_documented():
    assert_documented(Sos)


@pytest.mark.parametrize("block", [100, 256])  # 2000 = 20*100; 256 leaves a partial block
@pytest.mark.parametrize("complex_", [False, True])
def test_explicit_sos_matches_sosfilt(rng, block, complex_):
    sos = ss.butter(6, 0.1, output="sos")
    x = signal(rng, (3, N), complex_)
    spec = SignalSpec(FS, 3, block, dtype="complex64" if complex_ else "float32")
    out = run_stage(Sos(sos=sos), spec, x)
    ref = ss.sosfilt(sos, x.astype(np.complex128 if complex_ else np.float64), axis=-1)
    assert rel_err(out, ref) < 1e-6


@pytest.mark.parametrize("design", [
    {"kind": "butter", "order": 4, "cutoff_hz": 1000.0},
    {"kind": "cheby1", "order": 5, "cutoff_hz": 2000.0, "btype": "highpass", "rp": 1.0},
    {"kind": "cheby2", "order": 4, "cutoff_hz": [500.0, 3000.0], "btype": "bandpass", "rs": 50.0},
    {"kind": "ellip", "order": 3, "cutoff_hz": [1000.0, 2000.0], "btype": "bandstop", "rp": 0.5, "rs": 60.0},
    {"kind": "bessel", "order": 4, "cutoff_hz": 5000.0},
])
def test_designs_match_iirfilter(rng, design):
    stage = Sos(design=design)
    d = dict(design)
    expected = ss.iirfilter(d["order"], d["cutoff_hz"], rp=d.get("rp"), rs=d.get("rs"),
                            btype=d.get("btype", "lowpass"), ftype=d["kind"], output="sos", fs=FS)
    spec = SignalSpec(FS, 2, 128)
    np.testing.assert_allclose(stage.sos_for(spec), expected)
    x = signal(rng, (2, 1000))
    assert rel_err(run_stage(stage, spec, x), ss.sosfilt(expected, x.astype(np.float64))) < 1e-6


def test_state_is_float64(rng):
    # a narrow lowpass: float32 state would drift visibly from the float64 reference
    sos = ss.butter(8, 0.005, output="sos")
    x = signal(rng, (1, 20000))
    out = run_stage(Sos(sos=sos), SignalSpec(FS, 1, 64), x)
    assert rel_err(out, ss.sosfilt(sos, x.astype(np.float64))) < 1e-6


def test_reset_restarts_state(rng):
    proc = Sos(sos=ss.butter(2, 0.2, output="sos")).cpu(SignalSpec(FS, 1, 64))
    x = signal(rng, (1, 256))
    first = stream(proc, x, 64)
    proc.reset()
    np.testing.assert_array_equal(stream(proc, x, 64), first)


@pytest.mark.parametrize("design,msg", [
    ({"kind": "cheby1", "order": 3, "cutoff_hz": 100.0}, "needs rp"),
    ({"kind": "cheby2", "order": 3, "cutoff_hz": 100.0}, "needs rs"),
    ({"kind": "ellip", "order": 3, "cutoff_hz": 100.0}, "rp (passband ripple, dB, e.g. 1.0) and rs"),
    ({"kind": "butter", "order": 3, "cutoff_hz": 100.0, "btype": "bandpass"}, "[low_hz, high_hz]"),
    ({"kind": "butter", "order": 3, "cutoff_hz": [100.0, 200.0]}, "a single frequency"),
    ({"kind": "butterworth", "order": 3, "cutoff_hz": 100.0}, "kind"),
    ({"kind": "butter", "order": 0, "cutoff_hz": 100.0}, "order"),
])
def test_design_rules(design, msg):
    assert msg in str(config_error(Sos, design=design))


def test_cutoff_above_nyquist():
    stage = Sos(design={"order": 2, "cutoff_hz": 5000.0})
    err = config_error(stage.output_spec, SignalSpec(8000, 1, 64))
    assert "4000" in str(err) and err.path == ("design", "cutoff_hz")


def test_sos_shape_and_a0():
    assert "(n_sections, 6)" in str(config_error(Sos, sos=[[1, 2, 3]]))
    assert "a0" in str(config_error(Sos, sos=[[1, 0, 0, 2, 0, 0]]))
    assert Sos(sos=[1, 0, 0, 1, 0, 0]).params.sos.shape == (1, 6)


def test_exactly_one_and_did_you_mean():
    assert "none was given" in str(config_error(Sos))
    assert "'sos' and 'design'" in str(config_error(Sos, sos=[[1, 0, 0, 1, 0, 0]],
                                                       design={"order": 1, "cutoff_hz": 1.0}))
    assert "did you mean 'btype'" in str(config_error(Sos, design={"order": 1, "cutoff_hz": 1.0,
                                                                     "btyp": "lowpass"}))


def test_spec_rules():
    stage = Sos(sos=ss.butter(2, 0.2, output="sos"))
    spec = SignalSpec(FS, 2, 64, dtype="complex64")
    assert stage.output_spec(spec) == spec
    frames = SignalSpec(100, 1, 4, dtype="complex64", domain="frames", bins=8)
    assert "time-domain" in str(config_error(stage.output_spec, frames))


def test_design_with_nan_coefficients_is_refused_when_designed():
    """Only the design finds NaN sections: the spec check passes, making the processor refuses it."""
    st = Sos(design={"kind": "cheby2", "order": 64, "cutoff_hz": 23999, "rs": 60})
    spec = SignalSpec(48000, 1, 16)
    assert st.output_spec(spec) == spec
    assert "gives NaN or infinite coefficients" in str(config_error(st.cpu, spec))


@pytest.mark.parametrize("design,msg", [
    ({"kind": "ellip", "order": 4, "cutoff_hz": 1000.0, "rp": 60.0, "rs": 40.0}, "needs rp no larger than rs"),
    ({"kind": "cheby1", "order": 4, "cutoff_hz": 1000.0, "rp": 1e-16}, "rp = 1e-16 dB is too small"),
    ({"kind": "butter", "order": 64, "cutoff_hz": 23999.9999}, "overflows float64"),
])
def test_what_iirfilter_refuses_is_refused_by_the_spec_check_with_a_hint(design, msg):
    err = config_error(Sos(design=design).output_spec, SignalSpec(48000, 1, 16))
    assert msg in err.message and err.hint and err.path == ("design",)
