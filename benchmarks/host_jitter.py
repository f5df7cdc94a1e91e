"""Host noise probe: how long can this host stall a spinning thread?

A realtime stream's latency is host wall clock, so a host that preempts a thread for a
millisecond misses a 1 ms deadline whatever the GPU does. This probe measures that floor with
no GPU involved: a thread spins on the clock and records every gap between two reads longer
than --threshold-us (a gap is time the thread did not run). It runs the spin alone, pinned to
one CPU, under SCHED_FIFO where the host allows it, and beside --spinners busy processes
(W3 keeps about three threads spinning). It also reads the cgroup CPU quota and throttling and
the hypervisor's steal time around each run.

    python3 benchmarks/host_jitter.py --seconds 5 --json out/host_jitter.json
"""
from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import time
from pathlib import Path

from pygpukit_dsp.affinity import pinned
from pygpukit_dsp.bench.host_settings import fifo as sched_fifo
from pygpukit_dsp.bench.host_settings import sched_fifo_allowed


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _steal_ticks() -> int | None:
    line = (_read("/proc/stat") or "").splitlines()[0].split()
    return int(line[8]) if len(line) > 8 else None


def _throttle() -> dict[str, int]:
    text = _read("/sys/fs/cgroup/cpu.stat") or ""
    keys = ("nr_periods", "nr_throttled", "throttled_usec")
    return {k: int(v) for k, v in (ln.split() for ln in text.splitlines() if ln) if k in keys}


def environment() -> dict:
    return {
        "cpus_online": os.cpu_count(),
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "cgroup_cpu_max": _read("/sys/fs/cgroup/cpu.max"),
        "cgroup_cpuset": _read("/sys/fs/cgroup/cpuset.cpus.effective"),
        "sched_rt_runtime_us": _read("/proc/sys/kernel/sched_rt_runtime_us"),
        "kernel_cmdline": _read("/proc/cmdline"),
        "governor": _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "clocksource": _read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        "sched_fifo_allowed": sched_fifo_allowed(),
    }


def spin(seconds: float, threshold_ns: int) -> dict:
    perf = time.perf_counter_ns
    gaps: list[int] = []
    t_end = perf() + int(seconds * 1e9)
    last = perf()
    while last < t_end:
        now = perf()
        if now - last > threshold_ns:
            gaps.append(now - last)
        last = now
    gaps.sort()
    over = lambda us: sum(g > us * 1000 for g in gaps)  # noqa: E731
    return {"gaps": len(gaps), "over_100us": over(100), "over_500us": over(500), "over_1ms": over(1000),
            "max_us": round(gaps[-1] / 1e3, 1) if gaps else 0.0,
            "stalled_ms": round(sum(gaps) / 1e6, 2)}


def _busy(stop: "mp.synchronize.Event") -> None:  # a spinner beside the probe
    while not stop.is_set():
        for _ in range(10000):
            pass


def run_case(name: str, seconds: float, threshold_ns: int, *, cpu: int | None = None, fifo: bool = False,
             spinners: int = 0) -> dict:
    stop = mp.Event()
    procs = [mp.Process(target=_busy, args=(stop,), daemon=True) for _ in range(spinners)]
    for p in procs:
        p.start()
    steal0, thr0 = _steal_ticks(), _throttle()
    try:
        with pinned(cpu), (sched_fifo(10) if fifo else contextlib.nullcontext()):
            res = spin(seconds, threshold_ns)
    finally:
        stop.set()
        for p in procs:
            p.join(2)
    steal1, thr1 = _steal_ticks(), _throttle()
    res.update(case=name, cpu=cpu, fifo=fifo, spinners=spinners)  # the label, and what it is made of
    if steal0 is not None and steal1 is not None:
        res["steal_ms_all_cpus"] = (steal1 - steal0) * 1000 // os.sysconf("SC_CLK_TCK")
    res["throttled"] = {k: thr1.get(k, 0) - thr0.get(k, 0) for k in thr1}
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="spin time per case (default 5)")
    ap.add_argument("--threshold-us", type=float, default=20.0, help="shortest gap counted (default 20)")
    ap.add_argument("--spinners", type=int, default=3, help="busy processes beside the probe (default 3)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    env = environment()
    thr = int(a.threshold_us * 1000)
    cpus = env["cpus_allowed"]
    cases = [run_case("default", a.seconds, thr),
             run_case(f"pinned to cpu {cpus[-1]}", a.seconds, thr, cpu=cpus[-1]),
             run_case(f"default, {a.spinners} spinners beside", a.seconds, thr, spinners=a.spinners)]
    if env["sched_fifo_allowed"]:
        cases.append(run_case(f"SCHED_FIFO, pinned to cpu {cpus[-1]}, {a.spinners} spinners beside",
                              a.seconds, thr, cpu=cpus[-1], fifo=True, spinners=a.spinners))
    print("host:", json.dumps(env))
    print(f"| case ({a.seconds:g} s each) | gaps > {a.threshold_us:g} us | > 100 us | > 500 us | > 1 ms "
          "| max us | stalled ms | steal ms | throttled |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for c in cases:
        print(f"| {c['case']} | {c['gaps']} | {c['over_100us']} | {c['over_500us']} | {c['over_1ms']} "
              f"| {c['max_us']} | {c['stalled_ms']} | {c.get('steal_ms_all_cpus', '-')} | {c['throttled']} |")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"host": env, "cases": cases}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
