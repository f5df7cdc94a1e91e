"""Several CUDA engines under the Rust scheduler (native/engine/dispatcher.cpp,
pygpukit_dsp/backends/cuda_dispatch.py).

* CPU-only: the dispatcher's mechanics against the fake driver of tests/native/fake_libcuda.c
  (in a fresh interpreter): every block becomes a scheduler task, chunks follow the scheduler,
  data and counters survive, a failing engine does not stop the others, close() drains.
* ``gpu``: the same on a real GPU with real stages, results equal to solo runs.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages

from .test_cuda_engine import last_json, run_python
from .test_cuda_engine import fake_driver  # noqa: F401  (fixture)

FAKE_SCRIPT = r"""
import json, os, threading
import numpy as np
import pygpukit_dsp_core
from pygpukit_dsp import _native
from pygpukit_dsp.errors import DeviceError

dev = _native.Device(0)
res = {}

def op(kind, ch, items, params, name):
    return {"kind": kind, "name": name, "in": (ch, items, 0, "float32"),
            "out": (ch, items, 0, "float32"), "params": params}

zero = {"delays": np.zeros(3)}
# Zero delays are device copies on the fake driver (it runs no kernel): data flows through.
chain = lambda tag, n: [op("delay", 3, 16, zero, f"{tag}{i}") for i in range(n)]

sched = pygpukit_dsp_core.Scheduler(quantum_ns=100_000)
rt_id = sched.register_stream("rt", "realtime", period_ns=1_000_000, deadline_ns=1_000_000, cost_ns=20_000)
# declared cost 1 ms over 3 units, quantum 100 us: one unit per chunk
tp_id = sched.register_stream("tp", "throughput", cost_ns=1_000_000, units_per_block=3)
disp = _native.Dispatcher(dev, sched.capsule(), spin_us=100)
res["time_every"] = disp.time_every
try:
    disp.time_every = 0
except ValueError as exc:
    res["time_every_0"] = str(exc)
rt = _native.StreamEngine(dev, chain("r", 1), use_graph=False, single_stream=True, inline_submit=True)
tp = _native.StreamEngine(dev, chain("t", 3), use_graph=True)
res["units"] = [rt.units_per_block, tp.units_per_block]

# misuse: units mismatch, attach twice
bad = pygpukit_dsp_core.Scheduler()
bad_id = bad.register_stream("b", "best_effort", units_per_block=2)
bad_disp = _native.Dispatcher(dev, bad.capsule())
try:
    tp.attach(bad_disp, bad_id)
except ValueError as exc:
    res["units_mismatch"] = str(exc)
bad_disp.close()

# block trace (inline path): stamps in order, a ring of the last `capacity` calls, off again
tr = _native.StreamEngine(dev, chain("x", 1), use_graph=False, single_stream=True, inline_submit=True)
tr.set_trace(2)
for b in range(3):
    tr.process(b % 2, np.zeros((3, 16), np.float32), False)
res["trace_inline"] = tr.trace().tolist()
tr.set_trace(0)
tr.process(0, np.zeros((3, 16), np.float32), False)
res["trace_off"] = tr.trace().shape[0]
tr.close()

rt.attach(disp, rt_id)
tp.attach(disp, tp_id)
try:
    rt.attach(disp, rt_id)
except ValueError as exc:
    res["attach_twice"] = str(exc)
res["attached"] = [rt.attached, tp.attached]

x = np.arange(48, dtype=np.float32).reshape(3, 16)
N = 40
ok = {"rt": True, "tp": True}
def run_rt():
    for b in range(N):
        out = rt.process(b % 2, x + b, False)
        ok["rt"] &= bool(np.array_equal(out, x + b))
def run_tp():
    for b in range(N):
        s = b % 2
        tp.input_slot(s)[:] = -x - b
        tp.submit(s, 16)
        if b >= 1:
            prev = (b - 1) % 2
            tp.wait(prev)
            ok["tp"] &= bool(np.array_equal(tp.output_slot(prev), -x - (b - 1)))
    last = (N - 1) % 2
    tp.wait(last)
    ok["tp"] &= bool(np.array_equal(tp.output_slot(last), -x - (N - 1)))
