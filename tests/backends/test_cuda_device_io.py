"""Device blocks on the cuda backend: GPU arrays in and out with no host copy
(native/engine/device_io.cpp, pygpukit_dsp/backends/cuda_device_io.py).

CPU-only: the native path and CudaEngine against the fake driver (its "device memory" is host
memory and its copies are memcpy; it runs no kernel, so the data checks use chains of zero
delays, which are device copies through the edge buffers). GPU (marked ``gpu``): CuPy and torch
arrays through fir, sos and stft chains compared with NumPy input, outputs in the input's
framework, zero H2D/D2H, ordering on a caller's stream, a callback source of CuPy arrays.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.errors import ConfigError

from .test_cuda_engine import fake_driver, last_json, run_python  # noqa: F401  (fake_driver: a fixture)


FAKE_DEVICE_SCRIPT = r"""
import json
import sys
sys.modules["cupy"] = sys.modules["torch"] = None  # the fake driver's device memory is host memory: no real GPU framework
import numpy as np
from pygpukit_dsp import _native, Pipeline, stages
from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.backends.cuda_engine import CudaEngine
from pygpukit_dsp.arrays_interop import DeviceArray
from pygpukit_dsp.errors import ConfigError

dev = _native.Device(0)
res = {}

class Cai:
    # a GPU array of the fake driver's device memory, as a foreign framework would expose it
    def __init__(self, buf, shape, typestr="<f4", strides=None, offset=0):
        self.buf = buf
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "version": 3,
                                         "data": (buf.ptr + offset, False), "strides": strides, "stream": None}

def on_device(a):
    a = np.ascontiguousarray(a)
    buf = _native.DeviceBuffer(dev, a.nbytes)
    buf.copy_from_host(a)
    return buf

def to_host(buf, shape, dtype=np.float32):
    out = np.empty(shape, dtype)
    buf.copy_to_host(out)
    return out

def op(kind, ch, items, params, name=None):
    return {"kind": kind, "name": name or kind, "in": (ch, items, 0, "float32"),
            "out": (ch, items, 0, "float32"), "params": params}

zero = {"delays": np.zeros(3)}
chain = [op("delay", 3, 16, zero, name="a"), op("delay", 3, 16, zero, name="b")]
x = np.arange(48, dtype=np.float32).reshape(3, 16)

# 1. native: a full block device -> device, contiguous both sides
e = _native.StreamEngine(dev, chain, use_graph=False)
src, dst = on_device(x), on_device(np.full((3, 16), -1, np.float32))
n = e.process_device(0, src.ptr, 64, 16, False, dst.ptr, 64, 0)
res["full"] = [int(n), bool(np.array_equal(to_host(dst, (3, 16)), x))]
res["counters_full"] = e.counters()
# rows with a pitch: columns 8..24 of a (3, 40) array, into columns 4..20 of a (3, 30) array
wide = np.arange(120, dtype=np.float32).reshape(3, 40)
src2, dst2 = on_device(wide), on_device(np.full((3, 30), -1, np.float32))
caller = _native.Stream(dev)  # a caller's own stream
n = e.process_device(1, src2.ptr + 8 * 4, 160, 16, False, dst2.ptr + 4 * 4, 120, caller.handle)
got = to_host(dst2, (3, 30))
res["pitched"] = [int(n), bool(np.array_equal(got[:, 4:20], wide[:, 8:24])), bool(np.all(got[:, :4] == -1)),
                  bool(np.all(got[:, 20:] == -1))]
# a short final block: n valid items; exactly n_out items per row are written
res["short_items"] = int(e.device_output_items(5, True))
dst3 = on_device(np.full((3, 16), -1, np.float32))
n = e.process_device(0, src.ptr, 64, 5, True, dst3.ptr, 64, 0)
got = to_host(dst3, (3, 16))
res["short"] = [int(n), bool(np.array_equal(got[:, :5], x[:, :5])), bool(np.all(got[:, 5:] == -1))]
c = e.counters()
res["counters_after"] = {k: c[k] for k in ("blocks", "device_blocks", "d2d_in", "d2d_out", "h2d_copies",
                                           "d2h_copies", "completion_waits", "eager_blocks")}
