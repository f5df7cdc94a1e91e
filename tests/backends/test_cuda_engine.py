"""The CUDA streaming engine (native/engine, pygpukit_dsp/backends/cuda_engine.py).

Two kinds of tests:

* CPU-only: the engine's mechanics (worker thread, hand-off, counters, final block, errors,
  close) against tests/native/fake_libcuda.c plus the graph entry points below, in a fresh
  interpreter (the driver is opened once per process). The fake driver copies memory but runs
  no kernel, so data is checked through zero-delay ops (device copies) in eager mode.
* ``gpu``: the same properties on a real GPU, with results checked against the CPU backend.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.errors import UnsupportedError
from pygpukit_dsp.signal import SignalSpec

import pygpukit_dsp

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PACKAGE_PARENT = Path(pygpukit_dsp.__file__).resolve().parents[1]
FAKE_DRIVER_SOURCE = REPO / "tests" / "native" / "fake_libcuda.c"

# What the lead's fake driver lacks for the engine: graph capture and the 2-D memset.
FAKE_GRAPH_API = r"""
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
static long g_graph_launches = 0, g_graphs_live = 0;
static long long g_launch_ns[64];  /* CLOCK_MONOTONIC of the first 64 graph launches */
long fake_cuda_graph_launches(void) { return g_graph_launches; }
long fake_cuda_graphs_live(void) { return g_graphs_live; }
long long fake_cuda_graph_launch_ns(long i) { return i >= 0 && i < 64 ? g_launch_ns[i] : -1; }
CUresult cuStreamBeginCapture_v2(void* s, int mode) { (void)s; (void)mode; return 0; }
CUresult cuStreamEndCapture(void* s, void** g) { (void)s; *g = malloc(1); return 0; }
CUresult cuGraphInstantiateWithFlags(void** e, void* g, unsigned long long f) {
    (void)g; (void)f; *e = malloc(1); __atomic_fetch_add(&g_graphs_live, 1, __ATOMIC_RELAXED); return 0; }
CUresult cuGraphLaunch(void* e, void* s) {
    (void)e; (void)s;
    long i = __atomic_fetch_add(&g_graph_launches, 1, __ATOMIC_RELAXED);
    if (i < 64) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); g_launch_ns[i] = t.tv_sec * 1000000000LL + t.tv_nsec; }
    return 0; }
CUresult cuGraphExecDestroy(void* e) { free(e); __atomic_fetch_add(&g_graphs_live, -1, __ATOMIC_RELAXED); return 0; }
CUresult cuGraphDestroy(void* g) { free(g); return 0; }
CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, void* s) {
    (void)s; for (size_t r = 0; r < h; ++r) memset((void*)(d + r * pitch), v, w); return 0; }
"""


def run_python(code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    environ = dict(os.environ)
    environ.update(env)
    # the package under test (installed or a developer build), from a cwd outside the checkout
    environ["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_PARENT)] + [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ, capture_output=True,
                          text=True, timeout=timeout, cwd=HERE.anchor)


def last_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------
# CPU-only: the engine against a fake driver
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to build the fake CUDA driver")
    from pygpukit_dsp.capabilities import capabilities

    if not capabilities()["nvrtc"]["found"]:
        pytest.skip("NVRTC is needed to compile the ops' kernels (pip install nvidia-cuda-nvrtc)")
    folder = tmp_path_factory.mktemp("fake_engine_driver")
    extra = folder / "graph_api.c"
    extra.write_text(FAKE_GRAPH_API)
    out = folder / "libcuda_fake.so.1"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(out), str(FAKE_DRIVER_SOURCE), str(extra)],
                   check=True)
    return str(out)


FAKE_SCRIPT = r"""
import ctypes, json, os, time
import numpy as np
from pygpukit_dsp import _native
from pygpukit_dsp.errors import DeviceError, GkError

fake = ctypes.CDLL(os.environ["GK_LIBCUDA"])
dev = _native.Device(0)
res = {}

def op(kind, ch, items, params, out_ch=None, name=None):
    return {"kind": kind, "name": name or kind, "in": (ch, items, 0, "float32"),
            "out": (out_ch or ch, items, 0, "float32"), "params": params}

zero = {"delays": np.zeros(3)}
gain = op("gain", 3, 16, {"factor": 2.0})

