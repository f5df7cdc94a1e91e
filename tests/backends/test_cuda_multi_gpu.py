"""Several GPUs of one host: per-GPU contexts, memory pools, schedulers and dispatchers, and
``device: auto`` placement, through the real native layer.

* CPU-only, on the fake driver (tests/native/fake_libcuda.c, FAKE_CUDA_DEVICES=2 and 4, in a
  fresh interpreter): each GPU has its own primary context, memory and dispatcher; a Session of
  auto streams spreads over the GPUs; admission is per GPU; a stream refused by a full GPU is
  placed on another (its engine opened again there); a launch on another GPU's stream would fail
  (the fake driver refuses it and counts it) and never happens; ``device: 1`` on a one-GPU machine
  is a DeviceError before the first block.
* ``gpu``: ``device: N`` past the last GPU is a DeviceError before the first block (any GPU machine).
* ``gpu`` + ``multi_gpu`` (two or more GPUs; tests/conftest.py skips them on fewer with the reason,
  and GK_REQUIRE_MULTI_GPU=1 makes that an error): contexts, pools and dispatchers per GPU, results
  computed on GPU 1 against the CPU backend (SciPy), and a Session placed with ``device: auto``
  over the GPUs with the same output as the CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages

from .compare import rel_err, signal
from .test_cuda_engine import fake_driver  # noqa: F401  (a fixture)
from .test_cuda_engine_mapped_io import fake_mapped_driver  # noqa: F401  (a fixture)
from .test_cuda_engine import PACKAGE_PARENT, last_json, run_python

# ------------------------------------------------------------------------------------------
# CPU-only: the fake driver with several GPUs
# ------------------------------------------------------------------------------------------

FAKE_SESSION_SCRIPT = r"""
import ctypes, gc, json, os
import numpy as np
from pygpukit_dsp import AdmissionError, Pipeline, Session, stages, _native
from pygpukit_dsp.io import NullSink, NullSource

fake = ctypes.CDLL(os.environ["GK_LIBCUDA"])
N = int(os.environ["FAKE_CUDA_DEVICES"])
res = {"n": N}

def rt(name, cost_us, device="auto", block=480, deadline_ms=None, seconds=0.1):
    qos = {"class": "realtime", "cost_us": cost_us}
    if deadline_ms is not None:
        qos["deadline_ms"] = deadline_ms
    return Pipeline([stages.Gain(db=-3)], name=name, sample_rate=48000, channels=2, block_size=block,
                    backend="cuda", device=device, qos=qos, source=NullSource(duration_s=seconds), sink=NullSink())

# 1. data on one GPU other than 0: a zero delay is two copies on the fake driver (it runs no
#    kernel; eager blocks, as the fake graph launch does nothing), so the samples must come back;
#    every allocation on that GPU, none elsewhere
from pygpukit_dsp.backends import choose_backend
from pygpukit_dsp.backends.cuda_engine import CudaEngine
last = N - 1
x = np.arange(3 * 256, dtype=np.float32).reshape(3, 256)
p = Pipeline([stages.Delay(samples=0)], sample_rate=1000, channels=3, block_size=256, backend="cuda", device=last)
choice = choose_backend(p, p.specs(), "cuda")
eng = CudaEngine(p, p.specs(), choice, device=choice.device, use_graph=False)
res["copy_through_last"] = [choice.device, eng.device.index] + [bool(np.array_equal(eng.process(x + k), x + k))
                                                                 for k in range(3)]
eng.close()
res["allocs_after_process"] = [fake.fake_cuda_device_allocs(i) for i in range(N)]
res["contexts_after_process"] = [fake.fake_cuda_device_retained(i) for i in range(N)]

# 2. 2N auto realtime streams, costs descending: spread over the GPUs, two each
seen = {}
def tap(name, block):
    seen.setdefault(name, [fake.fake_cuda_device_bytes(i) for i in range(N)])
