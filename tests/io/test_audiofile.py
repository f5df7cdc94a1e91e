import time

import numpy as np
import pytest
import soundfile as sf

from pygpukit_dsp.errors import ConfigError, StreamFault
from pygpukit_dsp.io.audiofile import AudioFileSink, AudioFileSource
from pygpukit_dsp.io.base import StreamFormat
from pygpukit_dsp.signal import SignalSpec

SR = 48000


def signal(channels: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-0.9, 0.9, size=(channels, n)).astype(np.float32)


def write_blocks(path, x: np.ndarray, block: int, **params) -> AudioFileSink:
    sink = AudioFileSink(path=str(path), **params)
    sink.open(SignalSpec(sample_rate=SR, channels=x.shape[0], block_size=block))
    for i in range(0, x.shape[1], block):
        sink.write(x[:, i:i + block])  # the last block is partial
    sink.close()
    return sink


def read_all(path, n: int) -> tuple[StreamFormat, np.ndarray]:
    src = AudioFileSource(path=str(path))
    fmt = src.open(StreamFormat())
    parts = []
    while True:
        b = src.read(n)
        if b.shape[1] == 0:
            break
        assert b.dtype == np.float32 and b.flags.c_contiguous
        parts.append(b)
    src.close()
    return fmt, np.concatenate(parts, axis=1)


def test_wav_round_trip_keeps_every_sample_exactly(tmp_path):
    x = signal(3, 10 * 1024 + 333)
    sink = write_blocks(tmp_path / "out.wav", x, 1024)
    assert (sink.format, sink.subtype) == ("WAV", "FLOAT")
    assert sink.stats()["samples"] == x.shape[1]
    fmt, y = read_all(tmp_path / "out.wav", 1000)
    assert fmt == StreamFormat(sample_rate=SR, channels=3, dtype="float32", length=x.shape[1])
    np.testing.assert_array_equal(y, x)


def test_flac_round_trip_is_pcm24_and_keeps_the_final_partial_block(tmp_path):
    x = signal(2, 5 * 512 + 7, seed=1)
    sink = write_blocks(tmp_path / "out.flac", x, 512)
    assert (sink.format, sink.subtype) == ("FLAC", "PCM_24")
    fmt, y = read_all(tmp_path / "out.flac", 700)
    assert y.shape == x.shape and fmt.length == x.shape[1]
    np.testing.assert_allclose(y, x, atol=2.0 ** -23)


def test_sink_creates_parent_folders_and_close_is_idempotent(tmp_path):
    path = tmp_path / "a" / "b" / "c.wav"
    sink = write_blocks(path, signal(1, 100), 64)
    sink.close()
    assert sf.info(str(path)).frames == 100


def test_relative_paths_resolve_against_base_dir(tmp_path):
    write_blocks(tmp_path / "rel.wav", signal(1, 10), 10)
    src = AudioFileSource(path="rel.wav", base_dir=tmp_path)
    assert src.open(StreamFormat()).length == 10


def test_source_conflicts_name_both_values(tmp_path):
    sf.write(str(tmp_path / "x.wav"), np.zeros((10, 2), np.float32), 44100, subtype="FLOAT")
    src = AudioFileSource(path=str(tmp_path / "x.wav"))
    with pytest.raises(ConfigError, match=r"has sample_rate: 44100, but the pipeline requests sample_rate: 48000") as e:
        src.open(StreamFormat(sample_rate=48000))
    assert "resample" in e.value.hint
    with pytest.raises(ConfigError, match=r"has channels: 2, but the pipeline requests channels: 1"):
        src.open(StreamFormat(channels=1))
    with pytest.raises(ConfigError, match="requests dtype complex64"):
        src.open(StreamFormat(dtype="complex64"))


def test_missing_file_is_an_error_at_construction_naming_the_path(tmp_path):
    with pytest.raises(ConfigError, match=r"file .*nope\.wav does not exist; relative paths are resolved") as e:
        AudioFileSource(path="nope.wav", base_dir=tmp_path)
    assert e.value.path == ("path",)


def test_unreadable_file_is_a_config_error_at_open(tmp_path):
    (tmp_path / "junk.wav").write_bytes(b"this is not audio" * 10)
    with pytest.raises(ConfigError, match="cannot read audio file"):
        AudioFileSource(path=str(tmp_path / "junk.wav")).open(StreamFormat())


