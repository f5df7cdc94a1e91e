"""The CUDA engine's mapped I/O (EngineOptions::mapped_io; docs/cuda.md, "Mapped I/O"): against the
fake driver of tests/backends/test_cuda_engine.py (CPU-only) and on a real GPU (``gpu``)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends import BackendChoice

from .test_cuda_engine import (  # noqa: F401  (fake_driver: the fixture)
    FAKE_DRIVER_SOURCE, FAKE_GRAPH_API, FAKE_MAPPED_API, RATE, TRAP_PIPELINE, _blocks, _engine, fake_driver, last_json, run_python)

# ------------------------------------------------------------------------------------------
# Mapped I/O (EngineOptions::mapped_io; docs/cuda.md, "Mapped I/O")
# ------------------------------------------------------------------------------------------

# What the fake driver needs for mapped_io: cuMemHostGetDevicePointer_v2 (the "device" address
# of fake host memory is the host address), the cuMemHostAlloc flags (counted), and device
# attribute overrides. fake_libcuda.c is compiled with cuDeviceGetAttribute and cuMemHostAlloc
# renamed to fake_base_*, which these wrappers call.



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
