from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp.signal import SignalSpec
from pygpukit_dsp.stages.mix import Mix

from .conftest import assert_documented, config_error, rel_err, run_stage, signal


def test_documented():
    assert_documented(Mix)


@pytest.mark.parametrize("m_complex,x_complex", [(False, False), (True, False), (False, True), (True, True)])
def test_time_domain(rng, m_complex, x_complex):
    m = rng.standard_normal((3, 4)) + (1j * rng.standard_normal((3, 4)) if m_complex else 0)
    x = signal(rng, (4, 500), x_complex)
    spec = SignalSpec(48000, 4, 128, dtype="complex64" if x_complex else "float32")
    stage = Mix(matrix=m)
    out_spec = stage.output_spec(spec)
    assert out_spec.channels == 3
    assert out_spec.dtype == ("complex64" if (m_complex or x_complex) else "float32")
    assert rel_err(run_stage(stage, spec, x), m @ x) < 1e-6


def test_complex_strings():
    stage = Mix(matrix=[["0.5-1j", 1], [0, "2j"]])
    np.testing.assert_array_equal(stage.matrix, [[0.5 - 1j, 1], [0, 2j]])
    x = np.ones((2, 3), np.float32)
    out = run_stage(stage, SignalSpec(10, 2, 3), x)
    np.testing.assert_allclose(out[:, 0], [1.5 - 1j, 2j])


def test_frames_domain_single_matrix(rng):
    m = rng.standard_normal((2, 3))
    x = signal(rng, (3, 20, 9), complex_=True)
    spec = SignalSpec(100, 3, 8, dtype="complex64", domain="frames", bins=9)
    out = run_stage(Mix(matrix=m), spec, x)
    assert rel_err(out, np.einsum("oi,ifb->ofb", m, x)) < 1e-6


def test_frames_domain_per_bin(rng):
    m = rng.standard_normal((9, 2, 3)) + 1j * rng.standard_normal((9, 2, 3))
    x = signal(rng, (3, 20, 9), complex_=True)
    spec = SignalSpec(100, 3, 8, dtype="complex64", domain="frames", bins=9)
    out = run_stage(Mix(matrix=m), spec, x)
    assert out.shape == (2, 20, 9)
    assert rel_err(out, np.einsum("boi,ifb->ofb", m, x)) < 1e-6


def test_matrix_file_relative(tmp_path, rng):
    m = rng.standard_normal((2, 4))
    np.save(tmp_path / "m.npy", m)
    stage = Mix(matrix_file="m.npy", base_dir=tmp_path)
    x = signal(rng, (4, 64))
    assert rel_err(run_stage(stage, SignalSpec(1000, 4, 64), x), m @ x) < 1e-6


def test_missing_matrix_file(tmp_path):
    err = config_error(Mix, matrix_file="absent.npy", base_dir=tmp_path)
    assert "file not found" in str(err) and err.path == ("matrix_file",)


def test_matrix_file_must_be_npy(tmp_path):
    assert ".npy" in str(config_error(Mix, matrix_file="m.txt", base_dir=tmp_path))


def test_matrix_file_bad_shape(tmp_path):
    np.save(tmp_path / "v.npy", np.ones(4))
    assert "shape" in str(config_error(Mix, matrix_file="v.npy", base_dir=tmp_path))


def test_input_channels_must_match():
    err = config_error(Mix(matrix=np.ones((2, 3))).output_spec, SignalSpec(48000, 5, 64))
    assert "3 input columns" in str(err) and "5 channels" in str(err)


def test_per_bin_matrix_needs_frames():
    err = config_error(Mix(matrix=np.ones((4, 2, 3))).output_spec, SignalSpec(48000, 3, 64))
    assert "frames-domain" in str(err)


def test_per_bin_matrix_bins_must_match():
    spec = SignalSpec(100, 3, 8, dtype="complex64", domain="frames", bins=9)
    err = config_error(Mix(matrix=np.ones((4, 2, 3))).output_spec, spec)
    assert "4 bins" in str(err) and "9 bins" in str(err)


def test_exactly_one_and_shapes(tmp_path):
    assert "none was given" in str(config_error(Mix))
    np.save(tmp_path / "m.npy", np.ones((1, 1)))
    both = config_error(Mix, matrix=[[1]], matrix_file="m.npy", base_dir=tmp_path)
    assert "'matrix' and 'matrix_file'" in str(both)
    assert "shape" in str(config_error(Mix, matrix=[1, 2, 3]))


def test_unknown_parameter_did_you_mean():
    assert "did you mean 'matrix'" in str(config_error(Mix, matrx=[[1]]))
