import gc
import time

import numpy as np

from pygpukit_dsp.bench.gc_pauses import GcPauses, overlap_ns


def test_every_collection_inside_the_block_is_recorded_with_its_generation():
    t0 = time.perf_counter_ns()
    with GcPauses() as p:
        gc.collect(0)
        gc.collect(2)
    gc.collect(1)  # after the block: not recorded
    s, e, g = p.spans()
    assert list(g) == [0, 2]
    assert (s >= t0).all() and (e >= s).all() and s[1] >= e[0]
    assert p._callback not in gc.callbacks


def test_overlap_counts_only_the_part_of_a_collection_inside_the_window():
    spans = (np.array([100, 1_000]), np.array([300, 1_500]), np.array([0, 2]))
    assert overlap_ns(spans, 200, 1_200) == (100 + 200, 2)
    assert overlap_ns(spans, 400, 900) == (0, -1)
    assert overlap_ns(None, 0, 10) == (0, -1)
