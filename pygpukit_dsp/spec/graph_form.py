"""The graph form of a pipeline document (docs/graphs.md): ``sources:``, ``sinks:``, and each
stage's ``input:`` or ``inputs:``, read into a PipelineConfig's graph fields, every problem located.

    source: {type: rawiq, path: iq.cf32}            # its name is 'source' unless it has one
    stages:
      - {name: ch, type: channelizer, channels: 16}  # reads the entry above (the source for the first)
      - {name: pw, type: power, input: ch}
      - {name: mixd, type: add, inputs: [ch, pw]}    # several inputs, for the stages that take them
    sinks:
      - {name: power, type: numpy, input: pw}        # a sink's name defaults to its input's

A document without any of these keys is one path (a chain) and reads as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..graph_model import SOURCE_NAME, Topology, check_structure
from .loader import Marks
from .words import _lookup, _show, _type_name

if TYPE_CHECKING:
    from .schema import _DocBuilder

SOURCE_EXTRA = ("name",)
STAGE_EXTRA = ("name", "input", "inputs")
SINK_EXTRA = ("name", "input")


def graph_marker(d: dict, m: Marks) -> str | None:
    """FILE:LINE:COL of the first key (in the file) that makes the document a graph, or None (one path)."""
    found: list[tuple[tuple[int, int], str]] = []

    def key(marks: Marks, name: str) -> None:
        found.append((marks.keys.get(name, (marks.line, marks.col)), marks.key_where(name)))

    for name in ("sources", "sinks"):
        if name in d:
            key(m, name)
    for kind, names in (("source", ("name",)), ("sink", ("name", "input"))):  # sink: with input: its error
        for name in names:
            if isinstance(d.get(kind), dict) and name in d[kind]:
                key(m.child(kind), name)
    stages = d.get("stages")
    if isinstance(stages, list):
        for i, item in enumerate(stages):
            if isinstance(item, dict):
                for name in ("input", "inputs"):
                    if name in item:
                        key(m.child("stages").items[i], name)
    return min(found)[1] if found else None


def _name(b: "_DocBuilder", value: Any, where: str, what: str) -> str | None:
    if not isinstance(value, str) or not value.strip():
        b.err(f"{what} must be a name (a non-empty string), got {_show(value)}", where,
              "e.g. 'input: ch', the name of a stage or a source")
        return None
    return value


def read_sources(b: "_DocBuilder", d: dict, m: Marks) -> dict[str, Any]:
    """The named sources: ``source:`` (named 'source' unless it has a name) or ``sources:`` (a list,
    each with a name); no source: one input named 'source' with none (fed by process())."""
    if "source" in d and "sources" in d:
        b.err("'source' and 'sources' cannot both be given", m.key_where("sources"),
              "put the source into the 'sources' list (each with a name), or keep one 'source:'")
        return {}
    if "sources" not in d:
        if d.get("source") is None:
            return {SOURCE_NAME: None}
        value, cm = d["source"], m.child("source")
        src = b._build("source", value, cm, _lookup("source"), what=lambda t: f"source '{t}'",
                       make=lambda cls, params: cls(params, base_dir=b.base_dir), extra_keys=SOURCE_EXTRA)
        name = SOURCE_NAME
        if isinstance(value, dict) and "name" in value:
            name = _name(b, value["name"], cm.value_where("name"), "a source's name") or SOURCE_NAME
        return {name: src}
    items, sm = d["sources"], m.child("sources")
    if not isinstance(items, list) or not items:
        b.err(f"'sources' must be a non-empty list of sources, got {_type_name(items)}", sm.where,
              "write one source per line: '  - {name: mic, type: file, path: mic.wav}'")
        return {}
    out: dict[str, Any] = {}
    taken: dict[str, str] = {}
    for i, item in enumerate(items):
        im = sm.items[i]
        name = None
        if isinstance(item, dict):
            if "name" not in item:
                b.err(f"sources[{i}] has no 'name'", im.where, "each entry of 'sources' needs a name that "
                      "stages read it by: '- {name: mic, type: ...}'")
            else:
                name = _name(b, item["name"], im.value_where("name"), "a source's name")
        if name is not None and name in taken:
            b.err(f"duplicate source name '{name}'", im.value_where("name"),
                  f"'{name}' is already used by the source at {taken[name]}; names must be unique")
            name = None
        src = b._build("source", item, im, _lookup("source"), what=lambda t, n=name: f"source '{n or t}' ({t})",
                       make=lambda cls, params: cls(params, base_dir=b.base_dir), extra_keys=SOURCE_EXTRA)
        if name is not None:
            taken[name] = im.where
            out[name] = src
    return out


def read_inputs(b: "_DocBuilder", d: dict, m: Marks, names: list[str | None], sources: dict[str, Any],
                refs: dict) -> dict[str, tuple[str, ...]]:
    """What each stage reads: its ``input:`` or ``inputs:``; else the entry above it (for the first,
    the source, when there is one)."""
    items, sm = d.get("stages") or [], m.child("stages")
    out: dict[str, tuple[str, ...]] = {}
    if not isinstance(items, list):
        return out
    before: str | None = next(iter(sources)) if len(sources) == 1 else None
    for i, item in enumerate(items):
        name = names[i] if i < len(names) else None
        if not isinstance(item, dict) or name is None:
            before = None
            continue
        im = sm.items[i]
        if "input" in item and "inputs" in item:
            b.err(f"stage '{name}' has both 'input' and 'inputs'", im.key_where("inputs"),
                  "'input: NAME' names the one input of a stage; 'inputs: [A, B]' those of add, multiply "
                  "and combine")
        elif "input" in item:
            ref = _name(b, item["input"], im.value_where("input"), f"stage '{name}''s input")
            if ref is not None:
                out[name] = (ref,)
                refs[("stage", name, 0)] = im.value_where("input")
        elif "inputs" in item:
            value, vm = item["inputs"], im.child("inputs")
            if not isinstance(value, list) or not value:
                b.err(f"stage '{name}''s inputs must be a non-empty list of names, got {_type_name(value)}",
                      vm.where, "e.g. 'inputs: [sel, lo]'")
            else:
                got = [_name(b, v, vm.value_where(k), f"stage '{name}''s inputs[{k}]") for k, v in enumerate(value)]
                if all(g is not None for g in got):
                    out[name] = tuple(g for g in got if g is not None)
                    for k in range(len(got)):
                        refs[("stage", name, k)] = vm.value_where(k)
        elif before is not None:
            out[name] = (before,)
        else:
            listed = ", ".join(f"'{s}'" for s in sources)
            b.err(f"stage '{name}' is the first stage and names no input, but there are {len(sources)} sources "
                  f"({listed})", im.where, f"name what it reads: 'input: {next(iter(sources), 'NAME')}'")
        before = name
    return out


def read_sinks(b: "_DocBuilder", d: dict, m: Marks, last: str | None, refs: dict) -> tuple[dict, dict]:
    """The sinks and what each reads: ``sink:`` (the last entry's output) or ``sinks:`` (a list,
    each with an ``input:``; its name defaults to its input's)."""
    sinks: dict[str, Any] = {}
    inputs: dict[str, str] = {}
    if "sink" in d and "sinks" in d:
        b.err("'sink' and 'sinks' cannot both be given", m.key_where("sinks"),
              "put the sink into the 'sinks' list (each with an input), or keep one 'sink:'")
        return sinks, inputs
    if "sinks" not in d:
        value, cm = d.get("sink"), m.child("sink")
        if value is None:
            return sinks, inputs
        if isinstance(value, dict) and "input" in value:
            b.err("'sink:' reads the output of the last stage and takes no 'input'", cm.key_where("input"),
                  "to choose what a sink reads, write 'sinks:' (a list): '- {type: ..., input: NAME}'")
        snk = b._build("sink", value, cm, _lookup("sink"), what=lambda t: f"sink '{t}'",
                       make=lambda cls, params: cls(params, base_dir=b.base_dir), extra_keys=SINK_EXTRA)
        if last is None:
            return sinks, inputs
        name = last
        if isinstance(value, dict) and "name" in value:
            name = _name(b, value["name"], cm.value_where("name"), "a sink's name") or last
        sinks[name], inputs[name] = snk, last
        return sinks, inputs
    items, sm = d["sinks"], m.child("sinks")
    if not isinstance(items, list) or not items:
        b.err(f"'sinks' must be a non-empty list of sinks, got {_type_name(items)}", sm.where,
              "write one sink per line: '  - {type: numpy, input: pw, path: out/pw.npy}'")
        return sinks, inputs
    taken: dict[str, str] = {}
    for i, item in enumerate(items):
        im = sm.items[i]
        ref = name = None
        if isinstance(item, dict):
            if "input" not in item:
                b.err(f"sinks[{i}] has no 'input'", im.where,
                      "each entry of 'sinks' names what it reads: 'input: NAME' (a stage or a source)")
            else:
                ref = _name(b, item["input"], im.value_where("input"), f"sinks[{i}]'s input")
            if "name" in item:
                name = _name(b, item["name"], im.value_where("name"), "a sink's name")
            else:
                name = ref
        if name is not None and name in taken:
            b.err(f"duplicate sink name '{name}'", im.value_where("name") if "name" in item else im.where,
                  f"'{name}' is already used by the sink at {taken[name]}; give this one a name: "
                  "'name: NAME' (a sink's name defaults to its input's)")
            name = None
        snk = b._build("sink", item, im, _lookup("sink"), what=lambda t, n=name: f"sink '{n or t}' ({t})",
                       make=lambda cls, params: cls(params, base_dir=b.base_dir), extra_keys=SINK_EXTRA)
        if name is not None and ref is not None:
            taken[name] = im.where
            sinks[name], inputs[name] = snk, ref
            refs[("sink", name, 0)] = im.value_where("input")
    return sinks, inputs


def read_graph(b: "_DocBuilder", d: dict, m: Marks, stages: list, names: list[str | None]) -> dict[str, Any]:
    """The graph fields of a PipelineConfig (``sources``, ``stage_inputs``, ``sinks``, ``sink_inputs``,
    ``refs_where``), with the structure checked (check_structure) when everything else read cleanly."""
    n_errors = len(b.errors)
    refs: dict = {}
    sources = read_sources(b, d, m)
    stage_inputs = read_inputs(b, d, m, names, sources, refs)
    written = [n for n in names if n is not None]
    last = written[-1] if written else (next(iter(sources)) if len(sources) == 1 else None)
    sinks, sink_inputs = read_sinks(b, d, m, last, refs)
    fields = dict(sources=sources, stage_inputs=stage_inputs, sinks=sinks, sink_inputs=sink_inputs, refs_where=refs)
    if len(b.errors) == n_errors and len(stages) == len(written):
        topo = Topology(sources=sources, stages=stages, stage_inputs=stage_inputs, sinks=sinks,
                        sink_inputs=sink_inputs, refs_where=refs, where=m.where)
        b.errors.extend(check_structure(topo))
    return fields
