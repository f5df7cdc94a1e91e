"""Where W1's per-block latency goes on the GPU engine (run on the GPU machine).

    python benchmarks/profile_w1.py [--out results/profile_w1] [--rounds 15] [--per-round 200] [--all]

Engine configurations are measured interleaved (round after round, every configuration in each
round) so that machine drift falls on all of them alike; each one gets rounds x per-round timed
blocks (3000 by default) after its warm-up. The main table compares W1's round trip
(``CudaEngine.process``: the host copy into the pinned slot, the block, the copy out) in latency
mode (one stream, inline submit: what realtime QoS selects) with the block's two DMA copies
replaced by kernels reading/writing device-mapped pinned memory (``mapped_io``), each launched
eagerly and as a CUDA graph; plus the bare PyTorch pinned H2D 64 KiB + D2H 16 KiB + sync round trip (the floor of the
copy path). Each configuration also gets a "native submit+wait" row: the input already in the
pinned slot, handed to the engine's worker thread.

``--all`` adds the older diagnostic configurations (fir and mix unfused, three streams, cached
instead of non-temporal stores). ``--out PREFIX`` writes PREFIX.json (every sample's percentiles,
the counters, the device) and PREFIX.md (the tables). The run stays well under a minute on an H100.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Callable

import numpy as np

from pygpukit_dsp import Pipeline
from pygpukit_dsp.backends import BackendChoice
from pygpukit_dsp.backends.cuda_engine import CudaEngine

HERE = Path(__file__).parent
LATENCY = {"single_stream": True, "inline_submit": True}
# The copy path against mapped I/O (the overlapped fill and the completion flag that were measured
# here too were removed: docs/benchmarks.md, "Removed experiments").
MAIN_CONFIGS = {
    "latency mode, eager": {**LATENCY, "use_graph": False, "mapped_io": False},
    "latency mode, graph": {**LATENCY, "use_graph": True, "mapped_io": False},
    "mapped_io, eager": {**LATENCY, "use_graph": False, "mapped_io": True},
    "mapped_io, graph": {**LATENCY, "use_graph": True, "mapped_io": True},
    "mapped_io, graph, push kernel (no direct output)": {**LATENCY, "use_graph": True, "mapped_io": True,
                                                        "direct_output": False},
    # the same block through the Rust scheduler and the native dispatcher thread (a Session's path)
    "scheduled: mapped_io, graph": {**LATENCY, "use_graph": True, "mapped_io": True, "scheduled": True},
    "scheduled: latency mode, eager": {**LATENCY, "use_graph": False, "mapped_io": False, "scheduled": True},
}
# (w1.yaml is realtime, whose default is mapped I/O: these name the copy path explicitly)
EXTRA_CONFIGS = {
    "latency mode, eager, unfused": {**LATENCY, "use_graph": False, "mapped_io": False, "disable_fusions": True},
    "3 streams, graph": {"single_stream": False, "use_graph": True, "inline_submit": False, "mapped_io": False},
    "3 streams, eager": {"single_stream": False, "use_graph": False, "inline_submit": False, "mapped_io": False},
}
TORCH_FLOOR = "torch pinned H2D 64 KiB + D2H 16 KiB + sync (floor)"


DISPATCHES: list = []  # CudaDispatch objects of the scheduled configurations (closed at the end)


def make_engine(w1: Pipeline, disable_fusions: bool = False, scheduled: bool = False, **kw) -> CudaEngine:
    if scheduled:
        from pygpukit_dsp_core import Scheduler

        from pygpukit_dsp.backends.cuda_dispatch import CudaDispatch

        eng = CudaEngine(w1, w1.specs(), BackendChoice("cuda", "profile"), **kw)
        sched = Scheduler()
        sid = sched.register_stream("w1", "realtime", period_ns=5_333_333, deadline_ns=1_000_000, cost_ns=40_000)
        dispatch = CudaDispatch(sched, spin_us=20_000)  # spins through the gaps between blocks
        dispatch.attach(eng, sid)
        DISPATCHES.append(dispatch)
        return eng
    if not disable_fusions:
        return CudaEngine(w1, w1.specs(), BackendChoice("cuda", "profile"), **kw)
    before = os.environ.get("GK_DISABLE_FUSIONS")
    os.environ["GK_DISABLE_FUSIONS"] = "1"  # read by lower_pipeline when the engine is built
    try:
        return CudaEngine(w1, w1.specs(), BackendChoice("cuda", "profile"), **kw)
    finally:
        if before is None:
            del os.environ["GK_DISABLE_FUSIONS"]
        else:
            os.environ["GK_DISABLE_FUSIONS"] = before


def percentiles(ns: list[int]) -> dict[str, float]:
    us = np.asarray(ns, dtype=np.float64) / 1e3
    return {"n": int(us.size), "p50": float(np.percentile(us, 50)), "p99": float(np.percentile(us, 99)),
            "p99.9": float(np.percentile(us, 99.9)), "mean": float(us.mean())}


def torch_floor() -> Callable[[], None] | None:
    try:
        import torch

        hin = torch.empty((64, 256), dtype=torch.float32, pin_memory=True)
        hout = torch.empty((16, 256), dtype=torch.float32, pin_memory=True)
        din = torch.empty((64, 256), dtype=torch.float32, device="cuda")
        stream = torch.cuda.current_stream()
    except Exception as exc:  # informative only
        print("torch round trip unavailable:", exc)
        return None

    def rt() -> None:
        din.copy_(hin, non_blocking=True)
        hout.copy_(din[:16], non_blocking=True)
        stream.synchronize()
    return rt


def markdown(results: dict[str, dict[str, float]], configs: dict[str, dict], meta: dict) -> str:
    lines = [f"W1 round trip on {meta['device']} ({meta['samples_per_row']} blocks per row after warm-up, "
             f"configurations interleaved), microseconds", "",
             "| configuration | process p50 | p99 | p99.9 | native submit+wait p50 | p99 | p99.9 |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name in configs:
        p, n = results[f"{name}: process"], results[f"{name}: native submit+wait"]
        lines.append(f"| {name} | {p['p50']:.1f} | {p['p99']:.1f} | {p['p99.9']:.1f} | "
                     f"{n['p50']:.1f} | {n['p99']:.1f} | {n['p99.9']:.1f} |")
    if TORCH_FLOOR in results:
        t = results[TORCH_FLOOR]
        lines.append(f"| {TORCH_FLOOR} | {t['p50']:.1f} | {t['p99']:.1f} | {t['p99.9']:.1f} | | | |")
    extra = [k for k in results if k.endswith(": numpy copy+submit+wait")]
    if extra:
        lines += ["", "| diagnostic | p50 | p99 | p99.9 |", "|---|---:|---:|---:|"]
        for k in extra:
            r = results[k]
            lines.append(f"| {k} | {r['p50']:.1f} | {r['p99']:.1f} | {r['p99.9']:.1f} |")
    g = meta["ops_gpu_time_us"]
    lines += ["", f"W1 ops GPU time (time_resident, graph): p50 {g['p50']:.1f} us, p99 {g['p99']:.1f} us.",
              "Outputs equal the copy path's bit for bit: " +
              ("yes" if all(meta["output_matches"].values()) else f"NO {meta['output_matches']}") + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--per-round", type=int, default=200)
    ap.add_argument("--all", action="store_true", help="also the older diagnostic configurations")
    args = ap.parse_args()
    t_start = time.perf_counter()
    w1 = Pipeline.from_yaml(HERE / "w1.yaml")
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    configs = dict(MAIN_CONFIGS, **(EXTRA_CONFIGS if args.all else {}))
    engines = {k: make_engine(w1, **kw) for k, kw in configs.items()}

    # Sanity before timing: every configuration gives the copy path's output for the same blocks.
    reference = None
    output_matches = {}
    for k, eng in engines.items():
        ys = [eng.process(x * (b + 1)) for b in range(3)]
        eng.reset()
        if reference is None:
            reference = ys
        output_matches[k] = all(np.array_equal(a, b) for a, b in zip(ys, reference))

    fns: dict[str, Callable[[], None]] = {}
    for k, eng in engines.items():
        raw = eng.native
        raw.input_slot(1)[...] = x

        def process(eng=eng):
            eng.process(x)

        def native(raw=raw):
            raw.submit(1, 256, False)
            raw.wait(1)

        fns[f"{k}: process"] = process
        fns[f"{k}: native submit+wait"] = native
        if args.all:
            def numpy_copy(eng=eng, raw=raw):
                raw.input_slot(1)[...] = x  # ordinary (cached) stores, then the same hand-over
                raw.submit(1, 256, False)
                raw.wait(1)
            fns[f"{k}: numpy copy+submit+wait"] = numpy_copy
    floor = torch_floor()
    if floor is not None:
        fns[TORCH_FLOOR] = floor

    perf = time.perf_counter_ns
    samples: dict[str, list[int]] = {name: [] for name in fns}
    for fn in fns.values():  # warm-up: caches, clocks, lazily loaded code
        for _ in range(200):
            fn()
    for _ in range(args.rounds):
        for name, fn in fns.items():
            for _ in range(20):
                fn()
            out = samples[name]
            for _ in range(args.per_round):
                t0 = perf()
                fn()
                out.append(perf() - t0)
    gpu = np.asarray(engines["latency mode, graph"].instrument().time_resident(2000)) * 1e6
    counters = {}
    for k, eng in engines.items():
        counters[k] = eng.counters()
    for d in DISPATCHES:
        d.close()
    for eng in engines.values():
        eng.close()

    results = {name: percentiles(ns) for name, ns in samples.items()}
    from pygpukit_dsp import _native

    meta = {"device": _native.Device(0).name, "host": platform.node(), "rounds": args.rounds,
            "per_round": args.per_round, "samples_per_row": args.rounds * args.per_round,
            "configs": configs, "ops_gpu_time_us": {"p50": float(np.percentile(gpu, 50)),
                                                    "p99": float(np.percentile(gpu, 99))},
            "output_matches": output_matches, "counters": counters,
            "wall_s": time.perf_counter() - t_start}
    table = markdown(results, configs, meta)
    print(table)
    # The counters keep their meaning in every mode: one H2D, one D2H, one wait per block.
    for k, c in counters.items():
        if not c["h2d_copies"] == c["d2h_copies"] == c["completion_waits"] == c["blocks"]:
            print(f"WARNING: counters of '{k}' are not one copy each way and one wait per block: {c}")
    print(f"wall {meta['wall_s']:.1f} s")
    if args.out is not None:
        prefix = args.out.with_suffix("") if args.out.suffix in (".json", ".md") else args.out
        prefix.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{prefix}.json").write_text(json.dumps({"results": results, **meta}, indent=2) + "\n")
        Path(f"{prefix}.md").write_text(table)
        print(f"wrote {prefix}.json and {prefix}.md")


if __name__ == "__main__":
    main()