errors = {}
for label, call in {
        "empty": lambda: e.process_device(0, src.ptr, 64, 0, True, dst.ptr, 64, 0),
        "partial_not_final": lambda: e.process_device(0, src.ptr, 64, 5, False, dst.ptr, 64, 0),
        "too_long": lambda: e.process_device(0, src.ptr, 64, 17, True, dst.ptr, 64, 0),
        "short_rows": lambda: e.process_device(0, src.ptr, 32, 16, False, dst.ptr, 64, 0),
        "null": lambda: e.process_device(0, 0, 64, 16, False, dst.ptr, 64, 0)}.items():
    try:
        call()
        errors[label] = None
    except ValueError as exc:
        errors[label] = str(exc)
e.input_slot(0)[:] = 1
e.submit(0, 16)
try:
    e.process_device(1, src.ptr, 64, 16, False, dst.ptr, 64, 0)
    errors["busy"] = None
except ValueError as exc:
    errors["busy"] = str(exc)
e.wait(0)
res["errors"] = errors
# a host block after device blocks still runs as before
y = e.process(1, x + 1)
res["host_after"] = bool(np.array_equal(y, x + 1))
e.synchronize_device()
e.close()

# 2. a captured graph is replayed for a full device block; the final one runs eagerly
e = _native.StreamEngine(dev, chain, use_graph=True)
for k in range(4):
    e.process_device(k % 2, src.ptr, 64, 16, False, dst.ptr, 64, 0)
e.process_device(0, src.ptr, 64, 3, True, dst.ptr, 64, 0)
c = e.counters()
res["graph_counters"] = {k: c[k] for k in ("graph_launches", "eager_blocks", "device_blocks", "h2d_copies",
                                           "d2h_copies")}
e.close()

# 2b. an engine attached to a dispatcher: host blocks through the scheduler, a device block
#     between them queued by the calling thread
import pygpukit_dsp_core
sched = pygpukit_dsp_core.Scheduler(quantum_ns=100_000)
sid = sched.register_stream("s", "throughput", cost_ns=100_000)
disp = _native.Dispatcher(dev, sched.capsule(), spin_us=50)
e = _native.StreamEngine(dev, chain, use_graph=False)
e.attach(disp, sid)
first = e.process(0, x + 3, False)
dst4 = on_device(np.zeros((3, 16), np.float32))
n = e.process_device(1, src.ptr, 64, 16, False, dst4.ptr, 64, 0)
e.synchronize_device()
last = e.process(0, x + 4, False)
c = e.counters()
res["attached"] = [bool(e.attached), bool(np.array_equal(first, x + 3)), int(n),
                   bool(np.array_equal(to_host(dst4, (3, 16)), x)), bool(np.array_equal(last, x + 4)),
                   c["device_blocks"], c["h2d_copies"], c["d2h_copies"]]
e.close()
disp.close()

# 3. CudaEngine.process and Pipeline.process of a GPU array (no CuPy here: DeviceArray comes back)
p = Pipeline([stages.Delay(samples=0, name="a"), stages.Delay(samples=0, name="b")], sample_rate=1000,
             channels=3, block_size=16)
eng = CudaEngine(p, p.specs(), BackendChoice("cuda", "test"), use_graph=False, mapped_io=False,
                 single_stream=False, inline_submit=False)
