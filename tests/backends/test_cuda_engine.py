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


# ------------------------------------------------------------------------------------------
# Mapped I/O (EngineOptions::mapped_io; docs/cuda.md, "Mapped I/O")
# ------------------------------------------------------------------------------------------

# What the fake driver needs for mapped_io: cuMemHostGetDevicePointer_v2 (the "device" address
# of fake host memory is the host address), the cuMemHostAlloc flags (counted), and device
# attribute overrides. fake_libcuda.c is compiled with cuDeviceGetAttribute and cuMemHostAlloc
# renamed to fake_base_*, which these wrappers call.
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


@pytest.fixture(scope="module")
def fake_mapped_driver(fake_driver: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    folder = tmp_path_factory.mktemp("fake_mapped_driver")
    (folder / "graph_api.c").write_text(FAKE_GRAPH_API)
    (folder / "mapped_api.c").write_text(FAKE_MAPPED_API)
    out = folder / "libcuda_fake.so.1"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-DcuDeviceGetAttribute=fake_base_cuDeviceGetAttribute",
                    "-DcuMemHostAlloc=fake_base_cuMemHostAlloc", "-o", str(out), str(FAKE_DRIVER_SOURCE),
                    str(folder / "graph_api.c"), str(folder / "mapped_api.c")], check=True)
    return str(out)