# 1. Hot path: N full blocks through captured graphs, then one final partial block (eager).
e = _native.StreamEngine(dev, [gain, op("delay", 3, 16, zero, name="d")], slots=2)
res["graphs_live"] = fake.fake_cuda_graphs_live()
launches0 = fake.fake_cuda_graph_launches()
for b in range(50):
    s = b % 2
    e.input_slot(s)[:] = b
    e.submit(s, 16)
    assert e.wait(s) == 16
res["after_50"] = e.counters()
res["driver_graph_launches"] = fake.fake_cuda_graph_launches() - launches0
e.input_slot(0)[:, :5] = 1
e.input_slot(0)[:, 5:] = 0
e.submit(0, 5, True)
res["final_n_out"] = e.wait(0)
res["after_final"] = e.counters()
e.close()
res["graphs_after_close"] = fake.fake_cuda_graphs_live()

# 2. Data through the slots (eager: the fake driver copies, it runs no kernel): a chain of
#    zero delays is a chain of device copies through the edge buffers.
chain = [op("delay", 3, 16, zero, name="a"), op("delay", 3, 16, zero, name="b")]
e = _native.StreamEngine(dev, chain, use_graph=False)
x = np.arange(48, dtype=np.float32).reshape(3, 16)
ok = True
for b in range(6):
    s = b % 2
    e.input_slot(s)[:] = x + b
    e.submit(s, 16)
    ok &= e.wait(s) == 16 and np.array_equal(e.output_slot(s), x + b)
res["data_ok"] = bool(ok)
# two slots in flight
e.input_slot(0)[:] = x
e.input_slot(1)[:] = -x
e.submit(0, 16); e.submit(1, 16)
res["inflight_ok"] = bool(e.wait(0) == 16 and e.wait(1) == 16 and np.array_equal(e.output_slot(0), x)
                          and np.array_equal(e.output_slot(1), -x))
# partial final block: the edge tail is zeroed before the next op reads it
e.input_slot(0)[:] = 0
e.input_slot(0)[:, :4] = 9
e.submit(0, 4, True)
n = e.wait(0)
res["final_tail"] = [int(n), e.output_slot(0)[:, :4].tolist() == [[9] * 4] * 3,
                     bool(np.all(e.output_slot(0)[:, 4:] == 0))]
view = e.output_slot(1)
e.close()
res["view_after_close"] = view.tolist() == (-x).tolist()  # the pinned memory outlives close()

# 2b. process(): a new array per block (a short final block's is compact); out= is filled and returned.
e = _native.StreamEngine(dev, chain, use_graph=False)
y1 = e.process(1, x + 1)
y2 = e.process(0, x + 2)                        # y1 still alive: its own memory, untouched
res["new_arrays"] = [bool(np.array_equal(y1, x + 1)), bool(np.array_equal(y2, x + 2)),
                     not np.shares_memory(y1, y2)]
y3 = e.process(1, (x + 5)[:, :6].copy(), True)
res["short_new"] = [list(y3.shape), bool(y3.flags.c_contiguous), bool(np.array_equal(y3, (x + 5)[:, :6]))]
e.reset()
out = np.full((3, 16), -1, np.float32)
r = e.process(1, x + 3, out=out)
res["out_same"] = [r is out, bool(np.array_equal(out, x + 3))]
r = e.process(0, (x + 4)[:, :5].copy(), True, out=out)
res["out_short"] = [list(r.shape), bool(np.array_equal(r, (x + 4)[:, :5])), bool(np.shares_memory(r, out)),
                    bool(np.array_equal(out[:, 5:], (x + 3)[:, 5:]))]
bad = {}
for label, o in {"shape": np.zeros((3, 5), np.float32), "dtype": np.zeros((3, 16), np.float64),
                 "strided": np.zeros((3, 32), np.float32)[:, ::2]}.items():
    try:
        e.process(1, x, out=o)
    except ValueError as exc:
        bad[label] = str(exc)
res["out_bad"] = bad
e.close()
res["after_close"] = bool(np.array_equal(y2, x + 2))  # the arrays own their memory

