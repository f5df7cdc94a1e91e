"""What running a Pipeline means: an array through it, a run to the end, a run in the background.

Executor layer: the facade that :meth:`Pipeline.process`, :meth:`Pipeline.run` and
:meth:`Pipeline.start` call. A :class:`~pygpukit_dsp.pipeline.Pipeline` is a description (its
fields, stages, source and sink, the specs they propagate, its YAML); this module hands it to
the executors: an engine opened by ``backends.open_backend`` for an array, a
:class:`~pygpukit_dsp.session.Session` (admission, dispatch, one StreamRunner per stream) for a
run. It imports the description only for typing: the description never imports it at module level.

A :class:`~pygpukit_dsp.graph.Graph` of one path runs as its Pipeline (``as_chain``); any other
graph runs here on its GraphSpecs: every source's block in step, each output gathered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from .errors import ConfigError
from .io.base import StreamFormat
from .nonfinite import NonFiniteInput, check_policy

if TYPE_CHECKING:
    from .graph import Graph
    from .graph_model import GraphSpecs
    from .handle import RunHandle
    from .io.base import Sink, Source
    from .pipeline import Pipeline
    from .summary import ProgressFn, RunSummary


def process(pipeline: "Pipeline | Graph", x: Any, *, backend: str | None = None,
            device: int | str | None = None, nonfinite: str | None = None) -> Any:
    """Stream ``x`` (channels, n) through ``pipeline`` block by block and return the output
    (:meth:`Pipeline.process` and :meth:`Graph.process` say what that means)."""
    chain = pipeline.as_chain()
    if chain is None:
        return _process_graph(pipeline, x, backend=backend, device=device, nonfinite=nonfinite)
    if isinstance(x, Mapping):  # a one-path graph given its input by its source's name
        x = _inputs_by_name(chain.source_name, (chain.source_name,), x)[chain.source_name]
    return _process_chain(chain, x, backend=backend, device=device, nonfinite=nonfinite)


def _as_signal(x: Any, what: str) -> Any:
    from .arrays_interop import as_host_array, is_device_array

    if is_device_array(x):  # checked against its source by the engine (GraphDeviceBlocks)
        return x
    x = np.asarray(as_host_array(x))
    if x.ndim == 1:
        x = x[np.newaxis, :]
    if x.ndim != 2:
        raise ConfigError(f"process() takes {what} of shape (channels, n), got shape {x.shape}")
    return x


def _inputs_by_name(graph_name: str, sources: tuple[str, ...], x: Any) -> dict[str, np.ndarray]:
    if not isinstance(x, Mapping):
        if len(sources) != 1:
            raise ConfigError(f"graph '{graph_name}' reads {len(sources)} sources ({', '.join(sources)}): "
                              "process() takes a mapping of arrays by source name",
                              hint=f"process({{{', '.join(repr(n) + ': ...' for n in sources)}}})")
        return {sources[0]: _as_signal(x, "an array")}
    missing = [n for n in sources if n not in x]
    extra = [n for n in x if n not in sources]
    if missing or extra:
        raise ConfigError(f"graph '{graph_name}' reads the sources {', '.join(sources)}; process() got arrays for "
                          f"{', '.join(map(str, x)) or 'none'}", hint="give one array per source, by its name")
    return {n: _as_signal(x[n], f"source '{n}''s array") for n in sources}


def _process_graph(graph: "Graph", x: Any, *, backend: str | None, device: int | str | None,
                   nonfinite: str | None) -> Any:
    """process() of a graph that is not one path: every source's array in step, block by block."""
    from .io.base import StreamFormat

    inputs = _inputs_by_name(graph.name, tuple(graph.topology().sources), x)
    from .arrays_interop import is_device_array

    on_gpu = [is_device_array(a) for a in inputs.values()]
    if any(on_gpu):
        if not all(on_gpu):
            raise ConfigError(f"process() of graph '{graph.name}' got GPU arrays for some sources and host arrays "
                              "for others", hint="give every source's array on one side")
        return _process_graph_device(graph, inputs, backend=backend, device=device, nonfinite=nonfinite)
    formats = {}
    for name, a in inputs.items():
        dtype = "complex64" if np.iscomplexobj(a) else "float32"
        if graph.dtype == "float32" and dtype == "complex64":
            raise ConfigError(f"graph '{graph.name}' takes float32 input, got a complex array for source '{name}'")
        formats[name] = StreamFormat(channels=a.shape[0], dtype=graph.dtype or dtype)
    specs: "GraphSpecs" = graph.specs(formats)
    arrays = [np.ascontiguousarray(inputs[n], dtype=specs.nodes[n].np_dtype) for n in specs.sources]
    from .backends import open_backend

    engine = open_backend(graph, specs, backend or graph.backend, device=device,
                          nonfinite=check_policy(nonfinite, "process(nonfinite=...)"))
    names = list(specs.outputs)
    try:
        outs: list[tuple] = []
        n = min(a.shape[1] for a in arrays)  # a source that ends ends the stream
        bs = graph.block_size
        for start in range(0, max(n, 1), bs):
            got = engine.process(tuple(a[:, start:min(start + bs, n)] for a in arrays), final=start + bs >= n)
            outs.append(got if len(names) > 1 else (got,))
    except NonFiniteInput as exc:
        raise exc.count.error(f"process()'s array for source '{engine.nonfinite_source}'") from None
    finally:
        engine.close()
    joined = {}
    for k, name in enumerate(names):
        spec = specs.output_spec(name)
        parts = [o[k] for o in outs]
        joined[name] = np.concatenate(parts, axis=1) if parts else np.zeros(
            spec.block_shape[:1] + (0,) + spec.block_shape[2:], spec.np_dtype)
    return joined if len(names) > 1 else joined[names[0]]


