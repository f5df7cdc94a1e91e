"""W4: an SDR receiver graph (benchmarks/w4.yaml), host -> GPU -> host latency per block.

One channel of complex64 IQ at 10 Msps, 65536 samples a block, into a 64-channel channelizer,
then (a) power -> boxcar average (fir, decimate 16) and (b) select channels [3, 17] -> 63-tap fir.
Each implementation takes the host (NumPy) block and hands back both outputs on the host; each
call is timed with perf_counter_ns after a warmup, one implementation after another in one run:

* ``ours``: the graph engine (one CUDA graph per block; one H2D per source, one D2H per sink).
  Its counters before and after the timed blocks give H2D / D2H copies and graph launches per block.
* ``joined``: the graph as users join pipelines without graphs (over zmq/ipc links): three chains,
  the channelizer, then power -> avg and select -> lp, each branch fed the channelizer's block on
  the host (in one process, the least a link costs): a host round trip and a copy per branch.
  The target's baseline ("the same graph as separate chains joined as users must do today").
* ``separate``: the other way users have without graphs: copies of the pipeline, two chains
  (channelizer -> power -> avg, and channelizer -> select -> lp), each block through both in
  turn (the channelizer twice, no join).
* ``cupy``: the same math written with CuPy (cp.asarray in, cp.asnumpy of both outputs out).
* ``torch_graph``: the same math in PyTorch captured in one torch.cuda.CUDAGraph on static
  tensors (pinned host -> static input, replay, copies out to pinned host tensors, synchronize).
* ``chain_spectrum`` and ``chain_carriers``: each of the two chains alone. A graph does at least
  the work of its costlier path, so ``max(chain) / separate`` is the least ``ours / separate`` can
  be with these engines (``bound_over_separate``): when it is above 0.5, so is every graph's.
* ``floor``: the bare round trip of W4's bytes with no math (CuPy; NumPy block into pinned host
  memory, one H2D of the block, one D2H of each output's size, one synchronize): the least any
  implementation pays per block (``floor_over_torch_graph``).

The hand-written versions are checked against ours on the first blocks (from zero state, the same
inputs): max |a - b| / max |b| per output below 1e-3. ``--backend cpu`` is a dry run without a GPU:
ours and separate on the cpu backend, and the CuPy code run with NumPy ("numpy"), no torch.

    python benchmarks/w4.py --json w4.json
    python benchmarks/w4.py --backend cpu --blocks 5 --warmup 1     # dry run, no GPU
"""
from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

YAML = Path(__file__).resolve().parent / "w4.yaml"
CHECK_BLOCKS = 4  # blocks from zero state compared against ours
MAX_REL_ERR = 1e-3
POOL = 8  # distinct input blocks, cycled


# ---------------------------------------------------------------------------------------------
# the graph and its parameters (one source of truth for every implementation)

def load_graph():
    from pygpukit_dsp import Graph

    return Graph.from_yaml(YAML)