rt.set_trace(N)  # block trace (scheduled path)
threads = [threading.Thread(target=run_rt), threading.Thread(target=run_tp)]
for t in threads: t.start()
for t in threads: t.join()
res["data_ok"] = ok
res["trace_sched"] = rt.trace().tolist()
# a final partial block runs whole in its last chunk
tp.input_slot(0)[:] = 0
tp.input_slot(0)[:, :5] = 7
tp.submit(0, 5, True)
res["final_n"] = tp.wait(0)
res["final_ok"] = bool(np.all(tp.output_slot(0)[:, :5] == 7))
res["rt_counters"] = rt.counters()
res["tp_counters"] = tp.counters()
res["disp_stats"] = disp.stats()
res["rt_stats"] = {k: v for k, v in sched.stream_stats(rt_id).items() if k in ("submitted", "completed", "missed", "chunks", "live")}
res["tp_stats"] = {k: v for k, v in sched.stream_stats(tp_id).items() if k in ("submitted", "completed", "missed", "chunks", "live")}
res["rt_latency_count"] = sched.stream_stats(rt_id)["latency"]["count"]
res["rt_samples"] = sched.stream_stats(rt_id)["cost_samples"]
res["tp_samples"] = sched.stream_stats(tp_id)["cost_samples"]
res["rt_busy_ns"] = sched.stream_stats(rt_id)["busy_ns"]

# process_split (test entry) refuses an attached engine
try:
    tp.process_split(0, x, False, [1])
except ValueError as exc:
    res["split_attached"] = str(exc)

# a failing engine: its caller gets the DeviceError, the other engine keeps going
os.environ["FAKE_CUDA_LAUNCH_ERROR"] = "1"
failing = _native.StreamEngine(dev, [op("gain", 3, 16, {"factor": 2.0}, "g")], use_graph=False)
f_id = sched.register_stream("failing", "best_effort")
failing.attach(disp, f_id)
try:
    failing.process(0, x, False)
    res["fail_error"] = None
except DeviceError as exc:
    res["fail_error"] = str(exc)
del os.environ["FAKE_CUDA_LAUNCH_ERROR"]
out = rt.process(0, x, False)
res["rt_after_failure"] = bool(np.array_equal(out, x))
failing.close()

# close drains and detaches; the engines run alone again
disp.close()
res["closed"] = disp.closed
try:
    rt.submit(0, 16)
    res["submit_after_close"] = None
except ValueError as exc:
    res["submit_after_close"] = str(exc)
rt.detach(); tp.detach()
res["detached"] = [rt.attached, tp.attached]
res["alone_ok"] = bool(np.array_equal(rt.process(1, x, False), x))
# process_split on an idle, detached engine: every cut gives the same data
res["split_ok"] = [bool(np.array_equal(tp.process_split(0, x + 3, False, cuts), x + 3))
                   for cuts in ([1], [2], [1, 2])]
try:
    tp.process_split(0, x, False, [0])
except ValueError as exc:
    res["bad_cuts"] = str(exc)
res["split_counters"] = tp.counters()
rt.close(); tp.close()
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def fake_dispatch(fake_driver: str) -> dict:  # noqa: F811
    pytest.importorskip("pygpukit_dsp_core")
    return last_json(run_python(FAKE_SCRIPT, GK_LIBCUDA=fake_driver, GK_JIT_DISK_CACHE="0"))


def test_fake_units_per_block_sums_the_ops_units(fake_dispatch):
    assert fake_dispatch["units"] == [1, 3]


def test_fake_attach_is_checked(fake_dispatch):
    assert "units per block" in fake_dispatch["units_mismatch"]
    assert "already attached" in fake_dispatch["attach_twice"]
    assert fake_dispatch["attached"] == [True, True]


def test_fake_blocks_of_two_engines_flow_through_one_dispatcher(fake_dispatch):
    assert fake_dispatch["data_ok"] == {"rt": True, "tp": True}
    assert fake_dispatch["final_n"] == 5 and fake_dispatch["final_ok"]


