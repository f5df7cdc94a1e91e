"""Admission's rehearsal on CUDA engines (pygpukit_dsp/admission.py, ``rehearse``), on the fake
driver (CPU only): it drives every engine through a scratch dispatcher and leaves nothing behind.
Its GPU tests are in tests/test_admission.py."""

from __future__ import annotations

from .test_cuda_engine import fake_driver, fake_mapped_driver  # noqa: F401  (fixtures)
from .test_cuda_engine import last_json, run_python

FAKE_SCRIPT = r"""
import ctypes, gc, json, os
import numpy as np
from pygpukit_dsp import Pipeline, Session, admission, stages
from pygpukit_dsp.backends import choose_backend
from pygpukit_dsp.backends.cuda_engine import CudaEngine
from pygpukit_dsp.io import NullSink, NullSource

fake = ctypes.CDLL(os.environ["GK_LIBCUDA"])

def rt(name):
    return Pipeline([stages.Gain(db=0)], name=name, sample_rate=48000, channels=2, block_size=480,
                    backend="cuda", qos={"class": "realtime"}, source=NullSource(duration_s=0.05), sink=NullSink())

res = {}
p = rt("x")
chain = p.specs()
engines = [CudaEngine(p, chain, choose_backend(p, chain, "cuda")) for _ in range(3)]
run = admission.rehearse(engines, [chain.input] * 3, [10_000_000] * 3, seconds=0.1, warmup_s=0.05)
res["costs"] = run.device_ns
res["dispatch"] = [run.dispatch_ns, run.blocks,
                   run.costs() == [max(round(c / run.overlap), round(run.dispatch_ns * (0.9 / 0.85)))
                                   for c in run.device_ns]]
res["overlap"] = run.overlap
res["latencies"] = [len(a) for a in run.latency_ns]
tail = run.tail()
res["tail"] = None if tail is None else [tail.blocks, tail.threshold_ns, tail.max_ns]
res["attached_after"] = [e._dispatch is not None for e in engines]
for e in engines:
    e.close()

# a session whose streams are crowded (forced: the fake driver's costs are tiny) is rehearsed
admission.crowded = lambda *a, **k: True
s = Session([rt("a"), rt("b")])
out = s.run()
res["blocks"] = [o.blocks for o in out]
res["admission"] = [o.admission for o in out]
res["formatted"] = out[0].format()
del s, out
gc.collect()
res["live_streams"] = fake.fake_cuda_live_streams()
res["live_events"] = fake.fake_cuda_live_events()
print(json.dumps(res))
"""


def test_fake_rehearsal_drives_every_engine_and_a_crowded_session_reports_it(fake_mapped_driver):  # noqa: F811
    res = last_json(run_python(FAKE_SCRIPT, timeout=300, GK_LIBCUDA=fake_mapped_driver, GK_JIT_DISK_CACHE="0"))
    assert len(res["costs"]) == 3 and all(c > 0 for c in res["costs"])  # every engine's blocks measured
    # ... and the dispatcher's serial work per block they all passed through
    dispatch_ns, blocks, costs_take_the_larger = res["dispatch"]
    assert dispatch_ns > 0 and blocks >= 3 and costs_take_the_larger
    assert res["overlap"] >= 1.0  # the GPU timeline was recorded (the fake driver's clock)
    # the second window (1 s at 10-ms periods) gave every engine's latencies from release, and their tail
    assert len(res["latencies"]) == 3 and all(n >= 90 for n in res["latencies"])
    blocks, threshold_ns, max_ns = res["tail"]
    assert blocks == sum(res["latencies"]) and 0 < threshold_ns <= max_ns
    assert res["attached_after"] == [False] * 3  # the scratch dispatcher let them go
    assert res["blocks"] == [5, 5]
    for text in res["admission"]:
        assert "among the 2 realtime streams of its GPU rehearsed together for 1.3 s" in text
    assert "rehearsed together" in res["formatted"]
    assert res["live_streams"] == 0 and res["live_events"] == 0
