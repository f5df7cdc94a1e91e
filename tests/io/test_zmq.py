"""The zmq source and sink (issue: scale-out, item 2), with real pyzmq on loopback only.

Two real `gk-stream run` processes talk over 127.0.0.1 or ipc:// (a short path under /tmp); every
wait is bounded (the components' own timeouts, and a timeout on every subprocess, which is killed
by its PID when it runs over). Single-process tests drive one side with a bare pyzmq socket to
reach the cases a well-behaved sender never produces (gaps, wrong headers, GNU Radio's raw bytes).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    import zmq  # CI installs the test extra: a missing pyzmq fails here instead of skipping
else:
    zmq = pytest.importorskip("zmq", reason="pyzmq is in the test extra: pip install '.[test]'")

from pygpukit_dsp import Pipeline, stages  # noqa: E402
from pygpukit_dsp.errors import ConfigError, StreamFault  # noqa: E402
from pygpukit_dsp.io import endpoints, wire  # noqa: E402
from pygpukit_dsp.io.base import StreamFormat  # noqa: E402
from pygpukit_dsp.io.net import ZmqSink, ZmqSource  # noqa: E402
from pygpukit_dsp.io.synth import SynthSource  # noqa: E402
from pygpukit_dsp.signal import SignalSpec  # noqa: E402
from pygpukit_dsp.spec import load_text  # noqa: E402

PROC_TIMEOUT = 120  # seconds: every subprocess is killed (by its PID) after this


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ipc_dir():
    """A short folder for ipc:// sockets (a socket path holds at most 107 bytes; pytest's are long)."""
    d = tempfile.mkdtemp(prefix="gkz", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(params=["tcp", "ipc"])
def endpoint(request, ipc_dir):
    if request.param == "tcp":
        port = free_port()
        return f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port}"
    return f"ipc://{ipc_dir}/s.ipc", f"ipc://{ipc_dir}/s.ipc"


class Procs:
    """gk-stream processes of one test; whatever still runs at the end is killed by its PID."""

    def __init__(self, gk_process):
        self.gk = gk_process
        self.procs = []

    def start(self, *args):
        p = self.gk.start(*args)
        self.procs.append(p)
        return p

    def finish(self, p, timeout=PROC_TIMEOUT):
        try:
            out, err = p.communicate(timeout=timeout)
        except Exception:
            p.kill()
            out, err = p.communicate(timeout=30)
            raise AssertionError(f"gk-stream did not finish within {timeout} s:\n{out}\n{err}")
        p.stdout_text, p.stderr_text = out, err
        return p

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=30)


@pytest.fixture
def procs(gk_process):
    ps = Procs(gk_process)
    yield ps
    ps.stop_all()


SEND = """version: 1
name: send
sample_rate: {rate}
block_size: {bs}
channels: {ch}
backend: cpu
source: {source}
stages: [{{type: gain, db: -3}}]
sink: {sink}
"""

RECV = """version: 1
name: recv
sample_rate: {rate}
block_size: {bs}
channels: {ch}
backend: cpu
source: {source}
stages: [{{type: fir, design: {{numtaps: 63, cutoff_hz: 4000}}}}]
sink: {{type: file, path: out.wav}}
"""


def write_pair(tmp_path, *, send_source, send_sink, recv_source, rate=48000, bs=1024, ch=2):
    (tmp_path / "send.yaml").write_text(SEND.format(rate=rate, bs=bs, ch=ch, source=send_source, sink=send_sink))
    (tmp_path / "recv.yaml").write_text(RECV.format(rate=rate, bs=bs, ch=ch, source=recv_source))
    return tmp_path / "send.yaml", tmp_path / "recv.yaml"


def reference(x: np.ndarray, rate=48000, bs=1024) -> np.ndarray:
    """The same input through the same stages in one process."""
    p = Pipeline([stages.Gain(db=-3), stages.Fir(design={"numtaps": 63, "cutoff_hz": 4000})],
                 sample_rate=rate, block_size=bs, backend="cpu")
    return p.process(x)


def synth_input(n, ch=2, rate=48000):
    src = SynthSource(signal="multitone", freqs_hz=[440, 3000], noise_std=0.01, seed=4)
    src.open(StreamFormat(sample_rate=rate, channels=ch))
    return src.generate(0, n)