out = eng.process(Cai(src, (3, 16)))
res["engine_out"] = [type(out).__name__, list(out.shape), bool(np.array_equal(out.to_numpy(), x))]
out = eng.process(Cai(src2, (3, 5), strides=(160, 4), offset=8 * 4), final=True)
res["engine_short"] = [list(out.shape), bool(np.array_equal(out.to_numpy(), wide[:, 8:13]))]
target = DeviceArray(dev, (3, 16), np.float32)
r = eng.process(Cai(src, (3, 16)), out=target)
res["engine_out_arg"] = [r is target, bool(np.array_equal(target.to_numpy(), x))]
try:
    eng.process(Cai(src, (3, 16)), out=DeviceArray(dev, (3, 8), np.float32))
    res["bad_out"] = None
except ConfigError as exc:
    res["bad_out"] = str(exc)
res["engine_counters"] = {k: v for k, v in eng.counters().items() if k in ("h2d_copies", "d2h_copies", "device_blocks")}
try:
    eng.submit(Cai(src, (3, 16)))
    res["submit_refused"] = None
except ConfigError as exc:
    res["submit_refused"] = str(exc)
for label, arr in {"dtype": Cai(src, (3, 8), typestr="<f8"), "channels": Cai(src, (2, 16)),
                   "samples_strided": Cai(src, (3, 8), strides=(64, 8))}.items():
    try:
        eng.process(arr)
        res["bad_" + label] = None
    except ConfigError as exc:
        res["bad_" + label] = str(exc)
y = eng.process(x + 2)  # host blocks as before, on the same engine
res["engine_host_after"] = bool(np.array_equal(y, x + 2))
eng.close()
long = np.arange(3 * 40, dtype=np.float32).reshape(3, 40)
whole = p.process(Cai(on_device(long), (3, 40)), backend="cuda")
# (the fake's graph launches move no data: the eager final block's columns 32..40 are checked)
res["pipeline"] = [type(whole).__name__, list(whole.shape),
                   bool(np.array_equal(whole.to_numpy()[:, 32:], long[:, 32:]))]
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def fake_results(fake_driver: str) -> dict:
    return last_json(run_python(FAKE_DEVICE_SCRIPT, GK_LIBCUDA=fake_driver, GK_JIT_DISK_CACHE="0"))


def test_fake_device_block_copies_device_to_device_only(fake_results):
    assert fake_results["full"] == [16, True]
    c = fake_results["counters_full"]
    assert (c["device_blocks"], c["d2d_in"], c["d2d_out"], c["h2d_copies"], c["d2h_copies"]) == (1, 1, 1, 0, 0)
    assert c["completion_waits"] == 0  # no host wait for a device block


def test_fake_device_block_reads_and_writes_rows_with_a_pitch(fake_results):
    assert fake_results["pitched"] == [16, True, True, True]


def test_fake_short_final_device_block_writes_its_valid_items_only(fake_results):
    assert fake_results["short_items"] == 5
    assert fake_results["short"] == [5, True, True]
    assert fake_results["counters_after"] == {"blocks": 3, "device_blocks": 3, "d2d_in": 3, "d2d_out": 3,
                                              "h2d_copies": 0, "d2h_copies": 0, "completion_waits": 0,
                                              "eager_blocks": 3}


def test_fake_device_block_misuse_is_refused(fake_results):
    e = fake_results["errors"]
    assert "1..16" in e["empty"] and "1..16" in e["too_long"]
    assert "final" in e["partial_not_final"]
    assert "rows of 32 bytes" in e["short_rows"]
    assert "device pointers" in e["null"]
    assert "idle engine" in e["busy"]
    assert fake_results["host_after"] is True


def test_fake_full_device_blocks_replay_the_slot_graph(fake_results):
    assert fake_results["graph_counters"] == {"graph_launches": 4, "eager_blocks": 1, "device_blocks": 5,
                                              "h2d_copies": 0, "d2h_copies": 0}


def test_fake_device_block_of_an_engine_attached_to_a_dispatcher(fake_results):
    assert fake_results["attached"] == [True, True, 16, True, True, 1, 2, 2]


