"""The hand-over of a ``view`` sink's snapshots to the view's server process: a ring of slots in
shared memory (a memfd, passed to the server over its control socket), written by the stream's
thread and read by the server, with no lock, no system call and no Python object between them.

Why shared memory and another process: the server's work (the FFTs, JSON, the WebSocket) would
otherwise hold the stream process's GIL, and a stream that needs the GIL back after a native call
waits for it; a W1 block is tens of microseconds. Here the stream's cost is one copy of the
snapshot into its slot, at most ``2 * fps`` times a second.

Layout (native byte order): a 64-byte header (``MAGIC``, slots, slot bytes, then the u64s
``written`` (last sequence written), ``read`` (last sequence the reader took) and ``dropped``), then
``slots`` slots. A slot is 32 bytes (u64 ``begin``, u64 ``end``, u32 ``n``, u32 pad, f64 ``end_s``),
the block peaks (``channels`` float32, time domain; padded to 8 bytes), then the data, ``(channels,
n)`` or ``(channels, n, bins)`` packed. Sequence numbers start at 1. The writer sets ``begin``,
copies, sets ``end``, then ``written``; the reader copies a slot and keeps it only when ``begin`` and
``end`` both equal the sequence it wanted (a slot overwritten under it is lost, and counted).
A snapshot is dropped (and counted by the writer, so the stream's summary has it) when its slot is
overwritten before the reader took it.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from dataclasses import dataclass

import numpy as np

MAGIC = 0x314B5647  # "GVK1"
HEADER = 64
SLOT_HEADER = 32
_W, _R, _D = 2, 3, 4  # u64 indices of written, read, dropped in the header


@dataclass
class Snapshot:
    """The newest part of one block, copied for the viewer: ``data`` is ``(channels, n)`` (time) or
    ``(channels, frames, bins)`` (frames); ``end_s`` is the stream time just after its last sample."""

    data: np.ndarray
    end_s: float
    block_peak: np.ndarray | None = None  # time domain: each channel's peak over the whole block


@dataclass(frozen=True)
class RingLayout:
    """What each slot holds: ``channels`` x ``capacity`` (x ``bins``) values of ``dtype``, and the
    peaks when ``peaks`` (time domain)."""

    slots: int
    channels: int
    capacity: int  # samples (time) or frames per slot at most
    bins: int      # 0: time domain
    dtype: str
    peaks: bool

    @property
    def _peak_bytes(self) -> int:
        return -(-self.channels * 4 // 8) * 8 if self.peaks else 0

    @property
    def slot_bytes(self) -> int:
        data = self.channels * self.capacity * max(self.bins, 1) * np.dtype(self.dtype).itemsize
        return -(-(SLOT_HEADER + self._peak_bytes + data) // 64) * 64

    @property
    def size(self) -> int:
        return HEADER + self.slots * self.slot_bytes

    def to_dict(self) -> dict:
        return {"slots": self.slots, "channels": self.channels, "capacity": self.capacity, "bins": self.bins,
                "dtype": self.dtype, "peaks": self.peaks}


class _Mapped:
    """The header and slot views over one mapping of a ring."""

    def __init__(self, layout: RingLayout, buf: mmap.mmap):
        self.layout, self.buf = layout, buf
        self.head = np.frombuffer(buf, np.uint64, 8, 0)
        self._slots = []
        for i in range(layout.slots):
            base = HEADER + i * layout.slot_bytes
            seq = np.frombuffer(buf, np.uint64, 2, base)
            n = np.frombuffer(buf, np.uint32, 1, base + 16)
            end_s = np.frombuffer(buf, np.float64, 1, base + 24)
            peaks = (np.frombuffer(buf, np.float32, layout.channels, base + SLOT_HEADER) if layout.peaks else None)
            data = np.frombuffer(buf, np.dtype(layout.dtype),
                                 layout.channels * layout.capacity * max(layout.bins, 1),
                                 base + SLOT_HEADER + layout._peak_bytes)
            self._slots.append((seq, n, end_s, peaks, data))

    def slot(self, seq: int):
        return self._slots[(seq - 1) % self.layout.slots]

    def close(self) -> None:
        self.head = None
        self._slots = []
        try:
            self.buf.close()
        except BufferError:  # a view still exported (a test holding an array): the GC frees it
            pass


def _anonymous_file(size: int) -> int:
    """A file descriptor of ``size`` bytes of shared memory that no path names (memfd, else an
    unlinked temporary file)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("gk-view-ring", getattr(os, "MFD_CLOEXEC", 0))
    else:
        fd, path = tempfile.mkstemp(prefix="gk-view-ring-")
        os.unlink(path)
    os.ftruncate(fd, size)
    return fd


