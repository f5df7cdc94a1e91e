"""The CUDA engine wrapper: a pipeline lowered to native ops, run by ``_native.StreamEngine``.

The per-block work happens in C++ on the engine's worker thread (H2D -> the slot's CUDA graph
-> D2H, one completion wait per block); Python only fills a pinned input slot and hands it
over. Two ways to use it:

* :meth:`CudaEngine.process` (the safe API): copies the block into the next input slot (the one
  host copy), submits it, waits, and returns a *copy* of the valid output. With
  ``inline_submit`` (the default in latency mode, i.e. realtime QoS) an idle engine issues the
  block and waits for it on the calling thread instead of the worker's.
* :meth:`CudaEngine.submit` / :meth:`CudaEngine.collect` (zero copy on the way out): ``collect``
  returns a NumPy *view* of the slot's pinned output, valid until that slot is submitted
  again. With two slots, ``submit(b1); submit(b2); collect(s1); collect(s2)`` keeps two blocks
  in flight, so block 2's upload overlaps block 1's compute.

GPU arrays (any object with ``__cuda_array_interface__`` or a CUDA ``__dlpack__``: CuPy, torch,
JAX, Numba) go through :meth:`CudaEngine.process` with no host copy: device-to-device into the
slot, the slot's graph, device-to-device out into an array of the input's framework, ordered on
the caller's CUDA stream with no host wait (cuda_device_io.py; docs/cuda.md, "GPU arrays").

Measurement is opt-in and kept apart: :meth:`CudaEngine.instrument` hands the benchmarks the
native ``EngineInstrument`` (resident blocks, the timing loops, paced blocks); the engine pays
nothing for it otherwise. See docs/cuda.md ("Python API", "Benchmark entry points").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError, StreamFault
from ..nonfinite import DEFAULT_POLICY, NonFiniteCount
from .cuda_lowering import OpDesc, lower_pipeline

if TYPE_CHECKING:
    from .. import _native
    from ..pipeline import Pipeline, SpecChain
    from . import BackendChoice

DEFAULT_SLOTS = 2
DEFAULT_SPIN_US = 200          # how long a waiting thread spins before it sleeps
MAX_REALTIME_SPIN_US = 5000    # a realtime stream spins up to its deadline, at most this
# Columns of CudaEngine.block_trace(): clock stamps (ns) of one process() call in order, then
# the last chunk's device time (scheduled blocks, else 0) and whether a dispatcher ran it.
TRACE_FIELDS = ("call", "filled", "launch_begin", "launched", "done_seen", "woke", "gpu_ns", "scheduled",
                "copied")


def _layout(spec) -> tuple[int, int, int, str]:
    return (spec.channels, spec.block_size, spec.bins, spec.dtype)


def op_dict(op: OpDesc) -> dict[str, Any]:
    """The native engine's description of one lowered op."""
    return {"kind": op.kind, "name": op.name, "in": _layout(op.spec_in), "out": _layout(op.spec_out),
            "params": dict(op.params)}


