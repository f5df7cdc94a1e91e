"""gk-stream bench on a link bench file: two processes over zmq on loopback against bare pyzmq.

A small W2-shaped stream (512 KiB blocks) keeps it to a few seconds; benchmarks/w2_zmq.yaml itself
is only validated here (128 MiB blocks: docs/scale-out.md has its figures)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pygpukit_dsp
from pygpukit_dsp.errors import ConfigError

pytest.importorskip("zmq")
ROOT = Path(__file__).resolve().parents[2]
PACKAGE_PARENT = Path(pygpukit_dsp.__file__).resolve().parents[1]


def gk(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE_PARENT), *filter(None, [os.environ.get(
        "PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout)


@pytest.fixture
def small(tmp_path):
    """benchmarks/w2_zmq.yaml with 65536-sample blocks, 2 rounds."""
    text = (ROOT / "benchmarks" / "w2_zmq.yaml").read_text().replace("block_size: 16777216", "block_size: 65536") \
        .replace("rounds: 4 ", "rounds: 2 ")
    (tmp_path / "link.yaml").write_text(text)
    shutil.copy(ROOT / "benchmarks" / "w2_link.py", tmp_path)
    return tmp_path / "link.yaml"


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_the_link_bench_times_both_and_gives_the_ratio(small, tmp_path, transport):
    small.write_text(small.read_text().replace("transport: tcp ", f"transport: {transport} "))
    js, md = tmp_path / "link.json", tmp_path / "link.md"
    r = gk("bench", small, "--blocks", "10", "--warmup", "2", "--json", js, "--markdown", md)
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(js.read_text())
    assert data["message_bytes"] == 65536 * 8 and data["settings"]["blocks"] == 10
    assert data["settings"]["transport"] == transport
    project, bare = data["rows"]
    assert project["key"] == "project" and bare["key"] == "bare"
    for row in (project, bare):
        assert row["status"] == "ok" and len(row["rounds"]) == 2 and row["samples"] == 2 * 10 * 65536
        assert row["samples_per_s"] > 0
    assert data["ratio"] == pytest.approx(project["samples_per_s"] / bare["samples_per_s"])
    assert data["ratio_target"] == 0.9 and data["ratio_met"] == (data["ratio"] >= 0.9)
    assert md.read_text().strip() == r.stdout.strip()  # the report printed is the report written
    assert data["last_round"]["receiver_dropped"] == data["last_round"]["receiver_dropped_blocks"] == 0


def test_the_w2_link_file_loads_and_bad_settings_are_located(tmp_path):
    from pygpukit_dsp.bench.link import load_link

    path = ROOT / "benchmarks" / "w2_zmq.yaml"
    bench = load_link(path)
    assert (bench.sender.name, bench.receiver.name, bench.settings.blocks) == ("w2_send", "w2_recv", 20)
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("receiver: w2_recv", "receiver: w2_send").replace("rounds: 4", "rounds: 0"))
    shutil.copy(ROOT / "benchmarks" / "w2_link.py", tmp_path)
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+:\d+: bench: rounds: .*greater than or equal to 1"):
        load_link(bad)
    bad.write_text(path.read_text().replace("receiver: w2_recv", "receiver: w2_send"))
    with pytest.raises(ConfigError, match="the receiver 'w2_send' has no zmq source"):
        load_link(bad)
    r = gk("bench", path, "--compare", "numpy")
    assert r.returncode == 2 and "--compare does not apply to a link bench file" in r.stderr
