"""gk-stream refuses impossible numbers in words that name them: --duration that is not a finite number
of seconds, a block_size that is a float, above its limit, or too big for memory (with FILE:LINE:COL)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pygpukit_dsp

PACKAGE_PARENT = Path(pygpukit_dsp.__file__).resolve().parents[1]

PIPE = """version: 1
name: t
sample_rate: 48000
channels: {channels}
block_size: {block_size}
backend: cpu
source: {{type: synth, duration_s: 0.1}}
stages:
  - {{type: fir, design: {{numtaps: 63, cutoff_hz: 1000}}}}
sink: {{type: "null"}}
"""


def gk(*args, timeout=120):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_PARENT),
                                                                     os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout)


def pipeline_file(tmp_path, *, block_size, channels=1):
    f = tmp_path / "p.yaml"
    f.write_text(PIPE.format(block_size=block_size, channels=channels))
    return f


@pytest.mark.parametrize("value", ["inf", "nan", "1e400"])
def test_duration_must_be_a_finite_number_of_seconds(tmp_path, value):
    r = gk("run", pipeline_file(tmp_path, block_size=256), "--duration", value)
    assert r.returncode == 2
    assert f"argument --duration: expected a finite number of seconds > 0, got '{value}'" in r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


def test_a_finite_duration_runs(tmp_path):
    r = gk("run", pipeline_file(tmp_path, block_size=256), "--duration", "0.05")
    assert r.returncode == 0, r.stderr
    assert "ended by duration limit" in r.stdout


@pytest.mark.parametrize("value, message", [
    ("1e12", "block_size must be a whole number (an integer) from 1 to 268435456 samples (the limit), "
             "got the float 1e+12"),
    ("4000000000", "block_size 4000000000 is above the limit of 268435456 samples"),
])
def test_block_size_errors_point_at_the_value(tmp_path, value, message):
    f = pipeline_file(tmp_path, block_size=value)
    for command in ("run", "validate"):
        r = gk(command, f)
        assert r.returncode == 2
        assert f"error: {f}:5:13: {message}" in r.stderr
        assert "taps" not in r.stderr and "Traceback" not in r.stderr


def test_a_block_too_big_for_memory_blames_block_size(tmp_path):
    """65536 channels of 2**26 samples: the 63-tap FIR's work arrays over the block are the largest
    part, and the hint says to lower block_size (not the taps)."""
    r = gk("run", pipeline_file(tmp_path, block_size=1 << 26, channels=65536), "--blocks", "1")
    assert r.returncode == 2
    assert "stage 'fir' (fir) state (it grows with block_size, 67108864)" in r.stderr
    assert "(lower block_size (67108864) or channels)" in r.stderr
    assert "size parameters" not in r.stderr and "Traceback" not in r.stderr
