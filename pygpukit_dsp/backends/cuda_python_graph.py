"""A flowgraph with branches that holds python stages, on the cuda backend.

As in a chain (cuda_python_chain.py), a Python call cannot be a node of a CUDA graph, so the
graph is cut at its python stages. Its other stages are grouped by how many python stages lie
before them on their longest path from a source (their *level*): the native stages of one level
read only sources, native stages of the same or a lower level and python stages of a lower one,
so each level is one native region, a :class:`CudaGraphEngine` of its own (one CUDA graph per
block, branches as parallel nodes, GPU arrays in and out: cuda_device_io.GraphDeviceBlocks).
Per block, with one CUDA stream ordering it all:

1. each host block of a source is copied to the GPU once (one H2D per source); GPU blocks are
   taken as they are;
2. level 0's region, then the python stages of level 0, then level 1's region, ...: a region
   queues its graph on the stream, a python stage calls its function with that stream as its
   framework's current stream, on its input as an array of its framework (DLPack, no copy);
3. each output of a host step is copied back once (one D2H per output); a GPU step's outputs are
   returned as GPU arrays, ready in stream order on the stream.

Every source enters the graph through level 0's region, which finds and counts NaN/Inf under the
pipeline's ``nonfinite`` policy: a source read by something else than a native stage of level 0
gets an identity stage there (``gain``, factor 1, named ``<source>.input``) that its readers read
instead. A region of a higher level whose inputs have different block sizes is cut into its
connected parts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import StreamFault, UnsupportedError
from ..graph_model import GraphSpecs, Topology
from ..nonfinite import DEFAULT_POLICY
from ..stages.python import Python
from .cuda_python_chain import CudaPythonChainEngine, _framework_missing

if TYPE_CHECKING:
    from ..graph import Graph
    from . import BackendChoice


@dataclass(frozen=True)
class RegionGraph:
    """What a native region's CudaGraphEngine reads of its graph: a name, its stages, the QoS and
    the topology (its inputs as sources, what leaves it as sinks)."""

    name: str
    stages: tuple
    qos: Any
    topo: Topology

    def topology(self) -> Topology:
        return self.topo


@dataclass(frozen=True)
class Step:
    """One step of a block: a native region (``names``: its stages) or a python stage (one name);
    ``reads`` what it takes (node names, in order), ``gives`` what it makes that others read."""

    kind: str  # "native" | "python"
    names: tuple[str, ...]
    reads: tuple[str, ...]
    gives: tuple[str, ...]


@dataclass(frozen=True)
class PythonGraphPlan:
    """The graph as it runs: ``topo`` and ``specs`` with the identity stages added, the steps in
    order, and for a native step its RegionGraph and GraphSpecs (by step index)."""

    topo: Topology
    specs: GraphSpecs
    steps: tuple[Step, ...]
    regions: dict[int, tuple[RegionGraph, GraphSpecs]]


def _with_entries(graph: "Graph", specs: GraphSpecs) -> tuple[Topology, GraphSpecs, dict[str, int]]:
    """The topology and specs with an identity stage for each source that something else than a
    level-0 native stage reads (module doc), and every stage's level."""
    from ..stages.gain import Gain

    topo = graph.topology()
    inputs = {name: tuple(topo.stage_inputs.get(name, ())) for name in specs.order}
    level = _levels(topo, specs.order, inputs)
    readers = {src: [n for n in specs.order if src in inputs[n]] for src in specs.sources}
    sink_reads = dict(topo.sink_inputs) if topo.sinks else {}
    outputs = dict(specs.outputs)
    stages = {st.name: st for st in topo.stages}
    order = list(specs.order)
    nodes = dict(specs.nodes)
    stage_specs = dict(specs.stage_inputs)
    taken = set(nodes)
    for src in specs.sources:
        native0 = [n for n in readers[src] if level[n] == 0 and not isinstance(stages[n], Python)]
        others = [n for n in readers[src] if n not in native0]
        if not others and src not in outputs.values():
            continue
        entry = f"{src}.input"
        while entry in taken:
            entry += "_"
        taken.add(entry)
        stages[entry] = Gain(linear=1.0, name=entry)
        inputs[entry] = (src,)
        level[entry] = 0
        nodes[entry] = nodes[src]
        stage_specs[entry] = (nodes[src],)
        order.insert(0, entry)
        for n in others:
            inputs[n] = tuple(entry if r == src else r for r in inputs[n])
        outputs = {k: (entry if v == src else v) for k, v in outputs.items()}
        sink_reads = {k: (entry if v == src else v) for k, v in sink_reads.items()}
    new = Topology(sources=dict(topo.sources), stages=[stages[n] for n in order],
                   stage_inputs=dict(inputs), sinks=dict(topo.sinks), sink_inputs=sink_reads, where=topo.where)
    sinks = {name: nodes[ref] for name, ref in sink_reads.items()}
    return new, GraphSpecs(nodes=nodes, stage_inputs=stage_specs, sinks=sinks, order=tuple(order),
                           sources=specs.sources, outputs=outputs), level


