"""The parallel-scan form of the CUDA ``sos`` op: when it is taken, and its host-side float64 math.

A cascade of S <= 8 biquads (direct form II transposed, scipy.signal.sosfilt's state convention:
section s holds (z0, z1) at state index 2s, 2s+1) is one linear system in a 2S-value state:
with zero input, one sample maps the state by a 16 x 16 block lower-triangular matrix A (the
state zero-padded to 16 values). The native op (native/ops/sos.cpp, kernels/sos.cu) cuts each
lane's block into chunks of ``chunk`` samples and the chunks into groups of ``per_group``:

1. every chunk is filtered from a zero state in parallel: its final state ``zf[c]``;
2. per group, from a zero state: ``s <- PHI s + zf[c]`` over its chunks (PHI = A^chunk): the
   group's own contribution ``agg[g]``;
3. per lane, over the groups: the true state at each group's start, from the stream's state and
   ``s <- PHI_GROUP s + agg[g]`` (PHI_GROUP = A^(chunk * per_group));
4. per group, from its true start: the true state at each chunk's start (as in 2);
5. every chunk is filtered again from its true start state, writing the output; the last chunk's
   final state is the stream's state for the next block.

The chunk length is chosen so that about TARGET_CHUNKS chunks fill the GPU, and groups hold about
sqrt(chunks) chunks, so the serial walks of steps 2-4 are short. PHI and PHI_GROUP are computed
here in float64 by repeated squaring of A (chunk and per_group are powers of two) and passed to
the op with the chunking.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SCAN_MAX_SECTIONS = 8      # the state (16 values) and the cascade sit in registers
SCAN_MIN_BLOCK = 4096      # shorter blocks keep the one-launch kernel (one thread per lane)
SCAN_MAX_LANES = 1024      # more lanes fill the GPU with one thread per lane
SCAN_STATE = 16            # state values per chunk (2 per section, zero-padded)
TILE = 32                  # the kernels stage 32 samples at a time: chunks are multiples of it
MAX_CHUNK = 4096
TARGET_CHUNKS = 16384      # about 4 warps per SM of an H200 in steps 1 and 5


@dataclass(frozen=True)
class ScanPlan:
    """The chunking of one block shape and its float64 transition matrices."""

    chunk: int          # samples per chunk (a power of two, a multiple of TILE)
    chunks: int         # chunks per lane: ceil(block / chunk), the last one maybe shorter
    per_group: int      # chunks per group (a power of two)
    groups: int         # groups per lane: ceil(chunks / per_group)
    phi: np.ndarray     # (16, 16) float64: A^chunk, row i = new state value i
    phi_group: np.ndarray  # (16, 16) float64: A^(chunk * per_group)


def takes_scan(sections: int, lanes: int, block: int) -> bool:
    """Whether the op runs the parallel scan: at most 8 sections, blocks of at least 4096 samples
    and at most 1024 lanes (a real channel is one lane, a complex channel two). Otherwise one
    thread per lane walks the block in one launch (small blocks keep that latency)."""
    return sections <= SCAN_MAX_SECTIONS and block >= SCAN_MIN_BLOCK and lanes <= SCAN_MAX_LANES


def one_sample_transition(sos: np.ndarray) -> np.ndarray:
    """A (16 x 16, float64): the cascade's state after one sample of zero input, from each unit
    state (column d), computed by the same recurrence as sosfilt (exact in float64)."""
    sos = np.asarray(sos, dtype=np.float64).reshape(-1, 6)
    sections = sos.shape[0]
    if sections > SCAN_MAX_SECTIONS:
        raise ValueError(f"the scan form takes at most {SCAN_MAX_SECTIONS} sections, got {sections}")
    a = np.zeros((SCAN_STATE, SCAN_STATE))
    for d in range(2 * sections):
        state = np.zeros(SCAN_STATE)
        state[d] = 1.0
        x = 0.0
        new = np.zeros(SCAN_STATE)
        for s in range(sections):
            b0, b1, b2, _, a1, a2 = sos[s]
            z0, z1 = state[2 * s], state[2 * s + 1]
            y = b0 * x + z0
            new[2 * s] = b1 * x - a1 * y + z1
            new[2 * s + 1] = b2 * x - a2 * y
            x = y
        a[:, d] = new
    return a


def matrix_power_of_two(a: np.ndarray, power: int) -> np.ndarray:
    """a ** power for a power of two, by repeated squaring in float64."""
    if power < 1 or power & (power - 1):
        raise ValueError(f"power must be a power of two, got {power}")
    m = np.array(a, dtype=np.float64)
    while power > 1:
        m = m @ m
        power //= 2
    return m


def chunk_length(lanes: int, block: int) -> int:
    """The smallest power of two from TILE to MAX_CHUNK with lanes * ceil(block / chunk) <=
    TARGET_CHUNKS (MAX_CHUNK when none is)."""
    chunk = TILE
    while chunk < MAX_CHUNK and lanes * -(-block // chunk) > TARGET_CHUNKS:
        chunk *= 2
    return chunk


def group_length(chunks: int) -> int:
    """Chunks per group: the smallest power of two whose square is at least ``chunks``."""
    per = 1
    while per * per < chunks:
        per *= 2
    return per


def scan_plan(sos: np.ndarray, lanes: int, block: int) -> ScanPlan:
    """The chunking and transition matrices of the scan form for this block shape."""
    chunk = chunk_length(lanes, block)
    chunks = -(-block // chunk)
    per_group = group_length(chunks)
    phi = matrix_power_of_two(one_sample_transition(sos), chunk)
    phi_group = matrix_power_of_two(phi, per_group)
    return ScanPlan(chunk, chunks, per_group, -(-chunks // per_group), phi, phi_group)


def scan_params(plan: ScanPlan) -> dict[str, object]:
    """The op parameters that select the scan form (native/ops/sos.cpp)."""
    return {"scan_chunk": plan.chunk, "scan_group": plan.per_group,
            "scan_phi": np.ascontiguousarray(plan.phi), "scan_phi_group": np.ascontiguousarray(plan.phi_group)}
