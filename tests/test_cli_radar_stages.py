"""gk-stream with the radar and correlator stages, run as a user runs it (a subprocess): the
example pipelines validate, and a stage's wrong parameter or block size is a located error (exit 2)."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pygpukit_dsp

PACKAGE_PARENT = Path(pygpukit_dsp.__file__).resolve().parents[1]
ROOT = Path(__file__).resolve().parents[1]


def gk(*args, timeout=120):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_PARENT),
                                                                     os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)


def test_the_examples_validate():
    r = gk("validate", "pipelines/radar_pulse.yaml")
    assert r.returncode == 0, r.stderr
    assert "pipeline radar_pulse: ok" in r.stdout
    r = gk("validate", "pipelines/correlator.yaml")
    assert r.returncode == 0, r.stderr
    assert "pipeline correlator: ok" in r.stdout and "136 ch" in r.stdout


def test_located_errors(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent("""\
        version: 1
        sample_rate: 1000
        block_size: 48
        channels: 4
        dtype: complex64
        stages:
          - type: fft
            n: 8
          - type: xcorr
            integrate: 4
    """))
    r = gk("validate", str(path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert re.search(rf"{re.escape(str(path))}:9:\d+", r.stderr), r.stderr
    assert "integrate" in r.stderr and "multiple of 4" in r.stderr
    path.write_text(textwrap.dedent("""\
        version: 1
        sample_rate: 1000
        block_size: 64
        stages:
          - type: cfar
            guard: 2
            pfa: 1.5
    """))
    r = gk("validate", str(path))
    assert r.returncode == 2 and re.search(rf"{re.escape(str(path))}:7:\d+", r.stderr), r.stderr
    assert "pfa" in r.stderr