def _levels(topo: Topology, order: tuple[str, ...] | list[str], inputs: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """Each stage's level: the most python stages on a path from a source to it, itself excluded."""
    is_py = {st.name: isinstance(st, Python) for st in topo.stages}
    level: dict[str, int] = {}
    for name in order:
        level[name] = max((level[r] + (1 if is_py[r] else 0) for r in inputs[name] if r in level), default=0)
    return level


def _components(names: list[str], inputs: dict[str, tuple[str, ...]]) -> list[list[str]]:
    """The connected parts of a region (edges between its own stages), each in the given order."""
    part = {n: n for n in names}

    def root(n: str) -> str:
        while part[n] != n:
            part[n] = part[part[n]]
            n = part[n]
        return n

    for n in names:
        for r in inputs[n]:
            if r in part:
                part[root(n)] = root(r)
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(root(n), []).append(n)
    return list(groups.values())


def plan_python_graph(graph: "Graph", specs: GraphSpecs) -> PythonGraphPlan:
    """The steps of one block (module doc); UnsupportedError (naming the stage) for a graph that
    cannot be cut so. Plain Python over specs: no GPU needed."""
    topo, specs, level = _with_entries(graph, specs)
    inputs = topo.stage_inputs
    stages = {st.name: st for st in topo.stages}
    is_py = {n: isinstance(st, Python) for n, st in stages.items()}
    for n in specs.order:
        if is_py[n] and specs.nodes[n].domain == "frames" and any(n in inputs[m] for m in specs.order):
            raise UnsupportedError(n, "cuda", "on the cuda backend a python stage's output goes on to the next "
                                   "stage as a (channels, n) time-domain GPU array; a frames-domain output is "
                                   "taken only by sinks (run the graph on the cpu backend)")
    steps: list[Step] = []
    regions: dict[int, tuple[RegionGraph, GraphSpecs]] = {}
    for k in range(max(level.values(), default=0) + 1):
        natives = [n for n in specs.order if level[n] == k and not is_py[n]]
        groups = [natives] if natives else []
        if natives and k > 0 and len({specs.nodes[r].block_size for r in _reads(natives, inputs)}) > 1:
            groups = _components(natives, inputs)
        for names in groups:
            reads = _reads(names, inputs)
            sizes = {specs.nodes[r].block_size for r in reads}
            if len(sizes) > 1:
                raise UnsupportedError(names[0], "cuda", "in a graph with python stages on the cuda backend, the "
                                       "stages between two python stages read blocks of one size; these read "
                                       f"{sorted(sizes)} items a block (run the graph on the cpu backend)")
            inside = set(names)
            gives = tuple(n for n in names if _read_outside(n, inside, specs, inputs))
            region_topo = Topology(sources={r: None for r in reads}, stages=[stages[n] for n in names],
                                   stage_inputs={n: inputs[n] for n in names}, sinks={g: None for g in gives},
                                   sink_inputs={g: g for g in gives}, where=topo.where)
            region_specs = GraphSpecs(nodes={n: specs.nodes[n] for n in (*reads, *names)},
                                      stage_inputs={n: specs.stage_inputs[n] for n in names},
                                      sinks={g: specs.nodes[g] for g in gives}, order=tuple(names), sources=reads,
                                      outputs={g: g for g in gives})
            regions[len(steps)] = (RegionGraph(f"{graph.name}[{names[0]}..{names[-1]}]", tuple(stages[n] for n in names),
                                               graph.qos, region_topo), region_specs)
            steps.append(Step("native", tuple(names), reads, gives))
        for n in specs.order:
            if level[n] == k and is_py[n]:
                steps.append(Step("python", (n,), inputs[n], (n,)))
    return PythonGraphPlan(topo, specs, tuple(steps), regions)


def _reads(names: list[str], inputs: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    inside = set(names)
    out: list[str] = []
    for n in names:
        for r in inputs[n]:
            if r not in inside and r not in out:
                out.append(r)
    return tuple(out)


def _read_outside(name: str, inside: set[str], specs: GraphSpecs, inputs: dict[str, tuple[str, ...]]) -> bool:
    return name in specs.outputs.values() or any(name in inputs[m] for m in specs.order if m not in inside)


def check_python_graph(graph: "Graph", specs: GraphSpecs) -> None:
    """UnsupportedError (naming the stage) unless the graph can run so on CUDA: its plan exists,
    every python stage's framework is installed and every region lowers."""
    from .cuda_graph_plan import lower_graph

    plan = plan_python_graph(graph, specs)
    for st in plan.topo.stages:
        if isinstance(st, Python):
            missing = _framework_missing(st.params.framework or "cupy")
            if missing:
                raise UnsupportedError(st.name, "cuda", missing)
    for region, region_specs in plan.regions.values():
        lower_graph(region, region_specs)  # type: ignore[arg-type]


class CudaPythonGraphEngine(CudaPythonChainEngine):
    """A flowgraph with python stages on one GPU (module doc): ``process(blocks, final)`` takes one
    block per source (host or GPU arrays, all on one side) and gives one per output, where the
    blocks were. Counters, figures, the scheduler's attach and close are the chain's."""

    def __init__(self, graph: "Graph", chain: GraphSpecs, choice: "BackendChoice", *, device: int = 0,
                 nonfinite: str = DEFAULT_POLICY):
        from .cuda_graph_engine import CudaGraphEngine

        self.plan = plan = plan_python_graph(graph, chain)
        stages = {st.name: st for st in plan.topo.stages}
        parts: list[tuple[str, Any]] = []
        for k, step in enumerate(plan.steps):
            if step.kind == "native":  # step 0: level 0's region, which reads every source (module doc)
                region, region_specs = plan.regions[k]
                parts.append(("native", lambda policy, r=region, rs=region_specs: CudaGraphEngine(
                    r, rs, choice, device=device, nonfinite=policy)))
            else:
                parts.append(("python", (stages[step.names[0]], plan.specs.nodes[step.reads[0]],
                                         plan.specs.nodes[step.names[0]])))
        self._open(choice, chain, device, nonfinite, parts)
        self._sources = list(chain.sources)
        self._outputs = list(chain.outputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        """The outputs' names, in the order process() gives their blocks."""
        return tuple(self._outputs)

    def process(self, blocks: Any, final: bool = False, out: Any = None, *,  # type: ignore[override]
                stream: Any = None) -> Any:
        """One block of every source through every step; one block per output, on the host for
        host blocks, else GPU arrays ready in stream order on ``stream`` (a caller's stream)."""
        if self._closed:
            raise StreamFault("the CUDA engine is closed")
        if out is not None:
            raise ValueError("a graph's engine returns one block per output: process(out=...) is for a chain")
        from ..arrays_interop import as_host_array, caller_stream, check_device, inspect, is_device_array

        group = list(blocks) if isinstance(blocks, (tuple, list)) else [blocks]
        if len(group) != len(self._sources):
            raise ValueError(f"the graph reads {len(self._sources)} sources ({', '.join(self._sources)}); "
                             f"got {len(group)} blocks")
        on_gpu = [is_device_array(b) for b in group]
        if any(on_gpu) and not all(on_gpu):
            from ..errors import ConfigError

            raise ConfigError("a graph's blocks of one step are all GPU arrays or all host arrays, got both",
                              hint="copy them to one side first")
        fw = self.stream
        values: dict[str, Any] = {}
        caller = fw.ptr
        if not on_gpu[0]:
            for name, block in zip(self._sources, group):
                spec = self.chain.nodes[name]
                b = np.ascontiguousarray(as_host_array(block), dtype=spec.np_dtype)
                values[name] = fw.upload(b[np.newaxis, :] if b.ndim == 1 else b)
                self._h2d += 1
            self._host_blocks += 1
        else:
            for k, (name, block) in enumerate(zip(self._sources, group)):
                info = inspect(block, what=f"source '{name}''s block", stream=stream)
                check_device(info, fw.gpu, f"source '{name}''s block")
                if k == 0:
                    caller = caller_stream(info, stream)
                values[name] = block if block.ndim == 2 else block.reshape(1, -1)
            if caller != fw.ptr:  # the engine's stream waits for what the caller queued
                self._event_wait(fw.ptr, caller)
        for step, (kind, part) in zip(self.plan.steps, self._parts):
            if kind == "python":
                values[step.names[0]] = part.process(values[step.reads[0]], final)
                continue
            ins = tuple(values[r] for r in step.reads)
            if all(int(x.shape[1]) == 0 for x in ins):  # a decimated last block left nothing here
                got = tuple(fw.empty((s.channels, 0) + tuple(s.block_shape[2:]), s.np_dtype)
                            for s in (part.chain.output_spec(g) for g in step.gives))
            else:
                res = part.process(ins if len(ins) > 1 else ins[0], final, stream=fw.ptr)
                got = res if isinstance(res, tuple) else (res,)
            values.update(zip(step.gives, got))
        outs = [values[self.plan.specs.outputs[name]] for name in self._outputs]
        if not on_gpu[0]:
            host = tuple(fw.download(y) for y in outs)
            self._d2h += len(host)
            return host if len(host) != 1 else host[0]
        if caller != fw.ptr:  # ... and what the caller queues next waits for the engine
            self._event_wait(caller, fw.ptr)
        return tuple(outs) if len(outs) != 1 else outs[0]

    @property
    def nonfinite_source(self) -> str | None:
        """The source the first NaN/Inf came from: the first region reads every source (module doc)."""
        return self._parts[0][1].nonfinite_source

    def __repr__(self) -> str:
        kinds = " -> ".join(f"{s.kind}({','.join(s.names)})" for s in self.plan.steps)
        return f"CudaPythonGraphEngine({kinds}, device={self.choice.device})"
