import numpy as np
import pytest

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.io.base import StreamFormat
from pygpukit_dsp.io.null import NullSink, NullSource
from pygpukit_dsp.signal import SignalSpec


def test_null_source_gives_zeros_of_the_requested_format_for_duration():
    src = NullSource(duration_s=0.001)
    fmt = src.open(StreamFormat(sample_rate=48000, channels=2, dtype="complex64"))
    assert fmt == StreamFormat(48000.0, 2, "complex64", 48)
    a, b, c = src.read(40), src.read(40), src.read(40)
    assert a.shape == (2, 40) and b.shape == (2, 8) and c.shape == (2, 0)
    assert a.dtype == np.complex64 and not a.any()
    assert src.stats()["samples"] == 48


def test_null_source_is_endless_by_default_with_one_channel():
    src = NullSource()
    fmt = src.open(StreamFormat(sample_rate=8000))
    assert fmt.length is None and fmt.channels == 1 and fmt.dtype == "float32"
    assert all(src.read(1000).shape == (1, 1000) for _ in range(50))


def test_null_source_needs_sample_rate():
    with pytest.raises(ConfigError, match="null source needs sample_rate"):
        NullSource().open(StreamFormat(channels=1))


def test_null_sink_counts_samples_and_frames():
    sink = NullSink()
    sink.open(SignalSpec(1000, 2, 4, dtype="complex64", domain="frames", bins=16))
    sink.write(np.zeros((2, 4, 16), np.complex64))
    sink.write(np.zeros((2, 1, 16), np.complex64))
    sink.close()
    sink.close()
    assert sink.stats() == {"samples": 5, "overflows": 0, "underflows": 0, "dropped": 0}


def test_null_sink_takes_no_parameters():
    with pytest.raises(ConfigError, match="unknown parameter 'path'"):
        NullSink(path="x")
