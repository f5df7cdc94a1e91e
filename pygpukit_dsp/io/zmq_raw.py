"""The raw mode of the ``zmq`` source and sink: bare samples as GNU Radio's gr-zeromq blocks send
them, optionally with GNU Radio's stream tags (``tags: true``, gr-zeromq's ``pass_tags``).

A raw message is one frame of samples, interleaved sample by sample across channels (a GNU Radio
stream of vector length ``channels``), after a first frame holding the topic when there is one
(GNU Radio's ``key``). With tags, the samples follow a tag header in the same frame, written the
way gr-zeromq's tag_headers.cc writes it (host byte order, little-endian here)::

    uint16  magic 0x5FF0
    uint8   version 1
    uint64  offset   the stream index of the message's first item
    uint64  ntags
    ntags times:
        uint64  offset   the stream index of the item the tag is on
        PMT     key      (io/pmt.py: GNU Radio's pmt::serialize)
        PMT     value
        PMT     srcid

Tags become the source's events (rx_time, rx_freq, rx_rate and any other), and offsets that jump
show samples the link lost. Our raw sink ends its stream with an empty frame (without tags) or a
header without samples that carries the tag ``gk_end`` (with tags); GNU Radio's sinks send no end,
so a receiver ends on ``end_after_idle_s`` instead.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import pmt, wire

TAG_MAGIC = 0x5FF0
TAG_VERSION = 1
_FIXED = struct.Struct("<HBQQ")  # magic, version, offset, ntags: 19 bytes
_OFFSET = struct.Struct("<Q")
MAX_TAGS = 100_000               # a header announcing more is not one (raw samples that look like it)
END_TAG = "gk_end"               # our raw sink's end of stream, in tags mode
SRCID = "gk-stream"
MAX_EVENTS = 10000               # events a zmq source lists (gaps, tags: all of them are counted)


class TagHeaderError(ValueError):
    """Bytes that are not a gr-zeromq tag header."""


@dataclass(frozen=True)
class Tag:
    """A GNU Radio stream tag: on item ``offset`` of the stream, ``key`` = ``value`` (PMT values as
    io/pmt.py maps them), from ``srcid``."""

    offset: int
    key: Any
    value: Any
    srcid: Any = None


def pack_tag_header(offset: int, tags: list[Tag] | tuple[Tag, ...] = ()) -> bytes:
    out = bytearray(_FIXED.pack(TAG_MAGIC, TAG_VERSION, offset, len(tags)))
    for t in tags:
        out += _OFFSET.pack(t.offset)
        out += pmt.serialize(t.key) + pmt.serialize(t.value) + pmt.serialize(t.srcid)
    return bytes(out)


def starts_with_magic(buf: Any) -> bool:
    view = memoryview(buf).cast("B")
    return view.nbytes >= 3 and view[0] == (TAG_MAGIC & 0xFF) and view[1] == TAG_MAGIC >> 8 and view[2] == TAG_VERSION


def unpack_tag_header(buf: Any) -> tuple[int, list[Tag], int]:
    """(offset, tags, header length in bytes) of the tag header at the start of ``buf``."""
    view = memoryview(buf).cast("B")
    if view.nbytes < _FIXED.size:
        raise TagHeaderError(f"a {view.nbytes}-byte message is too short for a tag header ({_FIXED.size} bytes)")
    magic, version, offset, ntags = _FIXED.unpack_from(view, 0)
    if magic != TAG_MAGIC:
        raise TagHeaderError(f"no tag header (magic {magic:#06x}, not {TAG_MAGIC:#06x})")
    if version != TAG_VERSION:
        raise TagHeaderError(f"tag header version {version}; this reads version {TAG_VERSION}")
    if ntags > MAX_TAGS:
        raise TagHeaderError(f"a tag header announcing {ntags} tags")
    pos, tags = _FIXED.size, []
    try:
        for _ in range(ntags):
            (at,) = _OFFSET.unpack_from(view, pos)
            key, pos = pmt.deserialize(view, pos + 8)
            value, pos = pmt.deserialize(view, pos)
            srcid, pos = pmt.deserialize(view, pos)
            tags.append(Tag(at, key, value, srcid))
    except struct.error:
        raise TagHeaderError("a tag header cut short") from None
    except pmt.PmtError as exc:
        raise TagHeaderError(f"a tag that does not parse: {exc}") from None
    return offset, tags, pos


def is_tag_header(buf: Any) -> bool:
    """True when ``buf`` starts with a whole, well-formed tag header."""
    if not starts_with_magic(buf):
        return False
    try:
        unpack_tag_header(buf)
    except TagHeaderError:
        return False
    return True


def rx_time_seconds(value: Any) -> float | None:
    """UHD's rx_time (a tuple of uint64 whole seconds and a double fraction) as seconds, else None."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], int) \
            and isinstance(value[1], (int, float)):
        return float(value[0]) + float(value[1])
    return None


def _key_text(buf: Any, limit: int = 80) -> str:
    text = bytes(buf[:limit]).decode("utf-8", "replace")
    return text + ("..." if len(buf) > limit else "")