# 2c. fill_bytes(): an array's bytes at an offset of the slot's input (a graph's source slice)
e = _native.StreamEngine(dev, chain, use_graph=False)
e.fill_bytes(0, 16 * 4, np.arange(16, dtype=np.float32) + 100)
fb = {"row": e.input_slot(0)[1].tolist() == list(range(100, 116)),
      "rest_zero": bool(np.all(e.input_slot(0)[[0, 2]] == 0))}
e.submit(0, 16)
e.wait(0)
fb["through"] = bool(np.array_equal(e.output_slot(0)[1], np.arange(16) + 100))
e.submit(1, 16)
for label, args in {"past_end": (0, 3 * 16 * 4 - 4, np.zeros(2, np.float32)), "negative": (0, -4, np.zeros(1, np.float32)),
                    "strided": (0, 0, np.zeros(8, np.float32)[::2]), "submitted": (1, 0, np.zeros(4, np.float32)),
                    "no_slot": (7, 0, np.zeros(4, np.float32))}.items():
    try:
        e.fill_bytes(*args)
        fb[label] = None
    except ValueError as exc:
        fb[label] = str(exc)
e.wait(1)
e.close()
res["fill_bytes"] = fb

# 3. Misuse is refused with clear errors.
e = _native.StreamEngine(dev, [gain], use_graph=False)
msgs = {}
for label, fn in {"partial_not_final": lambda: e.submit(0, 3),
                  "wait_unsubmitted": lambda: e.wait(1),
                  "bad_slot": lambda: e.submit(5, 16)}.items():
    try:
        fn()
    except ValueError as exc:
        msgs[label] = str(exc)
e.submit(0, 16)
try:
    e.submit(0, 16)
except ValueError as exc:
    msgs["resubmit"] = str(exc)
e.wait(0)
res["misuse"] = msgs

# 4. A failing CUDA call on the worker surfaces from wait(), then from submit(); close() returns.
e.submit(1, 16)
e.wait(1)
os.environ["FAKE_CUDA_LAUNCH_ERROR"] = "1"
e.submit(0, 16)
try:
    e.wait(0)
    res["wait_error"] = None
except DeviceError as exc:
    res["wait_error"] = [str(exc), exc.call, exc.code_name]
try:
    e.submit(1, 16)
    res["submit_error"] = None
except DeviceError as exc:
    res["submit_error"] = str(exc)
t = time.perf_counter()
e.close()
res["close_s"] = time.perf_counter() - t
try:
    e.submit(0, 16)
except GkError as exc:
    res["closed_error"] = str(exc)
del os.environ["FAKE_CUDA_LAUNCH_ERROR"]

# 5. A capture failure (a launch fails while the graph is captured) is an error at construction.
os.environ["FAKE_CUDA_LAUNCH_ERROR"] = "1"
try:
    _native.StreamEngine(dev, [gain])
    res["capture_error"] = None
except DeviceError as exc:
    res["capture_error"] = str(exc)
del os.environ["FAKE_CUDA_LAUNCH_ERROR"]

# 6. Layout mismatch between consecutive ops.
try:
    _native.StreamEngine(dev, [gain, op("gain", 2, 16, {"factor": 1.0}, name="g2")])
except ValueError as exc:
    res["mismatch"] = str(exc)

# 7. Timing entry points run through the engine's instrument (the fake's clock is coarse: only
#    shapes and signs are checked); the engine and the module carry none of them.
from pygpukit_dsp._native import instrument
e = _native.StreamEngine(dev, [gain])
inst = instrument.EngineInstrument(e)
res["resident"] = len(inst.time_resident(5))
res["resident_block"] = len(inst.time_resident(2, np.full((3, 16), 2.0, np.float32)))
res["streamed"] = list(inst.time_streamed(7, 2))
try:
    inst.time_streamed(1, None, np.zeros((3, 5), np.float32))
    res["short_timing_block"] = None
except ValueError as exc:
    res["short_timing_block"] = str(exc)
res["engine_has"] = sorted(n for n in ("time_resident", "time_streamed", "measure_h2d_bandwidth", "pump_resident",
                                       "stop_pump", "resident", "wait_release") if hasattr(e, n))
res["module_has"] = sorted(n for n in ("RoundTripFloor", "StallProbe", "OffCpuMeter") if hasattr(_native, n))
res["instrument_engine"] = inst.engine is e
e.close()
res["live_streams"] = fake.fake_cuda_live_streams()
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def fake_results(fake_driver: str) -> dict:
    return last_json(run_python(FAKE_SCRIPT, GK_LIBCUDA=fake_driver, GK_JIT_DISK_CACHE="0"))


