"""The CPU backend: each stage's NumPy/SciPy processor, called in order."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import StreamFault
from ..nonfinite import DEFAULT_POLICY, NonFiniteCount, find_nonfinite, zeroed

if TYPE_CHECKING:
    from ..pipeline import Pipeline, SpecChain
    from . import BackendChoice


class CpuEngine:
    def __init__(self, pipeline: "Pipeline", chain: "SpecChain", choice: "BackendChoice", *,
                 nonfinite: str = DEFAULT_POLICY):
        self.choice = choice
        self.chain = chain
        # NaN/Inf input samples: checked before the first stage, counted, and by the policy
        # (pygpukit_dsp/nonfinite.py) stopped, replaced by 0 or let through
        self.nonfinite = NonFiniteCount(nonfinite)
        self._samples = 0
        self._procs = [st.cpu(spec) for st, spec in zip(pipeline.stages, chain.specs[:-1])]
        self._in_shape = chain.input.block_shape
        self._in_dtype = chain.input.np_dtype
        self._blocks = 0
        self._closed = False

    def process(self, block: np.ndarray, final: bool = False, out: np.ndarray | None = None) -> np.ndarray:
        """One block through the stages; ``out`` as :meth:`CudaEngine.process` takes it."""
        if self._closed:
            raise StreamFault("the CPU engine is closed")
        spec = self.chain.output
        if out is not None and (out.shape != spec.block_shape or out.dtype != spec.np_dtype
                                or not out.flags.c_contiguous or not out.flags.writeable):
            raise ValueError(f"process(out=...) takes a writable C-contiguous {spec.dtype} array of the "
                             f"full output block's shape {spec.block_shape}, got {out.dtype} {out.shape}")
        if block.dtype != self._in_dtype:
            block = block.astype(self._in_dtype)
        count, channel, sample, value = find_nonfinite(block)
        if count:
            nf = self.nonfinite
            nf.add(count, block=self._blocks, sample=self._samples + sample, channel=channel, value=value,
                   sample_rate=self.chain.input.sample_rate)
            if nf.policy == "error":
                raise nf.error("the input")
            if nf.policy == "zero":
                block = zeroed(block)
        self._samples += block.shape[1]
        x = block
        # A stage meeting a NaN let through (nonfinite: pass) or an overflow must not print
        # NumPy's RuntimeWarnings from site-packages: what happened is counted and reported.
        with np.errstate(all="ignore"):
            for proc in self._procs:
                x = proc.process(x, final)
        self._blocks += 1
        if out is None:
            return x
        n = x.shape[1]
        out[:, :n] = x
        return out if n == spec.block_shape[1] else out[:, :n]

    def reset(self) -> None:
        for proc in self._procs:
            proc.reset()
        self._samples = 0

    def counters(self) -> dict[str, int]:
        return {"blocks": self._blocks}

    def close(self) -> None:
        self._closed = True
