"""Paced blocks on the GPU (CudaEngine.process with release_ns; docs/cuda.md, "Paced blocks"): with
the prewarm (the slot's pages read by the GPU through a graph captured per slot, launched the way a
block is, and every line of the pinned input read on the host) and the two-step wait, every output
equals the same block run back to back, no block is back before its release, and ``arrive`` is
called after the first step, before the block is read. The paced bench's floor (RoundTripFloor)
moves the block to the GPU and back on it."""

from __future__ import annotations

import time

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages


def _w1() -> Pipeline:
    rng = np.random.default_rng(1)
    return Pipeline([stages.Fir(taps=rng.standard_normal(256) / 16), stages.Mix(matrix=rng.standard_normal((16, 64)))],
                    name="w1", sample_rate=48_000, channels=64, block_size=256, qos={"class": "realtime"})


def _open(p: Pipeline, **options):
    """The realtime engine as a Session opens it; ``options``: CudaEngine's own (overlap_fill)."""
    from pygpukit_dsp.backends import choose_backend, open_backend
    from pygpukit_dsp.backends.cuda_engine import CudaEngine

    chain = p.propagate(p.input_spec())
    if not options:
        return open_backend(p, chain, "cuda")
    return CudaEngine(p, chain, choose_backend(p, chain, "cuda"), **options)


@pytest.mark.gpu
@pytest.mark.parametrize("warm_us,overlap_fill,lines", [(0, False, False), (100, False, False), (100, True, False),
                                                       (0, False, True), (100, False, True)])
def test_paced_blocks_with_prewarm_equal_the_same_blocks_back_to_back(warm_us: int, overlap_fill: bool, lines: bool):
    # overlap_fill (the cadence bench's setting row): the block launched first, copied in after;
    # lines: the prewarm reads every line of the input (the settings' comparison row)
    p = _w1()
    paced, ref = _open(p, **({"overlap_fill": True} if overlap_fill else {})), _open(p)
    try:
        assert paced._engine.mapped_io  # the realtime defaults: the prewarm's GPU touch runs
        assert paced._engine.overlap_fill is overlap_fill
        rng = np.random.default_rng(3)
        blocks = [rng.standard_normal((64, 256)).astype(np.float32) for _ in range(12)]
        arrived: list[tuple[int, int]] = []
        returned: list[int] = []
        for x in blocks:
            release = time.perf_counter_ns() + 1_500_000
            if warm_us:
                buf = np.zeros_like(x)  # written by arrive(), after the first step of the wait

                def arrive(buf=buf, x=x, release=release) -> None:
                    np.copyto(buf, x)
                    arrived.append((time.perf_counter_ns(), release))
                y = paced.process(buf, release_ns=release, spin_us=300, prewarm=True, warm_us=warm_us, arrive=arrive,
                                  prewarm_lines=lines)
                returned.append(time.perf_counter_ns())
            else:
                y = paced.process(x, release_ns=release, spin_us=300, prewarm=True, prewarm_lines=lines)
            assert time.perf_counter_ns() >= release
            np.testing.assert_array_equal(y, ref.process(x))
        if warm_us:
            assert len(arrived) == len(blocks)
            # after the first step of the wait, before the call returned (before the block was read:
            # the outputs above equal the reference's, and buf held zeros until arrive() wrote it);
            # no bound after the release: a VM's stall there is no error of the engine's
            assert all(release - warm_us * 1000 <= t < back for (t, release), back in zip(arrived, returned)), \
                [(t - release, back - release) for (t, release), back in zip(arrived, returned)]
    finally:
        paced.close()
        ref.close()


@pytest.mark.gpu
def test_the_round_trip_floor_returns_the_block_through_the_gpu():
    from pygpukit_dsp import _native

    dev = _native.Device(0)
    rng = np.random.default_rng(4)
    fl = _native.RoundTripFloor(dev, 64 * 256 * 4, 16 * 256 * 4)  # W1's block and output sizes
    for k in range(8):
        x = rng.standard_normal((64, 256)).astype(np.float32)
        y = np.empty((16, 256), np.float32)
        release = time.perf_counter_ns() + 1_000_000 if k % 2 else 0
        fl.run(x, y, release, 300, True)
        assert time.perf_counter_ns() >= release
        np.testing.assert_array_equal(y, x[:16])
