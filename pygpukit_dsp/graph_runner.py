"""Runs a graph that is not one path as a stream: every source read in step, the graph's engine,
every sink written and accounted. A graph of one path, and a Pipeline, run as StreamRunner does.

Executor layer. It imports the description (Graph, Pipeline) only for typing. The stream's clock is
its first source: the block period, the deadline and ``duration`` come from it. Each block is one
block of every source: a source that ends ends the stream, and the last block of one that delivers
fewer samples than a full block cuts the others' to its length (docs/graphs.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ConfigError, StreamFault
from .io.base import StreamFormat
from .nonfinite import NonFiniteInput
from .runner import (StreamRunner, _audio_report, _events, _fault, _samples, _sink_account, _source_account,
                     _stats)

if TYPE_CHECKING:
    from .graph import Graph
    from .pipeline import Pipeline


def open_runner(pipeline: "Pipeline | Graph", *, backend: str | None = None, device: int | str | None = None,
                gpu: int | None = None) -> StreamRunner:
    """The runner of a stream: StreamRunner for a Pipeline and a graph of one path (as its
    Pipeline), GraphRunner for any other graph. Opens everything it runs (StreamRunner's arguments)."""
    chain = pipeline.as_chain()
    if chain is not None:
        return StreamRunner(chain, backend=backend, device=device, gpu=gpu)
    return GraphRunner(pipeline, backend=backend, device=device, gpu=gpu)


class GraphRunner(StreamRunner):
    """Opens a graph's sources, sinks and engine, and moves blocks through them (StreamRunner's loop).

    ``source`` and ``sink`` are the first source and the first sink (admission paces and the
    summary's ``source_stats``/``sink_stats`` read them); ``sources`` and ``sinks`` hold every one by
    name. The engine takes one block per source and gives one per sink (graph order)."""

    def __init__(self, graph: "Graph", *, backend: str | None = None, device: int | str | None = None,
                 gpu: int | None = None):
        topo = graph.topology()
        bare = [n for n, s in topo.sources.items() if s is None]
        if bare:
            raise ConfigError(f"graph '{graph.name}' has no source for {', '.join(repr(n) for n in bare)}",
                              where=graph.where, hint="add a source (e.g. {type: synth}), or use "
                                                      "Graph.process(arrays)")
        self._setup(graph, backend, device)
        self.topo = topo
        self.sources: dict[str, Any] = dict(topo.sources)
        self.sinks: dict[str, Any] = dict(topo.sinks)
        self.source = next(iter(self.sources.values()))
        self.sink = next(iter(self.sinks.values()), None)
        # NaN/Inf input samples: the graph's policy, else its first source's default (nonfinite.py)
        self.nonfinite_policy = graph.nonfinite or getattr(self.source, "nonfinite_default", "error")
        self._written = {name: [0, 0] for name in self.sinks}  # blocks, samples per channel
        self._fanned: tuple[Any, Any] | None = None  # (Pipeline, SpecChain) of a path with several sinks
        self._read = {name: 0 for name in self.sources}
        try:
            self._open(gpu)
        except BaseException:
            self._close(quiet=True)
            raise

    def _open(self, gpu: int | None) -> None:
        from .io._common import check_sink_not_source, component_files, set_pacer_spin

        g = self.pipeline
        duplex = next((s for s in self.sources.values() if s.type == "duplex"), self.source)
        for sink in self.sinks.values():
            pair = getattr(sink, "pair_with", None)
            if pair is not None:  # a sink that plays in a source's stream (duplex)
                pair(duplex)
        formats = {}
        for name, src in self.sources.items():
            formats[name] = src.open(StreamFormat(g.sample_rate, g.channels, g.dtype))
            set_pacer_spin(src, g.qos.spin_window_us())
        lengths = [f.length for f in formats.values() if f.length is not None]
        first = next(iter(formats.values()))
        self.source_format = StreamFormat(first.sample_rate, first.channels, first.dtype,
                                          length=min(lengths) if lengths else None)
        self.chain = g.specs(formats)
        from .backends import choose_backend

        choose_backend(g, self.chain, self.requested_backend)  # cuda refuses a graph here: before any sink's file
        written: dict[str, str] = {}
        for name, sink in self.sinks.items():  # every check before the first sink creates its file
            for src in self.sources.values():
                check_sink_not_source(sink, src)
            for path in component_files(sink, "output_files"):
                other = written.setdefault(str(path), name)
                if other != name:
                    raise ConfigError(f"sinks '{other}' and '{name}' both write {path}", where=sink.where,
                                      hint="give each sink a file of its own")
        for name, sink in self.sinks.items():
            sink.open(self.chain.sinks[name])
        path = g.fanned_chain()
        if path is not None:
            self._fanned = (path, path.specs(self.source_format))
        self._open_engine(gpu)

    def _engine_parts(self) -> tuple[Any, Any]:
        """A graph that is one path but for several sinks on its output runs on that path's chain
        engine (no graph engine's cost for a second sink, such as a view beside a file)."""
        if self._fanned is None:
            return self.pipeline, self.chain
        return self._fanned

    # -- the loop's hooks
    def _read_inputs(self, bs: int, index: int) -> tuple[Any, int]:
        blocks = []
        for name, src in self.sources.items():
            spec = self.chain.nodes[name]
            block = self._read_block(bs, spec.channels, spec.np_dtype, index, src)
            if block.shape[1] == 0:  # a source that ends ends the stream
                return None, 0
            blocks.append(block)
        n = min(b.shape[1] for b in blocks)  # a short last block of one: the others' cut to it
        blocks = [b if b.shape[1] == n else b[:, :n] for b in blocks]
        for name in self._read:
            self._read[name] += n
        return (tuple(blocks) if len(blocks) > 1 else blocks[0]), n

    def _outputs(self, out: Any) -> tuple:
        if self._fanned is not None:  # the chain's one output, for every sink
            return (out,) * len(self.chain.outputs)
        return out if len(self.chain.outputs) > 1 else (out,)

    def _write_outputs(self, out: Any, index: int) -> None:
        for (name, sink), block in zip(self.sinks.items(), self._outputs(out)):
            try:
                sink.write(block)
            except Exception as exc:
                raise _fault(sink, index, exc, part=f"sink '{name}' ({sink.describe()})") from exc
            counts = self._written[name]
            counts[0] += 1
            counts[1] += _samples(block)

    def _tapped(self, out: Any) -> Any:
        outs = self._outputs(out)
        return dict(zip(self.chain.outputs, outs)) if len(outs) > 1 else outs[0]

    def _samples_out(self, out: Any) -> int:
        return _samples(self._outputs(out)[0])

    def _nonfinite_error(self, exc: NonFiniteInput) -> NonFiniteInput:
        name = getattr(self.engine, "nonfinite_source", None) or next(iter(self.sources))
        what = f"source '{name}' ({self.sources[name].describe()})"
        return exc.count.error(what, part=what)

    def _io_report(self, blocks: int, samples_in: int, samples_out: int) -> dict[str, Any]:
        sinks = [_sink_account(name, sink, self.topo.sink_inputs[name], self.chain.sinks[name],
                               *self._written[name]) for name, sink in self.sinks.items()]
        sources = [_source_account(name, src, self.chain.nodes[name], self._read[name])
                   for name, src in self.sources.items()]
        events = [{**e, "source": name} if len(self.sources) > 1 else e
                  for name, src in self.sources.items() for e in _events(src)]
        return dict(source_stats=_stats(self.source), sink_stats=_stats(self.sink), sources=sources, sinks=sinks,
                    audio=_audio_report(*self.sources.values(), *self.sinks.values()), events=events)

    # -- what StreamRunner does with its one source and sink, for each
    def interrupt(self, *, abort: bool = False) -> None:
        for part in (*self.sources.values(), *self.sinks.values()):
            part.interrupt(abort=abort)

    def live_stats(self) -> dict[str, Any]:
        out = super().live_stats()
        out["sinks"] = {name: _stats(sink) for name, sink in self.sinks.items()}
        out["sources"] = {name: _stats(src) for name, src in self.sources.items()}
        return out

    def _report_to_sink(self, ended_by: str, fault: StreamFault | str | None, blocks: int, samples_in: int,
                        samples_out: int) -> None:
        """Each sink that records the run (StreamRunner._report_to_sink) is told, with its own rate."""
        for name, sink in self.sinks.items():
            fn = getattr(sink, "run_report", None)
            if not callable(fn):
                continue
            report = {
                "pipeline": self.pipeline.name, "backend": self.engine.choice.name,
                "backend_reason": self.engine.choice.reason,
                "stages": [{"name": st.name, "type": st.type} for st in self.topo.stages],
                "source": self.source.describe(), "source_stats": _stats(self.source), "events": _events(self.source),
                "input_rate": self.chain.input.sample_rate, "output_rate": self.chain.sinks[name].sample_rate,
                "blocks": blocks, "samples_in": samples_in, "samples_out": self._written[name][1],
                "ended_by": ended_by, "fault": str(fault) if fault is not None else None, "sink": name,
            }
            try:
                fn(report)
            except Exception:  # a courtesy, as for one sink
                pass

    def _close(self, quiet: bool = False) -> None:
        """Drain and finalise: the engine first, then every sink (flush), then every source."""
        errors = []
        parts = [(self.engine, None), *((s, n) for n, s in getattr(self, "sinks", {}).items()),
                 *((s, n) for n, s in getattr(self, "sources", {}).items())]
        for thing, name in parts:
            if thing is None:
                continue
            try:
                thing.close()
            except Exception as exc:  # keep closing the rest, then report
                what = f"engine ({thing.choice.name})" if name is None else f"'{name}' ({thing.describe()})"
                errors.append(f"{what}: {exc}")
        if errors and not quiet:
            raise StreamFault("while closing: " + "; ".join(errors))
