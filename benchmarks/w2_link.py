"""The sender's source of the link bench (benchmarks/w2_zmq.yaml): W2-shaped blocks from memory.

``block(n)`` hands out one filled block of complex noise (seeded), the same array every time, as
W2's streamed mode streams from a filled host buffer: the bench measures the link, not a generator.
"""

import numpy as np

_BLOCK = None


def block(n: int) -> np.ndarray:
    global _BLOCK
    if _BLOCK is None or _BLOCK.shape[1] != n:
        rng = np.random.default_rng(2)
        x = rng.standard_normal(2 * n, dtype=np.float32) * np.float32(0.5 / np.sqrt(2))
        _BLOCK = x.view(np.complex64).reshape(1, n)
    return _BLOCK
