"""Lowering of a flowgraph (a DAG of stages: docs/graphs.md) to native ops and their memory plan.

:func:`lower_graph` gives the ops in topological order (fusions only inside straight runs: stages
that each read the one before, whose output nothing else reads) and a :class:`GraphPlan` that says,
for the native engine (native/engine/graph_ops.cpp; docs/cuda.md, "The engine's DAG"):

* where each op reads and writes: a slice of the slot's packed input (a source), of its packed
  output (a sink), or of a buffer between ops, every slice 256-byte aligned;
* the inputs of a stage that reads several, stacked in one buffer: a producer whose only reader
  is that stage writes straight into its slice, any other is copied there (a device copy node);
* each source's slice of the packed input (one H2D copy each per block) and each output's slice
  of the packed output (one D2H copy each); a second sink of one node gets a copy of the first's;
* a *lane* per op: independent branches on different lanes are captured on different streams,
  forked from and joined into the compute stream, so that they are parallel nodes of the slot's
  one CUDA graph. ``waits`` are the ops on other lanes an op follows.

Everything here is plain Python over specs: tests read a plan without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import UnsupportedError
from .cuda_lowering import OpDesc, _load_families, lower_run, native_op_kinds

if TYPE_CHECKING:
    from ..graph import Graph
    from ..graph_model import GraphSpecs, Topology

ALIGN = 256       # every slice an op reads or writes starts here (kernels' vector loads)
MAX_LANES = 4     # capture streams of one graph (more parallel branches share them)
SLOT_INPUT, SLOT_OUTPUT = -1, -2  # the plan's names of the slot's packed device input and output


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class Slice:
    buffer: int   # SLOT_INPUT, SLOT_OUTPUT or a buffer between ops (index into GraphPlan.buffers)
    offset: int   # bytes

    def at(self, more: int) -> "Slice":
        return Slice(self.buffer, self.offset + more)


@dataclass
class PlanNode:
    """One op: what it reads and writes, the copies that stack its inputs, where its valid items
    come from (ops by index; -1: a source), its lane, the ops on other lanes it waits for, and
    whether an op on another lane waits for it."""

    name: str
    reads: tuple[str, ...]
    input: Slice
    output: Slice
    copies: list[tuple[Slice, Slice, int]] = field(default_factory=list)
    valid_from: list[int] = field(default_factory=list)
    lane: int = 0
    waits: list[int] = field(default_factory=list)
    signals: bool = False


@dataclass
class GraphPlan:
    items: int
    nodes: list[PlanNode]
    buffers: list[int]
    sources: dict[str, tuple[int, int]]           # source name -> (offset, bytes) in the packed input
    outputs: dict[str, tuple[int, int, int]]      # output name -> (offset, bytes, op) in the packed output
    final_copies: list[tuple[Slice, Slice, int]]
    in_bytes: int
    out_bytes: int

    @property
    def lanes(self) -> int:
        return 1 + max((n.lane for n in self.nodes), default=0)

    def parallel_groups(self) -> list[list[str]]:
        """The ops of each lane, in order (ops on different lanes may run at once)."""
        groups: list[list[str]] = [[] for _ in range(self.lanes)]
        for n in self.nodes:
            groups[n.lane].append(n.name)
        return groups

    def native(self) -> dict[str, Any]:
        """The native engine's ``graph=`` argument (parse_plan in native/bindings/bind_engine.cpp)."""
        ref = lambda s: (s.buffer, s.offset)  # noqa: E731
        copy = lambda c: (ref(c[0]), ref(c[1]), c[2])  # noqa: E731
        return {
            "items": self.items, "buffers": list(self.buffers), "lanes": self.lanes,
            "nodes": [{"in": ref(n.input), "out": ref(n.output), "copies": [copy(c) for c in n.copies],
                       "valid_from": list(n.valid_from), "lane": n.lane, "waits": list(n.waits),
                       "signals": n.signals} for n in self.nodes],
            "sources": [tuple(v) for v in self.sources.values()],
            "sinks": [tuple(v) for v in self.outputs.values()],
            "final_copies": [copy(c) for c in self.final_copies],
            "in_bytes": self.in_bytes, "out_bytes": self.out_bytes,
        }


@dataclass
class GraphLowering:
    ops: list[OpDesc]
    plan: GraphPlan


def _groups(topo: "Topology", specs: "GraphSpecs") -> list[list[str]]:
    """The stages in order, cut into straight runs (fusions apply inside a run only)."""
    readers: dict[str, int] = {}
    for name in specs.order:
        for r in topo.stage_inputs[name]:
            readers[r] = readers.get(r, 0) + 1
    for node in specs.outputs.values():
        readers[node] = readers.get(node, 0) + 2  # an output ends a run
    runs: list[list[str]] = []
    for name in specs.order:
        ins = topo.stage_inputs[name]
        if runs and len(ins) == 1 and ins[0] == runs[-1][-1] and readers.get(ins[0], 0) == 1 \
                and not _stage(topo, runs[-1][0]).takes_several():
            runs[-1].append(name)
        else:
            runs.append([name])
    return runs


def _stage(topo: "Topology", name: str):
    st = topo.stage(name)
    assert st is not None
    return st


