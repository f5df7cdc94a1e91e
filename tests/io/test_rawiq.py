import numpy as np
import pytest

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.io.base import StreamFormat
from pygpukit_dsp.io.rawiq import RawIqSink, RawIqSource
from pygpukit_dsp.signal import SignalSpec

SR = 1e6


def iq(channels: int, n: int, seed: int = 0, scale: float = 0.9) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (scale * (rng.uniform(-1, 1, (channels, n)) + 1j * rng.uniform(-1, 1, (channels, n)))).astype(np.complex64)


def write(path, x, block, **params) -> RawIqSink:
    sink = RawIqSink(path=str(path), **params)
    sink.open(SignalSpec(SR, x.shape[0], block, dtype="complex64"))
    for i in range(0, x.shape[1], block):
        sink.write(x[:, i:i + block])
    sink.close()
    sink.close()  # twice is fine
    return sink


def read(path, n, request=StreamFormat(sample_rate=SR), **params):
    src = RawIqSource(path=str(path), **params)
    fmt = src.open(request)
    parts = []
    while (b := src.read(n)).shape[1]:
        assert b.dtype == np.complex64
        parts.append(b)
    src.close()
    return fmt, np.concatenate(parts, axis=1)


def test_cf32_round_trip_is_exact_with_interleaved_channels(tmp_path):
    x = iq(3, 1000 + 17)
    write(tmp_path / "a.cf32", x, 100)
    raw = np.fromfile(tmp_path / "a.cf32", dtype="<c8")
    np.testing.assert_array_equal(raw[:6], [x[0, 0], x[1, 0], x[2, 0], x[0, 1], x[1, 1], x[2, 1]])
    fmt, y = read(tmp_path / "a.cf32", 64, channels=3)
    assert fmt == StreamFormat(sample_rate=SR, channels=3, dtype="complex64", length=1017)
    np.testing.assert_array_equal(y, x)


def test_cs16_round_trip_within_half_a_step_and_file_layout(tmp_path):
    x = iq(2, 333, seed=1)
    write(tmp_path / "b.cs16", x, 128, format="cs16")
    raw = np.fromfile(tmp_path / "b.cs16", dtype="<i2")
    expected_first = np.rint(np.array([x[0, 0].real, x[0, 0].imag, x[1, 0].real, x[1, 0].imag]) * 32768)
    np.testing.assert_array_equal(raw[:4], expected_first)
    _, y = read(tmp_path / "b.cs16", 100, StreamFormat(sample_rate=SR, channels=2), format="cs16")
    np.testing.assert_allclose(y.real, x.real, atol=0.5 / 32768 + 1e-7)
    np.testing.assert_allclose(y.imag, x.imag, atol=0.5 / 32768 + 1e-7)


def test_cs16_scale_and_clipping(tmp_path):
    x = np.array([[0.5 + 0.25j, 3.0 - 3.0j]], dtype=np.complex64)
    sink = write(tmp_path / "c.cs16", x, 2, format="cs16", scale=5e-5)
    assert sink.stats()["clipped"] == 2 and sink.stats()["samples"] == 2
    np.testing.assert_array_equal(np.fromfile(tmp_path / "c.cs16", dtype="<i2"), [10000, 5000, 32767, -32768])
    _, y = read(tmp_path / "c.cs16", 10, format="cs16", scale=5e-5)
    np.testing.assert_allclose(y, [[0.5 + 0.25j, 1.63835 - 1.6384j]], rtol=1e-6)


def test_channels_come_from_the_request_when_not_given(tmp_path):
    write(tmp_path / "d.cf32", iq(2, 10), 10)
    fmt, y = read(tmp_path / "d.cf32", 4, StreamFormat(sample_rate=SR, channels=2))
    assert fmt.channels == 2 and y.shape == (2, 10)
    fmt, y = read(tmp_path / "d.cf32", 4)  # default: one channel
    assert fmt.channels == 1 and y.shape == (1, 20)


def test_size_not_a_multiple_of_the_frame_is_an_error_with_the_sizes(tmp_path):
    (tmp_path / "e.cs16").write_bytes(b"\0" * 22)
    src = RawIqSource(path=str(tmp_path / "e.cs16"), format="cs16", channels=2)
    with pytest.raises(ConfigError, match=r"has 22 bytes, not a multiple of the frame size 8 bytes"):
        src.open(StreamFormat(sample_rate=SR))


def test_conflicts_and_missing_sample_rate(tmp_path):
    write(tmp_path / "f.cf32", iq(2, 4), 4)
    src = RawIqSource(path=str(tmp_path / "f.cf32"), channels=2, sample_rate=2e6)
    with pytest.raises(ConfigError, match=r"has channels: 2, but the pipeline requests channels: 4"):
        src.open(StreamFormat(channels=4))
    with pytest.raises(ConfigError, match=r"has sample_rate: 2e\+06, but the pipeline requests sample_rate: 1e\+06"):
        src.open(StreamFormat(sample_rate=1e6))
    with pytest.raises(ConfigError, match="requests dtype float32"):
        src.open(StreamFormat(dtype="float32"))
    with pytest.raises(ConfigError, match="rawiq needs sample_rate"):
        RawIqSource(path=str(tmp_path / "f.cf32")).open(StreamFormat())
    assert src.open(StreamFormat()).sample_rate == 2e6


def test_sink_needs_complex_time_domain(tmp_path):
    sink = RawIqSink(path=str(tmp_path / "g.cf32"))
    with pytest.raises(ConfigError, match="needs complex64 samples, got float32"):
        sink.open(SignalSpec(SR, 1, 8))
    with pytest.raises(ConfigError, match="needs time-domain samples"):
        sink.open(SignalSpec(SR, 1, 8, dtype="complex64", domain="frames", bins=8))


def test_unknown_format_is_rejected():
    with pytest.raises(ConfigError, match="format: Input should be 'cf32' or 'cs16'"):
        RawIqSink(path="x.iq", format="cu8")


class _DiskFillsUp:
    """An unbuffered file whose write of block ``at`` takes a few bytes, then fails with ENOSPC."""

    def __init__(self, f, at: int):
        self._f, self._at, self._calls = f, at, 0

    def write(self, data):
        self._calls += 1
        if self._calls > self._at:
            if self._calls == self._at + 1:
                return self._f.write(bytes(data[:100]))
            raise OSError(28, "No space left on device")
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)


def test_a_failed_write_is_cut_back_to_the_whole_blocks_before_it_and_renamed(tmp_path):
    from pygpukit_dsp.errors import StreamFault

    x = iq(2, 600)
    sink = RawIqSink(path=str(tmp_path / "f.cf32"))
    sink.open(SignalSpec(SR, 2, 100, dtype="complex64"))
    sink._file = _DiskFillsUp(sink._file, at=4)
    with pytest.raises(StreamFault, match="f.cf32 holds the 4 whole blocks written before it"):
        for i in range(0, 600, 100):
            sink.write(x[:, i:i + 100])
    sink.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.cf32"]
    _, y = read(tmp_path / "f.cf32", 1000, request=StreamFormat(sample_rate=SR, channels=2))
    np.testing.assert_array_equal(y, x[:, :400])


def test_a_sink_that_wrote_nothing_leaves_no_file(tmp_path):
    sink = RawIqSink(path=str(tmp_path / "d" / "n.cs16"), format="cs16")
    sink.open(SignalSpec(SR, 1, 10, dtype="complex64"))
    assert (tmp_path / "d" / "n.cs16.partial").exists()
    sink.close()
    assert list(tmp_path.iterdir()) == []