def test_fake_cuda_engine_keeps_gpu_arrays_on_the_gpu(fake_results):
    assert fake_results["engine_out"] == ["DeviceArray", [3, 16], True]
    assert fake_results["engine_short"] == [[3, 5], True]
    assert fake_results["engine_out_arg"] == [True, True]
    assert "full output block's shape (3, 16)" in fake_results["bad_out"]
    assert fake_results["engine_counters"] == {"h2d_copies": 0, "d2h_copies": 0, "device_blocks": 3}
    assert "process()" in fake_results["submit_refused"]
    assert "float64" in fake_results["bad_dtype"]
    assert "2 channels" in fake_results["bad_channels"]
    assert "not contiguous" in fake_results["bad_samples_strided"]
    assert fake_results["engine_host_after"] is True


def test_fake_pipeline_process_of_a_gpu_array_returns_one_gpu_array(fake_results):
    assert fake_results["pipeline"] == ["DeviceArray", [3, 40], True]


# ------------------------------------------------------------------------------------------
# CPU: the cpu backend refuses GPU arrays before any block
# ------------------------------------------------------------------------------------------
class _FakeGpuArray:
    """Metadata only: the cpu backend must refuse it before touching its (absent) memory."""

    def __init__(self, shape=(1, 64), typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0xDEAD0000, False),
                                         "version": 3, "strides": None, "stream": None}


def test_cpu_backend_refuses_a_gpu_array_before_any_block():
    p = Pipeline([stages.Gain(db=0.0)], sample_rate=1000, block_size=16)
    with pytest.raises(ConfigError) as info:
        p.process(_FakeGpuArray(), backend="cpu")
    assert "cpu backend" in info.value.message and "backend='cuda'" in info.value.hint


def _two_sources():
    from pygpukit_dsp import Graph

    g = Graph(name="two", sample_rate=1000, channels=1, block_size=16)
    g.source(name="a")
    g.source(name="b")
    g.add(stages.Add(name="sum"), "a", "b")
    return g


def test_a_graph_on_the_cpu_backend_refuses_gpu_arrays_and_a_mix_before_any_block():
    with pytest.raises(ConfigError) as info:
        _two_sources().process({"a": _FakeGpuArray(), "b": _FakeGpuArray()}, backend="cpu")
    assert "cpu backend" in info.value.message and "backend='cuda'" in info.value.hint
    with pytest.raises(ConfigError) as info:
        _two_sources().process({"a": _FakeGpuArray(), "b": np.zeros((1, 64), np.float32)}, backend="cuda")
    assert "some sources" in info.value.message


def test_gpu_array_dtype_must_match_the_pipeline_before_any_block():
    p = Pipeline([stages.Gain(db=0.0)], sample_rate=1000, block_size=16, dtype="complex64")
    with pytest.raises(ConfigError) as info:
        p.process(_FakeGpuArray(), backend="cuda")
    assert "complex64" in info.value.message and "float32" in info.value.message


# ------------------------------------------------------------------------------------------
# GPU: CuPy and torch
# ------------------------------------------------------------------------------------------
RATE = 48000.0


def _pipelines() -> dict[str, Pipeline]:
    return {
        "fir": Pipeline([stages.Fir(taps=np.hanning(31) / 15.5)], sample_rate=RATE, channels=2, block_size=256,
                        backend="cuda"),
        "sos": Pipeline([stages.Sos(design={"kind": "butter", "order": 4, "cutoff_hz": 3000.0})], sample_rate=RATE,
                        channels=2, block_size=256, backend="cuda"),
        "stft": Pipeline([stages.Stft(nfft=128, hop=64), stages.Power()], sample_rate=RATE, channels=2,
                         block_size=256, backend="cuda"),
    }


