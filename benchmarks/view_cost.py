"""What the live web view costs a stream: W2 streamed and W1 paced, each run by ``gk-stream run``
(the product's own path, one process per run) without a view and with one, alternating.

* W2 (benchmarks/w2.yaml): its filled host block (benchmarks/w2_link.py, as W2's streamed mode
  streams from memory) through stft, power and average, for ``--w2-blocks`` blocks; the figure is
  the summary's ``samples_per_s``. Target: with the view >= 0.98x without.
* W1 (benchmarks/w1.yaml) paced at its sample rate (``rate: realtime``) for ``--seconds`` of
  signal; the figure is the per-block latency p99 (the summary's host ``latency_us.p99``; the
  scheduler's p99 is reported beside it). Target: with the view <= 1.1x without.

The run with the view adds a ``view`` sink reading the pipeline's output beside its ``null``
sink (``--attach add``: a graph with two sinks on one path's output, which runs on the chain's
engine) or in its place (``--attach replace``, still a chain), and passes ``--view 127.0.0.1:0``.
``--cpus`` runs every process on the same CPUs. A WebSocket client (aiohttp) connects to the address
the run prints and reads every message while the run lasts, so the server computes and sends
frames as it does for a browser; ``--no-client`` leaves the page unwatched. Pairs alternate their
order (plain, view, then view, plain, ...), so a drift of the machine over the runs favours
neither; each ratio is the median over the pairs.

    python benchmarks/view_cost.py --backend cuda --json view_cost.json
    python benchmarks/view_cost.py --backend cpu --pairs 1 --seconds 1 --w2-blocks 2   # a dry check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
W2_TARGET = 0.98  # with/without throughput, at least
W1_TARGET = 1.10  # with/without p99, at most
URL = re.compile(r"view: (http://\S+?)/?(\s|$)")


def w2_file(attach: str | None) -> dict[str, Any]:
    d = yaml.safe_load((HERE / "w2.yaml").read_text())
    d["source"] = {"type": "callback", "function": "w2_link:block"}
    return _with_view(d, attach, {"levels": "power"})


def w1_file(attach: str | None) -> dict[str, Any]:
    d = yaml.safe_load((HERE / "w1.yaml").read_text())
    d["source"]["rate"] = "realtime"
    for st in d["stages"]:  # the generated file lives elsewhere: its data by absolute path
        if "matrix_file" in st:
            st["matrix_file"] = str(HERE / st["matrix_file"])
    return _with_view(d, attach, {})


def _with_view(d: dict[str, Any], attach: str | None, view_params: dict[str, Any]) -> dict[str, Any]:
    if attach is None:
        return d
    view = {"type": "view", **view_params}
    if attach == "replace":
        d["sink"] = view
        return d
    d["stages"][-1]["name"] = "output"
    d.pop("sink")
    d["sinks"] = [{"name": "out", "type": "null", "input": "output"},
                  {"name": "view", "input": "output", **view}]
    return d


class ViewClient:
    """Reads ws://.../ws of a run's view until the run closes it; counts messages and bytes."""

    def __init__(self, url: str):
        self.url = url.rstrip("/") + "/ws"
        self.messages = 0
        self.frames = 0
        self.bytes = 0
        self.error: str | None = None
        self._thread = threading.Thread(target=self._main, name="view-client", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            asyncio.run(self._read())
        except Exception as exc:  # reported in the JSON: a run without a watched page says so
            self.error = f"{type(exc).__name__}: {exc}"

    async def _read(self) -> None:
        import aiohttp

        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(self.url.replace("http://", "ws://", 1), heartbeat=20) as ws:
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        break
                    self.messages += 1
                    self.bytes += len(msg.data)
                    self.frames += '"type": "frame"' in msg.data or '"type":"frame"' in msg.data

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def report(self) -> dict[str, Any]:
        return {"messages": self.messages, "frames": self.frames, "bytes": self.bytes, "error": self.error}


def run_once(doc: dict[str, Any], folder: Path, tag: str, backend: str, limit: list[str], view: bool,
             client: bool, timeout: float, cpus: str | None = None) -> dict[str, Any]:
    """One ``gk-stream run``: its summary (stats JSON) and, with the view, what the client read."""
    path = folder / f"{tag}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    stats = folder / f"{tag}.json"
    cmd = [sys.executable, "-m", "pygpukit_dsp.cli", "run", str(path), "--backend", backend, *limit,
           "--stats-json", str(stats), "--quiet"] + (["--view", "127.0.0.1:0"] if view else [])
    if cpus:  # every run on the same CPUs (and so the same memory node): less spread between runs
        cmd = ["taskset", "-c", cpus, *cmd]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    watcher: list[ViewClient] = []
    err_lines: list[str] = []

    def read_stderr() -> None:
        for line in proc.stderr:
            err_lines.append(line)
            m = URL.search(line)
            if m and client and not watcher:
                watcher.append(ViewClient(m.group(1)))

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise SystemExit(f"view_cost: {tag} ran past {timeout:.0f} s")
    reader.join(10)
    if rc != 0:
        raise SystemExit(f"view_cost: {tag} failed (exit {rc}):\n{''.join(err_lines)[-3000:]}")
    summary = json.loads(stats.read_text())
    out: dict[str, Any] = {
        "samples_per_s": summary["samples_per_s"], "blocks": summary["blocks"], "wall_s": summary["wall_s"],
        "p99_us": summary["latency_us"].get("p99"), "p50_us": summary["latency_us"].get("p50"),
        "scheduler_p99_us": (summary.get("scheduler") or {}).get("latency_us", {}).get("p99"),
        "deadline_misses": summary["deadline_misses"],
        "sinks": {a["name"]: a["stats"] for a in summary.get("sinks", [])},
    }
    if view:
        if watcher:
            watcher[0].join(10)
            out["client"] = watcher[0].report()
        else:
            out["client"] = None
    return out


def pair_ratios(runs: list[dict[str, Any]], key: str) -> list[float]:
    """with/without of ``key`` for each pair of runs (either order); a pair missing the figure is left out."""
    out = []
    for a, b in zip(runs[::2], runs[1::2]):
        plain, view = (b, a) if a["view"] else (a, b)
        if plain[key] and view[key]:
            out.append(view[key] / plain[key])
    return out


def measure(name: str, make: Any, args: argparse.Namespace, limit: list[str], folder: Path) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for i in range(args.pairs):
        for view in ((False, True) if i % 2 == 0 else (True, False)):
            tag = f"{name}_{i}_{'view' if view else 'plain'}"
            doc = make(args.attach if view else None)
            r = run_once(doc, folder, tag, args.backend, limit, view, not args.no_client, args.timeout, args.cpus)
            r["view"] = view
            runs.append(r)
            print(f"{tag}: {r['samples_per_s'] / 1e6:.1f} Msamples/s, p99 {r['p99_us']:.1f} us", file=sys.stderr)
    return {"runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--pairs", type=int, default=3, help="plain/view run pairs per workload (default 3)")
    ap.add_argument("--seconds", type=float, default=20.0, help="W1: seconds of paced signal per run (default 20)")
    ap.add_argument("--w2-blocks", type=int, default=300,
                    help="W2: blocks per run (default 300: 5 Gsamples, 40 GiB over PCIe)")
    ap.add_argument("--attach", choices=("add", "replace"), default="add",
                    help="the view sink beside the null sink (add, default) or in its place (replace)")
    ap.add_argument("--no-client", action="store_true", help="no WebSocket client reads the page")
    ap.add_argument("--workloads", default="w2,w1", help="comma-separated: w2, w1 (default both)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take at most")
    ap.add_argument("--cpus", help="run every gk-stream under taskset -c CPUS (e.g. 0-7), the view's server too")
    ap.add_argument("--json", type=Path, help="write the report here")
    args = ap.parse_args(argv)
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    report: dict[str, Any] = {"backend": args.backend, "pairs": args.pairs, "attach": args.attach, "cpus": args.cpus,
                              "client": not args.no_client, "started_unix_s": time.time(), "workloads": {}}
    wanted = [w.strip() for w in args.workloads.split(",") if w.strip()]
    with tempfile.TemporaryDirectory(prefix="gk_view_cost_") as tmp:
        folder = Path(tmp)
        if "w2" in wanted:
            w2 = measure("w2", w2_file, args, ["--blocks", str(args.w2_blocks)], folder)
            ratios = pair_ratios(w2["runs"], "samples_per_s")
            w2.update(figure="samples_per_s", ratios=ratios, ratio=statistics.median(ratios), target=W2_TARGET,
                      meets=statistics.median(ratios) >= W2_TARGET)
            report["workloads"]["w2"] = w2
        if "w1" in wanted:
            w1 = measure("w1", w1_file, args, ["--duration", str(args.seconds)], folder)
            ratios = pair_ratios(w1["runs"], "p99_us")
            sched = pair_ratios(w1["runs"], "scheduler_p99_us")
            w1.update(figure="p99_us", ratios=ratios, ratio=statistics.median(ratios), target=W1_TARGET,
                      meets=statistics.median(ratios) <= W1_TARGET,
                      scheduler_ratio=statistics.median(sched) if sched else None)
            report["workloads"]["w1"] = w1
    for name, w in report["workloads"].items():
        print(f"{name}: with/without {w['figure']} {w['ratio']:.3f} (median of {args.pairs}), target "
              f"{'>=' if name == 'w2' else '<='} {w['target']}: {'met' if w['meets'] else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
