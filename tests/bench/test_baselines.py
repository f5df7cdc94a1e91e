"""The hand-written baselines compute what the project computes (checked on the CPU with NumPy)."""

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.bench.baselines import BASELINES, BaselineSkipped, build_baseline


def _blocks(chain, n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.standard_normal(chain.input.block_shape)
        if chain.input.is_complex:
            x = x + 1j * rng.standard_normal(chain.input.block_shape)
        out.append(x.astype(chain.input.np_dtype))
    return out


PIPELINES = {
    "w1-like": lambda: Pipeline([stages.Fir(taps=np.hanning(64)), stages.Mix(matrix=np.ones((3, 8)) / 8)],
                                sample_rate=1000, channels=8, block_size=128),
    "stft-overlap-db": lambda: Pipeline([stages.Stft(nfft=256, hop=64), stages.Power(), stages.Db()],
                                        sample_rate=1000, channels=2, block_size=512),
    "w2-like": lambda: Pipeline([stages.Stft(nfft=256, hop=256), stages.Power(), stages.Average(frames=4)],
                                sample_rate=1000, channels=1, block_size=2048, dtype="complex64"),
    "complex-fir-fft-mag": lambda: Pipeline([stages.Gain(db=3), stages.Fir(taps=[1, 0.5j, 0.25]),
                                             stages.Fft(n=64), stages.Magnitude()],
                                            sample_rate=1000, channels=2, block_size=256, dtype="complex64"),
}


@pytest.mark.parametrize("which", sorted(PIPELINES))
def test_numpy_baseline_matches_project_over_blocks(which):
    p = PIPELINES[which]()
    chain = p.specs()
    from pygpukit_dsp.backends import open_backend

    proj = open_backend(p, chain, "cpu")
    base = build_baseline("numpy", p, chain)
    for x in _blocks(chain, 5):
        want = proj.process(x)
        got = base.process(x)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-4


def test_unsupported_stage_skips_with_reason():
    p = Pipeline([stages.Resample(up=2, down=1)], sample_rate=1000, channels=1, block_size=64)
    with pytest.raises(BaselineSkipped) as e:
        build_baseline("numpy", p, p.specs())
    assert e.value.code == "unsupported_stage" and str(e.value)  # the code for a program, the reason for a reader


def test_baselines_without_their_library_or_gpu_skip_cleanly():
    p = PIPELINES["w1-like"]()
    for name in ("cupy", "torch", "torch-graph"):
        try:
            impl = build_baseline(name, p, p.specs())
        except BaselineSkipped as exc:
            assert exc.code in ("not_installed", "no_gpu") and str(exc)  # reported in the table
        else:  # a GPU machine: the baseline runs and must agree
            x = _blocks(p.specs(), 1)[0]
            ref = build_baseline("numpy", p, p.specs()).process(x)
            assert np.allclose(impl.process(x), ref, rtol=1e-3, atol=1e-4)
            impl.close()
    assert set(BASELINES) == {"numpy", "cupy", "torch", "torch-graph"}
