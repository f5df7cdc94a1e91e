"""gk-stream validate: every pipeline of a file loaded and opened as a run would (schema, sources
opened and closed, specs propagated, each file sink's paths checked), printed as text (a chain's
lines, a graph's nodes in run order) or Graphviz (``--dot``); nothing is run or created.

CLI layer, beside cli.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def validate_file(path: str | Path, *, dot: bool = False) -> int:
    """Load every pipeline of the file as a run would, check it, and print it (``dot``: as Graphviz)."""
    from .graph import load_streams
    from .io.base import StreamFormat

    pipelines = load_streams(path)
    for p in pipelines:
        fmts: dict[str, StreamFormat] = {}
        details: dict[str, list[str]] = {}
        for name, src in p.topology().sources.items():
            fmts[name] = StreamFormat()
            if src is not None:
                fmts[name] = src.open(StreamFormat(p.sample_rate, p.channels, p.dtype))
                info = getattr(src, "info", None)  # what a recording holds (sigmf: datatype, captures)
                details[name] = list(info()) if callable(info) else []
                src.close()
        chain = p.as_chain()
        if chain is p:  # one path, written as one: its lines as they always were
            _validate_chain(dot, p, next(iter(fmts.values())), details.get(p.source_name, []))
        else:
            _validate_graph(dot, p, fmts, details)
    return 0


def _validate_chain(dot: bool, p: Any, fmt: Any, details: list[str]) -> None:
    chain = p.specs(fmt)
    if dot:
        from .graph_render import to_dot

        if p.sink is not None:
            _check_sink_paths(p.sink, [p.source])
        nodes = {p.source_name: chain.input, **{st.name: s for st, s in zip(p.stages, chain.specs[1:])}}
        print(to_dot(p.name, p.topology(), nodes))
        return
    print(f"pipeline {p.name}: ok")
    src = p.source.type if p.source is not None else "(none)"
    print(f"  source {src:<12} -> {chain.input.describe()}")
    for line in details:
        print(f"         {line}")
    for st, spec in zip(p.stages, chain.specs[1:]):
        print(f"  {st.name:<12} ({st.type}) -> {spec.describe()}")
    snk = p.sink.type if p.sink is not None else "(none)"
    if p.sink is not None:
        _check_sink_paths(p.sink, [p.source])
        for f in getattr(p.sink, "output_files", lambda: [])():
            snk += f" -> {f}"
    print(f"  sink   {snk}")


def _validate_graph(dot: bool, g: Any, fmts: dict, details: dict[str, list[str]]) -> None:
    """A graph's lines: each source, stage (in run order, with what it reads) and sink."""
    from .graph_render import text_lines, to_dot

    topo = g.topology()
    specs = g.specs(fmts)
    sources = [s for s in topo.sources.values() if s is not None]
    files = {}
    for name, sink in topo.sinks.items():
        _check_sink_paths(sink, sources)
        files[name] = [str(f) for f in getattr(sink, "output_files", lambda: [])()]
    if dot:
        print(to_dot(g.name, topo, specs.nodes))
        return
    counts = f"{len(topo.sources)} source{'s' * (len(topo.sources) != 1)}, {len(topo.stages)} stage" \
             f"{'s' * (len(topo.stages) != 1)}, {len(topo.sinks)} sink{'s' * (len(topo.sinks) != 1)}"
    branch = topo.branch()
    print(f"pipeline {g.name}: ok (a graph: {counts}{'' if branch else '; one path'})")
    lines = text_lines(topo, specs.nodes, files)
    for line in lines:
        print(line)
        name = line.split()[1] if line.startswith("  source ") else None
        for extra in details.get(name, []) if name else []:
            print(f"         {extra}")


def _check_sink_paths(sink: Any, sources: list[Any]) -> None:
    """A sink's files as a run checks them before its first block (a ConfigError at the sink):
    writable, not a folder, not a source's own file; validate creates nothing."""
    from .io._common import check_sink_not_source, check_sink_path

    what = f"{sink.type} sink '{getattr(sink.params, 'path', '')}'"
    for f in getattr(sink, "output_files", lambda: [])():
        check_sink_path(Path(f), what, where=sink.where)
    for src in sources:
        if src is not None:
            check_sink_not_source(sink, src)
