"""A flowgraph as text (``gk-stream validate``) and as Graphviz (``gk-stream validate --dot``).

Description layer: reads a :class:`~pygpukit_dsp.graph_model.Topology` and the specs of its edges
(what each source and stage gives, by name), nothing else.
"""

from __future__ import annotations

from typing import Mapping

from .graph_model import Topology
from .signal import SignalSpec


def text_lines(topo: Topology, nodes: Mapping[str, SignalSpec],
               sink_files: Mapping[str, list[str]] | None = None) -> list[str]:
    """One line per source, stage (in run order) and sink: its name, type, what it reads, and the
    spec it gives (a sink: the files it writes)."""
    width = max([12, *(len(st.name) for st in topo.stages)])
    lines = []
    for name, src in topo.sources.items():
        kind = src.type if src is not None else "(none)"
        lines.append(f"  source {name} ({kind}) -> {nodes[name].describe()}")
    for name in topo.order():
        st = topo.stage(name)
        assert st is not None
        reads = ", ".join(topo.stage_inputs.get(name, ()))
        lines.append(f"  {name:<{width}} ({st.type}) <- {reads} -> {nodes[name].describe()}")
    for name, sink in topo.sinks.items():
        files = "".join(f" -> {f}" for f in (sink_files or {}).get(name, []))
        lines.append(f"  sink   {name} ({sink.type}) <- {topo.sink_inputs[name]}{files}")
    return lines


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _short(spec: SignalSpec) -> str:
    """An edge's label: channels, block shape, dtype and rate."""
    shape = f"{spec.block_size}" if spec.domain == "time" else f"{spec.block_size}x{spec.bins}"
    unit = "Hz" if spec.domain == "time" else "frames/s"
    return f"{spec.channels} ch x {shape} {spec.dtype} @ {spec.sample_rate:g} {unit}"


def to_dot(name: str, topo: Topology, nodes: Mapping[str, SignalSpec] | None = None) -> str:
    """The graph in Graphviz's DOT language (``dot -Tsvg``): sources, stages and sinks as nodes, each
    edge labelled with its spec when ``nodes`` gives them."""
    out = [f"digraph {_quote(name)} {{", "  rankdir=LR;", "  node [shape=box, fontname=\"Helvetica\"];"]
    for src_name, src in topo.sources.items():
        label = f"{src_name}\\n{src.type if src is not None else 'input'}"
        out.append(f"  {_quote(src_name)} [shape=invhouse, label=\"{label}\"];")
    for st in topo.stages:
        out.append(f"  {_quote(st.name)} [label=\"{st.name}\\n{st.type}\"];")
    for sink_name, sink in topo.sinks.items():
        out.append(f"  {_quote('sink:' + sink_name)} [shape=house, label=\"{sink_name}\\n{sink.type}\"];")

    def edge(a: str, b: str) -> str:
        label = f" [label={_quote(_short(nodes[a]))}]" if nodes and a in nodes else ""
        return f"  {_quote(a)} -> {_quote(b)}{label};"

    for st in topo.stages:
        for ref in topo.stage_inputs.get(st.name, ()):
            out.append(edge(ref, st.name))
    for sink_name, ref in topo.sink_inputs.items():
        out.append(edge(ref, "sink:" + sink_name))
    out.append("}")
    return "\n".join(out)
