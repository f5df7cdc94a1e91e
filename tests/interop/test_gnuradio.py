"""gk-stream against GNU Radio itself: a Python flowgraph without a GUI (gr_flowgraph.py, run by the
system's python3, where Debian's gnuradio puts its bindings) and `gk-stream run` exchange finite
streams in both directions over gr-zeromq's raw push/pull and pub/sub with a key (topic), with
pass_tags on and off. Every sample is compared, the runs end cleanly (exit 0), the tags arrive.

Both sides are subprocesses over tcp://127.0.0.1:<free port> or ipc://, bounded in time and killed
by their PIDs in the end. Without GNU Radio these tests skip, unless GK_REQUIRE_GNURADIO=1 (.ci/run).
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

FLOWGRAPH = Path(__file__).with_name("gr_flowgraph.py")
N = 200003          # samples per channel: 195 blocks of 1024 and a tail of 323
BS = 1024
RATE = 48000
TIMEOUT_S = 90      # every process is killed (by its PID) after this


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def endpoints():
    """make(kind) -> an address both sides use: tcp on a free loopback port, or an ipc socket."""
    d = tempfile.mkdtemp(prefix="gkgr", dir="/tmp")

    def make(kind):
        return f"tcp://127.0.0.1:{_free_port()}" if kind == "tcp" else f"ipc://{d}/gr{time.monotonic_ns()}.ipc"

    yield make
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def procs(gk_process, gnuradio_python, tmp_path):
    """gk(*args) starts `gk-stream`, gr(*args) the flowgraph; whatever still runs at the end is killed."""
    started = []

    class P:
        def gk(self, *args):
            p = gk_process.start(*args)
            started.append(p)
            return p

        def gr(self, *args):
            p = subprocess.Popen([gnuradio_python, str(FLOWGRAPH), *map(str, args)], cwd=tmp_path,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            started.append(p)
            return p

        def finish(self, p, timeout=TIMEOUT_S):
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate(timeout=30)
                raise AssertionError(f"{p.args[:3]} did not finish within {timeout} s:\n{out}\n{err}") from None
            return out, err

    yield P()
    for p in started:
        if p.poll() is None:
            p.kill()
            p.communicate(timeout=30)


def _input(tmp_path, ch, dtype):
    rng = np.random.default_rng(ch)
    x = rng.standard_normal((ch, N)).astype(np.float32)
    if dtype == "complex64":
        x = (x + 1j * rng.standard_normal((ch, N))).astype(np.complex64)
    np.save(tmp_path / "x.npy", x)
    return x


def _yaml(tmp_path, name, ch, dtype, source, sink):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"version: 1\nname: {name}\nsample_rate: {RATE}\nblock_size: {BS}\nchannels: {ch}\n"
                    f"dtype: {dtype}\nbackend: cpu\nsource: {source}\nstages: [{{type: gain, db: 0}}]\n"
                    f"sink: {sink}\n")
    return path


def _opened(tmp_path, gk, timeout_s=30):
    """Until the receiving gk-stream has opened its source and then its sink (a .partial file): from then
    on it is subscribed, and a publisher's first samples reach it."""
    deadline = time.monotonic() + timeout_s
    while not list(tmp_path.glob("*.partial")):
        assert gk.poll() is None and time.monotonic() < deadline, "gk-stream did not open its sink"
        time.sleep(0.05)


def _zmq(ep, pattern, tags, topic, **extra):
    keys = {"type": "zmq", "endpoint": ep, "pattern": pattern, "mode": "raw", "tags": tags, **extra}
    if topic:
        keys["topic"] = topic
    return json.dumps(keys)


CASES = [  # pattern of the sender, tags, topic, channels, dtype, transport
    ("push", True, None, 2, "complex64", "tcp"),
    ("push", False, None, 1, "float32", "ipc"),
    ("pub", True, "iq", 1, "complex64", "ipc"),
    ("pub", False, "audio", 2, "float32", "tcp"),
]
IDS = [f"{c[0]}-{'tags' if c[1] else 'notags'}-{c[3]}ch-{c[4]}" for c in CASES]


