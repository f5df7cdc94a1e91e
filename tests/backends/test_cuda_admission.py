"""Admission on CUDA engines, on the fake driver (CPU only): the rehearsal (pygpukit_dsp/admission/
rehearsal.py, ``rehearse``) drives every engine through a scratch dispatcher and leaves nothing
behind; the machine's calibration (admission/calibrate.py) is measured on first need, cached per
GPU and driver, shown and redone by ``gk-stream devices``. The GPU tests are in
tests/admission/test_admitting.py, test_rehearsal.py and test_calibration.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_cuda_engine import PACKAGE_PARENT, fake_driver  # noqa: F401  (fixtures)
from .test_cuda_engine_mapped_io import fake_mapped_driver  # noqa: F401  (a fixture)
from .test_cuda_engine import last_json, run_python

FAKE_SCRIPT = r"""
import ctypes, gc, json, os
import numpy as np
from pygpukit_dsp import Pipeline, Session, admission, stages
from pygpukit_dsp.admission import admitting
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
res["attached_after"] = [e.dispatch is not None for e in engines]
for e in engines:
    e.close()

# a session whose streams are crowded (forced: the fake driver's costs are tiny) is rehearsed, its
# GPU's calibration measured first (none is cached yet); the fake GPU's latencies are the host's,
# and a loaded host's queue can reach past 10 ms within the tail's 60 s: a short horizon here
admitting.crowded = lambda *a, **k: True
from dataclasses import replace
s = Session([rt("a"), rt("b")], policy=replace(admission.DEFAULT_POLICY, tail_horizon_s=0.001))
out = s.run()
res["blocks"] = [o.blocks for o in out]
res["admission"] = [o.admission for o in out]
res["formatted"] = out[0].format()
result = s._runners[0].admission
res["calibration"] = result.calibration.to_dict()
res["cached"] = sorted(os.listdir(os.path.join(os.environ["GK_CACHE_DIR"], "calibration")))
res["result"] = [result.admitted, result.device, result.cost_ns == s.stream_stats("a")["declared_cost_ns"],
                 result.rehearsal.dispatcher_share, result.cost_source]
del s, out
gc.collect()
res["live_streams"] = fake.fake_cuda_live_streams()
res["live_events"] = fake.fake_cuda_live_events()
print(json.dumps(res))
"""


def test_fake_rehearsal_drives_every_engine_and_a_crowded_session_reports_it(fake_mapped_driver,  # noqa: F811
                                                                            tmp_path):
    res = last_json(run_python(FAKE_SCRIPT, timeout=300, GK_LIBCUDA=fake_mapped_driver, GK_JIT_DISK_CACHE="0",
                               GK_CACHE_DIR=str(tmp_path)))
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
    # the GPU's calibration, measured on first need and cached under GK_CACHE_DIR
    cal = res["calibration"]
    assert cal["gpu_name"] == "Fake GPU" and cal["dispatch_ns"] > 0 and cal["hold_ns"] > 0 and cal["overlap"] >= 1
    assert res["cached"] == [Path(cal["path"]).name] and cal["path"].startswith(str(tmp_path / "calibration"))
    admitted, device, cost_is_the_scheduler_s, share, source = res["result"]
    assert (admitted, device, cost_is_the_scheduler_s, source) == (True, "cuda", True, "measured")
    assert 0 < share <= 0.85  # min(the policy's cap, 1 - the calibration's hold / the 10-ms deadline)
    assert share == pytest.approx(min(0.85, 1 - cal["hold_ns"] / 10_000_000))


def _devices(driver: str, cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = dict(os.environ, GK_LIBCUDA=driver, GK_JIT_DISK_CACHE="0", GK_CACHE_DIR=str(cache), **env,
                   PYTHONPATH=os.pathsep.join([str(PACKAGE_PARENT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", "devices", *args], env=environ,
                          capture_output=True, text=True, timeout=300, cwd=cache)


def test_fake_calibration_is_cached_per_gpu_and_driver_and_redone_by_calibrate(fake_mapped_driver,  # noqa: F811
                                                                               tmp_path):
    def admission(*args, **env):
        r = _devices(fake_mapped_driver, tmp_path, "--json", *args, **env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["admission"]

    first = admission()
    assert first["policy"]["u_max"] == 0.9 and first["policy"]["dispatcher_busy_cap"] == 0.85
    assert first["calibration"] == {"0": None}  # nothing cached yet, and devices does not measure
    measured = admission("--calibrate")["calibration"]["0"]
    assert measured["gpu_name"] == "Fake GPU" and measured["driver"] and measured["streams"] == 64
    assert measured["dispatch_ns"] > 0 and measured["hold_ns"] > 0 and measured["blocks"] > 0
    assert len(measured["hold_windows_ns"]) == measured["windows"] == 5
    assert measured["hold_ns"] == min(measured["hold_windows_ns"])  # the least of them
    path = Path(measured["path"])
    assert path.parent == tmp_path / "calibration" and "Fake-GPU" in path.name and "driver-" in path.name
    assert json.loads(path.read_text())["dispatch_ns"] == measured["dispatch_ns"]
    # read back, not measured: a figure written into the cache is what devices shows
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "dispatch_ns": 1}))
    assert admission()["calibration"]["0"]["dispatch_ns"] == 1
    # another GPU (another name) has no calibration under that key
    assert admission(FAKE_CUDA_NAME="Other GPU")["calibration"] == {"0": None}
    # --calibrate measures it again and replaces the cached figures
    again = admission("--calibrate")["calibration"]["0"]
    assert again["dispatch_ns"] > 1 and json.loads(path.read_text())["dispatch_ns"] == again["dispatch_ns"]
    text = _devices(fake_mapped_driver, tmp_path)
    assert text.returncode == 0, text.stderr
    assert "admission policy: u_max 0.9" in text.stdout
    assert f"admission gpu 0: the dispatcher's work {again['dispatch_ns'] / 1e3:.1f} us per block" in text.stdout
