from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.stft import Stft

from .conftest import assert_documented, config_error, rel_err, run_stage, signal, stream

N = 1000


def test_documented():
    assert_documented(Stft)


def scipy_stft(x: np.ndarray, nfft: int, hop: int, window, complex_: bool, frames: int,
               *, use_p_shift: bool = False) -> np.ndarray:
    """Reference frames (C, frames, bins) from ShortTimeFFT with the documented alignment."""
    win = ss.get_window(window, nfft)
    sft = ss.ShortTimeFFT(win, hop, fs=1.0, mfft=nfft, phase_shift=None,
                          fft_mode="twosided" if complex_ else "onesided")
    half_up = nfft - nfft // 2  # ceil(nfft/2)
    x64 = x.astype(np.complex128 if complex_ else np.float64)
    if use_p_shift:
        assert half_up % hop == 0
        p0 = 1 - half_up // hop
        s = sft.stft(x64, p0=p0, p1=p0 + frames, axis=-1)
    else:
        s = sft.stft(x64, p0=0, p1=frames, k_offset=hop - half_up, axis=-1)
    return np.swapaxes(s, -1, -2)


@pytest.mark.parametrize("nfft,hop,window", [
    (64, 32, "hann"), (64, 16, "hamming"), (63, 21, ("kaiser", 6.0)), (50, 50, "boxcar"),
    (16, 24, "hann"),  # hop > nfft: samples between frames are skipped
])
@pytest.mark.parametrize("complex_", [False, True])
def test_matches_short_time_fft(rng, nfft, hop, window, complex_):
    block = hop * 4
    x = signal(rng, (2, N), complex_)
    spec = SignalSpec(8000, 2, block, dtype="complex64" if complex_ else "float32")
    params = {"nfft": nfft, "hop": hop, "window": list(window) if isinstance(window, tuple) else window}
    stage = Stft(**params)
    out = run_stage(stage, spec, x)
    frames = -(-N // hop)
    assert out.shape == (2, frames, nfft if complex_ else nfft // 2 + 1)
    assert rel_err(out, scipy_stft(x, nfft, hop, window, complex_, frames)) < 1e-5


@pytest.mark.parametrize("nfft,hop", [(64, 32), (64, 16), (64, 8), (48, 24)])
def test_p_shift_alignment(rng, nfft, hop):
    x = signal(rng, (1, N))
    out = run_stage(Stft(nfft=nfft, hop=hop), SignalSpec(8000, 1, hop * 2), x)
    ref = scipy_stft(x, nfft, hop, "hann", False, out.shape[1], use_p_shift=True)
    assert rel_err(out, ref) < 1e-5


@pytest.mark.parametrize("block", [64, 96, 992])  # 3000 samples: each leaves a partial block
def test_block_size_independent(rng, block):
    x = signal(rng, (1, 3000))
    full = run_stage(Stft(nfft=128, hop=32), SignalSpec(8000, 1, 32), x)
    out = run_stage(Stft(nfft=128, hop=32), SignalSpec(8000, 1, block), x)
    np.testing.assert_allclose(out, full, rtol=1e-5, atol=1e-5)


def test_final_partial_block_frame_count(rng):
    x = signal(rng, (1, 70))
    out = run_stage(Stft(nfft=32, hop=16), SignalSpec(8000, 1, 32), x)
    assert out.shape[1] == 5  # ceil(70/16)


def test_default_hop_and_spec():
    stage = Stft(nfft=256)
    assert stage.hop == 128
    out = stage.output_spec(SignalSpec(48000, 2, 1024))
    assert (out.domain, out.bins, out.block_size, out.sample_rate, out.dtype) == \
        ("frames", 129, 8, 48000 / 128, "complex64")
    assert stage.output_spec(SignalSpec(48000, 2, 1024, dtype="complex64")).bins == 256


def test_reset_restarts_state(rng):
    proc = Stft(nfft=64, hop=16).cpu(SignalSpec(8000, 1, 64))
    x = signal(rng, (1, 256))
    first = stream(proc, x, 64)
    proc.reset()
    np.testing.assert_array_equal(stream(proc, x, 64), first)


def test_block_divisibility_suggests_sizes():
    err = config_error(Stft(nfft=512, hop=256).output_spec, SignalSpec(48000, 1, 1000))
    assert "multiple of 256" in str(err) and "768 or 1024" in str(err)


def test_rules():
    assert "window" in str(config_error(Stft, nfft=64, window="nosuch"))
    assert "did you mean 'hop'" in str(config_error(Stft, nfft=64, hopp=4))
    assert "nfft" in str(config_error(Stft, hop=4))
    frames = SignalSpec(100, 1, 4, dtype="complex64", domain="frames", bins=8)
    assert "time-domain" in str(config_error(Stft(nfft=8).output_spec, frames))