@pytest.mark.parametrize("pattern,tags,topic,ch,dtype,transport", CASES, ids=IDS)
def test_gnu_radio_sends_a_finite_stream_that_ends_our_run_cleanly(tmp_path, procs, endpoints, pattern, tags,
                                                                   topic, ch, dtype, transport):
    x = _input(tmp_path, ch, dtype)
    ep = endpoints(transport)
    sink = "{type: sigmf, path: rec}" if tags else "{type: numpy, path: out.npy}"
    recv = _yaml(tmp_path, "recv", ch, dtype, _zmq(ep, "pull" if pattern == "push" else "sub", tags, topic,
                                                   end_after_idle_s=1.5, start_timeout_s=60), sink)
    gk = procs.gk("run", recv, "--stats-json", "s.json")
    _opened(tmp_path, gk)
    gr_args = ["send", "--pattern", pattern, "--address", ep, "--input", "x.npy", "--rate", RATE]
    if tags:
        gr_args.append("--tags")
    if topic:  # a pub_sink binds at once; its subscriber joins during the delay (ZeroMQ's slow joiner)
        gr_args += ["--key", topic, "--delay-s", "1.5"]
    gr = procs.gr(*gr_args)
    _, gr_err = procs.finish(gr)
    assert gr.returncode == 0, gr_err
    out, err = procs.finish(gk)
    assert gk.returncode == 0, err
    st = json.loads((tmp_path / "s.json").read_text())
    assert st["ended_by"] == "sender idle" and "ended by sender idle" in out
    assert st["samples_in"] == st["samples_out"] == N and st["blocks"] == -(-N // BS)  # the tail too
    if tags:
        y = np.fromfile(tmp_path / "rec.sigmf-data", dtype="<c8").reshape(-1, ch).T
        got = [(e["sample"], e["key"], e["value"]) for e in st["events"] if e.get("event") == "tag"]
        assert got == [(0, "rx_time", [1700000000, 0.25]), (0, "rx_freq", 100e6), (0, "rx_rate", float(RATE)),
                       (1000, "rx_freq", 101e6)]
        assert "stream time: sample 0 at 2023-11-14T22:13:20.250000Z (rx_time)" in out
        meta = json.loads((tmp_path / "rec.sigmf-meta").read_text())
        assert [(c["core:sample_start"], c.get("core:frequency")) for c in meta["captures"]] == [(0, 100e6),
                                                                                              (1000, 101e6)]
        assert meta["captures"][0]["core:datetime"] == "2023-11-14T22:13:20.250000Z"
        assert {a["gk:tag"] for a in meta["annotations"] if "gk:tag" in a} == {"rx_time", "rx_freq", "rx_rate"}
    else:
        y = np.load(tmp_path / "out.npy")
    np.testing.assert_array_equal(y, x)
    if pattern == "pub":
        joined = [e for e in st["events"] if e.get("event") == "first message"]
        assert len(joined) == 1 and joined[0]["waited_s"] > 0


@pytest.mark.parametrize("pattern,tags,topic,ch,dtype,transport", CASES, ids=IDS)
def test_gnu_radio_receives_our_finite_stream(tmp_path, procs, endpoints, pattern, tags, topic, ch, dtype,
                                              transport):
    x = _input(tmp_path, ch, dtype)
    ep = endpoints(transport)
    gr_args = ["recv", "--pattern", "pull" if pattern == "push" else "sub", "--address", ep, "--count", N,
               "--channels", ch, "--dtype", dtype, "--output", "y.npy", "--timeout-s", 60]
    if tags:
        gr_args.append("--tags")
    if topic:
        gr_args += ["--key", topic]
    gr = procs.gr(*gr_args)
    # pub never waits for a subscriber: a queue that holds the whole stream loses none of it to a slow one
    extra = {"hwm": 1000} if pattern == "pub" else {}
    send = _yaml(tmp_path, "send", ch, dtype, "{type: numpy, path: x.npy}", _zmq(ep, pattern, tags, topic, **extra))
    gk = procs.gk("run", send, "--stats-json", "s.json")  # binds; a pub waits for its subscriber
    out, err = procs.finish(gk)
    assert gk.returncode == 0, err
    st = json.loads((tmp_path / "s.json").read_text())
    assert st["ended_by"] == "source end" and st["sink_stats"]["dropped"] == 0
    gr_out, gr_err = procs.finish(gr)
    assert gr.returncode == 0, gr_out + gr_err
    assert "header magic" not in gr_err and "Traceback" not in gr_err
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), x)
    tags_got = json.loads((tmp_path / "y.npy.tags.json").read_text())
    if tags:
        assert [(t["offset"], t["key"]) for t in tags_got] == [(0, "rx_rate"), (0, "rx_time")]
        assert float(tags_got[0]["value"]) == RATE
    else:
        assert tags_got == []


def test_ctrl_c_after_gnu_radio_finished_reports_the_signal(tmp_path, procs, endpoints):
    x = _input(tmp_path, 1, "float32")
    ep = endpoints("tcp")
    recv = _yaml(tmp_path, "recv", 1, "float32", _zmq(ep, "pull", False, None, end_after_idle_s=600),
                 "{type: numpy, path: out.npy}")
    gk = procs.gk("run", recv, "--stats-json", "s.json")
    _opened(tmp_path, gk)
    gr = procs.gr("send", "--pattern", "push", "--address", ep, "--input", "x.npy")
    procs.finish(gr)
    assert gr.returncode == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # every sample is in: the receiver holds the tail of 323
        live = (tmp_path / "out.npy.partial")
        if live.exists() and live.stat().st_size >= (N - N % BS) * 4:
            break
        time.sleep(0.05)
    time.sleep(0.5)
    gk.send_signal(signal.SIGINT)
    out, err = procs.finish(gk, timeout=30)
    assert gk.returncode == 130, err
    st = json.loads((tmp_path / "s.json").read_text())
    assert st["ended_by"] == "SIGINT" and "ended by SIGINT" in out
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), x)


def test_gnu_radio_passing_tags_to_an_untagged_source_says_what_to_set(tmp_path, procs, endpoints):
    _input(tmp_path, 1, "float32")
    ep = endpoints("ipc")
    recv = _yaml(tmp_path, "recv", 1, "float32", _zmq(ep, "pull", False, None, end_after_idle_s=1),
                 "{type: numpy, path: out.npy}")
    gk = procs.gk("run", recv, "--stats-json", "s.json")
    _opened(tmp_path, gk)
    gr = procs.gr("send", "--pattern", "push", "--address", ep, "--input", "x.npy", "--tags")
    _, err = procs.finish(gk)
    procs.finish(gr)
    assert gk.returncode == 1 and "set 'tags: true' here, or pass_tags off in GNU Radio" in err
    assert json.loads((tmp_path / "s.json").read_text())["ended_by"] == "fault"
