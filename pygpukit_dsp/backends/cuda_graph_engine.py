"""A flowgraph (branches, several sources or sinks: docs/graphs.md) on one GPU.

The graph is lowered to native ops and a memory plan (cuda_graph_plan.py), and the native engine
runs it as it runs a chain: per block one H2D copy (or mapped-I/O pull) per source, the ops as one
CUDA graph launch (independent branches as parallel nodes), one D2H copy (or push) per sink, one
completion wait. It takes and gives blocks as :class:`~pygpukit_dsp.backends.cpu.CpuGraphEngine`
does: one block per source (a tuple in the order of ``chain.sources``; an array for one source) and
one per output (a tuple in the order of ``chain.outputs``; an array for one). GPU arrays go in
and out of ``process`` with no host copy (cuda_device_io.GraphDeviceBlocks). Everything else
(counters, reset, close, the scheduler's attach, the instrument) is :class:`CudaEngine`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..arrays_interop import is_device_array as _is_device_array
from ..errors import ConfigError, StreamFault
from ..nonfinite import DEFAULT_POLICY, find_nonfinite
from .cuda_engine import CudaEngine
from .cuda_graph_plan import GraphLowering, lower_graph

if TYPE_CHECKING:
    from ..graph import Graph
    from ..graph_model import GraphSpecs
    from . import BackendChoice


class CudaGraphEngine(CudaEngine):
    """A graph's stages on one GPU; ``process(blocks, final)`` and ``submit``/``collect`` take one
    block per source and give one per output (module doc)."""

    def __init__(self, graph: "Graph", chain: "GraphSpecs", choice: "BackendChoice", *,
                 nonfinite: str = DEFAULT_POLICY, **options: Any):
        self.lowering: GraphLowering | None = None
        self.nonfinite_source: str | None = None  # the source the first NaN/Inf came from
        super().__init__(graph, chain, choice, nonfinite=nonfinite, **options)  # type: ignore[arg-type]
        plan = self.plan
        self._sources = list(chain.sources)
        self._src_specs = [chain.nodes[n] for n in self._sources]
        self._outputs = list(chain.outputs)
        self._out_specs = [chain.output_spec(n) for n in self._outputs]
        self._in_views: list[list[np.ndarray] | None] = [None] * self._slots  # taken when first needed
        self._out_views = [self._views(self._out[s], plan.outputs.values(), self._out_specs)
                           for s in range(self._slots)]
        self._slot_n = [0] * self._slots
        self._out_blocks = [(v.shape, v.dtype) for v in self._out_views[0]]  # each output's full block

    def device_blocks(self) -> Any:
        """The engine's :class:`~pygpukit_dsp.backends.cuda_device_io.GraphDeviceBlocks` (made on first use)."""
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        if self._device_blocks is None:
            from .cuda_device_io import GraphDeviceBlocks

            self._device_blocks = GraphDeviceBlocks(self)
        return self._device_blocks

    def _lower(self, pipeline: Any, chain: Any) -> tuple[list, dict[str, Any]]:
        self.lowering = lower_graph(pipeline, chain)
        return self.lowering.ops, self.lowering.plan.native()

    @property
    def output_names(self) -> tuple[str, ...]:
        """The outputs' names, in the order collect() and process() give their blocks."""
        return tuple(self._outputs)

    @property
    def plan(self):
        """The memory plan the engine runs (cuda_graph_plan.GraphPlan)."""
        assert self.lowering is not None
        return self.lowering.plan

    @staticmethod
    def _views(slot_view: np.ndarray, slices, specs) -> list[np.ndarray]:
        flat = slot_view.reshape(-1).view(np.uint8)
        return [flat[s[0]:s[0] + s[1]].view(spec.np_dtype).reshape(spec.block_shape)
                for s, spec in zip(slices, specs)]

    def zero_block(self) -> "np.ndarray | tuple[np.ndarray, ...]":
        """A full block of zeros for every source, as process() takes them (admission times these)."""
        zeros = tuple(np.zeros(s.block_shape, s.np_dtype) for s in self._src_specs)
        return zeros if len(zeros) > 1 else zeros[0]

    def packed_zero_block(self) -> np.ndarray:
        """A full block of zeros of every source as the native engine's packed input (the native
        drivers that fill a slot whole: admission's rehearsal through ``_native.run_paced``)."""
        channels, words, _, _ = self._engine.input_layout
        return np.zeros((channels, words), np.float32)

    # ------------------------------------------------------------------ blocks
    def _fill_graph(self, blocks: Any, final: bool) -> tuple[int, int]:
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        if isinstance(blocks, np.ndarray):
            blocks = (blocks,)
        filled = self._fill_full(blocks)
        if filled is not None:
            return filled
        if len(blocks) != len(self._sources):
            raise ValueError(f"the graph reads {len(self._sources)} sources ({', '.join(self._sources)}); "
                             f"got {len(blocks)} blocks")
        slot = self._next
        if self._busy[slot]:
            raise ValueError(f"slot {slot} still holds an uncollected block: collect({slot}) first")
        if any(_is_device_array(b) for b in blocks):
            raise ConfigError("submit() and process_split() of a graph take host (NumPy) blocks: GPU arrays go "
                              "through process(), "
                              "which keeps them on the GPU", hint="call engine.process(blocks, final)")
        self._settle_device_blocks()  # device blocks queued before count their NaN/Inf first
        ns = set()
        for name, block, spec in zip(self._sources, blocks, self._src_specs):
            b = np.asarray(block)
            shape = spec.block_shape
            if b.ndim != len(shape) or b.shape[0] != shape[0] or b.shape[1] > shape[1] or b.shape[2:] != shape[2:]:
                raise ValueError(f"block of shape {b.shape} does not fit source '{name}' {shape}")
            if np.iscomplexobj(b) and spec.dtype != "complex64":
                raise ValueError(f"source '{name}' is {spec.dtype}; a complex block would lose its imaginary "
                                 "part (give the source a complex64 format)")
            ns.add(int(b.shape[1]))
        if len(ns) != 1:
            raise ValueError(f"every source's block has one length in a step, got {sorted(ns)}")
        n = ns.pop()
        if n < self._items and not final:
            raise ValueError(f"a partial block ({n} of {self._items} items) must be the final block (final=True)")
        if n < 1:
            raise ValueError("a block holds at least one item")
        views = self._in_views[slot]
        if views is None:
            views = self._in_views[slot] = self._views(self._engine.input_slot(slot), self.plan.sources.values(),
                                                       self._src_specs)
        for view, block, (offset, _) in zip(views, blocks, self.plan.sources.values()):
            b = np.asarray(block)
            if n == view.shape[1] and b.dtype == view.dtype and b.flags.c_contiguous:
                self._engine.fill_bytes(slot, int(offset), b)  # as _fill_full
                continue
            view[:, :n] = b
            if n < view.shape[1]:
                view[:, n:] = 0
        self._note_input(slot, n)
        self._slot_n[slot] = n
        return slot, n

    def _full_slot(self, blocks: Any) -> "int | None":
        """The common step, checked in few operations: the next slot when ``blocks`` are a full,
        C-contiguous NumPy block of each source's shape and dtype (and the slot is free); None
        for anything else, which takes the general path with its checks and messages."""
        slot = self._next
        views = self._in_views[slot]
        if views is None or self._busy[slot] or self._closed or len(blocks) != len(views):
            return None
        for view, b in zip(views, blocks):  # the view's shape is the source's full block
            if type(b) is not np.ndarray or b.shape != view.shape or b.dtype != view.dtype \
                    or not b.flags.c_contiguous:
                return None
        return slot

    def _fill_full(self, blocks: Any) -> "tuple[int, int] | None":
        """A full block of every source (_full_slot) into its slice natively; None: anything else."""
        slot = self._full_slot(blocks)
        if slot is None:
            return None
        self._settle_device_blocks()  # device blocks queued before count their NaN/Inf first
        for b, (offset, _) in zip(blocks, self.plan.sources.values()):
            # the slice's bytes: one native copy, without the GIL, with the chain's non-temporal
            # stores (the GPU then reads it from memory, not the CPU's caches), split over the copy threads
            self._engine.fill_bytes(slot, int(offset), b)
        n = int(blocks[0].shape[1])
        self._note_input(slot, n)
        self._slot_n[slot] = n
        return slot, n

    def _outputs_of(self, slot: int, copy: bool) -> "np.ndarray | tuple[np.ndarray, ...]":
        items = self._engine.sink_items(slot)
        outs = tuple((v[:, :k].copy() if copy else v[:, :k]) for v, k in zip(self._out_views[slot], items))
        return outs if len(outs) != 1 else outs[0]

    def _after(self, slot: int) -> None:
        if self._nf_flags[slot]:
            self._take_nonfinite(slot)

    def submit(self, blocks: Any, final: bool = False) -> int:  # type: ignore[override]
        """Write each source's block into its slice of the next slot and hand it over; the slot."""
        slot, n = self._fill_graph(blocks, final)
        self._engine.submit(slot, n, final)
        self._busy[slot] = True
        self._next = (slot + 1) % self._slots
        return slot

    def collect(self, slot: int) -> "np.ndarray | tuple[np.ndarray, ...]":  # type: ignore[override]
        """Wait for ``slot``'s block; views of each output's valid items (until the slot is reused)."""
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        if not self._busy[slot]:
            raise ValueError(f"slot {slot} holds no submitted block")
        self._busy[slot] = False
        self._engine.wait(slot)
        self._after(slot)
        return self._outputs_of(slot, copy=False)

    def process(self, blocks: Any, final: bool = False,  # type: ignore[override]
                out: np.ndarray | None = None, *, stream: Any = None) -> "np.ndarray | tuple[np.ndarray, ...]":
        """One block of every source in, one new array per output back. GPU arrays (every source's)
        stay on the GPU: one GPU array per output, of the first source's framework, ready in
        stream order on ``stream`` (default: the framework's current stream), with no host copy
        (cuda_device_io.GraphDeviceBlocks)."""
        group = blocks if isinstance(blocks, (tuple, list)) else (blocks,)
        if not final and out is None:
            slot = self._full_slot(group)
            if slot is not None:
                return self._process_full(slot, group)
        if out is not None:
            raise ValueError("a graph's engine returns one block per output: process(out=...) is for a chain")
        on_gpu = [type(b) is not np.ndarray and _is_device_array(b) for b in group]
        if any(on_gpu):
            if not all(on_gpu):
                raise ConfigError("a graph's blocks of one step are all GPU arrays or all host arrays, got both",
                                  hint="copy them to one side first")
            return self.device_blocks().process(blocks, final, stream)
        # one native call runs the filled slot: on this thread when the engine is idle (no hand-over
        # to the worker and back, as a chain's process())
        slot, n = self._fill_graph(blocks, final)
        self._engine.process_filled(slot, n, final)
        self._next = (slot + 1) % self._slots
        self._after(slot)
        return self._outputs_of(slot, copy=True)

    def _process_full(self, slot: int, blocks: Any) -> "np.ndarray | tuple[np.ndarray, ...]":
        """A full, non-final block of every source (_full_slot) in one native call: the fills, the
        run and each sink's block into a new array, without the GIL (as a chain's process())."""
        self._settle_device_blocks()  # device blocks queued before count their NaN/Inf first
        outs = [np.empty(shape, dtype) for shape, dtype in self._out_blocks]
        self._note_input(slot, self._items)
        self._slot_n[slot] = self._items
        self._engine.process_graph(slot, blocks, outs)
        self._next = (slot + 1) % self._slots
        self._after(slot)
        return tuple(outs) if len(outs) != 1 else outs[0]

    def process_split(self, blocks: Any, cuts: list[int],  # type: ignore[override]
                      final: bool = False) -> "np.ndarray | tuple[np.ndarray, ...]":
        """The block as the chunks between ``cuts`` (the scheduler's units), on the calling thread."""
        if any(self._busy):
            raise ValueError("process_split() needs an idle engine: collect every submitted slot first")
        slot, n = self._fill_graph(blocks, final)
        self._engine.process_split_filled(slot, n, final, [int(c) for c in cuts])
        self._next = (slot + 1) % self._slots
        self._after(slot)
        return self._outputs_of(slot, copy=True)

    def _take_nonfinite(self, slot: int) -> None:
        """The slot's block held NaN/Inf: the GPU's count, and where the first was (each source's
        slice of the pinned input, read on the host: the rare path)."""
        count, _ = self._engine.take_nonfinite(slot)
        if not count:
            return
        n = self._slot_n[slot]
        views = self._in_views[slot] or []
        for name, view, spec in zip(self._sources, views, self._src_specs):
            found, channel, sample, value = find_nonfinite(view[:, :n])
            if not found:
                continue
            nf = self.nonfinite
            if nf.first_sample is None:
                self.nonfinite_source = name
            nf.add(int(count), block=self._slot_block[slot], sample=self._slot_start[slot] + sample,
                   channel=channel, value=value, sample_rate=spec.sample_rate)
            if nf.policy == "error":
                raise nf.error(f"source '{name}'")
            return

    def __repr__(self) -> str:
        return (f"CudaGraphEngine({[op.kind for op in self.ops]}, sources={len(self.plan.sources)}, "
                f"outputs={len(self.plan.outputs)}, slots={self._slots}, closed={self._closed})")