def _signal(channels: int, n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((channels, n)).astype(np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fir", "sos", "stft"])
@pytest.mark.parametrize("n", [256 * 8, 256 * 8 + 77])  # whole blocks, and an odd final block
def test_gpu_cupy_process_equals_numpy_process(name, n):
    cupy = pytest.importorskip("cupy")
    p = _pipelines()[name]
    x = _signal(2, n)
    want = p.process(x)
    got = p.process(cupy.asarray(x))
    assert isinstance(got, cupy.ndarray) and got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fir", "stft"])
def test_gpu_torch_process_equals_numpy_process_and_returns_torch(name):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    p = _pipelines()[name]
    x = _signal(2, 256 * 5 + 31)
    want = p.process(x)
    got = p.process(torch.from_numpy(x).to("cuda:0"))
    assert isinstance(got, torch.Tensor) and got.device.type == "cuda" and tuple(got.shape) == want.shape
    np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-5)


def _engine(p: Pipeline, **kw):
    from pygpukit_dsp.backends import BackendChoice
    from pygpukit_dsp.backends.cuda_engine import CudaEngine

    return CudaEngine(p, p.specs(), BackendChoice("cuda", "test"), **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["throughput", "latency"])
def test_gpu_device_blocks_make_no_host_copies(mode):
    cupy = pytest.importorskip("cupy")
    p = _pipelines()["fir"]
    kw = {} if mode == "throughput" else {"single_stream": True, "mapped_io": True}
    eng = _engine(p, **kw)
    try:
        x = _signal(2, 256 * 20)
        want = [eng.process(x[:, k * 256:(k + 1) * 256]) for k in range(20)]
        before = eng.counters()
        eng.reset()
        got = [eng.process(cupy.asarray(x[:, k * 256:(k + 1) * 256])) for k in range(20)]
        after = eng.counters()
        assert after["h2d_copies"] == before["h2d_copies"] and after["d2h_copies"] == before["d2h_copies"]
        assert after["device_blocks"] == 20 and after["d2d_in"] == 20 and after["d2d_out"] == 20
        assert all(isinstance(g, cupy.ndarray) for g in got)
        np.testing.assert_allclose(cupy.asnumpy(cupy.concatenate(got, axis=1)), np.concatenate(want, axis=1),
                                   rtol=1e-5, atol=1e-5)
    finally:
        eng.close()


@pytest.mark.gpu
def test_gpu_device_blocks_are_ordered_on_the_callers_stream():
    cupy = pytest.importorskip("cupy")
    p = Pipeline([stages.Gain(linear=2.0)], sample_rate=RATE, channels=1, block_size=1 << 16, backend="cuda")
    eng = _engine(p)
    try:
        stream = cupy.cuda.Stream(non_blocking=True)
        outs = []
        with stream:
            for k in range(8):
                # made by kernels on the stream just before; read by the engine without a host sync
                x = cupy.full((1, 1 << 16), float(k), dtype=cupy.float32) + cupy.arange(1 << 16, dtype=cupy.float32)
                outs.append(eng.process(x))
                # the next kernel on the stream reads the engine's output: in stream order
                outs[-1] = outs[-1] * 1.0
        stream.synchronize()
        base = np.arange(1 << 16, dtype=np.float32)
        for k, y in enumerate(outs):
            np.testing.assert_allclose(cupy.asnumpy(y)[0], 2.0 * (base + k), rtol=1e-6)
    finally:
        eng.close()


@pytest.mark.gpu
def test_gpu_torch_block_gives_a_torch_block():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    eng = _engine(_pipelines()["fir"])
    try:
        x = _signal(2, 256)
        want = eng.process(x)
        eng.reset()
        got = eng.process(torch.from_numpy(x).cuda())
        assert isinstance(got, torch.Tensor) and got.is_cuda
        torch.cuda.current_stream().synchronize()
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-5)
        assert eng.counters()["device_blocks"] == 1
    finally:
        eng.close()


