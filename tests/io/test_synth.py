import time

import numpy as np
import pytest
import scipy.signal as ssig

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.io.base import StreamFormat
from pygpukit_dsp.io.synth import SynthSource

SR = 48000.0


def opened(channels=1, dtype="float32", sr=SR, **params) -> SynthSource:
    src = SynthSource(**params)
    src.open(StreamFormat(sample_rate=sr, channels=channels, dtype=dtype))
    return src


def read_split(src: SynthSource, sizes) -> np.ndarray:
    return np.concatenate([src.read(n) for n in sizes], axis=1)


def test_format_comes_from_the_request_with_float32_default():
    src = SynthSource(duration_s=0.5)
    fmt = src.open(StreamFormat(sample_rate=SR, channels=3))
    assert fmt == StreamFormat(sample_rate=SR, channels=3, dtype="float32", length=24000)
    block = src.read(100)
    assert block.shape == (3, 100) and block.dtype == np.float32


@pytest.mark.parametrize("missing", ["sample_rate", "channels"])
def test_needs_sample_rate_and_channels(missing):
    req = {"sample_rate": SR, "channels": 1}
    req[missing] = None
    with pytest.raises(ConfigError, match=f"synth needs {missing}: set it at the pipeline level"):
        SynthSource().open(StreamFormat(**req))


SIGNALS = [
    dict(signal="sine", freq_hz=1234.5),
    dict(signal="chirp", f0_hz=100, f1_hz=9000, sweep_s=0.01),
    dict(signal="multitone", freqs_hz=[300, 4100.5]),
    dict(signal="noise", seed=3),
    dict(signal="noise", seed=3, channel_delay_samples=[0, 2.5]),
    dict(signal="sine", noise_std=0.1, seed=9, channel_delay_samples=[0.25, -3]),
]


@pytest.mark.parametrize("dtype", ["float32", "complex64"])
@pytest.mark.parametrize("params", SIGNALS)
def test_samples_do_not_depend_on_how_reads_are_split(params, dtype):
    whole = opened(2, dtype, **params).read(10000)
    split = read_split(opened(2, dtype, **params), [1, 7, 4095, 1, 300, 5596])
    assert whole.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(whole, split)


def test_sine_is_a_cosine_of_the_absolute_index_with_fractional_channel_delay():
    src = opened(2, freq_hz=1000, amplitude=0.25, channel_delay_samples=[0, 2.5])
    src.read(1000)  # the phase continues across reads
    x = src.read(500)
    n = np.arange(1000, 1500)
    np.testing.assert_allclose(x[0], 0.25 * np.cos(2 * np.pi * 1000 * n / SR), atol=1e-6)
    np.testing.assert_allclose(x[1], 0.25 * np.cos(2 * np.pi * 1000 * (n - 2.5) / SR), atol=1e-6)


def test_complex_tone_is_analytic():
    x = opened(1, "complex64", freq_hz=-3000, amplitude=1.0).read(256)[0]
    n = np.arange(256)
    np.testing.assert_allclose(x, np.exp(2j * np.pi * -3000 * n / SR), atol=1e-5)


def test_chirp_matches_scipy_and_repeats_every_sweep():
    src = opened(1, f0_hz=200, f1_hz=12000, sweep_s=0.05, signal="chirp", amplitude=1.0)
    x = src.read(4800)[0]  # two sweeps of 2400 samples
    t = np.arange(2400) / SR
    ref = ssig.chirp(t, f0=200, t1=0.05, f1=12000, method="linear")
    np.testing.assert_allclose(x[:2400], ref, atol=2e-5)
    np.testing.assert_allclose(x[2400:], ref, atol=2e-5)


def test_multitone_is_the_sum_of_its_tones():
    x = opened(1, signal="multitone", freqs_hz=[500, 7000], amplitude=0.2).read(300)[0]
    n = np.arange(300)
    ref = 0.2 * (np.cos(2 * np.pi * 500 * n / SR) + np.cos(2 * np.pi * 7000 * n / SR))
    np.testing.assert_allclose(x, ref, atol=1e-6)