def run_pair(procs, send_yaml, recv_yaml, *extra_recv):
    recv = procs.start("run", recv_yaml, "--stats-json", "recv.json", *extra_recv)
    send = procs.start("run", send_yaml, "--stats-json", "send.json")
    return procs.finish(send), procs.finish(recv)


# ---------------------------------------------------------------- two processes on loopback

def test_synth_to_wav_across_two_processes_equals_process(tmp_path, procs, endpoint):
    bind_at, connect_to = endpoint
    send_yaml, recv_yaml = write_pair(
        tmp_path, send_source="{type: synth, signal: multitone, freqs_hz: [440, 3000], noise_std: 0.01, seed: 4, "
                              "duration_s: 1.01}",
        send_sink=f"{{type: zmq, endpoint: '{bind_at}'}}", recv_source=f"{{type: zmq, endpoint: '{connect_to}'}}")
    send, recv = run_pair(procs, send_yaml, recv_yaml)
    assert send.returncode == 0, send.stderr_text
    assert recv.returncode == 0, recv.stderr_text
    n = round(1.01 * 48000)  # 48480: 47 full blocks and a short one
    y, fs = sf.read(tmp_path / "out.wav", dtype="float32", always_2d=True)
    assert fs == 48000 and y.shape == (n, 2)
    np.testing.assert_array_equal(y.T, reference(synth_input(n)))
    r, s = json.loads((tmp_path / "recv.json").read_text()), json.loads((tmp_path / "send.json").read_text())
    assert r["ended_by"] == "source end" and r["samples_in"] == n
    assert r["source_stats"]["messages"] == 48 + 1  # 48 blocks and the end of the stream
    assert r["source_stats"]["dropped"] == r["source_stats"]["dropped_blocks"] == 0 and r["events"] == []
    assert s["sink_stats"]["samples"] == n and s["sink_stats"]["dropped"] == 0
    assert "Traceback" not in recv.stderr_text + send.stderr_text


def test_file_source_over_ipc_with_the_receiver_binding(tmp_path, procs, ipc_dir):
    x = (np.random.default_rng(2).standard_normal((30001, 1)) * 0.1).astype(np.float32)
    sf.write(tmp_path / "in.wav", x, 48000, subtype="FLOAT")
    ep = f"ipc://{ipc_dir}/f.ipc"
    send_yaml, recv_yaml = write_pair(
        tmp_path, ch=1, send_source="{type: file, path: in.wav}",
        send_sink=f"{{type: zmq, endpoint: '{ep}', bind: false}}",
        recv_source=f"{{type: zmq, endpoint: '{ep}', bind: true}}")
    (tmp_path / "send.yaml").write_text(send_yaml.read_text().replace("sample_rate: 48000\n", "")
                                        .replace("channels: 1\n", ""))
    send, recv = run_pair(procs, send_yaml, recv_yaml)
    assert (send.returncode, recv.returncode) == (0, 0), send.stderr_text + recv.stderr_text
    y, _ = sf.read(tmp_path / "out.wav", dtype="float32", always_2d=True)
    np.testing.assert_array_equal(y.T, reference(x.T))


def test_a_killed_sender_is_a_fault_at_the_receiver_after_its_timeout(tmp_path, procs, endpoint):
    bind_at, connect_to = endpoint
    send_yaml, recv_yaml = write_pair(
        tmp_path, send_source="{type: synth, rate: realtime}",  # endless, at the sample clock
        send_sink=f"{{type: zmq, endpoint: '{bind_at}'}}",
        recv_source=f"{{type: zmq, endpoint: '{connect_to}', timeout_s: 3}}")
    recv = procs.start("run", recv_yaml, "--stats-json", "recv.json")
    send = procs.start("run", send_yaml)
    deadline = time.monotonic() + 60
    out = tmp_path / "out.wav.partial"
    while time.monotonic() < deadline and not (out.exists() and out.stat().st_size > 40000):
        assert recv.poll() is None and send.poll() is None, "a process ended early"
        time.sleep(0.05)
    assert out.exists(), "the receiver got nothing within 60 s"
    send.send_signal(signal.SIGKILL)
    send.wait(timeout=30)
    t_kill = time.monotonic()
    procs.finish(recv, timeout=60)
    waited = time.monotonic() - t_kill
    assert recv.returncode == 1, recv.stderr_text
    assert 2.5 < waited < 30, waited
    err = recv.stderr_text
    assert "source 'zmq' (pull " in err and "no message for 3 s (timeout_s)" in err and "no end of stream" in err
    assert "Traceback" not in err
    s = json.loads((tmp_path / "recv.json").read_text()) if (tmp_path / "recv.json").exists() else None
    y, _ = sf.read(tmp_path / "out.wav", dtype="float32", always_2d=True)  # finalised: every block before
    assert y.shape[0] > 0 and y.shape[0] % 1024 == 0
    assert s is None or s["ended_by"] == "fault"


