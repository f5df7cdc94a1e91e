"""The paced GPU measurements in one process, within a time budget (scripts/gpu_run.sh, section
``cadence``): W1 at its real cadence (256 and 64 samples per block) with every baseline paced the
same way and the project back to back, the host settings compared, the capacity sweep of both
pygpukit-dsp and PyTorch + CUDA graph, then W3 and the host's own stalls if time is left.

Writes OUT/cadence.md and OUT/cadence.json after every part (a run cut short keeps what it did),
and OUT/capacity.png. Every part's size has an environment knob (below); the budget
(CADENCE_BUDGET_S, default 400 s) drops the parts that would not fit, and the report says which.

    python benchmarks/cadence.py --out out/gpu
    CADENCE_BUDGET_S=120 CAPACITY_CONFIRM_S=10 python benchmarks/cadence.py --out out/gpu   # shorter
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # the studies package beside this script (studies/capacity)


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def env_ints(name: str, default: list[int]) -> list[int]:
    v = os.environ.get(name)
    return [int(x) for x in v.split(",") if x.strip()] if v else list(default)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/gpu")
    ap.add_argument("--parts", default=os.environ.get("CADENCE_PARTS", "w1,w1_64,settings,capacity,w3"),
                    help="comma-separated: w1, w1_64, settings, capacity, w3")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    parts = [p.strip() for p in a.parts.split(",") if p.strip()]
    budget = env_float("CADENCE_BUDGET_S", 400.0)
    t_start = time.perf_counter()
    left = lambda: budget - (time.perf_counter() - t_start)  # noqa: E731
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    compare = [c for c in os.environ.get("CADENCE_COMPARE", "numpy,cupy,torch,torch-graph").split(",") if c]
    results: dict = {"parts": parts, "budget_s": budget, "skipped": {}, "elapsed_s": {}}
    sections: list[str] = []

    def write() -> None:
        results["total_s"] = round(time.perf_counter() - t_start, 1)
        skipped = [f"- {k}: skipped ({v})" for k, v in results["skipped"].items()]
        (out / "cadence.md").write_text("\n\n".join(sections + (["Parts left out:\n" + "\n".join(skipped)]
                                                                if skipped else [])) + "\n")
        (out / "cadence.json").write_text(json.dumps(results, indent=1, default=str))

    def part(name: str, estimate_s: float, fn) -> None:
        if name not in parts:
            return
        if left() < estimate_s:
            results["skipped"][name] = f"needs ~{estimate_s:.0f} s, {max(0.0, left()):.0f} s of the budget left"
            say(f"cadence: {results['skipped'][name]}: {name} left out")
            write()
            return
        t0 = time.perf_counter()
        say(f"cadence: == {name} (estimate {estimate_s:.0f} s, {left():.0f} s left)")
        try:
            fn()
        except Exception as exc:  # one part failing does not lose the others
            import traceback

            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            sections.append(f"### {name}: FAILED\n\n{type(exc).__name__}: {exc}")
        results["elapsed_s"][name] = round(time.perf_counter() - t0, 1)
        write()

    from pygpukit_dsp import Pipeline
    from pygpukit_dsp.bench.cadence import run_cadence

    w1 = Pipeline.from_yaml(str(HERE / "w1.yaml"))
    blocks = env_int("CADENCE_BLOCKS", 1000)
    period = 256 / 48000

    def paced(key: str, block_size: int | None, n: int, settings: bool) -> None:
        rep = run_cadence(w1, backend="cuda", blocks=n, warmup=env_int("CADENCE_WARMUP", 200),
                          compare=[] if settings else compare, block_size=block_size,
                          spin_us=env_int("CADENCE_SPIN_US", 200), prewarm=os.environ.get("CADENCE_PREWARM", "1") == "1",
                          settings=settings, settings_blocks=n, progress=say)
        if settings:  # the settings table only (the project's paced/back-to-back rows are in w1)
            rep.rows = [r for r in rep.rows if r.kind in ("project", "back_to_back")]
        results[key] = rep.to_dict()
        sections.append(rep.markdown())
        print(rep.markdown(), flush=True)

    per_impl = len(compare) + 1
    part("w1", blocks * period * per_impl * 1.15 + 20,
         lambda: paced("w1", None, blocks, False))
    part("w1_64", blocks * (64 / 48000) * per_impl * 1.3 + 15,
         lambda: paced("w1_64", 64, blocks, False))
    s_blocks = env_int("SETTINGS_BLOCKS", 400)
    part("settings", s_blocks * period * 10 * 1.1 + 10, lambda: paced("settings", None, s_blocks, True))

    w3_blocks = env_int("W3_BLOCKS", 3000)

    def w3_reserve() -> float:  # what the W3 part needs for its W3_BLOCKS, when it is to run
        return (15 + w3_blocks * 5 * period * 1.1 + 45) if "w3" in parts else 0.0

    def capacity() -> None:
        from studies.capacity import PROJECT_LADDER, TORCH_LADDER, plot_capacity, run_capacity

        coarse, confirm = env_float("CAPACITY_COARSE_S", 2.0), env_float("CAPACITY_CONFIRM_S", 30.0)
        rep = run_capacity(w1, ladder=env_ints("CAPACITY_LADDER", list(PROJECT_LADDER)),
                           torch_ladder=env_ints("CAPACITY_TORCH_LADDER", list(TORCH_LADDER)),
                           coarse_s=coarse, confirm_s=confirm, budget_s=max(30.0, left() - w3_reserve()),
                           threads=env_int("CAPACITY_THREADS", 0) or None,  # 0: the default (cores / 4, 1..4)
                           baseline=env_int("CAPACITY_BASELINE", 1) == 1, floor=env_int("CAPACITY_FLOOR", 1) == 1,
                           aligned=env_int("CAPACITY_ALIGNED", 1) == 1,  # 0: the project's staggered streams only
                           progress=say)
        results["capacity"] = rep.to_dict()
        sections.append(rep.markdown())
        print(rep.markdown(), flush=True)
        try:
            plot_capacity(rep, str(out / "capacity.png"))
        except Exception as exc:  # the table and JSON stand without the plot
            say(f"cadence: no capacity plot ({exc})")

    part("capacity", env_float("CAPACITY_MIN_S", 60.0), capacity)

    def w3() -> None:
        jitter = subprocess.run([sys.executable, str(HERE / "host_jitter.py"), "--seconds",
                                 os.environ.get("JITTER_S", "3"), "--json", str(out / ".host_jitter.json")],
                                capture_output=True, text=True, timeout=120)
        sections.append("### Host jitter (benchmarks/host_jitter.py, no GPU)\n\n" + jitter.stdout.strip())
        print(jitter.stdout, flush=True)
        try:
            results["host_jitter"] = json.loads((out / ".host_jitter.json").read_text())
            (out / ".host_jitter.json").unlink()
        except (OSError, ValueError):
            results["host_jitter"] = {"stdout": jitter.stdout, "stderr": jitter.stderr[-2000:]}
        from pygpukit_dsp.bench.contention import run_w3

        # W3 with the paced waits (W1 waits natively: spin window + prewarm); the blocks
        # that fit in what is left of the budget, at most W3_BLOCKS (default 3000)
        fit = int(max(0.0, left() - 45) / (5 * period * 1.1))
        n = max(500, min(w3_blocks, fit))
        rep = run_w3(HERE / "w3.yaml", blocks=n, warmup=max(50, n // 10), progress=say)
        results["w3"] = rep.to_dict()
        sections.append(rep.markdown())
        print(rep.markdown(), flush=True)

    part("w3", 15 + 500 * 5 * period * 1.1 + 45, w3)
    write()
    say(f"cadence: done in {time.perf_counter() - t_start:.0f} s; {out / 'cadence.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
