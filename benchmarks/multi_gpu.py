"""Several GPUs of one host: a Session of W1 streams placed with ``device: auto``, and W2 per GPU.

(a) **W1 over the GPUs.** N realtime streams of W1's shape (benchmarks/w1.yaml: 64 ch x 256
    float32 at 48 kHz, FIR 256 taps -> mix 16x64, fused on the GPU) in one Session, each with
    ``device: auto``: admission places every stream on the GPU with the most headroom, one
    scheduler and one native dispatcher per GPU. Every stream is paced at its block clock (block n
    released n periods after block 0: 187.5 blocks/s). Reported per GPU: streams, blocks, host
    latency p50/p99/p99.9/max (hand-over to output available, the streams' histograms merged),
    host deadline misses and the schedulers' misses; and per stream where it ran and why.
(b) **W2 per GPU.** W2 (benchmarks/w2.yaml: 4096-point FFT frames, |X|^2 averaged over 4096
    frames, 16.7 M complex64 samples per block) on each GPU alone, then on every GPU at once
    (one engine per GPU, one thread each: the timing loops are native and release the GIL), two
    ways: ``streamed`` (from pinned host memory, every byte over PCIe, two blocks in flight) and
    ``resident`` (input already on the GPU, per-block GPU time). Reported: Gsamples/s per GPU
    alone and together, the aggregate, and its ratio to one GPU alone (the target: >= 1.9x
    on two GPUs).

On one GPU it runs the same (every stream on GPU 0, W2 "together" is GPU 0 alone again) and says
that the figures are degenerate. Writes multi_gpu.json and multi_gpu.md under --out and prints
the Markdown.

    python benchmarks/multi_gpu.py --out results/multi_gpu              # ~1 min on 2 GPUs
    python benchmarks/multi_gpu.py --streams 16 --seconds 30 --out out
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent


# ----------------------------------------------------------------------------- (a) W1 over the GPUs


def w1_session(w1_path: Path, streams: int, source: str, cost_us: float | None = None):
    from pygpukit_dsp import Pipeline, Session
    from pygpukit_dsp.io import NullSource

    pipelines = []
    for i in range(streams):
        p = Pipeline.from_yaml(w1_path)
        p.name = f"{p.name}_{i}"
        p.backend = "cuda"
        p.device = "auto"
        if cost_us is not None:
            p.qos = p.qos.model_copy(update={"cost_us": cost_us})  # declared: nothing measured
        if source == "zeros":
            p.source = NullSource(rate="realtime")  # paced at 48 kHz: a block every 5.33 ms
        else:
            from pygpukit_dsp.bench.soak import PacedSource

            p.source = PacedSource(p.source)  # W1's own synth noise, paced (as the soak does)
        pipelines.append(p)
    return Session(pipelines)


def _lat_us(hist) -> dict[str, float]:
    s = hist.summary()
    return {k: (s[k] / 1e3 if k != "count" else s[k]) for k in ("count", "p50", "p99", "p999", "max")}


def run_w1(w1_path: Path, streams: int, seconds: float, source: str, gpus: list[int],
           cost_us: float | None = None) -> dict[str, Any]:
    from pygpukit_dsp_core import LatencyHistogram

    # warm-up: kernels compiled (or read from the disk cache) and every GPU's context created
    w = w1_session(w1_path, len(gpus), source, cost_us)
    w.run(duration=0.5)
    del w

    session = w1_session(w1_path, streams, source, cost_us)
    t0 = time.perf_counter()
    summaries = session.run(duration=seconds)
    wall = time.perf_counter() - t0
    hists = session.latency_histograms()
    per_stream = []
    per_gpu: dict[int, dict[str, Any]] = {}
    merged: dict[int, Any] = {}
    for s in summaries:
        sa = s.scheduler
        per_stream.append({
            "stream": s.pipeline, "gpu": s.gpu, "placement": s.placement, "blocks": s.blocks,
            "host_latency_us": {k: s.latency_us[k] for k in ("p50", "p99", "p999", "max")},
            "host_misses": s.deadline_misses, "deadline_us": s.deadline_us,
            "scheduler_latency_us": {k: sa.latency_us.get(k, 0.0) for k in ("p50", "p99", "max")} if sa else None,
            "scheduler_misses": sa.missed if sa else None, "cost_us": sa.cost_us if sa else None})
        g = per_gpu.setdefault(s.gpu, {"gpu": s.gpu, "streams": 0, "blocks": 0, "host_misses": 0,
                                       "scheduler_misses": 0, "scheduler_p99_us_max": 0.0})
        g["streams"] += 1
        g["blocks"] += s.blocks
        g["host_misses"] += s.deadline_misses
        if sa is not None:
            g["scheduler_misses"] += sa.missed
            g["scheduler_p99_us_max"] = max(g["scheduler_p99_us_max"], sa.latency_us.get("p99", 0.0))
        h = merged.setdefault(s.gpu, LatencyHistogram())
        h.merge(hists[s.pipeline])
    for gpu, g in per_gpu.items():
        g["host_latency_us"] = _lat_us(merged[gpu])
    return {"streams": streams, "seconds": seconds, "wall_s": wall, "source": source, "cost_us": cost_us,
            "blocks_per_stream": summaries[0].blocks if summaries else 0,
            "deadline_us": summaries[0].deadline_us if summaries else None,
            "per_gpu": [per_gpu[g] for g in sorted(per_gpu, key=lambda x: -1 if x is None else x)],
            "per_stream": per_stream}


# ----------------------------------------------------------------------------- (b) W2 per GPU


def _w2_engine(w2_path: Path, gpu: int):
    from pygpukit_dsp import Pipeline
    from pygpukit_dsp.backends import open_backend
    from pygpukit_dsp.bench.inputs import input_blocks, source_format

    p = Pipeline.from_yaml(w2_path)
    chain = p.specs(source_format(p))
    engine = open_backend(p, chain, "cuda", device=gpu)
    block = input_blocks(p, chain, 1)[0]
    engine.process(block)  # the first block through the whole path (plans, graphs, pinned slots)
    return engine, block, int(np.prod(chain.input.block_shape))


def _measure(engine, block, spb: int, mode: str, blocks: int) -> dict[str, float]:
    """One GPU's figure: samples/s over its own timed window (and that window)."""
    t0 = time.perf_counter()
    if mode == "streamed":
        secs, _ = engine.instrument().time_streamed(blocks, 2)
        rate = blocks * spb / secs
    else:
        per_block = np.asarray(engine.instrument().time_resident(blocks), dtype=np.float64)
        secs = float(per_block.sum())
        rate = spb / float(per_block.mean())
    t1 = time.perf_counter()
    return {"samples_per_s": rate, "seconds": secs, "start": t0, "end": t1, "samples": blocks * spb}


