"""Ctrl-C, SIGTERM and SIGKILL on `gk-stream run`: files stay valid and hold every processed block."""

import json
import signal
import time

import numpy as np
import pytest
import soundfile as sf

from pygpukit_dsp import Pipeline
from pygpukit_dsp.io import SynthSource
from pygpukit_dsp.io.base import StreamFormat

BS = 1024
REC = """version: 1
name: rec
sample_rate: 48000
block_size: 1024
channels: 2
dtype: {dtype}
backend: cpu
source: {{type: synth, signal: noise, amplitude: 0.1, seed: 3, rate: realtime}}
stages:
  - {{type: fir, design: {{numtaps: 63, cutoff_hz: 8000}}}}
sink: {sink}
"""


def _write(tmp_path, sink, dtype="float32"):
    path = tmp_path / "rec.yaml"
    path.write_text(REC.format(sink=sink, dtype=dtype))
    return path


def _wait_for(path, min_bytes=8 * BS * 8, timeout_s=30.0):
    """Until ``path`` exists and holds ``min_bytes``: blocks are flowing."""
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.stat().st_size >= min_bytes):
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def _expected(yaml_path, blocks, dtype="float32"):
    """Pipeline.process() of the same synth input: what the file must hold, block for block."""
    src = SynthSource(signal="noise", amplitude=0.1, seed=3)
    src.open(StreamFormat(48000, 2, dtype))
    x = src.read(blocks * BS)
    return Pipeline.from_yaml(yaml_path).process(x, backend="cpu")


@pytest.mark.parametrize("name,subtype,atol", [("out.wav", None, 0.0), ("out.flac", "PCM_24", 1.2e-7)])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_drains_and_the_audio_file_holds_every_processed_block(tmp_path, gk_process, name, subtype, atol,
                                                                        sig):
    yaml = _write(tmp_path, f"{{type: file, path: {name}}}")
    proc = gk_process.start("run", yaml, "--stats-json", "s.json", "--quiet")
    _wait_for(tmp_path / f"{name}.partial")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    sig_name = signal.Signals(sig).name
    assert proc.returncode == 128 + sig, err
    assert f"{sig_name}: stopping after the current block" in err and "Traceback" not in err
    assert f"ended by {sig_name}" in out
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["ended_by"] == sig_name and s["blocks"] > 8
    assert not (tmp_path / f"{name}.partial").exists()  # finalised, then renamed
    data, rate = sf.read(tmp_path / name, dtype="float32")
    assert rate == 48000 and data.shape == (s["blocks"] * BS, 2) == (s["samples_out"], 2)
    np.testing.assert_allclose(data.T, _expected(yaml, s["blocks"]), rtol=0, atol=atol)  # nothing lost or doubled


def test_ctrl_c_keeps_a_raw_iq_file_whole(tmp_path, gk_process):
    yaml = _write(tmp_path, "{type: rawiq, path: out.cf32}", dtype="complex64")
    proc = gk_process.start("run", yaml, "--stats-json", "s.json", "--quiet")
    _wait_for(tmp_path / "out.cf32.partial")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    s = json.loads((tmp_path / "s.json").read_text())
    raw = np.fromfile(tmp_path / "out.cf32", dtype="<c8").reshape(-1, 2).T
    assert raw.shape[1] == s["blocks"] * BS
    np.testing.assert_array_equal(raw, _expected(yaml, s["blocks"], "complex64"))


def test_sigkill_never_leaves_a_file_that_looks_complete(tmp_path, gk_process):
    yaml = _write(tmp_path, "{type: file, path: out.wav}")
    done = gk_process.run("run", yaml, "--blocks", 5, "--quiet")  # an earlier complete recording
    assert done.returncode == 0, done.stderr_text
    before = (tmp_path / "out.wav").read_bytes()
    proc = gk_process.start("run", yaml, "--quiet")
    _wait_for(tmp_path / "out.wav.partial")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "out.wav").read_bytes() == before  # untouched: still the complete earlier file
    assert (tmp_path / "out.wav.partial").stat().st_size > 0  # the cut-off one says what it is


def test_a_second_ctrl_c_aborts_and_still_finalises_the_file(tmp_path, gk_process):
    # block 10's read takes a minute: the first Ctrl-C would wait for it, the second aborts at once
    (tmp_path / "slow.py").write_text(
        "import time, numpy as np\n"
        "calls = [0]\n"
        "def read(n):\n"
        "    calls[0] += 1\n"
        "    if calls[0] == 11:\n"
        "        time.sleep(60)\n"
        "    return np.ones((1, n), np.float32)\n")
    (tmp_path / "slow.yaml").write_text(
        "version: 1\nname: slow\nsample_rate: 48000\nblock_size: 1024\nchannels: 1\nbackend: cpu\n"
        "source: {type: callback, function: 'slow:read'}\nstages: [{type: gain, db: 0}]\n"
        "sink: {type: file, path: out.wav}\n")
    proc = gk_process.start("run", tmp_path / "slow.yaml", "--stats-json", "s.json", "--quiet")
    _wait_for(tmp_path / "out.wav.partial", min_bytes=10 * 1024 * 4)  # the 10 blocks before the slow one
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)  # long before the minute is up
    assert proc.returncode == 130, err
    assert "SIGINT again: aborting" in err
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["ended_by"] == "SIGINT (aborted)"
    data, _ = sf.read(tmp_path / "out.wav", dtype="float32")  # a valid header, every written block
    assert data.shape[0] == s["blocks"] * 1024 == 10 * 1024 and np.all(data == 1.0)
