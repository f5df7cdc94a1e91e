"""What the live web view costs a stream: W2 streamed and W1 paced, each run by ``gk-stream run``'s
own main without a view and with one, alternating, one run after another in one worker process
(``--process-per-run``: a process each).

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
neither; each ratio is the median over the pairs. The runs share one worker process because a
process's memory placement moves W2 (a host-memory-bound stream: 128 MiB copied a block) by more
than the 2% to resolve: runs in fresh processes spread over 599-763 Msamples/s on one H200 host.
``plain_spread`` (max / min of the runs without the view) says how far the runs moved, and
``interval_90`` (a bootstrap over the pairs) how well the pairs resolve the median.

    python benchmarks/view_cost.py --backend cuda --json view_cost.json
    python benchmarks/view_cost.py --backend cpu --pairs 1 --seconds 1 --w2-blocks 2   # a dry check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
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
DONE = re.compile(r"view_cost: done (\S+) rc=(-?\d+)")


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


def run_argv(doc: dict[str, Any], folder: Path, tag: str, backend: str, limit: list[str], view: bool) -> list[str]:
    """``gk-stream run``'s arguments for one run (its file written into ``folder``)."""
    path = folder / f"{tag}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return ["run", str(path), "--backend", backend, *limit, "--stats-json", str(folder / f"{tag}.json"),
            "--quiet"] + (["--view", "127.0.0.1:0"] if view else [])


def run_figures(stats: Path) -> dict[str, Any]:
    summary = json.loads(stats.read_text())
    return {
        "samples_per_s": summary["samples_per_s"], "blocks": summary["blocks"], "wall_s": summary["wall_s"],
        "p99_us": summary["latency_us"].get("p99"), "p50_us": summary["latency_us"].get("p50"),
        "scheduler_p99_us": (summary.get("scheduler") or {}).get("latency_us", {}).get("p99"),
        "deadline_misses": summary["deadline_misses"],
        "sinks": {a["name"]: a["stats"] for a in summary.get("sinks", [])},
    }


def run_planned(plan: list[dict[str, Any]], folder: Path, *, same_process: bool, client: bool, timeout: float,
                cpus: str | None) -> list[dict[str, Any]]:
    """Each planned run ({tag, argv, view}) in order, through gk-stream's own main in a worker
    process (``--worker``): all of them in one with ``same_process``, else a worker each. The
    WebSocket client of a view run reads from this process. Each run's figures, with what the
    client read."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    taskset = ["taskset", "-c", cpus] if cpus else []  # every run on the same CPUs (and memory node)
    results: list[dict[str, Any]] = []
    for i, batch in enumerate([plan] if same_process else [[item] for item in plan]):
        plan_file = folder / f"plan_{i}.json"
        plan_file.write_text(json.dumps(batch))
        cmd = [*taskset, sys.executable, str(Path(__file__).resolve()), "--worker", str(plan_file)]
        results += _run_batch(cmd, batch, env, client, timeout * len(batch), folder)
    return results


def _run_batch(cmd: list[str], batch: list[dict[str, Any]], env: dict[str, str], client: bool, timeout: float,
               folder: Path) -> list[dict[str, Any]]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    watchers: list[ViewClient | None] = []  # one a view run, in order
    done: list[int] = []  # each finished run's exit status, in order
    err_lines: list[str] = []

    def read_stderr() -> None:
        for line in proc.stderr:
            err_lines.append(line)
            m = URL.search(line)
            if m:
                watchers.append(ViewClient(m.group(1)) if client else None)
            d = DONE.match(line)
            if d:
                done.append(int(d.group(2)))

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise SystemExit(f"view_cost: {batch[min(len(done), len(batch) - 1)]['tag']} ran past {timeout:.0f} s")
    reader.join(10)
    if rc != 0 or len(done) != len(batch) or any(done):  # the first run that did not end well
        tag = batch[next((i for i, r in enumerate(done) if r != 0), min(len(done), len(batch) - 1))]["tag"]
        raise SystemExit(f"view_cost: {tag} failed (exit {rc}):\n{''.join(err_lines)[-3000:]}")
    out, views = [], iter(watchers)
    for item in batch:
        r = run_figures(folder / f"{item['tag']}.json")
        r["view"] = item["view"]
        if item["view"]:
            w = next(views, None)
            if w is not None:
                w.join(10)
            r["client"] = w.report() if w is not None else None
        out.append(r)
    return out


def worker_main(plan_file: str) -> int:
    """``--worker PLAN``: each planned run, in this one process, through gk-stream's own main."""
    from pygpukit_dsp import cli

    for item in json.loads(Path(plan_file).read_text()):
        rc = cli.main(item["argv"])
        print(f"view_cost: done {item['tag']} rc={rc}", file=sys.stderr, flush=True)
    return 0


