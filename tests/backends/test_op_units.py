"""Pacing units of the ops that once ran as one chunk (sos, resample, channelizer, gain,
delay, kernel, fir_mix): the scheduler can now split a throughput block of any of them, so that
it yields to realtime blocks.

* CPU-only, against the fake CUDA driver (tests/native/fake_libcuda.c, no kernel runs): each op's
  ``units_per_block`` follows its unit rule (docs/scheduler.md, "Units of the ops"); every split
  of a block into chunks is accepted and queued (``process_split``); a throughput stream of
  zero-delay ops (row copies, so the data is checked) beside a realtime stream under one
  dispatcher is launched in chunks of its units, its data intact, and realtime blocks are
  launched while a throughput block is part-way through (between its chunks).
* ``gpu``: a realtime stream keeps its deadline beside a heavy sos, and beside a heavy
  channelizer, throughput stream whose whole block takes longer than the deadline (split results
  are checked bit for bit in tests/backends/test_cuda_chunked.py).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from .test_cuda_engine import last_json, run_python
from .test_cuda_engine import fake_driver  # noqa: F401  (fixture)

FAKE_UNITS_SCRIPT = r"""
import json, threading, time
import numpy as np
import pygpukit_dsp_core
from pygpukit_dsp import _native

dev = _native.Device(0)
res = {}

def op(kind, ch, items, params, out=None, name=None):
    oc, oi = out if out else (ch, items)
    return {"kind": kind, "name": name or kind, "in": (ch, items, 0, "float32"),
            "out": (oc, oi, 0, "float32"), "params": params}

