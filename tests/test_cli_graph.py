"""Graphs through gk-stream: every graph error exits 2 at FILE:LINE:COL naming both ends, validate
prints the graph (text, --dot), run writes and accounts every sink, cuda without a driver stops a
graph before the first block and auto says why it chose cpu."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from .test_cli import NO_DRIVER, gk

HEAD = """version: 1
name: g
sample_rate: 8000
block_size: 64
channels: 2
source: {type: synth, signal: noise, duration_s: 0.1}
"""
LOCATED = re.compile(r"^gk-stream: error: (?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<message>.*)$", re.M)


def located(r, path) -> tuple[int, int, str]:
    """(line, column, message) of the first error gk-stream printed; it exited 2 without a traceback."""
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    m = LOCATED.search(r.stderr)
    assert m and m.group("file") == str(path), r.stderr
    return int(m.group("line")), int(m.group("col")), m.group("message")


def write(tmp_path, body: str, name: str = "g.yaml"):
    path = tmp_path / name
    path.write_text(HEAD + body)
    return path


# (the stages and sinks, the line and the text where the error points, words the message must hold)
CASES = {
    "undefined": ("stages:\n  - {name: sel, type: select, channels: [1]}\n  - {name: lo, type: gain, db: 1, input: sle}\n"
                  "sink: {type: \"null\"}\n", (9, "sle}"), ["'lo'", "'sle'", "did you mean 'sel'"]),
    "cycle": ("stages:\n  - {name: a, type: gain, db: 1, input: b}\n  - {name: b, type: gain, db: 1, input: a}\n"
              "sink: {type: \"null\"}\n", (9, "a}"), ["'a'", "'b'", "cycle"]),
    "unused": ("stages:\n  - {name: pw, type: power}\n  - {name: lo, type: gain, db: 1, input: source}\n"
               "sinks:\n  - {type: \"null\", input: lo}\n", (8, "{name: pw"), ["'pw'", "nothing reads"]),
    "sink reads nothing": ("stages:\n  - {name: lo, type: gain, db: 1}\nsinks:\n  - {type: \"null\", input: hi}\n",
                           (10, "hi}"), ["sink 'hi'", "'hi'"]),
    "channels for add": ("stages:\n  - {name: sel, type: select, channels: [1]}\n"
                         "  - {name: mixd, type: add, inputs: [sel, source]}\nsink: {type: \"null\"}\n",
                         (9, "source]"), ["'mixd'", "'sel'", "'source'", "channels"]),
    "rate": ("stages:\n  - {name: up, type: resample, up: 2, down: 1}\n  - {name: s, type: add, inputs: [source, up]}\n"
             "sink: {type: \"null\"}\n", (9, "up]"), ["'s'", "'source'", "'up'", "sample rate"]),
    "domain": ("stages:\n  - {name: f, type: fft, n: 1}\n  - {name: m, type: multiply, inputs: [source, f]}\n"
               "sink: {type: \"null\"}\n", (9, "f]"), ["'m'", "'source'", "'f'", "domain"]),
    "combine": ("stages:\n  - {name: f, type: fft, n: 1}\n  - {name: c, type: combine, inputs: [f, source]}\n"
                "sink: {type: \"null\"}\n", (9, "source]"), ["'c'", "'source'", "'f'", "domain"]),
}
@pytest.mark.parametrize("case", sorted(CASES))
def test_graph_errors_exit_2_at_file_line_col(tmp_path, case):
    body, (line_no, token), words = CASES[case]
    path = write(tmp_path, body)
    where = (line_no, path.read_text().splitlines()[line_no - 1].index(token) + 1)
    for command in ("validate", "run"):
        line, col, message = located(gk(command, path), path)
        assert (line, col) == where, message
        for w in words:
            assert w in message, (w, message)


def test_inputs_of_one_rate_and_different_block_sizes_exit_2(tmp_path):
    """Sources at 8 and 16 kHz, the first resampled to 16 kHz: one rate, blocks of 128 and 64 samples."""
    np.save(tmp_path / "a.npy", np.zeros((1, 640), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((1, 1280), np.float32))
    path = tmp_path / "g.yaml"
    path.write_text("version: 1\nname: g\nblock_size: 64\nsources:\n"
                    "  - {name: a, type: numpy, path: a.npy, sample_rate: 8000}\n"
                    "  - {name: b, type: numpy, path: b.npy, sample_rate: 16000}\n"
                    "stages:\n  - {name: up, type: resample, up: 2, down: 1, input: a}\n"
                    "  - {name: s, type: add, inputs: [up, b]}\nsink: {type: \"null\"}\n")
    line, col, message = located(gk("validate", path), path)
    assert (line, col) == (9, path.read_text().splitlines()[8].index("b]") + 1)
    assert "block size (128 and 64)" in message and "'up'" in message and "source 'b'" in message


RX = HEAD.replace("channels: 2\n", "channels: 1\n") + """stages:
  - {name: ch, type: channelizer, channels: 4, taps_per_channel: 4}
  - {name: pw, type: power, input: ch}
  - {name: sel, type: select, channels: [3, 1], input: ch}
  - {name: lo, type: gain, db: -6, input: sel}
  - {name: mixd, type: add, inputs: [sel, lo]}
  - {name: mag, type: magnitude}