def test_push_to_a_slow_receiver_stalls_the_sender_and_loses_nothing(tmp_path, procs, ipc_dir):
    ep = f"ipc://{ipc_dir}/b.ipc"
    send_yaml, recv_yaml = write_pair(  # 30 blocks of 19 KB: more than the queues and the OS's buffers hold
        tmp_path, bs=4800, ch=1,
        send_source="{type: synth, signal: multitone, freqs_hz: [440, 3000], noise_std: 0.01, seed: 4, "
                    "duration_s: 3}",
        send_sink=f"{{type: zmq, endpoint: '{ep}', hwm: 1}}",
        recv_source=f"{{type: zmq, endpoint: '{ep}', hwm: 1, rate: realtime}}")  # 0.1 s per block
    send, recv = run_pair(procs, send_yaml, recv_yaml)
    assert (send.returncode, recv.returncode) == (0, 0), send.stderr_text + recv.stderr_text
    s, r = (json.loads((tmp_path / f).read_text()) for f in ("send.json", "recv.json"))
    assert s["sink_stats"]["stalls"] > 0 and s["sink_stats"]["stall_ms"] > 500  # held back by the receiver
    assert "sink stalls" in send.stdout_text
    assert r["source_stats"]["dropped"] == 0 and r["samples_in"] == 144000
    y, _ = sf.read(tmp_path / "out.wav", dtype="float32", always_2d=True)
    np.testing.assert_array_equal(y.T, reference(synth_input(144000, ch=1), bs=4800))


def test_pub_to_a_slow_subscriber_drops_blocks_and_both_sides_count_them(tmp_path, procs, ipc_dir):
    ep = f"ipc://{ipc_dir}/p.ipc"
    send_yaml, recv_yaml = write_pair(
        tmp_path, bs=4800, ch=1, send_source="{type: synth, signal: noise, seed: 1, duration_s: 3}",
        send_sink=f"{{type: zmq, endpoint: '{ep}', pattern: pub, hwm: 1}}",
        recv_source=f"{{type: zmq, endpoint: '{ep}', pattern: sub, hwm: 1, rate: realtime, timeout_s: 10}}")
    send, recv = run_pair(procs, send_yaml, recv_yaml)
    assert (send.returncode, recv.returncode) == (0, 0), send.stderr_text + recv.stderr_text
    s, r = (json.loads((tmp_path / f).read_text()) for f in ("send.json", "recv.json"))
    dropped = s["sink_stats"]["dropped_blocks"]
    assert dropped > 0 and s["sink_stats"]["dropped"] == 4800 * dropped
    assert r["source_stats"]["dropped_blocks"] == dropped  # every block the publisher dropped is a gap here
    assert r["source_stats"]["dropped"] == 4800 * dropped
    assert r["source_stats"]["samples"] + r["source_stats"]["dropped"] == 144000 == s["samples_in"]
    assert sum(e["dropped_blocks"] for e in r["events"]) == dropped
    assert "source dropped" in recv.stdout_text and "sink dropped" in send.stdout_text
    assert r["ended_by"] == "source end"


