"""Corrupt, truncated and empty input files ("Bad input, fuzzed"): a ConfigError naming the
file when it is opened, a StreamFault naming the file when the damage shows while reading, and from
gk-stream exit 2 or 1 with that message and no traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import pygpukit_dsp
from pygpukit_dsp.errors import ConfigError, StreamFault
from pygpukit_dsp.io.audiofile import AudioFileSource
from pygpukit_dsp.io.base import StreamFormat
from pygpukit_dsp.io.rawiq import RawIqSource

FRAMES = 48000


def audio(path: Path, subtype: str = "PCM_16", **kw) -> Path:
    x = (np.random.default_rng(0).standard_normal((FRAMES, 2)) * 0.1).astype(np.float32)
    sf.write(path, x, 48000, subtype=subtype, **kw)
    return path


def cut(path: Path, keep: int, name: str) -> Path:
    out = path.with_name(name)
    out.write_bytes(path.read_bytes()[:keep])
    return out


def read_all(src, n: int = 1000) -> int:
    total = 0
    while (b := src.read(n)).shape[1]:
        total += b.shape[1]
    return total


def open_file(path: Path) -> AudioFileSource:
    src = AudioFileSource(path=str(path))
    src.open(StreamFormat())
    return src


# ------------------------------------------------------------------ audio files

def test_garbage_header_is_a_config_error_naming_the_file(tmp_path):
    bad = tmp_path / "garbage.wav"
    bad.write_bytes(b"RIFX" + bytes(range(256)) * 4)
    with pytest.raises(ConfigError, match=f"cannot read audio file {re.escape(str(bad))}: .*not recognised"):
        open_file(bad)


def test_empty_audio_file(tmp_path):
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(ConfigError, match=f"audio file {re.escape(str(empty))} is empty"):
        open_file(empty)


@pytest.mark.parametrize("name, subtype", [("a.wav", "PCM_16"), ("b.wav", "FLOAT"), ("c.aiff", "PCM_24"),
                                           ("d.w64", "PCM_16")])
def test_truncated_pcm_file_is_refused_at_open(tmp_path, name, subtype):
    ok = audio(tmp_path / name, subtype)
    assert read_all(open_file(ok)) == FRAMES  # the whole file: no false alarm
    short = cut(ok, ok.stat().st_size // 2, "short" + ok.suffix)
    with pytest.raises(ConfigError) as info:
        open_file(short)
    msg = str(info.value)
    assert str(short) in msg and "is truncated: its header announces 48000 frames but the file holds" in msg
    assert "copy it again" in info.value.hint


def test_header_only_wav_is_truncated(tmp_path):
    short = cut(audio(tmp_path / "a.wav"), 44, "header.wav")
    with pytest.raises(ConfigError, match="announces 48000 frames but the file holds 0"):
        open_file(short)


def _sizes(path: Path, value: int, name: str) -> Path:
    """A copy of a WAV whose RIFF and data sizes are ``value`` (0: never finalised; 0xFFFFFFFF:
    "unknown length", as streaming writers leave it)."""
    data = bytearray(path.read_bytes())
    at = data.index(b"data") + 4
    data[at:at + 4] = data[4:8] = value.to_bytes(4, "little")
    out = path.with_name(name)
    out.write_bytes(bytes(data))
    return out


def test_wav_whose_header_was_never_finalised_is_refused(tmp_path):
    """A recorder killed before it wrote the sizes: libsndfile reads nothing, silently."""
    unfinished = _sizes(audio(tmp_path / "a.wav"), 0, "unfinished.wav")
    with pytest.raises(ConfigError, match="holds no audio frames although it is 192044 bytes long"):
        open_file(unfinished)


def test_wav_of_unknown_length_reads_everything(tmp_path):
    streamed = _sizes(audio(tmp_path / "a.wav"), 0xFFFFFFFF, "streamed.wav")
    assert read_all(open_file(streamed)) == FRAMES


def test_trailing_bytes_after_the_audio_are_not_an_error(tmp_path):
    ok = audio(tmp_path / "a.wav")
    longer = tmp_path / "longer.wav"
    longer.write_bytes(ok.read_bytes() + b"\0" * 1000)
    assert read_all(open_file(longer)) == FRAMES


def test_truncated_flac_is_a_stream_fault_naming_the_file(tmp_path):
    ok = audio(tmp_path / "a.flac")
    short = cut(ok, ok.stat().st_size // 2, "short.flac")
    src = open_file(short)  # the stream header is intact
    with pytest.raises(StreamFault) as info:
        read_all(src)
    msg = str(info.value)
    assert str(short) in msg and "of its 48000 frames" in msg and "corrupt or truncated" in msg


def test_corrupt_flac_frames_are_a_stream_fault(tmp_path):
    data = bytearray(audio(tmp_path / "a.flac").read_bytes())
    mid = len(data) // 2
    data[mid:mid + 256] = bytes(b ^ 0xFF for b in data[mid:mid + 256])
    bad = tmp_path / "corrupt.flac"
    bad.write_bytes(bytes(data))
    with pytest.raises(StreamFault, match=re.escape(str(bad))):
        read_all(open_file(bad))


def test_flac_cut_inside_its_header(tmp_path):
    short = cut(audio(tmp_path / "a.flac"), 50, "stub.flac")
    with pytest.raises(ConfigError, match=f"cannot read audio file {re.escape(str(short))}"):
        open_file(short)


# ------------------------------------------------------------------ raw IQ

def raw_source(path: Path, **params) -> RawIqSource:
    src = RawIqSource(path=str(path), **params)
    src.open(StreamFormat(sample_rate=1e6))
    return src


def test_raw_size_not_a_multiple_of_the_frame(tmp_path):
    odd = tmp_path / "odd.cs16"
    odd.write_bytes(b"\0" * 4 * 100 + b"\1\2\3")
    with pytest.raises(ConfigError, match=r"'.*odd.cs16' has 403 bytes, not a multiple of the frame size 8"):
        raw_source(odd, format="cs16", channels=2)


def test_empty_raw_file(tmp_path):
    empty = tmp_path / "empty.cf32"
    empty.write_bytes(b"")
    with pytest.raises(ConfigError, match=f"{re.escape(str(empty))}\\) is empty"):
        raw_source(empty)


def test_raw_file_cut_while_reading_is_a_stream_fault(tmp_path):
    path = tmp_path / "live.cf32"
    np.zeros(1000, "<c8").tofile(path)
    src = raw_source(path)
    assert src.read(100).shape == (1, 100)
    os.truncate(path, 8 * 300)  # another program cut it (or the disk lost it)
    # (Python's buffered reader may still hand out what it read before the cut)
    with pytest.raises(StreamFault, match=f"{re.escape(str(path))} ended after [0-9]+ of its 1000 samples"):
        read_all(src, 128)
    src.close()


def test_raw_file_cut_mid_sample_while_reading(tmp_path):
    path = tmp_path / "live.cf32"
    np.zeros(1000, "<c8").tofile(path)
    src = raw_source(path)
    os.truncate(path, 8 * 300 + 3)
    with pytest.raises(StreamFault, match="ended in the middle of a sample"):
        read_all(src, 128)
    src.close()


# ------------------------------------------------------------------ through gk-stream

def gk_run(yaml_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(pygpukit_dsp.__file__).resolve().parents[1]),
           "GK_LIBCUDA": "/nonexistent/libcuda.so.1"}
    return subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", "run", str(yaml_path), "--backend", "cpu"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=yaml_path.parent)


def pipeline_file(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(f"version: 1\nname: p\nblock_size: 1024\nsource: {source}\nsink: {{type: 'null'}}\n")
    return path


def test_cli_truncated_wav_exits_2_naming_the_file(tmp_path):
    ok = audio(tmp_path / "in.wav")
    cut(ok, ok.stat().st_size // 2, "short.wav")
    r = gk_run(pipeline_file(tmp_path, "{type: file, path: short.wav}"))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert re.search(r"p\.yaml:4:9: .*short\.wav is truncated", r.stderr), r.stderr


def test_cli_truncated_flac_exits_1_naming_the_file(tmp_path):
    ok = audio(tmp_path / "in.flac")
    cut(ok, ok.stat().st_size // 2, "short.flac")
    r = gk_run(pipeline_file(tmp_path, "{type: file, path: short.flac}"))
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert "short.flac" in r.stderr and "failed" in r.stderr, r.stderr


def test_cli_raw_file_of_the_wrong_size_exits_2(tmp_path):
    (tmp_path / "odd.cf32").write_bytes(b"\0" * 8 * 10 + b"\0")
    r = gk_run(pipeline_file(tmp_path, "{type: rawiq, path: odd.cf32, sample_rate: 1.0e+6}"))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert re.search(r"p\.yaml:4:9: .*odd\.cf32' has 81 bytes", r.stderr), r.stderr