def test_fake_hot_path_counts_one_copy_each_way_and_one_wait_per_block(fake_results):
    assert fake_results["after_50"] == {"blocks": 50, "h2d_copies": 50, "d2h_copies": 50, "chunks": 0,
                                        "completion_waits": 50, "graph_launches": 50, "eager_blocks": 0,
                                        "device_blocks": 0, "d2d_in": 0, "d2d_out": 0}
    assert fake_results["driver_graph_launches"] == 50
    assert fake_results["graphs_live"] == 2  # one graph per slot


def test_fake_final_partial_block_runs_eagerly(fake_results):
    assert fake_results["final_n_out"] == 5
    c = fake_results["after_final"]
    assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["completion_waits"]) == (51, 51, 51, 51)
    assert c["graph_launches"] == 50 and c["eager_blocks"] == 1
    assert fake_results["graphs_after_close"] == 0


def test_fake_fill_bytes_writes_a_slice_and_refuses_what_lies_outside(fake_results):
    fb = fake_results["fill_bytes"]
    assert fb["row"] and fb["rest_zero"] and fb["through"]
    assert "lie outside the slot's 192-byte input" in fb["past_end"]
    assert "negative" in fb["negative"]
    assert "C-contiguous" in fb["strided"]
    assert "still holds a submitted block" in fb["submitted"]
    assert "does not exist" in fb["no_slot"]


def test_fake_data_moves_through_slots_and_edges(fake_results):
    assert fake_results["data_ok"]
    assert fake_results["inflight_ok"]
    n, head_ok, tail_zero = fake_results["final_tail"]
    assert n == 4 and head_ok and tail_zero
    assert fake_results["view_after_close"]


def test_fake_process_returns_new_arrays_or_fills_out(fake_results):
    assert fake_results["new_arrays"] == [True, True, True]
    assert fake_results["short_new"] == [[3, 6], True, True]
    assert fake_results["out_same"] == [True, True]
    assert fake_results["out_short"] == [[3, 5], True, True, True]
    assert set(fake_results["out_bad"]) == {"shape", "dtype", "strided"}
    assert all("full output block's shape (3, 16)" in m for m in fake_results["out_bad"].values())
    assert fake_results["after_close"]


def test_fake_misuse_is_refused(fake_results):
    m = fake_results["misuse"]
    assert "must be the final block" in m["partial_not_final"]
    assert "was not submitted" in m["wait_unsubmitted"]
    assert "does not exist" in m["bad_slot"]
    assert "still in flight" in m["resubmit"]
    assert "stage 'g2' takes (2, 16) float32 but stage 'gain' produces (3, 16) float32" in fake_results["mismatch"]


def test_fake_worker_error_surfaces_from_wait_and_submit(fake_results):
    message, call, code = fake_results["wait_error"]
    assert call == "cuLaunchKernel" and code == "CUDA_ERROR_NOT_SUPPORTED"
    # the block's first launch is the check of its input for NaN/Inf, right after the H2D copy
    assert "gk_check_finite" in message
    assert fake_results["submit_error"] == message
    assert fake_results["close_s"] < 5
    assert "closed" in fake_results["closed_error"]
    assert "cuLaunchKernel" in fake_results["capture_error"]


def test_fake_timing_and_teardown(fake_results):
    assert fake_results["resident"] == 5 and fake_results["resident_block"] == 2
    seconds, nbytes = fake_results["streamed"]
    assert seconds > 0 and nbytes == 7 * 3 * 16 * 4
    assert "full block" in fake_results["short_timing_block"]
    assert fake_results["live_streams"] == 0


def test_fake_benchmark_entry_points_are_the_instruments_only(fake_results):
    # the engine's surface serves users; measuring goes through _native.instrument
    assert fake_results["engine_has"] == [] and fake_results["module_has"] == []
    assert fake_results["instrument_engine"]


