"""Soak: a pipeline at its sample clock for minutes; RSS (and GPU memory) sampled, growth reported.

Runs the pipeline as a stream through a Session (the path users get), block n released n block
periods after block 0 (W1: 48 kHz / 256 = 187.5 blocks/s), its source opened again whenever it
ends. One progress line per sample goes to stderr; the table and the verdict to stdout
(pygpukit_dsp/bench/soak.py; docs/benchmarks.md, "Soak"). Same as `gk-stream bench FILE --soak MINUTES`.

    python benchmarks/soak.py                                   # W1, auto backend, 10 minutes
    python benchmarks/soak.py benchmarks/w1.yaml --backend cuda --minutes 5 --json soak.json --markdown soak.md
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pygpukit_dsp import Pipeline
from pygpukit_dsp.bench.soak import format_sample, run_soak
from pygpukit_dsp.errors import GkError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=str(Path(__file__).with_name("w1.yaml")))
    ap.add_argument("--backend", choices=["auto", "cuda", "cpu"], help="default: the file's")
    ap.add_argument("--pipeline", metavar="NAME", help="the pipeline of a file that holds several")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=10.0, metavar="S", help="seconds between samples")
    ap.add_argument("--warmup", type=float, metavar="S",
                    help="seconds before the growth fit starts (default: a tenth of the soak, at most 30)")
    ap.add_argument("--track-python", action="store_true",
                    help="also sample Python's allocations (tracemalloc; slows every allocation)")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--markdown", metavar="PATH")
    args = ap.parse_args(argv)
    try:
        pipeline = Pipeline.from_yaml(args.file, args.pipeline)
        report = run_soak(pipeline, backend=args.backend, minutes=args.minutes, interval_s=args.interval,
                          warmup_s=args.warmup, track_python=args.track_python,
                          progress=lambda s: print(format_sample(s, pipeline.name), file=sys.stderr, flush=True))
    except GkError as exc:
        print(f"soak: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(report.markdown())
    for path, text in ((args.json, json.dumps(report.to_dict(), indent=2) + "\n"),
                       (args.markdown, report.markdown() + "\n")):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