def _process_graph_device(graph: "Graph", inputs: dict[str, Any], *, backend: str | None,
                          device: int | str | None, nonfinite: str | None) -> Any:
    """process() of a graph given GPU arrays: on the cuda backend, block by block from device memory
    to device memory (backends/cuda_device_io.GraphDeviceBlocks), each sink's blocks joined on the
    GPU; any other backend is refused before a block runs."""
    from .arrays_interop import concatenate, inspect

    requested = backend or graph.backend
    infos = {n: inspect(a, what=f"source '{n}''s array") for n, a in inputs.items()}
    if requested == "cpu":
        raise ConfigError(f"process() got GPU arrays but graph '{graph.name}' runs on the cpu backend, which takes "
                          "host arrays", hint="use backend='cuda' to keep them on the GPU, or copy them to the host")
    formats = {}
    for name, info in infos.items():
        dtype = str(info.dtype)
        if graph.dtype is not None and graph.dtype != dtype:
            raise ConfigError(f"graph '{graph.name}' takes {graph.dtype} input, got a {dtype} GPU array for source "
                              f"'{name}' (GPU arrays are not converted on the way in)")
        formats[name] = StreamFormat(channels=info.shape[0], dtype=dtype)
    specs: "GraphSpecs" = graph.specs(formats)
    from .backends import open_backend
    engine = open_backend(graph, specs, requested, device=device,
                          nonfinite=check_policy(nonfinite, "process(nonfinite=...)"))
    names = list(specs.outputs)
    arrays = [a.reshape(1, -1) if getattr(a, "ndim", 2) == 1 else a for a in (inputs[n] for n in specs.sources)]
    try:
        if engine.choice.name != "cuda":
            raise ConfigError(f"process() got GPU arrays but backend '{requested}' chose {engine.choice.name} "
                              f"({engine.choice.reason}), which takes host arrays",
                              hint="use backend='cuda' to keep them on the GPU, or copy them to the host first")
        n = min(int(a.shape[1]) for a in arrays)  # a source that ends ends the stream
        bs = graph.block_size
        outs: list[tuple] = []
        for start in range(0, max(n, 1), bs):
            got = engine.process(tuple(a[:, start:min(start + bs, n)] for a in arrays), final=start + bs >= n)
            outs.append(got if len(names) > 1 else (got,))
        engine.synchronize()  # NaN/Inf of the blocks counted (nonfinite: zero/pass) before the engine closes
    except NonFiniteInput as exc:
        raise exc.count.error(f"process()'s array for source '{engine.nonfinite_source}'") from None
    finally:
        engine.close()
    joined = {name: (outs[0][k] if len(outs) == 1 else concatenate([o[k] for o in outs], f"sink '{name}'"))
              for k, name in enumerate(names)}
    return joined if len(names) > 1 else joined[names[0]]