def test_missing_driver_is_a_device_error():
    code = r"""
    import json
    import numpy as np
    from pygpukit_dsp import Pipeline, stages
    from pygpukit_dsp.backends import BackendChoice
    from pygpukit_dsp.backends.cuda_engine import CudaEngine
    from pygpukit_dsp.errors import DeviceError
    p = Pipeline([stages.Gain(db=1.0)], sample_rate=48000, channels=2, block_size=64)
    out = {}
    try:
        CudaEngine(p, p.specs(), BackendChoice("cuda", "test"))
    except DeviceError as exc:
        out["engine"] = str(exc)
    try:
        p.process(np.zeros((2, 100), np.float32), backend="cuda")
    except DeviceError as exc:
        out["process"] = str(exc)
    print(json.dumps(out))
    """
    out = last_json(run_python(code, GK_LIBCUDA="/nonexistent/libcuda.so.1"))
    assert "CUDA driver not detected" in out["engine"]
    assert "CUDA driver not detected" in out["process"] and "backend 'cuda' cannot run" in out["process"]


class _Unported(stages.Gain):
    """A stage type without a CUDA lowering."""

    type = "unported_test_stage"


def test_stage_without_cuda_lowering_is_refused_before_any_block():
    from pygpukit_dsp.backends.cuda_lowering import lower_pipeline

    p = Pipeline([stages.Gain(db=1.0), _Unported(db=2.0, name="odd")], sample_rate=1000, channels=1,
                 block_size=32)
    with pytest.raises(UnsupportedError) as info:
        lower_pipeline(p, p.specs())
    assert info.value.stage == "odd" and info.value.backend == "cuda"
    assert "no CUDA implementation of 'unported_test_stage'" in info.value.reason


def test_runner_hands_blocks_over_with_submit_and_collect(monkeypatch):
    """With an engine offering submit/collect, the runner uses them (not process) and the sink
    consumes the collected view before the slot is reused."""
    from pygpukit_dsp import backends
    from pygpukit_dsp.io import NumpySink, NumpySource

    calls: list[str] = []

    class TwoSlotEngine:
        choice = BackendChoice("cuda", "test double")

        def __init__(self):
            self.slots = [np.zeros((1, 8), np.float32), np.zeros((1, 8), np.float32)]
            self.n = [0, 0]
            self.next = 0

        def submit(self, block, final=False):
            calls.append("submit")
            s = self.next
            self.next = 1 - s
            self.slots[s][:, :block.shape[1]] = 3 * block
            self.n[s] = block.shape[1]
            return s

        def collect(self, slot):
            calls.append("collect")
            return self.slots[slot][:, :self.n[slot]]  # a view, overwritten when the slot is reused

        def process(self, block, final=False):
            raise AssertionError("the runner must use submit/collect")

        def counters(self):
            return {"blocks": calls.count("collect")}

        def close(self):
            calls.append("close")

    monkeypatch.setattr(backends, "open_backend", lambda *a, **k: TwoSlotEngine())
    x = np.arange(30, dtype=np.float32).reshape(1, 30)
    sink = NumpySink()
    from pygpukit_dsp.runner import StreamRunner

    # the runner alone: Pipeline.run() would attach this "cuda" double to a real CudaDispatch
    summary = StreamRunner(Pipeline([stages.Gain(linear=3.0)], sample_rate=1000, block_size=8,
                                    source=NumpySource(array=x), sink=sink)).run()
    np.testing.assert_array_equal(sink.result(), 3 * x)
    assert calls[:4] == ["submit", "collect", "submit", "collect"] and calls[-1] == "close"
    assert summary.blocks == 4 and summary.engine_counters == {"blocks": 4}


# ------------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------------

RATE = 48000.0


def _chain(channels: int = 4, block: int = 256, qos: dict | None = None) -> Pipeline:
    rng = np.random.default_rng(5)
    return Pipeline([stages.Gain(db=-3.0), stages.Delay(samples=[0, 1, 5, 300][:channels]),
                     stages.Mix(matrix=rng.standard_normal((3, channels)))],
                    sample_rate=RATE, channels=channels, block_size=block, backend="cuda", qos=qos)


def _engine(p: Pipeline, **kw):
    from pygpukit_dsp.backends.cuda_engine import CudaEngine

    return CudaEngine(p, p.specs(), BackendChoice("cuda", "test"), **kw)


def _blocks(n: int, channels: int = 4, block: int = 256, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((channels, block)).astype(np.float32) for _ in range(n)]


