"""``zmq``: a stream across processes and hosts over ZeroMQ (pyzmq, an optional dependency:
``pip install 'pygpukit-dsp[net]'``).

A sink sends every output block as one message; a source on the other side receives them. In
framed mode (the default) each message carries a header (io/wire.py) that the receiver checks
against the format its pipeline declares, and whose sequence numbers show every lost block; the
end of the stream travels as a message, so the receiving run ends as the sending one did. Raw mode
sends bare samples, as GNU Radio's ZMQ blocks do, and checks nothing.

Patterns: ``push`` -> ``pull`` (a slow receiver holds the sender back: stalls, counted) and
``pub`` -> ``sub`` (a slow subscriber loses blocks at the high-water mark: drops, counted on both
sides). docs/scale-out.md describes the whole thing; docs/yaml.md lists the parameters.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from types import ModuleType
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, Field

from ..errors import ConfigError, StreamFault
from ..signal import SignalSpec
from . import endpoints, wire
from .zmq_raw import MAX_EVENTS, RawReceive, RawSend
from ._common import Counters, Pacer, Rate, check_block, need_time_domain, not_open
from .base import IoParams, Sink, Source, StreamFormat, register_sink, register_source

INSTALL_HINT = "install it with: pip install 'pygpukit-dsp[net]'"
ZERO_COPY_BYTES = 65536   # blocks this large are sent from their own memory (pyzmq's copy threshold)
_SLICE_S = 0.05           # a wait returns to Python this often (stop requests, timeouts)
MAX_ID = 2**32 - 1


def pyzmq(where: str | None = None) -> ModuleType:
    """The zmq module, or a ConfigError saying which extra to install."""
    try:
        return importlib.import_module("zmq")
    except ImportError as exc:
        raise ConfigError(f"type 'zmq' needs the pyzmq package, which is not installed ({exc})", where=where,
                          hint=INSTALL_HINT) from None


def net_report() -> dict[str, Any]:
    """pyzmq and libzmq versions, or why they are missing (gk-stream devices)."""
    try:
        zmq = importlib.import_module("zmq")
    except ImportError as exc:
        return {"found": False, "reason": f"pyzmq is not installed ({exc}); {INSTALL_HINT}"}
    return {"found": True, "pyzmq": zmq.__version__, "libzmq": zmq.zmq_version()}


def _syntax(v: str) -> str:
    return endpoints.check(v, bind=True)  # the bind-specific rules are checked with 'bind' known


Endpoint = Annotated[str, AfterValidator(_syntax)]


class _ZmqParams(IoParams):
    endpoint: Endpoint = Field(description="tcp://HOST:PORT or ipc://PATH (bind: tcp://*:PORT; PORT '*': any free port)")
    hwm: int = Field(16, ge=1, le=1_000_000, description="high-water mark: blocks queued on this side")
    mode: Literal["framed", "raw"] = Field(
        "framed", description="framed: a checked header per block (docs/scale-out.md); raw: bare samples "
                              "(GNU Radio's ZMQ blocks)")
    timeout_s: float = Field(5.0, gt=0, le=86400, description="no progress on the link for this long: StreamFault")
    start_timeout_s: float = Field(60.0, gt=0, le=86400,
                                   description="how long to wait for the peer before the first block")
    topic: str | None = Field(None, min_length=1, max_length=255,
                              description="every message under this topic (GNU Radio's key): a first frame "
                                          "holding it; sub subscribes to it")
    tags: bool = Field(False, description="raw: GNU Radio's pass_tags format (a tag header before the samples)")


class ZmqSourceParams(_ZmqParams):
    pattern: Literal["pull", "sub"] = Field("pull", description="pull (from push) | sub (from pub)")
    bind: bool = Field(False, description="bind the endpoint (else connect to it)")
    stream_id: int | None = Field(None, ge=0, le=MAX_ID,
                                  description="framed: accept only this stream id (default: the first one seen)")
    gaps: Literal["skip", "zeros"] = Field(
        "skip", description="framed: a lost block is skipped, or replaced by zeros (the stream keeps its timing)")
    rate: Rate = Field("asap", description="asap | realtime (no faster than the sample clock)")
    end_after_idle_s: float | None = Field(
        None, gt=0, le=86400, description="raw: no message for this long once the stream began is its end "
                                          "(ended by sender idle), not a fault")


class ZmqSinkParams(_ZmqParams):
    pattern: Literal["push", "pub"] = Field("push", description="push (to pull) | pub (to sub)")
    bind: bool = Field(True, description="bind the endpoint (else connect to it)")
    stream_id: int = Field(0, ge=0, le=MAX_ID, description="framed: the id every header carries")
    subscribers: int = Field(1, ge=0, le=1_000_000,
                             description="pub: wait for this many subscribers before the first block")
    end_timeout_s: float = Field(
        60.0, gt=0, le=86400, description="framed: at the end, how long to wait for the receivers to take the "
                                          "rest of the stream and hang up")


class _ZmqComponent(Counters):
    """What the zmq source and sink share: the socket, its endpoint, waits that can be interrupted."""

    params: _ZmqParams
    where: str | None

    def _setup(self) -> None:
        p = self.params
        self._zmq = pyzmq(self.where)
        try:
            endpoints.check(p.endpoint, bind=p.bind)
        except ValueError as exc:
            raise ConfigError(str(exc), path=("endpoint",)) from None
        if p.mode == "raw" and p.stream_id not in (None, 0):
            raise ConfigError("stream_id applies to the framed mode: raw messages carry no header",
                              path=("stream_id",), hint="remove 'stream_id' or use mode: framed")
        if p.mode == "framed" and p.tags:
            raise ConfigError("tags applies to the raw mode (GNU Radio's pass_tags format)", path=("tags",),
                              hint="use 'mode: raw', or remove 'tags'")
        if p.topic is not None and p.pattern not in ("pub", "sub"):
            raise ConfigError("topic applies to pub/sub (GNU Radio's pub_sink and sub_source key); push/pull "
                              "messages carry none", path=("topic",), hint="remove 'topic', or use pattern pub/sub")
        self._topic = p.topic.encode() if p.topic is not None else None
        self._sock: Any = None
        self._stop = threading.Event()
        self.endpoint_bound: str | None = None  # after open: the address a bound socket got

    def describe(self) -> str:
        return f"{self.kind} 'zmq' ({self.params.pattern} {self.params.endpoint})"

    def interrupt(self, *, abort: bool = False) -> None:
        super().interrupt(abort=abort)
        self._stop.set()

    def _open_socket(self, socket_type: int, what: str) -> Any:
        zmq, p = self._zmq, self.params
        try:
            address = endpoints.resolve(p.endpoint, bind=p.bind, base_dir=self.base_dir)
        except ValueError as exc:
            raise ConfigError(f"{what}: {exc}", where=self.where, path=("endpoint",)) from None
        sock = zmq.Context.instance().socket(socket_type)
        sock.linger = 0
        try:
            self._configure(sock)
            if p.bind:
                sock.bind(address)
            else:
                sock.connect(address)
        except zmq.ZMQError as exc:
            sock.close(linger=0)
            verb = "bind" if p.bind else "connect to"
            hint = ("another process (or an earlier run) holds it: pick another port or stop that process"
                    if exc.errno == zmq.EADDRINUSE else "check the endpoint")
            raise ConfigError(f"{what} cannot {verb} {address}: {exc.strerror}", where=self.where,
                              path=("endpoint",), hint=hint) from None
        last = sock.get(zmq.LAST_ENDPOINT)
        self.endpoint_bound = last.decode() if p.bind and last else None
        self._address = address
        self._stop.clear()
        return sock

    def _configure(self, sock: Any) -> None:
        """Socket options before bind/connect."""

    def _wait(self, events: int, timeout_s: float) -> str:
        """Poll the socket for ``events``: 'ready', 'timeout' or 'stopped'."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self._stop.is_set():
                return "stopped"
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            if self._sock.poll(int(min(left, _SLICE_S) * 1000) + 1, events):
                return "ready"

    def _close_socket(self, linger_ms: int = 0) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            sock.close(linger=linger_ms)


