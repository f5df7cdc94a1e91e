"""PyTorch baselines: eager (per-block copies and kernels) and CUDA graph (ops captured once)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .ops import NO_GPU, NOT_INSTALLED, BaselineSkipped, Op, resolve_ops
from .numpy_impl import next_pow2

SUPPORTED = {"gain", "fir", "mix", "stft", "fft", "rfft", "power", "magnitude", "db", "average"}


def import_torch():
    try:
        import torch
    except ImportError as exc:
        raise BaselineSkipped(f"torch is not installed ({exc})", NOT_INSTALLED) from None
    if not torch.cuda.is_available():
        raise BaselineSkipped("torch sees no CUDA GPU", NO_GPU)
    return torch


class _Fir:
    def __init__(self, op: Op, torch: Any, dev: Any):
        self.t = torch
        taps = op.params["taps"]
        self.L = taps.shape[-1]
        self.nfft = next_pow2(op.spec_in.block_size + self.L - 1)
        self.complex = bool(np.iscomplexobj(taps) or op.spec_in.is_complex)
        H = np.fft.fft(taps, self.nfft) if self.complex else np.fft.rfft(taps, self.nfft)
        self.H = torch.as_tensor(H.astype(np.complex64), device=dev)
        dtype = torch.complex64 if self.complex else torch.float32
        self.hist = torch.zeros((op.spec_in.channels, self.L - 1), dtype=dtype, device=dev)

    def reset(self) -> None:
        self.hist.zero_()  # in place: the captured graph keeps pointing at it

    def __call__(self, x):
        fft = self.t.fft
        if self.complex and not x.is_complex():
            x = x.to(self.t.complex64)
        buf = self.t.cat([self.hist, x], dim=1)
        n = x.shape[1]
        if self.complex:
            y = fft.ifft(fft.fft(buf, n=self.nfft, dim=1) * self.H, dim=1)
        else:
            y = fft.irfft(fft.rfft(buf, n=self.nfft, dim=1) * self.H, n=self.nfft, dim=1)
        if self.L > 1:
            self.hist.copy_(buf[:, buf.shape[1] - (self.L - 1):])
        return y[:, self.L - 1:self.L - 1 + n]


class _Stft:
    def __init__(self, op: Op, torch: Any, dev: Any):
        self.t = torch
        self.w = torch.as_tensor(op.params["window"].astype(np.float32), device=dev)
        self.hop, self.nfft = op.params["hop"], op.params["nfft"]
        self.complex = op.spec_in.is_complex
        dtype = torch.complex64 if self.complex else torch.float32
        self.hist = torch.zeros((op.spec_in.channels, self.nfft - self.hop), dtype=dtype, device=dev)

    def reset(self) -> None:
        self.hist.zero_()

    def __call__(self, x):
        buf = self.t.cat([self.hist, x], dim=1)
        frames = buf.unfold(1, self.nfft, self.hop)          # (C, frames, nfft), a view
        self.hist.copy_(buf[:, buf.shape[1] - (self.nfft - self.hop):])
        fft = self.t.fft.fft if self.complex else self.t.fft.rfft
        return fft(frames * self.w, dim=-1)


def _stateless(op: Op, torch: Any, dev: Any):
    k, p = op.kind, op.params
    if k == "gain":
        f = float(p["factor"])
        return lambda x: x * f
    if k == "mix":
        m_np = p["matrix"]
        cplx = np.iscomplexobj(m_np) or op.spec_in.is_complex
        m = torch.as_tensor(m_np.astype(np.complex64 if cplx else np.float32), device=dev)

        def mix(x):
            if cplx and not x.is_complex():
                x = x.to(torch.complex64)
            if m.ndim == 3:
                return torch.einsum("boi,ifb->ofb", m, x)
            if x.ndim == 3:
                return torch.einsum("oi,ifb->ofb", m, x)
            return m @ x
        return mix
    if k in ("fft", "rfft"):
        n = p["n"]
        fn = torch.fft.fft if k == "fft" else torch.fft.rfft
        return lambda x: fn(x.reshape(x.shape[0], -1, n), dim=-1)
    if k == "power":
        return lambda x: x.abs() ** 2
    if k == "magnitude":
        return lambda x: x.abs()
    if k == "db":
        scale, ref, floor = p["scale"], p["ref"], p["floor"]
        # a complex input is an amplitude, as the stage takes it: |x|^2 for kind power (scale 10), else |x|
        def level(x):
            return (x.abs() ** 2 if scale == 10 else x.abs()) if x.is_complex() else x
        return lambda x: scale * torch.log10(torch.clamp(level(x) / ref, min=floor))
    if k == "average":
        fr = p["frames"]
        return lambda x: x.reshape(x.shape[0], -1, fr, x.shape[2]).mean(dim=2)
    raise AssertionError(k)


class TorchBaseline:
    """``graph=False``: eager. ``graph=True``: pinned staging + the block's ops in one CUDA graph."""

    def __init__(self, pipeline, chain, graph: bool):
        torch = import_torch()
        self.torch = torch
        self.graph = graph
        who = "torch-graph" if graph else "torch"
        self.ops = resolve_ops(pipeline, chain, SUPPORTED, who)
        dev = torch.device("cuda")
        self.dev = dev
        self.fns = [(_Fir(op, torch, dev) if op.kind == "fir" else _Stft(op, torch, dev)
                     if op.kind == "stft" else _stateless(op, torch, dev)) for op in self.ops]
        spec_in, spec_out = chain.input, chain.output
        self.in_dtype = torch.complex64 if spec_in.is_complex else torch.float32
        if graph:
            self.pin_in = torch.empty(spec_in.block_shape, dtype=self.in_dtype, pin_memory=True)
            self.static_in = torch.zeros(spec_in.block_shape, dtype=self.in_dtype, device=dev)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):  # warm-up outside capture (cuFFT plans, allocator)
                    self._compute(self.static_in)
            torch.cuda.current_stream().wait_stream(side)
            self.g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.g):
                self.static_out = self._compute(self.static_in)
            self.pin_out = torch.empty(self.static_out.shape, dtype=self.static_out.dtype, pin_memory=True)
            self.reset()
        self.out_dtype = spec_out.np_dtype

    def _compute(self, x):
        for fn in self.fns:
            x = fn(x)
        return x

    def process(self, x: np.ndarray) -> np.ndarray:
        torch = self.torch
        if self.graph:
            self.pin_in.numpy()[...] = x
            self.static_in.copy_(self.pin_in, non_blocking=True)
            self.g.replay()
            self.pin_out.copy_(self.static_out, non_blocking=True)
            torch.cuda.current_stream().synchronize()
            return self.pin_out.numpy()
        y = self._compute(torch.from_numpy(x).to(self.dev))
        return y.cpu().numpy()

    def reset(self) -> None:
        for fn in self.fns:
            if hasattr(fn, "reset"):
                fn.reset()
        self.torch.cuda.synchronize()

    def time_resident(self, block: np.ndarray, iterations: int) -> list[float]:
        """Seconds per block with the input already on the GPU (eager ops or graph replay)."""
        torch = self.torch
        if self.graph:
            self.static_in.copy_(torch.from_numpy(block))
            run = self.g.replay
        else:
            xd = torch.from_numpy(block).to(self.dev)

            def run():
                self._compute(xd)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(iterations):
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return times

    def close(self) -> None:
        self.fns = []
        if self.graph:
            del self.g
