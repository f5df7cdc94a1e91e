"""A graph engine's native block step (native/engine/graph_ops.cpp, StreamEngine::process_graph):
each source's full block into its slice, the run, and each sink's full block out, in one call.

Against the fake driver of tests/backends/test_cuda_engine.py (CPU-only): it copies memory and runs
no kernel, so the plan's ops are zero delays (device copies), each reading one source's slice and
writing one sink's. The GPU path is tests/backends/test_cuda_graph.py's (``gpu``).
"""

from __future__ import annotations

import pytest

from .test_cuda_engine import fake_driver, last_json, run_python  # noqa: F401  (fake_driver: the fixture)

SCRIPT = r"""
import json
import numpy as np
from pygpukit_dsp import _native

dev = _native.Device(0)
res = {}
zero = {"delays": np.zeros(2)}
ops = [{"kind": "delay", "name": n, "in": (2, 16, 0, "float32"), "out": (2, 16, 0, "float32"), "params": zero}
       for n in ("a", "b")]
node = lambda offset, out: {"in": (-1, offset), "out": (-2, out), "copies": [], "valid_from": [-1], "lane": 0,
                            "waits": [], "signals": False}
plan = {"items": 16, "buffers": [], "nodes": [node(0, 0), node(256, 256)], "sources": [(0, 128), (256, 128)],
        "sinks": [(0, 128, 0), (256, 128, 1)], "final_copies": [], "lanes": 1, "in_bytes": 384, "out_bytes": 384}
e = _native.StreamEngine(dev, ops, use_graph=False, graph=plan)
rng = np.random.default_rng(1)
same = []
for b in range(5):
    x = [rng.standard_normal((2, 16)).astype(np.float32) for _ in range(2)]
    y = [np.full((2, 16), np.nan, np.float32) for _ in range(2)]
    n = e.process_graph(b % 2, x, y)
    same.append(n == 16 and all(np.array_equal(a, c) for a, c in zip(x, y)))
res["same"] = same
res["counters"] = {k: e.counters()[k] for k in ("blocks", "h2d_copies", "d2h_copies", "completion_waits")}
x = [np.zeros((2, 16), np.float32)] * 2
y = [np.zeros((2, 16), np.float32) for _ in range(2)]
bad = {"one_source": ([x[0]], y), "short_source": ([x[0], x[1][:, :8].copy()], y),
       "one_sink": (x, y[:1]), "short_sink": (x, [y[0], np.zeros((2, 8), np.float32)]),
       "strided_source": ([np.zeros((2, 32), np.float32)[:, ::2], x[1]], y),
       "read_only_sink": (x, [y[0], np.zeros((2, 16), np.float32).copy()])}
bad["read_only_sink"][1][1].flags.writeable = False
errors = {}
for label, (ins, outs) in bad.items():
    try:
        e.process_graph(0, ins, outs)
        errors[label] = None
    except ValueError as exc:
        errors[label] = str(exc)
try:
    e.process_graph(3, x, y)
except ValueError as exc:
    errors["no_slot"] = str(exc)
res["errors"] = errors
e.close()
try:
    e.process_graph(0, x, y)
except Exception as exc:
    res["closed"] = str(exc)
chain = _native.StreamEngine(dev, ops[:1], use_graph=False)
try:
    chain.process_graph(0, [x[0]], [y[0]])
except ValueError as exc:
    res["chain"] = str(exc)
chain.close()
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def results(fake_driver: str) -> dict:  # noqa: F811
    return last_json(run_python(SCRIPT, GK_LIBCUDA=fake_driver, GK_JIT_DISK_CACHE="0"))


def test_process_graph_fills_each_source_runs_and_copies_each_sink_out(results):
    assert results["same"] == [True] * 5
    # one H2D per source, one D2H per sink, one wait per block
    assert results["counters"] == {"blocks": 5, "h2d_copies": 10, "d2h_copies": 10, "completion_waits": 5}


def test_process_graph_refuses_arrays_that_do_not_fit_the_plan(results):
    e = results["errors"]
    assert "1 source arrays for 2 sources" in e["one_source"]
    assert "source 1's array holds 64 bytes; its full block is 128" in e["short_source"]
    assert "1 sink arrays for 2 sinks" in e["one_sink"]
    assert "sink 1's array holds 64 bytes; its full block is 128" in e["short_sink"]
    assert "C-contiguous source blocks" in e["strided_source"]
    assert "writeable sink arrays" in e["read_only_sink"]
    assert "slot 3 does not exist" in e["no_slot"]
    assert "closed" in results["closed"]
    assert "is a graph engine's" in results["chain"]
