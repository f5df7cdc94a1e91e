"""A pipeline of one path that holds python stages, on the cuda backend.

A Python call cannot be a node of a CUDA graph, so the chain is cut at its python stages: each
straight run of the other stages is a native segment (a :class:`CudaEngine` of its own, one CUDA
graph per block, taking and giving GPU arrays: cuda_device_io.py), and each python stage calls
its function on the block's GPU array between them. Per block, with one CUDA stream (the
engine's, made by the first python stage's framework) ordering it all:

1. a host block is copied to the GPU once (one H2D); a GPU block is taken as it is;
2. each part in order: a native segment queues its graph on the stream (events, no host wait);
   a python stage's function runs with that stream as its framework's current stream, on the
   block as an array of its framework (CuPy or torch, handed over by DLPack, no copy);
3. a host block's output is copied back once (one D2H, which waits for the stream); a GPU
   block's output is returned as the last part gave it, ready in stream order on the stream.

Nothing goes through the host in between. A chain that starts with a python stage gets a
native identity segment first (``gain``, factor 1), so that NaN/Inf input samples are found
and counted on the GPU under the pipeline's ``nonfinite`` policy as in every other chain.

In a Session the stream is admitted by its measured block cost like any other; its blocks run on
the runner's thread (the Python calls need it), queued outside the GPU dispatcher's chunks as a
callback source's GPU blocks are (docs/graphs.md, "Python stages").
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import StreamFault, UnsupportedError
from ..nonfinite import DEFAULT_POLICY
from ..stages.python import Python, PythonProcessor

if TYPE_CHECKING:
    from ..pipeline import Pipeline, SpecChain
    from ..signal import SignalSpec
    from ..stages.base import Stage
    from . import BackendChoice


def has_python_stage(stages: Sequence["Stage"]) -> bool:
    return any(isinstance(st, Python) for st in stages)


def split_chain(stages: Sequence["Stage"]) -> list[tuple[str, int, int]]:
    """The chain's parts in order: ``("native", i, j)`` for stages[i:j] without a python stage,
    ``("python", i, i + 1)`` for each python stage."""
    parts: list[tuple[str, int, int]] = []
    start = 0
    for i, st in enumerate(stages):
        if isinstance(st, Python):
            if i > start:
                parts.append(("native", start, i))
            parts.append(("python", i, i + 1))
            start = i + 1
    if start < len(stages):
        parts.append(("native", start, len(stages)))
    return parts


def _framework_missing(framework: str) -> str | None:
    module = "cupy" if framework == "cupy" else "torch"
    if importlib.util.find_spec(module) is None:
        package = "cupy-cuda12x (or cupy-cuda13x)" if framework == "cupy" else "torch"
        return (f"its function gets {'CuPy' if framework == 'cupy' else 'PyTorch'} GPU arrays on the cuda backend "
                f"and {module} is not installed (pip install {package}, or set framework: "
                f"{'torch' if framework == 'cupy' else 'cupy'})")
    return None


@dataclass(frozen=True)
class _SegmentPipeline:
    """What a native segment's CudaEngine reads of its pipeline: its stages, name and QoS."""

    name: str
    stages: tuple
    qos: Any


def _segments(pipeline: "Pipeline", chain: "SpecChain") -> list[tuple[str, _SegmentPipeline | Python, "SpecChain"]]:
    """Each part with what opens it: a native segment's pipeline and spec chain, or the python
    stage and its (input, output) specs; the identity segment first when a python stage is."""
    from ..stages.gain import Gain

    stages = list(pipeline.stages)
    specs = list(chain.specs)
    if stages and isinstance(stages[0], Python):
        # NaN/Inf of the input are found where the input arrives, by a native segment
        stages.insert(0, Gain(linear=1.0, name=f"{stages[0].name}.input"))
        specs.insert(0, specs[0])
    out: list[tuple[str, Any, SpecChain]] = []
    for kind, i, j in split_chain(stages):
        sub = type(chain)(tuple(specs[i:j + 1]))  # a SpecChain (pipeline.py, above this layer)
        if kind == "python":
            out.append((kind, stages[i], sub))
        else:
            out.append((kind, _SegmentPipeline(f"{pipeline.name}[{stages[i].name}..{stages[j - 1].name}]",
                                               tuple(stages[i:j]), pipeline.qos), sub))
    return out


