"""stft on CUDA and the fused stft -> power -> average op (W2), against the CPU and each other.

Tolerances: stft frames relative error ||cuda - cpu|| / ||cpu|| < 1e-5 (float32 FFTs of the
same windowed frames); averaged power spectra < 1e-4 (float32 |X|^2 and sums; the CPU sums in
float64, the fused kernel in float32 per CTA then float64 across CTAs).
"""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit_dsp.backends.cuda_ops  # noqa: F401  (registers lowerings and fusions)
from pygpukit_dsp.backends import cuda_lowering
from pygpukit_dsp.backends.cuda_ops.stft import fuse_stft_power_average, lower_stft
from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.average import Average
from pygpukit_dsp.stages.elementwise import Power
from pygpukit_dsp.stages.stft import Stft

from .compare import both, rel_err, signal

TOL = 1e-5
POWER_TOL = 1e-4
PATTERN = ("stft", "power", "average")


def w2_stages(nfft: int, frames: int, window="hann") -> list:
    return [Stft(nfft=nfft, hop=nfft, window=window), Power(), Average(frames=frames)]


def chain_of(stages: list, channels: int, block: int, dtype: str):
    p = Pipeline(stages, sample_rate=1e6, block_size=block)
    return p.propagate(SignalSpec(sample_rate=1e6, channels=channels, block_size=block, dtype=dtype))


def fuse(stages: list, channels: int = 1, block: int = 4096 * 16, dtype: str = "complex64"):
    return fuse_stft_power_average(stages, chain_of(stages, channels, block, dtype).specs)


# ---------------------------------------------------------------------------------------------
# lowering and fusion (no GPU)

def test_stft_lowering_passes_window_and_hop():
    st = Stft(nfft=64, hop=16, window=["kaiser", 6.0])
    s = SignalSpec(sample_rate=48000, channels=2, block_size=256)
    desc = lower_stft(st, s, st.output_spec(s))
    assert desc.kind == "stft" and desc.params["nfft"] == 64 and desc.params["hop"] == 16
    np.testing.assert_array_equal(desc.params["window"], st.window())


@pytest.mark.parametrize("nfft", [256, 1024, 4096])
def test_fusion_applies_to_w2_shapes(nfft: int):
    stages = w2_stages(nfft, 16)
    desc = fuse(stages, channels=2, block=nfft * 32)
    assert desc is not None and desc.kind == "stft_power_average"
    assert desc.params["nfft"] == nfft and desc.params["frames"] == 16
    assert desc.spec_out.block_shape == (2, 2, nfft) and desc.spec_out.dtype == "float32"
    np.testing.assert_array_equal(desc.params["window"], stages[0].window())


@pytest.mark.parametrize("stages,dtype,why", [
    (w2_stages(4096, 16), "float32", "real input"),
    ([Stft(nfft=4096, hop=2048), Power(), Average(frames=16)], "complex64", "overlapping frames"),
    (w2_stages(8192, 8), "complex64", "nfft above 4096"),
    (w2_stages(128, 16), "complex64", "nfft below 256"),
    (w2_stages(1000, 16), "complex64", "nfft not a power of two"),
])
def test_fusion_returns_none_when_it_does_not_apply(stages, dtype, why):
    assert fuse(stages, block=stages[0].params.nfft * 16, dtype=dtype) is None, why


def test_lower_pipeline_picks_the_fused_op_when_the_native_module_has_it():
    native = cuda_lowering.native_op_kinds()
    if "stft_power_average" not in native:
        pytest.skip("the native module is not built here")
    stages = w2_stages(1024, 8)
    p = Pipeline(stages, sample_rate=1e6, block_size=1024 * 16)
    chain = p.propagate(SignalSpec(sample_rate=1e6, channels=1, block_size=1024 * 16,
                                   dtype="complex64"))
    assert [op.kind for op in cuda_lowering.lower_pipeline(p, chain)] == ["stft_power_average"]


# ---------------------------------------------------------------------------------------------
# GPU: stft


