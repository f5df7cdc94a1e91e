"""Non-finite input samples: the ``nonfinite`` policy (error | zero | pass), counted and located,
on the cpu backend, through ``process()``, ``run()`` and gk-stream (the GPU side is in
tests/backends/test_cuda_nonfinite.py)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import soundfile as sf

from pygpukit_dsp import ConfigError, Pipeline, stages
from pygpukit_dsp.io import NumpySink, NumpySource
from pygpukit_dsp.nonfinite import NonFiniteCount, NonFiniteInput, find_nonfinite, zeroed

from .test_cli import gk

BUTTER = {"kind": "butter", "order": 4, "cutoff_hz": 1000}


def _signal(channels=2, n=3000, dtype=np.float32):
    x = np.random.default_rng(0).standard_normal((channels, n)).astype(dtype)
    x[0, 700] = np.nan
    x[1, 1000] = np.inf
    return x


def _sos(**kw):
    return Pipeline([stages.Sos(design=BUTTER)], sample_rate=48000, block_size=256, **kw)


def test_find_nonfinite_locates_the_first_and_counts_all():
    x = _signal()
    x[1, 5] = -np.inf
    count, channel, sample, value = find_nonfinite(x)
    assert (count, channel, sample) == (3, 0, 700)
    assert np.isnan(value)
    assert find_nonfinite(np.ones((2, 8), np.float32))[0] == 0
    big = np.full((1, 4), 3e38, np.float32)  # finite samples whose sum overflows: not non-finite
    assert find_nonfinite(big)[0] == 0


def test_zeroed_copies_and_keeps_the_callers_array():
    x = _signal()
    z = zeroed(x)
    assert np.isfinite(z).all() and z[0, 700] == 0 and z[1, 1000] == 0
    assert np.isnan(x[0, 700])


def test_process_error_names_sample_channel_and_block():
    with pytest.raises(NonFiniteInput) as info:
        _sos().process(_signal())
    count = info.value.count
    assert (count.first_sample, count.first_channel, count.first_block) == (700, 0, 2)
    assert count.first_value == "nan"
    assert "sample 700" in str(info.value) and "nonfinite: zero" in str(info.value)


def test_process_zero_equals_the_zeroed_input_and_pass_lets_nan_through_without_warnings():
    x = _signal()
    y = _sos().process(x, nonfinite="zero")
    assert np.isfinite(y).all()
    np.testing.assert_array_equal(y, _sos().process(zeroed(x)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no raw RuntimeWarning from NumPy/SciPy
        y = Pipeline([stages.Fir(design={"numtaps": 63, "cutoff_hz": 4000})], sample_rate=48000,
                     block_size=256, nonfinite="pass").process(x)
    assert np.isnan(y).any()


def test_complex_input_locates_the_sample():
    x = np.ones((1, 600), np.complex64)
    x[0, 333] = complex(1, np.inf)
    p = Pipeline([stages.Gain(db=-6)], sample_rate=1e6, block_size=128)
    with pytest.raises(NonFiniteInput) as info:
        p.process(x)
    assert (info.value.count.first_sample, info.value.count.first_value) == (333, "inf")


def test_policy_is_validated_with_a_hint():
    with pytest.raises(ConfigError, match="nonfinite must be one of"):
        _sos(nonfinite="zeros")
    with pytest.raises(ConfigError, match="did you mean 'zero'"):
        _sos().process(_signal(), nonfinite="zeros")


def test_run_counts_into_the_summary_and_round_trips_yaml():
    x = _signal()
    p = _sos(nonfinite="zero")
    p.source, p.sink = NumpySource(array=x), NumpySink()
    summary = p.run()
    assert summary.ended_by == "source end"
    assert summary.nonfinite == {"policy": "zero", "count": 2, "first_block": 2, "first_sample": 700,
                                 "first_channel": 0, "first_time_s": pytest.approx(700 / 48000),
                                 "first_value": "nan"}
    assert "nonfinite: zero" in summary.format()
    assert "nonfinite: zero" in p.to_yaml()


def test_live_audio_sources_default_to_zero_and_data_sources_to_error():
    from pygpukit_dsp.io import AudioDeviceSource, AudioFileSource, DuplexSource, SynthSource

    assert AudioDeviceSource.nonfinite_default == DuplexSource.nonfinite_default == "zero"
    assert AudioFileSource.nonfinite_default == NumpySource.nonfinite_default == SynthSource.nonfinite_default == "error"


def test_count_record_describes_itself():
    c = NonFiniteCount("pass")
    assert c.describe() == ""
    c.add(3, block=1, sample=10, channel=2, value=float("-inf"), sample_rate=10.0)
    c.add(1, block=4, sample=99, channel=0, value=float("nan"), sample_rate=10.0)
    assert (c.count, c.first_sample, c.first_channel, c.first_value, c.first_time_s) == (4, 10, 2, "-inf", 1.0)


# ----------------------------------------------------------------------------- through gk-stream


def _wav_with_nan(tmp_path):
    t = np.arange(48000) / 48000
    x = np.stack([0.3 * np.sin(2 * np.pi * 440 * t)] * 2, axis=1).astype(np.float32)
    x[4900, 0] = np.nan
    x[20000, 1] = np.inf
    sf.write(tmp_path / "in.wav", x, 48000, subtype="FLOAT")
    return x


def _yaml(tmp_path, policy=None, stage="{type: sos, design: {kind: butter, order: 4, cutoff_hz: 1000}}"):
    text = "version: 1\n" + (f"nonfinite: {policy}\n" if policy else "") + (
        f"source: {{type: file, path: in.wav}}\nstages:\n  - {stage}\n"
        "sink: {type: file, path: out.wav, subtype: PCM_16}\n")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def test_cli_default_error_stops_with_the_place_and_writes_stats(tmp_path):
    _wav_with_nan(tmp_path)
    stats = tmp_path / "s.json"
    r = gk("run", _yaml(tmp_path), "--backend", "cpu", "--stats-json", stats)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "RuntimeWarning" not in r.stderr
    assert "sample 4900" in r.stderr and "channel 0" in r.stderr
    data = json.loads(stats.read_text())
    assert data["ended_by"] == "fault" and data["nonfinite"]["first_sample"] == 4900
    assert "non-finite" in data["fault"]


def test_cli_zero_keeps_the_filter_state_clean(tmp_path):
    x = _wav_with_nan(tmp_path)
    stats = tmp_path / "s.json"
    r = gk("run", _yaml(tmp_path, "zero"), "--backend", "cpu", "--stats-json", stats)
    assert r.returncode == 0, r.stderr
    data = json.loads(stats.read_text())
    assert data["nonfinite"]["count"] == 2 and data["nonfinite"]["first_channel"] == 0
    assert data["sink_stats"].get("clipped", 0) == 0
    y, _ = sf.read(tmp_path / "out.wav", dtype="float32")
    ref = _sos().process(zeroed(x.T)).T
    assert np.abs(y[5000:]).max() < 0.5  # no full-scale DC after the NaN
    np.testing.assert_allclose(y, ref, atol=2 / 32768)


def test_cli_pass_prints_no_raw_warning(tmp_path):
    _wav_with_nan(tmp_path)
    r = gk("run", _yaml(tmp_path, "pass", "{type: fir, design: {numtaps: 63, cutoff_hz: 4000}}"), "--backend", "cpu")
    assert r.returncode == 0, r.stderr
    assert "RuntimeWarning" not in r.stderr and "Warning" not in r.stderr
    assert "non-finite input samples 2, passed through" in r.stdout


def test_cli_bad_policy_is_a_config_error_at_its_place(tmp_path):
    _wav_with_nan(tmp_path)
    r = gk("validate", _yaml(tmp_path, "maybe"))
    assert r.returncode == 2
    assert "p.yaml:2:12" in r.stderr and "nonfinite must be one of" in r.stderr