FAKE_MAPPED_SCRIPT = r"""
import ctypes, json, os, time
import numpy as np
from pygpukit_dsp import _native
from pygpukit_dsp.errors import DeviceError

fake = ctypes.CDLL(os.environ["GK_LIBCUDA"])
dev = _native.Device(0)
res = {}
gain = {"kind": "gain", "name": "g", "in": (3, 16, 0, "float32"), "out": (3, 16, 0, "float32"),
        "params": {"factor": 2.0}}

# 1. Option combinations that cannot work are refused before anything is allocated.
for label, kw in {"mapped_without_single": {"mapped_io": True}}.items():
    try:
        _native.StreamEngine(dev, [gain], use_graph=False, **kw)
        res[label] = None
    except ValueError as exc:
        res[label] = str(exc)

# 2. A GPU that cannot map host memory, or has no unified addressing: DeviceError at build.
for label, attrs in {"no_map": "19=0", "no_uva": "41=0"}.items():
    os.environ["FAKE_CUDA_ATTRS"] = attrs
    try:
        _native.StreamEngine(dev, [gain], use_graph=False, single_stream=True, mapped_io=True)
        res[label] = None
    except DeviceError as exc:
        res[label] = str(exc)
    del os.environ["FAKE_CUDA_ATTRS"]
res["live_after_refusals"] = [fake.fake_cuda_live_streams(), fake.fake_cuda_live_host_allocs()]

# 3. Every mode: one H2D, one D2H, one wait per block (inline process(), the worker's
#    submit/wait, a final partial block); the push kernel gets the slot's mapped output.
os.environ["FAKE_CUDA_PARAM_COUNT"] = "3"  # the fake reads this many: pull has 6, gain 4, push 3
def param(i):
    b = (ctypes.c_ubyte * 8)()
    fake.fake_cuda_last_param(i, b)
    return int.from_bytes(bytes(b), "little")
x = np.ones((3, 16), np.float32)
for graph in (False, True):
    mapped0 = fake.fake_cuda_mapped_host_allocs()
    e = _native.StreamEngine(dev, [gain], slots=2, single_stream=True, use_graph=graph,
                             inline_submit=True, mapped_io=True, spin_us=20)
    r = {"props": [e.mapped_io],
         "mapped_allocs": fake.fake_cuda_mapped_host_allocs() - mapped0}
    launches0, graphs0 = fake.fake_cuda_launches(), fake.fake_cuda_graph_launches()
    t = time.perf_counter()
    for b in range(6):
        e.process(b % 2, x)                   # inline
    for b in range(4):
        e.input_slot(b % 2)[:] = 1
        e.submit(b % 2, 16)
        e.wait(b % 2)                         # the worker
    e.submit(0, 16); e.submit(1, 16); e.wait(0); e.wait(1)   # two in flight
    r["seconds"] = time.perf_counter() - t
    r["full"] = [e.counters(), fake.fake_cuda_launches() - launches0,
                 fake.fake_cuda_graph_launches() - graphs0]
    if not graph:
        r["push"] = [param(0) == e.output_slot(1).ctypes.data, param(2), fake.fake_cuda_last_dim(0),
                     fake.fake_cuda_last_dim(3)]
    launches0 = fake.fake_cuda_launches()
    y = e.process(0, np.ascontiguousarray(x[:, :5]), True)
    r["final"] = [list(y.shape), e.counters(), fake.fake_cuda_launches() - launches0]
    r["final_push_to_slot0"] = param(0) == e.output_slot(0).ctypes.data
    e.close()
    res[f"graph={int(graph)}"] = r
del os.environ["FAKE_CUDA_PARAM_COUNT"]
e = _native.StreamEngine(dev, [gain], use_graph=False)
res["default"] = [e.mapped_io, hasattr(e, "flag_wait"), hasattr(e, "overlap_fill")]
e.close()
for removed in ("flag_wait", "overlap_fill"):  # the experiments are gone from the engine's options
    try:
        _native.StreamEngine(dev, [gain], single_stream=True, mapped_io=True, **{removed: True})
        res[f"removed_{removed}"] = None
    except TypeError as exc:
        res[f"removed_{removed}"] = "incompatible" in str(exc)
# the prewarm's GPU side (an event, a graph per slot) is the instrument's: an engine opened alone
# makes none; the instrument makes it (not the first prewarm, which could race close()); a paced
# block makes nothing more; every event goes with close()
from pygpukit_dsp._native import instrument
events0, graphs0 = fake.fake_cuda_live_events(), fake.fake_cuda_graphs_live()
e = _native.StreamEngine(dev, [gain], single_stream=True, use_graph=True, inline_submit=True, mapped_io=True)
opened, opened_graphs = fake.fake_cuda_live_events(), fake.fake_cuda_graphs_live()
inst = instrument.EngineInstrument(e)
made, made_graphs = fake.fake_cuda_live_events(), fake.fake_cuda_graphs_live()
inst.process(0, x, False, None, time.perf_counter_ns() + 1_000_000, 300, True)
res["prewarm_events"] = [made - opened, made_graphs - opened_graphs, fake.fake_cuda_live_events() - made,
                         opened > events0]
instrument.EngineInstrument(e)  # a second instrument of the same engine makes nothing again
res["prewarm_events"].append(fake.fake_cuda_live_events() - made)
e.close()
res["prewarm_events"].append(fake.fake_cuda_live_events() - events0)
# set_gpu_timing (admission's calibration): blocks run inline and by the worker get their GPU time
# (the fake's events: host time between the two records) and their launch's host time
events0 = fake.fake_cuda_live_events()
e = _native.StreamEngine(dev, [gain], slots=2, single_stream=True, use_graph=True, inline_submit=True,
                         mapped_io=True)
opened = fake.fake_cuda_live_events()
e.process(0, x, False)
g = {"before": [e.last_gpu_ns, e.last_launch_ns]}
e.set_gpu_timing(True)
g["events"] = fake.fake_cuda_live_events() - opened
e.set_trace(4)
e.process(0, x, False)
g["inline"] = [e.last_gpu_ns > 0, e.last_launch_ns > 0, int(e.trace()[-1][6]) == e.last_gpu_ns]
e.input_slot(1)[:] = 1
e.submit(1, 16); e.wait(1)
g["worker"] = e.last_gpu_ns > 0
e.set_gpu_timing(False)
g["off"] = [e.last_gpu_ns, e.last_launch_ns]
e.process(0, x, False)
g["off_after"] = [e.last_gpu_ns, int(e.trace()[-1][6])]
e.close()
g["freed"] = fake.fake_cuda_live_events() - events0
res["gpu_timing"] = g

# 4. A failing push launch surfaces as a DeviceError naming the kernel.
e = _native.StreamEngine(dev, [gain], use_graph=False, single_stream=True, mapped_io=True)
os.environ["FAKE_CUDA_LAUNCH_ERROR"] = "1"
try:
    e.process(0, x)
    res["launch_error"] = None
except DeviceError as exc:
    res["launch_error"] = [str(exc), exc.call]
del os.environ["FAKE_CUDA_LAUNCH_ERROR"]
e.close()
res["live_at_end"] = [fake.fake_cuda_live_streams(), fake.fake_cuda_graphs_live()]

# 5. CudaEngine(mapped_io=True) is a latency-mode engine unless told otherwise.
from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.backends.cuda_engine import CudaEngine
p = Pipeline([stages.Gain(db=1.0)], sample_rate=1000, channels=2, block_size=64)
eng = CudaEngine(p, p.specs(), BackendChoice("cuda", "test"), mapped_io=True, spin_us=20)
raw = eng.native
res["wrapper"] = [raw.single_stream, raw.mapped_io, raw.use_graph, raw.inline_submit]
eng.process(np.zeros((2, 64), np.float32))
res["wrapper_counters"] = eng.counters()
# the measuring apparatus, opt-in: one instrument per engine, on the native engine it wraps
inst = eng.instrument()
res["instrument"] = [eng.instrument() is inst, inst.engine is raw, type(inst).__module__]
eng.process(np.zeros((2, 64), np.float32))  # the engine runs as before beside it
eng.close()
from pygpukit_dsp.errors import StreamFault
res["after_close"] = []
for what in ("instrument", "native"):
    try:
        getattr(eng, what)() if what == "instrument" else eng.native
        res["after_close"].append(None)
    except StreamFault:
        res["after_close"].append(what)
try:
    CudaEngine(p, p.specs(), BackendChoice("cuda", "test"), mapped_io=True, single_stream=False)
    res["wrapper_refusal"] = None
except ValueError as exc:
    res["wrapper_refusal"] = str(exc)
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def fake_mapped_results(fake_mapped_driver: str) -> dict:
    return last_json(run_python(FAKE_MAPPED_SCRIPT, GK_LIBCUDA=fake_mapped_driver, GK_JIT_DISK_CACHE="0"))


def test_fake_mapped_io_refuses_option_combinations_that_cannot_work(fake_mapped_results):
    assert "mapped_io needs single_stream=True" in fake_mapped_results["mapped_without_single"]
    assert "mapped_io needs single_stream=True" in fake_mapped_results["wrapper_refusal"]
    # the removed experiments are unknown options now
    assert fake_mapped_results["removed_flag_wait"] and fake_mapped_results["removed_overlap_fill"]


def test_fake_the_prewarm_is_made_by_the_instrument_and_freed_on_close(fake_mapped_results):
    # the instrument made the event and one graph per slot (two); a paced block with prewarm made
    # nothing; the engine's own open made events (its ordering events); a second instrument
    # makes nothing again; close freed every one
    assert fake_mapped_results["prewarm_events"] == [1, 2, 0, True, 0, 0]


def test_fake_gpu_timing_times_inline_and_worker_blocks_and_stops_when_off(fake_mapped_results):
    g = fake_mapped_results["gpu_timing"]
    assert g["before"] == [0, 0]           # off by default: nothing timed
    assert g["events"] == 4                # a timing pair per slot, made when turned on
    assert g["inline"] == [True, True, True]  # and the trace's gpu_ns column carries it
    assert g["worker"]
    assert g["off"] == [0, 0] and g["off_after"] == [0, 0]
    assert g["freed"] == 0                 # close() freed them


def test_fake_mapped_io_refuses_a_gpu_that_cannot_map_host_memory(fake_mapped_results):
    assert "GPU 0 (Fake GPU) cannot map host memory (CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 0)" \
        in fake_mapped_results["no_map"]
    assert "mapped_io=False" in fake_mapped_results["no_map"]
    assert "no unified addressing (CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 0)" in fake_mapped_results["no_uva"]
    assert fake_mapped_results["live_after_refusals"] == [0, 0]  # nothing leaked


@pytest.mark.parametrize("graph", [0, 1])
def test_fake_mapped_io_counts_one_transfer_each_way_and_one_wait_per_block(fake_mapped_results, graph):
    r = fake_mapped_results[f"graph={graph}"]
    assert r["props"] == [True]
    # both slots' input and output, and the input check's flag words
    assert r["mapped_allocs"] == 2 * 2 + 1
    counters, launches, graph_launches = r["full"]
    keys = ("blocks", "h2d_copies", "d2h_copies", "completion_waits", "graph_launches", "eager_blocks")
    assert [counters[k] for k in keys] == [12, 12, 12, 12, 12 * graph, 12 * (1 - graph)]
    # eager: pull, gain, push per block; graph: the three kernels are in the slot's block graph
    assert (launches, graph_launches) == ((0, 12) if graph else (36, 0))
    assert r["seconds"] < 5
    shape, after, final_launches = r["final"]
    assert shape == [3, 5] and final_launches == 3  # the final block runs eagerly: pull, gain, push
    assert (after["blocks"], after["h2d_copies"], after["d2h_copies"], after["completion_waits"]) == (13,) * 4
    assert r["final_push_to_slot0"]


def test_fake_mapped_io_push_kernel_writes_the_slots_mapped_output(fake_mapped_results):
    to_slot1, nbytes, grid, threads = fake_mapped_results["graph=0"]["push"]
    assert to_slot1 and nbytes == 3 * 16 * 4
    assert (grid, threads) == (1, 128)


def test_fake_mapped_io_errors_and_teardown(fake_mapped_results):
    message, call = fake_mapped_results["launch_error"]
    assert call == "cuLaunchKernel" and "gk_io_pull" in message
    assert fake_mapped_results["live_at_end"] == [0, 0]
    assert fake_mapped_results["default"] == [False, False, False]


def test_fake_the_wrapper_hands_out_one_instrument_and_the_native_engine_while_open(fake_mapped_results):
    assert fake_mapped_results["instrument"] == [True, True, "pygpukit_dsp._native.instrument"]
    assert fake_mapped_results["after_close"] == ["instrument", "native"]  # StreamFault once closed


def test_fake_mapped_io_wrapper_implies_latency_mode(fake_mapped_results):
    # mapped_io implies latency mode, replayed as a graph (the measured best for W1)
    assert fake_mapped_results["wrapper"] == [True, True, True, True]
    c = fake_mapped_results["wrapper_counters"]
    assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["completion_waits"]) == (1, 1, 1, 1)


def test_fake_mapped_io_needs_the_drivers_host_pointer_entry_point(tmp_path):
    # every engine maps a word per slot for its input check; mapped_io asks first and says so
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to build the fake CUDA driver")
    (tmp_path / "graph_api.c").write_text(FAKE_GRAPH_API)
    driver = tmp_path / "libcuda_fake.so.1"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-DFAKE_NO_HOST_POINTER", "-o", str(driver),
                    str(FAKE_DRIVER_SOURCE), str(tmp_path / "graph_api.c")], check=True)
    fake_driver = str(driver)
    code = r"""
    import json, numpy as np
    from pygpukit_dsp import _native
    from pygpukit_dsp.errors import DeviceError
    gain = {"kind": "gain", "name": "g", "in": (1, 8, 0, "float32"), "out": (1, 8, 0, "float32"),
            "params": {"factor": 2.0}}
    try:
        _native.StreamEngine(_native.Device(0), [gain], single_stream=True, mapped_io=True)
        print(json.dumps(None))
    except DeviceError as exc:
        print(json.dumps(str(exc)))
    """
    message = last_json(run_python(code, GK_LIBCUDA=fake_driver, GK_JIT_DISK_CACHE="0"))
    assert "no cuMemHostGetDevicePointer_v2" in message and "mapped_io=False" in message


def test_the_io_kernels_are_embedded_and_compile():
    from pygpukit_dsp import _native
    from pygpukit_dsp.capabilities import capabilities

    if not capabilities()["nvrtc"]["found"]:
        pytest.skip("NVRTC is needed to compile the io kernels (pip install nvidia-cuda-nvrtc)")
    assert "io" in _native.embedded_kernels()
    for arch in ("sm_80", "sm_90"):
        cubin = _native.compile_embedded("io", arch).cubin
        assert b"gk_io_pull" in cubin and b"gk_io_push" in cubin


# GPU: outputs equal the CPU backend and, bit for bit, the same engine without mapped I/O.



def _w1_like() -> Pipeline:
    """W1's shapes: fir 256 taps -> mix 16 x 64, 64 channels x 256 float32 (fused into fir_mix)."""
    rng = np.random.default_rng(21)
    return Pipeline([stages.Fir(taps=rng.standard_normal(256) / 16), stages.Mix(matrix=rng.standard_normal((16, 64)))],
                    sample_rate=RATE, channels=64, block_size=256)


