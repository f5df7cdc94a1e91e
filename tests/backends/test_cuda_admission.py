"""Admission's rehearsal on CUDA engines (pygpukit_dsp/admission.py, ``rehearse``): a GPU's
realtime streams run together before the first block. On the fake driver (CPU only): the
rehearsal drives every engine through a scratch dispatcher and leaves nothing behind; on the
GPU: each engine's device time among the others, and a session admitted with it."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, Session, stages
from pygpukit_dsp.io import NullSink, NullSource

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
costs = admission.rehearse(engines, [chain.input] * 3, [10_000_000] * 3, seconds=0.1, warmup_s=0.05)
res["costs"] = costs
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
    assert res["attached_after"] == [False] * 3  # the scratch dispatcher let them go
    assert res["blocks"] == [5, 5]
    for text in res["admission"]:
        assert "among the 2 realtime streams of its GPU rehearsed together for 0.3 s" in text
    assert "rehearsed together" in res["formatted"]
    assert res["live_streams"] == 0 and res["live_events"] == 0


# ----------------------------------------------------------------------------- on the GPU


def _w1(name: str) -> Pipeline:
    rng = np.random.default_rng(1)
    return Pipeline([stages.Fir(taps=rng.standard_normal(256) / 16), stages.Mix(matrix=rng.standard_normal((16, 64)))],
                    name=name, sample_rate=48_000, channels=64, block_size=256, backend="cuda",
                    qos={"class": "realtime"}, source=NullSource(duration_s=0.1), sink=NullSink())


@pytest.mark.gpu
def test_gpu_rehearsal_times_each_engine_among_the_others_and_leaves_its_state_as_it_was():
    from pygpukit_dsp.admission import measure_engine_cost, rehearse
    from pygpukit_dsp.backends import open_backend

    p = _w1("w1")
    chain = p.specs()
    engines = [open_backend(p, chain, "cuda") for _ in range(32)]
    ref = open_backend(p, chain, "cuda")
    try:
        alone = measure_engine_cost(engines[0], chain.input)
        costs = rehearse(engines, [chain.input] * 32, [int(chain.input.block_period * 1e9)] * 32)
        assert len(costs) == 32
        # each engine's blocks were timed on the GPU: of the order of its time alone, not of the host's
        for c in costs:
            assert 0.5 * alone.gpu_ns < c < 20 * alone.gpu_ns, (c, alone)
        x = np.random.default_rng(5).standard_normal((64, 256)).astype(np.float32)
        want = ref.process(x)
        for e in engines:
            assert e._dispatch is None
            np.testing.assert_array_equal(e.process(x), want)  # state reset after the rehearsal
    finally:
        for e in engines + [ref]:
            e.close()


@pytest.mark.gpu
def test_gpu_a_crowded_session_is_admitted_by_its_rehearsal(monkeypatch):
    # any share counts as crowded here: four W1 streams are rehearsed together, and each is
    # admitted with the larger of its device time alone and among the others
    from pygpukit_dsp import admission

    monkeypatch.setattr(admission, "REHEARSAL_SHARE", 0.0)
    s = Session([_w1(f"w{i}") for i in range(4)])
    out = s.run()
    for o in out:
        assert o.blocks > 0 and "among the 4 realtime streams of its GPU rehearsed together" in o.admission
    r = s._runners[0]
    assert r.rehearsal.device_ns > 0 and r.rehearsal.alone_ns == r.measured_cost.device_ns
    assert s.stream_stats("w0")["declared_cost_ns"] == max(r.measured_cost.device_ns, r.rehearsal.device_ns)
