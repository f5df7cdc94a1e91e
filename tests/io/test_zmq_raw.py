"""The zmq source and sink in raw mode as GNU Radio meets them (io/zmq_raw.py): gr-zeromq's tag
header, topics (GNU Radio's key), the end of a stream that sends none (end_after_idle_s) with its
tail, a signal while the receiver waits, a fault's --stats-json, and when a subscriber joined.

One side is a bare pyzmq socket in the test; the gk-stream side runs in-process or as
`gk-stream run` (a subprocess bounded in time, killed by its PID in the end). tests/interop/
meets GNU Radio itself."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    import zmq
else:
    zmq = pytest.importorskip("zmq", reason="pyzmq is in the test extra: pip install '.[test]'")

from pygpukit_dsp.errors import ConfigError, StreamFault  # noqa: E402
from pygpukit_dsp.io import pmt, wire  # noqa: E402
from pygpukit_dsp.io.base import StreamFormat  # noqa: E402
from pygpukit_dsp.io.net import ZmqSink, ZmqSource  # noqa: E402
from pygpukit_dsp.io.zmq_raw import END_TAG, Tag, TagHeaderError, pack_tag_header, unpack_tag_header  # noqa: E402
from pygpukit_dsp.signal import SignalSpec  # noqa: E402

PROC_TIMEOUT = 60
RX_TIME = (pmt.Uint64(1700000000), 0.25)


@pytest.fixture
def ipc_dir():
    d = tempfile.mkdtemp(prefix="gkr", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def sockets():
    """make(type, endpoint) -> a bound bare socket, closed at the end."""
    made = []

    def make(kind, ep):
        s = zmq.Context.instance().socket(kind)
        s.linger = 0
        s.bind(ep)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close(linger=0)


def _read_all(src, n=4, limit=10000):
    parts = []
    for _ in range(limit):
        x = src.read(n)
        if x.shape[1] == 0:
            break
        parts.append(np.array(x))
    return np.concatenate(parts, axis=1) if parts else np.zeros((1, 0), np.float32)


def _open(src, ch=1, dtype="float32", rate=1000.0):
    src.open(StreamFormat(sample_rate=rate, channels=ch, dtype=dtype))
    return src


# ---------------------------------------------------------------- the tag header

def test_a_tag_header_round_trips_and_gives_where_the_samples_begin():
    tags = [Tag(10, "rx_time", RX_TIME, "usrp"), Tag(12, "rx_freq", 1e8, None)]
    head = pack_tag_header(10, tags)
    assert head[:3] == b"\xf0\x5f\x01"  # uint16 0x5FF0 little-endian, version 1
    offset, back, end = unpack_tag_header(head + b"\0" * 8)
    assert (offset, back, end) == (10, tags, len(head))
    with pytest.raises(TagHeaderError):
        unpack_tag_header(head[:-1])
    with pytest.raises(TagHeaderError):
        unpack_tag_header(b"\x00" * 19)


def test_tags_become_events_and_rx_time_sets_the_time_origin(sockets, ipc_dir):
    ep = f"ipc://{ipc_dir}/t.ipc"
    s = sockets(zmq.PUSH, ep)
    src = _open(ZmqSource(endpoint=ep, mode="raw", tags=True, end_after_idle_s=0.3, start_timeout_s=5))
    x = np.arange(10, dtype=np.float32)
    s.send(pack_tag_header(0, [Tag(2, "rx_time", RX_TIME, "usrp"), Tag(0, "rx_freq", 1e8, "usrp")]) + x[:6].tobytes())
    s.send(pack_tag_header(6, [Tag(7, "gain", 30, None)]) + x[6:].tobytes())
    np.testing.assert_array_equal(_read_all(src)[0], x)
    tags = [(e["sample"], e["key"], e["value"]) for e in src.events if e.get("event") == "tag"]
    assert tags == [(2, "rx_time", [1700000000, 0.25]), (0, "rx_freq", 1e8), (7, "gain", 30)]
    assert src.time_origin_s == pytest.approx(1700000000.25 - 2 / 1000.0)
    assert src.end_reason == "sender idle" and src.stats()["dropped"] == 0
    src.close()


def test_a_jump_in_the_offsets_is_counted_as_lost_samples(sockets, ipc_dir):
    ep = f"ipc://{ipc_dir}/j.ipc"
    s = sockets(zmq.PUSH, ep)
    src = _open(ZmqSource(endpoint=ep, mode="raw", tags=True, end_after_idle_s=0.3, start_timeout_s=5))
    x = np.ones(4, np.float32)
    s.send(pack_tag_header(100, []) + x.tobytes())  # joined late: 100 samples were never seen
    s.send(pack_tag_header(104, []) + x.tobytes())
    s.send(pack_tag_header(120, []) + x.tobytes())  # 12 lost on the link
    assert _read_all(src).shape[1] == 12
    assert src.stats()["dropped"] == 112 and src.stats()["gaps"] == 2
    assert [e["dropped_samples"] for e in src.events] == [100, 12]
    src.close()


def test_a_tags_mismatch_says_what_to_set_on_either_side(sockets, ipc_dir):
    ep = f"ipc://{ipc_dir}/m.ipc"
    s = sockets(zmq.PUSH, ep)
    src = _open(ZmqSource(endpoint=ep, mode="raw", start_timeout_s=5))
    s.send(pack_tag_header(0, [Tag(0, "rx_rate", 1e3, None)]) + np.ones(4, np.float32).tobytes())
    with pytest.raises(StreamFault, match="passes tags.*'tags: true'.*pass_tags off in GNU Radio"):
        src.read(4)
    src.close()
    ep = f"ipc://{ipc_dir}/m2.ipc"
    s = sockets(zmq.PUSH, ep)
    src = _open(ZmqSource(endpoint=ep, mode="raw", tags=True, start_timeout_s=5))
    s.send(np.ones(4, np.float32).tobytes())
    with pytest.raises(StreamFault, match="does not pass tags.*'tags: false'.*pass_tags=True"):
        src.read(4)
    src.close()


def test_our_raw_sink_sends_rate_and_time_tags_and_ends_with_a_tag(sockets, ipc_dir):
    ep = f"ipc://{ipc_dir}/s.ipc"
    pull = sockets(zmq.PULL, ep)
    sink = ZmqSink(endpoint=ep, bind=False, mode="raw", tags=True, start_timeout_s=5, timeout_s=5)
    sink.open(SignalSpec(sample_rate=8000.0, channels=2, block_size=3, dtype="complex64"))
    x = (np.arange(6) + 1j).astype(np.complex64).reshape(2, 3)
    sink.write(x)
    sink.write(x)
    sink.run_report({"ended_by": "source end"})
    sink.close()
    got = [pull.recv() for _ in range(3) if pull.poll(5000)]
    (o0, t0, n0), (o1, t1, n1), (o2, t2, n2) = (unpack_tag_header(m) for m in got)
    assert (o0, o1, o2) == (0, 3, 6)
    assert [(t.key, t.offset) for t in t0] == [("rx_rate", 0), ("rx_time", 0)] and t0[0].value == 8000.0
    assert isinstance(t0[1].value[0], pmt.Uint64) and abs(t0[1].value[0] + t0[1].value[1] - time.time()) < 60
    assert got[0][n0:] == np.ascontiguousarray(x.T).tobytes() and t1 == []
    assert len(got[2]) == n2 and [t.key for t in t2] == [END_TAG] and t2[0].value["ended_by"] == "source end"


def test_our_raw_source_ends_on_our_raw_sinks_end_tag(sockets, ipc_dir):
    ep = f"ipc://{ipc_dir}/e.ipc"
    s = sockets(zmq.PUSH, ep)
    src = _open(ZmqSource(endpoint=ep, mode="raw", tags=True, start_timeout_s=5))
    s.send(pack_tag_header(0, []) + np.ones(5, np.float32).tobytes())
    s.send(pack_tag_header(5, [Tag(5, END_TAG, {"ended_by": "source end"}, "gk-stream")]))
    assert _read_all(src).shape[1] == 5 and src.end_reason is None  # the sender's end, not silence
    assert not [e for e in src.events if e.get("event") == "tag"]
    src.close()


# ---------------------------------------------------------------- topics

def test_a_keyed_message_on_an_unkeyed_source_names_the_key(sockets, ipc_dir):
    ep = f"ipc://{ipc_dir}/k.ipc"
    s = sockets(zmq.PUSH, ep)
    src = _open(ZmqSource(endpoint=ep, mode="raw", start_timeout_s=5))
    s.send_multipart([b"iq0", np.ones(4, np.float32).tobytes()])  # GNU Radio's pub_sink with key 'iq0'
    with pytest.raises(StreamFault, match="key 'iq0'.*'topic: iq0'"):
        src.read(4)
    src.close()
    ep = f"ipc://{ipc_dir}/k2.ipc"  # a fresh socket: a PUSH keeps sending to a receiver that left
    s = sockets(zmq.PUSH, ep)
    src = _open(ZmqSource(endpoint=ep, start_timeout_s=5))  # framed: the same, before a header
    s.send_multipart([b"iq0", wire.pack(wire.KIND_DATA, dtype="float32", domain="time", stream_id=0, channels=1,
                                        bins=0, sequence=0, offset=0, samples=1, sample_rate=1000.0), b"\0" * 4])
    with pytest.raises(StreamFault, match="topic 'iq0'"):
        src.read(4)
    src.close()


@pytest.mark.parametrize("mode", ["raw", "framed"])
def test_a_topic_sub_takes_its_topic_only_from_our_pub_sink(ipc_dir, mode):
    ep = f"ipc://{ipc_dir}/p.ipc"
    sink = ZmqSink(endpoint=ep, pattern="pub", mode=mode, topic="iq", start_timeout_s=5, timeout_s=5)
    sink.open(SignalSpec(sample_rate=1000.0, channels=1, block_size=4, dtype="float32"))
    src = _open(ZmqSource(endpoint=ep, pattern="sub", mode=mode, topic="iq", start_timeout_s=5,
                          **({"end_after_idle_s": 0.5} if mode == "raw" else {})))
    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    sink.write(x[:, :4])  # waits for the subscriber
    sink.write(x[:, 4:])
    sink._sock.send_multipart([b"iq2", b"\0" * 4])  # another topic with ours as its prefix: not ours
    sink.run_report({"ended_by": "source end"})
    closing = threading.Thread(target=sink.close, daemon=True)  # framed: waits for the receiver to hang up
    closing.start()
    np.testing.assert_array_equal(_read_all(src), x)
    assert src.stats()["other_topics"] == 1
    src.close()
    closing.join(30)
    assert not closing.is_alive()


def test_topic_tags_and_idle_end_are_checked_when_loaded():
    with pytest.raises(ConfigError, match="topic applies to pub/sub"):
        ZmqSource(endpoint="tcp://127.0.0.1:5555", topic="x")
    with pytest.raises(ConfigError, match="tags applies to the raw mode"):
        ZmqSink(endpoint="tcp://*:5555", tags=True)
    with pytest.raises(ConfigError, match="end_after_idle_s applies to the raw mode"):
        ZmqSource(endpoint="tcp://127.0.0.1:5555", end_after_idle_s=1)
    src = ZmqSource(endpoint="tcp://127.0.0.1:5555", pattern="sub", mode="raw", topic="iq", tags=True,
                    end_after_idle_s=2)
    assert src.to_config() == {"type": "zmq", "endpoint": "tcp://127.0.0.1:5555", "pattern": "sub", "mode": "raw",
                               "topic": "iq", "tags": True, "end_after_idle_s": 2.0}


# ---------------------------------------------------------------- gk-stream run: endings

RECV = """version: 1
name: recv
sample_rate: 1000
block_size: 64
channels: 2
backend: cpu
source: {{type: zmq, endpoint: "{ep}", mode: raw, pattern: {pattern}, timeout_s: 1, start_timeout_s: 20{extra}}}
stages: [{{type: gain, db: 0}}]
sink: {{type: numpy, path: out.npy}}
"""


def _recv_yaml(tmp_path, ep, pattern="pull", extra=""):
    path = tmp_path / "recv.yaml"
    path.write_text(RECV.format(ep=ep, pattern=pattern, extra=extra))
    return path


def _connected(sock, timeout_s=30):
    """Until a peer has connected to a bare bound socket (its monitor says so)."""
    mon = sock.get_monitor_socket(zmq.EVENT_ACCEPTED)
    try:
        assert mon.poll(timeout_s * 1000), "gk-stream did not connect"
    finally:
        sock.disable_monitor()
        mon.close(linger=0)


def _interleaved(n, ch=2):
    x = np.arange(n * ch, dtype=np.float32).reshape(ch, n) / 7
    return x, np.ascontiguousarray(x.T).tobytes()


def _finish(p, timeout=PROC_TIMEOUT):
    try:
        out, err = p.communicate(timeout=timeout)
    except Exception:
        p.kill()
        p.communicate(timeout=30)
        raise
    return out, err


@pytest.fixture
def started(gk_process):
    ps = []

    def start(*args):
        p = gk_process.start(*args)
        ps.append(p)
        return p

    yield start
    for p in ps:
        if p.poll() is None:
            p.kill()
            p.communicate(timeout=30)


def test_an_idle_sender_ends_the_run_cleanly_with_every_sample_and_the_tail(tmp_path, sockets, ipc_dir, started):
    ep = f"ipc://{ipc_dir}/i.ipc"
    s = sockets(zmq.PUSH, ep)
    proc = started("run", _recv_yaml(tmp_path, ep, extra=", end_after_idle_s: 0.5"), "--stats-json", "s.json")
    _connected(s)
    x, raw = _interleaved(64 * 10 + 23)  # the tail: 23 samples, shorter than a block
    for k in range(0, len(raw), 1000 * 8):  # messages of any length
        s.send(raw[k:k + 1000 * 8])
    out, err = _finish(proc)
    assert proc.returncode == 0, err
    st = json.loads((tmp_path / "s.json").read_text())
    assert st["ended_by"] == "sender idle" and "ended by sender idle" in out
    assert st["samples_in"] == st["samples_out"] == 663 and st["blocks"] == 11
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), x)


def test_a_sender_that_stops_without_idle_end_is_a_fault_with_its_stats_json(tmp_path, sockets, ipc_dir, started):
    ep = f"ipc://{ipc_dir}/f.ipc"
    s = sockets(zmq.PUSH, ep)
    proc = started("run", _recv_yaml(tmp_path, ep), "--stats-json", "s.json")
    _connected(s)
    s.send(_interleaved(100)[1])
    out, err = _finish(proc)
    assert proc.returncode == 1 and "no end of stream" in err and "Traceback" not in err
    st = json.loads((tmp_path / "s.json").read_text())
    assert st["ended_by"] == "fault" and "timeout_s" in st["fault"] and st["blocks"] == 1


def test_ctrl_c_on_a_receiver_holding_a_tail_reports_the_signal(tmp_path, sockets, ipc_dir, started):
    ep = f"ipc://{ipc_dir}/c.ipc"
    s = sockets(zmq.PUSH, ep)
    proc = started("run", _recv_yaml(tmp_path, ep, extra=", end_after_idle_s: 60"), "--stats-json", "s.json")
    _connected(s)
    x, raw = _interleaved(64 * 3 + 10)  # the sender finished; the receiver holds 10 samples of block 3
    s.send(raw)
    deadline = time.monotonic() + 30
    while not (tmp_path / "out.npy.partial").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = _finish(proc)
    assert proc.returncode == 130, err
    st = json.loads((tmp_path / "s.json").read_text())
    assert st["ended_by"] == "SIGINT" and "ended by SIGINT" in out
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), x)  # the tail too


def test_a_raw_subscriber_says_when_it_joined_and_how_long_it_waited(tmp_path, sockets, ipc_dir, started):
    ep = f"ipc://{ipc_dir}/j.ipc"
    pub = sockets(zmq.XPUB, ep)
    proc = started("run", _recv_yaml(tmp_path, ep, pattern="sub", extra=", end_after_idle_s: 0.5, topic: iq"),
                   "--stats-json", "s.json")
    assert pub.poll(30000) and pub.recv() == b"\x01iq"  # subscribed to its topic
    time.sleep(0.3)
    pub.send_multipart([b"iq", _interleaved(64)[1]])
    out, err = _finish(proc)
    assert proc.returncode == 0, err
    st = json.loads((tmp_path / "s.json").read_text())
    joined = [e for e in st["events"] if e.get("event") == "first message"]
    assert len(joined) == 1 and joined[0]["waited_s"] >= 0.3 and joined[0]["joined_unix_s"] <= time.time()
    assert "source joined" in out and st["samples_in"] == 64


# ---------------------------------------------------------------- SigMF

def test_tags_become_sigmf_annotations_and_captures(tmp_path):
    pytest.importorskip("sigmf")
    from pygpukit_dsp.io.sigmf_io import SigmfSink

    sink = SigmfSink(path=str(tmp_path / "rec"))
    sink.open(SignalSpec(sample_rate=1000.0, channels=1, block_size=100, dtype="complex64"))
    sink.write(np.ones((1, 100), np.complex64))
    events = [{"sample": 0, "event": "tag", "key": "rx_freq", "value": 1e8, "srcid": "usrp", "offset": 0},
              {"sample": 10, "event": "tag", "key": "rx_time", "value": [1700000000, 0.25], "srcid": "usrp",
               "offset": 10, "time_s": 1700000000.25, "origin_s": 1700000000.24},
              {"sample": 50, "event": "tag", "key": "rx_freq", "value": 1.01e8, "srcid": "usrp", "offset": 50},
              {"sample": 0, "event": "first message", "endpoint": "x", "joined_unix_s": 0.0, "waited_s": 0.1}]
    sink.run_report({"ended_by": "sender idle", "events": events, "input_rate": 1000.0, "output_rate": 1000.0,
                     "source_stats": {}, "stages": []})
    sink.close()
    meta = json.loads((tmp_path / "rec.sigmf-meta").read_text())
    caps = [(c["core:sample_start"], c.get("core:frequency"), c.get("core:datetime")) for c in meta["captures"]]
    assert caps == [(0, 1e8, "2023-11-14T22:13:20.240000Z"), (10, None, "2023-11-14T22:13:20.250000Z"),
                    (50, 1.01e8, None)]
    tags = [(a["core:sample_start"], a["gk:tag"], a["gk:value"]) for a in meta["annotations"] if "gk:tag" in a]
    assert tags == [(0, "rx_freq", 1e8), (10, "rx_time", [1700000000, 0.25]), (50, "rx_freq", 1.01e8)]
    assert not [a for a in meta["annotations"] if a["core:label"] == "dropped"]