def test_fake_every_block_is_a_scheduler_task(fake_dispatch):
    rt, tp = fake_dispatch["rt_stats"], fake_dispatch["tp_stats"]
    assert rt["submitted"] == rt["completed"] + rt["missed"] >= 40 and rt["live"] == 0
    assert tp["submitted"] == tp["completed"] + tp["missed"] == 41 and tp["live"] == 0
    assert fake_dispatch["rt_latency_count"] == rt["submitted"]
    d = fake_dispatch["disp_stats"]
    assert d["posted"] == d["completed"] == rt["submitted"] + tp["submitted"]
    # waiting callers run turns of the loop themselves: launches and hand-backs do not depend on
    # the worker thread getting a CPU (it runs turns too, so only "some" is certain)
    assert 0 < d["helped"] <= 2 * d["launches"]  # each such turn launched or finished a chunk


def test_fake_throughput_blocks_are_launched_in_scheduler_chunks(fake_dispatch):
    # cost 1 ms over 3 units with a 100 us quantum: every full block in 3 one-unit chunks
    tp = fake_dispatch["tp_stats"]
    # the final partial block gets its 3 chunks too; it runs whole in the last one
    assert tp["chunks"] == 41 * 3
    c = fake_dispatch["tp_counters"]
    assert c["chunks"] == 40 * 3
    assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["completion_waits"]) == (41, 41, 41, 41)
    rc = fake_dispatch["rt_counters"]
    assert rc["chunks"] == 0 and rc["blocks"] == rc["h2d_copies"] == rc["d2h_copies"] == rc["completion_waits"]


def _stamps_in_order(rows: list[list[int]]) -> bool:
    # call, filled, launch_begin, launched, done_seen, woke
    return all(r[0] > 0 and all(r[i] <= r[i + 1] for i in range(5)) for r in rows)


def test_fake_block_trace_records_each_call_in_order_on_both_paths(fake_dispatch):
    inline, sched = fake_dispatch["trace_inline"], fake_dispatch["trace_sched"]
    assert len(inline) == 2 and inline[0][0] < inline[1][0]  # a ring of 2 keeps the last 2 calls
    assert _stamps_in_order(inline) and all(r[6] == 0 and r[7] == 0 for r in inline)
    assert fake_dispatch["trace_off"] == 0
    assert len(sched) == 40 and _stamps_in_order(sched) and all(r[7] == 1 for r in sched)
    # device time from the dispatcher's events: a stream's first 16 blocks, then one in every 8
    assert [r[6] >= 1 for r in sched] == [k < 16 or k % 8 == 0 for k in range(40)]


def test_fake_dispatcher_times_a_sample_of_whole_blocks_and_every_paced_chunk(fake_dispatch):
    assert fake_dispatch["time_every"] == 8
    assert "time_every must be >= 1" in fake_dispatch["time_every_0"]
    rt, tp = fake_dispatch["rt_stats"], fake_dispatch["tp_stats"]
    # rt: 40 whole blocks, 16 + 3 (k = 16, 24, 32) timed; tp: every one of its 41 x 3 chunks
    assert fake_dispatch["disp_stats"]["timed"] == 19 + 123
    assert fake_dispatch["rt_samples"] == 19 and fake_dispatch["tp_samples"] == 123  # one per chunk
    # an untimed block still counts as busy time (its estimate) and completes
    assert rt["completed"] + rt["missed"] == 40 and fake_dispatch["rt_busy_ns"] > 0


def test_fake_failing_engine_does_not_stop_the_others(fake_dispatch):
    # the failing launch is the block's first: the check of its input for NaN/Inf after the H2D copy
    assert fake_dispatch["fail_error"] is not None and "gk_check_finite" in fake_dispatch["fail_error"]
    assert fake_dispatch["rt_after_failure"]


def test_fake_close_drains_and_detaches(fake_dispatch):
    assert fake_dispatch["closed"]
    assert "closed" in fake_dispatch["submit_after_close"]
    assert fake_dispatch["detached"] == [False, False]
    assert fake_dispatch["alone_ok"]


def test_fake_process_split_runs_any_cut(fake_dispatch):
    assert "attached" in fake_dispatch["split_attached"]
    assert fake_dispatch["split_ok"] == [True, True, True]
    assert "strictly between 0" in fake_dispatch["bad_cuts"]


# ------------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------------


def _w1_like(qos: str) -> Pipeline:
    rng = np.random.default_rng(1)
    return Pipeline([stages.Fir(taps=rng.standard_normal(64) / 8), stages.Mix(matrix=rng.standard_normal((4, 8)))],
                    name="w1", sample_rate=48_000, channels=8, block_size=256, qos={"class": qos})