class W4Params:
    """The stage parameters of benchmarks/w4.yaml, as arrays the hand-written versions use."""

    def __init__(self, g) -> None:
        specs = g.specs()
        st = {s.name: s for s in g.stages}
        ch, avg, sel, lp = st["ch"], st["avg"], st["sel"], st["lp"]
        src = specs.nodes[g.stage_inputs["ch"][0]]
        self.n = src.block_size
        self.M = ch.params.channels
        proto = np.asarray(ch.prototype(), np.float64)
        self.T = -(-proto.size // self.M)
        h = np.zeros(self.T * self.M)
        h[:proto.size] = proto
        self.H = h.reshape(self.T, self.M).astype(np.float32)  # H[r, p] = h[p + M*r], as the stage's
        self.rows = self.n // self.M
        self.avg_taps = np.asarray(avg.taps_for(specs.nodes["pw"]), np.float64)
        self.avg_decimate = int(avg.params.decimate)
        self.sel = list(sel.params.channels)
        self.lp_taps = np.asarray(lp.taps_for(specs.nodes["sel"]), np.float64)
        self.outputs = list(specs.outputs)  # sink names, in the engine's output order
        self.sink_node = dict(specs.outputs)


def input_pool(p: W4Params) -> list[np.ndarray]:
    rng = np.random.default_rng(4)
    return [(0.5 * (rng.standard_normal((1, p.n)) + 1j * rng.standard_normal((1, p.n))))
            .astype(np.complex64) for _ in range(POOL)]


# ---------------------------------------------------------------------------------------------
# the same math, hand-written over an array module (cupy on the GPU; numpy in the dry run)

def _windows(xp, a, length: int, step: int):
    """(C, N) C-contiguous -> (C, count, length) view: window j is a[:, j*step : j*step + length]."""
    c, n = a.shape
    count = (n - length) // step + 1
    s0, s1 = a.strides
    return xp.lib.stride_tricks.as_strided(a, shape=(c, count, length), strides=(s0, s1 * step, s1))


class ArrayModuleW4:
    """Channelizer (as stages/channelizer.py's processor), power, boxcar decimating fir, select and
    fir, with each stage's history kept between blocks."""

    def __init__(self, xp, p: W4Params) -> None:
        self.xp, self.p = xp, p
        M, T = p.M, p.T
        self.H = xp.asarray(p.H)
        self.ch_ext = xp.zeros((T * M + p.n,), xp.complex64)
        self.avg_h = xp.asarray(p.avg_taps[::-1].astype(np.float32))
        self.avg_ext = xp.zeros((M, p.avg_taps.size - 1 + p.rows), xp.float32)
        self.sel = xp.asarray(np.asarray(p.sel, np.intp))
        self.lp_h = xp.asarray(p.lp_taps[::-1].astype(np.complex64))
        self.lp_ext = xp.zeros((len(p.sel), p.lp_taps.size - 1 + p.rows), xp.complex64)

    def block(self, x):
        """One device (or host, for numpy) block (1, n) -> (spectrum, carriers) on the same side."""
        xp, p = self.xp, self.p
        M, T, rows, hist = p.M, p.T, p.rows, p.T * p.M
        ext = self.ch_ext
        ext[hist:] = x.reshape(-1)
        E = ext.reshape(T + rows, M)
        F = xp.empty((T + rows - 1, M), xp.complex64)
        F[:, 0] = E[1:, 0]
        F[:, 1:] = E[:-1, :0:-1]
        v = F[T - 1:T - 1 + rows] * self.H[0]
        for r in range(1, T):
            v += F[T - 1 - r:T - 1 - r + rows] * self.H[r]
        y = xp.fft.ifft(v, axis=-1, norm="forward").astype(xp.complex64)
        ext[:hist] = ext[p.n:p.n + hist].copy()
        Y = xp.ascontiguousarray(y.T)  # (M, rows): channel k
        # (a) power -> boxcar decimating fir
        la = p.avg_taps.size - 1
        self.avg_ext[:, la:] = Y.real * Y.real + Y.imag * Y.imag
        w = xp.ascontiguousarray(_windows(xp, self.avg_ext, la + 1, p.avg_decimate))
        spectrum = w @ self.avg_h
        if la:
            self.avg_ext[:, :la] = self.avg_ext[:, rows:rows + la].copy()
        # (b) select -> fir
        ll = p.lp_taps.size - 1
        self.lp_ext[:, ll:] = Y[self.sel]
        w = xp.ascontiguousarray(_windows(xp, self.lp_ext, ll + 1, 1))
        carriers = w @ self.lp_h
        if ll:
            self.lp_ext[:, :ll] = self.lp_ext[:, rows:rows + ll].copy()
        return spectrum, carriers


# ---------------------------------------------------------------------------------------------
# the implementations: each a callable host block -> (spectrum, carriers) on the host

def ours(g, backend: str):
    from pygpukit_dsp.backends import open_backend

    specs = g.specs()
    eng = open_backend(g, specs, backend)
    names = tuple(getattr(eng, "output_names", tuple(specs.outputs)))
    order = [names.index(s) for s in ("spectrum", "carriers")]

    def step(x: np.ndarray):
        outs = eng.process(x)
        return outs[order[0]], outs[order[1]]

    return step, eng


def separate_chains(g, backend: str):
    """The graph as two chains, as users join them without graphs: both read the host block."""
    from pygpukit_dsp import Pipeline
    from pygpukit_dsp.backends import open_backend

    st = {s.name: s for s in g.stages}
    specs = g.specs()
    src = specs.nodes[g.stage_inputs["ch"][0]]
    common = dict(sample_rate=src.sample_rate, channels=src.channels, block_size=src.block_size,
                  dtype=src.dtype, qos=g.qos, backend=backend)
    engines = []
    for name, path in (("w4_spectrum", ["ch", "pw", "avg"]), ("w4_carriers", ["ch", "sel", "lp"])):
        p = Pipeline([copy.deepcopy(st[s]) for s in path], name=name, **common)
        engines.append(open_backend(p, p.specs(), backend))
    a, b = engines

    def step(x: np.ndarray):
        return a.process(x), b.process(x)

    return step, engines


def joined_chains(g, backend: str):
    """The graph as chains joined on the host, as pipelines are joined without graphs (over a zmq
    or ipc link, here in one process: the least a link costs): the channelizer as one chain, its
    block handed on the host to the two branch chains (a host round trip and a copy per branch)."""
    from pygpukit_dsp import Pipeline
    from pygpukit_dsp.backends import open_backend

    st = {s.name: s for s in g.stages}
    specs = g.specs()
    engines = []
    for name, path, src in (("w4_channelizer", ["ch"], specs.nodes[g.stage_inputs["ch"][0]]),
                            ("w4_spectrum_tail", ["pw", "avg"], specs.nodes["ch"]),
                            ("w4_carriers_tail", ["sel", "lp"], specs.nodes["ch"])):
        p = Pipeline([copy.deepcopy(st[s]) for s in path], name=name, sample_rate=src.sample_rate,
                     channels=src.channels, block_size=src.block_size, dtype=src.dtype, qos=g.qos, backend=backend)
        engines.append(open_backend(p, p.specs(), backend))
    head, a, b = engines

    def step(x: np.ndarray):
        y = head.process(x)
        return a.process(y), b.process(y)

    return step, engines


def chain_alone(engine):
    def step(x: np.ndarray):
        return (engine.process(x),)

    return step


def cupy_w4(p: W4Params):
    import cupy as cp

    impl = ArrayModuleW4(cp, p)

    def step(x: np.ndarray):
        spectrum, carriers = impl.block(cp.asarray(x))
        return cp.asnumpy(spectrum), cp.asnumpy(carriers)

    return step


def numpy_w4(p: W4Params):
    impl = ArrayModuleW4(np, p)

    def step(x: np.ndarray):
        spectrum, carriers = impl.block(x)
        return spectrum.copy(), carriers.copy()

    return step


def torch_graph_w4(p: W4Params):
    """The same math in PyTorch on static tensors, one torch.cuda.CUDAGraph per block."""
    import torch

    dev = torch.device("cuda")
    M, T, rows, n, hist = p.M, p.T, p.rows, p.n, p.T * p.M
    la, ll = p.avg_taps.size - 1, p.lp_taps.size - 1
    h_rev_t = torch.from_numpy(np.ascontiguousarray(p.H[::-1].T)).to(dev)  # [p, j] = H[T-1-j, p]
    avg_h = torch.from_numpy(p.avg_taps[::-1].astype(np.float32)).to(dev)
    lp_h = torch.from_numpy(p.lp_taps[::-1].astype(np.complex64)).to(dev)
    sel = torch.tensor(p.sel, dtype=torch.long, device=dev)
    x_in = torch.zeros(n, dtype=torch.complex64, device=dev)
    ch_ext = torch.zeros(hist + n, dtype=torch.complex64, device=dev)
    avg_ext = torch.zeros((M, la + rows), dtype=torch.float32, device=dev)
    lp_ext = torch.zeros((len(p.sel), ll + rows), dtype=torch.complex64, device=dev)
    F = torch.empty((T + rows - 1, M), dtype=torch.complex64, device=dev)
    out_spec = torch.empty((M, rows // p.avg_decimate), dtype=torch.float32, device=dev)
    out_car = torch.empty((len(p.sel), rows), dtype=torch.complex64, device=dev)
    host_in = torch.empty(n, dtype=torch.complex64).pin_memory()
    host_spec = torch.empty(out_spec.shape, dtype=torch.float32).pin_memory()
    host_car = torch.empty(out_car.shape, dtype=torch.complex64).pin_memory()
    states = (ch_ext, avg_ext, lp_ext)

    def math() -> None:
        ch_ext[hist:].copy_(x_in)
        E = ch_ext.view(T + rows, M)
        F[:, 0] = E[1:, 0]
        F[:, 1:] = E[:-1, 1:].flip(-1)
        v = (F.unfold(0, T, 1) * h_rev_t).sum(-1)  # (rows, M): [m, p] = sum_j F[m+j, p] H[T-1-j, p]
        y = torch.fft.ifft(v, dim=-1, norm="forward")
        ch_ext[:hist].copy_(ch_ext[n:n + hist].clone())
        Y = y.t()
        avg_ext[:, la:].copy_(Y.real * Y.real + Y.imag * Y.imag)
        out_spec.copy_(avg_ext.unfold(1, la + 1, p.avg_decimate) @ avg_h)
        if la:
            avg_ext[:, :la].copy_(avg_ext[:, rows:rows + la].clone())
        lp_ext[:, ll:].copy_(Y.index_select(0, sel))
        out_car.copy_(lp_ext.unfold(1, ll + 1, 1) @ lp_h)
        if ll:
            lp_ext[:, :ll].copy_(lp_ext[:, rows:rows + ll].clone())

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (cuFFT plans, allocator) before capture
        for _ in range(3):
            math()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        math()
    for s in states:  # the warmup ran the math: start from zero state as the others do
        s.zero_()
    torch.cuda.synchronize()
    host_in_np = host_in.numpy()

    def step(x: np.ndarray):
        host_in_np[:] = x.reshape(-1)
        x_in.copy_(host_in, non_blocking=True)
        graph.replay()
        host_spec.copy_(out_spec, non_blocking=True)
        host_car.copy_(out_car, non_blocking=True)
        torch.cuda.synchronize()
        return host_spec.numpy().copy(), host_car.numpy().copy()

    return step


def floor_w4(p: W4Params, backend: str):
    """The bare round trip of W4's bytes (module doc): no math, only the copies and one wait."""
    out_shapes = ((p.M, p.rows // p.avg_decimate), (len(p.sel), p.rows))
    out_dtypes = (np.float32, np.complex64)
    if backend == "cpu":  # the host copies alone
        host_in = np.empty(p.n, np.complex64)
        outs = [np.zeros(s, d) for s, d in zip(out_shapes, out_dtypes)]

        def step_cpu(x: np.ndarray):
            host_in[:] = x.reshape(-1)
            return tuple(o.copy() for o in outs)

        return step_cpu
    import cupy as cp

    def pinned(shape, dtype) -> np.ndarray:
        count = int(np.prod(shape))
        mem = cp.cuda.alloc_pinned_memory(count * np.dtype(dtype).itemsize)
        return np.frombuffer(mem, dtype, count).reshape(shape)

    stream = cp.cuda.Stream(non_blocking=True)
    host_in = pinned((p.n,), np.complex64)
    dev_in = cp.empty(p.n, cp.complex64)
    dev_outs = [cp.zeros(s, d) for s, d in zip(out_shapes, out_dtypes)]
    host_outs = [pinned(s, d) for s, d in zip(out_shapes, out_dtypes)]

    def step(x: np.ndarray):
        host_in[:] = x.reshape(-1)
        dev_in.set(host_in, stream=stream)
        for d, h in zip(dev_outs, host_outs):
            d.get(stream=stream, out=h)
        stream.synchronize()
        return tuple(h.copy() for h in host_outs)

    return step


# ---------------------------------------------------------------------------------------------
# timing and checks

def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    scale = float(np.max(np.abs(b))) or 1.0
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) / scale


def time_blocks(step: Callable, pool: list[np.ndarray], blocks: int, warmup: int,
                reference: list | None) -> tuple[dict[str, float], list]:
    """Per-call latency of ``step`` over warmup + blocks calls; the first outputs kept (or checked)."""
    first, errs, times = [], [], []
    for k in range(warmup + blocks):
        x = pool[k % len(pool)]
        t0 = time.perf_counter_ns()
        outs = step(x)
        t1 = time.perf_counter_ns()
        if k < CHECK_BLOCKS:
            if reference is None:
                first.append(tuple(np.array(o) for o in outs))
            else:
                errs.extend(rel_err(o, r) for o, r in zip(outs, reference[k]))
        if k >= warmup:
            times.append((t1 - t0) / 1e3)
    t = np.asarray(times)
    res = {"p50_us": float(np.percentile(t, 50)), "p99_us": float(np.percentile(t, 99)),
           "mean_us": float(t.mean()), "max_us": float(t.max()), "blocks": int(t.size)}
    if reference is not None:
        res["max_rel_err"] = max(errs) if errs else float("nan")
        res["matches_ours"] = bool(errs) and res["max_rel_err"] < MAX_REL_ERR
    return res, first


def per_block(before: dict, after: dict, blocks: int) -> dict[str, float]:
    return {f"{key}_per_block": (after.get(key, 0) - before.get(key, 0)) / blocks
            for key in ("blocks", "h2d_copies", "d2h_copies", "graph_launches", "completion_waits")}


def run(backend: str, blocks: int, warmup: int) -> dict[str, Any]:
    g = load_graph()
    p = W4Params(g)
    pool = input_pool(p)
    total = warmup + blocks
    if blocks < 1 or total < CHECK_BLOCKS:
        raise SystemExit(f"w4: need --blocks >= 1 and warmup + blocks >= {CHECK_BLOCKS}")
    results: dict[str, Any] = {}
    absent: dict[str, str] = {}

    counted = backend == "cuda"
    step, eng = ours(g, backend)
    try:
        before = eng.counters() if counted else {}
        results["ours"], reference = time_blocks(step, pool, blocks, warmup, None)
        if counted:  # the engine's own copies and launches (the cpu backend has none)
            results["ours"]["counters"] = per_block(before, eng.counters(), total)
    finally:
        eng.close()

    step, engines = separate_chains(g, backend)
    try:
        befores = [e.counters() if counted else {} for e in engines]
        results["separate"], _ = time_blocks(step, pool, blocks, warmup, reference)
        if counted:  # both chains' together
            each = [per_block(b, e.counters(), total) for b, e in zip(befores, engines)]
            results["separate"]["counters"] = {k: sum(c[k] for c in each) for k in each[0]}
        for name, e in zip(("chain_spectrum", "chain_carriers"), engines):
            e.reset()
            results[name], _ = time_blocks(chain_alone(e), pool, blocks, warmup, None)
    finally:
        for e in engines:
            e.close()

    step, engines = joined_chains(g, backend)
    try:
        befores = [e.counters() if counted else {} for e in engines]
        results["joined"], _ = time_blocks(step, pool, blocks, warmup, reference)
        if counted:  # the three chains' together
            each = [per_block(b, e.counters(), total) for b, e in zip(befores, engines)]
            results["joined"]["counters"] = {k: sum(c[k] for c in each) for k in each[0]}
    finally:
        for e in engines:
            e.close()

    hand: list[tuple[str, Callable[[], Callable]]]
    if backend == "cpu":
        hand = [("numpy", lambda: numpy_w4(p))]
        absent.update(cupy="--backend cpu (no GPU)", torch_graph="--backend cpu (no GPU)")
    else:
        hand = [("cupy", lambda: cupy_w4(p)), ("torch_graph", lambda: torch_graph_w4(p))]
    for name, make in hand:
        try:
            impl = make()
        except ImportError as exc:
            absent[name] = f"not installed ({exc})"
            continue
        results[name], _ = time_blocks(impl, pool, blocks, warmup, reference)

    results["floor"], _ = time_blocks(floor_w4(p, backend), pool, blocks, warmup, None)

    ratios: dict[str, float] = {}
    for other in ("joined", "separate", "torch_graph", "cupy"):
        if other in results:
            ratios[f"ours_over_{other}"] = results["ours"]["p50_us"] / results[other]["p50_us"]
    costlier = max(results["chain_spectrum"]["p50_us"], results["chain_carriers"]["p50_us"])
    ratios["bound_over_separate"] = costlier / results["separate"]["p50_us"]  # module doc
    ratios["ours_over_costlier_chain"] = results["ours"]["p50_us"] / costlier
    if "torch_graph" in results:
        ratios["floor_over_torch_graph"] = results["floor"]["p50_us"] / results["torch_graph"]["p50_us"]
    return {"workload": "w4", "graph": str(YAML.name), "backend": backend, "blocks": blocks,
            "warmup": warmup, "block": {"samples": p.n, "channels": 1, "dtype": "complex64",
                                        "sample_rate": 10e6, "subchannels": p.M, "selected": p.sel},
            "host": platform.node(), "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "results": results, "ratios": ratios, "absent": absent}


def print_table(out: dict[str, Any]) -> None:
    print(f"W4 ({out['backend']}): {out['blocks']} blocks after {out['warmup']} warmup, "
          f"host in -> host out per block")
    print(f"{'implementation':<14} {'p50 us':>10} {'p99 us':>10} {'max rel err':>12}")
    for name, r in out["results"].items():
        err = (f"{r['max_rel_err']:.2e}" if "max_rel_err" in r else "(reference)" if name == "ours" else "-")
        print(f"{name:<14} {r['p50_us']:>10.1f} {r['p99_us']:>10.1f} {err:>12}")
    for name in ("ours", "joined", "separate"):
        c = out["results"][name].get("counters")
        if c:
            print(f"{name} per block: " + ", ".join(f"{k} {v:g}" for k, v in c.items()))
    for k, v in out["ratios"].items():
        print(f"{k}: {v:.3f}")
    for name, why in out["absent"].items():
        print(f"absent: {name}: {why}")
    bad = [n for n, r in out["results"].items() if r.get("matches_ours") is False]
    if bad:
        print("MISMATCH against ours: " + ", ".join(bad))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: a dry run without a GPU (cpu engines, the CuPy code on NumPy, no torch)")
    ap.add_argument("--blocks", type=int, default=3000, help="timed blocks per implementation")
    ap.add_argument("--warmup", type=int, default=300, help="untimed blocks before them")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)
    out = run(args.backend, args.blocks, args.warmup)
    print_table(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 1 if any(r.get("matches_ours") is False for r in out["results"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
