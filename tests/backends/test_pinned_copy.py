"""Copies into pinned memory (native/engine/pinned_copy.cpp), as every slot fill makes them: the
bytes arrive whatever the size, alignment and thread count; a large copy is cut into chunks that
helper threads take; small ones stay on the caller; two callers at once and a forked child
still copy right."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

native = pytest.importorskip("pygpukit_dsp._native")

SPLIT = 256 * 1024  # kCopySplitBytes


@pytest.fixture
def threads():
    def set_to(n: int) -> None:
        native.set_copy_threads(n)

    yield set_to
    native.set_copy_threads(0)


def _data(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


@pytest.mark.parametrize("n_threads", [1, 2, 4])
@pytest.mark.parametrize("size", [0, 1, 15, 4096 + 3, SPLIT - 1, SPLIT, 3 * SPLIT + 17, 5 << 20])
def test_every_byte_arrives(threads, n_threads, size):
    threads(n_threads)
    src = _data(size + 16, seed=size)
    for off in (0, 1, 8):  # aligned and not (the non-temporal path needs 16-byte alignment)
        s = src[off:off + size]
        d = np.zeros(size + 16, np.uint8)[off:off + size]
        native.copy_bytes(d, s)
        assert np.array_equal(d, s)


def test_a_large_copy_is_split_and_a_small_one_is_not(threads):
    threads(2)
    before = native.copy_stats()
    native.copy_bytes(np.empty(SPLIT - 1, np.uint8), _data(SPLIT - 1))
    assert native.copy_stats()["split_copies"] == before["split_copies"]
    native.copy_bytes(np.empty(SPLIT, np.uint8), _data(SPLIT))
    after = native.copy_stats()
    assert after["split_copies"] == before["split_copies"] + 1
    assert after["chunks"] - before["chunks"] >= 2
    threads(1)  # one thread: nothing is split
    native.copy_bytes(np.empty(SPLIT, np.uint8), _data(SPLIT))
    assert native.copy_stats()["split_copies"] == after["split_copies"]


def test_helper_threads_take_chunks(threads):
    threads(2)
    src, dst = _data(4 << 20), np.empty(4 << 20, np.uint8)
    before = native.copy_stats()["helper_chunks"]
    deadline = time.monotonic() + 10.0  # a bounded wait: the helper must get a core once
    while native.copy_stats()["helper_chunks"] == before and time.monotonic() < deadline:
        native.copy_bytes(dst, src)
    assert native.copy_stats()["helper_chunks"] > before
    assert np.array_equal(dst, src)


def test_two_callers_at_once_both_copy_right(threads):
    threads(4)
    srcs = [_data(3 << 20, seed=k) for k in range(2)]
    dsts = [np.empty(3 << 20, np.uint8) for _ in range(2)]
    bad = []

    def run(k: int) -> None:
        for _ in range(40):
            dsts[k][:] = 0
            native.copy_bytes(dsts[k], srcs[k])  # without the GIL: the two overlap
            if not np.array_equal(dsts[k], srcs[k]):
                bad.append(k)

    ts = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in ts) and not bad


def _child_copy(q) -> None:
    src = _data(2 << 20, seed=3)
    dst = np.empty_like(src)
    native.copy_bytes(dst, src)
    q.put(bool(np.array_equal(dst, src)))


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_forked_child_copies_with_its_own_pool(threads):
    threads(3)
    native.copy_bytes(np.empty(2 << 20, np.uint8), _data(2 << 20))  # the parent's helpers exist
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child_copy, args=(q,))
    p.start()
    try:
        assert q.get(timeout=30) is True
    finally:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    assert p.exitcode == 0


def test_bad_arguments_are_refused(threads):
    with pytest.raises(ValueError, match="must be >= 1"):
        native.set_copy_threads(-1)
    with pytest.raises(ValueError, match="holds 4 bytes, src 5"):
        native.copy_bytes(np.empty(4, np.uint8), np.empty(5, np.uint8))
    with pytest.raises(ValueError, match="C-contiguous"):
        native.copy_bytes(np.empty(8, np.uint8)[::2], np.empty(4, np.uint8))
    ro = np.empty(4, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        native.copy_bytes(ro, np.empty(4, np.uint8))


@pytest.mark.parametrize("env, expected", [("3", 3), ("1", 1), ("99", 16)])
def test_gk_copy_threads_sets_the_default(env, expected, tmp_path):
    # run from a folder outside the checkout: the installed package, not the source tree
    code = "from pygpukit_dsp import _native as n; print(n.copy_threads())"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "GK_COPY_THREADS": env},
                         capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path)
    assert int(out.stdout) == expected


def _default_threads(cwd, cpus: "set[int] | None" = None) -> int:
    code = "from pygpukit_dsp import _native as n; print(n.copy_threads())"
    if cpus is not None:  # the child runs on these cores only
        code = f"import os; os.sched_setaffinity(0, {sorted(cpus)!r}); " + code
    env = {k: v for k, v in os.environ.items() if k != "GK_COPY_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                         check=True, cwd=cwd)  # outside the checkout: the installed package
    return int(out.stdout)


def test_the_default_is_a_quarter_of_the_cores_from_1_to_4(tmp_path):
    assert _default_threads(tmp_path) == min(4, max(1, len(os.sched_getaffinity(0)) // 4))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity")
def test_the_default_counts_the_cores_the_process_may_run_on(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    # held to 4 of 8 or more cores (else to one), the process copies on its caller alone, where
    # the host's count would give it 2 to 4 threads
    held = set(cores[:4] if len(cores) >= 8 else cores[:1])
    assert _default_threads(tmp_path, held) == 1


def test_helpers_spin_only_after_copies_that_follow_each_other(threads):
    threads(2)
    src, dst = _data(SPLIT), np.empty(SPLIT, np.uint8)
    native.copy_bytes(dst, src)
    time.sleep(0.002)  # a paced stream's gap: the helpers sleep at once after the next copy
    native.copy_bytes(dst, src)
    assert native.copy_stats()["helper_spin_us"] == 0
    spun = False
    for _ in range(50):  # back to back (bounded: a preempted caller may leave a gap once)
        native.copy_bytes(dst, src)
        native.copy_bytes(dst, src)
        if native.copy_stats()["helper_spin_us"] == 200:
            spun = True
            break
    assert spun and np.array_equal(dst, src)
