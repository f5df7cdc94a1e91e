"""Graph: a directed acyclic graph of stages between one or more sources and one or more sinks.

Description layer, like :class:`~pygpukit_dsp.pipeline.Pipeline` (the one-path case, whose settings,
input spec and running it shares through ``PipelineBase``): its nodes and what each reads (a
:class:`~pygpukit_dsp.graph_model.Topology`), the specs of its edges, its YAML in and out. Running
it is the executor's job (execute.py, runner.py, backends/), reached through function-level imports.
Build one in Python::

    g = Graph(name="rx", sample_rate=1.024e6, block_size=4096, backend="cpu")
    iq = g.source(RawIqSource(path="iq.cf32"))               # "source"
    ch = g.add(stages.Channelizer(channels=16), iq)          # "channelizer"
    g.sink(NumpySink(path="out/power.npy"), g.add(stages.Power(), ch), name="power")
    g.sink(RawIqSink(path="out/two.cf32"), g.add(stages.Select(channels=[3, 5]), ch))
    out = g.process(x)                                       # {"power": ..., "select": ...}

or read it from YAML (:meth:`Graph.from_yaml`; docs/graphs.md has the form).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from .errors import ConfigError
from .graph_model import SOURCE_NAME, GraphSpecs, Topology, check_structure, propagate, raise_errors
from .io.base import Sink, Source, StreamFormat
from .pipeline import Pipeline, PipelineBase
from .qos import QoS
from .stages.base import Stage, did_you_mean, stage_class

if TYPE_CHECKING:
    from .handle import RunHandle


class Graph(PipelineBase):
    """A flowgraph: named sources, stages reading sources or stages by name, and named sinks.

    ``g.source(src, name=...)``, ``g.add(stage, *inputs)`` and ``g.sink(snk, input, name=...)``
    return the name that later nodes read. ``process(x)`` takes an array (one source) or a mapping
    of arrays by source name, and returns the output array of a graph with one sink (or none), a
    dict ``{sink name: array}`` of one with several. ``run()`` reads every source in step (one
    block of each per block) and writes every sink; a source that ends ends the stream.
    """

    def __init__(self, *, name: str = "graph", sample_rate: float | None = None, channels: int | None = None,
                 block_size: int = 1024, dtype: str | None = None, backend: str = "auto",
                 qos: QoS | dict | None = None, where: str | None = None, path: Path | None = None,
                 device: int | str | None = None, device_where: str | None = None, nonfinite: str | None = None):
        super().__init__(name=name, sample_rate=sample_rate, channels=channels, block_size=block_size,
                         dtype=dtype, backend=backend, qos=qos, where=where, path=path, device=device,
                         device_where=device_where, nonfinite=nonfinite)
        self._check_settings()
        self._topo = Topology(where=where)

    # ------------------------------------------------------------------ what it holds
    @property
    def sources(self) -> dict[str, Source | None]:
        """Each source by name (None: an input with no source, fed by process())."""
        return dict(self._topo.sources)

    @property
    def stages(self) -> list[Stage]:
        """The stages, in the order they were added (written)."""
        return list(self._topo.stages)

    @property
    def stage_inputs(self) -> dict[str, tuple[str, ...]]:
        """What each stage reads, by name."""
        return dict(self._topo.stage_inputs)

    @property
    def sinks(self) -> dict[str, Sink]:
        """Each sink by name."""
        return dict(self._topo.sinks)

    @property
    def sink_inputs(self) -> dict[str, str]:
        """What each sink reads, by name."""
        return dict(self._topo.sink_inputs)

    def topology(self) -> Topology:
        return self._topo

    # ------------------------------------------------------------------ building
    def _taken(self, name: str) -> bool:
        return name in self._topo.sources or self._topo.stage(name) is not None

    def _resolve(self, ref: Any) -> str:
        name = ref.name if isinstance(ref, Stage) else ref
        if name == SOURCE_NAME and not self._topo.sources:
            self._topo.sources[SOURCE_NAME] = None  # the input process() feeds, named as YAML names it
        if not isinstance(name, str) or not self._taken(name):
            known = self._topo.names()
            raise ConfigError(f"graph '{self.name}': nothing is named {name!r}",
                              hint=(did_you_mean(str(name), known) if isinstance(name, str) else None)
                              or f"names so far: {', '.join(known) or '(none)'}")
        return name

    def _last(self) -> str:
        if self._topo.stages:
            return self._topo.stages[-1].name
        if len(self._topo.sources) == 1:
            return next(iter(self._topo.sources))
        if not self._topo.sources:
            self._topo.sources[SOURCE_NAME] = None  # the input process() feeds
            return SOURCE_NAME
        raise ConfigError(f"graph '{self.name}' has {len(self._topo.sources)} sources: name what its first "
                          "stage reads", hint="g.add(stage, 'NAME')")

    def source(self, source: Source | None = None, *, name: str = SOURCE_NAME) -> str:
        """Add a source (None: an input that only ``process()`` feeds) and return its name."""
        if source is not None and not isinstance(source, Source):
            raise ConfigError(f"graph '{self.name}': {source!r} is not a Source")
        if self._taken(name):
            raise ConfigError(f"graph '{self.name}' already has a node named '{name}'",
                              hint="give the source another name: source(..., name='NAME')")
        self._topo.sources[name] = source
        return name

    def add(self, stage: Stage | str, *inputs: str | Stage, **params: Any) -> str:
        """Add a stage (an instance, or a type name with parameters) reading ``inputs`` (names, or the
        stages themselves; none: the entry added last) and return its name. A default name that is
        taken gets ``_2``, ``_3``... as in YAML."""
        if isinstance(stage, str):
            stage = stage_class(stage)(**params)
        elif params:
            raise TypeError("parameters are only accepted with a stage type name")
        if not isinstance(stage, Stage):
            raise ConfigError(f"graph '{self.name}': {stage!r} is not a Stage")
        if any(st is stage for st in self._topo.stages):
            raise ConfigError(f"graph '{self.name}' already holds stage '{stage.name}'",
                              hint="make another instance to use a stage twice")
        reads = tuple(self._resolve(r) for r in inputs) if inputs else (self._last(),)
        if self._taken(stage.name):
            if stage.name != stage.type:
                raise ConfigError(f"graph '{self.name}' already has a node named '{stage.name}'",
                                  hint="give each stage a unique name")
            k = 2
            while self._taken(f"{stage.type}_{k}"):
                k += 1
            stage.name = f"{stage.type}_{k}"
        least, most = stage.input_count
        if len(reads) < least or (most is not None and len(reads) > most):
            raise ConfigError(f"stage '{stage.name}' ({stage.type}) takes {stage.inputs_text()} inputs, "
                              f"got {len(reads)}", hint="g.add(stage, 'A', 'B') names its inputs")
        self._topo.stages.append(stage)
        self._topo.stage_inputs[stage.name] = reads
        return stage.name

    def sink(self, sink: Sink, input: str | Stage | None = None, *, name: str | None = None) -> str:
        """Add a sink reading ``input`` (a name or a stage; None: the entry added last) and return its
        name (default: its input's)."""
        if not isinstance(sink, Sink):
            raise ConfigError(f"graph '{self.name}': {sink!r} is not a Sink")
        ref = self._resolve(input) if input is not None else self._last()
        name = name or ref
        if name in self._topo.sinks:
            raise ConfigError(f"graph '{self.name}' already has a sink named '{name}'",
                              hint="give this one a name: sink(..., name='NAME')")
        self._topo.sinks[name] = sink
        self._topo.sink_inputs[name] = ref
        return name

    def check(self) -> None:
        """Raise the graph's structural errors (a source or stage nothing reads...) now."""
        raise_errors(check_structure(self._topo))

    # ------------------------------------------------------------------ one path
    @classmethod
    def from_pipeline(cls, pipeline: Pipeline) -> "Graph":
        """The one-path graph of a Pipeline (the same stages, source and sink)."""
        g = cls(**pipeline._settings())
        topo = pipeline.topology()
        g._topo = Topology(sources=topo.sources, stages=topo.stages, stage_inputs=topo.stage_inputs,
                           sinks=topo.sinks, sink_inputs=topo.sink_inputs, where=pipeline.where)
        return g

    def as_chain(self) -> Pipeline | None:
        """This graph as a Pipeline when it is one path (one source, each stage reading the one
        before, at most one sink on the last): it then runs as every Pipeline does, on cuda too."""
        self.check()
        order = self._topo.single_path()
        if order is None:
            return None
        (src_name, src), = self._topo.sources.items()
        sink_name, sink = next(iter(self._topo.sinks.items()), (None, None))
        chain = Pipeline([self._topo.stage(n) for n in order], source=src, sink=sink, **self._settings())
        chain.source_name, chain.sink_name = src_name, sink_name
        return chain

    def fanned_chain(self) -> Pipeline | None:
        """The path of a graph that is one path but for several sinks reading its output, as a
        Pipeline without a sink (its engine is a chain's; the runner gives its output to each sink)."""
        self.check()
        order = self._topo.fanned_path()
        if order is None:
            return None
        (src_name, src), = self._topo.sources.items()
        chain = Pipeline([self._topo.stage(n) for n in order], source=src, **self._settings())
        chain.source_name = src_name
        return chain

    def branch(self) -> tuple[str, str] | None:
        """Where the graph stops being one path and how (None: it is one path)."""
        return self._topo.branch()

    # ------------------------------------------------------------------ specs
    def specs(self, fmt: StreamFormat | Mapping[str, StreamFormat] | None = None) -> GraphSpecs:
        """Every edge's spec; ``fmt`` is what the sources deliver: one format for every source, or
        a mapping by source name (missing ones: the graph's fields alone)."""
        formats = fmt if isinstance(fmt, Mapping) else {n: fmt for n in self._topo.sources}
        return propagate(self._topo, {n: self.input_spec(formats.get(n)) for n in self._topo.sources})

    # ------------------------------------------------------------------ YAML
    @classmethod
    def from_config(cls, cfg: Any) -> "Graph":
        """Build from a :class:`pygpukit_dsp.spec.PipelineConfig` (a chain's as its one path)."""
        if cfg.sources is None:  # the chain form
            return cls.from_pipeline(Pipeline.from_config(cfg))
        g = cls(name=cfg.name, sample_rate=cfg.sample_rate, channels=cfg.channels, block_size=cfg.block_size,
                dtype=cfg.dtype, backend=cfg.backend, qos=cfg.qos, where=cfg.where, path=cfg.path,
                device=cfg.device, device_where=cfg.device_where, nonfinite=cfg.nonfinite)
        g._topo = Topology(sources=dict(cfg.sources), stages=list(cfg.stages), stage_inputs=dict(cfg.stage_inputs),
                           sinks=dict(cfg.sinks or {}), sink_inputs=dict(cfg.sink_inputs),
                           refs_where=dict(cfg.refs_where), where=cfg.where)
        return g

    @classmethod
    def load_all(cls, path: str | Path) -> list["Graph"]:
        """Every pipeline of a YAML file as a Graph (a chain as its one path)."""
        from .spec import load_file

        return [cls.from_config(cfg) for cfg in load_file(path)]

    @classmethod
    def from_yaml(cls, path: str | Path, name: str | None = None) -> "Graph":
        """The graph in a YAML file; ``name`` picks one when the file holds several."""
        graphs = cls.load_all(path)
        if name is None:
            if len(graphs) > 1:
                raise ConfigError(f"{path} holds {len(graphs)} pipelines ({', '.join(g.name for g in graphs)})",
                                  hint="pass name= to pick one, or use Graph.load_all")
            return graphs[0]
        for g in graphs:
            if g.name == name:
                return g
        names = [g.name for g in graphs]
        raise ConfigError(f"{path} has no pipeline named '{name}'",
                          hint=did_you_mean(name, names) or f"pipelines: {', '.join(names)}")

    def to_config(self) -> dict[str, Any]:
        """The YAML document (version 1) of this graph as plain data; it reads back the same graph."""
        from .spec.dump import graph_body

        return {**self._settings_config(), **graph_body(self)}

    # ------------------------------------------------------------------ running (execute.py)
    def process(self, x: np.ndarray | Mapping[str, np.ndarray], *, backend: str | None = None,
                device: int | str | None = None, nonfinite: str | None = None) -> np.ndarray | dict[str, np.ndarray]:
        """Stream ``x`` through the graph block by block (as :meth:`Pipeline.process` does): an array
        (channels, n) for a graph with one source, else a mapping of arrays by source name (the
        shortest one's length is the stream's). Returns the output of a graph with one sink (or none,
        then of its last stage), or ``{sink name: array}`` for several sinks. Sources and sinks
        themselves are not used."""
        from .execute import process

        return process(self, x, backend=backend, device=device, nonfinite=nonfinite)

    def start(self, *, source: Source | None = None, sink: Sink | None = None, backend: str | None = None,
              blocks: int | None = None, duration: float | None = None, tap: bool | None = None,
              device: int | str | None = None) -> "RunHandle":
        """Run on a background thread (:meth:`Pipeline.start`); ``source``/``sink`` replace the
        graph's only source / only sink for this run. With several sinks, the handle's blocks are
        dicts ``{sink name: block}``."""
        from .execute import start

        return start(self, source=source, sink=sink, backend=backend, blocks=blocks, duration=duration, tap=tap,
                     device=device)

    def with_io(self, *, source: Source | None = None, sink: Sink | None = None) -> "Graph":
        """A copy with ``source`` in place of its only source and ``sink`` in place of its only sink
        (added on the output when it has none); None keeps its own. The stages are shared."""
        g = Graph(**self._settings())
        t = self._topo
        g._topo = Topology(sources=dict(t.sources), stages=list(t.stages), stage_inputs=dict(t.stage_inputs),
                           sinks=dict(t.sinks), sink_inputs=dict(t.sink_inputs), refs_where=dict(t.refs_where),
                           where=t.where)
        for given, table, what in ((source, g._topo.sources, "source"), (sink, g._topo.sinks, "sink")):
            if given is None:
                continue
            if len(table) > 1:
                raise ConfigError(f"graph '{self.name}' has {len(table)} {what}s ({', '.join(table)}): "
                                  f"which one {what}= replaces is not clear", hint=f"build a copy with the {what}s wanted")
            if table:
                table[next(iter(table))] = given
            else:
                g.sink(given)
        return g

    def __repr__(self) -> str:
        t = self._topo
        return (f"Graph(name={self.name!r}, sources={list(t.sources)}, stages={[s.name for s in t.stages]}, "
                f"sinks={list(t.sinks)})")


def load_streams(path: str | Path) -> list[Pipeline | Graph]:
    """Every pipeline of a YAML file as ``gk-stream run`` runs it: a chain as a Pipeline, a graph
    (``sources:``, ``sinks:``, ``input:``...) as a Graph."""
    from .spec import load_file

    return [Graph.from_config(cfg) if cfg.graph_where else Pipeline.from_config(cfg) for cfg in load_file(path)]