@pytest.mark.gpu
def test_gpu_hot_path_counts_exactly_one_h2d_one_d2h_one_wait_per_block():
    p = _chain()
    eng = _engine(p)
    try:
        for b in _blocks(50):
            eng.process(b)
        assert eng.counters() == {"blocks": 50, "h2d_copies": 50, "d2h_copies": 50,
                                  "completion_waits": 50, "graph_launches": 50, "eager_blocks": 0, "chunks": 0,
                                  "device_blocks": 0, "d2d_in": 0, "d2d_out": 0}
        eng.process(_blocks(1)[0][:, :100], final=True)
        c = eng.counters()
        assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["completion_waits"]) == (51, 51, 51, 51)
        assert c["graph_launches"] == 50 and c["eager_blocks"] == 1
    finally:
        eng.close()


@pytest.mark.gpu
@pytest.mark.parametrize("use_graph", [True, False])
def test_gpu_latency_mode_counts_one_copy_each_way_and_one_wait_per_block(use_graph):
    p = _chain()
    eng = _engine(p, single_stream=True, use_graph=use_graph)
    try:
        for b in _blocks(40):
            eng.process(b)
        c = eng.counters()
        assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["completion_waits"]) == (40, 40, 40, 40)
        assert c["graph_launches"] == (40 if use_graph else 0)
    finally:
        eng.close()


@pytest.mark.gpu
def test_gpu_latency_mode_equals_three_stream_mode_and_view_api():
    p = _chain()
    blocks = _blocks(12) + [_blocks(1, seed=3)[0][:, :77]]
    outs = {}
    for single in (True, False):
        eng = _engine(p, single_stream=single)
        try:
            got = [eng.process(b, final=(i == len(blocks) - 1)) for i, b in enumerate(blocks)]
            eng.reset()
            via_views = [np.array(eng.collect(eng.submit(b, final=(i == len(blocks) - 1))))
                         for i, b in enumerate(blocks)]
        finally:
            eng.close()
        for a, b in zip(got, via_views):
            np.testing.assert_array_equal(a, b)
        outs[single] = np.concatenate(got, axis=1)
    np.testing.assert_array_equal(outs[True], outs[False])
    assert outs[True].shape == (3, 12 * 256 + 77)


@pytest.mark.gpu
def test_gpu_realtime_qos_selects_latency_mode():
    eng = _engine(_chain(qos={"class": "realtime"}))
    try:
        # latency mode: one stream, mapped I/O, one graph per slot (pull, ops, push)
        assert eng.native.single_stream is True and eng.native.mapped_io is True
        assert eng.native.use_graph is True and eng.native.inline_submit is True
        # a realtime caller spins through its deadline (one block period here), capped
        assert eng.native.spin_us == int(min(5000, max(200, 256 / RATE * 1e6)))
    finally:
        eng.close()
    eng = _engine(_chain())
    try:
        assert eng.native.spin_us == 200
        assert eng.native.single_stream is False and eng.native.use_graph is True
    finally:
        eng.close()


@pytest.mark.gpu
def test_gpu_engine_output_equals_cpu_backend_with_partial_final_block():
    p = _chain()
    x = np.random.default_rng(9).standard_normal((4, 256 * 7 + 77)).astype(np.float32)
    y = p.process(x, backend="cuda")
    ref = p.process(x, backend="cpu")
    assert y.shape == ref.shape == (3, x.shape[1])
    # float32 mix sums in a different order: relative error, stated bound 1e-5
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-5


@pytest.mark.gpu
def test_gpu_graph_and_eager_give_identical_output():
    blocks = _blocks(12)
    outs = []
    for use_graph in (True, False):
        eng = _engine(_chain(), use_graph=use_graph)
        try:
            outs.append(np.concatenate([eng.process(b) for b in blocks] +
                                       [eng.process(blocks[0][:, :31], final=True)], axis=1))
            counters = eng.counters()
        finally:
            eng.close()
        assert counters["graph_launches"] == (12 if use_graph else 0)
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.gpu
def test_gpu_two_slots_in_flight_equal_one_at_a_time():
    blocks = _blocks(20, seed=3)
    eng = _engine(_chain())
    try:
        one_at_a_time = [eng.process(b) for b in blocks]
        eng.reset()
        pipelined = []
        pending = [eng.submit(blocks[0]), eng.submit(blocks[1])]
        for i in range(2, len(blocks) + 2):
            pipelined.append(np.array(eng.collect(pending.pop(0))))
            if i < len(blocks):
                pending.append(eng.submit(blocks[i]))
    finally:
        eng.close()
    for a, b in zip(one_at_a_time, pipelined):
        np.testing.assert_array_equal(a, b)