def check_python_chain(pipeline: "Pipeline", chain: "SpecChain") -> None:
    """UnsupportedError (naming the stage) unless every part of the chain can run on CUDA: each
    native segment lowers, each python stage's framework is installed, and a python stage whose
    output is in the frames domain is the last stage."""
    from .cuda_lowering import _load_families, lower_run, native_op_kinds

    _load_families()
    native = native_op_kinds()
    parts = _segments(pipeline, chain)
    for k, (kind, what, sub) in enumerate(parts):  # the python stages first: no GPU needed to check them
        if kind == "native":
            continue
        missing = _framework_missing(what.params.framework or "cupy")
        if missing:
            raise UnsupportedError(what.name, "cuda", missing)
        if sub.output.domain == "frames" and k + 1 < len(parts):
            raise UnsupportedError(what.name, "cuda", "on the cuda backend a python stage's output goes on to "
                                   "the next stage as a (channels, n) time-domain GPU array; a frames-domain "
                                   "output is taken only from the last stage (run it on the cpu backend)")
    for kind, what, sub in parts:
        if kind == "native":
            lower_run(list(what.stages), sub.specs, native)


class _Framework:
    """CuPy or torch, as the engine uses it: its stream, arrays across the host and DLPack."""

    def __init__(self, name: str, gpu: int, stream_ptr: int | None = None):
        self.name = name
        self.gpu = gpu
        if name == "cupy":
            import cupy

            self.xp = cupy
            with cupy.cuda.Device(gpu):
                self.stream = (cupy.cuda.ExternalStream(stream_ptr) if stream_ptr is not None
                               else cupy.cuda.Stream(non_blocking=True))
            self.ptr = int(self.stream.ptr)
        else:
            import torch

            self.xp = torch
            dev = torch.device("cuda", gpu)
            self.stream = (torch.cuda.ExternalStream(stream_ptr, device=dev) if stream_ptr is not None
                           else torch.cuda.Stream(device=dev))
            self.ptr = int(self.stream.cuda_stream)

    def current(self) -> Any:
        """A context in which the engine's stream is the framework's current stream on its GPU."""
        if self.name == "cupy":
            return _Both(self.xp.cuda.Device(self.gpu), self.stream)
        return self.xp.cuda.stream(self.stream)

    def owns(self, x: Any) -> bool:
        from ..arrays_interop import framework_of

        return framework_of(x) == self.name

    def take(self, x: Any) -> Any:
        """``x`` as an array of this framework (DLPack: the same memory, no copy)."""
        if self.owns(x):
            return x
        return self.xp.from_dlpack(x)

    def upload(self, block: np.ndarray) -> Any:
        """A host block on the GPU, queued on the stream (the one H2D of a host block)."""
        with self.current():
            if self.name == "cupy":
                a = self.xp.empty(block.shape, dtype=block.dtype)
                a.set(block, stream=self.stream)
                return a
            return self.xp.from_numpy(block).to(f"cuda:{self.gpu}", non_blocking=False)

    def download(self, y: Any) -> np.ndarray:
        """The output on the host after what the stream holds (the one D2H of a host block)."""
        from ..arrays_interop import to_host

        with self.current():
            if self.owns(y) and self.name == "cupy":
                return y.get(stream=self.stream)
            if self.owns(y):
                return y.detach().cpu().numpy()
            self.stream.synchronize()
            return to_host(y)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        with self.current():
            if self.name == "cupy":
                return self.xp.empty(shape, dtype=dtype)
            return self.xp.empty(shape, dtype=self.xp.float32 if dtype == np.float32 else self.xp.complex64,
                                 device=f"cuda:{self.gpu}")

    def to_device(self, value: Any) -> Any:
        """NumPy arrays inside a state (dicts, lists, tuples) as GPU arrays of this framework."""
        if isinstance(value, np.ndarray):
            with self.current():
                if self.name == "cupy":
                    return self.xp.asarray(value)
                return self.xp.from_numpy(np.ascontiguousarray(value)).to(f"cuda:{self.gpu}")
        if isinstance(value, dict):
            return {k: self.to_device(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.to_device(v) for v in value)
        return value


class _Both:
    def __init__(self, a: Any, b: Any):
        self.a, self.b = a, b

    def __enter__(self) -> None:
        self.a.__enter__()
        self.b.__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            self.b.__exit__(*exc)
        finally:
            self.a.__exit__(*exc)


class PythonDeviceProcessor(PythonProcessor):
    """A python stage on the cuda backend: its function on the block's GPU array (module doc)."""

    def __init__(self, stage: Python, spec_in: "SignalSpec", spec_out: "SignalSpec", framework: _Framework):
        self.framework = framework
        super().__init__(stage, spec_in, spec_out)

    def _fresh_state(self) -> Any:
        return self.framework.to_device(super()._fresh_state())

    def process(self, x: Any, final: bool = False) -> Any:
        fw = self.framework
        x = fw.take(x)
        with fw.current():
            y = self._call(x)
        self._check_device(y, int(x.shape[1]) if x.ndim >= 2 else 0)
        self._blocks += 1
        return y

    def _check_device(self, y: Any, n_in: int) -> None:
        from ..arrays_interop import _framework_device, framework_of, is_device_array

        fw = self.framework
        if not is_device_array(y) or framework_of(y) not in ("cupy", "torch"):
            raise self._fault(f"returned {type(y).__name__}; on the cuda backend it returns a GPU array "
                              f"({'CuPy' if fw.name == 'cupy' else 'torch'}) of shape {self._out.block_shape}")
        gpu = _framework_device(y, framework_of(y))
        if gpu is not None and gpu != fw.gpu:
            raise self._fault(f"returned an array on GPU {gpu}; the engine runs on GPU {fw.gpu}")
        dtype = np.dtype(str(y.dtype).removeprefix("torch.")) if framework_of(y) == "torch" else y.dtype
        self._check_format(dtype, tuple(int(v) for v in y.shape), n_in)


class CudaPythonChainEngine:
    """A pipeline of one path with python stages on one GPU (module doc): ``process(block, final)``
    takes a host or GPU block and gives the output where the block was."""

    queued_by_runner = True  # its runner's thread queues its blocks (admission cannot rehearse it natively)

    def __init__(self, pipeline: "Pipeline", chain: "SpecChain", choice: "BackendChoice", *, device: int = 0,
                 nonfinite: str = DEFAULT_POLICY):
        from .cuda_engine import CudaEngine

        parts: list[tuple[str, Any]] = []
        for kind, what, sub in _segments(pipeline, chain):
            if kind == "native":
                parts.append((kind, lambda policy, what=what, sub=sub: CudaEngine(what, sub, choice, device=device,
                                                                                  nonfinite=policy)))
            else:
                parts.append((kind, (what, sub.input, sub.output)))
        self._open(choice, chain, device, nonfinite, parts)

    def _open(self, choice: "BackendChoice", chain: Any, device: int, nonfinite: str,
              parts: list[tuple[str, Any]]) -> None:
        """Open the parts in order: ``("native", open)`` (``open(policy)`` gives the engine) or
        ``("python", (stage, spec_in, spec_out))``. The first python stage's framework makes the
        engine's stream; only the first part, a native one, reads the caller's samples, so the
        NaN/Inf policy applies there."""
        self.choice = choice
        self.chain = chain
        self._closed = False
        self._dispatch: Any = None
        self._h2d = self._d2h = self._host_blocks = 0
        self._events: dict[bool, Any] = {}  # _event_wait's, one per direction
        self._parts: list[tuple[str, Any]] = []
        first_py = next(what[0] for kind, what in parts if kind == "python")
        main = _Framework(first_py.params.framework or "cupy", device)
        frameworks = {main.name: main}
        self.stream = main
        try:
            for k, (kind, what) in enumerate(parts):
                if kind == "native":
                    self._parts.append((kind, what(nonfinite if k == 0 else "pass")))
                    continue
                stage, spec_in, spec_out = what
                name = stage.params.framework or "cupy"
                if name not in frameworks:
                    frameworks[name] = _Framework(name, device, stream_ptr=main.ptr)
                self._parts.append((kind, PythonDeviceProcessor(stage, spec_in, spec_out, frameworks[name])))
        except BaseException:
            self.close()
            raise
        first = self._parts[0][1]
        self.device = first.device
        self.nonfinite = first.nonfinite

    # ------------------------------------------------------------------ blocks
    def process(self, block: Any, final: bool = False, out: Any = None, *, stream: Any = None) -> Any:
        """One block (host or GPU) through every part; the output on the host for a host block,
        else a GPU array (the last part's framework), ready in stream order on the engine's
        stream, which ``stream`` (a caller's stream) then waits for."""
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        from ..arrays_interop import as_host_array, is_device_array

        on_host = not is_device_array(block)
        fw = self.stream
        if on_host:
            block = np.ascontiguousarray(as_host_array(block), dtype=self.chain.input.np_dtype)
            if block.ndim == 1:
                block = block[np.newaxis, :]
            x = fw.upload(block)
            self._h2d += 1
            self._host_blocks += 1
        else:
            from ..arrays_interop import caller_stream, check_device, inspect

            info = inspect(block, what="the block", stream=stream)
            check_device(info, fw.gpu, "the block")
            caller = caller_stream(info, stream)
            if caller != fw.ptr:  # the engine's stream waits for what the caller queued
                self._event_wait(fw.ptr, caller)
            x = block if block.ndim == 2 else block.reshape(1, -1)
        for kind, part in self._parts:
            if kind == "native":
                n = int(x.shape[1])
                x = part.process(x, final, stream=fw.ptr) if n else fw.empty(
                    (part.chain.output.channels, 0) + tuple(part.chain.output.block_shape[2:]),
                    part.chain.output.np_dtype)
            else:
                x = part.process(x, final)
        if on_host:
            y = fw.download(x)
            self._d2h += 1
            if out is not None:
                out[:, :y.shape[1]] = y
                return out[:, :y.shape[1]]
            return y
        if caller != fw.ptr:  # ... and what the caller queues next waits for the engine
            self._event_wait(caller, fw.ptr)
        return x

    def process_array(self, x: Any) -> Any:
        """A whole ``(channels, n)`` GPU array block by block (the last one final), joined on the
        GPU into one array on the framework's current stream (Pipeline.process of a GPU array)."""
        from ..arrays_interop import concatenate

        if x.ndim == 1:
            x = x.reshape(1, -1)
        n, bs = int(x.shape[1]), self.chain.input.block_size
        outs = [self.process(x[:, s:s + bs], final=s + bs >= n) for s in range(0, max(n, 1), bs)]
        return outs[0] if len(outs) == 1 else concatenate(outs, "the pipeline")

    def _event_wait(self, waiter: int, producer: int) -> None:
        """``waiter`` (a stream handle) waits on the GPU for what ``producer`` holds now. One event
        per direction, recorded again each time: a wait takes the event's state when it is queued."""
        fw = self.stream
        events = self._events
        ev = events.get(waiter == fw.ptr)
        if fw.name == "cupy":
            if ev is None:
                ev = events[waiter == fw.ptr] = fw.xp.cuda.Event(block=False, disable_timing=True)
            ev.record(fw.xp.cuda.ExternalStream(producer))
            fw.xp.cuda.ExternalStream(waiter).wait_event(ev)
        else:
            dev = fw.xp.device("cuda", fw.gpu)
            if ev is None:
                ev = events[waiter == fw.ptr] = fw.xp.cuda.Event()
            ev.record(fw.xp.cuda.ExternalStream(producer, device=dev))
            fw.xp.cuda.ExternalStream(waiter, device=dev).wait_event(ev)

    # ------------------------------------------------------------------ state, figures
    def synchronize(self) -> None:
        """Wait (host) for every block queued so far; NaN/Inf counts of GPU blocks are settled."""
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        self.stream.stream.synchronize()
        for kind, part in self._parts:
            if kind == "native":
                part.synchronize()

    def reset(self) -> None:
        for _, part in self._parts:
            part.reset()

    def python_calls(self) -> dict[str, dict[str, float]]:
        """The Python calls of each python stage so far, by stage name (RunSummary.python_stages)."""
        return {p.stage_name: p.call_stats() for k, p in self._parts if k == "python"}

    def counters(self) -> dict[str, int]:
        """The native segments' counters summed, with this engine's own H2D/D2H of host blocks
        (``h2d_copies``/``d2h_copies``: one each per host block of a chain, one per source and per
        output of a graph's) and ``segments``/``python_parts``."""
        total: dict[str, int] = {}
        for kind, part in self._parts:
            if kind == "native":
                for key, v in part.counters().items():
                    if isinstance(v, (int, np.integer)):
                        total[key] = total.get(key, 0) + int(v)
        total["h2d_copies"] = total.get("h2d_copies", 0) + self._h2d
        total["d2h_copies"] = total.get("d2h_copies", 0) + self._d2h
        total["host_blocks"] = self._host_blocks
        total["segments"] = sum(1 for k, _ in self._parts if k == "native")
        total["python_parts"] = sum(1 for k, _ in self._parts if k == "python")
        return total

    @property
    def parts(self) -> list[tuple[str, Any]]:
        """``("native", CudaEngine)`` and ``("python", PythonDeviceProcessor)`` in order."""
        return list(self._parts)

    # ------------------------------------------------------------------ scheduler
    def attach_native(self, dispatch: Any, dispatcher: Any, stream_id: int) -> None:
        """A CudaDispatch takes this stream (admitted, accounted) but cannot launch its blocks: the
        Python calls between the segments need the runner's thread, which queues them (module doc)."""
        self._dispatch = dispatch

    def detach_native(self) -> None:
        self._dispatch = None

    @property
    def attached(self) -> bool:
        return False

    @property
    def units_per_block(self) -> int:
        return 1

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        dispatch, self._dispatch = self._dispatch, None
        if dispatch is not None:
            dispatch.detach(self, missing_ok=True)
        try:
            if self._h2d or any(k == "native" for k, _ in self._parts):
                self.stream.stream.synchronize()
        finally:
            for kind, part in self._parts:
                if kind == "native":
                    part.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        kinds = " -> ".join(k for k, _ in self._parts)
        return f"CudaPythonChainEngine({kinds}, device={self.choice.device})"
