"""The fir and sos stages check a ``design:`` without SciPy (``gk-stream validate``) and refuse exactly
what scipy.signal.firwin and iirfilter refuse; what only the design itself finds (NaN taps, SciPy's
arithmetic failing at float64's edges) is refused when the design is computed, before the first block,
as a ConfigError at the stage."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.fir import Fir, FirDesign, window_arg
from pygpukit_dsp.stages.sos import Sos, SosDesign

RATES = [48000.0, 44100.0, 3.0]  # Nyquist frequencies that are not powers of two: edges can collide


def refused_at_validate(make, spec: SignalSpec) -> bool:
    """Whether the stage's parameters or its spec check (what gk-stream validate runs) refuse it."""
    try:
        make().output_spec(spec)
    except ConfigError:
        return True
    return False


def scipy_gives(design) -> str:
    """'raises', 'non-finite' (a design the stages refuse when they compute it) or 'designs'."""
    try:
        with np.errstate(all="ignore"):
            coefficients = design()
    except Exception:  # SciPy refuses with ValueError, ZeroDivisionError, OverflowError...
        return "raises"
    return "designs" if np.all(np.isfinite(coefficients)) else "non-finite"


def colliding_edges(nyq: float) -> list[float]:
    """Two band edges that differ in Hz but not once divided by the Nyquist frequency, as SciPy divides."""
    a = 0.3 * nyq
    for _ in range(64):
        b = float(np.nextafter(a, np.inf))
        if a / nyq == b / nyq:
            return [a, b]
        a = b
    raise AssertionError(f"no colliding edges found for nyq={nyq}")


def fir_cutoffs(nyq: float) -> list:
    return [1e-320,  # divided by the Nyquist frequency it underflows to 0
            1e-3 * nyq, 0.3 * nyq, float(np.nextafter(nyq, 0)), nyq, 1.5 * nyq,
            [0.3 * nyq], [0.2 * nyq, 0.4 * nyq], [0.4 * nyq, 0.2 * nyq], [0.3 * nyq, 0.3 * nyq],
            colliding_edges(nyq), [0.1 * nyq, 0.3 * nyq, 0.5 * nyq], [0.1 * nyq, 0.3 * nyq, 0.5 * nyq, 0.7 * nyq],
            [0.2 * nyq, nyq]]


@pytest.mark.parametrize("fs", RATES)
@pytest.mark.parametrize("window", ["hamming", ["kaiser", 8.0], ["dpss", 1.5]])  # dpss: NW < numtaps/2
def test_fir_check_refuses_exactly_what_firwin_refuses(fs, window):
    spec = SignalSpec(fs, 1, 16)
    wrong = []
    for numtaps, cutoff, pass_zero in itertools.product(
            [1, 2, 3, 4, 31, 32], fir_cutoffs(fs / 2),
            [True, False, "lowpass", "highpass", "bandpass", "bandstop"]):
        design = {"numtaps": numtaps, "cutoff_hz": cutoff, "pass_zero": pass_zero, "window": window}
        ours = refused_at_validate(lambda: Fir(design=design), spec)
        theirs = scipy_gives(lambda: ss.firwin(numtaps, cutoff, window=window_arg(window),
                                               pass_zero=pass_zero, fs=fs))
        if ours != (theirs == "raises"):
            wrong.append((design, ours, theirs))
    assert wrong == []


def iir_cutoffs(nyq: float, btype: str) -> list:
    if btype in ("lowpass", "highpass"):
        return [1e-320, 1e-300 * nyq, 1e-8 * nyq, 0.3 * nyq, (1 - 1e-6) * nyq, (1 - 1e-12) * nyq,
                float(np.nextafter(nyq, 0)), nyq, 1.5 * nyq, [0.1 * nyq, 0.3 * nyq]]
    return [[0.1 * nyq, 0.3 * nyq], [0.3 * nyq, 0.1 * nyq], colliding_edges(nyq), [1e-320, 2e-320],
            [1e-12 * nyq, 1e-8 * nyq], [0.3 * nyq, (1 - 1e-6) * nyq], [1e-20 * nyq, (1 - 1e-10) * nyq],
            [0.3 * nyq, float(np.nextafter(nyq, 0))], [0.1 * nyq, nyq], 0.3 * nyq]


