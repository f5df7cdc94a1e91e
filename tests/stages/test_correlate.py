from __future__ import annotations

import numpy as np
import pytest
import scipy.signal as ss

from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.correlate import Correlate

from .conftest import assert_documented, config_error, rel_err, run_stage, signal, stream


def test_documented():
    assert_documented(Correlate)


def scipy_reference(x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """correlate(x, r, 'full')[:len(x)] per channel, in double precision."""
    return np.array([ss.correlate(xc.astype(np.complex128 if np.iscomplexobj(xc) else np.float64), r,
                                  mode="full")[:xc.size] for xc in x])


@pytest.mark.parametrize("L", [1, 7, 64, 1500])  # 1500: overlap-save
@pytest.mark.parametrize("x_complex,r_complex", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("block", [97, 256])  # 97: odd blocks and a short final block
def test_matches_scipy_correlate(rng, L, x_complex, r_complex, block):
    r = rng.standard_normal(L) + (1j * rng.standard_normal(L) if r_complex else 0)
    x = signal(rng, (3, 2011), x_complex)
    spec = SignalSpec(1000, 3, block, dtype="complex64" if x_complex else "float32")
    out = run_stage(Correlate(reference=r), spec, x)
    assert out.dtype == (np.complex64 if x_complex or r_complex else np.float32)
    assert rel_err(out, scipy_reference(x, r)) < 2e-5


@pytest.mark.parametrize("method", ["direct", "matmul", "overlap_save"])
def test_every_method_agrees(rng, method):
    r = rng.standard_normal(33) + 1j * rng.standard_normal(33)
    x = signal(rng, (2, 1000), True)
    out = run_stage(Correlate(reference=r, method=method), SignalSpec(1000, 2, 125, dtype="complex64"), x)
    assert rel_err(out, scipy_reference(x, r)) < 2e-5


def test_conjugates_the_reference_like_scipy():
    r = np.array([1j, 2.0])
    x = np.array([[0.0, 1.0, 0.0, 0.0]], np.float32)  # an impulse at n = 1
    out = run_stage(Correlate(reference=r), SignalSpec(1, 1, 4), x)
    # y[n] = x[n-1] conj(r[0]) + x[n] conj(r[1]): 2 at n = 1, -1j at n = 2
    np.testing.assert_allclose(out[0], [0, 2, -1j, 0], atol=1e-7)
    np.testing.assert_allclose(out[0], ss.correlate(x[0], r, mode="full")[:4], atol=1e-7)


def test_an_echo_peaks_l_minus_1_after_it_starts(rng):
    t = np.arange(200) / 200.0
    chirp = np.exp(1j * np.pi * 50 * t ** 2)
    x = 0.1 * signal(rng, (1, 4000), True)
    x[0, 1234:1434] += chirp.astype(np.complex64)
    out = run_stage(Correlate(reference=chirp), SignalSpec(1e6, 1, 333, dtype="complex64"), x)
    assert int(np.argmax(np.abs(out[0]))) == 1234 + 199


def test_state_continues_across_blocks_and_reset(rng):
    r = rng.standard_normal(40)
    proc = Correlate(reference=r).cpu(SignalSpec(1000, 2, 31))
    x = signal(rng, (2, 500))
    whole = scipy_reference(x, r)
    first = stream(proc, x, 31)
    assert rel_err(first, whole) < 2e-5
    proc.reset()
    np.testing.assert_array_equal(stream(proc, x, 31), first)


def test_reference_file(tmp_path, rng):
    r = (rng.standard_normal(20) + 1j * rng.standard_normal(20))
    np.save(tmp_path / "pulse.npy", r)
    st = Correlate(reference_file="pulse.npy", base_dir=tmp_path)
    np.testing.assert_array_equal(st.reference, r)
    x = signal(rng, (1, 300))
    out = run_stage(st, SignalSpec(1000, 1, 64), x)
    assert rel_err(out, scipy_reference(x, r)) < 2e-5


def test_rules(tmp_path):
    assert "exactly one" in str(config_error(Correlate))
    np.save(tmp_path / "x.npy", np.ones(3))
    assert "not 'reference' and 'reference_file'" in str(
        config_error(Correlate, reference=[1.0], reference_file="x.npy", base_dir=tmp_path))
    assert "1-D" in str(config_error(Correlate, reference=[[1.0, 2.0]]))
    assert "file not found" in str(config_error(Correlate, reference_file="missing.npy", base_dir=tmp_path))
    frames = SignalSpec(100, 1, 4, dtype="complex64", domain="frames", bins=8)
    assert "time-domain" in str(config_error(Correlate(reference=[1.0]).output_spec, frames))


def test_yaml_error_is_located(tmp_path):
    from pygpukit_dsp.errors import ConfigError

    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nsample_rate: 1000\nblock_size: 64\n"
                    "stages:\n  - type: correlate\n    referense: [1, 2]\n")
    with pytest.raises(ConfigError) as info:
        Pipeline.from_yaml(path)
    assert info.value.where is not None and info.value.where.startswith(f"{path}:6:")
    assert "did you mean 'reference'" in str(info.value)