def test_noise_is_seeded_independent_per_channel_with_the_requested_std():
    a = opened(2, signal="noise", amplitude=0.3, seed=5).read(40000)
    b = opened(2, signal="noise", amplitude=0.3, seed=5).read(40000)
    c = opened(2, signal="noise", amplitude=0.3, seed=6).read(40000)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert abs(np.std(a[0]) - 0.3) < 0.01
    assert abs(np.corrcoef(a[0], a[1])[0, 1]) < 0.03


def test_complex_noise_has_total_power_std_squared():
    z = opened(1, "complex64", signal="noise", amplitude=0.0, noise_std=0.5, seed=2).read(40000)[0]
    assert abs(np.mean(np.abs(z) ** 2) - 0.25) < 0.01
    assert abs(np.var(z.real) - np.var(z.imag)) < 0.01


def test_noise_signal_with_integer_delays_is_one_shifted_signal():
    x = opened(3, signal="noise", seed=1, channel_delay_samples=[0, 3, -2]).read(1000)
    np.testing.assert_array_equal(x[1, 3:], x[0, :-3])
    np.testing.assert_array_equal(x[2, :-2], x[0, 2:])


def test_noise_signal_with_a_fractional_delay_has_the_delay_phase_in_band():
    d = 0.5
    x = opened(2, signal="noise", seed=4, channel_delay_samples=[0, d]).read(1 << 15).astype(np.float64)
    X0, X1 = np.fft.rfft(x[0]), np.fft.rfft(x[1])
    f = np.fft.rfftfreq(x.shape[1])  # cycles per sample
    band = (f > 0.01) & (f < 0.3)
    ratio = X1[band] / X0[band]
    expected = np.exp(-2j * np.pi * f[band] * d)
    assert np.median(np.abs(ratio - expected)) < 0.02


def test_duration_ends_the_stream_with_one_short_read():
    src = SynthSource(duration_s=0.01)  # 480 samples
    assert src.open(StreamFormat(SR, 1)).length == 480
    sizes = [src.read(200).shape[1] for _ in range(4)]
    assert sizes == [200, 200, 80, 0]
    assert src.stats() == {"samples": 480, "overflows": 0, "underflows": 0, "dropped": 0}


def test_frequency_above_nyquist_is_a_config_error():
    with pytest.raises(ConfigError, match=r"freq_hz 30000 Hz is above the Nyquist frequency 24000 Hz"):
        opened(1, freq_hz=30000)


def test_channel_delay_count_must_match_channels():
    with pytest.raises(ConfigError, match="channel_delay_samples has 2 values but the pipeline has 4 channels"):
        opened(4, channel_delay_samples=[0, 1])


def test_multitone_needs_freqs():
    with pytest.raises(ConfigError, match="needs freqs_hz"):
        SynthSource(signal="multitone")


def test_unknown_signal_lists_the_choices():
    with pytest.raises(ConfigError, match="sine', 'chirp', 'noise' or 'multitone'"):
        SynthSource(signal="square")


def test_realtime_rate_paces_reads_at_the_sample_clock():
    src = SynthSource(rate="realtime", freq_hz=100)
    assert src.realtime and not SynthSource().realtime
    src.open(StreamFormat(sample_rate=1000, channels=1))
    t0 = time.perf_counter()
    for _ in range(3):
        src.read(10)
    assert time.perf_counter() - t0 >= 0.025  # 30 samples at 1 kHz, the first read starts the clock


def test_to_config_keeps_non_default_parameters():
    src = SynthSource(signal="chirp", f1_hz=5000, seed=2)
    assert src.to_config() == {"type": "synth", "signal": "chirp", "f1_hz": 5000.0, "seed": 2}


@pytest.mark.parametrize("params", [dict(signal="sine", freq_hz=440.0), dict(signal="noise", noise_std=0.1)])
def test_very_large_reads_are_generated_in_pieces_with_the_same_samples(params):
    from pygpukit_dsp.io import synth

    big = opened(2, "complex64", **params).read(synth._MAX_GENERATE * 2 + 5)
    parts = read_split(opened(2, "complex64", **params), [synth._MAX_GENERATE - 1, synth._MAX_GENERATE + 6])
    np.testing.assert_array_equal(big[:, :parts.shape[1]], parts)
    assert big.shape == (2, synth._MAX_GENERATE * 2 + 5)