def _complex_chain() -> Pipeline:
    """complex64 through fir (complex taps) -> mix 3 x 5 -> gain; 8-byte items, odd row bytes."""
    rng = np.random.default_rng(22)
    taps = (rng.standard_normal(31) + 1j * rng.standard_normal(31)) / 8
    return Pipeline([stages.Fir(taps=taps), stages.Mix(matrix=rng.standard_normal((3, 5))), stages.Gain(db=-2.0)],
                    sample_rate=RATE, channels=5, block_size=100, dtype="complex64")


def _odd_bytes_chain() -> Pipeline:
    """3 x 5 float32 in (60 bytes: 3 vectors + a 12-byte tail), 1 x 5 out (20 bytes)."""
    return Pipeline([stages.Gain(db=3.0), stages.Mix(matrix=[[0.5, -1.0, 2.0]])], sample_rate=RATE, channels=3,
                    block_size=5)


def _mapped_signal(p: Pipeline, blocks: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = p.block_size * blocks + 3  # a partial final block
    x = rng.standard_normal((p.channels, n))
    if p.dtype == "complex64":
        return (x + 1j * rng.standard_normal(x.shape)).astype(np.complex64)
    return x.astype(np.float32)


def _run_engine(p: Pipeline, x: np.ndarray, **kw) -> tuple[np.ndarray, dict]:
    eng = _engine(p, **kw)
    try:
        b, n = p.block_size, x.shape[1]
        y = np.concatenate([eng.process(x[:, s:s + b], final=s + b >= n) for s in range(0, n, b)], axis=1)
        return y, eng.counters()
    finally:
        eng.close()


@pytest.mark.gpu
@pytest.mark.parametrize("use_graph", [False, True])
@pytest.mark.parametrize("make", [_w1_like, _complex_chain, _odd_bytes_chain])
def test_gpu_mapped_io_equals_cpu_backend_and_copies(make, use_graph):
    p = make()
    blocks = 9
    x = _mapped_signal(p, blocks, seed=31)
    ref = p.process(x, backend="cpu")
    plain, _ = _run_engine(p, x, single_stream=True, use_graph=use_graph)
    got, c = _run_engine(p, x, single_stream=True, use_graph=use_graph, mapped_io=True)
    assert got.shape == ref.shape and got.dtype == ref.dtype
    # float32 sums in another order than the CPU backend: relative error bound 1e-5
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-5
    np.testing.assert_array_equal(got, plain)  # the same ops: the transfer itself is exact
    total = blocks + 1
    assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["completion_waits"]) == (total,) * 4
    assert c["graph_launches"] == (blocks if use_graph else 0)
    assert c["eager_blocks"] == (1 if use_graph else total)