def test_a_format_mismatch_is_a_fault_naming_both_sides(tmp_path, procs, endpoint):
    bind_at, connect_to = endpoint
    send_yaml, recv_yaml = write_pair(
        tmp_path, send_source="{type: synth, duration_s: 1}",
        send_sink=f"{{type: zmq, endpoint: '{bind_at}', timeout_s: 2}}",
        recv_source=f"{{type: zmq, endpoint: '{connect_to}'}}")
    recv_yaml.write_text(recv_yaml.read_text().replace("channels: 2", "channels: 1"))
    send, recv = run_pair(procs, send_yaml, recv_yaml)
    assert recv.returncode == 1
    assert ("block 0 of stream 0 carries 2 ch float32 @ 48000 Hz (time), but this pipeline declares 1 ch "
            "float32 @ 48000 Hz (time): channels 2 != 1") in recv.stderr_text
    # the sender cannot tell: what it sent may all sit in the OS's buffers when the receiver hangs up
    assert send.returncode in (0, 1) and "Traceback" not in send.stderr_text + recv.stderr_text


# ---------------------------------------------------------------- one process, bare pyzmq on the other side

def _spec(ch=1, dtype="float32", bs=4, rate=1000.0):
    return SignalSpec(sample_rate=rate, channels=ch, block_size=bs, dtype=dtype)


def _source(ep, **kw):
    src = ZmqSource(endpoint=ep, **{"timeout_s": 2, "start_timeout_s": 5, **kw})
    return src


def _read_all(src, n=4, limit=1000):
    parts = []
    for _ in range(limit):
        x = src.read(n)
        if x.shape[1] == 0:
            break
        parts.append(np.array(x))
    return np.concatenate(parts, axis=1) if parts else None


def _header(seq, offset, samples, *, ch=1, kind=wire.KIND_DATA, stream_id=0, rate=1000.0, dtype="float32"):
    return wire.pack(kind, dtype=dtype, domain="time", stream_id=stream_id, channels=ch, bins=0, sequence=seq,
                     offset=offset, samples=samples, sample_rate=rate)


@pytest.fixture
def push(ipc_dir):
    """make() -> (a bound bare PUSH socket, its endpoint); a fresh one per case: a PUSH socket keeps
    sending to a receiver that left until it notices, and those messages are lost."""
    made = []

    def make():
        s = zmq.Context.instance().socket(zmq.PUSH)
        s.linger = 0
        ep = f"ipc://{ipc_dir}/u{len(made)}.ipc"
        s.bind(ep)
        made.append(s)
        return s, ep

    yield make
    for s in made:
        s.close(linger=0)


def _send_block(s, seq, offset, x, **kw):
    s.send_multipart([_header(seq, offset, x.shape[1], ch=x.shape[0], **kw), np.ascontiguousarray(x)])


def test_gaps_are_counted_as_drops_and_can_be_filled_with_zeros(push):
    for gaps in ("skip", "zeros"):
        s, ep = push()
        src = _source(ep, gaps=gaps)
        src.open(StreamFormat(sample_rate=1000.0, channels=1, dtype="float32"))
        a, b, c = (np.full((1, 4), v, np.float32) for v in (1, 2, 3))
        _send_block(s, 0, 0, a)
        _send_block(s, 3, 12, b)  # blocks 1 and 2 lost
        _send_block(s, 4, 16, c)
        s.send_multipart([_header(5, 20, 0, kind=wire.KIND_END), wire.end_note("source end", None)])
        y = _read_all(src)
        st = src.stats()
        src.close()
        assert (st["dropped_blocks"], st["dropped"], st["gaps"], st["messages"]) == (2, 8, 1, 4)
        assert src.events == [{"sample": 4, "dropped_samples": 8, "dropped_blocks": 2, "sequence": [1, 2],
                               "why": "lost on the link"}]
        expect = [a, b, c] if gaps == "skip" else [a, np.zeros((1, 8), np.float32), b, c]
        np.testing.assert_array_equal(y, np.concatenate(expect, axis=1))


