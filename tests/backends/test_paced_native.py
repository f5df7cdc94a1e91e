"""The native pieces of paced streams on the fake CUDA driver: the engine's instrument's process()
with a release time waits for it without the GIL (and its trace's call stamp comes after the
release), the two-step wait (wait_release, then process), try_wait, _native.wait_until, run_paced
driving several engines under one dispatcher on their own clocks (and watching where its threads'
time went), and the paced bench's floor (instrument.RoundTripFloor: the block to the GPU and back,
paced the way the instrument's process() is). No latency is asserted beyond "not before the
release"."""
from __future__ import annotations

import pytest

from .test_cuda_engine import last_json, run_python
from .test_cuda_engine import fake_driver  # noqa: F401  (a fixture)
from .test_cuda_engine_mapped_io import fake_mapped_driver  # noqa: F401  (a fixture)

SCRIPT = r"""
import json, threading, time
import numpy as np
import pygpukit_dsp_core
from pygpukit_dsp import _native
from pygpukit_dsp._native import instrument

dev = _native.Device(0)
res = {}
def op(ch, items, name="d"):
    return {"kind": "delay", "name": name, "in": (ch, items, 0, "float32"), "out": (ch, items, 0, "float32"),
            "params": {"delays": np.zeros(ch)}}
x = np.arange(4 * 64, dtype=np.float32).reshape(4, 64)

# wait_until: never early; the past returns at once
t = _native.monotonic_ns()
res["clock_is_perf_counter"] = abs(time.perf_counter_ns() - t) < 5_000_000
target = t + 3_000_000
_native.wait_until(target, 200)
res["wait_until_not_early"] = _native.monotonic_ns() >= target
t0 = time.perf_counter_ns(); _native.wait_until(1, 0); res["past_is_immediate"] = time.perf_counter_ns() - t0 < 2_000_000
try:
    _native.wait_until(target, -1)
except ValueError as exc:
    res["negative_spin"] = str(exc)

# the instrument's process with a release: the block starts after it (trace call >= release), data intact
e = _native.StreamEngine(dev, [op(4, 64)], use_graph=False, single_stream=True, inline_submit=True)
inst = instrument.EngineInstrument(e)
e.set_trace(8)
rel, ok = [], True
for k in range(4):
    r = _native.monotonic_ns() + 2_000_000
    rel.append(r)
    ok &= bool(np.array_equal(inst.process(k % 2, x + k, False, None, r, 300, True), x + k))
backs = []
for k in range(4):  # the two steps: back to Python before the release, then the rest in process()
    r = _native.monotonic_ns() + 2_000_000
    rel.append(r)
    inst.wait_release(k % 2, r, 300, True, r - 100_000)
    backs.append(_native.monotonic_ns() - (r - 100_000))
    ok &= bool(np.array_equal(inst.process(k % 2, x - k, False, None, r, 300, False), x - k))
try:
    inst.process(0, x, False, None, _native.monotonic_ns() + 1_000_000, -1, False)
except ValueError as exc:
    res["negative_paced_spin"] = str(exc)
# the first step waits until its return time (how soon after it Python runs again is the host's:
# on a loaded 2-core VM it once came back after the release)
res["first_step_waits"] = all(b >= 0 for b in backs)
tr = e.trace().tolist()
res["release_data_ok"] = ok
res["calls_after_release"] = all(row[0] >= r for row, r in zip(tr, rel))
# try_wait: None while running, the items once done
e.input_slot(0)[:] = 5
e.submit(0, 64)
got = None
for _ in range(100000):
    got = e.try_wait(0)
    if got is not None:
        break
res["try_wait"] = got
try:
    e.try_wait(1)
except ValueError as exc:
    res["try_wait_unsubmitted"] = str(exc)
e.close()

# run_paced: 6 engines under one dispatcher, staggered clocks
sched = pygpukit_dsp_core.Scheduler()
engines = [_native.StreamEngine(dev, [op(4, 64, f"d{i}")], use_graph=False, single_stream=True, inline_submit=True)
           for i in range(6)]
ids = [sched.register_stream(f"s{i}", "realtime", period_ns=2_000_000, cost_ns=1_000) for i in range(6)]
disp = _native.Dispatcher(dev, sched.capsule(), spin_us=200)
for en, sid in zip(engines, ids):
    en.attach(disp, sid)
def paced_summary(out):
    return {"timed": [len(a) for a in out["latency_ns"]], "released": list(out["released"]),
            "fills": [len(f) == len(a) and bool((f > 0).all()) for f, a in zip(out["fill_ns"], out["latency_ns"])],
            "submits": [len(f) == len(a) and bool((f > 0).all()) for f, a in zip(out["submit_ns"], out["latency_ns"])],
            "late": list(out["late"]), "positive": all(bool((a > 0).all()) for a in out["latency_ns"]),
            "window": [out["timed_from_ns"] - out["start_ns"], out["end_ns"] - out["timed_from_ns"]]}
out = _native.run_paced(engines, [2_000_000] * 6, [i * 333_333 for i in range(6)], [[x, x + 1]] * 6, 0.05, 0.3, 2, 100)
res["paced"] = paced_summary(out)
res["sched_submitted"] = [sched.stream_stats(s)["submitted"] for s in ids]
res["unwatched_gaps"] = [g.shape for g in out["thread_gaps"]]
# watched: every launch now sleeps 1 ms in the driver (a launch that blocks its caller), so the
# thread that launches (a driver thread helping, or the worker) has gaps it spent asleep
disp.watch_off_cpu(200)
import os
gain = {"kind": "gain", "name": "g", "in": (4, 64, 0, "float32"), "out": (4, 64, 0, "float32"),
        "params": {"factor": 2.0}}  # a kernel launch per block (the delay op of zeros copies)
gains = [_native.StreamEngine(dev, [gain], use_graph=False, single_stream=True, inline_submit=True) for _ in range(2)]
for en in gains:
    en.attach(disp, sched.register_stream(f"g{len(res)}{id(en)}", "realtime", period_ns=5_000_000, cost_ns=1_000))
os.environ["FAKE_CUDA_LAUNCH_DELAY_US"] = "1000"
out = _native.run_paced(gains, [5_000_000] * 2, [0, 2_500_000], [[x, x + 1]] * 2, 0.0, 0.2, 2, 100,
                        watch_gap_us=200)
os.environ["FAKE_CUDA_LAUNCH_DELAY_US"] = "0"
rows = [r for g in out["thread_gaps"] for r in g.tolist()] + disp.off_cpu_gaps().tolist()
res["watched"] = {"threads": len(out["thread_gaps"]), "columns": [g.shape[1] for g in out["thread_gaps"]],
                  "asleep_1ms": sum(1 for at, gap, win, ran, queued, sw in rows
                                    if gap >= 1_000_000 and sw >= 1 and win - ran - queued >= 500_000),
                  "available": instrument.OffCpuMeter.available(), "rows": rows[:6]}
for en in gains:
    en.close()
try:
    _native.run_paced(engines[:1], [5_000_000], [0], [[x]], 0.0, 0.01, 1, 100, watch_gap_us=-1)
except ValueError as exc:
    res["watch_bad"] = str(exc)
disp.close()
for bad in (dict(engines=[], periods_ns=[], phases_ns=[], inputs=[]),
            dict(engines=engines[:1], periods_ns=[0], phases_ns=[0], inputs=[[x]]),
            dict(engines=engines[:1], periods_ns=[1000], phases_ns=[0], inputs=[[np.ascontiguousarray(x[:, :10])]])):
    try:
        _native.run_paced(warmup_s=0.0, seconds=0.1, **bad)
        res.setdefault("bad", []).append(None)
    except (ValueError, RuntimeError) as exc:
        res.setdefault("bad", []).append(str(exc))
for en in engines:
    en.close()

# RoundTripFloor: the block to the GPU and back through one device buffer (first out_bytes of it)
fl = instrument.RoundTripFloor(dev, x.nbytes, 2 * 64 * 4)
y = np.full((2, 64), -1, np.float32)
fl.run(x + 3, y)
res["floor_b2b"] = bool(np.array_equal(y, (x + 3)[:2]))
r = _native.monotonic_ns() + 2_000_000
fl.run(x + 4, y, r, 300, True)
res["floor_paced"] = bool(np.array_equal(y, (x + 4)[:2])) and _native.monotonic_ns() >= r
big = instrument.RoundTripFloor(dev, 64, 128)  # a result larger than the block: zeros beyond it
z = np.full(32, -1, np.float32)
big.run(np.arange(16, dtype=np.float32), z)
res["floor_zeros_beyond"] = bool(np.array_equal(z, np.r_[np.arange(16), np.zeros(16)].astype(np.float32)))
for args in ((x[:, :10], y), (x, np.empty((3, 64), np.float32)), (x, y[:, ::2])):
    try:
        fl.run(*args)
        res.setdefault("floor_bad", []).append(None)
    except ValueError as exc:
        res.setdefault("floor_bad", []).append(str(exc))
# run_paced over floors (the capacity floor): released and timed on their clocks like engines
floors = [instrument.RoundTripFloor(dev, x.nbytes, 2 * 64 * 4) for _ in range(4)]
out = _native.run_paced(floors, [2_000_000] * 4, [i * 500_000 for i in range(4)], [[x, x + 1]] * 4, 0.05, 0.3, 2, 100)
res["floor_paced_run"] = paced_summary(out)
try:
    _native.run_paced(floors[:1], [1_000_000], [0], [[x[:, :10].copy()]], 0.0, 0.1)
except ValueError as exc:
    res["floor_paced_bad"] = str(exc)
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def paced(fake_driver: str) -> dict:  # noqa: F811
    pytest.importorskip("pygpukit_dsp_core")
    return last_json(run_python(SCRIPT, GK_LIBCUDA=fake_driver, GK_JIT_DISK_CACHE="0", timeout=300))


def test_wait_until_uses_the_perf_counter_clock_and_is_never_early(paced):
    assert paced["clock_is_perf_counter"] and paced["wait_until_not_early"] and paced["past_is_immediate"]
    assert "spin_us" in paced["negative_spin"]


def test_a_paced_block_starts_after_its_release_in_one_or_two_steps(paced):
    assert paced["release_data_ok"] and paced["calls_after_release"] and paced["first_step_waits"]
    assert "spin_us" in paced["negative_paced_spin"]


PREWARM_SCRIPT = r"""
import ctypes, json, os
import numpy as np
from pygpukit_dsp import _native
from pygpukit_dsp._native import instrument

