"""fir on CUDA (native/ops/fir.cpp, kernels/fir.cu) against the CPU stage, and its lowering.

GPU tests stream whole signals through Pipeline.process on both backends (state carried over
several blocks, the last one partial where the length does not divide) and compare with
relative error ||cuda - cpu|| / ||cpu|| < 1e-5 (float32 FMA order differs from BLAS/pocketfft;
both are exact up to float32 rounding). The lowering tests need no GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit_dsp.backends.cuda_ops  # noqa: F401  (registers the lowerings)
from pygpukit_dsp.backends.cuda_ops.fir import (DIRECT_MAX_TAPS, lower_fir, plan_cuda_fir)
from pygpukit_dsp.errors import UnsupportedError
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.fir import Fir

from .compare import both, rel_err, signal

TOL = 1e-5


def taps_of(shape: tuple[int, ...], complex_: bool, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = rng.standard_normal(shape) / np.sqrt(shape[-1])
    return t + 1j * rng.standard_normal(shape) / np.sqrt(shape[-1]) if complex_ else t


# ---------------------------------------------------------------------------------------------
# lowering (no GPU)

def spec(channels: int = 4, block: int = 256, dtype: str = "float32") -> SignalSpec:
    return SignalSpec(sample_rate=48000, channels=channels, block_size=block, dtype=dtype)


def test_w1_lowers_to_the_direct_kernel():
    fir = Fir(taps=taps_of((256,), False, 1))
    s = spec(64, 256)
    desc = lower_fir(fir, s, fir.output_spec(s))
    assert desc.kind == "fir" and desc.params["method"] == "direct"
    assert desc.params["taps"].shape == (256,) and "spectrum" not in desc.params


def test_a_long_filter_lowers_to_overlap_save_with_the_scaled_spectrum():
    taps = taps_of((2, 6000), False, 2)
    fir = Fir(taps=taps)
    s = spec(2, 1024)
    desc = lower_fir(fir, s, fir.output_spec(s))
    p = desc.params
    assert p["method"] == "overlap_save"
    nfft, step = p["nfft"], p["step"]
    assert nfft & (nfft - 1) == 0 and step == nfft - 6000 + 1
    assert p["spectrum"].shape == (2, nfft // 2 + 1)
    back = np.fft.irfft(p["spectrum"] * nfft, nfft)[:, :6000]
    np.testing.assert_allclose(back, taps, atol=1e-12)


def test_complex_output_uses_the_full_spectrum():
    taps = taps_of((5000,), True, 3)
    fir = Fir(taps=taps)
    s = spec(1, 512)
    desc = lower_fir(fir, s, fir.output_spec(s))
    nfft = desc.params["nfft"]
    assert desc.params["spectrum"].shape == (1, nfft)
    np.testing.assert_allclose(np.fft.ifft(desc.params["spectrum"][0] * nfft)[:5000], taps, atol=1e-12)


def test_forced_direct_beyond_its_tap_limit_is_refused_naming_the_stage():
    fir = Fir(taps=np.ones(DIRECT_MAX_TAPS + 1), method="direct", name="reverb")
    s = spec(1, 256)
    with pytest.raises(UnsupportedError) as info:
        lower_fir(fir, s, fir.output_spec(s))
    assert info.value.stage == "reverb" and info.value.backend == "cuda"
    assert "overlap_save" in info.value.reason


@pytest.mark.parametrize("method,expected", [("matmul", "direct"), ("direct", "direct"),
                                             ("overlap_save", "overlap_save")])
def test_method_is_honoured(method: str, expected: str):
    fir = Fir(taps=np.ones(64), method=method)
    s = spec(2, 256)
    assert lower_fir(fir, s, fir.output_spec(s)).params["method"] == expected


def test_cost_rule_prefers_fft_for_long_filters_on_long_blocks():
    assert plan_cuda_fir(4096, 1, 65536, False, False).method == "overlap_save"
    assert plan_cuda_fir(31, 8, 65536, False, False).method == "direct"
    plan = plan_cuda_fir(256, 64, 256, False, False)
    assert plan.method == "direct" and plan.direct_us < plan.ols_us


# ---------------------------------------------------------------------------------------------
# GPU

@pytest.mark.gpu
@pytest.mark.parametrize("x_complex,h_complex", [(False, False), (True, False), (False, True),
                                                 (True, True)])
@pytest.mark.parametrize("L", [5, 33, 256])
def test_direct_matches_cpu(L: int, x_complex: bool, h_complex: bool):
    x = signal(3, 1000, x_complex, seed=L)  # 1000 = 3 blocks of 300 + a final 100
    fir = Fir(taps=taps_of((L,), h_complex, L + 1), method="direct")
    gpu, cpu = both(fir, x, 300)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_direct_per_channel_taps_and_blocks_shorter_than_the_filter():
    x = signal(4, 700, False, seed=5)
    fir = Fir(taps=taps_of((4, 300), False, 6), method="direct")
    gpu, cpu = both(fir, x, 64)  # history (384 samples) longer than the block
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_w1_shape_matches_cpu():
    x = signal(64, 256 * 6, False, seed=7)
    fir = Fir(design={"numtaps": 256, "cutoff_hz": 6000, "pass_zero": "lowpass", "window": "hann"})
    gpu, cpu = both(fir, x, 256)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
@pytest.mark.parametrize("x_complex,h_complex", [(False, False), (True, False), (False, True),
                                                 (True, True)])
def test_overlap_save_matches_cpu(x_complex: bool, h_complex: bool):
    x = signal(2, 5000, x_complex, seed=11)
    fir = Fir(taps=taps_of((2, 700), h_complex, 12), method="overlap_save")
    gpu, cpu = both(fir, x, 1024)  # 4 full blocks + a final 904
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_long_filter_auto_uses_overlap_save_and_matches_cpu():
    taps = taps_of((6000,), False, 13)
    x = signal(1, 20000, False, seed=14)
    fir = Fir(taps=taps)
    s = SignalSpec(sample_rate=48000, channels=1, block_size=512)
    assert lower_fir(fir, s, fir.output_spec(s)).params["method"] == "overlap_save"
    gpu, cpu = both(fir, x, 512)  # the history (5999) spans many blocks
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_unaligned_block_rows_take_the_elementwise_copy_path():
    x = signal(3, 999, False, seed=15)
    fir = Fir(taps=taps_of((40,), False, 16), method="direct")
    gpu, cpu = both(fir, x, 333)  # rows of 333 floats are not 16-byte aligned
    assert rel_err(gpu, cpu) < TOL
