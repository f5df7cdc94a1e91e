"""The fused fir -> mix op (cuda_ops/fir_mix.py, native/ops/fir_mix.cpp, kernels/fir_mix.cu), the
GK_DISABLE_FUSIONS switch of lower_pipeline, and the engine's inline_submit path (W1's latency).

* CPU-only: when the fusion applies (W1) and when it returns None (the two ops run);
  GK_DISABLE_FUSIONS; inline_submit against the fake CUDA driver of test_cuda_engine.py (counters,
  data through zero-delay ops, the fallback to the worker while blocks are in flight).
* ``gpu``: the fused op against the CPU backend over several blocks with a partial final block
  (relative error ||cuda - cpu|| / ||cpu|| < 1e-5: float32 sums in another order than
  lfilter/BLAS), against the unfused CUDA ops fir -> mix (< 1e-6: the split kernel sums in the
  same order, the cluster kernel's mix in groups of 8 channels: float32 rounding), both kernels
  forced through the op's ``kernel`` parameter, and inline_submit on a real GPU.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import pygpukit_dsp.backends.cuda_ops  # noqa: F401  (registers the lowerings and fusions)
from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.backends import BackendChoice, cuda_lowering
from pygpukit_dsp.backends.cuda_lowering import lower_pipeline
from pygpukit_dsp.backends.cuda_ops.fir_mix import FUSED_MAX_ENTRIES, fir_mix_reason, fuse_fir_mix
from pygpukit_dsp.signal import SignalSpec

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
W1 = REPO / "benchmarks" / "w1.yaml"

CPU_RTOL = 1e-5
UNFUSED_RTOL = 1e-6


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def rand(shape, seed: int, complex_: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    return a + 1j * rng.standard_normal(shape) if complex_ else a


def fir_mix_pipeline(c_in: int, c_out: int, L: int, block: int, per_channel: bool = False,
                     qos: dict | None = None, seed: int = 0) -> Pipeline:
    taps = rand((c_in, L) if per_channel else (L,), seed) / np.sqrt(L)
    return Pipeline([stages.Fir(taps=taps, name="lp"), stages.Mix(matrix=rand((c_out, c_in), seed + 1), name="mx")],
                    sample_rate=48000, channels=c_in, block_size=block, qos=qos)


@pytest.fixture
def native_has_fir_mix(monkeypatch):
    """lower_pipeline as a build with the fir_mix op sees it (independent of the local build)."""
    kinds = cuda_lowering.native_op_kinds() | {"fir", "mix", "fir_mix"}
    monkeypatch.setattr(cuda_lowering, "native_op_kinds", lambda: kinds)


# ------------------------------------------------------------------ lowering (no GPU)


def test_w1_lowers_to_one_fir_mix_op(native_has_fir_mix, monkeypatch):
    monkeypatch.delenv("GK_DISABLE_FUSIONS", raising=False)
    w1 = Pipeline.from_yaml(W1)
    ops = lower_pipeline(w1, w1.specs())
    assert [op.kind for op in ops] == ["fir_mix"]
    op = ops[0]
    assert op.params["taps"].shape == (256,) and op.params["taps"].dtype == np.float64
    assert op.params["matrix"].shape == (16, 64) and op.params["matrix"].dtype == np.float64
    assert (op.spec_in.channels, op.spec_in.block_size, op.spec_out.channels) == (64, 256, 16)
    assert op.spec_out.dtype == "float32" and op.name == f"{w1.stages[0].name}+{w1.stages[1].name}"


def test_per_channel_taps_and_forced_direct_fuse(native_has_fir_mix):
    p = fir_mix_pipeline(7, 16, 255, 64, per_channel=True)
    ops = lower_pipeline(p, p.specs())
    assert [op.kind for op in ops] == ["fir_mix"] and ops[0].params["taps"].shape == (7, 255)
    forced = Pipeline([stages.Fir(taps=rand(300, 1), method="matmul"), stages.Mix(matrix=rand((2, 3), 2))],
                      sample_rate=48000, channels=3, block_size=64)
    assert [op.kind for op in lower_pipeline(forced, forced.specs())] == ["fir_mix"]


def test_the_native_build_registers_fir_mix():
    native = pytest.importorskip("pygpukit_dsp._native")
    assert "fir_mix" in native.registered_ops()


def _pair(taps, matrix, spec: SignalSpec, method: str = "auto"):
    fir = stages.Fir(taps=taps, method=method)
    mix = stages.Mix(matrix=matrix)
    mid = spec if spec.domain == "frames" else fir.output_spec(spec)
    specs = [spec, mid, spec.with_(channels=np.asarray(matrix).shape[-2])]
    return fir, mix, specs


TIME = SignalSpec(48000.0, 4, 256)

DECLINED = {
    "complex input": (rand(16, 1), rand((2, 4), 2), SignalSpec(48000.0, 4, 256, "complex64"), "auto",
                      "input is complex"),
    "complex taps": (rand(16, 1, True), rand((2, 4), 2), TIME, "auto", "taps are complex"),
    "complex matrix": (rand(16, 1), rand((2, 4), 2, True), TIME, "auto", "matrix is complex"),
    "per-bin matrix": (rand(16, 1), rand((5, 2, 4), 2), TIME, "auto", "one per bin"),
    "frames domain": (rand(16, 1), rand((2, 4), 2), SignalSpec(48000.0, 4, 8, "float32", "frames", 5),
                      "auto", "frames"),
    "too many taps": (rand(5000, 1), rand((2, 4), 2), TIME, "auto", "overlap-save"),
    "overlap_save forced": (rand(64, 1), rand((2, 4), 2), TIME, "overlap_save", "overlap-save"),
    "matrix too large": (rand(16, 1), rand((1025, 4), 2), TIME, "auto", f"more than {FUSED_MAX_ENTRIES}"),
}


@pytest.mark.parametrize("case", list(DECLINED))
def test_fusion_declines_what_the_fused_kernel_does_not_do(case):
    taps, matrix, spec, method, why = DECLINED[case]
    fir, mix, specs = _pair(taps, matrix, spec, method)
    assert why in fir_mix_reason(fir, mix, spec)
    assert fuse_fir_mix([fir, mix], specs) is None


def test_forced_direct_beyond_the_direct_limit_declines_and_the_fir_lowering_reports_it():
    fir, mix, specs = _pair(rand(4097, 1), rand((2, 4), 2), TIME, "direct")
    assert "4096" in fir_mix_reason(fir, mix, TIME)
    assert fuse_fir_mix([fir, mix], specs) is None


def test_declined_pair_lowers_to_the_two_ops(native_has_fir_mix):
    p = Pipeline([stages.Fir(taps=rand(16, 1)), stages.Mix(matrix=rand((2, 4), 2))], sample_rate=48000,
                 channels=4, block_size=256, dtype="complex64")
    assert [op.kind for op in lower_pipeline(p, p.specs())] == ["fir", "mix"]


@pytest.mark.parametrize("value,fused", [("1", False), ("yes", False), ("0", True), ("", True)])
def test_gk_disable_fusions_lowers_every_stage_on_its_own(native_has_fir_mix, monkeypatch, value, fused):
    monkeypatch.setenv("GK_DISABLE_FUSIONS", value)
    w1 = Pipeline.from_yaml(W1)
    kinds = [op.kind for op in lower_pipeline(w1, w1.specs())]
    assert kinds == (["fir_mix"] if fused else ["fir", "mix"])


# ------------------------------------------------------------------ inline_submit on the fake driver (no GPU)


def _engine_tests():
    """test_cuda_engine.py's fake-driver helpers (the graph entry points, run_python, last_json)."""
    spec = importlib.util.spec_from_file_location("gk_test_cuda_engine", HERE / "test_cuda_engine.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fake_inline_results(tmp_path_factory) -> dict:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to build the fake CUDA driver")
    from pygpukit_dsp.capabilities import capabilities

    if not capabilities()["nvrtc"]["found"]:
        pytest.skip("NVRTC is needed to compile the ops' kernels (pip install nvidia-cuda-nvrtc)")
    helpers = _engine_tests()
    folder = tmp_path_factory.mktemp("fake_inline_driver")
    extra = folder / "graph_api.c"
    extra.write_text(helpers.FAKE_GRAPH_API)
    lib = folder / "libcuda_fake.so.1"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(lib), str(helpers.FAKE_DRIVER_SOURCE),
                    str(extra)], check=True)
    return helpers.last_json(helpers.run_python(FAKE_INLINE_SCRIPT, GK_LIBCUDA=str(lib), GK_JIT_DISK_CACHE="0"))