fake = ctypes.CDLL(os.environ["GK_LIBCUDA"])
dev = _native.Device(0)
gain = {"kind": "gain", "name": "g", "in": (4, 64, 0, "float32"), "out": (4, 64, 0, "float32"),
        "params": {"factor": 2.0}}
x = np.ones((4, 64), np.float32)
# use_graph + mapped_io: the prewarm's touch captured per slot by the instrument, launched in the spin window
g = _native.StreamEngine(dev, [gain], use_graph=True, single_stream=True, inline_submit=True, mapped_io=True)
inst = instrument.EngineInstrument(g)
g.set_trace(4)
launches0 = fake.fake_cuda_graph_launches()
rel = []
for k in range(3):
    r = _native.monotonic_ns() + 2_000_000
    rel.append(r)
    inst.process(k % 2, x, False, None, r, 300, True)
res = {"after_release": all(row[0] >= r for row, r in zip(g.trace().tolist(), rel)),
       "graph_launches": int(g.counters()["graph_launches"]),
       "driver_graph_launches": fake.fake_cuda_graph_launches() - launches0}
# a spin longer than the wait (3 ms of spin, released 2 ms ahead): the prewarm still comes at most
# 200 us (kPrewarmLeadNs) before the release, not when the spin starts
fake.fake_cuda_graph_launch_ns.restype = ctypes.c_longlong
n0 = fake.fake_cuda_graph_launches()
r = _native.monotonic_ns() + 2_000_000
inst.process(1, x, False, None, r, 3000, True)
res["long_spin_prewarm_before_release_ns"] = r - fake.fake_cuda_graph_launch_ns(n0)
g.close()
print(json.dumps(res))
"""


def test_the_prewarm_graph_is_captured_and_launched_before_a_mapped_block(fake_mapped_driver: str):  # noqa: F811
    pytest.importorskip("pygpukit_dsp_core")
    res = last_json(run_python(PREWARM_SCRIPT, GK_LIBCUDA=fake_mapped_driver, GK_JIT_DISK_CACHE="0", timeout=120))
    assert res["after_release"] is True
    assert res["graph_launches"] == 3  # the blocks' own graphs; the prewarm's launches are not blocks
    assert res["driver_graph_launches"] == 6  # ... but the driver saw a prewarm graph before each block
    # not 2 ms ahead (when the spin began); a loaded host may only wake it later, past the release
    assert res["long_spin_prewarm_before_release_ns"] <= 200_000 + 50_000


def test_try_wait_returns_the_items_once_done(paced):
    assert paced["try_wait"] == 64 and "not submitted" in paced["try_wait_unsubmitted"]


def test_run_paced_releases_every_stream_on_its_clock(paced):
    p = paced["paced"]
    # 0.35 s of 2 ms periods: 175 blocks per stream (the phase may take one off), 150 of them timed
    assert all(174 <= n <= 176 for n in p["released"])
    assert all(148 <= n <= 151 for n in p["timed"]) and p["positive"]
    assert p["fills"] == p["submits"] == [True] * 6  # every timed block's fill and submit times, beside its latency
    assert p["window"] == [50_000_000, 300_000_000]
    assert paced["sched_submitted"] == p["released"]  # every block went through the scheduler


def test_run_paced_watches_where_its_threads_time_went(paced):
    assert paced["unwatched_gaps"] == [[0, 6], [0, 6]]  # not watched: nothing recorded
    w = paced["watched"]
    assert w["threads"] == 2 and w["columns"] == [6, 6]
    if w["available"]:  # Linux with schedstat (CI and the GPU machine)
        # 40 blocks launched, each launch asleep 1 ms in the (fake) driver
        assert w["asleep_1ms"] >= 10, w["rows"]
    assert "watch_gap_us must be >= 0" in paced["watch_bad"]


def test_run_paced_checks_its_arguments(paced):
    a, b, c = paced["bad"]
    assert "at least one stream" in a and "period 0" in b and "full block" in c


def test_run_paced_drives_floors_on_their_clocks(paced):
    p = paced["floor_paced_run"]
    assert all(174 <= n <= 176 for n in p["released"]) and all(148 <= n <= 151 for n in p["timed"])
    assert p["positive"] and p["fills"] == p["submits"] == [True] * 4
    assert p["late"] == [0] * 4  # one block in flight, never late
    assert "in_bytes (1024) bytes" in paced["floor_paced_bad"]


def test_the_floor_is_a_round_trip_of_the_block_paced_like_process(paced):
    assert paced["floor_b2b"] and paced["floor_paced"] and paced["floor_zeros_beyond"]
    a, b, c = paced["floor_bad"]
    assert "in_bytes" in a and "out_bytes" in b and "C-contiguous" in c
