import numpy as np
import pytest

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.io.arrays import NumpySink, NumpySource
from pygpukit_dsp.io.base import StreamFormat
from pygpukit_dsp.signal import SignalSpec


def drain(src, n):
    parts = []
    while (b := src.read(n)).shape[1]:
        parts.append(b)
    return np.concatenate(parts, axis=1)


def test_source_streams_a_2d_array_as_float32_copies():
    x = np.arange(2 * 1000, dtype=np.float64).reshape(2, 1000)
    src = NumpySource(array=x)
    fmt = src.open(StreamFormat(sample_rate=8000))
    assert fmt == StreamFormat(sample_rate=8000.0, channels=2, dtype="float32", length=1000)
    first = src.read(300)
    assert first.dtype == np.float32 and first.shape == (2, 300)
    first[:] = -1  # callers may keep or modify what they get
    rest = drain(src, 256)
    np.testing.assert_array_equal(rest, x[:, 300:].astype(np.float32))
    assert src.stats()["samples"] == 1000


def test_source_1d_and_complex_arrays():
    z = (np.arange(10) * (1 + 1j)).astype(np.complex128)
    src = NumpySource(array=z, sample_rate=100)
    fmt = src.open(StreamFormat())
    assert (fmt.channels, fmt.dtype, fmt.sample_rate) == (1, "complex64", 100.0)
    np.testing.assert_array_equal(drain(src, 3)[0], z.astype(np.complex64))


def test_source_accepts_yaml_lists_with_complex_strings():
    src = NumpySource(array=[["1+2j", "3-1j"]], sample_rate=1)
    src.open(StreamFormat())
    np.testing.assert_array_equal(src.read(5), [[1 + 2j, 3 - 1j]])


def test_source_from_npy_path_relative_to_base_dir(tmp_path):
    x = np.random.default_rng(0).standard_normal((3, 77)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    src = NumpySource(path="x.npy", base_dir=tmp_path)
    assert src.open(StreamFormat(sample_rate=10, channels=3)).length == 77
    np.testing.assert_array_equal(drain(src, 10), x)


def test_source_errors():
    with pytest.raises(ConfigError, match="exactly one of 'array'"):
        NumpySource()
    with pytest.raises(ConfigError, match=r"expected shape \(channels, n\) or \(n,\)"):
        NumpySource(array=np.zeros((2, 2, 2)))
    src = NumpySource(array=np.zeros((100, 4)))
    with pytest.raises(ConfigError, match=r"has channels: 100, but the pipeline requests channels: 4") as e:
        src.open(StreamFormat(sample_rate=1, channels=4))
    assert "array.T" in e.value.hint
    with pytest.raises(ConfigError, match=r"has dtype: float32, but the pipeline requests dtype: complex64"):
        NumpySource(array=np.zeros(4)).open(StreamFormat(sample_rate=1, dtype="complex64"))
    with pytest.raises(ConfigError, match="needs sample_rate"):
        NumpySource(array=np.zeros(4)).open(StreamFormat())
    with pytest.raises(ConfigError, match="file .*missing.npy does not exist"):
        NumpySource(path="missing.npy")


def test_sink_collects_time_blocks_and_copies_them():
    sink = NumpySink()
    sink.open(SignalSpec(100, 2, 4))
    assert sink.result().shape == (2, 0)
    buf = np.ones((2, 4), np.float32)
    sink.write(buf)
    buf[:] = 7  # the engine reuses its buffers
    sink.write(buf[:, :3])
    out = sink.result()
    assert out.shape == (2, 7)
    np.testing.assert_array_equal(out[:, :4], 1)
    np.testing.assert_array_equal(out[:, 4:], 7)
    assert sink.stats()["samples"] == 7


def test_sink_collects_frames_along_the_frame_axis_and_saves_npy(tmp_path):
    sink = NumpySink(path="sub/out.data", base_dir=tmp_path)
    sink.open(SignalSpec(10, 1, 2, dtype="complex64", domain="frames", bins=5))
    a = np.full((1, 2, 5), 1 + 1j, np.complex64)
    sink.write(a)
    sink.write(a[:, :1] * 2)
    sink.close()
    sink.close()
    saved = np.load(tmp_path / "sub" / "out.data")
    assert saved.shape == (1, 3, 5) and saved.dtype == np.complex64
    np.testing.assert_array_equal(saved, sink.result())
    np.testing.assert_array_equal(saved[0, 2], 2 + 2j)


def test_to_config_refuses_huge_arrays_but_writes_small_ones():
    assert NumpySource(array=[1.0, 2.0], sample_rate=2).to_config() == {
        "type": "numpy", "array": [1.0, 2.0], "sample_rate": 2.0}
    with pytest.raises(ConfigError, match="too large to write into YAML"):
        NumpySource(array=np.zeros(70000)).to_config()


def test_sink_path_is_taken_when_opened_and_nothing_collected_leaves_no_file(tmp_path):
    sink = NumpySink(path="d/x.npy", base_dir=tmp_path)
    sink.open(SignalSpec(10, 1, 2))
    assert (tmp_path / "d" / "x.npy.partial").exists()  # a path that cannot be written fails here
    sink.close()
    assert list(tmp_path.iterdir()) == []
    assert sink.result().shape == (1, 0)


def test_sink_path_problems_are_config_errors_at_open(tmp_path):
    (tmp_path / "x.npy").mkdir()
    sink = NumpySink(path="x.npy", base_dir=tmp_path)
    with pytest.raises(ConfigError, match="cannot write to .*x.npy: it is a folder"):
        sink.open(SignalSpec(10, 1, 2))