class CudaEngine:
    """A pipeline's stages on one GPU (``device``, default 0), fed block by block through pinned
    slots (see module doc)."""

    def __init__(self, pipeline: "Pipeline", chain: "SpecChain", choice: "BackendChoice", *,
                 slots: int = DEFAULT_SLOTS, use_graph: bool | None = None, spin_us: int | None = None,
                 device: int = 0, single_stream: bool | None = None,
                 inline_submit: bool | None = None, mapped_io: bool | None = None, direct_output: bool = True,
                 nonfinite: str = DEFAULT_POLICY):
        from .. import _native

        self.choice = choice
        self.chain = chain
        # UnsupportedError before anything is allocated; a graph's engine also gets its memory plan
        self.ops, graph_plan = self._lower(pipeline, chain)
        self.device = _native.Device(device)
        realtime = pipeline.qos.cls == "realtime"
        self.priority = self.device.highest_stream_priority if realtime else 0
        # Latency mode for realtime streams: copies and compute on one stream (no cross-stream
        # event waits), launched eagerly: on the H100 this beat a graph launch for W1 (p50 26.7
        # vs 36.8 us native round trip, benchmarks/profile_w1.py). Throughput streams keep
        # separate copy streams, so that block n+1's upload overlaps block n's compute, and
        # replay each slot's captured graph (docs/cuda.md, "Latency mode").
        # mapped_io (kernels move the block through device-mapped pinned slots; docs/cuda.md,
        # "Mapped I/O") is a latency-mode option: asking for it implies single_stream unless
        # single_stream is given.
        # Realtime streams: latency mode with mapped I/O, replayed as one graph per slot (pull
        # kernel, ops, push kernel; one launch per block). On the H100 it gave the lowest W1
        # process() p50 in interleaved profiles (e.g. 31.3 vs 38.7 us for the copies in a graph,
        # same run; benchmarks/profile_w1.py, docs/benchmarks.md). direct_output (default on):
        # when the last op writes its output once (Op::writes_output_once, e.g. fir_mix), the
        # block graph has it write the mapped pinned output itself and drops the push kernel.
        if mapped_io is None:
            mapped_io = realtime
        if single_stream is None:
            single_stream = realtime or mapped_io
        if use_graph is None:
            use_graph = True
        # Latency mode also runs process() on the calling thread when nothing else is in flight
        # (two thread hand-offs fewer per block); submit()/collect() always use the worker.
        # A realtime caller spins (instead of sleeping on a futex) for up to its deadline while its
        # block runs: on a busy or virtualised host a wake-up can cost more than the block.
        if spin_us is None:
            deadline_us = pipeline.qos.deadline_s(chain.input.block_period) * 1e6
            spin_us = int(min(MAX_REALTIME_SPIN_US, max(DEFAULT_SPIN_US, deadline_us))) if realtime \
                else DEFAULT_SPIN_US
        if inline_submit is None:
            inline_submit = single_stream
        graph_arg = {} if graph_plan is None else {"graph": graph_plan}
        self._engine = _native.StreamEngine(self.device, [op_dict(op) for op in self.ops], slots=slots,
                                            priority=self.priority, use_graph=use_graph, spin_us=spin_us,
                                            single_stream=single_stream, inline_submit=inline_submit,
                                            mapped_io=mapped_io, direct_output=direct_output,
                                            zero_nonfinite=nonfinite != "pass", **graph_arg)
        # NaN/Inf input samples are found on the GPU where the block arrives (the pull kernel, or
        # a check kernel after the H2D copy) and, unless the policy is pass, replaced by 0 there
        # before the first op; each slot's mapped flag says whether its last block held any.
        self.nonfinite = NonFiniteCount(nonfinite)
        self._nf_flags = self._engine.nonfinite_flags
        self._slot_start = [0] * self._engine.slots  # the stream's sample index of each slot's block
        self._slot_block = [0] * self._engine.slots  # ... and its block index
        self._samples = self._blocks_in = 0
        self._build_timings = list(self._engine.build_timings)
        self._in_dtype = chain.input.np_dtype
        self._slots = self._engine.slots
        # the pinned input views are taken when needed: a view of a slot zero-fills it first,
        # which for big blocks (W2: 128 MiB a slot) is not free (docs/benchmarks.md, "First block")
        self._out = [self._engine.output_slot(s) for s in range(self._slots)]
        self._items = chain.input.block_size
        self._in_shape = chain.input.block_shape
        self._busy = [False] * self._slots  # submitted, not yet collected
        self._next = 0
        self._closed = False
        self._dispatch: Any = None  # the CudaDispatch it is attached to (set and cleared by it)
        self._device_blocks: Any = None  # cuda_device_io.DeviceBlocks, made on the first device block
        self._instrument: Any = None  # made by instrument(), on first use

    def _lower(self, pipeline: Any, chain: Any) -> tuple[list[OpDesc], dict[str, Any] | None]:
        """The native ops, and the memory plan of a graph (None: a chain)."""
        return lower_pipeline(pipeline, chain), None

    # ------------------------------------------------------------------ blocks
    def _fill(self, block: np.ndarray, final: bool) -> tuple[int, int]:
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        block = self._host_block(block, "submit")
        shape = self._in_shape
        if block.ndim != len(shape) or block.shape[0] != shape[0] or block.shape[2:] != shape[2:] \
                or block.shape[1] > self._items:
            want = "(" + ", ".join(["%d" % shape[0], f"<= {self._items}", *map(str, shape[2:])]) + ")"
            raise ValueError(f"block of shape {block.shape} does not fit the pipeline's input {want}")
        n = int(block.shape[1])
        if n < self._items and not final:
            raise ValueError(f"a partial block ({n} of {self._items} items) must be the final block "
                             "(final=True)")
        slot = self._next
        if self._busy[slot]:
            raise ValueError(f"slot {slot} still holds an uncollected block: collect({slot}) first")
        # the one host copy, in C++ without the GIL (non-temporal stores into pinned memory)
        self._engine.fill(slot, np.ascontiguousarray(block, dtype=self._in_dtype))
        self._note_input(slot, n)
        return slot, n

    def _note_input(self, slot: int, n: int) -> None:
        self._slot_start[slot], self._slot_block[slot] = self._samples, self._blocks_in
        self._samples += n
        self._blocks_in += 1

    def _take_nonfinite(self, slot: int) -> None:
        """The slot's block held NaN/Inf samples (its flag is set): count them, and stop the run
        under ``nonfinite: error``. Rare: one small device copy."""
        count, first = self._engine.take_nonfinite(slot)
        if not count:
            return
        spec = self.chain.input
        words = 2 if spec.dtype == "complex64" else 1
        channel, sample = divmod(int(first) // words, spec.block_size)
        value = self._engine.input_slot(slot).reshape(-1).view(np.float32)[int(first)]
        nf = self.nonfinite
        nf.add(int(count), block=self._slot_block[slot], sample=self._slot_start[slot] + sample, channel=channel,
               value=float(value), sample_rate=spec.sample_rate)
        if nf.policy == "error":
            raise nf.error("the input")

    def _host_block(self, block: Any, method: str) -> np.ndarray:
        """``block`` as the host path takes it; device blocks queued before it are settled first
        (their non-finite counts belong before this block's). A GPU array is refused by the
        methods that copy through the pinned slots (``submit``, ``process_split``)."""
        from .cuda_device_io import host_view

        view = host_view(block)
        if view is None:
            raise ConfigError(f"{method}() takes host arrays: a GPU array goes through process(), which "
                              "keeps it on the GPU", hint="call engine.process(block, final)")
        self._settle_device_blocks()
        return np.asarray(view)

    def _settle_device_blocks(self) -> None:
        blocks = getattr(self, "_device_blocks", None)  # None: no device block ran
        if blocks is not None:
            blocks.settle()

    def device_blocks(self) -> Any:
        """The engine's :class:`~pygpukit_dsp.backends.cuda_device_io.DeviceBlocks` (made on first use)."""
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        if self._device_blocks is None:
            from .cuda_device_io import DeviceBlocks

            self._device_blocks = DeviceBlocks(self)
        return self._device_blocks

    def synchronize(self) -> None:
        """Wait (host) for every device block queued so far and count their non-finite input
        samples (under ``nonfinite: error``, raise for them). Host blocks need no call: each one
        is done when :meth:`process` / :meth:`collect` returns."""
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        self._settle_device_blocks()

    def submit(self, block: np.ndarray, final: bool = False) -> int:
        """Copy ``block`` into the next input slot and hand it to the worker; returns the slot."""
        slot, n = self._fill(block, final)
        self._engine.submit(slot, n, final)
        self._busy[slot] = True
        self._next = (slot + 1) % self._slots
        return slot

    def collect(self, slot: int) -> np.ndarray:
        """Wait for ``slot``'s block; a view of its valid output, valid until the slot is reused."""
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        if not self._busy[slot]:
            raise ValueError(f"slot {slot} holds no submitted block")
        self._busy[slot] = False
        n_out = self._engine.wait(slot)
        if self._nf_flags[slot]:
            self._take_nonfinite(slot)
        return self._out[slot][:, :n_out]

    def process(self, block: Any, final: bool = False, out: Any = None, *, stream: Any = None) -> Any:
        """Process one block and return a new array with its output (the safe API).

        One native call: the copy into the pinned slot, the hand-over, the wait and the copy
        out all happen in C++ without the GIL. ``out`` (a C-contiguous array of the full
        output block's shape and dtype) is filled and returned instead of a new array (a view
        of its first valid items for a short final block).

        A GPU array (``__cuda_array_interface__`` or a CUDA ``__dlpack__``) stays on the GPU: the
        output is a new array of its framework (``out``: a device array), ready in stream order
        on ``stream`` (default: the framework's current stream) when this returns, with no host
        copy and no host wait (cuda_device_io.py).
        """
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        if not isinstance(block, np.ndarray):
            from ..arrays_interop import as_host_array, is_device_array

            if is_device_array(block):
                return self.device_blocks().process(block, final, out, stream)
            block = as_host_array(block)
        slot = self._next
        if self._busy[slot]:
            raise ValueError(f"slot {slot} still holds an uncollected block: collect({slot}) first")
        self._settle_device_blocks()
        block = np.ascontiguousarray(block, dtype=self._in_dtype)
        if block.ndim >= 2 and block.shape[1] < self._items and not final:
            raise ValueError(f"a partial block ({block.shape[1]} of {self._items} items) must be the "
                             "final block (final=True)")
        self._note_input(slot, int(block.shape[1]) if block.ndim >= 2 else 0)
        y = self._engine.process(slot, block, final, out)
        self._next = (slot + 1) % self._slots
        if self._nf_flags[slot]:
            self._take_nonfinite(slot)
        return y

    # ------------------------------------------------------------------ chunks, scheduler
    @property
    def units_per_block(self) -> int:
        """Units of one full block (chunkable ops split theirs; the scheduler's units_per_block)."""
        return int(self._engine.units_per_block)

    def process_split(self, block: np.ndarray, cuts: list[int], final: bool = False) -> np.ndarray:
        """Process ``block`` as the chunks between ``cuts`` (unit indices) and return its output.

        What the scheduler does to a throughput block, on the calling thread: for tests of the
        chunked ops (the result must equal :meth:`process`). The engine must be idle.
        """
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        slot = self._next
        if any(self._busy):
            raise ValueError("process_split() needs an idle engine: collect every submitted slot first")
        block = np.ascontiguousarray(self._host_block(block, "process_split"), dtype=self._in_dtype)
        self._note_input(slot, int(block.shape[1]))
        out = self._engine.process_split(slot, block, final, [int(c) for c in cuts])
        self._next = (slot + 1) % self._slots
        if self._nf_flags[slot]:
            self._take_nonfinite(slot)
        return out

    @property
    def attached(self) -> bool:
        """Whether a CudaDispatch launches this engine's blocks (see cuda_dispatch.py)."""
        return not self._closed and bool(self._engine.attached)

    @property
    def dispatch(self) -> Any:
        """The CudaDispatch that launches this engine's blocks, or None (its own worker does)."""
        return self._dispatch

    @property
    def closed(self) -> bool:
        return self._closed

    def attach_native(self, dispatch: Any, dispatcher: "_native.Dispatcher", stream_id: int) -> None:
        """Hand every block to ``dispatcher`` (``dispatch``'s native side) as scheduler stream
        ``stream_id``: :meth:`CudaDispatch.attach <pygpukit_dsp.backends.cuda_dispatch.CudaDispatch.attach>`
        calls it. :meth:`close` then detaches through ``dispatch`` first (the stream leaves the
        scheduler)."""
        self.native.attach(dispatcher, int(stream_id))
        self._dispatch = dispatch

    def detach_native(self) -> None:
        """Back to the engine's own worker, after its in-flight blocks finish (a closed engine has
        nothing to detach): :meth:`CudaDispatch.detach` calls it."""
        try:
            if not self._closed:
                self._engine.detach()
        finally:
            self._dispatch = None

    @property
    def native(self) -> "_native.StreamEngine":
        """The native engine this wraps (``_native.StreamEngine``), for product code that drives it
        natively: a CudaDispatch attaches it, admission's rehearsal releases its blocks from native
        threads (``_native.run_paced``). Blocks run through it bypass this wrapper's bookkeeping
        (the next slot, the non-finite count): use :meth:`process` / :meth:`submit` otherwise."""
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        return self._engine

    def instrument(self) -> "_native.instrument.EngineInstrument":
        """The engine's measurement apparatus (opt-in; the benchmarks use it): the native
        ``EngineInstrument`` of this engine, made on the first call and the same one after.

        It gives resident mode (``resident``, ``pump_resident``, ``stop_pump``: blocks that skip
        their copies, back to back with no Python per block), the timing loops (``time_resident``,
        ``time_streamed``, ``measure_h2d_bandwidth``) and paced blocks (``process(slot, block, ...,
        release_ns, spin_us, prewarm)`` and ``wait_release``: the call waits natively for the block's
        release first; docs/cuda.md, "Paced blocks"). Until it is asked for, the engine pays nothing
        for any of them; making it waits for in-flight work and, with mapped I/O, captures the
        prewarm's graph per slot. Its blocks bypass this wrapper's bookkeeping (the next slot, the
        non-finite count), as :attr:`native`'s do.
        """
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        if self._instrument is None:
            from .._native import instrument

            self._instrument = instrument.EngineInstrument(self._engine)
        return self._instrument

    # ------------------------------------------------------------------ state, counters
    def reset(self) -> None:
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        for slot, busy in enumerate(self._busy):  # collect what is still in flight first
            if busy:
                self.collect(slot)
        self._settle_device_blocks()
        self._engine.reset()
        self._next = 0
        self._samples = self._blocks_in = 0

    def set_trace(self, capacity: int) -> None:
        """Record where the time of the last ``capacity`` :meth:`process` calls went (0: off).

        Each record holds native clock stamps (CLOCK_MONOTONIC ns, the clock of
        ``time.perf_counter_ns``): see :data:`TRACE_FIELDS` and :mod:`pygpukit_dsp.bench.trace`.
        Turning it on or off clears the ring; recording costs a few clock reads per block.
        """
        if capacity < 0:
            raise ValueError(f"trace capacity must be >= 0, got {capacity}")
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        self._engine.set_trace(int(capacity))

    def set_gpu_timing(self, on: bool = True) -> None:
        """Time on the GPU each block :meth:`process` runs itself (admission's calibration: the
        device time a block occupies, beside its wall-clock latency). While on, every block is
        filled before its launch, and :attr:`last_gpu_ns` gives the last one's GPU time (CUDA
        events around its work on the compute stream). Off by default; waits for in-flight work."""
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        self._engine.set_gpu_timing(bool(on))

    @property
    def last_gpu_ns(self) -> int:
        """GPU time (ns) of the last block completed with gpu timing on; 0: none, or the driver
        could not time it."""
        return int(self._engine.last_gpu_ns)

    @property
    def last_launch_ns(self) -> int:
        """Host time (ns) the last block's launch calls took with gpu timing on (0: none): the
        serial part of a block for whoever launches it (a dispatcher launches every stream's)."""
        return int(self._engine.last_launch_ns)

    def block_trace(self) -> dict[str, np.ndarray]:
        """The trace ring, oldest first: one int64 array per field of :data:`TRACE_FIELDS`."""
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        rows = self._engine.trace().astype(np.int64)
        return {name: rows[:, i].copy() for i, name in enumerate(TRACE_FIELDS)}

    def build_timings(self) -> list[tuple[str, float]]:
        """Milliseconds of each step of the native engine's constructor (docs/benchmarks.md,
        "First block"): io kernels, streams, each op (its kernel modules, cuFFT plans, cuBLAS
        handles, buffers), device buffers, slots (pinned allocation and zero fill), buffer zeroing,
        warm-up block, graph capture."""
        return list(self._build_timings)

    def counters(self) -> dict[str, int]:
        if self._closed:
            return dict(self._final_counters)
        return dict(self._engine.counters())

    def close(self) -> None:
        if self._closed:
            return
        try:
            dispatch = self._dispatch
            if dispatch is not None:  # its runner is done: the stream leaves the scheduler
                dispatch.detach(self, missing_ok=True)
            self._settle_device_blocks()  # counted before the engine goes (a fault still closes it)
        finally:
            try:
                self._final_counters = dict(self._engine.counters())
            finally:
                self._closed = True
                self._instrument = None
                self._engine.close()

    @property
    def slots(self) -> int:
        return self._slots

    def __repr__(self) -> str:
        return f"CudaEngine({[op.kind for op in self.ops]}, slots={self._slots}, closed={self._closed})"