launches0 = [fake.fake_cuda_device_launches(i) for i in range(N)]
s = Session([rt(f"s{i}", 1000 - 50 * i) for i in range(2 * N)])
out = s.run(tap=tap)
res["spread"] = {o.pipeline: [o.gpu, o.placement, o.scheduler.device, o.blocks, o.scheduler.submitted,
                              o.scheduler.missed + o.scheduler.completed] for o in out}
res["formatted"] = out[1].format()
res["dispatchers"] = {str(g): d._native.device_index for g, d in s.dispatch.gpus.items()}
res["dispatch_stats"] = {k: v["completed"] for k, v in s.dispatch.stats().items()}
res["schedulers"] = {k: sorted(n for n, (dev, _) in s.dispatch.streams.items() if dev == k) for k in s.schedulers}
res["left_registered"] = sum(len(v.stats()["streams"]) for v in s.schedulers.values())  # each left when done
res["launches"] = [fake.fake_cuda_device_launches(i) - launches0[i] for i in range(N)]
res["bytes_in_run"] = seen
res["placements"] = {k: v.to_dict() for k, v in s.placements().items()}
del s, out
gc.collect()

# 3. admission per GPU: 0.6 of a GPU each on GPUs 0 and 1 fits (one GPU could not take both);
#    a third on GPU 0 is refused there, before any block
s = Session([rt("a", 6000, device=0), rt("b", 6000, device=1)])
res["per_gpu"] = [(o.pipeline, o.gpu, o.blocks) for o in s.run()]
try:
    Session([rt("a", 6000, device=0), rt("b", 6000, device=1), rt("c", 6000, device=0)]).run()
    res["third_on_0"] = None
except AdmissionError as exc:
    res["third_on_0"] = [exc.stream, exc.figures["device"], str(exc)]
del s
gc.collect()

# 4. refused on a full GPU, placed on another: GPU 0 holds a stream with a 2 ms deadline, so C's
#    2 ms block cannot fit before it (response bound) although GPU 0 has the most headroom; GPU 1
#    (0.5 used) has more than GPUs 2.. (0.6 used each). C's engine opens on GPU 0 first (fewest
#    streams there when it opened), then moves to GPU 1.
hogs = [rt(f"h{g}", 6000, device=g) for g in range(2, N)]
s = Session([rt("a", 1000, device=0, block=4800, deadline_ms=2), rt("b", 5000, device=1), *hogs,
             rt("c", 2000, block=4800)])
out = {o.pipeline: o for o in s.run()}
res["moved"] = [out["c"].gpu, out["c"].placement, out["c"].scheduler.device, out["c"].blocks]
res["c_stats"] = s.stream_stats("c")["submitted"]
del s, out
gc.collect()

# 5. every GPU full: AdmissionError naming each, and no source was read
reads = [0]
class Counting(NullSource):
    def read(self, n):
        reads[0] += 1
        return super().read(n)
hogs = [rt(f"hog{g}", 8000, device=g) for g in range(N)]
late = rt("late", 3000)
late.source = Counting(duration_s=0.1)
try:
    Session(hogs + [late]).run()
    res["all_full"] = None
except AdmissionError as exc:
    res["all_full"] = [exc.stream, str(exc), exc.figures.get("gpus_tried")]