def test_headers_that_do_not_fit_are_faults(push):
    fmt = StreamFormat(sample_rate=1000.0, channels=1, dtype="float32")
    cases = [
        (lambda: _send_block(s, 0, 0, np.zeros((1, 4), np.complex64), dtype="complex64"),
         "carries 1 ch complex64 @ 1000 Hz (time), but this pipeline declares 1 ch float32 @ 1000 Hz (time): "
         "dtype complex64 != float32"),
        (lambda: _send_block(s, 0, 0, np.zeros((1, 4), np.float32), rate=2000.0),
         "sample_rate 2000.0 != 1000.0"),
        (lambda: s.send_multipart([b"junk", b"x"]), "not a pygpukit-dsp message"),
        (lambda: (_send_block(s, 0, 0, np.zeros((1, 4), np.float32)),
                  _send_block(s, 0, 4, np.zeros((1, 4), np.float32))), "went back from 1 to 0"),
        (lambda: (_send_block(s, 0, 0, np.zeros((1, 4), np.float32)),
                  _send_block(s, 1, 4, np.zeros((1, 4), np.float32), stream_id=9)), "stream id 9"),
        (lambda: s.send_multipart([_header(0, 0, 8), np.zeros(4, np.float32)]), "announces 8 samples"),
        (lambda: s.send_multipart([_header(0, 0, 0, kind=wire.KIND_END), wire.end_note("fault", "disk full")]),
         "the sender's run failed after 0 blocks: disk full"),
    ]
    for send, message in cases:
        s, ep = push()
        src = _source(ep)
        src.open(fmt)
        send()
        with pytest.raises(StreamFault, match="zmq source ipc://") as info:
            _read_all(src)
        src.close()
        assert message in str(info.value)


def test_a_source_that_hears_nothing_times_out_and_a_stop_ends_its_wait(push):
    s, ep = push()
    src = _source(ep, start_timeout_s=0.3)
    src.open(StreamFormat(sample_rate=1000.0, channels=1))
    t0 = time.monotonic()
    with pytest.raises(StreamFault, match=r"no message within 0.3 s \(start_timeout_s\): is the sender running"):
        src.read(4)
    assert time.monotonic() - t0 < 5
    src = _source(ep, start_timeout_s=60)
    src.open(StreamFormat(sample_rate=1000.0, channels=1))
    threading.Timer(0.2, src.interrupt).start()
    t0 = time.monotonic()
    assert src.read(4).shape == (1, 0)  # the stop ends the stream
    assert time.monotonic() - t0 < 5
    src.close()


def test_raw_mode_reads_gnu_radio_style_interleaved_samples(push):
    s, ep = push()
    src = _source(ep, mode="raw")
    src.open(StreamFormat(sample_rate=1000.0, channels=2, dtype="complex64"))
    x = (np.arange(20) + 1j * np.arange(20)).astype(np.complex64).reshape(2, 10)
    inter = np.ascontiguousarray(x.T)  # sample by sample, as a GNU Radio vector stream
    s.send(inter[:3].tobytes())  # messages of any length
    s.send(inter[3:].tobytes())
    s.send(b"")
    np.testing.assert_array_equal(_read_all(src, n=4), x)
    src.close()


class closer(threading.Thread):
    """sink.close() on a thread of its own (it waits for the receiver, which this thread is)."""

    def __init__(self, sink):
        super().__init__(daemon=True)
        self.sink, self.error = sink, None
        self.start()

    def run(self):
        try:
            self.sink.close()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def test_raw_sink_sends_bare_interleaved_samples(ipc_dir):
    ep = f"ipc://{ipc_dir}/r.ipc"
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.linger = 0
    pull.bind(ep)
    try:
        sink = ZmqSink(endpoint=ep, bind=False, mode="raw", start_timeout_s=5, timeout_s=5)
        sink.open(_spec(ch=2, dtype="complex64", bs=5))
        x = (np.arange(10) - 1j * np.arange(10)).astype(np.complex64).reshape(2, 5)
        sink.write(x)
        sink.close()
        got = [pull.recv() for _ in range(2) if pull.poll(5000)]
    finally:
        pull.close(linger=0)
    assert got[0] == np.ascontiguousarray(x.T).tobytes() and got[1] == b""


