"""fft, rfft, ifft, irfft on CUDA (native/ops/fft.cpp: batched cuFFT) against the CPU stages.

Relative error ||cuda - cpu|| / ||cpu|| < 1e-5: both are float32 FFTs (cuFFT vs pocketfft) of
the same frames; the partial final block is zero-padded to whole frames on both sides.
"""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit_dsp.backends.cuda_ops  # noqa: F401
from pygpukit_dsp.backends.cuda_ops.fft import lower_fft, lower_ifft, lower_irfft, lower_rfft
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.fft import Fft, Ifft, Irfft, Rfft

from .compare import both, rel_err, signal

TOL = 1e-5


def test_lowerings_pass_the_frame_length():
    s = SignalSpec(sample_rate=48000, channels=2, block_size=1024)
    fft, rfft = Fft(n=256), Rfft(n=128)
    assert lower_fft(fft, s, fft.output_spec(s)).params == {"n": 256}
    assert lower_rfft(rfft, s, rfft.output_spec(s)).params == {"n": 128}
    frames = rfft.output_spec(s)  # 8 frames x 65 bins
    irfft, irfft_odd = Irfft(), Irfft(n=129)
    assert lower_irfft(irfft, frames, irfft.output_spec(frames)).params == {"n": 128}
    assert lower_irfft(irfft_odd, frames, irfft_odd.output_spec(frames)).params == {"n": 129}
    cframes = fft.output_spec(s)
    ifft = Ifft()
    assert lower_ifft(ifft, cframes, ifft.output_spec(cframes)).params == {"n": 256}


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
def test_fft_matches_cpu(complex_: bool):
    x = signal(3, 5000, complex_, seed=1)  # blocks of 1024 (4 frames of 256), final 904 -> 4 frames
    gpu, cpu = both([Fft(n=256)], x, 1024)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_rfft_matches_cpu():
    x = signal(2, 3000, False, seed=2)
    gpu, cpu = both([Rfft(n=100)], x, 500)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
def test_fft_then_ifft_matches_cpu_and_round_trips(complex_: bool):
    x = signal(2, 4096, complex_, seed=3)
    gpu, cpu = both([Fft(n=64), Ifft()], x, 512)
    assert rel_err(gpu, cpu) < TOL
    assert rel_err(gpu, x) < TOL


@pytest.mark.gpu
def test_rfft_then_irfft_round_trips():
    x = signal(2, 3333, False, seed=4)  # final block of 333 -> zero-padded last frame
    gpu, cpu = both([Rfft(n=120), Irfft()], x, 480)
    assert rel_err(gpu, cpu) < TOL
    np.testing.assert_allclose(gpu[:, :3333], x, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("n_out", [30, 31])
def test_irfft_of_a_non_hermitian_spectrum_matches_numpy(n_out: int):
    # fft of complex input gives 16 arbitrary bins; irfft reads bins 0..15 like NumPy, ignoring
    # the imaginary parts of bin 0 (and of bin 15 = n/2 when n = 30)
    x = signal(2, 16 * 40, True, seed=5)
    gpu, cpu = both([Fft(n=16), Irfft(n=n_out)], x, 16 * 8)
    assert rel_err(gpu, cpu) < TOL