res["all_full_reads"] = reads[0]
gc.collect()
res["mismatches"] = fake.fake_cuda_context_mismatches()
res["live_streams"] = fake.fake_cuda_live_streams()
res["live_events"] = fake.fake_cuda_live_events()
print(json.dumps(res))
"""


def _fake_session(driver: str, n: int) -> dict:
    pytest.importorskip("pygpukit_dsp_core")
    return last_json(run_python(FAKE_SESSION_SCRIPT, timeout=300, GK_LIBCUDA=driver, GK_JIT_DISK_CACHE="0",
                                FAKE_CUDA_DEVICES=str(n)))


@pytest.fixture(scope="module", params=[2, 4], ids=["2gpus", "4gpus"])
def fake_session(request, fake_mapped_driver: str) -> dict:  # noqa: F811
    return _fake_session(fake_mapped_driver, request.param)


def test_fake_data_and_memory_stay_on_the_gpu_asked_for(fake_session):
    n = fake_session["n"]
    assert fake_session["copy_through_last"] == [n - 1, n - 1, True, True, True]
    allocs = fake_session["allocs_after_process"]
    assert allocs[n - 1] > 0 and allocs[: n - 1] == [0] * (n - 1)  # cached in GPU n-1's pool only
    assert fake_session["contexts_after_process"][: n - 1] == [0] * (n - 1)  # no other context retained


def test_fake_auto_streams_spread_two_per_gpu(fake_session):
    n = fake_session["n"]
    spread = fake_session["spread"]
    gpus = [v[0] for v in spread.values()]
    assert sorted(gpus) == sorted(list(range(n)) * 2)
    assert gpus[:n] == list(range(n))  # first round: all empty, by index
    for name, (gpu, placement, device, blocks, submitted, done) in spread.items():
        assert device == ("cuda" if gpu == 0 else f"cuda:{gpu}")
        assert placement.startswith(f"GPU {gpu}: auto: ")
        assert blocks == submitted == done == 10  # 0.1 s at 48 kHz / 480, each through its GPU's scheduler
    assert "  device GPU 1: auto: " in fake_session["formatted"]
    assert "scheduler (cuda:1 dispatcher)" in fake_session["formatted"]


def test_fake_one_scheduler_and_one_dispatcher_per_gpu(fake_session):
    n = fake_session["n"]
    assert fake_session["dispatchers"] == {str(g): g for g in range(n)}
    keys = ["cuda"] + [f"cuda:{g}" for g in range(1, n)]
    assert sorted(fake_session["dispatch_stats"]) == sorted(keys)
    assert all(v == 20 for v in fake_session["dispatch_stats"].values())  # 2 streams x 10 blocks each
    assert sorted(fake_session["schedulers"]) == sorted(keys)
    assert all(len(v) == 2 for v in fake_session["schedulers"].values())
    assert fake_session["left_registered"] == 0
    for name, pl in fake_session["placements"].items():
        assert name in fake_session["schedulers"][pl["device"]]


def test_fake_every_gpu_launches_its_own_work_in_its_own_context(fake_session):
    n = fake_session["n"]
    assert all(k > 0 for k in fake_session["launches"]), fake_session["launches"]
    # the fake driver refuses (and counts) a launch, copy or event record on another GPU's stream
    assert fake_session["mismatches"] == 0
    for name, per_gpu in fake_session["bytes_in_run"].items():
        assert all(b > 0 for b in per_gpu), (name, per_gpu)  # every GPU's engines allocated there
    assert len(fake_session["bytes_in_run"]) == 2 * n
    # everything made for the sessions is released again (engines, dispatchers' events)
    assert fake_session["live_streams"] == 0 and fake_session["live_events"] == 0


def test_fake_admission_is_per_gpu(fake_session):
    assert fake_session["per_gpu"] == [["a", 0, 10], ["b", 1, 10]]
    stream, device, text = fake_session["third_on_0"]
    assert stream == "c" and device == "cuda" and "U_max" in text


def test_fake_a_stream_refused_on_a_full_gpu_runs_on_another(fake_session):
    gpu, placement, device, blocks = fake_session["moved"]
    assert gpu == 1 and device == "cuda:1" and blocks == 1  # 0.1 s of 100 ms blocks
    assert "GPU 0 refused it" in placement and "shortest realtime deadline" in placement
    assert "GPU 1 admitted it" in placement
    assert fake_session["c_stats"] == 1


def test_fake_every_gpu_full_is_refused_before_the_first_block(fake_session):
    n = fake_session["n"]
    stream, text, tried = fake_session["all_full"]
    assert stream == "late" and f"no GPU admits it (device: auto over {n} GPU(s))" in text
    assert all(f"GPU {g}: " in text for g in range(n))
    assert tried == ", ".join(f"GPU {g}" for g in range(n))
    assert fake_session["all_full_reads"] == 0


FAKE_ONE_GPU_SCRIPT = r"""
import json, os
import numpy as np
from pygpukit_dsp import DeviceError, Pipeline, stages
from pygpukit_dsp.io import NullSink, NullSource