def test_a_large_block_goes_without_a_copy_and_the_header_describes_it(ipc_dir):
    ep = f"ipc://{ipc_dir}/l.ipc"
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.linger = 0
    pull.bind(ep)
    try:
        sink = ZmqSink(endpoint=ep, bind=False, start_timeout_s=5, timeout_s=5, stream_id=7)
        spec = SignalSpec(sample_rate=1e6, channels=1, block_size=1 << 16, dtype="complex64", domain="frames",
                          bins=3)
        sink.open(spec)
        x = np.ones((1, 1 << 16, 3), np.complex64)
        sink.write(x)
        sink.run_report({"ended_by": "source end", "fault": None})
        closing = closer(sink)  # the sink waits for its receiver to hang up after the end of the stream
        assert pull.poll(5000)
        h, data = pull.recv_multipart()
        end = pull.recv_multipart()
    finally:
        pull.close(linger=0)
    closing.join(30)
    assert closing.error is None and not closing.is_alive()
    hd = wire.unpack(h)
    assert (hd.kind, hd.stream_id, hd.channels, hd.bins, hd.samples, hd.domain, hd.dtype, hd.sample_rate) == \
        (wire.KIND_DATA, 7, 1, 3, 1 << 16, "frames", "complex64", 1e6)
    assert data == x.tobytes()
    he = wire.unpack(end[0])
    assert (he.kind, he.sequence, he.offset) == (wire.KIND_END, 1, 1 << 16)
    assert json.loads(end[1]) == {"ended_by": "source end", "fault": None}


def test_a_push_sink_without_a_receiver_times_out(ipc_dir):
    sink = ZmqSink(endpoint=f"ipc://{ipc_dir}/n.ipc", start_timeout_s=0.3, timeout_s=0.3)
    sink.open(_spec())
    with pytest.raises(StreamFault, match=r"no receiver within 0.3 s \(start_timeout_s\)"):
        sink.write(np.zeros((1, 4), np.float32))
    t0 = time.monotonic()
    sink.close()  # nobody connected: no end of stream to send, nothing to wait for
    assert time.monotonic() - t0 < 2


def test_a_receiver_that_never_hangs_up_is_a_fault_after_end_timeout(ipc_dir):
    ep = f"ipc://{ipc_dir}/h.ipc"
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.linger = 0
    pull.connect(ep)
    try:
        sink = ZmqSink(endpoint=ep, start_timeout_s=5, timeout_s=5, end_timeout_s=0.5)
        sink.open(_spec())
        sink.write(np.zeros((1, 4), np.float32))
        with pytest.raises(StreamFault, match=r"1 receiver\(s\) still connected 0.5 s \(end_timeout_s\) after the "
                                              "end of the stream"):
            sink.close()
        assert len(pull.recv_multipart()) == 2 and len(pull.recv_multipart()) == 2  # the block, then the end
    finally:
        pull.close(linger=0)


def test_sigint_ends_a_waiting_receiver_and_a_waiting_sender(tmp_path, procs, ipc_dir):
    send_yaml, recv_yaml = write_pair(
        tmp_path, send_source="{type: synth, duration_s: 1}",
        send_sink=f"{{type: zmq, endpoint: 'ipc://{ipc_dir}/a.ipc'}}",  # nobody receives on a.ipc
        recv_source=f"{{type: zmq, endpoint: 'ipc://{ipc_dir}/b.ipc', bind: true}}")  # nobody sends on b.ipc
    recv, send = procs.start("run", recv_yaml), procs.start("run", send_yaml)
    deadline = time.monotonic() + 90
    while not ((ipc_dir / "a.ipc").exists() and (ipc_dir / "b.ipc").exists()):  # bound: running, and waiting
        assert time.monotonic() < deadline and recv.poll() is None and send.poll() is None
        time.sleep(0.05)
    time.sleep(0.5)
    for p in (recv, send):
        p.send_signal(signal.SIGINT)
    for p in (recv, send):
        procs.finish(p, timeout=30)
        assert p.returncode == 130, p.stderr_text
        assert "ended by SIGINT" in p.stdout_text and "Traceback" not in p.stderr_text


# ---------------------------------------------------------------- configuration

def test_endpoint_errors_are_located(tmp_path):
    text = ("version: 1\nsample_rate: 48000\nchannels: 1\n"
            "source: {type: zmq, endpoint: 'tcp://*:5555'}\n"
            "sink: {type: zmq, endpoint: 'udp://127.0.0.1:5555', pattern: pull}\n")
    with pytest.raises(ConfigError) as info:
        load_text(text, "p.yaml")
    msg = str(info.value)
    assert "p.yaml:4:31: source 'zmq': 'tcp://*:5555': host '*' (every interface) only works where the socket " \
           "binds" in msg
    assert "unknown scheme 'udp'" in msg and "p.yaml:5:" in msg
    assert "pattern" in msg and "'push' or 'pub'" in msg or "push" in msg
    for bad, why in [("tcp://127.0.0.1", "needs HOST:PORT"), ("tcp://127.0.0.1:0", "port must be 1..65535"),
                     ("ipc://", "needs a socket file path"), ("127.0.0.1:5", "not an endpoint"),
                     (" tcp://a:1", "without spaces")]:
        with pytest.raises(ConfigError, match=why):
            ZmqSource(endpoint=bad)