def run_w2(w2_path: Path, gpus: list[int], blocks: dict[str, int]) -> dict[str, Any]:
    engines = {g: _w2_engine(w2_path, g) for g in gpus}
    out: dict[str, Any] = {"gpus": gpus, "modes": {}}
    try:
        for mode in ("streamed", "resident"):
            n = blocks[mode]
            for g, (e, b, spb) in engines.items():  # warm-up
                _measure(e, b, spb, mode, max(2, n // 10))
            alone = {g: _measure(e, b, spb, mode, n) for g, (e, b, spb) in engines.items()}
            together: dict[int, dict[str, float]] = {}
            errors: list[BaseException] = []
            barrier = threading.Barrier(len(gpus))

            def work(g: int) -> None:
                e, b, spb = engines[g]
                try:
                    barrier.wait()
                    together[g] = _measure(e, b, spb, mode, n)
                except BaseException as exc:  # reported below
                    errors.append(exc)

            threads = [threading.Thread(target=work, args=(g,), name=f"w2-gpu{g}") for g in gpus]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            one = float(np.mean([alone[g]["samples_per_s"] for g in gpus]))
            aggregate = sum(together[g]["samples_per_s"] for g in gpus)
            window = max(t["end"] for t in together.values()) - min(t["start"] for t in together.values())
            wall_aggregate = sum(t["samples"] for t in together.values()) / window if mode == "streamed" else None
            out["modes"][mode] = {
                "blocks": n,
                "alone_gsps": {str(g): alone[g]["samples_per_s"] / 1e9 for g in gpus},
                "together_gsps": {str(g): together[g]["samples_per_s"] / 1e9 for g in gpus},
                "one_gpu_gsps": one / 1e9,
                "aggregate_gsps": aggregate / 1e9,
                "wall_aggregate_gsps": wall_aggregate / 1e9 if wall_aggregate else None,
                "ratio": aggregate / one if one > 0 else 0.0,
                "wall_ratio": (wall_aggregate / one) if wall_aggregate and one > 0 else None,
            }
    finally:
        for e, _, _ in engines.values():
            e.close()
    return out


# ----------------------------------------------------------------------------- report


def markdown(report: dict[str, Any]) -> str:
    lines = ["# Multi-GPU: W1 streams placed with device: auto, W2 per GPU", ""]
    lines.append(f"* machine: {report['machine']}")
    lines.append(f"* GPUs used: {len(report['gpus'])} ({', '.join(report['gpu_names'])})")
    for note in report["notes"]:
        lines.append(f"* {note}")
    w1 = report.get("w1")
    if w1:
        lines += ["", f"## (a) {w1['streams']} W1 streams, device: auto, paced at the block clock "
                      f"({w1['blocks_per_stream']} blocks each, source {w1['source']}, deadline "
                      f"{w1['deadline_us']:.1f} us" + (f", declared cost {w1['cost_us']:g} us per block"
                                                       if w1.get("cost_us") else "") + ")", "",
                  "| GPU | streams | blocks | host p50 us | host p99 us | host p99.9 us | host max us | "
                  "host misses | scheduler misses | worst scheduler p99 us |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for g in w1["per_gpu"]:
            lat = g["host_latency_us"]
            lines.append(f"| {g['gpu']} | {g['streams']} | {g['blocks']} | {lat['p50']:.1f} | {lat['p99']:.1f} | "
                         f"{lat['p999']:.1f} | {lat['max']:.1f} | {g['host_misses']} | {g['scheduler_misses']} | "
                         f"{g['scheduler_p99_us_max']:.1f} |")
        lines += ["", "| stream | GPU | why there | host p50 us | host p99 us | misses (host / scheduler) |",
                  "|---|---|---|---|---|---|"]
        for s in w1["per_stream"]:
            lat = s["host_latency_us"]
            why = (s["placement"] or "").split(": ", 1)[-1]
            lines.append(f"| {s['stream']} | {s['gpu']} | {why} | {lat['p50']:.1f} | {lat['p99']:.1f} | "
                         f"{s['host_misses']} / {s['scheduler_misses']} |")
    w2 = report.get("w2")
    if w2:
        lines += ["", "## (b) W2 on each GPU alone, then on every GPU at once", ""]
        for mode, m in w2["modes"].items():
            lines += [f"### {mode} ({m['blocks']} blocks per GPU)", "",
                      "| GPU | alone Gsamples/s | together Gsamples/s | together / alone |", "|---|---|---|---|"]
            for g in w2["gpus"]:
                a, t = m["alone_gsps"][str(g)], m["together_gsps"][str(g)]
                lines.append(f"| {g} | {a:.2f} | {t:.2f} | {t / a if a else 0:.3f} |")
            extra = (f"; over the common wall window {m['wall_aggregate_gsps']:.2f} Gsamples/s = "
                     f"{m['wall_ratio']:.2f}x" if m.get("wall_aggregate_gsps") else "")
            lines += ["", f"aggregate {m['aggregate_gsps']:.2f} Gsamples/s = **{m['ratio']:.2f}x** one GPU alone "
                          f"({m['one_gpu_gsps']:.2f} Gsamples/s, the mean of the alone runs){extra}", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--w1", default=str(HERE / "w1.yaml"), help="the W1 pipeline (default benchmarks/w1.yaml)")
    ap.add_argument("--w2", default=str(HERE / "w2.yaml"), help="the W2 pipeline (default benchmarks/w2.yaml)")
    ap.add_argument("--streams", type=int, help="W1 streams in the session (default: 4 per GPU)")
    ap.add_argument("--seconds", type=float, default=12.0, help="signal seconds per W1 stream (default 12: 2250 "
                    "blocks)")
    ap.add_argument("--source", choices=["zeros", "w1"], default="zeros",
                    help="W1 input: zeros (a null source, the least Python per block, so the streams' threads "
                         "contend least for the GIL) or W1's own seeded noise (synth)")
    ap.add_argument("--cost-us", type=float, help="declare each W1 stream's per-block cost (qos.cost_us) instead "
                    "of measuring it (admission times one stream's blocks and the identical others share it), "
                    "so that admission's headroom, and so the placement, is the same from run to run")
    ap.add_argument("--blocks-streamed", type=int, default=200, help="W2 streamed blocks per GPU")
    ap.add_argument("--blocks-resident", type=int, default=1000, help="W2 resident blocks per GPU")
    ap.add_argument("--gpus", help="comma-separated GPU indices (default: every usable GPU)")
    ap.add_argument("--skip", choices=["w1", "w2"], action="append", default=[], help="leave a part out")
    ap.add_argument("--out", help="folder for multi_gpu.json and multi_gpu.md")
    args = ap.parse_args(argv)

    from pygpukit_dsp.bench.inputs import machine_description
    from pygpukit_dsp.capabilities import capabilities, usable_gpus
    from pygpukit_dsp.errors import GkError

    caps = capabilities()
    gpus = usable_gpus(caps)
    if args.gpus:
        gpus = [int(x) for x in args.gpus.split(",") if x.strip()]
    if not gpus:
        why = caps.get("gpus_reason") or "no usable GPU"
        print(f"multi_gpu: error: no usable GPU ({why})", file=sys.stderr)
        return 1
    names = {g["index"]: g["name"] for g in caps.get("gpus", [])}
    notes = []
    if len(gpus) == 1:
        notes.append("ONE GPU only: every W1 stream lands on GPU 0 and W2 'together' is GPU 0 alone again; "
                     "the placement and the ratio are degenerate (run on a multi-GPU machine)")
    streams = args.streams if args.streams is not None else 4 * len(gpus)
    report: dict[str, Any] = {"machine": machine_description(), "gpus": gpus,
                              "gpu_names": [f"GPU {g} {names.get(g, '?')}" for g in gpus], "notes": notes,
                              "argv": sys.argv[1:]}
    try:
        if "w1" not in args.skip:
            if args.gpus:
                notes.append("--gpus limits W2 only: device: auto places W1 streams over every usable GPU")
            print(f"multi_gpu: W1 session, {streams} streams, {args.seconds:g} s each ...", file=sys.stderr,
                  flush=True)
            report["w1"] = run_w1(Path(args.w1), streams, args.seconds, args.source, gpus, args.cost_us)
            notes.append("latency: every block of each stream (the first ones included) after a 0.5 s warm-up "
                         "session; host = hand-over to output available, scheduler = release to finish on its "
                         "GPU's dispatcher")
        if "w2" not in args.skip:
            print(f"multi_gpu: W2 on GPUs {gpus}, alone then together ...", file=sys.stderr, flush=True)
            report["w2"] = run_w2(Path(args.w2), gpus, {"streamed": args.blocks_streamed,
                                                        "resident": args.blocks_resident})
    except GkError as exc:
        print(f"multi_gpu: error: {exc}", file=sys.stderr)
        return exc.exit_code
    text = markdown(report)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "multi_gpu.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        (out / "multi_gpu.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