@pytest.mark.gpu
def test_gpu_reset_restores_the_initial_state():
    blocks = _blocks(5, seed=4)
    eng = _engine(_chain())
    try:
        first = [eng.process(b) for b in blocks]
        eng.reset()
        second = [eng.process(b) for b in blocks]
    finally:
        eng.close()
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], first[1])  # the delay line carried state between blocks


@pytest.mark.gpu
def test_gpu_realtime_qos_gets_the_highest_stream_priority():
    eng = _engine(_chain(qos={"class": "realtime"}))
    try:
        assert eng.priority == eng.device.highest_stream_priority
        assert eng.native.priority == eng.device.highest_stream_priority
    finally:
        eng.close()
    eng = _engine(_chain())
    try:
        assert eng.priority == 0
    finally:
        eng.close()


# A kernel stage that traps on the value 12345 (run in a subprocess: a trap poisons the context).
TRAP_PIPELINE = r"""
    import json, time
    import numpy as np
    from pygpukit_dsp import Pipeline, stages
    from pygpukit_dsp.backends import BackendChoice
    from pygpukit_dsp.backends.cuda_engine import CudaEngine
    from pygpukit_dsp.errors import DeviceError
    src = '''
    extern "C" __global__ void trap_on_magic(const float* in, float* out, long long channels,
                                             long long items, long long row_in, long long row_out) {
        long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
        if (i >= channels * row_out) return;
        if (in[i] == 12345.0f) __trap();
        out[i] = in[i];
    }
    '''
    p = Pipeline([stages.Kernel(name="trap", entry="trap_on_magic", source=src)], sample_rate=1000,
                 channels=2, block_size=64)
"""


@pytest.mark.gpu
def test_gpu_failing_kernel_surfaces_from_wait_and_close_does_not_hang():
    # A trapped kernel poisons the CUDA context for the whole process: run it in its own.
    code = TRAP_PIPELINE + r"""
    eng = CudaEngine(p, p.specs(), BackendChoice("cuda", "test"))
    out = {}
    x = np.ones((2, 64), np.float32)
    out["ok_block"] = bool(np.array_equal(eng.process(x), x))
    x[1, 7] = 12345.0
    slot = eng.submit(x)
    try:
        eng.collect(slot)
    except DeviceError as exc:
        out["wait"] = str(exc)
    try:
        eng.submit(np.ones((2, 64), np.float32))
    except DeviceError as exc:
        out["submit"] = str(exc)
    t = time.perf_counter()
    eng.close()
    out["close_s"] = time.perf_counter() - t
    print(json.dumps(out))
    """
    out = last_json(run_python(code, timeout=120))
    assert out["ok_block"]
    assert "CUDA_ERROR_" in out["wait"] and "'trap'" in out["wait"], out["wait"]
    assert out["submit"] == out["wait"]
    assert out["close_s"] < 10


@pytest.mark.gpu
def test_gpu_cuda_backend_refuses_an_unported_stage_before_any_block():
    p = Pipeline([stages.Gain(db=1.0), _Unported(db=2.0, name="odd")], sample_rate=1000, channels=1,
                 block_size=32, backend="cuda")
    with pytest.raises(UnsupportedError) as info:
        p.process(np.zeros((1, 100), np.float32))
    assert info.value.stage == "odd"


@pytest.mark.gpu
def test_gpu_timing_entry_points_return_positive_numbers():
    eng = _engine(_chain())
    try:
        inst = eng.instrument()
        assert eng.instrument() is inst  # made once
        resident = inst.time_resident(20, block=_blocks(1)[0])
        assert len(resident) == 20 and all(t > 0 for t in resident)
        seconds, nbytes = inst.time_streamed(10)
        assert seconds > 0 and nbytes == 10 * 4 * 256 * 4
        assert inst.measure_h2d_bandwidth(1 << 24, repeats=5) > 1e9
        # the timing runs leave the stream state reset: output equals a fresh engine's
        first = eng.process(_blocks(1, seed=8)[0])
    finally:
        eng.close()
    fresh = _engine(_chain())
    try:
        np.testing.assert_array_equal(first, fresh.process(_blocks(1, seed=8)[0]))
    finally:
        fresh.close()