# Eager engines (the fake driver copies memory but runs no kernel and no graph): a chain of zero
# delays is a chain of device copies, so the data is checked end to end.
FAKE_INLINE_SCRIPT = r"""
import json
import numpy as np
from pygpukit_dsp import _native

dev = _native.Device(0)
zero = {"delays": np.zeros(3)}
chain = [{"kind": "delay", "name": k, "in": (3, 16, 0, "float32"), "out": (3, 16, 0, "float32"),
          "params": zero} for k in ("a", "b")]
x = np.arange(48, dtype=np.float32).reshape(3, 16)
res = {}
for single in (False, True):
    e = _native.StreamEngine(dev, chain, use_graph=False, single_stream=single, inline_submit=True)
    r = {"flag": e.inline_submit}
    ok = True
    for b in range(20):
        ok &= bool(np.array_equal(e.process(b % 2, x + b), x + b))
    r["data"] = ok
    r["after_20"] = e.counters()
    r["inline_after_20"] = e.inline_blocks
    # a block in flight on the worker: process() takes the worker path, in order
    e.input_slot(0)[:] = -x
    e.submit(0, 16)
    y1 = e.process(1, 2 * x)
    r["fallback"] = [bool(np.array_equal(y1, 2 * x)), e.wait(0), bool(np.array_equal(e.output_slot(0), -x)),
                     e.inline_blocks]
    # idle again: inline; then a final partial block inline
    r["idle_again"] = bool(np.array_equal(e.process(0, 3 * x), 3 * x))
    part = np.ascontiguousarray(x[:, :5])
    y = e.process(1, part, True)
    r["final"] = [list(y.shape), bool(np.array_equal(y, part))]
    r["after_all"] = e.counters()
    r["inline_after_all"] = e.inline_blocks
    e.close()
    res["single" if single else "three"] = r
e = _native.StreamEngine(dev, chain, use_graph=False)
e.process(0, x)
res["default"] = [e.inline_submit, e.inline_blocks]
e.close()
print(json.dumps(res))
"""