def lower_graph(graph: "Graph", specs: "GraphSpecs") -> GraphLowering:
    """The native ops of a graph and their memory plan; UnsupportedError (before anything is
    allocated) for a stage that cannot run on CUDA, naming it."""
    _load_families()
    native = native_op_kinds()
    topo = graph.topology()
    # -- the ops: straight runs lowered as a pipeline is (fusions inside), other stages one by one
    ops: list[tuple[OpDesc, tuple[str, ...], str]] = []  # op, the nodes it reads, the node it gives
    for run in _groups(topo, specs):
        first = topo.stage(run[0])
        assert first is not None
        if len(run) == 1 and first.takes_several():
            from .cuda_lowering import _lower_one

            desc = _lower_one(first, list(specs.stage_inputs[run[0]]), specs.nodes[run[0]], native)
            ops.append((desc, topo.stage_inputs[run[0]], run[0]))
            continue
        stages = [topo.stage(n) for n in run]
        run_specs = [specs.stage_inputs[run[0]][0], *(specs.nodes[n] for n in run)]
        at = 0
        for desc, covers in lower_run(stages, run_specs, native):  # type: ignore[arg-type]
            reads = topo.stage_inputs[run[at]]
            ops.append((desc, reads, run[at + covers - 1]))
            at += covers
    for out_name, node in specs.outputs.items():
        if node in specs.sources:
            raise UnsupportedError(out_name, "cuda", f"output '{out_name}' reads source '{node}' with no stage "
                                   "between: on cuda every output is a stage's")
    return GraphLowering([d for d, _, _ in ops], plan_graph(specs, [(d, r, g) for d, r, g in ops]))


def plan_graph(specs: "GraphSpecs", ops: list[tuple[OpDesc, tuple[str, ...], str]]) -> GraphPlan:
    """Where every op of ``ops`` (desc, the nodes it reads, the node it gives; topological order)
    reads and writes, the stacking copies, the packed slots and the lanes."""
    producer = {gives: i for i, (_, _, gives) in enumerate(ops)}
    # the packed input: the sources in order
    at: dict[str, Slice] = {}
    sources: dict[str, tuple[int, int]] = {}
    off = 0
    for name in specs.sources:
        nbytes = specs.nodes[name].block_nbytes
        sources[name] = (off, nbytes)
        at[name] = Slice(SLOT_INPUT, off)
        off += _align(nbytes)
    in_bytes = max(off, ALIGN)
    # the packed output: each output in order; a second output of one node copies the first's
    outputs: dict[str, tuple[int, int, int]] = {}
    final_copies: list[tuple[Slice, Slice, int]] = []
    off = 0
    for name, node in specs.outputs.items():
        nbytes = specs.nodes[node].block_nbytes
        outputs[name] = (off, nbytes, producer[node])
        if node in at:
            final_copies.append((at[node], Slice(SLOT_OUTPUT, off), nbytes))
        else:
            at[node] = Slice(SLOT_OUTPUT, off)
        off += _align(nbytes)
    out_bytes = max(off, ALIGN)
    # readers of each node, by op
    uses: dict[str, list[int]] = {}
    for i, (_, reads, _) in enumerate(ops):
        for r in reads:
            uses.setdefault(r, []).append(i)
    buffers: list[int] = []

    def new_buffer(nbytes: int) -> int:
        buffers.append(_align(max(nbytes, 4)))
        return len(buffers) - 1

    # stacked inputs: one buffer per op that reads several, input k at its aligned slice
    stacked: dict[int, list[Slice]] = {}
    for i, (desc, reads, _) in enumerate(ops):
        if len(reads) < 2:
            continue
        sizes = [specs.nodes[r].block_nbytes for r in reads]
        starts = [sum(_align(s) for s in sizes[:k]) for k in range(len(sizes))]
        b = new_buffer(sum(_align(s) for s in sizes))
        stacked[i] = [Slice(b, s) for s in starts]
        desc.params["offsets"] = [int(s) for s in starts]
    # each op's output: a sink's slice, its only reader's stacked slice, or a buffer of its own
    for i, (desc, _, gives) in enumerate(ops):
        if gives in at:
            continue
        readers = uses.get(gives, [])
        if len(readers) == 1 and readers[0] in stacked and ops[readers[0]][1].count(gives) == 1:
            k = ops[readers[0]][1].index(gives)
            at[gives] = stacked[readers[0]][k]
        else:
            at[gives] = Slice(new_buffer(specs.nodes[gives].block_nbytes), 0)
    nodes: list[PlanNode] = []
    for i, (desc, reads, gives) in enumerate(ops):
        node = PlanNode(name=gives, reads=tuple(reads), input=stacked[i][0] if i in stacked else at[reads[0]],
                        output=at[gives], valid_from=[producer.get(r, -1) for r in reads])
        if i in stacked:
            for k, r in enumerate(reads):
                if at[r] != stacked[i][k]:
                    node.copies.append((at[r], stacked[i][k], specs.nodes[r].block_nbytes))
        nodes.append(node)
    _assign_lanes(nodes, producer)
    return GraphPlan(items=specs.input.block_size, nodes=nodes, buffers=buffers, sources=sources,
                     outputs=outputs, final_copies=final_copies, in_bytes=in_bytes, out_bytes=out_bytes)


def _assign_lanes(nodes: list[PlanNode], producer: dict[str, int]) -> None:
    """A lane per op: an op continues the lane of its first producer when that producer is the
    lane's last op (a path stays on one stream); otherwise a new lane, up to MAX_LANES (then the
    lanes are shared in turn: stream order adds waits, never removes one)."""
    tails: list[int] = []  # each lane's last op
    for i, node in enumerate(nodes):
        ops_read = [producer[r] for r in node.reads if r in producer]
        lane = next((nodes[p].lane for p in ops_read if tails[nodes[p].lane] == p), None)
        if lane is None:
            if len(tails) < MAX_LANES:
                tails.append(-1)
                lane = len(tails) - 1
            else:
                lane = i % MAX_LANES
        node.lane = lane
        tails[lane] = i
        for p in dict.fromkeys(ops_read):
            if nodes[p].lane != lane:
                node.waits.append(p)
                nodes[p].signals = True
