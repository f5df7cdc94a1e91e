"""sos on CUDA (native/ops/sos.cpp, kernels/sos.cu) against the CPU stage, and its lowering.

Both sides run the cascade in float64 and round the output to float32 (complex64), so they
agree to float32 rounding: relative error ||cuda - cpu|| / ||cpu|| < 1e-5 (IIR feedback can
amplify the last-bit differences of the FMA order a little; still far below that).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

import pygpukit_dsp.backends.cuda_ops  # noqa: F401
from pygpukit_dsp.backends.cuda_ops.sos import MAX_SECTIONS, lower_sos
from pygpukit_dsp.errors import UnsupportedError
from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.sos import Sos

from .compare import both, rel_err, signal

TOL = 1e-5


def test_lowering_passes_the_sections_in_float64():
    stage = Sos(design={"kind": "butter", "order": 6, "cutoff_hz": 3000})
    s = SignalSpec(sample_rate=48000, channels=2, block_size=128)
    desc = lower_sos(stage, s, stage.output_spec(s))
    assert desc.kind == "sos" and desc.params["sos"].dtype == np.float64
    np.testing.assert_array_equal(desc.params["sos"], stage.sos_for(s))


def test_too_many_sections_are_refused_naming_the_stage():
    sos = np.tile(ss.butter(2, 0.1, output="sos"), (MAX_SECTIONS + 1, 1))
    stage = Sos(sos=sos, name="huge")
    s = SignalSpec(sample_rate=48000, channels=1, block_size=64)
    with pytest.raises(UnsupportedError) as info:
        lower_sos(stage, s, stage.output_spec(s))
    assert info.value.stage == "huge" and str(MAX_SECTIONS) in info.value.reason


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("channels,block", [(3, 100), (40, 64), (1, 1000)])
def test_butterworth_matches_cpu(channels: int, block: int, complex_: bool):
    stage = Sos(design={"kind": "butter", "order": 8, "cutoff_hz": 5000})  # 4 sections
    x = signal(channels, 2345, complex_, seed=channels)  # a final partial block
    gpu, cpu = both(stage, x, block)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
def test_more_sections_than_one_register_group(complex_: bool):
    # 2 x (order 10 bandpass -> 10 sections) = 20 sections: three groups of 8 in the kernel
    a = ss.iirfilter(10, [0.1, 0.3], btype="bandpass", ftype="ellip", rp=0.5, rs=60, output="sos")
    b = ss.iirfilter(10, 0.4, btype="lowpass", ftype="cheby1", rp=1.0, output="sos")
    stage = Sos(sos=np.vstack([a, b]))
    x = signal(5, 3000, complex_, seed=9)
    gpu, cpu = both(stage, x, 256)
    assert rel_err(gpu, cpu) < 1e-4  # sharp elliptic band edges amplify rounding a little more


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("block", [5000, 70000])
def test_long_blocks_of_few_channels_use_the_scan_form(block: int, complex_: bool):
    # <= 8 sections, >= 4096 samples per block, few lanes: the parallel scan along time
    # (5000 is not a multiple of the 32-sample chunk: a shorter last chunk)
    stage = Sos(design={"kind": "cheby1", "order": 8, "cutoff_hz": 3000, "rp": 0.5})
    x = signal(2, block * 3 + 1234, complex_, seed=block)
    gpu, cpu = both(stage, x, block)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_state_carries_across_blocks_like_one_sosfilt():
    sos = ss.butter(4, 0.05, output="sos")
    x = signal(2, 4096, False, seed=3)
    gpu = Pipeline([Sos(sos=sos)], sample_rate=48000, block_size=128).process(x, backend="cuda")
    ref = ss.sosfilt(sos, x.astype(np.float64), axis=-1)
    assert rel_err(gpu, ref) < TOL
