"""Capacity: how many realtime streams one GPU carries at a deadline (a study of our own machines:
not part of the package; ``benchmarks/capacity.py`` and ``benchmarks/cadence.py`` run it).

``python benchmarks/capacity.py --out DIR`` (:func:`run_capacity`). N concurrent W1-shaped
realtime streams (64 ch x 256 samples, fir 256 taps + mix 16 x 64, 48 kHz: one block every
5.33 ms), each on its own clock, the clocks' phases staggered evenly over the period (stream i
releases its blocks at ``start + i * period / N + k * period``). N is swept upward; per N the
report gives p50/p99/p99.9/max latency from release (every block of every stream), deadline
misses at 5.33 ms and at 2 ms, blocks released late (both slots of a stream still busy), the GPU's
busy fraction, the process's CPU use, and what admission control predicted.

pygpukit-dsp runs the streams the way a Session runs them on one GPU: one Rust scheduler, one
dispatcher (``CudaDispatch``: a native thread, realtime callers helping it), every engine attached
as a realtime stream with the realtime defaults (latency mode, mapped I/O, one graph per block).
What a Session adds on top, one Python runner thread per stream, would measure the GIL rather than
the GPU at N x 187.5 blocks/s, so the blocks are released by a few native driver threads instead
(``_native.run_paced``: fill the slot, submit, poll, copy out; no Python per block). Admission
would refuse the N beyond its bound, which is what the sweep must cross to find where misses
begin: the measured runs declare a cost of 1 us per block (earliest deadline first among
streams of one deadline is release order, whatever the cost), and admission's own prediction is
computed beside them (a scratch scheduler admitting streams until it refuses): what a Session of
N such streams admits (:func:`session_prediction`: the costs it measures before the first block,
admission.measure_engine_cost on one engine, its device time back to back and its latency alone
at the stream's period; past half a bound, admission.rehearse of N engines together, N found by
bisection), and with the GPU time the dispatcher measured during the runs (CUDA events). The
streams declare the sweep's staggered phases (as a Session does for the clocks it paces), so the
response bound counts only the work that can be in front of each block.
:meth:`CapacityReport.admission_verdict` says whether the Session's prediction falls where misses
begin (between the largest N that held and the smallest that missed), counting every miss and
counting only the process's. The aligned runs (:data:`ALIGNED`, every phase 0: all blocks
released at once, what the response bound assumes for streams of no declared phase) are judged
against the prediction for such streams (:data:`SESSION_ALIGNED`: no phase, rehearsed all at
once) at the shortest deadline.

The floor (:class:`FloorStreams`, :func:`floor_plan`): N bare round trips of the W1 block (no
pipeline, no scheduler), released by the same driver threads on the same clocks, where the
project's misses began and at the target's N when the project did not hold it; the target's
verdict says whether the floor itself missed there (the target below what the machine allowed in
that run) or held (the miss the project's). The floor also runs released all at once
(:data:`FLOOR_ALIGNED`) at every N of the aligned sweep: what a burst costs the machine itself.

The PyTorch baseline is what a user would write: one Python thread and one ``torch.cuda.Stream``
per stream, each replaying the torch-graph W1 (pinned staging, the block's ops in one CUDA graph),
sleeping until its next release; latency from the release.

The sweep is coarse first (``coarse_s`` per N, N up the ladder until misses at the 5.33 ms
deadline appear at two successive N), then the largest N with zero misses at each deadline is
confirmed over ``confirm_s`` (>= 30 s for the headline); a confirmation that misses steps down the
ladder, up to CONFIRM_TRIES runs per deadline (a run already made for the other deadline
counts). At the period every miss counts; at the shorter deadline a run whose misses all came in
the host's episodes also ends the step down (a host stall of 2-3 ms misses 2 ms at any N, so
stepping down would only find where the stalls happened to fall), and the verdict there counts
both ways. The headline: the largest N with zero misses over the confirmation, at 5.33 ms and at
2 ms, for both, and their ratio. Every run's misses come grouped into episodes, each with its
cause (host slowdown, host stall or the process's: :func:`episode_cause`), the steal time
sampled beside it (pygpukit_dsp/bench/steal.py), and where the driver threads' and the dispatcher
worker's time went around it (benchmarks/studies/off_cpu.py: a thread whose vCPU stopped beneath the guest makes the
episode the host's).
"""

from .predict import PREDICT_REGISTER_MAX, admits_all, largest_admitted, predict, session_prediction, staggered_phases
from .report import CapacityPoint, CapacityReport, Prediction
from .settings import (ALIGNED, COARSE_S, CONFIRM_S, DEADLINES_MS, FLOOR, FLOOR_ALIGNED, POOL, PROJECT_LADDER,
                       SESSION_ALIGNED, TARGET_RATIO, TARGET_STREAMS, TORCH_LADDER, WARMUP_S)
from .sweep import plot_capacity, run_capacity, w1_shaped

__all__ = [
    "ALIGNED", "COARSE_S", "CONFIRM_S", "DEADLINES_MS", "FLOOR", "FLOOR_ALIGNED", "POOL", "PREDICT_REGISTER_MAX",
    "PROJECT_LADDER", "SESSION_ALIGNED", "TARGET_RATIO", "TARGET_STREAMS", "TORCH_LADDER", "WARMUP_S",
    "CapacityPoint", "CapacityReport", "Prediction", "admits_all", "largest_admitted", "plot_capacity", "predict",
    "run_capacity", "session_prediction", "staggered_phases", "w1_shaped",
]