@pytest.mark.gpu
def test_gpu_direct_output_drops_the_push_kernel_and_keeps_the_output():
    p = _w1_like()  # fused into fir_mix, which writes each output element once
    x = _mapped_signal(p, 9, seed=33)
    kw = {"single_stream": True, "use_graph": True, "mapped_io": True}
    direct, c = _run_engine(p, x, **kw)
    pushed, _ = _run_engine(p, x, **kw, direct_output=False)
    np.testing.assert_array_equal(direct, pushed)
    assert (c["blocks"], c["h2d_copies"], c["d2h_copies"]) == (10, 10, 10)  # the op's stores are the D2H
    # only block graphs of mapped I/O whose last op writes its output once
    for make, extra, on in [(_w1_like, {}, True), (_w1_like, {"direct_output": False}, False),
                            (_w1_like, {"use_graph": False}, False), (_complex_chain, {}, False)]:
        eng = _engine(make(), **{**kw, **extra})
        try:
            assert eng.native.direct_output is on, (make.__name__, extra)
        finally:
            eng.close()


@pytest.mark.gpu
def test_gpu_mapped_io_two_slots_in_flight_equal_one_at_a_time():
    p = _w1_like()
    rng = np.random.default_rng(32)
    blocks = [rng.standard_normal((64, 256)).astype(np.float32) for _ in range(16)]
    eng = _engine(p, single_stream=True, mapped_io=True)
    try:
        one_at_a_time = [eng.process(b) for b in blocks]
        eng.reset()
        pipelined = []
        pending = [eng.submit(blocks[0]), eng.submit(blocks[1])]
        for i in range(2, len(blocks) + 2):
            pipelined.append(np.array(eng.collect(pending.pop(0))))
            if i < len(blocks):
                pending.append(eng.submit(blocks[i]))
        c = eng.counters()
    finally:
        eng.close()
    for a, b in zip(one_at_a_time, pipelined):
        np.testing.assert_array_equal(a, b)
    assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["completion_waits"]) == (32,) * 4


