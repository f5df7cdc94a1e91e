"""A stream's block cost, measured before its first block.

Layer: executor (admission). Imports NumPy, the policy and the device keys; never the bench.

A realtime stream (and a throughput stream with ``min_rate``) needs its per-block cost: the
declared ``qos.cost_us``, or one measured here by running a few blocks of zeros through the
opened engine (then its state is reset; a round that met a host hiccup is timed again): its
device time back to back (on a GPU, CUDA events around each block's work) for the scheduler's
sums, and its own latency alone (host wall clock; a realtime stream's blocks one period apart)
for its own wait (:class:`BlockCost`), once per kind of stream (:func:`cost_key`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..devices import device_of, is_gpu
from .policy import DEFAULT_POLICY, AdmissionPolicy

if TYPE_CHECKING:
    from ..runner import StreamRunner


def _sleep_s(seconds: float) -> None:
    time.sleep(seconds)


def _spin_until(t_ns: int) -> None:
    while time.perf_counter_ns() < t_ns:
        pass  # the GIL is held: admission runs before any stream's thread


@dataclass(frozen=True)
class BlockCost:
    """What admission knows of one kind of stream's block, measured before the first block.

    ``device_ns`` is what the scheduler sums (the utilisation bound, Σ C in the response bound, and
    what its dispatcher measures later with events): how long one block holds its device, timed
    back to back. On a GPU, the larger of the block's GPU time (CUDA events around its work; the
    median of the round: a share of the device is an average) and the host time its launch calls
    took (whoever launches every stream's blocks, a dispatcher, does that one block at a time).
    On the host's dispatcher (CPU backend) blocks run one at a time, so it is the wall clock.
    ``latency_ns`` is the block's own latency alone (host wall clock, the slowest of a round at
    the stream's period): the response bound adds its excess over the device time to the stream's
    own wait, once, not once per stream (the host's copies and completion wait overlap other
    streams' blocks).
    """

    device_ns: int
    latency_ns: int
    how: str                     # how device_ns was measured
    gpu_ns: int | None = None    # the GPU time alone (median), when measured
    launch_ns: int | None = None  # the launch's host time alone (median), when measured

    def describe(self) -> str:
        alone = f"{self.latency_ns / 1e3:.1f} us alone, call to done"
        if self.gpu_ns is None:
            return f"{self.device_ns / 1e3:.1f} us of device time per block ({self.how}), {alone}"
        return (f"{self.device_ns / 1e3:.1f} us of device time per block ({self.how}: GPU "
                f"{self.gpu_ns / 1e3:.1f} us, launch {(self.launch_ns or 0) / 1e3:.1f} us), {alone}")

    def to_dict(self) -> dict[str, Any]:
        return {"device_ns": self.device_ns, "latency_ns": self.latency_ns, "how": self.how,
                "gpu_ns": self.gpu_ns, "launch_ns": self.launch_ns}


def _timed_round(engine: Any, x: np.ndarray, blocks: int, rounds: int, timing: bool, calm_factor: float,
                 pace: Callable[[], None]) -> tuple[list[int], list[int], list[int]]:
    """The first calm round of up to ``rounds`` of ``blocks`` blocks (see measure_engine_cost):
    the wall, GPU and launch times of its blocks."""
    least: tuple[list[int], list[int], list[int]] | None = None
    for _ in range(max(1, rounds)):
        times, gpu, launch = [], [], []
        for _ in range(blocks):
            pace()
            t0 = time.perf_counter_ns()
            engine.process(x)
            times.append(time.perf_counter_ns() - t0)
            if timing:
                gpu.append(int(engine.last_gpu_ns))
                launch.append(int(engine.last_launch_ns))
        if max(times) <= calm_factor * float(np.median(times)):
            return times, gpu, launch  # calm
        if least is None or max(times) < max(least[0]):
            least = (times, gpu, launch)
    assert least is not None
    return least


def measure_engine_cost(engine: Any, spec: Any, blocks: int | None = None, rounds: int | None = None,
                        gap_s: float | None = None, spin_s: float = 0.0,
                        policy: AdmissionPolicy = DEFAULT_POLICY) -> BlockCost:
    """Time full blocks of zeros through ``engine`` (after one warm-up block): rounds of
    ``blocks`` blocks (``policy.cost_blocks``), the first calm one of up to ``rounds``
    (``policy.cost_rounds``) kept (a round whose slowest block took over ``policy.cost_calm_factor``
    times its median, host wall clock, met a host hiccup: a preemption is not the block's cost;
    when none is calm, the round with the least slowest block).

    The device time comes from blocks back to back: on a GPU (an engine with ``set_gpu_timing``,
    the CUDA engine) the median GPU time (events) and launch time of the round; on the host's
    dispatcher its median wall clock. Back to back, with the host awake, it is reproducible (W1 on
    the H100: 10.6-10.9 us in every round); blocks that come after an idle gap take 11-19 us at
    the median, as the host wakes slowly or not (docs/scheduler.md). The latency alone is the
    slowest block of a round started ``gap_s`` apart (a realtime stream's period; the wait before
    each sleeps until ``spin_s`` before its start, then spins, as a Session's runner of a
    clock-paced source does with ``qos.spin_us``), each timed from its call: what its own block
    takes when it comes on its clock; None: of the back-to-back round. The engine's state is reset
    after. See :class:`BlockCost`."""
    blocks = policy.cost_blocks if blocks is None else blocks
    rounds = policy.cost_rounds if rounds is None else rounds
    timing = callable(getattr(engine, "set_gpu_timing", None))
    zero_block = getattr(engine, "zero_block", None)  # a graph's engine: a block of zeros per source
    x = zero_block() if callable(zero_block) else np.zeros(spec.block_shape, spec.np_dtype)
    gap_ns = int(gap_s * 1e9) if gap_s else 0
    spin_ns = min(int(spin_s * 1e9), gap_ns)
    next_at = 0

    def pace() -> None:
        nonlocal next_at
        now = time.perf_counter_ns()
        next_at = max(next_at + gap_ns, now) if next_at else now + gap_ns
        if next_at - spin_ns > now:
            _sleep_s((next_at - spin_ns - now) / 1e9)
        if spin_ns:
            _spin_until(next_at)

    if timing:
        engine.set_gpu_timing(True)
    try:
        engine.process(x)
        calm = policy.cost_calm_factor
        b2b = _timed_round(engine, x, blocks, rounds, timing, calm, lambda: None)
        paced = _timed_round(engine, x, blocks, rounds, timing, calm, pace) if gap_ns else b2b
    finally:
        if timing:
            engine.set_gpu_timing(False)
    engine.reset()
    latency = max(1, max(paced[0]))
    wall, gpu, launch = int(np.median(b2b[0])), b2b[1], b2b[2]
    if not timing:
        return BlockCost(max(1, wall), max(latency, wall), "wall clock: the host's dispatcher runs one block at a time")
    if not gpu or min(gpu) <= 0:
        return BlockCost(max(1, wall), max(latency, wall), "wall clock: the driver gave no GPU time for the block")
    g, l = int(np.median(gpu)), int(np.median(launch))
    how = "GPU events" if g >= l else "the launch's host time (more than the GPU time)"
    return BlockCost(max(1, g, l), max(latency, g, l), how, gpu_ns=g, launch_ns=l)


def calibration_pace(qos: Any, spec: Any, policy: AdmissionPolicy = DEFAULT_POLICY) -> dict[str, Any]:
    """measure_engine_cost's ``gap_s`` and ``spin_s`` for a stream: a realtime stream's blocks one
    block period apart (at most ``policy.cost_gap_max_s``), as its blocks will come, spinning its
    ``qos.spin_us`` before each as its runner will; other classes back to back."""
    if qos.cls != "realtime":
        return {"gap_s": None, "spin_s": 0.0}
    return {"gap_s": min(float(spec.block_period), policy.cost_gap_max_s), "spin_s": qos.spin_window_us() / 1e6}


def measure_block_cost(runner: "StreamRunner", policy: AdmissionPolicy = DEFAULT_POLICY) -> BlockCost:
    """:func:`measure_engine_cost` of the runner's engine and input, paced by :func:`calibration_pace`."""
    return measure_engine_cost(runner.engine, runner.chain.input, policy=policy,
                               **calibration_pace(runner.pipeline.qos, runner.chain.input, policy))


def cost_key(runner: "StreamRunner") -> str:
    """What a block's measured cost depends on: the kind of device its engine runs on (a GPU's
    model, not its index: GPUs of one model take a block alike), the engine, the QoS class (the
    engine's options follow it), the input and the stages. Streams of one session with the same
    key share one measurement (the same work costs the same; timed once, a host hiccup cannot
    make one of them look costlier and ``device: auto`` place identical streams unevenly)."""
    device = device_of(runner)
    model = getattr(getattr(runner.engine, "device", None), "name", None)
    if is_gpu(device) and isinstance(model, str):
        device = f"cuda: {model}"
    stages = [st.to_config() for st in getattr(runner.pipeline, "stages", [])]
    return json.dumps([device, type(runner.engine).__name__, runner.pipeline.qos.cls, repr(runner.chain.input),
                       stages], sort_keys=True,
                      default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))  # arrays whole


def units_per_block(runner: "StreamRunner") -> int:
    """Units the scheduler may split a block into: the CUDA engine's units for throughput and
    best-effort streams (paced chunk by chunk); 1 (whole blocks) for realtime and CPU streams."""
    if runner.pipeline.qos.cls == "realtime" or not is_gpu(device_of(runner)):
        return 1
    return max(1, int(getattr(runner.engine, "units_per_block", 1)))
