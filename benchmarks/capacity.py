"""Capacity: the largest number of concurrent W1-shaped realtime streams one GPU carries with zero
deadline misses (5.33 ms and 2 ms), pygpukit-dsp against PyTorch + CUDA graph (one thread and one
CUDA stream per stream). See benchmarks/studies/capacity (the sweep) and docs/benchmarks.md, "Capacity".

    python benchmarks/capacity.py --out out/capacity                  # ~3-4 min on an H100
    python benchmarks/capacity.py --ladder 16,64,128 --coarse-s 2 --confirm-s 10 --no-torch
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # the studies package beside this script


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    from pygpukit_dsp import Pipeline
    from studies.capacity import (COARSE_S, CONFIRM_S, PROJECT_LADDER, TORCH_LADDER, WARMUP_S, plot_capacity,
                                  run_capacity)

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=str(HERE / "w1.yaml"), help="the stream's pipeline (default W1)")
    ap.add_argument("--out", default="out/capacity", help="folder for capacity.json, capacity.md, capacity.png")
    ap.add_argument("--ladder", type=ints, default=list(PROJECT_LADDER), help="pygpukit-dsp's N, increasing")
    ap.add_argument("--torch-ladder", type=ints, default=list(TORCH_LADDER), help="PyTorch's N, increasing")
    ap.add_argument("--coarse-s", type=float, default=COARSE_S, help="seconds per coarse run")
    ap.add_argument("--confirm-s", type=float, default=CONFIRM_S, help="seconds per confirmation run (0: none)")
    ap.add_argument("--warmup-s", type=float, default=WARMUP_S)
    ap.add_argument("--threads", type=int, default=None, help="native driver threads (default: cores / 4, 1..4)")
    ap.add_argument("--spin-us", type=int, default=100, help="driver threads spin this long before a release")
    ap.add_argument("--no-torch", action="store_true", help="leave out the PyTorch baseline")
    ap.add_argument("--no-floor", action="store_true", help="leave out the floor (bare round trips where the "
                    "project's misses began, and at the target's N when it was not confirmed)")
    ap.add_argument("--no-aligned", action="store_true", help="leave out the project's streams released all at "
                    "once (every phase 0)")
    ap.add_argument("--time-every", type=int, default=None, help="the dispatcher times one block in this many "
                    "after a stream's first 16 (default 8; 1: every block)")
    ap.add_argument("--prefix", default="capacity", help="output file names' stem")
    a = ap.parse_args(argv)
    report = run_capacity(Pipeline.from_yaml(a.file), ladder=a.ladder, torch_ladder=a.torch_ladder,
                          coarse_s=a.coarse_s, confirm_s=a.confirm_s, warmup_s=a.warmup_s, threads=a.threads,
                          spin_us=a.spin_us, baseline=not a.no_torch, floor=not a.no_floor, aligned=not a.no_aligned,
                          time_every=a.time_every,
                          progress=lambda line: print(line, file=sys.stderr, flush=True))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    md = report.markdown()
    print(md)
    (out / f"{a.prefix}.md").write_text(md + "\n")
    (out / f"{a.prefix}.json").write_text(json.dumps(report.to_dict(), indent=1, default=str))
    try:
        plot_capacity(report, str(out / f"{a.prefix}.png"))
    except ImportError as exc:
        print(f"capacity: no plot ({exc})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