SPEC_BLOCK = 4096 * 1024  # W2's shape, 4x shorter: several frame steps per CTA, so several units


def _spectrum(qos: str) -> Pipeline:
    return Pipeline([stages.Stft(nfft=4096, hop=4096, window="hann"), stages.Power(), stages.Average(frames=1024)],
                    name="spec", sample_rate=1e6, channels=1, block_size=SPEC_BLOCK, dtype="complex64",
                    qos={"class": qos})


def _engine(pipeline: Pipeline):
    from pygpukit_dsp.backends import open_backend

    return open_backend(pipeline, pipeline.propagate(pipeline.input_spec()), "cuda")


FAKE_RELEASE_SCRIPT = r"""
import json
import numpy as np
from pygpukit_dsp_core import Scheduler
from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.backends.cuda_dispatch import CudaDispatch
from pygpukit_dsp.backends.cuda_engine import CudaEngine

p = Pipeline([stages.Gain(db=1.0)], sample_rate=1000, channels=2, block_size=64)
make = lambda: CudaEngine(p, p.specs(), BackendChoice("cuda", "test"))
sched = Scheduler()
ids = {n: sched.register_stream(n, "best_effort") for n in ("a", "b", "c")}
a, b, c = make(), make(), make()
res = {}
x = np.zeros((2, 64), np.float32)
with CudaDispatch(sched) as dispatch:
    for e, n in ((a, "a"), (b, "b"), (c, "c")):
        dispatch.attach(e, ids[n])
    for _ in range(3):
        a.process(x); b.process(x); c.process(x)
    a.close()                      # its runner is done: the stream leaves the scheduler
    res["after_close"] = [sched.stream_id("a"), sched.stream_id("b") is not None, a.dispatch is None]
    res["a_final"] = dispatch.stream_stats(ids["a"])["completed"]
    dispatch.detach(b)             # back to its own worker, unregistered too
    res["after_detach"] = [sched.stream_id("b"), b.attached, dispatch.stream_stats(ids["b"])["completed"]]
    b.process(x)                   # runs alone now
    c.process(x)
res["after_dispatch_close"] = [sched.stream_id("c"), dispatch.stream_stats(ids["c"])["completed"], c.attached]
try:
    dispatch.detach(c)
except ValueError as exc:
    res["detach_unknown"] = str(exc)
b.close(); c.close()

# runners close their engines from their own threads while the session closes the dispatch
import threading
sched2 = Scheduler()
engines = [make() for _ in range(6)]
ids2 = [sched2.register_stream(f"s{i}", "best_effort") for i in range(6)]
d2 = CudaDispatch(sched2)
for e, sid in zip(engines, ids2):
    d2.attach(e, sid)
    e.process(x)
errors = []
def close(fn):
    try:
        fn()
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=close, args=(e.close,)) for e in engines] + [threading.Thread(target=close, args=(d2.close,))]
for t in threads: t.start()
for t in threads: t.join()
res["concurrent"] = [errors, [sched2.stream_id(f"s{i}") for i in range(6)],
                     [d2.stream_stats(sid)["completed"] for sid in ids2], [e.dispatch is None for e in engines]]
print(json.dumps(res))
"""


def test_fake_closing_or_detaching_an_engine_unregisters_its_stream_and_keeps_its_figures(fake_driver):  # noqa: F811
    pytest.importorskip("pygpukit_dsp_core")
    res = last_json(run_python(FAKE_RELEASE_SCRIPT, GK_LIBCUDA=fake_driver, GK_JIT_DISK_CACHE="0"))
    assert res["after_close"] == [None, True, True] and res["a_final"] == 3
    assert res["after_detach"] == [None, False, 3]
    assert res["after_dispatch_close"] == [None, 4, False]
    assert "not attached" in res["detach_unknown"]
    errors, registered, completed, released = res["concurrent"]
    assert errors == [] and registered == [None] * 6 and completed == [1] * 6 and all(released)


