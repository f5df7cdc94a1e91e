from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.fft import Fft, Ifft, Irfft, Rfft

from .conftest import assert_documented, config_error, rel_err, run_stage, signal


@pytest.mark.parametrize("cls", [Fft, Ifft, Rfft, Irfft])
def test_documented(cls):
    assert_documented(cls)


def frames_spec(bins: int, block: int = 4, channels: int = 2) -> SignalSpec:
    return SignalSpec(100.0, channels, block, dtype="complex64", domain="frames", bins=bins)


@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("total", [1024, 1000])  # 1000: the last frame is zero-padded
def test_fft_frames(rng, complex_, total):
    n, block = 64, 256
    x = signal(rng, (2, total), complex_)
    spec = SignalSpec(48000, 2, block, dtype="complex64" if complex_ else "float32")
    stage = Fft(n=n)
    out_spec = stage.output_spec(spec)
    assert (out_spec.domain, out_spec.bins, out_spec.block_size, out_spec.sample_rate) == \
        ("frames", 64, 4, 48000 / 64)
    out = run_stage(stage, spec, x)
    frames = -(-total // n)
    padded = np.zeros((2, frames * n), x.dtype)
    padded[:, :total] = x
    ref = np.fft.fft(padded.astype(np.complex128).reshape(2, frames, n), axis=-1)
    assert out.shape == (2, frames, n) and rel_err(out, ref) < 1e-6


@pytest.mark.parametrize("n", [64, 63])
def test_rfft_frames(rng, n):
    x = signal(rng, (1, n * 10))
    spec = SignalSpec(1000, 1, n * 2)
    stage = Rfft(n=n)
    assert stage.output_spec(spec).bins == n // 2 + 1
    out = run_stage(stage, spec, x)
    ref = np.fft.rfft(x.astype(np.float64).reshape(1, 10, n), axis=-1)
    assert rel_err(out, ref) < 1e-6


def test_default_n_is_block_size(rng):
    spec = SignalSpec(1000, 1, 128)
    out_spec = Fft().output_spec(spec)
    assert (out_spec.bins, out_spec.block_size) == (128, 1)


@pytest.mark.parametrize("block", [4, 3])
def test_ifft_inverts_fft(rng, block):
    X = signal(rng, (2, 10, 16), complex_=True)
    out = run_stage(Ifft(), frames_spec(16, block), X)
    ref = np.fft.ifft(X.astype(np.complex128), axis=-1).reshape(2, 160)
    assert out.dtype == np.complex64 and rel_err(out, ref) < 1e-6


@pytest.mark.parametrize("n", [30, 31])
def test_irfft(rng, n):
    bins = n // 2 + 1
    X = signal(rng, (2, 9, bins), complex_=True)
    stage = Irfft(n=n) if n % 2 else Irfft()
    spec = frames_spec(bins, 4)
    out_spec = stage.output_spec(spec)
    assert (out_spec.dtype, out_spec.block_size, out_spec.sample_rate) == ("float32", 4 * n, 100.0 * n)
    out = run_stage(stage, spec, X)
    ref = np.fft.irfft(X.astype(np.complex128), n, axis=-1).reshape(2, 9 * n)
    assert rel_err(out, ref) < 1e-6


def test_round_trip_rfft_irfft(rng):
    x = signal(rng, (1, 512))
    spec = SignalSpec(1000, 1, 128)
    frames = run_stage(Rfft(n=32), spec, x)
    back = run_stage(Irfft(), Rfft(n=32).output_spec(spec), frames)
    np.testing.assert_allclose(back, x, atol=1e-5)


def test_block_divisibility_suggests_sizes():
    err = config_error(Fft(n=64).output_spec, SignalSpec(48000, 1, 1000))
    assert "multiple of 64" in str(err) and "960 or 1024" in str(err)


def test_rfft_needs_real():
    err = config_error(Rfft(n=8).output_spec, SignalSpec(1, 1, 8, dtype="complex64"))
    assert "fft for complex" in str(err)


def test_forward_needs_time_and_inverse_needs_frames():
    assert "time-domain" in str(config_error(Fft(n=4).output_spec, frames_spec(4)))
    assert "frames-domain" in str(config_error(Ifft().output_spec, SignalSpec(1, 1, 8)))
    assert "frames-domain" in str(config_error(Irfft().output_spec, SignalSpec(1, 1, 8)))


def test_inverse_n_must_match():
    err = config_error(Ifft(n=8).output_spec, frames_spec(16))
    assert "16 bins" in str(err) and err.path == ("n",)
    err = config_error(Irfft(n=40).output_spec, frames_spec(16))
    assert "30 or 31" in str(err)
    assert Irfft(n=31).output_spec(frames_spec(16)).block_size == 4 * 31


def test_n_must_be_positive_and_did_you_mean():
    assert "n" in str(config_error(Fft, n=0))
    assert "did you mean 'n'" in str(config_error(Fft, nn=4))
