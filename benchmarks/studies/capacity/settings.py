"""The capacity sweep's settings: its ladders, run lengths, deadlines and targets, the names of its
kinds of run, and the causes an episode of misses can have."""

from __future__ import annotations

from pygpukit_dsp.admission import DEFAULT_POLICY

PROJECT_LADDER = (16, 32, 64, 96, 128, 160, 192, 224, 256, 320, 384, 512)
TORCH_LADDER = (4, 8, 16, 24, 32, 48, 64, 96, 128)
DEADLINES_MS = (256 / 48.0, 2.0)    # the block period (5.33 ms) and 2 ms
COARSE_S = 3.0
CONFIRM_S = 30.0
WARMUP_S = 0.5
DECLARED_COST_NS = 1_000            # measured runs: admission must not stop the sweep (module doc)
POOL = 8                            # distinct input blocks, shared by every stream
STOP_AFTER_MISSING = 2              # coarse sweep: stop after this many successive N with misses
CONFIRM_TRIES = 3                   # confirmations per deadline: the knee, then down the ladder while they miss
TARGET_STREAMS = 100                # the target: >= 100 streams with zero misses at 5.33 ms over 30 s
TARGET_RATIO = 3.0                  # ... and >= 3x what PyTorch + graph holds
NOT_MUCH_EARLIER = 0.9              # admission refusing at >= this fraction of the N that held: "a little earlier"
FLOOR = "floor"                     # the capacity floor's points (FloorStreams)
FLOOR_ALIGNED = "floor, aligned"    # the floor released all at once, at the N the aligned runs ran
ALIGNED = "pygpukit-dsp, aligned"   # the project's streams with every phase 0: all release at once
SESSION_ALIGNED = "session, aligned"  # the prediction for them: no phase declared, rehearsed all at once

EPISODE_CAUSES = ("host_slow", "host_stall", "process")
CAUSE_WORDS = {"host_slow": "host slowdown", "host_stall": "host stall", "process": "the process's"}

GPU_FULL = 0.9                # a run whose GPU was this busy missed under its own load, whatever the fills did
CPU_FULL = 0.9                # ... and a run whose process used this share of its CPUs
DISPATCHER_FULL = DEFAULT_POLICY.dispatcher_busy_cap  # ... and a run whose dispatcher's lock was held this share of the time
                              # (admission's own bound on it: past it the lock's queue is the process's load)


def deadline_key(deadline_ms: float) -> str:
    return f"{deadline_ms:.2f}"
