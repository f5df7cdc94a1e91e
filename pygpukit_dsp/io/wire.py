"""The wire format of the ``zmq`` source and sink (docs/scale-out.md, "Wire format").

Framed mode (the default): every block is one ZeroMQ message of two frames,

    frame 0  a 64-byte header (little-endian, below)
    frame 1  the block's bytes: C order of the block, channel by channel
             ((channels, samples) in time, (channels, frames, bins) in frames), little-endian
             float32, or complex64 as float32 I, Q pairs

and the end of the stream is one message of two frames: a header of kind END (its ``sequence``
is the number of blocks sent, ``offset`` the samples sent per channel) and a UTF-8 JSON object
saying how the sender's run ended (``{"ended_by": "source end", "fault": null}``).

Header (64 bytes, ``struct`` format ``HEADER_FORMAT``)::

    offset size field
         0    4 magic        b"GKDS"
         4    2 version      1
         6    1 kind         0 data, 1 end of stream
         7    1 dtype        0 float32, 1 complex64
         8    1 domain       0 time, 1 frames
         9    1 flags        0 (reserved)
        10    2 header_len   64 (a later version may append fields; readers skip to header_len)
        12    4 stream_id    chosen by the sender (sink parameter stream_id)
        16    4 channels
        20    4 bins         0 in time, bins per frame in frames
        24    8 sequence     0, 1, 2... per block; a gap is a lost block
        32    8 offset       index of the block's first sample (frame) along the stream
        40    8 samples      samples (frames) per channel in this block
        48    8 sample_rate  float64, samples (frames) per second
        56    8 reserved     0

Raw mode sends bare samples, one frame per block, the way GNU Radio's ZMQ blocks do: interleaved
sample by sample across channels (a GNU Radio stream of vector length ``channels``), no header,
so nothing is checked and a lost block cannot be seen; an empty frame ends the stream.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

MAGIC = b"GKDS"
VERSION = 1
HEADER_FORMAT = "<4sHBBBBHIIIQQQdQ"
HEADER_SIZE = struct.calcsize(HEADER_FORMAT)
assert HEADER_SIZE == 64

KIND_DATA, KIND_END = 0, 1
DTYPE_CODES = {"float32": 0, "complex64": 1}
DTYPE_NAMES = {v: k for k, v in DTYPE_CODES.items()}
DOMAIN_CODES = {"time": 0, "frames": 1}
DOMAIN_NAMES = {v: k for k, v in DOMAIN_CODES.items()}
ITEM_BYTES = {"float32": 4, "complex64": 8}

_STRUCT = struct.Struct(HEADER_FORMAT)


class WireError(ValueError):
    """A message that is not a well-formed pygpukit-dsp message."""


@dataclass(frozen=True)
class Header:
    kind: int
    dtype: str
    domain: str
    stream_id: int
    channels: int
    bins: int
    sequence: int
    offset: int
    samples: int
    sample_rate: float

    @property
    def payload_bytes(self) -> int:
        return self.channels * self.samples * max(self.bins, 1) * ITEM_BYTES[self.dtype]

    def describe(self) -> str:
        """The stream's format as the sender declares it, e.g. '2 ch complex64 @ 1e+06 Hz (time)'."""
        unit = "Hz" if self.domain == "time" else "frames/s"
        bins = f", {self.bins} bins" if self.domain == "frames" else ""
        return f"{self.channels} ch {self.dtype} @ {self.sample_rate:g} {unit} ({self.domain}{bins})"


def pack(kind: int, *, dtype: str, domain: str, stream_id: int, channels: int, bins: int, sequence: int,
         offset: int, samples: int, sample_rate: float) -> bytes:
    return _STRUCT.pack(MAGIC, VERSION, kind, DTYPE_CODES[dtype], DOMAIN_CODES[domain], 0, HEADER_SIZE,
                        stream_id, channels, bins, sequence, offset, samples, float(sample_rate), 0)


def unpack(buf: Any) -> Header:
    """The header at the start of ``buf`` (bytes or a buffer); WireError if it is not one."""
    view = memoryview(buf)
    if view.nbytes < HEADER_SIZE:
        raise WireError(f"a {view.nbytes}-byte frame is too short for a pygpukit-dsp header ({HEADER_SIZE} bytes)")
    (magic, version, kind, dtype, domain, _flags, header_len, stream_id, channels, bins, sequence, offset,
     samples, sample_rate, _reserved) = _STRUCT.unpack_from(view, 0)
    if magic != MAGIC:
        raise WireError(f"the frame does not start with the magic {MAGIC!r} (got {bytes(magic)!r})")
    if version != VERSION:
        raise WireError(f"wire format version {version}; this pygpukit-dsp reads version {VERSION}")
    if kind not in (KIND_DATA, KIND_END) or dtype not in DTYPE_NAMES or domain not in DOMAIN_NAMES \
            or header_len < HEADER_SIZE:
        raise WireError(f"malformed header (kind {kind}, dtype {dtype}, domain {domain}, header_len {header_len})")
    return Header(kind=kind, dtype=DTYPE_NAMES[dtype], domain=DOMAIN_NAMES[domain], stream_id=stream_id,
                  channels=channels, bins=bins, sequence=sequence, offset=offset, samples=samples,
                  sample_rate=sample_rate)


def end_note(ended_by: str, fault: str | None) -> bytes:
    return json.dumps({"ended_by": ended_by, "fault": fault}).encode()


def read_end_note(buf: Any) -> dict[str, Any]:
    try:
        note = json.loads(bytes(buf).decode())
    except (UnicodeDecodeError, ValueError):
        return {"ended_by": "unknown", "fault": None}
    return note if isinstance(note, dict) else {"ended_by": "unknown", "fault": None}