def test_the_ipc_path_limit_is_a_config_error_when_opened(tmp_path):
    src = ZmqSource(endpoint="ipc://" + "x" * 120 + ".ipc", base_dir=tmp_path)
    with pytest.raises(ConfigError, match="at most 107"):
        src.open(StreamFormat(sample_rate=1000.0, channels=1))


def test_another_scheme_resolves_through_a_registered_resolver(ipc_dir):
    """The hook item 4 (Ray placement) plugs into: a logical endpoint resolved when the stream opens."""
    seen = []

    def resolve(text, bind):
        seen.append((text, bind))
        return f"ipc://{ipc_dir}/{text.split('://')[1]}.ipc"

    endpoints.register_scheme("actor", resolve)
    try:
        assert "actor" in endpoints.schemes()
        sink = ZmqSink(endpoint="actor://spectrum", start_timeout_s=5, timeout_s=5)
        src = ZmqSource(endpoint="actor://spectrum", start_timeout_s=5, timeout_s=5)
        sink.open(_spec())
        src.open(StreamFormat(sample_rate=1000.0, channels=1))
        assert sink.endpoint_bound == f"ipc://{ipc_dir}/spectrum.ipc"
        sink.write(np.arange(4, dtype=np.float32)[None])
        sink.run_report({"ended_by": "source end", "fault": None})
        closing = closer(sink)
        np.testing.assert_array_equal(_read_all(src), np.arange(4, dtype=np.float32)[None])
        src.close()
        closing.join(30)
        assert closing.error is None and not closing.is_alive()
    finally:
        endpoints.unregister_scheme("actor")
    assert seen == [("actor://spectrum", True), ("actor://spectrum", False)]
    with pytest.raises(ConfigError, match="unknown scheme 'actor'"):
        ZmqSource(endpoint="actor://spectrum")


def test_a_bound_port_star_reports_the_port_it_got():
    sink = ZmqSink(endpoint="tcp://127.0.0.1:*")
    sink.open(_spec())
    try:
        assert sink.endpoint_bound.startswith("tcp://127.0.0.1:") and not sink.endpoint_bound.endswith(":*")
    finally:
        sink._close_socket()


def test_missing_pyzmq_is_a_config_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "zmq", None)  # import zmq raises ImportError
    text = "version: 1\nsample_rate: 48000\nsource: {type: zmq, endpoint: 'tcp://127.0.0.1:5555'}\n"
    with pytest.raises(ConfigError) as info:
        load_text(text, "p.yaml")
    assert "p.yaml:3:9: source 'zmq': type 'zmq' needs the pyzmq package, which is not installed" in str(info.value)
    assert "pip install 'pygpukit-dsp[net]'" in str(info.value)


def test_the_source_needs_a_declared_sample_rate():
    src = ZmqSource(endpoint="tcp://127.0.0.1:5555")
    with pytest.raises(ConfigError, match="needs sample_rate at the pipeline level"):
        src.open(StreamFormat())


def test_binding_a_taken_port_is_a_config_error():
    port = free_port()
    holder = zmq.Context.instance().socket(zmq.PULL)
    holder.linger = 0
    holder.bind(f"tcp://127.0.0.1:{port}")
    try:
        src = ZmqSource(endpoint=f"tcp://127.0.0.1:{port}", bind=True)
        with pytest.raises(ConfigError, match="cannot bind .* holds it"):
            src.open(StreamFormat(sample_rate=1000.0, channels=1))
    finally:
        holder.close(linger=0)


def test_subscribers_applies_to_pub_only():
    with pytest.raises(ConfigError, match="'subscribers' applies to pattern pub"):
        ZmqSink(endpoint="tcp://*:5555", subscribers=2)
    ZmqSink(endpoint="tcp://*:5555", pattern="pub", subscribers=2)