class SnapshotRing:
    """The writer's side (a view sink), and a reader in the same process (``drain``, for tests and
    a sink nobody serves)."""

    def __init__(self, layout: RingLayout):
        self.layout = layout
        self.fd = _anonymous_file(layout.size)
        self._map = _Mapped(layout, mmap.mmap(self.fd, layout.size))
        self._map.head[0] = MAGIC
        self._map.head[1] = layout.slots
        self.taken = 0  # snapshots put

    @property
    def written(self) -> int:
        return int(self._map.head[_W])

    @property
    def dropped(self) -> int:
        return int(self._map.head[_D])

    def reserve(self) -> tuple[int, np.ndarray, np.ndarray | None]:
        """The next slot to fill in place: its sequence number, its data (flat: fill the first
        ``channels * n (* bins)`` values as ``(channels, n[, bins])``) and its peaks (or None).
        ``commit`` publishes it; until then the reader skips it."""
        m, lay = self._map, self.layout
        head = m.head
        seq = int(head[_W]) + 1
        if seq > lay.slots and int(head[_R]) < seq - lay.slots:  # its slot's snapshot was never read
            head[_D] += 1
        sq, _count, _end, peaks, buf = m.slot(seq)
        sq[0] = seq
        return seq, buf, peaks

    def commit(self, seq: int, n: int, end_s: float) -> None:
        sq, count, end, _peaks, _buf = self._map.slot(seq)
        count[0] = n
        end[0] = end_s
        sq[1] = seq
        self._map.head[_W] = seq
        self.taken += 1

    def put(self, snap: Snapshot) -> None:
        """Copy ``snap`` into the next slot; never waits."""
        lay = self.layout
        data = snap.data
        n = data.shape[1]
        if data.shape[0] != lay.channels or n > lay.capacity or data.ndim != (3 if lay.bins else 2) or (
                lay.bins and data.shape[2] != lay.bins):
            raise ValueError(f"snapshot of shape {data.shape} does not fit the view's slots "
                             f"({lay.channels} x {lay.capacity}{f' x {lay.bins}' if lay.bins else ''})")
        seq, buf, peaks = self.reserve()
        if peaks is not None:
            peaks[:] = snap.block_peak if snap.block_peak is not None else 0.0
        buf[:data.size].reshape(data.shape)[...] = data
        self.commit(seq, n, snap.end_s)

    def drain(self) -> list[Snapshot]:
        return read_new(self._map)

    def close(self) -> None:
        self._map.close()
        os.close(self.fd)


class RingReader:
    """The server's side of a ring it was given the descriptor of."""

    def __init__(self, layout: RingLayout, fd: int):
        self.layout = layout
        try:
            self._map = _Mapped(layout, mmap.mmap(fd, layout.size))
        finally:
            os.close(fd)
        if int(self._map.head[0]) != MAGIC:
            raise ValueError("not a view ring")

    @property
    def dropped(self) -> int:
        return int(self._map.head[_D])

    def drain(self) -> list[Snapshot]:
        return read_new(self._map)

    def close(self) -> None:
        self._map.close()


def read_new(m: _Mapped) -> list[Snapshot]:
    """Every snapshot written since the last read that is still in its slot (oldest first)."""
    lay, head = m.layout, m.head
    written = int(head[_W])
    first = max(int(head[_R]) + 1, written - lay.slots + 1)
    out = []
    for seq in range(first, written + 1):
        sq, count, end_s, peaks, buf = m.slot(seq)
        if int(sq[1]) != seq:
            continue
        n = int(count[0])
        if n > lay.capacity:
            raise ValueError(f"a view slot says {n} values per channel, more than its {lay.capacity}")
        shape = (lay.channels, n, lay.bins) if lay.bins else (lay.channels, n)
        data = buf[:int(np.prod(shape))].reshape(shape).copy()
        snap = Snapshot(data, float(end_s[0]), None if peaks is None else peaks.copy())
        if int(sq[0]) == seq:  # not overwritten while copied
            out.append(snap)
    head[_R] = max(int(head[_R]), written)
    return out