@register_source
class ZmqSource(RawReceive, _ZmqComponent, Source):
    """Receives blocks from a ``zmq`` sink (framed) or bare samples (raw) as ``(channels, n)`` arrays.

    The stream's format is declared here (the pipeline's sample_rate, channels and dtype) and every
    framed header is checked against it. Received blocks are handed on without a copy (a view of
    the message) when the pipeline's block size equals the sender's.
    """

    type = "zmq"
    Params = ZmqSourceParams
    summary = "blocks from a zmq sink in another process or host (pyzmq: push/pull, pub/sub)"
    _counter_names = Counters._counter_names + ("dropped_blocks", "gaps", "messages", "other_topics")

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._setup()
        self.realtime = self.params.rate == "realtime"
        self._fmt: StreamFormat | None = None
        self._init_counters()
        self.events: list[dict[str, Any]] = []
        if self.params.mode == "framed" and self.params.end_after_idle_s is not None:
            raise ConfigError("end_after_idle_s applies to the raw mode: a framed stream carries its own end",
                              path=("end_after_idle_s",), hint="remove it, or use 'mode: raw'")
        self.end_reason: str | None = None  # why the stream ended, when not by the sender's end message

    def open(self, request: StreamFormat) -> StreamFormat:
        p = self.params
        what = f"zmq source ({p.endpoint})"
        if request.sample_rate is None:
            raise ConfigError(f"{what} needs sample_rate at the pipeline level: the receiver declares the "
                              "stream's format and checks every message against it", where=self.where,
                              hint="e.g. 'sample_rate: 48000' (and 'channels', 'dtype' when not 1 and float32)")
        self.close()
        zmq = self._zmq
        self._sock = self._open_socket(zmq.PULL if p.pattern == "pull" else zmq.SUB, what)
        sr, channels, dtype = float(request.sample_rate), int(request.channels or 1), request.dtype or "float32"
        self._fmt = StreamFormat(sample_rate=sr, channels=channels, dtype=dtype, length=None)
        # the wire is little-endian: the native dtype itself on such a host (numpy's own descriptor, which
        # the native engine's checks expect), an explicit little-endian one elsewhere
        self._np_dtype = np.dtype(dtype) if sys.byteorder == "little" else np.dtype(dtype).newbyteorder("<")
        self._declared = (dtype, "time", channels, 0, sr)
        self._rest: np.ndarray | None = None
        self._zeros = 0          # samples of zeros owed for lost blocks (gaps: zeros)
        self._ended = False
        self._seq = 0            # the sequence number expected next
        self._offset = 0         # the stream offset (samples) expected next
        self._delivered = 0      # samples handed to the pipeline, zeros included
        self._stream_id = p.stream_id
        self._init_counters()
        self.events = []
        self.end_reason = None
        self._reset_raw()
        self._pacer = Pacer(sr) if self.realtime else None
        self._joined = (time.monotonic(), time.time())  # connected (or bound): the first message is awaited
        return self._fmt

    def _configure(self, sock: Any) -> None:
        sock.rcvhwm = self.params.hwm
        if self.params.pattern == "sub":  # ZeroMQ matches the prefix: _recv keeps the exact topic only
            sock.setsockopt(self._zmq.SUBSCRIBE, self._topic or b"")

    # -- receiving ----------------------------------------------------------
    def read(self, n: int) -> np.ndarray:
        if self._fmt is None or self._sock is None:
            raise not_open(f"zmq source '{self.params.endpoint}'", "read")
        n = int(n)
        while self._rest is None and self._zeros == 0 and not self._ended:
            self._receive()
        if self._zeros:
            m = min(n, self._zeros)
            self._zeros -= m
            out = np.zeros((self._fmt.channels, m), dtype=self._fmt.dtype)
        elif self._rest is not None:
            rest = self._rest
            m = min(n, rest.shape[1])
            out = rest if m == rest.shape[1] else rest[:, :m]
            self._rest = None if m == rest.shape[1] else rest[:, m:]
        else:
            return np.zeros((self._fmt.channels, 0), dtype=self._fmt.dtype)
        self._delivered += m
        self._counts["samples"] += m
        if self._pacer is not None:
            self._pacer.wait_until(self._delivered)
        return out

    def _recv(self) -> list[Any] | None:
        """The next message's frames, its topic taken off; None when the stream ends here (the run is
        stopping, or the sender fell idle: ``end_reason``). StreamFault after the timeout."""
        while True:
            frames = self._recv_any()
            if frames is None or self._topic is None:
                return frames
            if len(frames) >= 2 and frames[0].bytes == self._topic:
                return frames[1:]
            if self.params.pattern == "sub" and len(frames) >= 2:
                self._counts["other_topics"] += 1  # a longer topic with ours as its prefix: not ours
                continue
            raise self._fault(f"a message of {len(frames)} frame(s) without the topic '{self.params.topic}' in its "
                              "first frame: remove 'topic' here, or set this key on the sender")

    def _recv_any(self) -> list[Any] | None:
        p = self.params
        first = self._counts["messages"] == 0
        idle = p.end_after_idle_s is not None and not first
        timeout = p.start_timeout_s if first else (p.end_after_idle_s if idle else p.timeout_s)
        state = self._wait(self._zmq.POLLIN, timeout)
        if state == "stopped":
            return None
        if state == "timeout":
            if idle:  # silence once the stream began: its end (a GNU Radio sink sends no end message)
                self.end_reason = "sender idle"
                return None
            if first:
                peer = "bind" if not p.bind else "connect to"
                raise StreamFault(f"zmq source {self._address}: no message within {timeout:g} s (start_timeout_s): "
                                  f"is the sender running, and does it {peer} this endpoint "
                                  f"({'push' if p.pattern == 'pull' else 'pub'}, mode {p.mode})?")
            raise StreamFault(f"zmq source {self._address}: no message for {timeout:g} s (timeout_s) after "
                              f"{self._counts['messages']} messages, and no end of stream: the sender stopped "
                              "(killed?) or the link is down")
        frames = self._sock.recv_multipart(copy=False)
        self._counts["messages"] += 1
        if first and p.pattern == "sub" and p.mode == "raw":
            # when it joined and how long the first message took: a publisher's samples before it are lost
            # unseen (raw carries no sequence numbers; with tags the first offset shows them: zmq_raw.py)
            t0, wall = self._joined
            self._event({"sample": 0, "event": "first message", "endpoint": self._address,
                         "joined_unix_s": wall, "waited_s": time.monotonic() - t0})
        return frames

    def _receive(self) -> None:
        frames = self._recv()
        if frames is None:  # stopping: end the stream here
            self._ended = True
            return
        if self.params.mode == "raw":
            self._receive_raw(frames)
        else:
            self._receive_framed(frames)

    def _fault(self, message: str) -> StreamFault:
        return StreamFault(f"zmq source {self._address}: {message}")

    def _receive_framed(self, frames: list[Any]) -> None:
        try:
            h = wire.unpack(frames[0].buffer)
        except wire.WireError as exc:
            if len(frames) == 3 and frames[1].buffer.nbytes == wire.HEADER_SIZE and frames[1].bytes[:4] == wire.MAGIC:
                raise self._fault(f"a message under the topic '{frames[0].bytes[:80].decode('utf-8', 'replace')}' "
                                  "(a first frame before the header): set that 'topic' here") from None
            raise self._fault(f"not a pygpukit-dsp message: {exc} (a GNU Radio or other raw sender? set "
                              "'mode: raw', and 'tags: true' if it passes tags)") from None
        if self._stream_id is None:
            self._stream_id = h.stream_id
        elif h.stream_id != self._stream_id:
            raise self._fault(f"a message of stream id {h.stream_id}, but this source takes stream id "
                              f"{self._stream_id} (two senders on one endpoint?)")
        if h.kind == wire.KIND_END:
            self._count_gap(h, end=True)
            note = wire.read_end_note(frames[1].buffer) if len(frames) > 1 else {}
            self.end_note = note
            self._ended = True
            if note.get("fault"):
                raise self._fault(f"the sender's run failed after {h.sequence} blocks: {note['fault']}")
            return
        got = (h.dtype, h.domain, h.channels, h.bins, h.sample_rate)
        if got != self._declared:
            dtype, _, channels, _, sr = self._declared
            diffs = [f"{k} {a} != {b}" for k, a, b in zip(("dtype", "domain", "channels", "bins", "sample_rate"),
                                                           got, self._declared) if a != b]
            raise self._fault(f"block {h.sequence} of stream {h.stream_id} carries {h.describe()}, but this "
                              f"pipeline declares {channels} ch {dtype} @ {sr:g} Hz (time): {', '.join(diffs)}")
        if len(frames) != 2 or frames[1].buffer.nbytes != h.payload_bytes:
            size = frames[1].buffer.nbytes if len(frames) > 1 else 0
            raise self._fault(f"block {h.sequence}: {len(frames)} frames, payload {size} bytes; its header "
                              f"announces {h.samples} samples = {h.payload_bytes} bytes")
        self._count_gap(h)
        self._seq, self._offset = h.sequence + 1, h.offset + h.samples
        if h.samples:
            self._rest = np.frombuffer(frames[1].buffer, dtype=self._np_dtype).reshape(h.channels, h.samples)

    def _count_gap(self, h: wire.Header, end: bool = False) -> None:
        if h.sequence < self._seq:
            raise self._fault(f"the block sequence went back from {self._seq} to {h.sequence}: the sender "
                              "restarted, or a second sender uses this endpoint")
        if h.sequence == self._seq:
            return
        blocks, samples = h.sequence - self._seq, max(0, h.offset - self._offset)
        first = self._counts["messages"] == 1 and not end
        self._counts["dropped_blocks"] += blocks
        self._counts["dropped"] += samples
        self._counts["gaps"] += 1
        if len(self.events) < MAX_EVENTS:
            self.events.append({"sample": self._delivered, "dropped_samples": samples, "dropped_blocks": blocks,
                                "sequence": [self._seq, h.sequence - 1],
                                "why": "joined after the stream began" if first else "lost on the link"})
        if self.params.gaps == "zeros" and not first:
            self._zeros += samples
        self._seq, self._offset = h.sequence, h.offset

    def close(self) -> None:
        self._close_socket()
        self._rest = None