res = {}
reads = [0]
class Counting(NullSource):
    def read(self, n):
        reads[0] += 1
        return super().read(n)

for backend in ("cuda", "auto"):
    p = Pipeline([stages.Gain(db=-3)], name="far", sample_rate=48000, channels=2, block_size=256,
                 backend=backend, device=1, source=Counting(duration_s=0.1), sink=NullSink())
    try:
        p.run()
        res[backend] = None
    except DeviceError as exc:
        res[backend] = str(exc)
res["reads"] = reads[0]
try:
    Pipeline([stages.Gain(db=-3)], sample_rate=1000).process(np.zeros((1, 64), np.float32), device=3)
    res["process"] = None
except DeviceError as exc:
    res["process"] = str(exc)
# device 0 still works, and so does auto (the only GPU)
p = Pipeline([stages.Gain(db=-3)], name="here", sample_rate=48000, channels=2, block_size=256, backend="cuda",
             device="auto", source=NullSource(duration_s=0.02), sink=NullSink())
s = p.run()
res["auto_one"] = [s.gpu, s.placement]
print(json.dumps(res))
"""


def test_fake_device_1_on_one_gpu_is_a_device_error_before_the_first_block(fake_mapped_driver):  # noqa: F811
    res = last_json(run_python(FAKE_ONE_GPU_SCRIPT, GK_LIBCUDA=fake_mapped_driver, GK_JIT_DISK_CACHE="0",
                               FAKE_CUDA_DEVICES="1"))
    for backend in ("cuda", "auto"):  # auto does not move a named GPU's pipeline to the CPU instead
        text = res[backend]
        assert text is not None and "pipeline 'far' asks for GPU 1 (device: 1)" in text, text
        assert "GPU 1 does not exist: this machine has 1 GPU(s) (0..0)" in text
        assert "gk-stream devices" in text
    assert res["reads"] == 0
    assert "asks for GPU 3" in res["process"]
    assert res["auto_one"] == [0, "GPU 0: auto: the only usable GPU (headroom 1.0000)"]


def test_fake_cli_device_override_and_devices_listing(fake_mapped_driver, tmp_path):  # noqa: F811
    yaml = tmp_path / "g.yaml"
    yaml.write_text("""\
version: 1
name: g
sample_rate: 48000
channels: 2
block_size: 480
backend: cuda
qos: {class: realtime, cost_us: 100}
source: {type: synth}
stages: [{type: gain, db: -3}]
sink: {type: "null"}
""")
    env = dict(os.environ, GK_LIBCUDA=fake_mapped_driver, GK_JIT_DISK_CACHE="0", FAKE_CUDA_DEVICES="4",
               PYTHONPATH=os.pathsep.join([str(PACKAGE_PARENT), os.environ.get("PYTHONPATH", "")]))

    def gk(*args):
        return subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", *map(str, args)], env=env,
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)

    r = gk("devices")
    assert r.returncode == 0, r.stderr
    for g in range(4):
        assert f"gpu {g}   Fake GPU" in r.stdout
    assert "PCI 0000:18:00.0" in r.stdout and "PCI 0000:48:00.0" in r.stdout and "copy engines" in r.stdout
    assert "device  auto -> each stream of a session on the GPU with the most admission headroom among 4 " \
           "usable GPUs (0, 1, 2, 3)" in r.stdout
    r = gk("run", yaml, "--device", "3", "--duration", "0.05", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "  device GPU 3: requested (device: 3)" in r.stdout and "(cuda:3, drops 0)" in r.stdout
    r = gk("run", yaml, "--device", "4", "--duration", "0.05", "--quiet")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "asks for GPU 4 (device: 4) (the run's device override)" in r.stderr
    # a device in the file: the error points at its value
    (tmp_path / "g7.yaml").write_text(yaml.read_text().replace("backend: cuda\n", "backend: cuda\ndevice: 7\n"))
    r = gk("run", "g7.yaml", "--duration", "0.05", "--quiet")
    assert r.returncode == 1 and "asks for GPU 7 (device: 7) (at g7.yaml:7:9)" in r.stderr, r.stderr
    assert "GPU 7 does not exist: this machine has 4 GPU(s) (0..3)" in r.stderr
    r = gk("run", yaml, "--device", "x")
    assert r.returncode == 2 and "expected a GPU index >= 0 or auto" in r.stderr


FAKE_NATIVE_SCRIPT = r"""
import ctypes, json, os
import numpy as np
import pygpukit_dsp_core
from pygpukit_dsp import _native
from pygpukit_dsp.capabilities import capabilities, usable_gpus

