"""The flowgraph: named sources, stages and sinks, what each one reads, the checks made before any
block runs, the order the stages run in, and the spec of every edge.

Description layer, plain data and functions over it. A :class:`Topology` is what a pipeline
describes: :class:`~pygpukit_dsp.graph.Graph` holds one; a :class:`~pygpukit_dsp.pipeline.Pipeline`
(the one-path case) makes one on demand. The checks (:func:`check_structure`) find every name read
that nothing defines (with a did-you-mean), a stage given the wrong number of inputs, a cycle, and a
source or stage whose output nothing reads; :func:`propagate` gives every edge its spec, naming both
ends of an edge whose specs do not fit. docs/graphs.md describes the form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from .errors import ConfigError
from .signal import SignalSpec
from .stages.base import InputMismatch, Stage, did_you_mean

SOURCE_NAME = "source"
"""The name of a source that is given none (and of the input of a pipeline without a source)."""


@dataclass(eq=False)
class Topology:
    """The nodes of a flowgraph and what each one reads.

    ``sources`` maps each source's name to its component (None: an input with no source, fed by
    ``process()``); ``stages`` keeps the order they were written in; ``stage_inputs[name]`` is what
    stage ``name`` reads (sources or stages, by name); ``sinks`` maps each sink's name to its
    component and ``sink_inputs[name]`` to what it reads. ``refs_where[(kind, name, i)]`` is the
    FILE:LINE:COL where the i-th name read by stage (kind "stage") or sink ("sink") ``name`` was
    written, for errors; ``where`` the pipeline's.
    """

    sources: dict[str, Any] = field(default_factory=dict)
    stages: list[Stage] = field(default_factory=list)
    stage_inputs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    sinks: dict[str, Any] = field(default_factory=dict)
    sink_inputs: dict[str, str] = field(default_factory=dict)
    refs_where: dict[tuple[str, str, int], str] = field(default_factory=dict)
    where: str | None = None

    # ------------------------------------------------------------------ reading it
    def stage(self, name: str) -> Stage | None:
        return next((st for st in self.stages if st.name == name), None)

    def names(self) -> list[str]:
        """Every name a stage or a sink may read: the sources', then the stages'."""
        return [*self.sources, *(st.name for st in self.stages)]

    def describe(self, name: str) -> str:
        """How messages name a node: "source 'iq' (rawiq)", "stage 'pw' (power)"."""
        if name in self.sources:
            comp = self.sources[name]
            return f"source '{name}'" + (f" ({comp.type})" if comp is not None else "")
        st = self.stage(name)
        return f"stage '{name}' ({st.type})" if st is not None else f"'{name}'"

    def where_of(self, name: str) -> str | None:
        """FILE:LINE:COL of a source's or a stage's mapping (the pipeline's when it has none)."""
        obj = self.sources.get(name) if name in self.sources else self.stage(name)
        return getattr(obj, "where", None) or self.where

    def ref_where(self, kind: str, name: str, i: int, fallback: str | None) -> str | None:
        return self.refs_where.get((kind, name, i)) or fallback or self.where

    def readers(self) -> dict[str, list[str]]:
        """Each source's and stage's readers, as messages name them ("stage 'pw' (power)", "sink 'power'")."""
        out: dict[str, list[str]] = {n: [] for n in self.names()}
        for st in self.stages:
            for name in self.stage_inputs.get(st.name, ()):
                out.setdefault(name, []).append(f"stage '{st.name}' ({st.type})")
        for sink, name in self.sink_inputs.items():
            out.setdefault(name, []).append(f"sink '{sink}'")
        return out

    def output_names(self) -> dict[str, str]:
        """What the graph gives back, by name: each sink's name and what it reads; with no sinks,
        the last stage's output (the only source's, when there are no stages) under its own name."""
        if self.sinks:
            return dict(self.sink_inputs)
        if self.stages:
            last = self.stages[-1].name
            return {last: last}
        if len(self.sources) == 1:
            name = next(iter(self.sources))
            return {name: name}
        return {}

    def order(self) -> list[str]:
        """The stages' names, each after every stage it reads (in the written order where free).
        Assumes no cycle (:func:`check_structure`)."""
        done: set[str] = set(self.sources)
        left = [st.name for st in self.stages]
        out: list[str] = []
        while left:
            ready = next((n for n in left if all(i in done for i in self.stage_inputs.get(n, ()))), None)
            if ready is None:  # a cycle or a name nobody defines: the rest in the written order
                out.extend(left)
                break
            out.append(ready)
            done.add(ready)
            left.remove(ready)
        return out

    def single_path(self) -> list[str] | None:
        """The stages' names in order when the graph is one path (one source, each stage reading the
        one before, at most one sink, on the last): the graph a Pipeline describes. Else None."""
        return None if self.branch() is not None else self.order()

    def fanned_path(self) -> list[str] | None:
        """The stages' names in order when the graph is one path but for several sinks reading its
        output (the last stage's, or the source's when there are no stages). Else None."""
        if len(self.sinks) < 2 or len(self.sources) != 1:
            return None
        order = self.order()
        prev = next(iter(self.sources))
        for name in order:
            if tuple(self.stage_inputs.get(name, ())) != (prev,):
                return None
            prev = name
        return order if all(name == prev for name in self.sink_inputs.values()) else None

    def branch(self) -> tuple[str, str] | None:
        """Where the graph stops being one path, and how ("the output of 'ch' is read by ..."), or
        None when it is one path."""
        if len(self.sources) != 1:
            names = ", ".join(f"'{n}'" for n in self.sources)
            return (next(iter(self.sources), SOURCE_NAME), f"it has {len(self.sources)} sources ({names})")
        readers = self.readers()  # sinks among them: a second sink, or one on a middle stage, is a branch
        for name in [*self.sources, *self.order()]:  # the first place, from the source on
            ins = self.stage_inputs.get(name, ()) if name not in self.sources else (None,)
            if len(ins) != 1:
                return name, f"{self.describe(name)} reads {len(ins)} inputs"
            if len(readers.get(name, [])) > 1:
                return name, f"the output of {self.describe(name)} is read by {' and '.join(readers[name])}"
        return None


# ---------------------------------------------------------------------- the checks


def check_structure(topo: Topology) -> list[ConfigError]:
    """Every problem of the graph's structure, each located: a stage named like a source, a name read
    that nothing defines (did-you-mean), a stage with the wrong number of inputs, a cycle (naming
    both ends of the edge that closes it), a source or stage whose output nothing reads."""
    errors: list[ConfigError] = []
    known = topo.names()
    for st in topo.stages:
        if st.name in topo.sources:
            errors.append(ConfigError(f"stage '{st.name}' ({st.type}) has the name of a source", where=st.where
                                      or topo.where, hint="sources and stages share one set of names: rename one"))
    for kind, name, inputs in _references(topo):
        fallback = topo.stage(name).where if kind == "stage" else getattr(topo.sinks.get(name), "where", None)
        for i, ref in enumerate(inputs):
            if ref in known:
                continue
            hint = did_you_mean(ref, known) or (f"defined names: {', '.join(known)}" if known else
                                                "add a source or a stage with that name")
            reader = f"stage '{name}' ({topo.stage(name).type})" if kind == "stage" else f"sink '{name}'"
            errors.append(ConfigError(f"{reader} reads '{ref}', which no source or stage defines",
                                      where=topo.ref_where(kind, name, i, fallback), hint=hint))
    for st in topo.stages:
        n = len(topo.stage_inputs.get(st.name, ()))
        least, most = st.input_count
        if n < least or (most is not None and n > most):
            several = st.takes_several()
            hint = ("name them: inputs: [A, B]" if several else "name it: input: NAME (a list of inputs is "
                    "for stages that take several: add, multiply, combine)")
            errors.append(ConfigError(f"stage '{st.name}' ({st.type}) takes {st.inputs_text()} input"
                                      f"{'s' if several else ''}, got {n}", where=st.where or topo.where,
                                      hint=hint))
    errors.extend(_cycles(topo))
    if not errors:
        errors.extend(_unused(topo))
    return errors


def _references(topo: Topology) -> list[tuple[str, str, tuple[str, ...]]]:
    out = [("stage", st.name, topo.stage_inputs.get(st.name, ())) for st in topo.stages]
    out += [("sink", name, (ref,)) for name, ref in topo.sink_inputs.items()]
    return out


def _cycles(topo: Topology) -> list[ConfigError]:
    """One error per cycle among the stages, at the name whose reading closes it."""
    stage_names = {st.name for st in topo.stages}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    errors: list[ConfigError] = []
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for i, ref in enumerate(topo.stage_inputs.get(name, ())):
            if ref not in stage_names:
                continue
            if state.get(ref) == 1:  # name reads ref, which (through the path) reads name
                loop = path[path.index(ref):] + [ref]
                st = topo.stage(name)
                errors.append(ConfigError(
                    f"stage '{name}' ({st.type}) reads '{ref}', which depends on '{name}': a cycle "
                    f"({' -> '.join(reversed(loop))})", where=topo.ref_where("stage", name, i, st.where),
                    hint="a graph runs each block from its sources to its sinks: no stage may depend on "
                         "its own output"))
            elif ref not in state:
                visit(ref)
        path.pop()
        state[name] = 2

    for st in topo.stages:
        if st.name not in state:
            visit(st.name)
    return errors


def _unused(topo: Topology) -> list[ConfigError]:
    readers = topo.readers()
    outputs = set(topo.output_names().values())
    errors = []
    for name in topo.names():
        if readers.get(name) or name in outputs:
            continue
        if name in topo.sources and topo.sources[name] is None:
            continue  # an input without a source that nothing reads: nothing is opened or fed
        what = topo.describe(name)
        errors.append(ConfigError(f"{what}: nothing reads its output", where=topo.where_of(name),
                                  hint=f"give it to a stage or a sink ('input: {name}'), or remove it"))
    return errors


def raise_errors(errors: Sequence[ConfigError]) -> None:
    if errors:
        from .errors import ConfigErrors

        raise errors[0] if len(errors) == 1 else ConfigErrors(list(errors))


# ---------------------------------------------------------------------- specs


@dataclass(frozen=True)
class GraphSpecs:
    """The spec of every edge of a graph: ``nodes[name]`` is the output of source or stage ``name``,
    ``stage_inputs[name]`` the specs stage ``name`` reads, ``sinks[name]`` what sink ``name`` takes.
    ``order`` runs the stages, ``sources`` lists the sources in order, ``outputs`` maps what the
    graph gives back (its sinks' names, or the last stage's) to the node each reads."""

    nodes: dict[str, SignalSpec]
    stage_inputs: dict[str, tuple[SignalSpec, ...]]
    sinks: dict[str, SignalSpec]
    order: tuple[str, ...]
    sources: tuple[str, ...]
    outputs: dict[str, str]

    @property
    def input(self) -> SignalSpec:
        """The first source's spec: the stream's clock (block period, deadline, duration)."""
        return self.nodes[self.sources[0]]

    @property
    def output(self) -> SignalSpec:
        """The first output's spec (the summary's output line)."""
        return self.nodes[next(iter(self.outputs.values()))]

    def output_spec(self, name: str) -> SignalSpec:
        return self.nodes[self.outputs[name]]


def _input_names(topo: Topology, name: str) -> tuple[str, ...]:
    return topo.stage_inputs.get(name, ())


def stage_output(st: Stage, specs: Sequence[SignalSpec]) -> SignalSpec:
    """A stage's output spec for its inputs' specs (a list for a stage that takes several)."""
    return st.output_spec(list(specs)) if st.takes_several() else st.output_spec(specs[0])


def propagate(topo: Topology, source_specs: dict[str, SignalSpec]) -> GraphSpecs:
    """Every edge's spec from the sources' (by name); a stage that cannot take what it reads is a
    ConfigError naming both ends (the inputs that disagree, for a stage with several)."""
    raise_errors(check_structure(topo))
    nodes: dict[str, SignalSpec] = dict(source_specs)
    inputs: dict[str, tuple[SignalSpec, ...]] = {}
    order = topo.order()
    for name in order:
        st = topo.stage(name)
        assert st is not None
        refs = _input_names(topo, name)
        specs = tuple(nodes[r] for r in refs)
        try:
            out = stage_output(st, specs)
        except InputMismatch as exc:
            a, b = refs[exc.first], refs[exc.other]
            raise ConfigError(
                f"stage '{name}' ({st.type}) cannot take its inputs together: {topo.describe(a)} gives "
                f"[{nodes[a].describe()}] and {topo.describe(b)} gives [{nodes[b].describe()}]: {exc.message}",
                where=topo.ref_where("stage", name, exc.other, st.where), hint=exc.hint) from None
        except ConfigError as exc:
            given = " and ".join(f"{topo.describe(r)} [{nodes[r].describe()}]" for r in refs)
            raise ConfigError(f"stage '{name}' ({st.type}) cannot take the output of {given}: {exc.message}",
                              where=exc.where or st.where or topo.where, hint=exc.hint, path=exc.path) from None
        inputs[name] = specs
        nodes[name] = out
    sinks = {name: nodes[ref] for name, ref in topo.sink_inputs.items()}
    return GraphSpecs(nodes=nodes, stage_inputs=inputs, sinks=sinks, order=tuple(order),
                      sources=tuple(topo.sources), outputs=topo.output_names())


def memory_items(topo: Topology, specs: GraphSpecs) -> list[tuple[int, str, bool]]:
    """What one block of the graph needs, item by item (as limits.block_memory counts a chain): each
    source's block, each stage's output block and its state; each with whether it grows with block_size."""
    items = [(specs.nodes[n].block_nbytes, f"the input block of source '{n}' ({specs.nodes[n].describe()})", True)
             for n in specs.sources]
    for name in specs.order:
        st = topo.stage(name)
        assert st is not None
        label = f"stage '{name}' ({st.type})"
        out = specs.nodes[name]
        items.append((out.block_nbytes, f"{label} output ({out.describe()})", True))
        ins = specs.stage_inputs[name]
        state = st.state_bytes(list(ins) if st.takes_several() else ins[0])
        if state:
            small = [s.with_(block_size=1) for s in ins]
            fixed = st.state_bytes(small if st.takes_several() else small[0])
            items.append((state, f"{label} state", 2 * (state - fixed) > state))
    return items