@register_sink
class ZmqSink(RawSend, _ZmqComponent, Sink):
    """Sends every output block to ``zmq`` sources in other processes or hosts.

    ``push`` waits for the receiver when its queue is full (stalls); ``pub`` never waits: a block
    that a subscriber's queue cannot take is dropped for every subscriber and counted. Blocks of
    ``ZERO_COPY_BYTES`` or more are sent from the block's own memory (push) and write() returns once
    ZeroMQ has handed the last byte to the OS (the engine may reuse that memory afterwards).
    """

    type = "zmq"
    Params = ZmqSinkParams
    summary = "blocks to zmq sources in other processes or hosts (pyzmq: push/pull, pub/sub)"
    _counter_names = Counters._counter_names + ("dropped_blocks", "stalls", "stall_ms", "messages")

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        self._setup()
        if self.params.pattern == "push" and "subscribers" in self.params.model_fields_set:
            raise ConfigError("'subscribers' applies to pattern pub", path=("subscribers",),
                              hint="remove it, or use 'pattern: pub'")
        self._spec: SignalSpec | None = None
        self._monitor: Any = None
        self._note = wire.end_note("closed before its run began", "the sending pipeline did not start")
        self._init_counters()

    def _configure(self, sock: Any) -> None:
        zmq = self._zmq
        sock.sndhwm = self.params.hwm
        sock.copy_threshold = ZERO_COPY_BYTES  # pyzmq copies smaller frames even with copy=False
        # who is connected: the end of the stream waits for every receiver to hang up (_drain)
        self._peers = 0
        self._monitor = sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        if self.params.pattern == "push":
            sock.setsockopt(zmq.IMMEDIATE, 1)  # queue only to connected receivers
        else:  # XPUB: see subscriptions (and their ends), and refuse instead of dropping silently
            sock.setsockopt(zmq.XPUB_VERBOSER, 1)
            sock.setsockopt(zmq.XPUB_NODROP, 1)

    def open(self, spec: SignalSpec) -> None:
        p = self.params
        what = f"zmq sink ({p.endpoint})"
        if p.mode == "raw":
            need_time_domain(spec, f"{what} in raw mode", dtype=None, where=self.where)
        self.close()
        zmq = self._zmq
        try:
            self._sock = self._open_socket(zmq.PUSH if p.pattern == "push" else zmq.XPUB, what)
        except BaseException:
            if self._monitor is not None:
                self._monitor.close(linger=0)
                self._monitor = None
            raise
        self._spec = spec
        self._seq = self._offset = 0
        self._subscribers = 0
        self._started = False
        self._end_sent = False
        self._init_counters()
        self._stall_s = 0.0
        self._bins = spec.bins if spec.domain == "frames" else 0
        self._note = wire.end_note("closed before its run ended", None)
        self._ended_by = "closed before its run ended"

    def run_report(self, report: dict[str, Any]) -> None:
        self._ended_by = report.get("ended_by", "unknown")
        self._note = wire.end_note(self._ended_by, report.get("fault"))

    # -- sending ------------------------------------------------------------
    def _subscriptions(self) -> None:
        """Read the XPUB's subscription messages: b'\\x01...' joins, b'\\x00...' leaves."""
        zmq = self._zmq
        while self._sock.get(zmq.EVENTS) & zmq.POLLIN:
            msg = self._sock.recv(zmq.NOBLOCK)
            if msg[:1] == b"\x01":
                self._subscribers += 1
            elif msg[:1] == b"\x00":
                self._subscribers = max(0, self._subscribers - 1)

    def _wait_for_peer(self) -> None:
        p, zmq = self.params, self._zmq
        deadline = time.monotonic() + p.start_timeout_s
        if p.pattern == "push":
            state = self._wait(zmq.POLLOUT, p.start_timeout_s)
            if state == "timeout":
                raise StreamFault(f"zmq sink {self._address}: no receiver within {p.start_timeout_s:g} s "
                                  "(start_timeout_s): is the receiving pipeline (pull) running?")
            return
        while True:
            self._subscriptions()
            if self._subscribers >= p.subscribers or self._stop.is_set():
                return
            if time.monotonic() >= deadline:
                raise StreamFault(f"zmq sink {self._address}: {self._subscribers} of {p.subscribers} "
                                  f"subscriber(s) joined within {p.start_timeout_s:g} s (start_timeout_s)")
            self._sock.poll(int(_SLICE_S * 1000), zmq.POLLIN)

    def _payload(self, block: np.ndarray) -> np.ndarray:
        if self.params.mode == "raw" and block.shape[0] > 1:
            data = np.ascontiguousarray(block.T)  # interleaved sample by sample
        else:
            data = np.ascontiguousarray(block)
        if data.dtype.byteorder == ">" or (data.dtype.byteorder == "=" and sys.byteorder == "big"):
            data = data.astype(data.dtype.newbyteorder("<"))
        return data

    def write(self, block: np.ndarray) -> None:
        if self._sock is None or self._spec is None:
            raise not_open(f"zmq sink '{self.params.endpoint}'", "write")
        block = check_block(block, self._spec, f"zmq sink '{self.params.endpoint}'")
        p = self.params
        if not self._started:
            self._wait_for_peer()
            self._started = True
        if self._stop.is_set():
            raise KeyboardInterrupt  # the run is stopping: the runner ends it as stopped (this block unsent)
        m = int(block.shape[1])
        data = self._payload(block)
        frames: list[Any] = self._raw_frames(data, m) if p.mode == "raw" else [data]
        if p.mode == "framed":
            spec = self._spec
            frames.insert(0, wire.pack(wire.KIND_DATA, dtype=spec.dtype, domain=spec.domain, stream_id=p.stream_id,
                                       channels=spec.channels, bins=self._bins, sequence=self._seq,
                                       offset=self._offset, samples=m, sample_rate=spec.sample_rate))
        if self._topic is not None:  # GNU Radio's key: a first frame of its own
            frames.insert(0, self._topic)
        if p.pattern == "pub":
            self._publish(frames, m)
        else:
            self._push(frames, data.nbytes >= ZERO_COPY_BYTES)
        self._seq += 1
        self._offset += m
        self._counts["samples"] += m

    def _publish(self, frames: list[Any], m: int) -> None:
        zmq = self._zmq
        self._subscriptions()
        try:
            self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=True)  # never wait for a subscriber
        except zmq.Again:
            lost = True  # a subscriber's queue is at its high-water mark: the block goes to none of them
        else:
            lost = self._subscribers == 0  # nobody to send to: gone as well
        if lost:
            self._counts["dropped_blocks"] += 1
            self._counts["dropped"] += m
        else:
            self._counts["messages"] += 1

    def _push(self, frames: list[Any], zero_copy: bool) -> None:
        zmq, p = self._zmq, self.params
        t0 = None
        while True:
            try:
                tracker = self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=not zero_copy,
                                                    track=zero_copy)
                break
            except zmq.Again:  # the queue is at its high-water mark: the receiver holds us back
                if t0 is None:
                    t0 = time.perf_counter()
                    self._counts["stalls"] += 1
                state = self._wait(zmq.POLLOUT, p.timeout_s - (time.perf_counter() - t0))
                if state == "timeout":
                    self._add_stall(t0)
                    raise StreamFault(f"zmq sink {self._address}: the receiver took no block for {p.timeout_s:g} s "
                                      f"(timeout_s) after {self._seq} blocks: is it still running?")
                if state == "stopped":
                    self._add_stall(t0)
                    raise KeyboardInterrupt  # the runner ends the run as stopped
        if t0 is not None:
            self._add_stall(t0)
        self._counts["messages"] += 1
        if zero_copy:
            self._released(tracker, f"block {self._seq}")

    def _released(self, tracker: Any, what: str) -> None:
        """Wait until ZeroMQ has let go of a zero-copy message (its memory is the caller's again)."""
        zmq, p = self._zmq, self.params
        deadline = time.monotonic() + p.timeout_s
        while True:
            try:
                tracker.wait(_SLICE_S)
                return
            except zmq.NotDone:
                if time.monotonic() >= deadline:
                    raise StreamFault(f"zmq sink {self._address}: {what} did not leave within {p.timeout_s:g} s "
                                      "(timeout_s): the receiver stopped reading") from None

    def _add_stall(self, t0: float) -> None:
        self._stall_s += time.perf_counter() - t0
        self._counts["stall_ms"] = int(round(self._stall_s * 1e3))

    def _send_end(self) -> None:
        p, zmq = self.params, self._zmq
        if p.pattern == "pub":
            self._subscriptions()
        if self._count_peers() == 0 and (p.pattern == "push" or self._subscribers == 0):
            return  # nobody connected to tell (a receiver that comes later times out instead)
        frames: list[Any] = self._raw_end(self._ended_by, self._counts) if p.mode == "raw" else []
        if p.mode == "framed":
            spec = self._spec
            frames = [wire.pack(wire.KIND_END, dtype=spec.dtype, domain=spec.domain, stream_id=p.stream_id,
                                channels=spec.channels, bins=self._bins, sequence=self._seq, offset=self._offset,
                                samples=0, sample_rate=spec.sample_rate), self._note]
        if self._topic is not None:
            frames.insert(0, self._topic)
        timeout = min(p.timeout_s, 1.0) if self.aborting else p.timeout_s
        deadline = time.monotonic() + timeout
        self._sock.copy_threshold = 0  # track even this small message: it must leave before we exit
        while True:
            if p.pattern == "pub":
                self._subscriptions()
            try:
                tracker = self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False, track=True)
                break
            except zmq.Again:
                if time.monotonic() >= deadline:
                    raise StreamFault(f"zmq sink {self._address}: the end of the stream could not be sent within "
                                      f"{timeout:g} s: the receiver is not reading (it will time out)") from None
                self._sock.poll(int(_SLICE_S * 1000), zmq.POLLOUT)
        self._released(tracker, "the end of the stream")

    def _count_peers(self) -> int:
        """Receivers connected now, from the socket monitor's events."""
        from zmq.utils.monitor import recv_monitor_message

        zmq = self._zmq
        while self._monitor.poll(0):
            event = recv_monitor_message(self._monitor, zmq.NOBLOCK)["event"]
            if event in (zmq.EVENT_ACCEPTED, zmq.EVENT_CONNECTED):
                self._peers += 1
            elif event == zmq.EVENT_DISCONNECTED:
                self._peers = max(0, self._peers - 1)
        return self._peers

    def _drain(self) -> None:
        """Keep our end open until every receiver has hung up: a receiver reads the end of the stream
        and closes. ZeroMQ drops what a receiver has not read yet when the sender's connection goes away
        (a receiver held back by its high-water mark has part of the stream still in the OS's buffers),
        so leaving earlier would lose the last blocks."""
        p = self.params
        timeout = min(p.end_timeout_s, 1.0) if self.aborting else p.end_timeout_s
        deadline = time.monotonic() + timeout
        while self._count_peers() > 0:
            if self._stop.is_set() and self.aborting:
                return
            if time.monotonic() >= deadline:
                raise StreamFault(f"zmq sink {self._address}: {self._peers} receiver(s) still connected "
                                  f"{timeout:g} s (end_timeout_s) after the end of the stream: they may not "
                                  "have all of it")
            self._monitor.poll(int(_SLICE_S * 1000))

    def close(self) -> None:
        if self._sock is None:
            return
        try:
            if not self._end_sent and self._spec is not None:
                self._end_sent = True
                self._send_end()
                if self.params.mode == "framed":  # raw peers (GNU Radio) do not hang up: nothing to wait for
                    self._drain()
        finally:
            monitor, self._monitor = self._monitor, None
            if monitor is not None and self._sock is not None:
                self._sock.disable_monitor()
                monitor.close(linger=0)
            self._close_socket(linger_ms=int(self.params.timeout_s * 1000))
