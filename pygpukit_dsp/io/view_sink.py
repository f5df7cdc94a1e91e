"""``view``: a sink drawn on the web page of ``gk-stream run FILE --view`` (pygpukit_dsp/view/).

The sink costs the stream almost nothing: at most ``2 * fps`` times a second it copies the newest
part of a block (``nfft`` samples per channel, or the newest frames of a frames-domain block) into
a ring of ``queue`` slots in shared memory (io/view_ring.py), without waiting; when the viewer has not
taken a slot's snapshot before it comes round again, that snapshot is dropped and counted
(``view_dropped``). Everything else, the FFT, the max-hold over bins, the frame-rate limit and the
web server, happens in the view's own process (pygpukit_dsp/view/page.py), so it never holds the
stream process's GIL.

This module imports neither the web server nor its libraries: a file with a ``view`` sink validates
and runs without the ``view`` extra; only ``--view`` needs it.
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np
from pydantic import Field

from ..errors import ConfigError
from ..signal import SignalSpec
from .view_ring import RingLayout, Snapshot, SnapshotRing
from .base import IoParams, Sink, register_sink
from ._common import Counters, check_block, not_open

FRAME_VALUES = 1 << 18  # values of a frames-domain snapshot at most (1 MiB of float32)


class ViewSinkParams(IoParams):
    title: str | None = Field(None, description="heading of this sink on the page (default: the sink's name)")
    fps: float = Field(15.0, gt=0, le=60, description="frames a second sent to the browser at most")
    nfft: int = Field(2048, ge=64, le=65536, description="time-domain input: samples per spectrum (Hann window)")
    points: int = Field(512, ge=16, le=4096, description="spectrum points sent at most (max-hold over bins)")
    traces: int = Field(4, ge=1, le=16, description="channels drawn as spectrum and scope traces at most")
    scope_samples: int = Field(512, ge=16, le=8192, description="samples of the time scope")
    floor_db: float = Field(-120.0, description="bottom of the spectrum and waterfall axes (dB)")
    ceil_db: float = Field(10.0, description="top of the spectrum and waterfall axes (dB)")
    levels: Literal["db", "power", "magnitude"] = Field(
        "db", description="frames-domain real input: what its values are (complex frames: always magnitude)")
    bin_hz: float | None = Field(None, gt=0, description="frames-domain input: Hz per bin for the axis "
                                                        "(default: bin numbers)")
    shift: bool = Field(False, description="frames-domain input in FFT order (a complex stft): draw it centred, "
                                           "negative frequencies on the left")
    queue: int = Field(4, ge=1, le=64, description="snapshots waiting for the viewer at most (then the oldest "
                                                   "is dropped and counted)")


class ViewFeed:
    """The stream's side of the hand-over to the viewer (io/view_ring.py): ``put`` copies a snapshot
    into a ring of ``maxlen`` slots in shared memory and never waits; a snapshot whose slot is
    overwritten before the viewer took it is ``dropped`` (counted). ``drain`` reads in-process."""

    def __init__(self, maxlen: int):
        self.maxlen = maxlen
        self.ring: SnapshotRing | None = None
        self.generation = 0  # one more each time the sink opens (a new ring for the viewer)
        self._dropped = self._taken = 0  # of the rings before this one

    def open(self, channels: int, capacity: int, bins: int, dtype: str, peaks: bool) -> None:
        self.close()
        self.ring = SnapshotRing(RingLayout(self.maxlen, channels, capacity, bins, dtype, peaks))
        self.generation += 1

    @property
    def dropped(self) -> int:
        return self._dropped + (self.ring.dropped if self.ring is not None else 0)

    @property
    def taken(self) -> int:
        return self._taken + (self.ring.taken if self.ring is not None else 0)

    def put(self, snap: Snapshot) -> None:
        if self.ring is None:
            raise not_open("view sink", "write")
        self.ring.put(snap)

    def drain(self) -> list[Snapshot]:
        return self.ring.drain() if self.ring is not None else []

    def close(self) -> None:
        if self.ring is not None:
            self._dropped, self._taken = self.dropped, self.taken
            self.ring.close()
            self.ring = None


@register_sink
class ViewSink(Counters, Sink):
    """Hands snapshots of its input to the web viewer (gk-stream run --view); never blocks the stream."""

    type = "view"
    Params = ViewSinkParams
    summary = ("the web page of gk-stream run --view: spectrum, waterfall, scope, constellation and level "
               "meters (time or frames domain)")

    def __init__(self, params=None, **kwargs):
        super().__init__(params, **kwargs)
        p = self.params
        if not p.ceil_db > p.floor_db:
            raise ConfigError(f"sink 'view' needs floor_db < ceil_db, got {p.floor_db} and {p.ceil_db}",
                              where=self.where, hint="e.g. floor_db: -120, ceil_db: 10")
        self.name: str | None = None  # set by the viewer from the graph's name for this sink
        self.spec: SignalSpec | None = None
        self.feed = ViewFeed(p.queue)
        self._interval = 0.5 / p.fps  # snapshots at twice the frame rate: the viewer max-holds them
        self._next = 0.0
        self._position = 0  # samples (frames) per channel written so far
        self._ring: np.ndarray | None = None
        self._ring_pos = 0
        self._init_counters("view_dropped")

    def open(self, spec: SignalSpec) -> None:
        self.spec = spec
        self._position = 0
        nfft = self.params.nfft
        self._ring = (np.zeros((spec.channels, nfft), spec.np_dtype)
                      if spec.domain == "time" and spec.block_size < nfft else None)
        self._ring_pos = 0  # where the next sample goes (mod nfft)
        if spec.domain == "time":
            self.feed.open(spec.channels, nfft, 0, spec.dtype, peaks=True)
        else:
            self.feed.open(spec.channels, self._frames_kept(spec), spec.bins, spec.dtype, peaks=False)

    @staticmethod
    def _frames_kept(spec: SignalSpec) -> int:
        """Frames of a frames-domain block a snapshot keeps: the newest 64 at most, and at most
        FRAME_VALUES values, so that a wide filterbank's snapshot stays a small copy."""
        return max(1, min(spec.block_size, 64, FRAME_VALUES // (spec.channels * spec.bins)))

    def _ring_in(self, block: np.ndarray) -> None:
        ring, nfft = self._ring, self.params.nfft
        n = min(block.shape[1], nfft)
        a = self._ring_pos % nfft
        first = min(n, nfft - a)
        ring[:, a:a + first] = block[:, block.shape[1] - n:block.shape[1] - n + first]
        ring[:, :n - first] = block[:, block.shape[1] - n + first:]
        self._ring_pos = (a + n) % nfft

    def _newest_into(self, block: np.ndarray, out: np.ndarray) -> int:
        """Copy the newest nfft samples per channel (fewer at the start of the stream) into the
        flat slot ``out``, oldest first; how many per channel."""
        nfft, n = self.params.nfft, block.shape[1]
        if self._ring is None or n >= nfft:
            m = min(n, nfft)
            out[:block.shape[0] * m].reshape(block.shape[0], m)[...] = block[:, n - m:]
            return m
        m = min(self._position, nfft)
        view = out[:block.shape[0] * m].reshape(block.shape[0], m)
        start = (self._ring_pos - m) % nfft  # the oldest of the newest m, in the ring
        first = min(m, nfft - start)
        view[:, :first] = self._ring[:, start:start + first]
        view[:, first:] = self._ring[:, :m - first]
        return m

    def write(self, block: np.ndarray) -> None:
        if self.spec is None:
            raise not_open("view sink", "write")
        block = check_block(block, self.spec, "view sink")
        n = block.shape[1]
        self._position += n
        self._counts["samples"] += n
        if self._ring is not None and n:  # blocks shorter than nfft: the newest nfft samples kept in a ring
            self._ring_in(block)
        now = time.monotonic()
        if n == 0 or now < self._next:
            return
        self._next = now + self._interval
        ring = self.feed.ring
        if ring is None:
            raise not_open("view sink", "write")
        seq, buf, peaks = ring.reserve()  # straight into the shared slot: one copy on this thread
        if self.spec.domain == "time":
            # the block's own peak (not the snapshot's): a click between snapshots still lights the meter
            np.max(np.abs(block), axis=1, out=peaks)
            m = self._newest_into(block, buf)
        else:
            m = min(n, ring.layout.capacity)
            buf[:block.shape[0] * m * block.shape[2]].reshape(block.shape[0], m, block.shape[2])[...] = block[:, n - m:]
        ring.commit(seq, m, self._position / self.spec.sample_rate)

    def close(self) -> None:
        self.feed.close()  # the viewer keeps its own mapping of the ring: its last figures stay
        super().close()

    def stats(self) -> dict[str, int]:
        self._counts["view_dropped"] = self.feed.dropped
        return super().stats()