@pytest.mark.gpu
def test_gpu_nonfinite_error_stops_at_the_device_block_that_holds_it():
    cupy = pytest.importorskip("cupy")
    from pygpukit_dsp.nonfinite import NonFiniteInput

    p = _pipelines()["fir"]
    x = _signal(2, 256 * 4)
    x[1, 256 * 2 + 10] = np.nan
    with pytest.raises(NonFiniteInput) as info:
        p.process(cupy.asarray(x))
    c = info.value.count
    assert (c.first_block, c.first_sample, c.first_channel, c.first_value) == (2, 256 * 2 + 10, 1, "nan")


@pytest.mark.gpu
def test_gpu_nonfinite_zero_counts_device_blocks_at_synchronize():
    cupy = pytest.importorskip("cupy")
    p = _pipelines()["fir"]
    eng = _engine(p, nonfinite="zero")
    try:
        x = _signal(2, 256)
        x[0, 3] = np.inf
        y = eng.process(cupy.asarray(x))
        eng.synchronize()
        assert eng.nonfinite.count == 1 and eng.nonfinite.first_sample == 3
        assert bool(cupy.all(cupy.isfinite(y)))
    finally:
        eng.close()


@pytest.mark.gpu
def test_gpu_callback_source_of_cupy_blocks_runs_on_the_gpu():
    cupy = pytest.importorskip("cupy")
    from pygpukit_dsp.io import CallbackSink, CallbackSource

    x = _signal(1, 256 * 6 + 40)
    pos = [0]

    def produce(n):
        if pos[0] >= x.shape[1]:
            return None
        part = cupy.asarray(x[:, pos[0]:pos[0] + n])
        pos[0] += n
        return part

    got = []
    p = Pipeline([stages.Fir(taps=np.hanning(31) / 15.5)], sample_rate=RATE, channels=1, block_size=256,
                 backend="cuda")
    summary = p.with_io(source=CallbackSource(fn=produce),
                        sink=CallbackSink(fn=lambda b: got.append(cupy.asnumpy(b)), device_arrays=True)).run()
    want = p.process(x)
    np.testing.assert_allclose(np.concatenate(got, axis=1), want, rtol=1e-5, atol=1e-5)
    c = summary.engine_counters
    assert c["device_blocks"] == summary.blocks == 7
    # host blocks (admission's calibration, of zeros) copied each way; the run's blocks did not
    assert c["h2d_copies"] == c["d2h_copies"] == c["blocks"] - c["device_blocks"]


def test_cpu_engine_refuses_a_gpu_block():
    from pygpukit_dsp.backends import BackendChoice
    from pygpukit_dsp.backends.cpu import CpuEngine

    p = Pipeline([stages.Gain(db=0.0)], sample_rate=1000, channels=1, block_size=64)
    eng = CpuEngine(p, p.specs(), BackendChoice("cpu", "test"))
    with pytest.raises(ConfigError) as info:
        eng.process(_FakeGpuArray())
    assert "cpu backend" in info.value.message


@pytest.mark.gpu
def test_gpu_cupy_array_on_the_cpu_backend_is_refused():
    cupy = pytest.importorskip("cupy")
    p = Pipeline([stages.Gain(db=0.0)], sample_rate=RATE, channels=1, block_size=256, backend="cpu")
    with pytest.raises(ConfigError) as info:
        p.process(cupy.zeros((1, 1000), cupy.float32))
    assert "cpu backend" in info.value.message


@pytest.mark.gpu
def test_gpu_dlpack_only_producer_is_read_from_its_capsule():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    from pygpukit_dsp.arrays_interop import to_host

    class DLPackOnly:  # a CUDA array that speaks DLPack only (as JAX arrays may)
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    p = _pipelines()["fir"]
    x = _signal(2, 256 * 3 + 5)
    got = p.process(DLPackOnly(torch.from_numpy(x).cuda()))
    np.testing.assert_allclose(to_host(got), p.process(x), rtol=1e-5, atol=1e-5)