fake = ctypes.CDLL(os.environ["GK_LIBCUDA"])
res = {}
caps = capabilities()
res["gpus"] = [[g["index"], g["usable"], g["pci_bus_id"], g["copy_engines"]] for g in caps["gpus"]]
res["usable"] = usable_gpus(caps)
d0, d1 = _native.Device(0), _native.Device(1)
res["same"] = [d0 == _native.Device(0), d0 == d1, d1.index]
# pools per GPU: a buffer on GPU 1 is GPU 1's pool's, and its memory GPU 1's
b1 = _native.DeviceBuffer(d1, 1 << 20)
res["pools"] = [d0.memory_stats()["in_use_bytes"], d1.memory_stats()["in_use_bytes"]]
res["fake_bytes"] = [fake.fake_cuda_device_bytes(0), fake.fake_cuda_device_bytes(1)]
res["free"] = [d0.memory_info()[0] > d1.memory_info()[0]]
del b1

op = {"kind": "delay", "name": "d", "in": (2, 16, 0, "float32"), "out": (2, 16, 0, "float32"),
      "params": {"delays": np.zeros(2)}}
sched = pygpukit_dsp_core.Scheduler()
sid = sched.register_stream("s", "best_effort")
disp1 = _native.Dispatcher(d1, sched.capsule())
res["disp_device"] = [disp1.device_index, disp1.device == d1]
e0 = _native.StreamEngine(d0, [op], use_graph=False)
try:
    e0.attach(disp1, sid)
    res["wrong_gpu"] = None
except ValueError as exc:
    res["wrong_gpu"] = str(exc)
e1 = _native.StreamEngine(d1, [op], use_graph=False)
e1.attach(disp1, sid)
x = np.arange(32, dtype=np.float32).reshape(2, 16)
ok = True
for b in range(5):
    ok &= bool(np.array_equal(e1.process(b % 2, x + b, False), x + b))   # through GPU 1's dispatcher