@pytest.mark.gpu
def test_gpu_mapped_io_failing_kernel_raises_instead_of_hanging():
    # A trapped kernel poisons the CUDA context for the whole process: run it in its own.
    code = TRAP_PIPELINE + r"""
    eng = CudaEngine(p, p.specs(), BackendChoice("cuda", "test"), mapped_io=True)
    out = {"inline": eng.native.inline_submit}
    x = np.ones((2, 64), np.float32)
    out["ok_block"] = bool(np.array_equal(eng.process(x), x))
    x[1, 7] = 12345.0
    t = time.perf_counter()
    try:
        eng.process(x)
    except DeviceError as exc:
        out["process"] = str(exc)
    out["error_s"] = time.perf_counter() - t
    t = time.perf_counter()
    eng.close()
    out["close_s"] = time.perf_counter() - t
    print(json.dumps(out))
    """
    out = last_json(run_python(code, timeout=120))
    assert out["inline"] is True and out["ok_block"]
    assert "CUDA_ERROR_" in out["process"], out["process"]
    assert out["error_s"] < 10 and out["close_s"] < 10


@pytest.mark.gpu
@pytest.mark.parametrize("kw", [{}, {"mapped_io": True}], ids=["worker", "inline-mapped"])
def test_gpu_process_into_out_equals_a_new_array_over_blocks(kw):
    p = _w1_like()
    xs = _blocks(4, channels=64, seed=9)
    a, b = _engine(p, **kw), _engine(p, **kw)
    try:
        out = np.empty((16, 256), np.float32)
        for x in xs:
            y = a.process(x)
            assert b.process(x, out=out) is out and np.array_equal(out, y)
        short = xs[0][:, :100].copy()
        y = a.process(short, final=True)
        r = b.process(short, final=True, out=out)
        assert y.shape == r.shape == (16, 100) and np.shares_memory(r, out) and np.array_equal(r, y)
        with pytest.raises(ValueError, match=r"full output block's shape \(16, 256\)"):
            b.process(xs[0], out=np.empty((16, 100), np.float32))
    finally:
        a.close()
        b.close()


