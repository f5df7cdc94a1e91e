"""The 'spectrum' sink: bars, axis and peak of the newest frame; errors for what it cannot draw."""

import io
from pathlib import Path

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


LIVE_SPECTRUM = Path(__file__).resolve().parents[2] / "pipelines" / "live_spectrum.yaml"


def _live_spectrum_frame(amplitude: float, freq_hz: float):
    """pipelines/live_spectrum.yaml's stages and view (its own parameters), fed a sine."""
    p = Pipeline.from_yaml(LIVE_SPECTRUM)
    view = SpectrumView(**p.sink.params.model_dump(), out=io.StringIO())
    run = Pipeline(p.stages, name="t", sample_rate=p.sample_rate, channels=1, block_size=p.block_size,
                   backend="cpu", sink=view,
                   source=SynthSource(signal="sine", freq_hz=freq_hz, amplitude=amplitude, duration_s=0.5))
    run.run()
    return p, view.last_frame


@pytest.mark.parametrize("amplitude", [1.0, 0.3])
def test_live_spectrum_reads_dbfs(amplitude):
    # 1500 Hz is bin 64 of the 2048-point STFT at 48 kHz: on a bin, no scalloping loss
    p, frame = _live_spectrum_frame(amplitude, 1500.0)
    assert frame.peak_bin == 64 and frame.peak_hz == pytest.approx(1500.0, abs=12)
    assert frame.peak_db == pytest.approx(20 * np.log10(amplitude), abs=0.01)  # full scale: 0 dBFS
    assert frame.band_db.max() == pytest.approx(frame.peak_db)


def test_live_spectrum_draws_the_bands_it_asks_for():
    p, frame = _live_spectrum_frame(0.5, 1000.0)
    assert p.sink.params.bands == 48
    assert frame.band_db.shape == (48,) and frame.edges.shape == (49,)
    assert frame.edges[0] == 0 and frame.edges[-1] == 1025 and np.all(np.diff(frame.edges) >= 1)


@pytest.mark.parametrize("bins,bands", [(1025, 48), (513, 32), (33, 32), (9, 8), (4, 4), (1025, 512)])
def test_band_edges_give_exactly_the_bands_asked_for(bins, bands):
    edges = band_edges(bins, bands)
    assert len(edges) == bands + 1 and edges[0] == 0 and edges[-1] == bins
    assert np.all(np.diff(edges) >= 1)  # no empty band
    if bins > bands:
        assert edges[1] == 2  # DC joins bin 1 in the first band


def test_more_bands_than_bins_is_a_config_error():
    with pytest.raises(ConfigError, match="asks for 64 bands but the spectrum has 33 bins") as exc:
        SpectrumView(bands=64).open(SignalSpec(48000 / 64, 1, 1, domain="frames", bins=33))
    assert "bands to 33 or fewer" in exc.value.hint