# the engine on GPU 0 keeps working on its own worker meanwhile
ok0 = bool(np.array_equal(e0.process(0, x, False), x))
res["data"] = [ok, ok0, disp1.stats()["completed"], sched.stream_stats(sid)["completed"]]
disp1.close()
e1.detach(); e1.close(); e0.close()
res["mismatches"] = fake.fake_cuda_context_mismatches()
print(json.dumps(res))
"""


def test_fake_native_contexts_pools_and_dispatchers_are_per_gpu(fake_driver):  # noqa: F811
    pytest.importorskip("pygpukit_dsp_core")
    res = last_json(run_python(FAKE_NATIVE_SCRIPT, GK_LIBCUDA=fake_driver, GK_JIT_DISK_CACHE="0",
                               FAKE_CUDA_DEVICES="2"))
    assert res["gpus"] == [[0, True, "0000:18:00.0", 1], [1, True, "0000:28:00.0", 1]]
    assert res["usable"] == [0, 1]
    assert res["same"] == [True, False, 1]
    assert res["pools"][0] == 0 and res["pools"][1] >= 1 << 20
    assert res["fake_bytes"][0] == 0 and res["fake_bytes"][1] >= 1 << 20
    assert res["free"] == [True]  # cuMemGetInfo answers for the current context's GPU
    assert res["disp_device"] == [1, True]
    assert res["wrong_gpu"] == "the dispatcher runs GPU 1, this engine GPU 0"
    assert res["data"] == [True, True, 5, 5]
    assert res["mismatches"] == 0


FAKE_MISMATCH_SCRIPT = r"""
import ctypes, json, os
fake = ctypes.CDLL(os.environ["GK_LIBCUDA"])
c = ctypes.c_void_p
fake.cuInit(0)
ctx0, ctx1, s1 = c(), c(), c()
fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx0), 0)
fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx1), 1)
fake.cuCtxSetCurrent(ctx1)
fake.cuStreamCreateWithPriority(ctypes.byref(s1), 1, 0)
fake.cuCtxSetCurrent(ctx0)
rc = fake.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, s1, None, None)
print(json.dumps({"rc": rc, "mismatches": fake.fake_cuda_context_mismatches(), "distinct": ctx0.value != ctx1.value}))
"""


def test_fake_driver_refuses_a_launch_on_another_gpus_stream(fake_driver):  # noqa: F811
    res = last_json(run_python(FAKE_MISMATCH_SCRIPT, GK_LIBCUDA=fake_driver, FAKE_CUDA_DEVICES="2"))
    assert res == {"rc": 400, "mismatches": 1, "distinct": True}  # CUDA_ERROR_INVALID_HANDLE


# ------------------------------------------------------------------------------------------
# GPU: one GPU is enough
# ------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_device_past_the_last_gpu_is_a_device_error_before_the_first_block():
    from pygpukit_dsp import DeviceError
    from pygpukit_dsp.capabilities import capabilities
    from pygpukit_dsp.io import NullSink, NullSource

    n = len(capabilities()["gpus"])
    reads = [0]

    class Counting(NullSource):
        def read(self, k):
            reads[0] += 1
            return super().read(k)

    for backend in ("cuda", "auto"):
        p = Pipeline([stages.Gain(db=-3)], name="far", sample_rate=48000, channels=2, block_size=256,
                     backend=backend, device=n, source=Counting(duration_s=0.1), sink=NullSink())
        with pytest.raises(DeviceError, match=rf"pipeline 'far' asks for GPU {n} \(device: {n}\).*"
                                              rf"GPU {n} does not exist: this machine has {n} GPU\(s\)"):
            p.run()
    assert reads[0] == 0


# ------------------------------------------------------------------------------------------
# GPU: two or more GPUs (multi_gpu)
# ------------------------------------------------------------------------------------------


def _w1_shaped(name: str, *, device, seconds: float = 0.2, seed: int = 0, channels: int = 16,
               cost_us: float | None = None) -> tuple[Pipeline, np.ndarray]:
    """W1's shape, smaller: fir (64 taps) -> mix (4 x channels), realtime at 48 kHz / 256; and its input."""
    from pygpukit_dsp.io import NumpySink, NumpySource

    rng = np.random.default_rng(seed)
    x = signal(channels, int(48000 * seconds), False, seed + 100)
    p = Pipeline([stages.Fir(taps=rng.standard_normal(64) / 8), stages.Mix(matrix=rng.standard_normal((4, channels)))],
                 name=name, sample_rate=48000, channels=channels, block_size=256, backend="cuda",
                 device=device, qos={"class": "realtime", **({"cost_us": cost_us} if cost_us else {})},
                 source=NumpySource(array=x), sink=NumpySink())
    return p, x


@pytest.mark.gpu
@pytest.mark.multi_gpu
def test_gpu_each_gpu_has_its_own_context_and_pool():
    from pygpukit_dsp import _native

    d0, d1 = _native.Device(0), _native.Device(1)
    assert d0 != d1 and (d0.index, d1.index) == (0, 1)
    before = [d0.memory_stats()["in_use_bytes"], d1.memory_stats()["in_use_bytes"]]
    buf = _native.DeviceBuffer(d1, 64 << 20)
    assert buf.device == d1
    assert d1.memory_stats()["in_use_bytes"] - before[1] >= 64 << 20
    assert d0.memory_stats()["in_use_bytes"] == before[0]  # GPU 0's pool did not move
    host = _native.PinnedBuffer(d1, 4 << 20)
    x = np.frombuffer(host, dtype=np.float32)
    x[:] = np.arange(x.size, dtype=np.float32)
    stream = _native.Stream(d1)
    buf.copy_from_host(host, stream=stream)
    x[:] = 0
    buf.copy_to_host(host, stream=stream)
    stream.synchronize()
    assert np.array_equal(x, np.arange(x.size, dtype=np.float32))
    del buf