# (rp, rs) for each kind: the edges of SciPy's arithmetic (10**(r/10) - 1 rounding to 0, the
# elliptic modulus rounding to 0 or passing 1 when rp nears rs) and ordinary values
RIPPLES = {
    "butter": [(None, None)],
    "bessel": [(None, None)],
    "cheby1": [(None, None), (5e-324, None), (1e-16, None), (4e-16, None), (5e-16, None), (1e-15, None),
               (0.5, None), (3.0, None), (300.0, None)],
    "cheby2": [(None, None), (None, 5e-324), (None, 1e-16), (None, 4e-16), (None, 5e-16), (None, 1e-15),
               (None, 40.0), (None, 300.0)],
    "ellip": [(None, 60.0), (1.0, None), (5e-324, 60.0), (1e-320, 300.0), (1e-15, 1e-14), (1e-15, 300.0),
              (0.5, 5e-324), (0.5, 1e-16), (0.5, 60.0), (3.0, 40.0), (40.0, 40.0),
              (float(np.nextafter(40.0, 0)), 40.0), (float(np.nextafter(40.0, np.inf)), 40.0), (60.0, 40.0),
              (300.0, 0.5), (300.0, 300.0)],
}


def sos_design_edge(design: dict, nyq: float) -> bool:
    """Designs where SciPy's own arithmetic breaks down beyond what its checks can say: an edge within
    1e-12 of the Nyquist frequency (sections pairing fails), or an elliptic ripple below 1e-15 dB."""
    edges = np.atleast_1d(design["cutoff_hz"]) / nyq
    return bool(np.any(np.abs(1 - edges) < 1e-12)) or (design["kind"] == "ellip" and (design["rp"] or 1) < 1e-15)


@pytest.mark.parametrize("kind", sorted(RIPPLES))
@pytest.mark.parametrize("btype", ["lowpass", "highpass", "bandpass", "bandstop"])
def test_sos_check_refuses_exactly_what_iirfilter_refuses(kind, btype):
    fs = 48000.0
    spec = SignalSpec(fs, 1, 16)
    wrong, at_open = [], []
    for order, cutoff, (rp, rs) in itertools.product([1, 2, 3, 4, 7, 16, 64], iir_cutoffs(fs / 2, btype),
                                                     RIPPLES[kind]):
        design = {"kind": kind, "order": order, "cutoff_hz": cutoff, "btype": btype, "rp": rp, "rs": rs}
        ours = refused_at_validate(lambda: Sos(design=design), spec)
        theirs = scipy_gives(lambda: ss.iirfilter(order, cutoff, rp=rp, rs=rs, btype=btype, ftype=kind,
                                                  output="sos", fs=fs))
        if ours and theirs == "designs":
            wrong.append((design, "refused, SciPy designs it"))
        elif theirs == "raises" and not ours:
            if sos_design_edge(design, fs / 2):
                at_open.append(design)  # found by the design alone: when the stream opens
            else:
                wrong.append((design, "SciPy refuses it, the check does not"))
    assert wrong == []
    for design in at_open:
        with pytest.raises(ConfigError) as info:
            Sos(design=design).cpu(spec)
        assert info.value.path == ("design",)


def test_the_grids_meet_every_rule():
    """The comparison grids above reach each rule, so that the comparisons say something."""
    messages = set()

    def note(make_and_check):
        try:
            make_and_check()
        except ConfigError as exc:
            messages.add(exc.message)
        except ValueError:
            messages.add("parameters")  # the models' own checks (rp missing, edge count, cutoff <= 0...)

    for kind, rprs in RIPPLES.items():
        for btype, order in itertools.product(["lowpass", "bandpass"], [1, 2, 64]):
            for cutoff, (rp, rs) in itertools.product(iir_cutoffs(24000.0, btype), rprs):
                note(lambda: SosDesign(kind=kind, order=order, cutoff_hz=cutoff, btype=btype, rp=rp,
                                       rs=rs).check(48000.0))
    for numtaps, cutoff, pass_zero in itertools.product([1, 2, 31], fir_cutoffs(24000.0),
                                                        [True, False, "lowpass", "bandstop"]):
        note(lambda: FirDesign(numtaps=numtaps, cutoff_hz=cutoff, pass_zero=pass_zero).check(48000.0))
    note(lambda: FirDesign(numtaps=3, cutoff_hz=100.0, window=["dpss", 1.5]).check(48000.0))
    for expected in [
            "is not below the Nyquist frequency", "filter critical frequencies must be greater than 0",
            "Wn[0] must be less than Wn[1]", "float division by zero", "Cannot design a filter",
            "kind 'ellip' needs rp no larger than rs", "the design overflows float64", "parameters",
            "frequencies must be greater than 0 and less than fs/2", "must be strictly increasing",
            'if pass_zero=="lowpass"', 'if pass_zero=="bandstop"', "even number of coefficients",
            "window ['dpss', 1.5] with numtaps 3"]:
        assert any(expected in m for m in messages), (expected, sorted(messages))


