"""A bench file (pygpukit_dsp/bench/bench_file.py): its ``bench:`` mapping taken out, the rest
loaded as a pipeline document with every location kept; the pipeline loader (and ``gk-stream
run``/``validate``) names such a file a bench file instead of an unknown key."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pygpukit_dsp
from pygpukit_dsp.bench.bench_file import load_bench_file, load_bench_text
from pygpukit_dsp.errors import ConfigError, ConfigErrors
from pygpukit_dsp.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[2]
W3 = ROOT / "benchmarks" / "w3.yaml"

DOC = """version: 1
bench:
  kind: contention
  blocks: 500
pipelines:
  - name: fast
    sample_rate: 1000
    block_size: 16
    channels: 2
    qos: {class: realtime, deadline_ms: 1}
    source: {type: synth, signal: noise, seed: 1}
    stages: [{type: gain, linear: 2.0}]
"""


def test_the_bench_mapping_is_taken_out_and_the_pipelines_loaded():
    bf = load_bench_file(W3)
    assert [p.name for p in bf.pipelines] == ["w1", "w2"]
    assert bf.kind == "contention" and bf.section["realtime"] == "w1" and bf.path == str(W3)
    assert bf.marks.value_where("realtime").startswith(f"{W3}:")
    plain = load_bench_file(ROOT / "benchmarks" / "w1.yaml")  # no bench: a plain pipeline file
    assert plain.section is None and plain.marks is None and plain.kind is None
    assert [p.name for p in plain.pipelines] == ["w1"]


def test_a_pipeline_error_in_a_bench_file_keeps_its_location():
    bad = DOC.replace("block_size: 16", "block_size: sixteen")
    with pytest.raises(ConfigError) as ei:
        load_bench_text(bad, filename="w3.yaml")
    e = ei.value.errors[0] if isinstance(ei.value, ConfigErrors) else ei.value
    assert e.where == "w3.yaml:8:17" and "block_size" in e.message  # line 8 of the whole file
    assert load_bench_text(DOC, filename="w3.yaml").marks.value_where("blocks") == "w3.yaml:4:11"


def test_the_pipeline_loader_names_a_bench_file():
    with pytest.raises(ConfigError) as ei:
        Pipeline.load_all(W3)
    e = ei.value.errors[0] if isinstance(ei.value, ConfigErrors) else ei.value
    assert e.where == f"{W3}:9:1"  # the 'bench' key
    assert "is a bench file" in e.message and "unknown key" not in e.message
    assert e.hint == f"use gk-stream bench {W3}"


def _gk(*args):
    package_parent = Path(pygpukit_dsp.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package_parent), *filter(None, [os.environ.get(
        "PYTHONPATH")])]), "GK_LIBCUDA": "/nonexistent/libcuda.so.1"}
    return subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("command", ["run", "validate"])
def test_gk_stream_run_and_validate_say_a_bench_file_is_one(command):
    r = _gk(command, "benchmarks/w3.yaml")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "benchmarks/w3.yaml:9:1" in r.stderr and "gk-stream bench benchmarks/w3.yaml" in r.stderr