SRC = 'extern "C" __global__ void k(const float* a, float* b, long long c, long long n, long long ri, long long ro){}'
sec4 = np.array([[1.0, 0.1, 0.2, 1.0, -0.3, 0.1]] * 4)
from pygpukit_dsp.backends.cuda_ops.sos_scan import scan_params, scan_plan  # the lowering's scan plan
cases = {
    "gain": op("gain", 64, 4096, {"factor": 2.0}),
    "delay": op("delay", 64, 4096, {"delays": np.arange(64.0)}),
    "delay_zero": op("delay", 64, 4096, {"delays": np.zeros(64)}),
    "sos_lanes": op("sos", 64, 4096, {"sos": np.tile(sec4, (3, 1))}),     # 12 sections: a thread per lane
    "sos_chunked": op("sos", 2, 1 << 16, {"sos": sec4, **scan_params(scan_plan(sec4, 2, 1 << 16))}),  # the scan
    "resample": op("resample", 8, 4800, {"up": 2, "down": 3, "taps": np.ones(60)}, out=(8, 3200)),
    "resample_copy": op("resample", 8, 4800, {"up": 1, "down": 1, "taps": np.ones(1)}),
    "kernel_split": op("kernel", 64, 4096, {"source": SRC, "entry": "k", "threads": 256, "grid": 0,
                                            "params": np.zeros(0), "split": "channels"}),
    "kernel_whole": op("kernel", 64, 4096, {"source": SRC, "entry": "k", "threads": 256, "grid": 0,
                                            "params": np.zeros(0)}),
    "fir_mix_w1": op("fir_mix", 64, 256, {"taps": np.ones(256), "matrix": np.ones((16, 64))}, out=(16, 256)),
    "fir_mix_long": op("fir_mix", 64, 4096, {"taps": np.ones(256), "matrix": np.ones((16, 64))}, out=(16, 4096)),
    "fir_mix_split": op("fir_mix", 12, 2048, {"taps": np.ones(40), "matrix": np.ones((5, 12)), "kernel": "split"},
                        out=(5, 2048)),
}
units, splits = {}, {}
for name, o in cases.items():
    e = _native.StreamEngine(dev, [o], use_graph=False)
    U = units[name] = e.units_per_block
    x = np.zeros(o["in"][:2], np.float32)
    try:
        for cuts in ([U // 2], list(range(1, U)), list(range(2, U, 3)), []):
            e.process_split(0, x, False, [c for c in cuts if 0 < c < U])
        splits[name] = "ok"
    except Exception as exc:
        splits[name] = repr(exc)
    e.close()
res["units"], res["splits"] = units, splits
try:
    _native.StreamEngine(dev, [op("kernel", 4, 4096, dict(cases["kernel_split"]["params"]), out=(2, 4096))])
except ValueError as exc:
    res["split_needs_equal_channels"] = str(exc)

# A heavy throughput stream of row copies (4 zero-delay ops of 64 units each) beside a realtime
# stream on one dispatcher.
zero = {"delays": np.zeros(64)}
tp = _native.StreamEngine(dev, [op("delay", 64, 4096, zero, name=f"d{i}") for i in range(4)], use_graph=True)
rt = _native.StreamEngine(dev, [op("delay", 4, 64, {"delays": np.zeros(4)}, name="r")], use_graph=False,
                          single_stream=True, inline_submit=True)
sched = pygpukit_dsp_core.Scheduler(quantum_ns=250_000)
rt_id = sched.register_stream("rt", "realtime", period_ns=2_000_000, deadline_ns=2_000_000, cost_ns=20_000)
# declared 64 ms per block: 250 us per unit, one unit per chunk under the 250 us quantum
tp_id = sched.register_stream("tp", "throughput", cost_ns=64_000_000, units_per_block=tp.units_per_block)
disp = _native.Dispatcher(dev, sched.capsule(), spin_us=200)
rt.attach(disp, rt_id)
tp.attach(disp, tp_id)
res["tp_units"] = tp.units_per_block
B, ok, done = 6, {"tp": True, "rt": True}, threading.Event()
X = np.arange(64 * 4096, dtype=np.float32).reshape(64, 4096)
tp.set_trace(B)
rt.set_trace(1 << 14)
def run_tp():
    for b in range(B):
        ok["tp"] &= bool(np.array_equal(tp.process(b % 2, X + b, False), X + b))
    done.set()
def run_rt():
    y = np.ones((4, 64), np.float32)
    n = 0
    while not done.is_set() or n < 20:
        ok["rt"] &= bool(np.array_equal(rt.process(n % 2, y * n, False), y * n))
        n += 1
        # paced, as a realtime stream is: back to back, the trace's ring (the last blocks) could
        # hold only blocks after the heavy stream's last chunk (it did once on a loaded 2-core VM)
        time.sleep(0.0001)
    res["rt_blocks"] = n
threads = [threading.Thread(target=run_tp), threading.Thread(target=run_rt)]
for t in threads: t.start()
for t in threads: t.join()
res["data_ok"] = ok
tp_spans = [(r[2], r[3]) for r in tp.trace().tolist()]          # launch_begin, launched (last chunk)
rt_launches = [r[2] for r in rt.trace().tolist()]
res["rt_inside_tp"] = sum(any(a < t < b for a, b in tp_spans) for t in rt_launches)
res["tp_stats"] = {k: v for k, v in sched.stream_stats(tp_id).items() if k in ("submitted", "completed", "chunks")}
res["rt_stats"] = {k: v for k, v in sched.stream_stats(rt_id).items() if k in ("submitted", "completed", "missed")}
res["tp_counters"] = tp.counters()
disp.close()
rt.close(); tp.close()
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def fake_units(fake_driver: str) -> dict:  # noqa: F811
    pytest.importorskip("pygpukit_dsp_core")
    return last_json(run_python(FAKE_UNITS_SCRIPT, GK_LIBCUDA=fake_driver, GK_JIT_DISK_CACHE="0", timeout=300))


def test_fake_every_op_reports_the_units_of_its_rule(fake_units):
    # docs/scheduler.md, "Units of the ops": dsp::split_units(count, elements per item, align),
    # <= 64 units of >= 4096 elements each
    assert fake_units["units"] == {
        "gain": 64,            # 262144 floats, units of 4096
        "delay": 64,           # one channel (4096 samples + history) per unit
        "delay_zero": 64,
        "sos_lanes": 64,       # 4096 samples of 64 lanes: ranges of 64 samples (>= 4096 over the lanes)
        "sos_chunked": 64,     # 2048 chunks of 32 samples in 32 unit groups: steps 1 and 5 of each
        "resample": 7,         # 3200 outputs x 8 channels: ranges of 512 outputs
        "resample_copy": 1,    # a 1/1 ratio is a copy
        "kernel_split": 64,    # split: channels: one channel of 4096 per unit
        "kernel_whole": 1,     # split: none (the default): a custom kernel may mix channels
        "fir_mix_w1": 4,       # W1: 16 tiles of 16 samples, 4 per unit (64 ch x 64 samples)
        "fir_mix_long": 64,    # 256 tiles, 4 per unit
        "fir_mix_split": 6,    # 128 tiles of 12 ch x 16 samples, 22 per unit (>= 4096), the last of 18
    }


def test_fake_every_split_of_every_op_is_queued(fake_units):
    assert set(fake_units["splits"].values()) == {"ok"}, fake_units["splits"]


def test_fake_kernel_split_channels_needs_equal_channel_counts(fake_units):
    assert "split: channels" in fake_units["split_needs_equal_channels"]


def test_fake_heavy_throughput_stream_is_launched_in_unit_chunks_and_yields_to_realtime(fake_units):
    assert fake_units["tp_units"] == 4 * 64
    assert fake_units["data_ok"] == {"tp": True, "rt": True}
    tp = fake_units["tp_stats"]
    assert tp["submitted"] == tp["completed"] == 6
    assert tp["chunks"] == 6 * 256  # declared 250 us per unit, quantum 250 us: one unit a chunk
    assert fake_units["tp_counters"]["chunks"] == 6 * 256
    rt = fake_units["rt_stats"]
    assert rt["submitted"] == rt["completed"] + rt["missed"] == fake_units["rt_blocks"]
    # realtime blocks were launched while a throughput block was part-way through its chunks
    assert fake_units["rt_inside_tp"] >= 1, {k: fake_units[k] for k in ("rt_blocks", "rt_stats", "tp_stats")}


# ------------------------------------------------------------------------------------------
# GPU: a realtime stream keeps its deadline beside a heavy throughput stream of sos / channelizer
# ------------------------------------------------------------------------------------------

RT_PERIOD_NS = 2_000_000
RT_DEADLINE_NS = 2_000_000
RT_BLOCKS = 250


def _heavy(kind: str):
    from pygpukit_dsp import Pipeline, stages

    if kind == "sos":
        import scipy.signal as ss

        # 12 sections: the one-thread-per-lane kernel; 64 channels x 2^18 samples: the recursion
        # walks 262144 samples (tens of ms per block), units of 4096 samples
        sos = np.vstack([ss.butter(8, 0.2, output="sos"), ss.cheby1(8, 0.5, 0.3, output="sos"),
                         ss.butter(8, 0.4, output="sos")])
        return Pipeline([stages.Sos(sos=sos)], name="heavy_sos", sample_rate=1e6, channels=64,
                        block_size=1 << 18, qos={"class": "throughput"})
    # 16 complex channels x 2^20 samples, M = 64 with 512 taps per subchannel: the branch sums make
    # the block several ms of GPU time (with 64 taps it took 1.4 ms on the H200, under 2 deadlines)
    return Pipeline([stages.Channelizer(channels=64, taps_per_channel=512)], name="heavy_channelizer",
                    sample_rate=1e6, channels=16, block_size=1 << 20, dtype="complex64",
                    qos={"class": "throughput"})


def _w1(block: int = 256):
    from pygpukit_dsp import Pipeline, stages

    rng = np.random.default_rng(1)
    return Pipeline([stages.Fir(taps=rng.standard_normal(256) / 16), stages.Mix(matrix=rng.standard_normal((16, 64)))],
                    name="w1", sample_rate=48_000, channels=64, block_size=block,
                    qos={"class": "realtime", "deadline_ms": RT_DEADLINE_NS / 1e6})


def _open(p):
    from pygpukit_dsp.backends import open_backend

    return open_backend(p, p.propagate(p.input_spec()), "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["sos", "channelizer"])
def test_gpu_realtime_keeps_its_deadline_beside_a_heavy_throughput_stream(kind: str):
    import time

    from pygpukit_dsp_core import Scheduler

    from pygpukit_dsp.backends.cuda_dispatch import CudaDispatch

    heavy, w1 = _heavy(kind), _w1()
    tp, rt = _open(heavy), _open(w1)
    try:
        spec = heavy.propagate(heavy.input_spec()).input
        rng = np.random.default_rng(2)
        x = rng.standard_normal(spec.block_shape).astype(spec.np_dtype)
        if spec.dtype == "complex64":
            x = (x + 1j * rng.standard_normal(spec.block_shape)).astype(np.complex64)
        tp.process(x)  # uploads the block; the loaded blocks below compute on it (resident)
        # the block's GPU time with its input resident (what the pacing splits: the pumped blocks
        # below copy nothing; a timed process() would add 2 x 128 MiB of copies for the channelizer)
        inst = tp.instrument()
        whole_ms = float(np.median(inst.time_resident(3, x))) * 1e3
        # the whole block takes longer than the realtime deadline: unsplit, a realtime block
        # arriving as it starts would miss
        assert whole_ms > 2 * RT_DEADLINE_NS / 1e6, f"{kind} block only {whole_ms:.2f} ms"
        assert tp.units_per_block >= 16
        # ... and one unit fits between realtime blocks: the pacing holds a unit that fits no gap
        # until the realtime stream ends (docs/scheduler.md), as sos's 64 units of ~3 ms each did
        assert whole_ms / tp.units_per_block < RT_DEADLINE_NS / 2e6, (whole_ms, tp.units_per_block)
        tp.process(x)  # time_resident reset the state; the slots hold the block again
        inst.resident = True
        rt_cost = []
        xr = rng.standard_normal((64, 256)).astype(np.float32)
        for _ in range(50):
            t = time.perf_counter_ns()
            rt.process(xr)
            rt_cost.append(time.perf_counter_ns() - t)
        rt.reset()
        sched = Scheduler(quantum_ns=100_000)
        rt_id = sched.register_stream("w1", "realtime", period_ns=RT_PERIOD_NS, deadline_ns=RT_DEADLINE_NS,
                                      cost_ns=int(np.percentile(rt_cost, 99)))
        tp_id = sched.register_stream(heavy.name, "throughput", units_per_block=tp.units_per_block)
        with CudaDispatch(sched, spin_us=RT_PERIOD_NS // 1000 + 100) as dispatch:
            dispatch.attach(rt, rt_id)
            dispatch.attach(tp, tp_id)
            stop = threading.Event()
            pumped: list[int] = []
            pump = threading.Thread(target=lambda: pumped.extend(inst.pump_resident(60.0)), daemon=True)
            watcher = threading.Thread(target=lambda: (stop.wait(), inst.stop_pump()), daemon=True)
            pump.start()
            watcher.start()
            time.sleep(0.05)
            try:
                t_next = time.perf_counter_ns()
                for _ in range(RT_BLOCKS):
                    t_next += RT_PERIOD_NS
                    while time.perf_counter_ns() < t_next:
                        time.sleep(0)
                    rt.process(xr)
            finally:
                stop.set()
                # bounded: on an H100 the pump once had not returned 25 s after stop_pump()
                # (it runs for at most 60 s); a stuck pump fails here instead of hanging the suite
                pump.join(timeout=20.0)
            if pump.is_alive():
                pump.join(timeout=60.0)  # let it end (pump_resident's own 60 s) before closing
                pytest.fail(f"{kind}: pump_resident() did not return within 20 s of stop_pump()")
            s_rt, s_tp = dict(dispatch.stream_stats(rt_id)), dict(dispatch.stream_stats(tp_id))
        assert len(pumped) >= 2  # the heavy stream ran throughout
        assert s_tp["chunks"] > s_tp["completed"] >= 2  # ... in chunks of its units
        # the scheduler's accounting (hand-over to GPU completion): no realtime block missed
        assert s_rt["submitted"] == RT_BLOCKS and s_rt["missed"] == 0, s_rt
        assert s_rt["latency"]["max"] < RT_DEADLINE_NS
    finally:
        tp.close()
        rt.close()
