"""The view sink's shared-memory ring: a reader through its own descriptor (as the server process
maps it) sees what the writer put, oldest first; a slot overwritten before it was read is dropped
and counted on the writer's side; a frames-domain layout keeps its shape."""

import os

import numpy as np
import pytest

from pygpukit_dsp.io.view_ring import RingLayout, RingReader, Snapshot, SnapshotRing


def _reader(ring: SnapshotRing) -> RingReader:
    return RingReader(RingLayout(**ring.layout.to_dict()), os.dup(ring.fd))


def test_a_reader_of_its_own_mapping_gets_the_snapshots_and_their_peaks():
    ring = SnapshotRing(RingLayout(slots=4, channels=2, capacity=8, bins=0, dtype="float32", peaks=True))
    reader = _reader(ring)
    ring.put(Snapshot(np.arange(16, dtype=np.float32).reshape(2, 8), 0.5, np.array([7, 15], np.float32)))
    ring.put(Snapshot(np.ones((2, 3), np.float32), 0.75, np.array([1, 1], np.float32)))
    first, second = reader.drain()
    np.testing.assert_array_equal(first.data, np.arange(16).reshape(2, 8))
    assert first.end_s == 0.5 and list(first.block_peak) == [7, 15]
    assert second.data.shape == (2, 3) and second.end_s == 0.75
    assert reader.drain() == [] and ring.dropped == 0
    reader.close()
    ring.close()


def test_a_slot_overwritten_before_it_was_read_is_dropped_and_counted():
    ring = SnapshotRing(RingLayout(slots=3, channels=1, capacity=4, bins=0, dtype="float32", peaks=False))
    reader = _reader(ring)
    for i in range(10):
        ring.put(Snapshot(np.full((1, 4), i, np.float32), float(i)))
    assert [int(s.data[0, 0]) for s in reader.drain()] == [7, 8, 9]
    assert ring.dropped == 7 and ring.taken == 10
    ring.put(Snapshot(np.full((1, 4), 10, np.float32), 10.0))
    assert ring.dropped == 7  # the slot it took had been read
    assert [int(s.data[0, 0]) for s in reader.drain()] == [10]
    ring.close()


def test_a_frames_layout_keeps_frames_and_bins():
    ring = SnapshotRing(RingLayout(slots=2, channels=3, capacity=4, bins=5, dtype="complex64", peaks=False))
    block = (np.arange(3 * 2 * 5) * (1 + 1j)).astype(np.complex64).reshape(3, 2, 5)
    ring.put(Snapshot(block, 1.0))
    (snap,) = ring.drain()
    np.testing.assert_array_equal(snap.data, block)
    ring.close()


def test_a_snapshot_that_does_not_fit_is_refused():
    ring = SnapshotRing(RingLayout(slots=2, channels=1, capacity=4, bins=0, dtype="float32", peaks=False))
    with pytest.raises(ValueError, match="does not fit"):
        ring.put(Snapshot(np.zeros((1, 5), np.float32), 1.0))
    ring.close()
