"""The 'spectrum' sink: bars, axis and peak of the newest frame; errors for what it cannot draw."""

import io

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.io import SpectrumView, SynthSource
from pygpukit_dsp.io.spectrum_view import band_edges
from pygpukit_dsp.signal import SignalSpec


def test_a_sine_draws_its_peak_at_its_frequency():
    out = io.StringIO()
    view = SpectrumView(bands=32, height=6, floor_db=-120, ceil_db=0, nyquist_hz=24000, out=out)
    p = Pipeline([stages.Stft(nfft=1024, hop=512), stages.Db(floor_db=-120)], name="s", sample_rate=48000,
                 channels=1, block_size=1024, backend="cpu",
                 source=SynthSource(signal="sine", freq_hz=3000, amplitude=0.5, duration_s=0.2), sink=view)
    s = p.run()
    assert s.blocks == 10 and view.frames_drawn >= 1
    rows, axis, peak = (lambda lines: (lines[:6], lines[6], lines[7]))(out.getvalue().splitlines())
    assert all(len(r) == len(band_edges(513, 32)) - 1 for r in rows)
    assert axis.startswith("0 Hz") and axis.endswith("24.0 kHz")
    assert "at 3.0 kHz" in peak  # 3000 Hz sits on bin 64 of a 1024-point FFT at 48 kHz
    assert rows[0].count("█") <= 2  # the top row: the tone's band (and a neighbour), nothing else


def test_render_scales_levels_between_floor_and_ceiling():
    view = SpectrumView(bands=4, height=2, floor_db=-100, ceil_db=0, out=io.StringIO())
    view.open(SignalSpec(48000 / 512, 1, 2, domain="frames", bins=4))
    rows = view.render(np.array([-100.0, -75.0, -50.0, 0.0])).splitlines()
    assert rows[0] == "   █"           # top half: only the 0 dB band
    assert rows[1] == " ▄██"           # bottom half: -75 dB is a quarter of the range (4/8 of a row)
    assert "peak    0.0 dB at bin 3" in rows[3]


def test_it_only_draws_real_levels_per_bin():
    with pytest.raises(ConfigError, match="frames domain, float32"):
        SpectrumView().open(SignalSpec(48000, 2, 256))
    with pytest.raises(ConfigError, match="floor_db < ceil_db"):
        SpectrumView(floor_db=0, ceil_db=-10)