@pytest.mark.gpu
def test_gpu_realtime_and_throughput_share_the_gpu_with_solo_results():
    from pygpukit_dsp_core import Scheduler

    from pygpukit_dsp.backends.cuda_dispatch import CudaDispatch

    p1, p2 = _w1_like("realtime"), _spectrum("throughput")
    rng = np.random.default_rng(7)
    x1 = [rng.standard_normal((8, 256)).astype(np.float32) for _ in range(30)]
    x2 = [(rng.standard_normal((1, SPEC_BLOCK)) + 1j * rng.standard_normal((1, SPEC_BLOCK))).astype(np.complex64)
          for _ in range(6)]
    solo1, solo2 = _engine(p1), _engine(p2)
    ref1 = [solo1.process(b) for b in x1]
    ref2 = [solo2.process(b) for b in x2]
    solo1.close(), solo2.close()

    e1, e2 = _engine(p1), _engine(p2)
    assert e2.units_per_block > 1
    sched = Scheduler(quantum_ns=20_000)
    rt = sched.register_stream("w1", "realtime", period_ns=5_333_333, deadline_ns=2_000_000, cost_ns=60_000)
    tp = sched.register_stream("spec", "throughput", units_per_block=e2.units_per_block)
    got2: list[np.ndarray] = []
    with CudaDispatch(sched) as dispatch:
        dispatch.attach(e1, rt)
        dispatch.attach(e2, tp)

        def spectrum() -> None:
            for b in x2:
                got2.append(e2.process(b).copy())

        t = threading.Thread(target=spectrum)
        t.start()
        got1 = [e1.process(b) for b in x1]
        t.join()
        stats = dispatch.stats()
    for a, b in zip(got1, ref1):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(got2, ref2):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()))
    # the dispatch closed: both streams left the scheduler, their final figures kept
    assert sched.stream_id("w1") is None and sched.stream_id("spec") is None
    s_rt, s_tp = dispatch.stream_stats(rt), dispatch.stream_stats(tp)
    assert s_rt["submitted"] == s_rt["completed"] + s_rt["missed"] == 30
    assert s_tp["submitted"] == s_tp["completed"] == 6
    assert s_rt["latency"]["count"] == 30 and s_rt["latency"]["p99"] > 0
    assert s_tp["busy_ns"] > 0 and s_tp["measured_cost_ns"] is not None
    assert stats["posted"] == stats["completed"] == 36
    # w1's 30 whole blocks: the first 16 and k = 16, 24 timed on the GPU; every spectrum chunk
    assert s_rt["cost_samples"] == 18 and s_rt["measured_cost_ns"] > 0
    assert stats["timed"] == 18 + s_tp["chunks"] and s_tp["cost_samples"] == s_tp["chunks"]
    assert e1.counters()["blocks"] == 30 and e2.counters()["blocks"] == 6
    e1.close(), e2.close()


@pytest.mark.gpu
def test_gpu_throughput_block_split_into_chunks_equals_whole_block():
    from pygpukit_dsp_core import Scheduler

    from pygpukit_dsp.backends.cuda_dispatch import CudaDispatch

    p = _spectrum("throughput")
    rng = np.random.default_rng(3)
    xs = [(rng.standard_normal((1, SPEC_BLOCK)) + 1j * rng.standard_normal((1, SPEC_BLOCK))).astype(np.complex64)
          for _ in range(4)]
    solo = _engine(p)
    ref = [solo.process(b) for b in xs]
    solo.close()
    e = _engine(p)
    sched = Scheduler(quantum_ns=1_000)
    # pacing splits blocks only beside an admitted realtime stream (one that never sends a block)
    sched.register_stream("rt", "realtime", period_ns=100_000_000, cost_ns=1_000)
    # a declared cost far above the quantum: one unit per chunk
    sid = sched.register_stream("spec", "throughput", cost_ns=10_000_000, units_per_block=e.units_per_block)
    with CudaDispatch(sched) as dispatch:
        dispatch.attach(e, sid)
        got = [e.process(b) for b in xs]
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()))
    assert e.counters()["chunks"] >= 4 * (e.units_per_block - 1)
    assert dispatch.stream_stats(sid)["chunks"] >= 4 * e.units_per_block - 4
    e.close()