class RawReceive:
    """The zmq source's raw mode (mixed into ZmqSource): samples, tags, the end."""

    params: Any
    events: list[dict[str, Any]]
    _counts: dict[str, int]

    def _reset_raw(self) -> None:
        self._received = 0                   # samples taken from messages so far
        self._next_offset: int | None = None  # tags: the sender's stream index expected next
        self.time_origin_s: float | None = None  # the Unix time of sample 0, from the first rx_time tag
        self.tag_count = 0

    def _event(self, event: dict[str, Any]) -> None:
        if len(self.events) < MAX_EVENTS:
            self.events.append(event)

    def _receive_raw(self, frames: list[Any]) -> None:
        p = self.params
        if len(frames) != 1:
            first = frames[0].buffer
            if len(frames) == 2 and first.nbytes == wire.HEADER_SIZE and bytes(first[:4]) == wire.MAGIC:
                raise self._fault("a message of 2 frames with a pygpukit-dsp header: the sender is in framed "
                                  "mode; remove 'mode: raw' here")
            if len(frames) == 2:
                raise self._fault(f"a message under the key '{_key_text(first)}' (a first frame before the "
                                  "samples, as GNU Radio's pub_sink or push_sink with a key sends): set "
                                  f"'topic: {_key_text(first)}' here, or clear the key in GNU Radio")
            raise self._fault(f"a message of {len(frames)} frames; raw mode takes one frame of samples, after the "
                              "topic when there is one")
        buf = frames[0].buffer
        if buf.nbytes == 0:  # our raw sink's end of stream (without tags)
            self._ended = True
            return
        start = 0
        if p.tags:
            start = self._tags_of(buf)
            if start is None:
                return
        elif is_tag_header(buf):
            raise self._fault("the sender passes tags (gr-zeromq's tag header before the samples): set "
                              "'tags: true' here, or pass_tags off in GNU Radio")
        data = buf[start:]
        channels = self._fmt.channels
        item = self._np_dtype.itemsize * channels
        if data.nbytes % item:
            with_tags = ", after its tag header," if start else ""
            raise self._fault(f"a message{with_tags} of {data.nbytes} bytes is not a whole number of {channels}-channel "
                              f"{self._fmt.dtype} samples ({item} bytes each): check dtype and channels"
                              + ("" if p.tags else "; or the sender passes tags (then set 'tags: true')"))
        if data.nbytes == 0:
            return
        x = np.frombuffer(data, dtype=self._np_dtype)
        self._rest = x.reshape(1, -1) if channels == 1 else np.ascontiguousarray(x.reshape(-1, channels).T)
        self._received += self._rest.shape[1]

    def _tags_of(self, buf: Any) -> int | None:
        """Read the tag header at the start of ``buf``: tags become events, a jump in the offsets lost
        samples. Returns where the samples begin (None: our sink's end of stream)."""
        if not starts_with_magic(buf):
            raise self._fault("a message without a tag header: the sender does not pass tags; set 'tags: false' "
                              "here, or pass_tags=True on the GNU Radio sink")
        try:
            offset, tags, start = unpack_tag_header(buf)
        except TagHeaderError as exc:
            raise self._fault(f"a malformed tag header: {exc}") from None
        expected = self._next_offset
        if expected is None:
            if offset > 0:  # the sender had sent this much before our first message (a slow joiner)
                self._lost(offset, "joined after the stream began: the sender's first samples never arrived")
        elif offset > expected:
            self._lost(offset - expected, "lost on the link")
        elif offset < expected:
            raise self._fault(f"the stream offset went back from {expected} to {offset}: the sender restarted, or "
                              "a second sender uses this endpoint")
        items = (buf.nbytes - start) // max(1, self._np_dtype.itemsize * self._fmt.channels)
        self._next_offset = offset + items
        end = False
        for t in tags:
            if t.key == END_TAG and items == 0:
                end = True
                continue
            self._tag_event(t, self._received + (t.offset - offset))
        if end:
            self._ended = True
            return None
        return start

    def _lost(self, samples: int, why: str) -> None:
        self._counts["dropped"] += samples
        self._counts["gaps"] += 1
        self._event({"sample": self._received, "dropped_samples": samples, "dropped_blocks": 0, "why": why})

    def _tag_event(self, t: Tag, sample: int) -> None:
        self.tag_count += 1
        event: dict[str, Any] = {"sample": sample, "event": "tag", "key": pmt.to_json(t.key),
                                 "value": pmt.to_json(t.value), "srcid": pmt.to_json(t.srcid), "offset": t.offset}
        seconds = rx_time_seconds(t.value) if t.key == "rx_time" else None
        if seconds is not None:
            event["time_s"] = seconds
            origin = seconds - sample / self._fmt.sample_rate
            event["origin_s"] = origin
            if self.time_origin_s is None:
                self.time_origin_s = origin  # the stream's time: sample 0 happened then
        self._event(event)


class RawSend:
    """The zmq sink's raw mode (mixed into ZmqSink): samples, with a tag header when ``tags``."""

    params: Any
    _spec: Any
    _offset: int

    def _raw_frames(self, data: np.ndarray, samples: int) -> list[Any]:
        if not self.params.tags:
            return [data]
        tags: list[Tag] = []
        if self._offset == 0:  # the start of the stream: its rate and the host's clock
            now = time.time()
            secs = int(now)
            tags = [Tag(0, "rx_rate", float(self._spec.sample_rate), SRCID),
                    Tag(0, "rx_time", (pmt.Uint64(secs), now - secs), SRCID)]
        return [pack_tag_header(self._offset, tags) + data.tobytes()]

    def _raw_end(self, ended_by: str, counts: dict[str, int]) -> list[Any]:
        if not self.params.tags:
            return [b""]
        value = {"ended_by": ended_by, "samples": pmt.Uint64(counts.get("samples", 0)),
                 "dropped": pmt.Uint64(counts.get("dropped", 0))}
        return [pack_tag_header(self._offset, [Tag(self._offset, END_TAG, value, SRCID)])]
