"""W3's PyTorch rows (the contention bench, bench/contention.py; the baseline itself is
bench/baselines/torch_w3.py): W1 alone, W2 alone, both at the same stream priority and W1 at the
device's highest, paced the way pygpukit-dsp's W1 is, their outputs checked against ours."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .latency import LatencyFigures
from .w3_pacing import W1_CHECK_BLOCKS, W1Run, pace_until, paced_w1
from .w3_pumps import finish_pump, start_pump, timed_window, wait_started
from .w3_report import SELF_RTOL, W2_CHECK_BLOCKS, ContentionReport, ContentionRow, output_check, w1_line

if TYPE_CHECKING:
    from ..pipeline import SpecChain
    from .contention import ContentionBench, Progress, ReleaseWaitSettings


def torch_rows(report: ContentionReport, bench: ContentionBench, c1: "SpecChain", c2: "SpecChain",
                w1_inputs: list[np.ndarray], w2_blocks: list[np.ndarray], ref_w1: list[np.ndarray],
                ref_w2: list[np.ndarray], *, warmup: int, blocks: int, period_ns: int, deadline_ns: int,
                seconds: float, say: Progress, wait: ReleaseWaitSettings | None = None) -> None:
    from .. import _native
    from .baselines import BaselineSkipped
    from .baselines.torch_w3 import TorchW3
    from .harness import CHECK_RTOL

    keys = [("torch_solo", "PyTorch + CUDA graph, alone (priority 0)", None),
            ("torch_same", "PyTorch, two streams, same priority", "torch_solo"),
            ("torch_high", "PyTorch, two streams, W1 high priority", "torch_solo")]
    rows = {k: ContentionRow(k, label, solo_key=solo) for k, label, solo in keys}
    report.rows += list(rows.values())
    w1n, w2n = bench.realtime.name, bench.throughput.name
    say("w3: PyTorch baseline: capturing CUDA graphs")
    try:
        torch_w3 = TorchW3(bench.realtime, c1, bench.throughput, c2)
    except BaselineSkipped as exc:
        for r in rows.values():
            r.status, r.reason, r.reason_code = "skipped", str(exc), exc.code
        return
    except Exception as exc:  # a baseline that breaks is reported, not fatal
        for r in rows.values():
            r.status, r.reason = "failed", f"{type(exc).__name__}: {exc}"
        return
    spb2 = int(np.prod(c2.input.block_shape))
    outs: dict[str, list[np.ndarray]] = {}
    at = None
    if wait is not None:  # the same native wait as pygpukit-dsp's W1, before each call
        def at(x: np.ndarray, release: int) -> Any:
            if wait.warm_us > 0:  # the same two steps as pygpukit-dsp's W1
                _native.wait_until(int(release) - wait.warm_us * 1000, int(wait.spin_us))
            _native.wait_until(int(release), int(wait.spin_us))
            return torch_w3.w1_process(x)
    try:
        if torch_w3.w2_note:
            report.notes.append(torch_w3.w2_note)
        solo = rows["torch_solo"]
        s1, s2 = torch_w3.streams(high=False)
        solo.extra = {"w1_priority": s1.priority, "w2_priority": s2.priority}
        say(f"w3: PyTorch {w1n} alone")
        run = torch_w3.w1_run(s1, lambda: paced_w1(torch_w3.w1_process, w1_inputs, warmup=warmup,
                                                      blocks=blocks, period_ns=period_ns, release_call=at))
        solo.w1 = LatencyFigures.from_ns(run.lat_ns, deadline_ns, run.overruns)
        outs["solo"] = run.outputs
        say(f"w3:   {w1_line(solo.w1)}")
        say(f"w3: PyTorch {w2n} alone ({seconds:g} s)")
        pump = start_pump(torch_w3.w2_pump(s2, w2_blocks))
        t0, t1 = timed_window(pump, seconds)
        solo.w2_samples_per_s = pump.rate(t0, t1, spb2)
        w2_out = pump.outputs
        say(f"w3:   {solo.w2_samples_per_s / 1e9:.1f} Gsamples/s")
        for key, high in (("torch_same", False), ("torch_high", True)):
            r = rows[key]
            s1, s2 = torch_w3.streams(high=high)
            r.extra = {"w1_priority": s1.priority, "w2_priority": s2.priority}
            say(f"w3: PyTorch {w1n} + {w2n}, stream priorities {s1.priority} / {s2.priority}")
            pump = start_pump(torch_w3.w2_pump(s2, w2_blocks))
            try:
                def loaded(pump=pump) -> W1Run:
                    pace_until(pump.started, torch_w3.w1_process, w1_inputs, period_ns, release_call=at)
                    wait_started(pump)
                    torch_w3.w1_reset()
                    return paced_w1(torch_w3.w1_process, w1_inputs, warmup=warmup, blocks=blocks,
                                     period_ns=period_ns, release_call=at)
                run = torch_w3.w1_run(s1, loaded)
            finally:
                finish_pump(pump)
            r.w1 = LatencyFigures.from_ns(run.lat_ns, deadline_ns, run.overruns)
            r.w2_samples_per_s = pump.rate(run.t_start, run.t_end, spb2)
            outs[key] = run.outputs
            say(f"w3:   {w1_line(r.w1)}; {w2n} {r.w2_samples_per_s / 1e9:.1f} Gsamples/s")
    except Exception as exc:  # a baseline that breaks is reported, not fatal
        for r in rows.values():
            if r.w1 is None and r.status == "ok":
                r.status, r.reason = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        torch_w3.close()
    if "solo" in outs:
        report.checks.append(output_check(f"PyTorch {w1n} = pygpukit-dsp (last {W1_CHECK_BLOCKS} blocks alone)",
                                    outs["solo"], ref_w1, CHECK_RTOL, project=False))
        if rows["torch_solo"].w2_samples_per_s is not None:
            report.checks.append(output_check(f"PyTorch {w2n} = pygpukit-dsp ({W2_CHECK_BLOCKS} blocks from reset)",
                                        w2_out, ref_w2, CHECK_RTOL, project=False))
        for key in ("torch_same", "torch_high"):
            if key in outs:
                report.checks.append(output_check(f"PyTorch {w1n} under load ({key.removeprefix('torch_')} "
                                            f"priority) = alone", outs[key], outs["solo"], SELF_RTOL,
                                            project=False))
