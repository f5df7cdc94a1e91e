"""Device blocks of a :class:`~pygpukit_dsp.backends.cuda_engine.CudaEngine`: GPU arrays in and
out with no host copy (docs/cuda.md, "GPU arrays"; the protocols: pygpukit_dsp/arrays_interop.py).

Each block is one native call, ``StreamEngine.process_device``: the engine's compute stream waits
for the caller's stream, copies the block device-to-device into the slot's device input, checks
it for NaN/Inf, replays the slot's graph, copies the output device-to-device into an array of
the input's framework, and the caller's stream waits for that. Nothing waits on the host, except
under ``nonfinite: error``: there each block waits for its own completion (one event wait), so
that a NaN stops the run at the block that holds it, as on the host path.

Under ``zero`` and ``pass`` the non-finite samples of device blocks are counted when the engine
next synchronises (:meth:`DeviceBlocks.settle`: the next host block, ``synchronize()``,
``reset()``, ``close()``); the count is exact, and the first one's block is the earliest block of
its slot since the last synchronisation (several blocks of one slot that held them share one
record); its value is not read back (the caller may have reused the array).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..arrays_interop import (DeviceArrayInfo, caller_stream, check_device, empty_like_input, inspect)
from ..errors import ConfigError, StreamFault

if TYPE_CHECKING:
    from .cuda_engine import CudaEngine


class DeviceBlocks:
    """The device-block side of one CudaEngine (made on its first device block)."""

    def __init__(self, engine: "CudaEngine"):
        self.engine = engine
        # slot -> (block index, sample index) of its earliest device block since the last settle
        self.pending: dict[int, tuple[int, int]] = {}

    # ------------------------------------------------------------------ checks
    def check(self, info: DeviceArrayInfo, what: str) -> None:
        """ConfigError unless ``info`` fits the engine's input (dtype, channels, GPU)."""
        e = self.engine
        spec = e.chain.input
        if info.dtype != spec.np_dtype:
            raise ConfigError(f"{what} holds {info.dtype} values but the pipeline's input is {spec.dtype}; device "
                              "arrays are not converted on the way in",
                              hint=f"convert it on the GPU first (x.astype('{spec.dtype}'))")
        if info.shape[0] != spec.channels:
            raise ConfigError(f"{what} has {info.shape[0]} channels (shape {info.shape}); the pipeline's input has "
                              f"{spec.channels}", hint="a block is (channels, n)")
        check_device(info, e.device.index, what)

    # ------------------------------------------------------------------ blocks
    def process(self, block: Any, final: bool, out: Any = None, stream: Any = None) -> Any:
        """One device block (at most block_size samples; fewer only with ``final``) -> a new array
        of the input's framework (or ``out``, a device array of the full output block, filled
        and returned: a view of its first valid items for a short block)."""
        e = self.engine
        info = inspect(block, what="the block", stream=stream)
        self.check(info, "the block")
        n = info.shape[1]
        items = e.chain.input.block_size
        if n < 1 or n > items:
            raise ValueError(f"a device block holds 1..{items} samples, got {n}")
        if n < items and not final:
            raise ValueError(f"a partial block ({n} of {items} items) must be the final block (final=True)")
        handle = caller_stream(info, stream)
        n_out = int(e.native.device_output_items(n, bool(final)))
        spec = e.chain.output
        item = spec.np_dtype.itemsize * (spec.bins or 1)
        if out is None:
            shape = (spec.channels, n_out) + spec.block_shape[2:]
            result, out_ptr = empty_like_input(info, shape, spec.np_dtype, e.device.index, e.device, handle)
            out_row = n_out * item
        else:
            result, out_ptr, out_row = out, self.out_pointer(out), spec.block_size * item
        self.issue(info, info.ptr, n, final, out_ptr, out_row, handle)
        if out is not None and n_out < spec.block_size:
            return out[:, :n_out]
        return result

    def out_pointer(self, out: Any) -> int:
        """The device address of ``process(out=...)``: a C-contiguous GPU array (CAI) of the full
        output block's shape and dtype on the engine's GPU; ConfigError otherwise."""
        spec = self.engine.chain.output
        cai = getattr(out, "__cuda_array_interface__", None)
        want = f"a C-contiguous {spec.dtype} GPU array of the full output block's shape {spec.block_shape}"
        if cai is None:
            raise ConfigError(f"process(out=...) of a GPU block takes {want} (with __cuda_array_interface__), "
                              f"got {type(out).__name__}")
        shape, dtype = tuple(int(v) for v in cai["shape"]), np.dtype(cai["typestr"])
        strides = cai.get("strides")
        c_order = tuple(int(np.prod(shape[k + 1:], dtype=np.int64)) * dtype.itemsize for k in range(len(shape)))
        if shape != tuple(spec.block_shape) or dtype != spec.np_dtype or \
                (strides is not None and tuple(int(v) for v in strides) != c_order):
            raise ConfigError(f"process(out=...) takes {want}, got {dtype} {shape}")
        from ..arrays_interop import _framework_device, framework_of

        gpu = _framework_device(out, framework_of(out))
        if gpu is not None and gpu != self.engine.device.index:
            raise ConfigError(f"process(out=...) is on GPU {gpu}, but the engine runs on GPU {self.engine.device.index}")
        return int(cai["data"][0])

    def process_array(self, info: DeviceArrayInfo, stream: Any = None) -> Any:
        """A whole (channels, n) device array block by block (the last one final, maybe short),
        into one output array of the input's framework: block k's output is written at its
        columns, so nothing is concatenated."""
        e = self.engine
        self.check(info, "process()'s input array")
        handle = caller_stream(info, stream)
        n, bs = info.shape[1], e.chain.input.block_size
        spec = e.chain.output
        cuts = [(start, min(bs, n - start), start + bs >= n) for start in range(0, n, bs)]
        total = sum(int(e.native.device_output_items(m, final)) for _, m, final in cuts)
        item = spec.np_dtype.itemsize * (spec.bins or 1)
        shape = (spec.channels, total) + spec.block_shape[2:]
        result, out_ptr = empty_like_input(info, shape, spec.np_dtype, e.device.index, e.device, handle)
        in_item = info.dtype.itemsize
        column = 0
        for start, m, final in cuts:
            column += self.issue(info, info.ptr + start * in_item, m, final, out_ptr + column * item,
                                 total * item, handle)
        return result

    def issue(self, info: DeviceArrayInfo, ptr: int, n: int, final: bool, out_ptr: int, out_row: int,
              stream: int) -> int:
        """Queue one block (the engine's next slot); returns its valid output items."""
        e = self.engine
        if e.closed:
            raise StreamFault("the CUDA engine is closed")
        slot = e._next
        if any(e._busy):
            busy = e._busy.index(True)
            raise ValueError(f"slot {busy} still holds an uncollected block: collect({busy}) first")
        block_index, sample = e._blocks_in, e._samples
        n_out = int(e.native.process_device(slot, int(ptr), int(info.row_bytes), int(n), bool(final), int(out_ptr),
                                            int(out_row), int(stream)))
        e._note_input(slot, n)
        e._next = (slot + 1) % e.slots
        self.pending.setdefault(slot, (block_index, sample))
        if e.nonfinite.policy == "error":
            self.settle(info=info, ptr=ptr)
        return n_out

    def settle(self, info: DeviceArrayInfo | None = None, ptr: int = 0) -> None:
        """Wait for the device blocks queued so far and count their non-finite samples (``info``/
        ``ptr``: the one block just queued, whose first NaN/Inf value is read from its array)."""
        if not self.pending:
            return
        e = self.engine
        e.native.synchronize_device()
        pending, self.pending = self.pending, {}
        flags = e._nf_flags
        spec = e.chain.input
        words = 2 if spec.dtype == "complex64" else 1
        for slot, (block_index, start) in sorted(pending.items(), key=lambda kv: kv[1]):
            if not flags[slot]:
                continue
            count, first = e.native.take_nonfinite(slot)
            if not count:
                continue
            channel, sample = divmod(int(first) // words, spec.block_size)
            value = None
            if info is not None:  # the caller's array, still as it was (this block is done)
                address = ptr + channel * info.row_bytes + (int(first) - channel * spec.block_size * words) * 4
                value = float(e.native.read_device_word(int(address)))
            e.nonfinite.add(int(count), block=block_index, sample=start + sample, channel=channel, value=value,
                            sample_rate=spec.sample_rate)
        if e.nonfinite.policy == "error" and e.nonfinite.count:
            raise e.nonfinite.error("the input")


def host_view(x: Any) -> np.ndarray | None:
    """None for a GPU array; else ``x`` as the host path takes it."""
    from ..arrays_interop import as_host_array, is_device_array

    if isinstance(x, np.ndarray):
        return x
    if is_device_array(x):
        return None
    return as_host_array(x)


class GraphDeviceBlocks:
    """The device-block side of one CudaGraphEngine: a GPU array per source in, a GPU array per
    sink out (the first source's framework), one native call (``process_device_graph``) per
    block, ordered on the caller's stream as a chain's device blocks are. NaN/Inf input samples
    are counted when the engine next synchronises (under ``error``: each block waits for itself),
    the first one's source, channel and sample found from its place in the packed input."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.pending: dict[int, tuple[int, int]] = {}

    def process(self, blocks: Any, final: bool, stream: Any = None) -> Any:
        e = self.engine
        if not isinstance(blocks, (tuple, list)):
            blocks = (blocks,)
        if len(blocks) != len(e._sources):
            raise ValueError(f"the graph reads {len(e._sources)} sources ({', '.join(e._sources)}); "
                             f"got {len(blocks)} blocks")
        infos = []
        for name, block, spec in zip(e._sources, blocks, e._src_specs):
            what = f"source '{name}''s block"
            info = inspect(block, what=what, stream=stream)
            if info.dtype != spec.np_dtype:
                raise ConfigError(f"{what} holds {info.dtype} values but the source is {spec.dtype}; device arrays "
                                  "are not converted on the way in", hint=f"convert it on the GPU first "
                                  f"(x.astype('{spec.dtype}'))")
            if info.shape[0] != spec.channels:
                raise ConfigError(f"{what} has {info.shape[0]} channels; the source has {spec.channels}",
                                  hint="a block is (channels, n)")
            check_device(info, e.device.index, what)
            infos.append(info)
        ns = {info.shape[1] for info in infos}
        if len(ns) != 1:
            raise ValueError(f"every source's block has one length in a step, got {sorted(ns)}")
        n, items = ns.pop(), e.chain.nodes[e._sources[0]].block_size
        if n < 1 or n > items:
            raise ValueError(f"a device block holds 1..{items} samples, got {n}")
        if n < items and not final:
            raise ValueError(f"a partial block ({n} of {items} items) must be the final block (final=True)")
        handle = caller_stream(infos[0], stream)
        outs, out_rows = [], []
        for spec in e._out_specs:
            item = spec.np_dtype.itemsize * (spec.bins or 1)
            arr, ptr = empty_like_input(infos[0], tuple(spec.block_shape), spec.np_dtype, e.device.index, e.device,
                                        handle)
            outs.append(arr)
            out_rows.append((int(ptr), spec.block_size * item, spec.channels, item))
        ins = [(int(info.ptr), int(info.row_bytes), spec.channels, spec.np_dtype.itemsize * (spec.bins or 1))
               for info, spec in zip(infos, e._src_specs)]
        if e.closed:
            raise StreamFault("the CUDA engine is closed")
        if any(e._busy):
            raise ValueError(f"slot {e._busy.index(True)} still holds an uncollected block: collect it first")
        slot = e._next
        block_index, sample = e._blocks_in, e._samples
        got = e.native.process_device_graph(slot, int(n), bool(final), ins, out_rows, int(handle))
        e._note_input(slot, n)
        e._slot_n[slot] = n
        e._next = (slot + 1) % e.slots
        self.pending.setdefault(slot, (block_index, sample))
        if e.nonfinite.policy == "error":
            self.settle()
        res = tuple(a[:, :k] if k < a.shape[1] else a for a, k in zip(outs, got))
        return res if len(res) != 1 else res[0]

    def settle(self) -> None:
        """Wait for the device blocks queued so far and count their NaN/Inf samples."""
        if not self.pending:
            return
        e = self.engine
        e.native.synchronize_device()
        pending, self.pending = self.pending, {}
        plan = e.plan
        for slot, (block_index, start) in sorted(pending.items(), key=lambda kv: kv[1]):
            if not e._nf_flags[slot]:
                continue
            count, first = e.native.take_nonfinite(slot)
            if not count:
                continue
            byte = int(first) * 4
            for name, spec in zip(e._sources, e._src_specs):
                offset, nbytes = plan.sources[name]
                if offset <= byte < offset + nbytes:
                    row = spec.block_size * spec.np_dtype.itemsize
                    channel, within = divmod(byte - offset, row)
                    if e.nonfinite.first_sample is None:
                        e.nonfinite_source = name
                    e.nonfinite.add(int(count), block=block_index, sample=start + within // spec.np_dtype.itemsize,
                                    channel=int(channel), value=None, sample_rate=spec.sample_rate)
                    break
        if e.nonfinite.policy == "error" and e.nonfinite.count:
            raise e.nonfinite.error(f"source '{e.nonfinite_source}'")