def pair_ratios(runs: list[dict[str, Any]], key: str) -> list[float]:
    """with/without of ``key`` for each pair of runs (either order); a pair missing the figure is left out."""
    out = []
    for a, b in zip(runs[::2], runs[1::2]):
        plain, view = (b, a) if a["view"] else (a, b)
        if plain[key] and view[key]:
            out.append(view[key] / plain[key])
    return out


def measure(name: str, make: Any, args: argparse.Namespace, limit: list[str], folder: Path) -> dict[str, Any]:
    # in one process its first run pays for what later runs find warm (imports, kernels, the
    # device's context): a run with the view first, not counted, warms both paths
    plan = [] if args.process_per_run else [
        {"tag": f"{name}_warmup", "view": True, "argv": run_argv(make(args.attach), folder, f"{name}_warmup",
                                                                  args.backend, limit, True)}]
    for i in range(args.pairs):
        for view in ((False, True) if i % 2 == 0 else (True, False)):
            tag = f"{name}_{i}_{'view' if view else 'plain'}"
            plan.append({"tag": tag, "view": view,
                         "argv": run_argv(make(args.attach if view else None), folder, tag, args.backend, limit, view)})
    runs = run_planned(plan, folder, same_process=not args.process_per_run, client=not args.no_client,
                       timeout=args.timeout, cpus=args.cpus)
    for item, r in zip(plan, runs):
        print(f"{item['tag']}: {r['samples_per_s'] / 1e6:.1f} Msamples/s, p99 {r['p99_us']:.1f} us", file=sys.stderr)
    if not args.process_per_run:
        return {"runs": runs[1:], "warmup": runs[0]}
    return {"runs": runs}


def median_interval(ratios: list[float], level: float = 0.9, draws: int = 10000) -> tuple[float, float]:
    """A bootstrap interval of the median ratio (resampled pairs, a fixed seed): how well the pairs
    resolve it."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    tail = (1.0 - level) / 2
    return medians[int(tail * draws)], medians[min(draws - 1, int((1.0 - tail) * draws))]


def spread(runs: list[dict[str, Any]], key: str) -> float | None:
    """max / min of ``key`` over the runs without the view: the noise a ratio is read against."""
    plain = [r[key] for r in runs if not r["view"] and r[key]]
    return max(plain) / min(plain) if plain else None


def judged(w: dict[str, Any], figure: str, target: float, *, at_least: bool) -> dict[str, Any]:
    """``w`` with its pairs' ratios of ``figure``, their median against ``target`` (at least it, or
    at most), the spread of the runs without the view and the median's bootstrap interval."""
    ratios = pair_ratios(w["runs"], figure)
    ratio = statistics.median(ratios)
    w.update(figure=figure, ratios=ratios, ratio=ratio, target=target,
             meets=ratio >= target if at_least else ratio <= target,
             plain_spread=spread(w["runs"], figure), interval_90=median_interval(ratios))
    return w


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
    ap.add_argument("--process-per-run", action="store_true",
                    help="start a process for each run (default: the runs one after another in one worker "
                         "process, so that they share its memory placement)")
    ap.add_argument("--json", type=Path, help="write the report here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args.worker)
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    report: dict[str, Any] = {"backend": args.backend, "pairs": args.pairs, "attach": args.attach, "cpus": args.cpus,
                              "client": not args.no_client,
                              "same_process": not args.process_per_run, "started_unix_s": time.time(), "workloads": {}}
    wanted = [w.strip() for w in args.workloads.split(",") if w.strip()]
    with tempfile.TemporaryDirectory(prefix="gk_view_cost_") as tmp:
        folder = Path(tmp)
        if "w2" in wanted:
            w2 = measure("w2", w2_file, args, ["--blocks", str(args.w2_blocks)], folder)
            report["workloads"]["w2"] = judged(w2, "samples_per_s", W2_TARGET, at_least=True)
        if "w1" in wanted:
            w1 = measure("w1", w1_file, args, ["--duration", str(args.seconds)], folder)
            sched = pair_ratios(w1["runs"], "scheduler_p99_us")
            w1["scheduler_ratio"] = statistics.median(sched) if sched else None
            report["workloads"]["w1"] = judged(w1, "p99_us", W1_TARGET, at_least=False)
    for name, w in report["workloads"].items():
        lo, hi = w["interval_90"]
        print(f"{name}: with/without {w['figure']} {w['ratio']:.3f} (median of {args.pairs}, 90% {lo:.3f}-{hi:.3f}; "
              f"runs without the view spread {w['plain_spread']:.3f}x), target {'>=' if name == 'w2' else '<='} {w['target']}: "
              f"{'met' if w['meets'] else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