# --- what only the design finds: refused when the stream opens -------------------------------


@pytest.mark.parametrize("stage", [
    lambda: Fir(design={"numtaps": 2, "cutoff_hz": 100, "window": "hann"}),  # no gain where firwin normalises
    lambda: Sos(design={"kind": "cheby2", "order": 64, "cutoff_hz": 23999, "rs": 60}),  # NaN sections
    lambda: Sos(design={"kind": "cheby1", "order": 40, "cutoff_hz": [23000.0, float(np.nextafter(24000.0, 0))],
                        "btype": "bandstop", "rp": 10.0}),  # SciPy's section pairing fails
    lambda: Sos(design={"kind": "ellip", "order": 3, "cutoff_hz": 1000.0, "rp": 1e-16, "rs": 1e-15}),
])
def test_a_design_that_only_designing_refuses_is_refused_before_the_first_block(stage):
    st = stage()
    st.name, st.where = "lp", "p.yaml:7:5"
    spec = SignalSpec(48000, 1, 16)
    assert st.output_spec(spec) == spec  # validate: passes
    with pytest.raises(ConfigError) as info:
        st.cpu(spec)  # the stream opening: the design is computed
    err = info.value
    assert err.where == "p.yaml:7:5" and err.path == ("design",)
    assert err.message.startswith(f"stage 'lp' ({st.type}): design: ")


def test_the_spec_check_designs_nothing(monkeypatch):
    def no_design(self, sample_rate):
        raise AssertionError("designed during spec propagation")

    monkeypatch.setattr(FirDesign, "taps", no_design)
    monkeypatch.setattr(SosDesign, "sos", no_design)
    spec = SignalSpec(48000, 2, 64)
    assert Fir(design={"numtaps": 31, "cutoff_hz": 4000.0}).output_spec(spec) == spec
    assert Fir(design={"numtaps": 31, "cutoff_hz": 4000.0}).output_spec(spec.with_(dtype="complex64")).is_complex
    assert Sos(design={"order": 4, "cutoff_hz": 4000.0}).output_spec(spec) == spec


def test_a_design_is_computed_once_per_sample_rate():
    fir, sos = Fir(design={"numtaps": 31, "cutoff_hz": 4000.0}), Sos(design={"order": 4, "cutoff_hz": 4000.0})
    a, b = SignalSpec(48000, 1, 64), SignalSpec(32000, 1, 64)
    assert fir.taps_for(a) is fir.taps_for(a) and sos.sos_for(a) is sos.sos_for(a)
    np.testing.assert_array_equal(fir.taps_for(b), ss.firwin(31, 4000.0, fs=32000))
    np.testing.assert_array_equal(sos.sos_for(b), ss.iirfilter(4, 4000.0, btype="lowpass", output="sos", fs=32000))


NAN_TAPS = textwrap.dedent("""\
    version: 1
    name: p
    sample_rate: 48000
    channels: 1
    source: {type: synth, signal: noise, seed: 1, duration_s: 0.1}
    stages:
      - {type: gain, db: 0}
      - {type: fir, name: lp, design: {numtaps: 2, cutoff_hz: 100, window: hann}}
    sink: {type: "null"}
    """)


def test_gk_stream_validate_passes_and_run_refuses_a_design_with_nan_taps_at_the_stage(tmp_path):
    (tmp_path / "p.yaml").write_text(NAN_TAPS)

    def gk(*args):
        return subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", *args], cwd=tmp_path, timeout=120,
                              capture_output=True, text=True, env={**os.environ, "GK_LIBCUDA": "/nonexistent"})

    v = gk("validate", "p.yaml")
    assert v.returncode == 0 and "pipeline p: ok" in v.stdout
    r = gk("run", "p.yaml", "--backend", "cpu")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "p.yaml:8:5: stage 'lp' (fir): design: " in r.stderr and "NaN taps" in r.stderr
    assert "blocks" not in r.stdout  # refused before the first block
