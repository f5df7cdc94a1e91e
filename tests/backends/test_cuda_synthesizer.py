"""synthesizer on CUDA (native/ops/synthesizer.cpp, kernels/synthesizer.cu) against the CPU stage.

Relative error ||cuda - cpu|| / ||cpu|| < 1e-5 (float32 branch sums and an M-point cuFFT against
NumPy/pocketfft in float64), and channelizer -> synthesizer on the GPU reconstructing its input
as the CPU does.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

import pygpukit_dsp.backends.cuda_ops  # noqa: F401
from pygpukit_dsp.backends.cuda_ops.synthesizer import lower_synthesizer
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.channelizer import Channelizer
from pygpukit_dsp.stages.synthesizer import Synthesizer

from .compare import both, rel_err, signal

TOL = 1e-5


def test_lowering_passes_m_and_the_prototype():
    st = Synthesizer(channels=8, taps_per_channel=4)
    s = SignalSpec(6000, 16, 8, dtype="complex64")
    desc = lower_synthesizer(st, s, st.output_spec(s))
    assert desc.kind == "synthesizer" and desc.params["channels"] == 8
    np.testing.assert_array_equal(desc.params["prototype"], st.prototype())
    assert (desc.spec_out.channels, desc.spec_out.block_size) == (2, 64)


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("M,tpc,block", [(4, 8, 16), (16, 16, 64), (5, 3, 7), (64, 8, 3)])
def test_matches_cpu(M: int, tpc: int, block: int, complex_: bool):
    y = signal(2 * M, block * 5 + 2, complex_, seed=M)  # a short final block; block 3 < T - 1
    gpu, cpu = both(Synthesizer(channels=M, taps_per_channel=tpc), y, block)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_explicit_prototype_and_one_tap_per_branch():
    y = signal(8, 100, True, seed=3)
    gpu, cpu = both(Synthesizer(channels=8, taps=ss.firwin(37, 1 / 8)), y, 9)
    assert rel_err(gpu, cpu) < TOL
    gpu, cpu = both(Synthesizer(channels=8, taps=np.ones(8) / 8), y, 9)  # T = 1: no history
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_channelizer_then_synthesizer_on_the_gpu():
    M = 16
    x = signal(2, M * 64 * 6, True, seed=5)
    gpu, cpu = both([Channelizer(channels=M, taps_per_channel=8), Synthesizer(channels=M, taps_per_channel=8)],
                    x, M * 64)
    assert rel_err(gpu, cpu) < TOL
    d = M * 8 - 1
    err = np.sum(np.abs(gpu[:, d:] - x[:, :-d]) ** 2) / np.sum(np.abs(x[:, :-d]) ** 2)
    assert 10 * np.log10(err) < -12.0