def _process_chain(pipeline: "Pipeline", x: np.ndarray, *, backend: str | None = None,
                   device: int | str | None = None, nonfinite: str | None = None) -> np.ndarray:
    from .arrays_interop import as_host_array, is_device_array

    if is_device_array(x):
        return _process_chain_device(pipeline, x, backend=backend, device=device, nonfinite=nonfinite)
    x = np.asarray(as_host_array(x))
    if x.ndim == 1:
        x = x[np.newaxis, :]
    if x.ndim != 2:
        raise ConfigError(f"process() takes an array of shape (channels, n), got shape {x.shape}")
    dtype = "complex64" if np.iscomplexobj(x) else "float32"
    if pipeline.dtype == "float32" and dtype == "complex64":
        raise ConfigError(f"pipeline '{pipeline.name}' takes float32 input, got a complex array")
    dtype = pipeline.dtype or dtype
    chain = pipeline.specs(StreamFormat(channels=x.shape[0], dtype=dtype))
    x = np.ascontiguousarray(x, dtype=chain.input.np_dtype)
    from .backends import open_backend

    engine = open_backend(pipeline, chain, backend or pipeline.backend, device=device,
                          nonfinite=check_policy(nonfinite, "process(nonfinite=...)"))
    try:
        outs = []
        n = x.shape[1]
        bs = pipeline.block_size
        for start in range(0, max(n, 1), bs):
            block = x[:, start:start + bs]
            outs.append(engine.process(block, final=start + bs >= n))
        return np.concatenate(outs, axis=1) if outs else np.zeros(
            chain.output.block_shape[:1] + (0,) + chain.output.block_shape[2:], chain.output.np_dtype)
    except NonFiniteInput as exc:
        raise exc.count.error("process()'s input array") from None
    finally:
        engine.close()


def _process_chain_device(pipeline: "Pipeline", x: Any, *, backend: str | None, device: int | str | None,
                          nonfinite: str | None) -> Any:
    """process() of a GPU array: on the cuda backend, block by block from device memory to device
    memory (backends/cuda_device_io.py), into one array of the input's framework. Any other
    backend is refused before a block runs: nothing is copied to the host behind the caller's back."""
    from .arrays_interop import inspect

    info = inspect(x, what="process()'s input array")
    requested = backend or pipeline.backend
    if requested == "cpu":
        raise ConfigError(f"process() got a GPU array ({type(x).__name__}) but pipeline '{pipeline.name}' runs on the "
                          "cpu backend, which takes host arrays",
                          hint="use backend='cuda' to keep it on the GPU, or copy it to the host first")
    dtype = str(info.dtype)
    if pipeline.dtype is not None and pipeline.dtype != dtype:
        raise ConfigError(f"pipeline '{pipeline.name}' takes {pipeline.dtype} input, got a {dtype} GPU array "
                          "(GPU arrays are not converted on the way in)",
                          hint=f"convert it on the GPU first (x.astype('{pipeline.dtype}'))")
    chain = pipeline.specs(StreamFormat(channels=info.shape[0], dtype=dtype))
    from .backends import open_backend
    from .backends.cuda_engine import CudaEngine
    from .backends.cuda_python_chain import CudaPythonChainEngine

    engine = open_backend(pipeline, chain, requested, device=device,
                          nonfinite=check_policy(nonfinite, "process(nonfinite=...)"))
    try:
        if isinstance(engine, CudaPythonChainEngine):
            return engine.process_array(x)
        if not isinstance(engine, CudaEngine):
            raise ConfigError(f"process() got a GPU array but backend '{requested}' chose {engine.choice.name} "
                              f"({engine.choice.reason}), which takes host arrays",
                              hint="use backend='cuda' to keep it on the GPU, or copy it to the host first")
        return engine.device_blocks().process_array(info)
    except NonFiniteInput as exc:
        raise exc.count.error("process()'s input array") from None
    finally:
        engine.close()


def run(pipeline: "Pipeline | Graph", *, blocks: int | None = None, duration: float | None = None,
        backend: str | None = None, progress: "ProgressFn | None" = None,
        device: int | str | None = None) -> "RunSummary":
    """Run ``pipeline`` (source -> stages -> sink) in a Session of its own until it ends."""
    from .session import Session

    return Session([pipeline], backend=backend, device=device).run(blocks=blocks, duration=duration,
                                                                   progress=progress)[0]


def start(pipeline: "Pipeline | Graph", *, source: "Source | None" = None, sink: "Sink | None" = None,
          backend: str | None = None, blocks: int | None = None, duration: float | None = None,
          tap: bool | None = None, device: int | str | None = None) -> "RunHandle":
    """Run ``pipeline`` on a background thread (``source``/``sink`` replace its own for this run)
    and return the :class:`~pygpukit_dsp.handle.RunHandle`."""
    from .handle import RunHandle
    from .io.null import NullSink
    from .session import Session

    run_as = pipeline.with_io(source=source, sink=sink)
    if tap is None:  # no sink to take the blocks (or only null ones): they are for the handle
        sinks = list(run_as.topology().sinks.values())
        tap = all(isinstance(s, NullSink) for s in sinks)
    return RunHandle(Session([run_as], backend=backend, device=device), blocks=blocks, duration=duration,
                     tap=tap)