@pytest.mark.gpu
@pytest.mark.parametrize("kw", [{}, {"mapped_io": True}], ids=["worker", "inline-mapped"])
def test_gpu_block_trace_breaks_process_latency_into_phases(kw):
    import time

    from pygpukit_dsp.bench.trace import breakdown
    from pygpukit_dsp.errors import StreamFault

    eng = _engine(_w1_like(), **kw)
    try:
        with pytest.raises(ValueError, match=">= 0"):
            eng.set_trace(-1)
        x = np.random.default_rng(4).standard_normal((64, 256)).astype(np.float32)
        eng.set_trace(50)
        starts, ends = [], []
        for _ in range(50):
            starts.append(time.perf_counter_ns())
            eng.process(x)
            ends.append(time.perf_counter_ns())
        tr = eng.block_trace()
        assert len(tr["call"]) == 50 and (tr["scheduled"] == 0).all()
        b = breakdown(tr, np.array(starts), np.array(ends))  # refuses stamps outside their calls
        assert all(ph.p50_us >= 0 for ph in b.phases)
        assert b.phases[4].p50_us > 1.0  # the GPU part of a fir 256 + mix block is micro-seconds
        assert sum(ph.p50_us for ph in b.phases) <= b.total.p99_us * 2
        assert (tr["woke"] <= tr["copied"]).all() and (tr["copied"] > 0).all()  # the copy out, natively
    finally:
        eng.close()
    with pytest.raises(StreamFault):
        eng.block_trace()
