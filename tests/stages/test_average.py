from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.average import Average

from .conftest import assert_documented, config_error, rel_err, run_stage, signal


def test_documented():
    assert_documented(Average)


def frames_spec(block: int, bins: int = 7, dtype: str = "float32") -> SignalSpec:
    return SignalSpec(100.0, 2, block, dtype=dtype, domain="frames", bins=bins)


@pytest.mark.parametrize("complex_", [False, True])
@pytest.mark.parametrize("total", [48, 45])  # 45: the final block's last group has 1 frame
def test_means_of_runs(rng, complex_, total):
    x = signal(rng, (2, total, 7), complex_)
    spec = frames_spec(16, dtype="complex64" if complex_ else "float32")
    stage = Average(frames=4)
    out_spec = stage.output_spec(spec)
    assert (out_spec.block_size, out_spec.sample_rate, out_spec.bins) == (4, 25.0, 7)
    out = run_stage(stage, spec, x)
    x64 = x.astype(np.complex128 if complex_ else np.float64)
    groups = [x64[:, i:i + 4].mean(axis=1) for i in range(0, total, 4)]
    ref = np.stack(groups, axis=1)
    assert out.shape == (2, -(-total // 4), 7) and rel_err(out, ref) < 1e-6


def test_long_average_accuracy(rng):
    x = (1.0 + 1e-3 * rng.standard_normal((1, 8192, 4))).astype(np.float32)
    out = run_stage(Average(frames=8192), frames_spec(8192, 4).with_(channels=1), x)
    np.testing.assert_allclose(out[0, 0], x.astype(np.float64).mean(axis=1)[0], rtol=1e-7)


def test_divisibility_suggests_sizes():
    err = config_error(Average(frames=4).output_spec, frames_spec(10))
    assert "multiple of 4" in str(err) and "8 or 12" in str(err)


def test_needs_frames():
    err = config_error(Average(frames=2).output_spec, SignalSpec(1000, 1, 64))
    assert "frames-domain" in str(err) and "stft" in str(err)


def test_param_rules():
    assert "frames" in str(config_error(Average, frames=0))
    assert "frames" in str(config_error(Average))
    assert "did you mean 'frames'" in str(config_error(Average, frame=2))
