"""First block: what a fresh process pays from opening the cuda engine to the first output.

Every measurement is a fresh interpreter (this file with --child), so nothing is warm but the
files on disk. Per workload (W1, W2) and configuration:

* cold: an empty kernel disk cache (a new GK_CACHE_DIR): the first run after `pip install`;
* warm: a second fresh process on the cache dir the cold run left: the second run after install.

Configurations:

* shipped: this build as installed (kernels compiled into the wheel, loaded from it);
* no-shipped: the same build with GK_SHIPPED_KERNELS=0 (NVRTC compiles at first use, as before
  the kernels were shipped);
* before: another installation (--before-site DIR, e.g. main's wheel installed with
  `pip install --no-deps --target DIR`), put first on PYTHONPATH.

The first block is the time from the start of opening the engine to the first block's output
(the same span as `gk-stream bench`'s first-block note): backend choice (capabilities, lowering),
the memory check, the engine's constructor (kernel modules, plans, buffers, pinned slots,
warm-up block, graph capture: each step from CudaEngine.build_timings() when the build has it),
then process() of one block. Before it, and not part of it: imports and the CUDA context
(_native.Device(0), reported as "context"). The second block is reported for scale.

    python benchmarks/first_block.py --json out/first_block.json --markdown out/first_block.md
    python benchmarks/first_block.py --before-site /tmp/site-before --runs 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOADS = {"w1": HERE / "w1.yaml", "w2": HERE / "w2.yaml"}


# ------------------------------------------------------------------------------------- child
def child(workload: str) -> dict:
    t_start = time.perf_counter()
    import numpy as np

    from pygpukit_dsp import Pipeline, _native
    from pygpukit_dsp.backends import choose_backend
    from pygpukit_dsp.limits import check_memory

    t_import = time.perf_counter()
    p = Pipeline.from_yaml(str(WORKLOADS[workload]))
    chain = p.specs()
    rng = np.random.default_rng(0)
    shape = chain.input.block_shape
    if np.dtype(chain.input.np_dtype).kind == "c":
        block = (rng.standard_normal(shape, np.float32) + 1j * rng.standard_normal(shape, np.float32)).astype(
            chain.input.np_dtype)
    else:
        block = rng.standard_normal(shape, np.float32).astype(chain.input.np_dtype)
    stats0 = dict(_native.jit_stats())

    t0 = time.perf_counter()
    device = _native.Device(0)          # the CUDA context: before the first block, kept for the run
    t_context = time.perf_counter()

    # open_backend(p, chain, "cuda"), step by step
    t1 = time.perf_counter()
    choice = choose_backend(p, chain, "cuda")
    t2 = time.perf_counter()
    check_memory(p, chain, choice.name)
    t3 = time.perf_counter()
    from pygpukit_dsp.backends.cuda_engine import CudaEngine

    engine = CudaEngine(p, chain, choice)
    t4 = time.perf_counter()
    engine.process(block)
    t5 = time.perf_counter()
    engine.process(block)
    t6 = time.perf_counter()

    ms = lambda a, b: (b - a) * 1e3  # noqa: E731
    phases = [("backend choice (capabilities, lowering)", ms(t1, t2)), ("memory check", ms(t2, t3))]
    build = list(getattr(engine, "build_timings", lambda: [])())
    inner = [(f"engine: {name}", v) for name, v in build if not name.startswith("slots: ")]
    detail = [(f"engine: {name}", v) for name, v in build if name.startswith("slots: ")]
    accounted = sum(v for _, v in inner)
    phases += inner
    phases.append(("engine: Python wrapper and the rest" if build else "engine (constructor)",
                   ms(t3, t4) - accounted))
    phases.append(("first process()", ms(t4, t5)))
    stats = dict(_native.jit_stats())
    loads = list(getattr(_native, "kernel_loads", lambda: [])())
    sources: dict[str, int] = {}
    for load in loads:
        key = f"{load['source']} {load['image']}"
        sources[key] = sources.get(key, 0) + 1
    pool = dict(device.memory_stats())
    engine.close()
    return {
        "workload": workload,
        "package": str(Path(_native.__file__).resolve().parent),
        "import_ms": ms(t_start, t_import),
        "context_ms": ms(t0, t_context),
        "first_block_ms": ms(t1, t5),
        "second_block_ms": ms(t5, t6),
        "engine_open_ms": ms(t1, t4),
        "phases": phases,
        "slot_detail": detail,
        "jit": {k: stats.get(k, 0) - stats0.get(k, 0) for k in stats},
        "kernel_sources": sources,
        "kernel_loads": loads,
        "pool": {k: pool.get(k) for k in ("driver_allocations", "grants", "reserved_bytes")},
        "library_objects": dict(getattr(device, "library_objects", lambda: {})()),
    }


# ------------------------------------------------------------------------------------ parent
def run_child(workload: str, cache: str, env_extra: dict[str, str], pythonpath: str | None) -> dict:
    env = dict(os.environ)
    env.update(env_extra)
    env["GK_CACHE_DIR"] = cache
    env.pop("GK_JIT_DISK_CACHE", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", workload],
                          env=env, capture_output=True, text=True, timeout=600,
                          cwd=tempfile.gettempdir())  # outside the checkout: the installed package
    if proc.returncode != 0:
        raise RuntimeError(f"child {workload} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def configurations(before_site: str | None) -> list[tuple[str, dict[str, str], str | None]]:
    base = os.environ.get("PYTHONPATH", "")
    out = []
    if before_site:
        out.append(("before", {"GK_SHIPPED_KERNELS": "1"},
                    os.pathsep.join(x for x in (before_site, base) if x)))
    out.append(("no-shipped", {"GK_SHIPPED_KERNELS": "0"}, None))
    out.append(("shipped", {"GK_SHIPPED_KERNELS": "1"}, None))
    return out


def measure(workloads: list[str], runs: int, before_site: str | None, progress=print) -> dict:
    results: list[dict] = []
    for workload in workloads:
        for config, env, pythonpath in configurations(before_site):
            for run in range(runs):
                with tempfile.TemporaryDirectory(prefix="gk-first-block-") as cache:
                    for mode in ("cold", "warm"):
                        r = run_child(workload, cache, env, pythonpath)
                        if config == "before" and not r["package"].startswith(str(Path(before_site).resolve())):
                            raise RuntimeError(f"the 'before' run imported {r['package']}, not the package in "
                                               f"{before_site} (an editable install's import hook wins over "
                                               "PYTHONPATH: run from an environment without one)")
                        r.update(config=config, mode=mode, run=run)
                        results.append(r)
                        progress(f"{workload} {config:<10} {mode} run {run}: first block "
                                 f"{r['first_block_ms']:.1f} ms (context {r['context_ms']:.0f} ms; "
                                 f"kernels {r['kernel_sources'] or r['jit']})")
    return {"runs": runs, "results": results, "summary": summarise(results),
            "machine": machine()}


def machine() -> dict:
    info = {"python": sys.version.split()[0]}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        info["gpu"] = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["gpu"] = "unknown"
    return info


def summarise(results: list[dict]) -> list[dict]:
    rows = []
    keys = sorted({(r["workload"], r["config"]) for r in results},
                  key=lambda k: (k[0], ["before", "no-shipped", "shipped"].index(k[1])))
    for workload, config in keys:
        row: dict = {"workload": workload, "config": config}
        for mode in ("cold", "warm"):
            rs = [r for r in results if (r["workload"], r["config"], r["mode"]) == (workload, config, mode)]
            firsts = [r["first_block_ms"] for r in rs]
            row[mode] = {"median_ms": statistics.median(firsts), "min_ms": min(firsts), "max_ms": max(firsts),
                         "context_ms": statistics.median(r["context_ms"] for r in rs),
                         "second_block_ms": statistics.median(r["second_block_ms"] for r in rs),
                         "kernel_sources": rs[0]["kernel_sources"], "nvrtc_compiles":
                             max(r["jit"].get("nvrtc_compiles", r["jit"].get("compiles", 0)) for r in rs)}
            for key in ("phases", "slot_detail"):
                names = [n for n, _ in rs[0][key]]
                row[mode][key] = [(n, statistics.median(dict(r[key]).get(n, 0.0) for r in rs)) for n in names]
        row["cold_over_warm"] = row["cold"]["median_ms"] / row["warm"]["median_ms"]
        rows.append(row)
    return rows


def markdown(report: dict) -> str:
    lines = [f"# First block (fresh process per run, median of {report['runs']})", "",
             f"GPU: {report['machine'].get('gpu', '?')}", "",
             "| workload | build | cold first block ms (min-max) | warm first block ms (min-max) | cold/warm |"
             " kernels (cold) | context ms | 2nd block ms |",
             "|---|---|---|---|---|---|---|---|"]
    for row in report["summary"]:
        c, w = row["cold"], row["warm"]
        kernels = ", ".join(f"{n}x {k}" for k, n in sorted(c["kernel_sources"].items())) or \
            f"{c['nvrtc_compiles']} NVRTC compiles"
        lines.append(f"| {row['workload'].upper()} | {row['config']} | {c['median_ms']:.1f} "
                     f"({c['min_ms']:.1f}-{c['max_ms']:.1f}) | {w['median_ms']:.1f} ({w['min_ms']:.1f}-"
                     f"{w['max_ms']:.1f}) | {row['cold_over_warm']:.2f} | {kernels} | {c['context_ms']:.0f} | "
                     f"{c['second_block_ms']:.2f} |")
    lines += ["", "Targets (H100): cold <= 1.2x warm for W1 and W2; W2's cold first block <= 300 ms.",
              ""]
    packages = {}
    for r in report["results"]:
        packages.setdefault(r["config"], r["package"])
    lines += [f"* {config}: {package}" for config, package in packages.items()] + [""]
    for row in report["summary"]:
        lines += [f"## {row['workload'].upper()} {row['config']}: phases of the first block (median ms)", "",
                  "| phase | cold | warm |", "|---|---|---|"]
        warm = dict(row["warm"]["phases"])
        for name, v in row["cold"]["phases"]:
            lines.append(f"| {name} | {v:.2f} | {warm.get(name, 0.0):.2f} |")
        warm = dict(row["warm"]["slot_detail"])
        for name, v in row["cold"]["slot_detail"]:
            lines.append(f"| ({name}, within slots) | {v:.2f} | {warm.get(name, 0.0):.2f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", metavar="WORKLOAD", help=argparse.SUPPRESS)
    ap.add_argument("--workloads", default="w1,w2")
    ap.add_argument("--runs", type=int, default=3, help="cold+warm pairs per workload and build")
    ap.add_argument("--before-site", metavar="DIR", help="another installation to measure as 'before'")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--markdown", metavar="PATH")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    report = measure([w.strip() for w in args.workloads.split(",") if w.strip()], args.runs, args.before_site,
                     progress=lambda s: print(s, file=sys.stderr, flush=True))
    text = markdown(report)
    print(text)
    for path, content in ((args.json, json.dumps(report, indent=2) + "\n"), (args.markdown, text + "\n")):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(content)
    return 0


if __name__ == "__main__":
    sys.exit(main())
