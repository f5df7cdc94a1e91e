"""resample on CUDA (native/ops/resample.cpp, kernels/resample.cu) against the CPU stage.

Same padded filter, same causal alignment (delay_out_samples) and output counts
(ceil(N*up/down) in all); relative error ||cuda - cpu|| / ||cpu|| < 1e-5 (float32 sums vs
upfirdn in float64 rounded to float32).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

import pygpukit_dsp.backends.cuda_ops  # noqa: F401
from pygpukit_dsp.backends.cuda_ops.resample import MAX_FACTOR, lower_resample
from pygpukit_dsp.errors import UnsupportedError
from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.resample import Resample

from .compare import both, rel_err, signal

TOL = 1e-5


def test_lowering_passes_the_reduced_ratio_and_padded_filter():
    st = Resample(up=6, down=4)
    s = SignalSpec(sample_rate=48000, channels=1, block_size=64)
    desc = lower_resample(st, s, st.output_spec(s))
    assert (desc.params["up"], desc.params["down"]) == (3, 2)
    np.testing.assert_array_equal(desc.params["taps"], st.padded_filter())
    assert desc.params["taps"].size % 3 == 0


def test_a_ratio_of_one_needs_no_filter():
    st = Resample(up=5, down=5)
    s = SignalSpec(sample_rate=48000, channels=1, block_size=64)
    desc = lower_resample(st, s, st.output_spec(s))
    assert desc.params == {"up": 1, "down": 1}


def test_huge_factors_are_refused_naming_the_stage():
    st = Resample(up=MAX_FACTOR + 1, down=2, taps=[1.0], name="odd")
    s = SignalSpec(sample_rate=48000, channels=1, block_size=64)
    with pytest.raises(UnsupportedError) as info:
        lower_resample(st, s, st.output_spec(s))
    assert info.value.stage == "odd" and str(MAX_FACTOR) in info.value.reason


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("up,down,block", [(3, 2, 200), (2, 3, 300), (160, 147, 147 * 4),
                                           (1, 4, 256), (5, 1, 100)])
def test_matches_cpu(up: int, down: int, block: int, complex_: bool):
    n = block * 3 + down * 5 + 1  # final partial block, not a multiple of down
    x = signal(2, n, complex_, seed=up * 100 + down)
    gpu, cpu = both(Resample(up=up, down=down), x, block)
    assert gpu.shape[1] == -(-n * up // down)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_explicit_taps_and_the_resample_poly_alignment():
    h = ss.firwin(41, 0.3)
    st = Resample(up=3, down=2, taps=h)
    x = signal(1, 2400, False, seed=7)
    gpu = Pipeline([st], sample_rate=48000, block_size=240).process(x, backend="cuda")
    ref = ss.resample_poly(x.astype(np.float64), 3, 2, axis=-1, window=h)
    D = st.delay_out_samples
    assert rel_err(gpu[:, D:], ref[:, :ref.shape[1] - D]) < TOL


@pytest.mark.gpu
def test_identity_ratio_copies():
    x = signal(2, 1000, True, seed=8)
    gpu, cpu = both(Resample(up=4, down=4), x, 256)
    np.testing.assert_array_equal(gpu, x)
