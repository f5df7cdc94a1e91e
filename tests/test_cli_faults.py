"""Faults while `gk-stream run` streams: a StreamFault naming the part and the block, exit 1, no
traceback, and every block before the fault intact on disk."""

import errno
import json
import os
import subprocess

import numpy as np
import pytest
import soundfile as sf

PIPE = """version: 1
name: f
sample_rate: 48000
block_size: 1024
channels: 1
backend: cpu
source: {source}
stages: [{{type: gain, db: 0}}]
sink: {sink}
"""

FAULTY = """
import errno
import numpy as np

calls = {"read": 0, "write": 0}

def read(n):
    calls["read"] += 1
    if calls["read"] > 5:
        raise OSError("sensor unplugged")
    return np.full((1, n), calls["read"], np.float32)

def write(block):
    calls["write"] += 1
    if calls["write"] > 7:
        raise OSError(errno.ENOSPC, "No space left on device")
"""


def _setup(tmp_path, source, sink):
    (tmp_path / "faulty.py").write_text(FAULTY)
    (tmp_path / "f.yaml").write_text(PIPE.format(source=source, sink=sink))
    return tmp_path / "f.yaml"


def test_a_source_that_raises_stops_the_run_with_every_earlier_block_on_disk(tmp_path, gk_process):
    yaml = _setup(tmp_path, "{type: callback, function: 'faulty:read'}", "{type: file, path: out.wav}")
    r = gk_process.run("run", yaml, "--stats-json", "s.json")
    assert r.returncode == 1
    err = r.stderr_text
    assert "gk-stream: error: source 'callback' failed at block 5: callback source 'faulty:read' raised " \
           "OSError: sensor unplugged" in err
    assert "Traceback" not in err and "FAULT:" in r.stdout_text
    data, _ = sf.read(tmp_path / "out.wav", dtype="float32")
    np.testing.assert_array_equal(data, np.repeat(np.arange(1, 6, dtype=np.float32), 1024))


def test_a_sink_whose_writer_raises_enospc_is_a_fault_naming_it(tmp_path, gk_process):
    yaml = _setup(tmp_path, "{type: synth, signal: sine, duration_s: 2}", "{type: callback, function: 'faulty:write'}")
    r = gk_process.run("run", yaml)
    assert r.returncode == 1
    assert "sink 'callback' failed at block 7: callback sink 'faulty:write' raised OSError: [Errno 28] No space " \
           "left on device" in r.stderr_text
    assert "Traceback" not in r.stderr_text


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs: a disk that fills up (needs root; CI runs as root)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true but mounting a tmpfs failed: {r.stderr.strip()}")
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_full_disk_stops_the_run_and_the_file_ends_at_the_last_whole_block(tmp_path, gk_process, small_disk):
    yaml = _setup(tmp_path, "{type: synth, signal: noise, seed: 9, duration_s: 10}",
                  f"{{type: file, path: {small_disk / 'out.wav'}}}")
    r = gk_process.run("run", yaml, "--stats-json", "s.json")
    assert r.returncode == 1
    err = r.stderr_text
    assert f"sink 'file' ({small_disk / 'out.wav'}) failed at block" in err, err
    assert "no space left on the device" in err and "Traceback" not in err
    blocks = int(err.split("failed at block ")[1].split(":")[0])
    s = json.loads((tmp_path / "s.json").read_text())  # a fault writes its summary too, the fault in it
    assert s["ended_by"] == "fault" and s["blocks"] == blocks and "no space left" in s["fault"]
    data, rate = sf.read(small_disk / "out.wav", dtype="float32")  # finalised and renamed
    assert rate == 48000 and data.shape[0] == blocks * 1024 and blocks > 10
    assert not (small_disk / "out.wav.partial").exists()
    assert errno.ENOSPC == 28
