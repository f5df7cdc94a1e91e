"""NumPy baseline: a plain per-block loop, FIR by overlap-save with numpy.fft.

The ops are written against an array namespace ``xp`` so the CuPy baseline runs the very
same code on the GPU (cupy mirrors numpy's API).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .ops import Op, resolve_ops

SUPPORTED = {"gain", "fir", "mix", "stft", "fft", "rfft", "power", "magnitude", "db", "average"}


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class _Fir:
    """Overlap-save: keep the last L-1 input samples, FFT [history | block], multiply, keep the tail."""

    def __init__(self, op: Op, xp: Any):
        self.xp = xp
        taps = op.params["taps"]
        self.L = taps.shape[-1]
        self.nfft = next_pow2(op.spec_in.block_size + self.L - 1)
        self.complex = bool(np.iscomplexobj(taps) or op.spec_in.is_complex)
        self.out_dtype = op.spec_out.np_dtype
        H = np.fft.fft(taps, self.nfft) if self.complex else np.fft.rfft(taps, self.nfft)
        self.H = xp.asarray(H.astype(np.complex64))
        self.C = op.spec_in.channels
        self.reset()

    def reset(self) -> None:
        self.hist = self.xp.zeros((self.C, self.L - 1), np.complex64 if self.complex else np.float32)

    def __call__(self, x):
        xp = self.xp
        buf = xp.concatenate([self.hist, x], axis=1)
        n = x.shape[1]
        if self.complex:
            y = xp.fft.ifft(xp.fft.fft(buf, self.nfft, axis=1) * self.H, axis=1)
        else:
            y = xp.fft.irfft(xp.fft.rfft(buf, self.nfft, axis=1) * self.H, self.nfft, axis=1)
        if self.L > 1:
            self.hist = buf[:, buf.shape[1] - (self.L - 1):]
        return y[:, self.L - 1:self.L - 1 + n].astype(self.out_dtype)


class _Stft:
    def __init__(self, op: Op, xp: Any):
        self.xp = xp
        self.w = xp.asarray(op.params["window"].astype(np.float32))
        self.hop, self.nfft = op.params["hop"], op.params["nfft"]
        self.complex = op.spec_in.is_complex
        self.C = op.spec_in.channels
        self.reset()

    def reset(self) -> None:
        self.hist = self.xp.zeros((self.C, self.nfft - self.hop),
                                  np.complex64 if self.complex else np.float32)

    def __call__(self, x):
        xp = self.xp
        fft = xp.fft.fft if self.complex else xp.fft.rfft
        if self.hop == self.nfft:  # non-overlapping frames: a reshape, no history
            frames = x.reshape(x.shape[0], -1, self.nfft)
            return fft(frames * self.w, axis=-1).astype(np.complex64)
        buf = xp.concatenate([self.hist, x], axis=1)
        n_frames = x.shape[1] // self.hop
        idx = (xp.arange(n_frames)[:, None] * self.hop + xp.arange(self.nfft)[None, :])
        frames = buf[:, idx]                                  # (C, frames, nfft)
        self.hist = buf[:, buf.shape[1] - (self.nfft - self.hop):]
        return fft(frames * self.w, axis=-1).astype(np.complex64)


def _stateless(op: Op, xp: Any):
    k, p = op.kind, op.params
    out_dtype = op.spec_out.np_dtype
    if k == "gain":
        f = np.float32(p["factor"])
        return lambda x: x * f
    if k == "mix":
        m = xp.asarray(p["matrix"].astype(np.complex64 if np.iscomplexobj(p["matrix"]) else np.float32))
        if m.ndim == 3:
            return lambda x: xp.einsum("boi,ifb->ofb", m, x).astype(out_dtype)
        if op.spec_in.domain == "frames":
            return lambda x: xp.einsum("oi,ifb->ofb", m, x).astype(out_dtype)
        return lambda x: (m @ x).astype(out_dtype)
    if k in ("fft", "rfft"):
        n = p["n"]
        fn = xp.fft.fft if k == "fft" else xp.fft.rfft
        return lambda x: fn(x.reshape(x.shape[0], -1, n), axis=-1).astype(np.complex64)
    if k == "power":
        return lambda x: (xp.abs(x) ** 2).astype(np.float32)
    if k == "magnitude":
        return lambda x: xp.abs(x).astype(np.float32)
    if k == "db":
        scale, ref, floor = p["scale"], p["ref"], p["floor"]
        # a complex input is an amplitude, as the stage takes it: |x|^2 for kind power (scale 10), else |x|
        def level(x):
            return (xp.abs(x) ** 2 if scale == 10 else xp.abs(x)) if xp.iscomplexobj(x) else x
        return lambda x: (scale * xp.log10(xp.maximum(level(x) / ref, floor))).astype(np.float32)
    if k == "average":
        fr = p["frames"]
        return lambda x: x.reshape(x.shape[0], -1, fr, x.shape[2]).mean(axis=2).astype(out_dtype)
    raise AssertionError(k)


class ArrayBaseline:
    """The ops of a pipeline as plain array code on namespace ``xp``."""

    def __init__(self, pipeline, chain, xp: Any, who: str):
        self.xp = xp
        self.ops = resolve_ops(pipeline, chain, SUPPORTED, who)
        self.fns = [(_Fir(op, xp) if op.kind == "fir" else _Stft(op, xp) if op.kind == "stft"
                     else _stateless(op, xp)) for op in self.ops]

    def compute(self, x):
        for fn in self.fns:
            x = fn(x)
        return x

    def reset(self) -> None:
        for fn in self.fns:
            if hasattr(fn, "reset"):
                fn.reset()

    def close(self) -> None:
        self.fns = []


class NumpyBaseline(ArrayBaseline):
    def __init__(self, pipeline, chain):
        super().__init__(pipeline, chain, np, "numpy")

    def process(self, x: np.ndarray) -> np.ndarray:
        return self.compute(x)
