"""channelizer on CUDA (native/ops/channelizer.cpp, kernels/channelizer.cu) against the CPU stage.

Relative error ||cuda - cpu|| / ||cpu|| < 1e-5 (float32 polyphase sums and an M-point
cuFFT against NumPy/pocketfft in float32).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

import pygpukit_dsp.backends.cuda_ops  # noqa: F401
from pygpukit_dsp.backends.cuda_ops.channelizer import lower_channelizer
from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.channelizer import Channelizer

from .compare import both, rel_err, signal

TOL = 1e-5


def test_lowering_passes_m_and_the_prototype():
    st = Channelizer(channels=8, taps_per_channel=4)
    s = SignalSpec(sample_rate=48000, channels=2, block_size=64)
    desc = lower_channelizer(st, s, st.output_spec(s))
    assert desc.kind == "channelizer" and desc.params["channels"] == 8
    np.testing.assert_array_equal(desc.params["prototype"], st.prototype())
    assert desc.spec_out.channels == 16


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("M,tpc,block", [(4, 8, 64), (16, 16, 256), (5, 3, 50)])
def test_matches_cpu(M: int, tpc: int, block: int, complex_: bool):
    x = signal(2, block * 4 + M * 3 + 2, complex_, seed=M)  # final partial block
    gpu, cpu = both(Channelizer(channels=M, taps_per_channel=tpc), x, block)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_explicit_prototype_not_a_multiple_of_m_and_history_longer_than_the_block():
    h = ss.firwin(37, 1 / 8)
    x = signal(1, 2000, True, seed=3)
    gpu, cpu = both(Channelizer(channels=8, taps=h), x, 16)  # T*M = 40 > block 16
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_subchannel_k_is_centred_at_k_fs_over_m():
    M = 8
    n = np.arange(8192)
    x = np.exp(2j * np.pi * (3 / M) * n).astype(np.complex64)[None, :]  # a tone at 3 fs/M
    gpu = Pipeline([Channelizer(channels=M, taps_per_channel=16)], sample_rate=8000,
                   block_size=512).process(x, backend="cuda")
    power = (np.abs(gpu[:, 64:]) ** 2).mean(axis=1)
    assert int(np.argmax(power)) == 3