def test_sink_rejects_complex_and_frames_with_hints(tmp_path):
    sink = AudioFileSink(path=str(tmp_path / "o.wav"))
    with pytest.raises(ConfigError, match="needs float32 samples, got complex64") as e:
        sink.open(SignalSpec(SR, 1, 64, dtype="complex64"))
    assert "magnitude" in e.value.hint
    with pytest.raises(ConfigError, match="needs time-domain samples, got frames") as e:
        sink.open(SignalSpec(SR, 1, 4, dtype="float32", domain="frames", bins=33))
    assert "irfft" in e.value.hint


def test_sink_format_and_subtype_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot tell the audio format from 'o.xyz'") as e:
        AudioFileSink(path=str(tmp_path / "o.xyz"))
    assert e.value.path == ("path",) and ".wav" in e.value.hint
    with pytest.raises(ConfigError, match="subtype 'PCM_42' is not available for WAV") as e:
        AudioFileSink(path=str(tmp_path / "o.wav"), subtype="PCM_42")
    assert e.value.path == ("subtype",) and "PCM_24" in e.value.hint


def test_pcm_sink_counts_clipped_samples(tmp_path):
    x = np.array([[0.5, 1.5, -2.0, 0.1]], dtype=np.float32)
    sink = write_blocks(tmp_path / "c.wav", x, 4, subtype="PCM_16")
    assert sink.stats() == {"samples": 4, "overflows": 0, "underflows": 0, "dropped": 0, "clipped": 2}


def test_write_with_wrong_channel_count_is_a_stream_fault(tmp_path):
    sink = AudioFileSink(path=str(tmp_path / "w.wav"))
    sink.open(SignalSpec(SR, 2, 16))
    with pytest.raises(StreamFault, match=r"shape \(3, 16\)"):
        sink.write(np.zeros((3, 16), np.float32))
    sink.close()


def test_realtime_rate_paces_reads_at_the_files_rate(tmp_path):
    sf.write(str(tmp_path / "slow.wav"), np.zeros(30, np.float32), 1000, subtype="FLOAT")
    src = AudioFileSource(path=str(tmp_path / "slow.wav"), rate="realtime")
    assert src.realtime and not AudioFileSource(path=str(tmp_path / "slow.wav")).realtime
    src.open(StreamFormat())
    t0 = time.perf_counter()
    total = 0
    while m := src.read(10).shape[1]:
        total += m
    assert total == 30 and time.perf_counter() - t0 >= 0.025


class _DiskFillsUp:
    """A SoundFile whose write of block ``at`` gets half of it out, then fails as a full disk does."""

    def __init__(self, f, at: int):
        self._f, self._at, self._calls = f, at, 0

    def write(self, data):
        self._calls += 1
        if self._calls > self._at:
            self._f.write(data[: len(data) // 2])
            raise sf.LibsndfileError(2, "")
        self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)


def _fill_up(path, at: int, blocks: int = 6, bs: int = 256) -> tuple[np.ndarray, StreamFault]:
    x = signal(2, blocks * bs, seed=4)
    sink = AudioFileSink(path=str(path))
    sink.open(SignalSpec(SR, 2, bs))
    sink._file = _DiskFillsUp(sink._file, at)
    with pytest.raises(StreamFault) as info:
        for i in range(0, x.shape[1], bs):
            sink.write(x[:, i:i + bs])
    sink.close()
    return x, info.value


def test_a_wav_whose_write_fails_is_finalised_with_exactly_the_whole_blocks_before_it(tmp_path):
    x, fault = _fill_up(tmp_path / "w.wav", at=3)
    assert "w.wav holds the 3 whole blocks written before it (768 frames)" in str(fault)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.wav"]
    y, rate = sf.read(tmp_path / "w.wav", dtype="float32", always_2d=True)
    np.testing.assert_array_equal(y.T, x[:, :768])


def test_a_flac_whose_write_fails_keeps_its_partial_name(tmp_path):
    _, fault = _fill_up(tmp_path / "f.flac", at=3)
    assert "the incomplete file keeps the name f.flac.partial" in str(fault)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.flac.partial"]


def test_a_first_write_that_fails_and_a_sink_that_wrote_nothing_leave_no_file(tmp_path):
    _, fault = _fill_up(tmp_path / "new" / "z.wav", at=0)
    assert "nothing had been written, so no file is left" in str(fault)
    sink = AudioFileSink(path=str(tmp_path / "a" / "b" / "e.flac"))
    sink.open(SignalSpec(SR, 1, 64))
    assert (tmp_path / "a" / "b" / "e.flac.partial").exists()  # the path is taken when opened
    sink.close()
    assert list(tmp_path.iterdir()) == []  # neither the files nor the folders made for them