@pytest.mark.gpu
@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("nfft,hop,window", [(64, 32, "hann"), (64, 16, "hamming"),
                                             (63, 21, ["kaiser", 6.0]), (16, 24, "hann"),
                                             (512, 512, "blackman")])
def test_stft_matches_cpu(nfft: int, hop: int, window, complex_: bool):
    block = hop * 10
    x = signal(2, block * 3 + hop * 4 + 7, complex_, seed=nfft + hop)  # final partial block
    gpu, cpu = both([Stft(nfft=nfft, hop=hop, window=window)], x, block)
    assert rel_err(gpu, cpu) < TOL


@pytest.mark.gpu
def test_stft_history_longer_than_the_block():
    x = signal(1, 3000, True, seed=1)
    gpu, cpu = both([Stft(nfft=256, hop=8)], x, 64)  # 248 samples of history, blocks of 64
    assert rel_err(gpu, cpu) < TOL


# ---------------------------------------------------------------------------------------------
# GPU: the fused W2 op

@pytest.fixture
def without_fusion(monkeypatch):
    """lower_pipeline with the stft/power/average fusion removed (the three ops run separately)."""
    kept = [f for f in cuda_lowering.FUSIONS if f[0] != PATTERN]
    monkeypatch.setattr(cuda_lowering, "FUSIONS", kept)


@pytest.mark.gpu
@pytest.mark.parametrize("nfft", [256, 1024, 4096])
def test_fused_matches_cpu(nfft: int):
    frames = 64 if nfft == 4096 else 128
    x = signal(1, nfft * frames, True, seed=nfft)
    gpu, cpu = both(w2_stages(nfft, 16), x, nfft * frames, rate=1e6)
    assert gpu.shape == (1, frames // 16, nfft)
    assert rel_err(gpu, cpu) < POWER_TOL


@pytest.mark.gpu
@pytest.mark.parametrize("nfft", [512, 2048])
def test_fused_matches_cpu_over_channels_blocks_and_a_final_partial_block(nfft: int):
    block = nfft * 32
    n = block * 2 + nfft * 21 + 100  # final block: 22 frames (last zero-padded) -> groups 8, 8, 6
    x = signal(3, n, True, seed=nfft + 1)
    gpu, cpu = both(w2_stages(nfft, 8, window=["kaiser", 8.0]), x, block, rate=1e6)
    assert rel_err(gpu, cpu) < POWER_TOL


@pytest.mark.gpu
def test_fused_equals_the_unfused_cuda_ops(without_fusion):
    x = signal(1, 4096 * 64, True, seed=21)
    p = Pipeline(w2_stages(4096, 16), sample_rate=1e6, block_size=4096 * 64)
    unfused = p.process(x, backend="cuda")
    cpu = p.process(x, backend="cpu")
    assert rel_err(unfused, cpu) < POWER_TOL
    cuda_lowering.FUSIONS.append((PATTERN, fuse_stft_power_average))  # back on for this run
    fused = p.process(x, backend="cuda")
    assert rel_err(fused, unfused) < POWER_TOL


@pytest.mark.gpu
def test_fused_w2_block_of_4096_frames():
    # W2 itself: one block of 4096 frames of 4096, averaged into one spectrum; a tone on bin 100
    nfft = 4096
    rng = np.random.default_rng(22)
    x = np.empty((1, nfft * nfft), np.complex64)
    x.real = rng.standard_normal(nfft * nfft, dtype=np.float32) * 0.1
    x.imag = rng.standard_normal(nfft * nfft, dtype=np.float32) * 0.1
    x[0] += np.tile(np.exp(2j * np.pi * 100 * np.arange(nfft) / nfft).astype(np.complex64), nfft)
    gpu, cpu = both(w2_stages(nfft, nfft), x, nfft * nfft, rate=1e6)
    assert gpu.shape == (1, 1, nfft)
    assert int(np.argmax(gpu[0, 0])) == 100
    assert rel_err(gpu, cpu) < POWER_TOL