def test_the_config_round_trips_through_yaml():
    text = ("version: 1\nsample_rate: 48000\nchannels: 1\n"
            "source: {type: zmq, endpoint: 'tcp://127.0.0.1:5555', pattern: sub, hwm: 4, gaps: zeros}\n"
            "sink: {type: zmq, endpoint: 'ipc:///tmp/x.ipc', pattern: pub, subscribers: 2, mode: raw}\n")
    cfg = load_text(text)[0]
    assert cfg.source.to_config() == {"type": "zmq", "endpoint": "tcp://127.0.0.1:5555", "pattern": "sub",
                                      "hwm": 4, "gaps": "zeros"}
    assert cfg.sink.to_config() == {"type": "zmq", "endpoint": "ipc:///tmp/x.ipc", "pattern": "pub",
                                    "subscribers": 2, "mode": "raw"}


def test_drops_on_the_link_become_annotations_of_a_sigmf_recording(push, tmp_path):
    sigmf = pytest.importorskip("sigmf")
    from sigmf.sigmffile import fromfile

    s, ep = push()
    blocks = {0: 1.0, 1: 2.0, 4: 5.0, 5: 6.0}  # blocks 2 and 3 are lost on the way

    def send():
        for seq, v in blocks.items():
            _send_block(s, seq, 4 * seq, np.full((1, 4), v, np.complex64), dtype="complex64", rate=1e3)
        s.send_multipart([_header(6, 24, 0, kind=wire.KIND_END, dtype="complex64"), wire.end_note("source end", None)])

    t = threading.Thread(target=send, daemon=True)
    t.start()
    (tmp_path / "r.yaml").write_text(
        f"version: 1\nsample_rate: 1000\nblock_size: 4\ndtype: complex64\nbackend: cpu\n"
        f"source: {{type: zmq, endpoint: '{ep}', gaps: zeros, timeout_s: 5}}\n"
        "stages: [{type: resample, up: 2, down: 1}]\nsink: {type: sigmf, path: rec}\n")
    summary = Pipeline.from_yaml(tmp_path / "r.yaml").run()
    t.join(10)
    assert summary.source_stats["dropped"] == 8 and summary.source_stats["dropped_blocks"] == 2
    assert summary.events == [{"sample": 8, "dropped_samples": 8, "dropped_blocks": 2, "sequence": [2, 3],
                               "why": "lost on the link"}]
    rec = fromfile(str(tmp_path / "rec"))
    rec.validate()
    run, drop = rec.get_annotations()
    assert run["gk:dropped_samples"] == 8 and run["gk:dropped_blocks"] == 2 and run["gk:stages"] == ["resample"]
    assert run["core:sample_count"] == 48  # 24 samples (zeros filled in) at twice the rate
    assert drop["core:label"] == "dropped" and drop["core:sample_start"] == 16  # input sample 8, output rate x2
    assert drop["gk:dropped_samples"] == 8 and "(blocks 2..3)" in drop["core:comment"]


@pytest.mark.gpu
def test_two_processes_on_the_cuda_backend(tmp_path, procs, ipc_dir):
    """The receiver's blocks are views of ZeroMQ's frames (read-only): the CUDA engine takes them as they are."""
    ep = f"ipc://{ipc_dir}/g.ipc"
    send_yaml, recv_yaml = write_pair(
        tmp_path, send_source="{type: synth, signal: multitone, freqs_hz: [440, 3000], noise_std: 0.01, seed: 4, "
                              "duration_s: 1.01}",
        send_sink=f"{{type: zmq, endpoint: '{ep}'}}", recv_source=f"{{type: zmq, endpoint: '{ep}'}}")
    for path in (send_yaml, recv_yaml):
        path.write_text(path.read_text().replace("backend: cpu", "backend: cuda"))
    send, recv = run_pair(procs, send_yaml, recv_yaml)
    assert (send.returncode, recv.returncode) == (0, 0), send.stderr_text + recv.stderr_text
    y, _ = sf.read(tmp_path / "out.wav", dtype="float32", always_2d=True)
    p = Pipeline([stages.Gain(db=-3), stages.Fir(design={"numtaps": 63, "cutoff_hz": 4000})],
                 sample_rate=48000, block_size=1024)
    want = p.process(synth_input(48480), backend="cuda")
    np.testing.assert_allclose(y.T, want, rtol=0, atol=1e-5)