@pytest.mark.gpu
def test_gpu_resident_blocks_skip_the_copies():
    from pygpukit_dsp_core import Scheduler

    from pygpukit_dsp.backends.cuda_dispatch import CudaDispatch

    p = _spectrum("throughput")
    e = _engine(p)
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((1, SPEC_BLOCK)) + 1j * rng.standard_normal((1, SPEC_BLOCK))).astype(np.complex64)
    e.process(x)
    before = e.counters()
    inst = e.instrument()
    inst.resident = True
    sched = Scheduler()
    sid = sched.register_stream("spec", "throughput", units_per_block=e.units_per_block)
    with CudaDispatch(sched) as dispatch:
        dispatch.attach(e, sid)
        for _ in range(5):
            e.collect(e.submit(x))  # the host copy lands in the slot; the block skips the H2D
        stamps = inst.pump_resident(0.05)
    after = e.counters()
    assert len(stamps) >= 2 and stamps == sorted(stamps)
    assert after["blocks"] - before["blocks"] == 5 + len(stamps)
    assert after["h2d_copies"] == before["h2d_copies"] and after["d2h_copies"] == before["d2h_copies"]
    assert dispatch.stream_stats(sid)["completed"] == 5 + len(stamps)
    e.close()


SLOW_STEP_SCRIPT = r"""
import json, os
import numpy as np
import pygpukit_dsp_core
from pygpukit_dsp import _native

dev = _native.Device(0)
gain = {"kind": "gain", "name": "g", "in": (3, 16, 0, "float32"), "out": (3, 16, 0, "float32"),
        "params": {"factor": 2.0}}
sched = pygpukit_dsp_core.Scheduler()
sid = sched.register_stream("rt", "realtime", period_ns=1_000_000, cost_ns=10_000)
disp = _native.Dispatcher(dev, sched.capsule(), spin_us=100)
e = _native.StreamEngine(dev, [gain], use_graph=False, single_stream=True, inline_submit=True)
e.attach(disp, sid)
x = np.ones((3, 16), np.float32)

def block(k):
    e.input_slot(k % e.slots)[:] = x
    e.submit(k % e.slots, 16, False)
    e.wait(k % e.slots)

for k in range(3):
    block(k)
res = {"quick": disp.stats()}
os.environ["FAKE_CUDA_LAUNCH_DELAY_US"] = "300"  # the next launch holds the dispatcher's lock 300 us
block(3)
os.environ["FAKE_CUDA_LAUNCH_DELAY_US"] = "0"
res["slow"] = disp.stats()
# the GPU's timeline: every timed block's (start, stop) after the reference event
disp.time_every = 1
disp.start_timeline()
try:
    disp.start_timeline()
except ValueError as exc:
    res["timeline_twice"] = str(exc)
for k in range(4, 9):
    block(k)
res["timeline"] = disp.stop_timeline().tolist()
block(9)
res["timeline_off"] = disp.stop_timeline().shape[0]
e.detach()
disp.close()
print(json.dumps(res))
"""


def test_a_step_that_holds_the_dispatcher_s_lock_is_counted_by_kind(fake_driver):  # noqa: F811
    res = last_json(run_python(SLOW_STEP_SCRIPT, GK_LIBCUDA=fake_driver))
    quick, slow = res["quick"], res["slow"]
    assert quick["slow_step_ns"] == 200_000 and set(quick["slow_steps"]) == {"take_posts", "poll", "decide", "launch"}
    assert quick["slow_steps"]["launch"] == 0 and quick["longest_step_ns"]["launch"] < 200_000
    assert slow["slow_steps"]["launch"] == 1 and slow["longest_step_ns"]["launch"] >= 300_000
    assert slow["slow_steps"]["take_posts"] == slow["slow_steps"]["decide"] == 0
    # every step timed: four blocks launched, each taken, decided and polled at least once
    assert slow["steps"]["launch"] == 4 and min(slow["steps"].values()) >= 4
    assert slow["step_ns"]["launch"] >= slow["longest_step_ns"]["launch"]


def test_the_dispatcher_records_the_gpu_timeline_of_timed_blocks(fake_driver):  # noqa: F811
    res = last_json(run_python(SLOW_STEP_SCRIPT, GK_LIBCUDA=fake_driver))
    tl = res["timeline"]
    assert len(tl) == 5 and all(0 <= a <= b for a, b in tl)  # blocks 4..8, after the reference
    assert [a for a, _ in tl] == sorted(a for a, _ in tl)  # one stream: in order
    assert "already on" in res["timeline_twice"]
    assert res["timeline_off"] == 0  # stopped: block 9 not recorded