@pytest.mark.gpu
def test_gpu_runner_streams_through_pinned_views_like_the_cpu_backend():
    from pygpukit_dsp.io import NumpySink, NumpySource

    x = np.random.default_rng(11).standard_normal((4, 256 * 9 + 10)).astype(np.float32)
    results = {}
    for backend in ("cuda", "cpu"):
        p = _chain()
        p.source, p.sink = NumpySource(array=x), NumpySink()
        summary = p.run(backend=backend)
        results[backend] = p.sink.result()
        if backend == "cuda":
            assert summary.backend == "cuda"
            assert summary.engine_counters["h2d_copies"] == summary.blocks == 10
    ref = results["cpu"]
    assert np.linalg.norm(results["cuda"] - ref) / np.linalg.norm(ref) < 1e-5


@pytest.mark.gpu
def test_gpu_engine_view_api_is_zero_copy_and_bounded_by_the_slot():
    eng = _engine(_chain())
    try:
        block = _blocks(1)[0]
        view = eng.collect(eng.submit(block))
        assert view.base is not None and not view.flags.owndata  # a view of pinned memory
        expected = np.array(view)
        eng.submit(block)  # the other slot: the first view stays valid
        np.testing.assert_array_equal(view, expected)
        eng.submit(block)  # slot 0 again: its view now belongs to the new block
        with pytest.raises(ValueError, match="uncollected"):
            eng.submit(block)  # both slots hold uncollected blocks
    finally:
        eng.close()


def test_frames_input_spec_shapes_are_checked_by_the_wrapper():
    """The wrapper refuses blocks that do not fit the input layout (no GPU needed: checked first)."""
    from pygpukit_dsp.backends.cuda_engine import CudaEngine

    eng = CudaEngine.__new__(CudaEngine)
    eng._closed = False
    eng._in_shape = (2, 8, 5)
    eng._items = 8
    with pytest.raises(ValueError, match="does not fit"):
        eng._fill(np.zeros((2, 8, 4), np.float32), False)
    with pytest.raises(ValueError, match="must be the final block"):
        eng._fill(np.zeros((2, 3, 5), np.float32), False)
    assert SignalSpec(1.0, 2, 8, "float32", "frames", 5).block_shape == eng._in_shape


# What the fake driver needs for mapped_io (the tests: test_cuda_engine_mapped_io.py; the benchmarks'
# fake driver: tests/benchmarks/conftest.py).
FAKE_MAPPED_API = r"""
#include <stdint.h>
#include <stdlib.h>
#undef cuDeviceGetAttribute
#undef cuMemHostAlloc
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
CUresult fake_base_cuDeviceGetAttribute(int* value, int attribute, int dev);
CUresult fake_base_cuMemHostAlloc(void** p, size_t n, unsigned flags);
static long g_mapped_host_allocs = 0;
long fake_cuda_mapped_host_allocs(void) { return g_mapped_host_allocs; }
/* FAKE_CUDA_ATTRS="19=0,41=0": attribute -> value overrides. */
CUresult cuDeviceGetAttribute(int* value, int attribute, int dev) {
    const char* spec = getenv("FAKE_CUDA_ATTRS");
    while (spec && *spec) {
        char* end;
        long a = strtol(spec, &end, 10);
        if (*end != '=') break;
        long v = strtol(end + 1, &end, 10);
        if (a == attribute) { *value = (int)v; return 0; }
        spec = *end == ',' ? end + 1 : end;
    }
    return fake_base_cuDeviceGetAttribute(value, attribute, dev);
}
CUresult cuMemHostAlloc(void** p, size_t n, unsigned flags) {
    CUresult r = fake_base_cuMemHostAlloc(p, n, flags);
    if (r == 0 && (flags & 0x02)) __atomic_fetch_add(&g_mapped_host_allocs, 1, __ATOMIC_RELAXED); /* DEVICEMAP */
    return r;
}
"""