sinks:
  - {name: power, type: numpy, input: pw, path: out/power.npy}
  - {type: file, input: mag, path: out/two.wav}
"""


def test_validate_prints_the_graph(tmp_path):
    path = tmp_path / "rx.yaml"
    path.write_text(RX)
    r = gk("validate", path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "pipeline g: ok (a graph: 1 source, 6 stages, 2 sinks)"
    rows = [line.split() for line in lines[1:]]
    assert [row[0] for row in rows] == ["source", "ch", "pw", "sel", "lo", "mixd", "mag", "sink", "sink"]
    assert rows[5][:5] == ["mixd", "(add)", "<-", "sel,", "lo"]
    assert rows[-1][:5] == ["sink", "mag", "(file)", "<-", "mag"] and rows[-1][-1] == str(tmp_path / "out/two.wav")
    assert not (tmp_path / "out").exists()  # validate creates nothing


def test_validate_dot_is_graphviz(tmp_path):
    path = tmp_path / "rx.yaml"
    path.write_text(RX)
    r = gk("validate", "--dot", path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('digraph "g" {') and r.stdout.rstrip().endswith("}")
    edges = set(re.findall(r'^  "([^"]+)" -> "([^"]+)"', r.stdout, re.M))
    assert edges == {("source", "ch"), ("ch", "pw"), ("ch", "sel"), ("sel", "lo"), ("sel", "mixd"), ("lo", "mixd"),
                     ("mixd", "mag"), ("pw", "sink:power"), ("mag", "sink:mag")}
    r = gk("validate", "--dot", "pipelines/demo.yaml")  # a chain is a graph of one path
    assert r.returncode == 0 and set(re.findall(r'^  "([^"]+)" -> "([^"]+)"', r.stdout, re.M)) == {
        ("source", "lowpass"), ("lowpass", "stft"), ("stft", "db"), ("db", "sink:db")}


def test_run_writes_and_accounts_every_sink(tmp_path):
    path = tmp_path / "rx.yaml"
    path.write_text(RX)
    js = tmp_path / "stats.json"
    r = gk("run", path, "--stats-json", js, env=NO_DRIVER)
    assert r.returncode == 0, r.stderr
    stats = json.loads(js.read_text())
    # no CUDA driver: auto chooses cpu for the graph and says why (the driver, not the graph)
    assert stats["backend"] == "cpu" and stats["backend_reason"].startswith("auto: ")
    assert "driver" in stats["backend_reason"].lower() and "graph" not in stats["backend_reason"]
    assert [(s["name"], s["input"], s["blocks"]) for s in stats["sinks"]] == [("power", "pw", 13), ("mag", "mag", 13)]
    power = np.load(tmp_path / "out/power.npy")
    assert power.shape == (4, 200) and stats["sinks"][0]["samples"] == 200
    import soundfile as sf

    two, fs = sf.read(tmp_path / "out/two.wav")
    assert fs == 2000 and two.shape == (200, 2) and stats["sinks"][1]["samples"] == 200


def test_cuda_without_a_driver_refuses_a_graph_before_the_first_block(tmp_path):
    # a graph with branches lowers to cuda; without a driver the run stops before any sink's file
    path = tmp_path / "rx.yaml"
    path.write_text(RX)
    r = gk("run", path, "--backend", "cuda", env=NO_DRIVER)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "driver" in r.stderr.lower()
    assert "blocks" not in r.stdout and not (tmp_path / "out").exists()


def test_validate_says_when_a_graph_is_one_path(tmp_path):
    path = write(tmp_path, "sources:\n  - {name: mic, type: synth}\nstages:\n  - {type: gain, db: 1}\n"
                           "sinks:\n  - {name: out, type: \"null\", input: gain}\n")
    path.write_text(path.read_text().replace("source: {type: synth, signal: noise, duration_s: 0.1}\n", ""))
    r = gk("validate", path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "pipeline g: ok (a graph: 1 source, 1 stage, 1 sink; one path)"
    r = gk("run", path, "--blocks", "2", "--backend", "cuda", env=NO_DRIVER)  # one path: the cuda backend's
    assert r.returncode == 1 and "driver" in r.stderr.lower() and "no CUDA lowering" not in r.stderr
