"""The decimating FIR that ``fir`` (``decimate: D``) and ``ddc`` run on the CPU.

Output ``m`` of the stream is ``y[m] = sum_k h[k] * x[m*D - k]``, i.e.
``scipy.signal.lfilter(h, 1, x)[..., ::D]``; only the kept outputs are computed. Each is the
input window of ``L`` samples ending at ``m*D`` against the reversed taps: a strided view of
(history | block) with step ``D``, multiplied by BLAS in chunks. A block's first output is its
sample 0 because block_size is a multiple of ``D`` (output_spec checks it), so a final partial
block of ``n`` samples gives ``ceil(n / D)`` outputs.
"""

from __future__ import annotations

import numpy as np

_CHUNK_ELEMENTS = 1 << 21  # input windows gathered at once (per chunk of outputs)


class DecimatingFir:
    method = "polyphase"

    def __init__(self, taps: np.ndarray, decimate: int, channels: int, block_size: int, dtype: np.dtype):
        self.dtype = np.dtype(dtype)
        taps = np.asarray(taps)
        self.L = taps.shape[-1]
        self.D = decimate
        self.per_channel = taps.ndim == 2
        self.h_rev = np.ascontiguousarray(taps[..., ::-1]).astype(self.dtype)  # (L,) or (C, L)
        self.ext = np.zeros((channels, self.L - 1 + block_size), self.dtype)

    def process(self, x: np.ndarray, final: bool = False) -> np.ndarray:
        n = x.shape[-1]
        h, D, L, ext = self.L - 1, self.D, self.L, self.ext
        ext[:, h:h + n] = x
        count = -(-n // D)
        C = ext.shape[0]
        y = np.empty((C, count), self.dtype)
        if count:
            # window j covers ext[:, j*D : j*D + L], ending at the block's sample j*D
            windows = np.lib.stride_tricks.sliding_window_view(ext[:, :h + n], L, axis=-1)[:, ::D]
            step = max(1, _CHUNK_ELEMENTS // max(1, C * L))
            for a in range(0, count, step):
                b = min(count, a + step)
                w = np.ascontiguousarray(windows[:, a:b])  # (C, b - a, L)
                if self.per_channel:
                    y[:, a:b] = np.einsum("cjl,cl->cj", w, self.h_rev)
                else:
                    np.matmul(w, self.h_rev, out=y[:, a:b])
        if h:
            ext[:, :h] = ext[:, n:n + h]
        return y

    def reset(self) -> None:
        self.ext[...] = 0
