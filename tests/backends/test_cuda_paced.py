"""Paced blocks on the GPU (the engine's instrument: ``CudaEngine.instrument().process`` with a
release time; docs/cuda.md, "Paced blocks"): with the prewarm (the slot's pages read by the GPU
through a graph captured per slot, launched the way a block is, and a word of every page of the
pinned input and output read on the host) and the two-step wait (``wait_release``, then
``process``), every output equals the same block run back to back and no block is back before its
release; a block written after the first step is the one the second reads. The paced bench's floor
(``instrument.RoundTripFloor``) moves the block to the GPU and back on it."""

from __future__ import annotations

import time

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages


def _w1() -> Pipeline:
    rng = np.random.default_rng(1)
    return Pipeline([stages.Fir(taps=rng.standard_normal(256) / 16), stages.Mix(matrix=rng.standard_normal((16, 64)))],
                    name="w1", sample_rate=48_000, channels=64, block_size=256, qos={"class": "realtime"})


def _open(p: Pipeline):
    """The realtime engine as a Session opens it."""
    from pygpukit_dsp.backends import open_backend

    return open_backend(p, p.propagate(p.input_spec()), "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("warm_us", [0, 100])
def test_paced_blocks_with_prewarm_equal_the_same_blocks_back_to_back(warm_us: int):
    p = _w1()
    paced, ref = _open(p), _open(p)
    try:
        assert paced.native.mapped_io  # the realtime defaults: the prewarm's GPU touch runs
        inst = paced.instrument()
        rng = np.random.default_rng(3)
        blocks = [rng.standard_normal((64, 256)).astype(np.float32) for _ in range(12)]
        for k, x in enumerate(blocks):
            slot = k % paced.slots
            release = time.perf_counter_ns() + 1_500_000
            if warm_us:
                buf = np.zeros_like(x)  # written after the first step of the wait, as a live source would
                inst.wait_release(slot, release, 300, True, release - warm_us * 1000)
                back = time.perf_counter_ns()
                np.copyto(buf, x)
                y = inst.process(slot, buf, False, None, release, 300, False)
                assert back >= release - warm_us * 1000  # the first step returns at its time at the earliest
            else:
                y = inst.process(slot, x, False, None, release, 300, True)
            assert time.perf_counter_ns() >= release
            np.testing.assert_array_equal(y, ref.process(x))
    finally:
        paced.close()
        ref.close()


@pytest.mark.gpu
def test_the_round_trip_floor_returns_the_block_through_the_gpu():
    from pygpukit_dsp import _native

    dev = _native.Device(0)
    rng = np.random.default_rng(4)
    fl = _native.instrument.RoundTripFloor(dev, 64 * 256 * 4, 16 * 256 * 4)  # W1's block and output sizes
    for k in range(8):
        x = rng.standard_normal((64, 256)).astype(np.float32)
        y = np.empty((16, 256), np.float32)
        release = time.perf_counter_ns() + 1_000_000 if k % 2 else 0
        fl.run(x, y, release, 300, True)
        assert time.perf_counter_ns() >= release
        np.testing.assert_array_equal(y, x[:16])