@pytest.mark.gpu
@pytest.mark.multi_gpu
def test_gpu_results_on_gpu_1_equal_the_cpu_backend():
    # fir (SciPy lfilter on the CPU) -> mix, an IIR and a spectrum: computed on GPU 1
    x = signal(8, 48000 // 5, False, 3)
    rng = np.random.default_rng(4)
    w1 = Pipeline([stages.Fir(taps=rng.standard_normal(129) / 11), stages.Mix(matrix=rng.standard_normal((3, 8)))],
                  sample_rate=48000, block_size=256)
    assert rel_err(w1.process(x, backend="cuda", device=1), w1.process(x, backend="cpu")) < 1e-5
    sos = Pipeline([stages.Sos(design={"kind": "butter", "order": 6, "cutoff_hz": 3000})], sample_rate=48000,
                   block_size=512)
    assert rel_err(sos.process(x, backend="cuda", device=1), sos.process(x, backend="cpu")) < 1e-4
    z = signal(2, 8 * 4096, True, 5)
    spec = Pipeline([stages.Stft(nfft=1024, hop=512, window="hann"), stages.Power()], sample_rate=1e6,
                    block_size=4096, dtype="complex64")
    assert rel_err(spec.process(z, backend="cuda", device=1), spec.process(z, backend="cpu")) < 1e-4


@pytest.mark.gpu
@pytest.mark.multi_gpu
def test_gpu_one_dispatcher_per_gpu_with_explicit_devices():
    from pygpukit_dsp import Session

    (a, xa), (b, xb) = _w1_shaped("a", device=0, seed=1), _w1_shaped("b", device=1, seed=2)
    s = Session([a, b])
    out = {o.pipeline: o for o in s.run()}
    assert (out["a"].gpu, out["b"].gpu) == (0, 1)
    assert sorted(s.dispatch.gpus) == [0, 1] and s.dispatch.gpus[1]._native.device_index == 1
    assert set(s.schedulers) == {"cuda", "cuda:1"}
    for p, x in ((a, xa), (b, xb)):
        o = out[p.name]
        assert o.scheduler.submitted == o.blocks and o.scheduler.dropped == 0
        assert rel_err(p.sink.result(), p.process(x, backend="cpu")) < 1e-5


@pytest.mark.gpu
@pytest.mark.multi_gpu
def test_gpu_device_auto_spreads_a_session_over_the_gpus_with_cpu_results():
    from pygpukit_dsp import Session
    from pygpukit_dsp.capabilities import usable_gpus

    gpus = usable_gpus()
    # declared costs: the placement is then exact (measured ones differ by a few us per stream)
    made = [_w1_shaped(f"w{i}", device="auto", seed=10 + i, cost_us=50) for i in range(2 * len(gpus))]
    pipelines = [p for p, _ in made]
    s = Session(pipelines)
    out = s.run()
    placed = [o.gpu for o in out]
    assert sorted(placed) == sorted(gpus * 2), placed
    assert sorted(s.dispatch.gpus) == sorted(gpus)
    for (p, x), o in zip(made, out):
        assert o.placement.startswith(f"GPU {o.gpu}: auto: ")
        assert o.scheduler.device == ("cuda" if o.gpu == 0 else f"cuda:{o.gpu}")
        assert o.scheduler.submitted == o.blocks and o.scheduler.dropped == 0
        assert rel_err(p.sink.result(), p.process(x, backend="cpu")) < 1e-5