@pytest.mark.parametrize("mode", ["three", "single"])
def test_fake_inline_submit_counts_one_copy_each_way_and_one_wait_per_block(fake_inline_results, mode):
    r = fake_inline_results[mode]
    assert r["flag"] is True and r["data"] is True
    assert r["after_20"] == {"blocks": 20, "h2d_copies": 20, "d2h_copies": 20, "completion_waits": 20,
                             "graph_launches": 0, "eager_blocks": 20, "chunks": 0, "device_blocks": 0, "d2d_in": 0,
                             "d2d_out": 0}
    assert r["inline_after_20"] == 20  # every block ran on the calling thread


@pytest.mark.parametrize("mode", ["three", "single"])
def test_fake_inline_submit_falls_back_to_the_worker_while_blocks_are_in_flight(fake_inline_results, mode):
    r = fake_inline_results[mode]
    same, n0, slot0_ok, inline_count = r["fallback"]
    assert same and n0 == 16 and slot0_ok
    assert inline_count == 20  # the process() after a submit() went through the worker
    assert r["idle_again"] and r["final"] == [[3, 5], True]
    c = r["after_all"]
    assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["completion_waits"]) == (24, 24, 24, 24)
    assert r["inline_after_all"] == 22


def test_fake_inline_submit_is_off_by_default(fake_inline_results):
    assert fake_inline_results["default"] == [False, 0]


# ------------------------------------------------------------------ GPU


def _cuda_engine(p: Pipeline, **kw):
    from pygpukit_dsp.backends.cuda_engine import CudaEngine

    return CudaEngine(p, p.specs(), BackendChoice("cuda", "test"), **kw)


