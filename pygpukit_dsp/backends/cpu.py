"""The CPU backend: each stage's NumPy/SciPy processor, called in order (a chain: CpuEngine; a graph
that is not one path: CpuGraphEngine, each stage on what it reads)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ConfigError, StreamFault
from ..nonfinite import DEFAULT_POLICY, NonFiniteCount, find_nonfinite, zeroed

if TYPE_CHECKING:
    from ..graph import Graph
    from ..graph_model import GraphSpecs
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
        if not isinstance(block, np.ndarray):  # never a silent device -> host copy
            from ..arrays_interop import as_host_array, is_device_array

            if is_device_array(block):
                raise ConfigError("the cpu backend takes host arrays, got a GPU array "
                                  f"({type(block).__name__})", hint="use backend='cuda' to keep it on the GPU")
            block = np.asarray(as_host_array(block))
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

    def python_calls(self) -> dict[str, dict[str, float]]:
        """The Python calls of each python stage so far, by stage name (RunSummary.python_stages)."""
        return python_calls(self._procs)

    def close(self) -> None:
        self._closed = True


def python_calls(procs) -> dict[str, dict[str, float]]:
    """``call_stats()`` of the processors that call Python per block (the python stage), by stage name."""
    return {p.stage_name: p.call_stats() for p in procs if hasattr(p, "call_stats")}


class CpuGraphEngine:
    """A graph's stages on the CPU: every source's block checked for NaN/Inf (as CpuEngine checks its
    input), then each stage in order on the blocks it reads, and what the graph gives back.

    ``process(blocks, final)`` takes one block per source (a tuple in the order of ``chain.sources``;
    a single array for a graph with one source) and returns one block per output (a tuple in the
    order of ``chain.outputs``: each sink's, or the last stage's when there is no sink; a single
    array when there is one). Full blocks of the sources have the block size; the last block of a
    stream may be shorter, the same length for every source.
    """

    def __init__(self, graph: "Graph", chain: "GraphSpecs", choice: "BackendChoice", *,
                 nonfinite: str = DEFAULT_POLICY):
        topo = graph.topology()
        self.choice = choice
        self.chain = chain
        self.nonfinite = NonFiniteCount(nonfinite)
        self.nonfinite_source: str | None = None  # the source the first NaN/Inf came from
        self._sources = chain.sources
        self._in = [chain.nodes[n] for n in self._sources]
        self._steps = []
        for name in chain.order:
            st = topo.stage(name)
            assert st is not None
            ins = chain.stage_inputs[name]
            several = st.takes_several()
            proc = st.cpu(list(ins) if several else ins[0])
            self._steps.append((name, topo.stage_inputs[name], proc, several))
        self._outputs = tuple(chain.outputs.values())
        self._samples = [0] * len(self._sources)
        self._blocks = 0
        self._closed = False

    def zero_block(self) -> "np.ndarray | tuple[np.ndarray, ...]":
        """A full block of zeros for every source, as process() takes them (admission times these)."""
        zeros = tuple(np.zeros(s.block_shape, s.np_dtype) for s in self._in)
        return zeros if len(zeros) > 1 else zeros[0]

    def process(self, blocks: "np.ndarray | tuple[np.ndarray, ...]", final: bool = False,
                out: np.ndarray | None = None) -> "np.ndarray | tuple[np.ndarray, ...]":
        if self._closed:
            raise StreamFault("the CPU engine is closed")
        if out is not None:
            raise ValueError("a graph's engine returns one block per output: process(out=...) is for a chain")
        if isinstance(blocks, np.ndarray):
            blocks = (blocks,)
        if len(blocks) != len(self._sources):
            raise ValueError(f"the graph reads {len(self._sources)} sources ({', '.join(self._sources)}); "
                             f"got {len(blocks)} blocks")
        values: dict[str, np.ndarray] = {}
        for i, (name, block, spec) in enumerate(zip(self._sources, blocks, self._in)):
            if block.dtype != spec.np_dtype:
                if np.iscomplexobj(block) and not np.issubdtype(spec.np_dtype, np.complexfloating):
                    raise ValueError(f"source '{name}' is {spec.dtype}; a complex block would lose its imaginary "
                                     "part (give the source a complex64 format)")
                block = block.astype(spec.np_dtype)
            count, channel, sample, value = find_nonfinite(block)
            if count:
                nf = self.nonfinite
                if nf.first_sample is None:
                    self.nonfinite_source = name
                nf.add(count, block=self._blocks, sample=self._samples[i] + sample, channel=channel, value=value,
                       sample_rate=spec.sample_rate)
                if nf.policy == "error":
                    raise nf.error(f"source '{name}'")
                if nf.policy == "zero":
                    block = zeroed(block)
            self._samples[i] += block.shape[1]
            values[name] = block
        # as CpuEngine: what a NaN let through does is counted, not printed as NumPy warnings
        with np.errstate(all="ignore"):
            for name, reads, proc, several in self._steps:
                values[name] = proc.process([values[r] for r in reads] if several else values[reads[0]], final)
        self._blocks += 1
        outs = tuple(values[n] for n in self._outputs)
        return outs if len(outs) != 1 else outs[0]

    def reset(self) -> None:
        for _, _, proc, _ in self._steps:
            proc.reset()
        self._samples = [0] * len(self._sources)

    def counters(self) -> dict[str, int]:
        return {"blocks": self._blocks}

    def python_calls(self) -> dict[str, dict[str, float]]:
        """The Python calls of each python stage so far, by stage name (RunSummary.python_stages)."""
        return python_calls(proc for _, _, proc, _ in self._steps)

    def close(self) -> None:
        self._closed = True