SHAPES = [  # (C_in, C_out, L, block, per-channel taps)
    (64, 16, 256, 256, False),  # W1
    (64, 1, 1000, 256, False),
    (1, 16, 1, 64, False),
    (1, 1, 3, 1000, False),
    (7, 16, 3, 64, False),
    (7, 1, 255, 1000, True),
    (7, 16, 256, 64, True),     # history (256) longer than the block
    (64, 16, 255, 1000, False),
    (3, 2, 300, 61, True),      # rows of 61 floats: per-sample copies; history (384) > block
]


@pytest.mark.gpu
@pytest.mark.parametrize("c_in,c_out,L,block,per_channel", SHAPES)
def test_fused_equals_cpu_over_blocks_with_a_partial_final_block(c_in, c_out, L, block, per_channel):
    p = fir_mix_pipeline(c_in, c_out, L, block, per_channel, seed=L + c_in)
    assert [op.kind for op in lower_pipeline(p, p.specs())] == ["fir_mix"]
    x = rand((c_in, block * 3 + block // 3 + 1), c_out).astype(np.float32)
    assert rel_err(p.process(x, backend="cuda"), p.process(x, backend="cpu")) < CPU_RTOL


@pytest.mark.gpu
def test_w1_in_latency_mode_equals_cpu():
    w1 = Pipeline.from_yaml(W1)  # realtime: single stream, eager, inline_submit
    x = rand((64, 256 * 10 + 77), 3).astype(np.float32)
    eng = _cuda_engine(w1)
    try:
        assert [op.kind for op in eng.ops] == ["fir_mix"] and eng.native.inline_submit
        got = np.concatenate([eng.process(x[:, s:s + 256], final=s + 256 >= x.shape[1])
                              for s in range(0, x.shape[1], 256)], axis=1)
        assert eng.native.inline_blocks == 11
    finally:
        eng.close()
    assert rel_err(got, w1.process(x, backend="cpu")) < CPU_RTOL


def _native_stream(op_dicts: list[dict], x: np.ndarray, block: int, use_graph: bool = True) -> np.ndarray:
    from pygpukit_dsp import _native

    engine = _native.StreamEngine(_native.Device(0), op_dicts, use_graph=use_graph)
    try:
        n = x.shape[1]
        outs = []
        for s in range(0, n, block):
            blk = np.ascontiguousarray(x[:, s:s + block])
            outs.append(engine.process(0, blk, s + block >= n))
        return np.concatenate(outs, axis=1)
    finally:
        engine.close()


def _fused_and_separate_op_dicts(p: Pipeline, kernel: str = "auto") -> tuple[list[dict], list[dict]]:
    from pygpukit_dsp.backends.cuda_engine import op_dict
    from pygpukit_dsp.backends.cuda_ops.fir import lower_fir
    from pygpukit_dsp.backends.cuda_ops.mix import lower_mix

    chain = p.specs()
    fused = lower_pipeline(p, chain)
    assert [op.kind for op in fused] == ["fir_mix"]
    fir, mix = p.stages
    separate = [lower_fir(fir, chain.specs[0], chain.specs[1]), lower_mix(mix, chain.specs[1], chain.specs[2])]
    assert separate[0].params["method"] == "direct"
    fused_dicts = [op_dict(op) for op in fused]
    fused_dicts[0]["params"]["kernel"] = kernel
    return fused_dicts, [op_dict(op) for op in separate]


@pytest.mark.gpu
@pytest.mark.parametrize("c_in,c_out,L,block,per_channel",
                         [SHAPES[0], SHAPES[5], SHAPES[6], SHAPES[8], (65, 3, 40, 100, False)])
@pytest.mark.parametrize("use_graph", [True, False])
def test_fused_equals_the_unfused_cuda_ops(c_in, c_out, L, block, per_channel, use_graph):
    p = fir_mix_pipeline(c_in, c_out, L, block, per_channel, seed=7)
    fused, separate = _fused_and_separate_op_dicts(p)
    x = rand((c_in, block * 4 + block // 2 + 3), 8).astype(np.float32)
    got = _native_stream(fused, x, block, use_graph)
    ref = _native_stream(separate, x, block, use_graph)
    assert rel_err(got, ref) < UNFUSED_RTOL


CLUSTER_SHAPES = [  # C_in <= 64: 1, 2, 4 and 8 CTAs per cluster, padding CTAs (3 and 5 groups)
    (64, 16, 256, 256, False),  # W1: 8 groups
    (7, 16, 256, 64, True),     # 1 group; history longer than the block
    (12, 5, 40, 100, False),    # 2 groups, the second with 4 channels
    (20, 3, 300, 61, True),     # 3 groups in a cluster of 4; per-sample copies
    (40, 64, 33, 128, False),   # 5 groups in a cluster of 8; 64 x 40 matrix
]


@pytest.mark.gpu
@pytest.mark.parametrize("c_in,c_out,L,block,per_channel", CLUSTER_SHAPES)
@pytest.mark.parametrize("kernel", ["split", "cluster"])
def test_both_kernels_equal_the_unfused_cuda_ops(c_in, c_out, L, block, per_channel, kernel):
    # On SM 9.0+ "auto" runs the cluster kernel for these: "split" keeps the other one tested there.
    p = fir_mix_pipeline(c_in, c_out, L, block, per_channel, seed=11)
    fused, separate = _fused_and_separate_op_dicts(p, kernel)
    x = rand((c_in, block * 4 + block // 2 + 3), 12).astype(np.float32)
    got = _native_stream(fused, x, block)
    ref = _native_stream(separate, x, block)
    assert rel_err(got, ref) < UNFUSED_RTOL
    assert rel_err(got, p.process(x, backend="cpu")) < CPU_RTOL


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["split", "cluster"])
@pytest.mark.parametrize("use_graph", [True, False])
def test_the_programmatic_dependent_launch_gives_the_same_bits(kernel, use_graph):
    # pdl (the default) lets fir_mix start while the engine's pull kernel copies the block in;
    # it must still read the block only after the pull: the same output as a plain launch.
    from pygpukit_dsp import _native

    p = fir_mix_pipeline(64, 16, 256, 256, seed=13)
    fused, _ = _fused_and_separate_op_dicts(p, kernel)
    plain = [dict(d, params=dict(d["params"], pdl=False)) for d in fused]
    x = rand((64, 256 * 12), 14).astype(np.float32)
    outs = []
    for dicts in (fused, plain):
        engine = _native.StreamEngine(_native.Device(0), dicts, use_graph=use_graph, mapped_io=True,
                                      single_stream=True, inline_submit=True)
        try:
            outs.append(np.concatenate([engine.process(0, np.ascontiguousarray(x[:, s:s + 256]), False)
                                        for s in range(0, x.shape[1], 256)], axis=1))
        finally:
            engine.close()
    np.testing.assert_array_equal(outs[0], outs[1])
    assert rel_err(outs[0], p.process(x, backend="cpu")) < CPU_RTOL


@pytest.mark.gpu
def test_an_op_needing_less_shared_memory_leaves_the_shared_kernel_enough_for_the_other():
    # Both ops launch the same cluster kernel (one module per process); each needs more than the
    # default 48 KiB of shared memory, the first more than the second.
    from pygpukit_dsp import _native

    big = fir_mix_pipeline(40, 64, 33, 128, seed=15)      # 8 x 64 x 16 floats of shares
    small = fir_mix_pipeline(40, 40, 33, 128, seed=16)    # 8 x 40 x 16
    x = rand((40, 128 * 3), 17).astype(np.float32)
    engines = [_native.StreamEngine(_native.Device(0), _fused_and_separate_op_dicts(p, "cluster")[0])
               for p in (big, small)]
    try:
        got = np.concatenate([engines[0].process(0, np.ascontiguousarray(x[:, s:s + 128]), False)
                              for s in range(0, x.shape[1], 128)], axis=1)
    finally:
        for e in engines:
            e.close()
    assert rel_err(got, big.process(x, backend="cpu")) < CPU_RTOL


@pytest.mark.gpu
def test_the_cluster_kernel_where_it_cannot_run_and_an_unknown_kernel_are_errors():
    from pygpukit_dsp import _native
    from pygpukit_dsp.errors import UnsupportedError

    fused, _ = _fused_and_separate_op_dicts(fir_mix_pipeline(65, 3, 40, 100), "cluster")
    with pytest.raises(UnsupportedError, match="at most 64 input channels"):
        _native.StreamEngine(_native.Device(0), fused)
    fused, _ = _fused_and_separate_op_dicts(fir_mix_pipeline(4, 2, 16, 64), "fastest")
    with pytest.raises(ValueError, match="kernel must be auto, split or cluster"):
        _native.StreamEngine(_native.Device(0), fused)


@pytest.mark.gpu
def test_reset_restarts_the_fused_history():
    p = fir_mix_pipeline(64, 16, 256, 256)
    x = rand((64, 256 * 3), 9).astype(np.float32)
    eng = _cuda_engine(p)
    try:
        first = [eng.process(x[:, s:s + 256]) for s in range(0, 768, 256)]
        eng.reset()
        again = [eng.process(x[:, s:s + 256]) for s in range(0, 768, 256)]
    finally:
        eng.close()
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


@pytest.mark.gpu
def test_inline_submit_defaults_to_the_latency_mode():
    for qos, expected in (({"class": "realtime"}, True), (None, False)):
        eng = _cuda_engine(fir_mix_pipeline(4, 2, 16, 64, qos=qos))
        try:
            assert eng.native.inline_submit is expected
        finally:
            eng.close()
    eng = _cuda_engine(fir_mix_pipeline(4, 2, 16, 64, qos={"class": "realtime"}), inline_submit=False)
    try:
        assert eng.native.inline_submit is False
    finally:
        eng.close()


@pytest.mark.gpu
@pytest.mark.parametrize("single_stream,use_graph", [(True, False), (True, True), (False, True)])
def test_inline_submit_counts_one_copy_each_way_and_one_wait_per_block(single_stream, use_graph):
    p = fir_mix_pipeline(64, 16, 256, 256)
    x = rand((64, 256 * 30), 10).astype(np.float32)
    eng = _cuda_engine(p, single_stream=single_stream, use_graph=use_graph, inline_submit=True)
    try:
        for s in range(0, x.shape[1], 256):
            eng.process(x[:, s:s + 256])
        c = eng.counters()
        assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["completion_waits"]) == (30, 30, 30, 30)
        assert c["graph_launches"] + c["eager_blocks"] == 30
        assert eng.native.inline_blocks == 30
    finally:
        eng.close()


@pytest.mark.gpu
def test_inline_submit_output_equals_the_worker_path_and_mixes_with_submit_collect():
    p = fir_mix_pipeline(64, 16, 256, 256, qos={"class": "realtime"})
    x = rand((64, 256 * 12 + 100), 11).astype(np.float32)
    blocks = [x[:, s:s + 256] for s in range(0, x.shape[1], 256)]
    outs = {}
    for inline in (False, True):
        eng = _cuda_engine(p, inline_submit=inline)
        try:
            outs[inline] = np.concatenate([eng.process(b, final=i == len(blocks) - 1)
                                           for i, b in enumerate(blocks)], axis=1)
        finally:
            eng.close()
    np.testing.assert_array_equal(outs[True], outs[False])
    # process() and submit()/collect() interleaved on one engine (inline when idle, the worker
    # while a submitted block is in flight): the stream order is kept
    eng = _cuda_engine(p, inline_submit=True)
    try:
        mixed = []
        i = 0
        while i < len(blocks):
            final = i == len(blocks) - 1
            if i % 3 == 1 and not final:
                slot = eng.submit(blocks[i])
                nxt = eng.process(blocks[i + 1], final=i + 1 == len(blocks) - 1)
                mixed.append(np.array(eng.collect(slot)))
                mixed.append(nxt)
                i += 2
            else:
                mixed.append(eng.process(blocks[i], final=final))
                i += 1
        c = eng.counters()
        assert (c["blocks"], c["h2d_copies"], c["d2h_copies"], c["completion_waits"]) == (13, 13, 13, 13)
    finally:
        eng.close()
    np.testing.assert_array_equal(np.concatenate(mixed, axis=1), outs[False])
    assert rel_err(outs[False], p.process(x, backend="cpu")) < CPU_RTOL
