"""The graph form of a pipeline document (docs/graphs.md): sources:, sinks:, input:/inputs:, every
problem located at FILE:LINE:COL, and YAML out that reads back the same graph."""

from __future__ import annotations

import re

import pytest

from pygpukit_dsp.errors import ConfigError, ConfigErrors
from pygpukit_dsp.graph import Graph, load_streams
from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.spec import load_text

HEAD = """version: 1
name: g
sample_rate: 8000
block_size: 64
channels: 2
"""
SOURCE = "source: {type: synth, signal: noise, duration_s: 0.1}\n"


def errors_of(text: str) -> list[ConfigError]:
    with pytest.raises(ConfigError) as info:
        load_text(text, filename="g.yaml")
    exc = info.value
    return exc.errors if isinstance(exc, ConfigErrors) else [exc]


def at(err: ConfigError) -> tuple[int, int]:
    m = re.fullmatch(r"g\.yaml:(\d+):(\d+)", err.where or "")
    assert m, err.where
    return int(m.group(1)), int(m.group(2))


def test_the_issue_form_reads_with_every_default():
    text = HEAD + SOURCE + """stages:
  - {name: ch, type: channelizer, channels: 2}
  - {name: pw, type: power, input: ch}
  - {name: sel, type: select, channels: [1, 0], input: ch}
  - {name: lo, type: gain, db: -6, input: sel}
  - {name: mixd, type: add, inputs: [sel, lo]}
sinks:
  - {name: power, type: numpy, input: pw}
  - {type: "null", input: mixd}
"""
    [cfg] = load_text(text, filename="g.yaml")
    assert cfg.graph_where == "g.yaml:9:29"  # the first key that makes it a graph: pw's input
    assert list(cfg.sources) == ["source"]
    assert cfg.stage_inputs == {"ch": ("source",), "pw": ("ch",), "sel": ("ch",), "lo": ("sel",),
                                "mixd": ("sel", "lo")}
    assert cfg.sink_inputs == {"power": "pw", "mixd": "mixd"}  # a sink's name defaults to its input's
    assert cfg.refs_where[("stage", "mixd", 1)] == "g.yaml:12:43"
    assert cfg.sinks["power"].where == "g.yaml:14:5"


def test_a_chain_document_is_not_a_graph():
    [cfg] = load_text(HEAD + SOURCE + "stages: [{type: gain, db: 1}]\nsink: {type: \"null\"}\n")
    assert cfg.graph_where is None and cfg.sources is None
    assert isinstance(Pipeline.from_config(cfg), Pipeline)


def test_named_sources_and_a_named_sink():
    text = HEAD + """sources:
  - {name: a, type: synth, signal: sine}
  - {name: b, type: synth, signal: noise}
stages:
  - {name: s, type: add, inputs: [a, b]}
sink: {name: out, type: "null"}
"""
    [cfg] = load_text(text)
    assert list(cfg.sources) == ["a", "b"] and cfg.sink_inputs == {"out": "s"}
    [g] = load_streams_text(text)
    assert isinstance(g, Graph) and g.branch()[0] == "a"


def load_streams_text(text: str):
    return [Graph.from_config(c) if c.graph_where else Pipeline.from_config(c) for c in load_text(text)]


def test_a_named_lone_source_is_read_by_its_name():
    text = HEAD + "source: {name: mic, type: synth}\nstages:\n  - {type: gain, db: 1}\n  - {type: power, input: mic}\n" \
        "sinks:\n  - {type: \"null\", input: gain}\n  - {type: \"null\", input: power}\n"
    [cfg] = load_text(text)
    assert cfg.stage_inputs == {"gain": ("mic",), "power": ("mic",)}


@pytest.mark.parametrize("body, line, col, words", [
    # a name nobody defines, with a did-you-mean
    ("stages:\n  - {name: sel, type: select, channels: [1]}\n  - {name: lo, type: gain, db: 1, input: sle}\n"
     "sink: {type: \"null\"}\n", 9, 42, "did you mean 'sel'"),
    # a cycle, at the reference that closes it
    ("stages:\n  - {name: a, type: gain, db: 1, input: b}\n  - {name: b, type: gain, db: 1, input: a}\n"
     "sink: {type: \"null\"}\n", 9, 41, "a cycle (a -> b -> a)"),
    # an unused stage, at the stage
    ("stages:\n  - {name: pw, type: power}\n  - {name: lo, type: gain, db: 1, input: source}\n"
     "sinks:\n  - {type: \"null\", input: lo}\n", 8, 5, "stage 'pw' (power): nothing reads its output"),
    # a stage with several inputs given one
    ("stages:\n  - {name: both, type: add, input: source}\nsink: {type: \"null\"}\n", 8, 5,
     "takes 2 or more inputs, got 1"),
    # a stage named like a source
    ("stages:\n  - {name: source, type: gain, db: 1, input: source}\nsink: {type: \"null\"}\n", 8, 5,
     "has the name of a source"),
    # a sink without an input
    ("stages:\n  - {type: gain, db: 1}\nsinks:\n  - {type: \"null\"}\n", 10, 5, "sinks[0] has no 'input'"),
    # sink: with input
    ("stages:\n  - {type: gain, db: 1}\nsink: {type: \"null\", input: gain}\n", 9, 22, "takes no 'input'"),
])
def test_graph_errors_are_located(body, line, col, words):
    errs = errors_of(HEAD + SOURCE + body)
    assert (line, col) in [at(e) for e in errs], [str(e) for e in errs]
    assert any(words in str(e) for e in errs), [str(e) for e in errs]


def test_source_and_sources_together_and_sources_without_names():
    text = HEAD + SOURCE + "sources:\n  - {type: synth}\nstages:\n  - {type: gain, db: 1}\nsink: {type: \"null\"}\n"
    assert at(errors_of(text)[0]) == (7, 1)
    text = HEAD + "sources:\n  - {type: synth}\n  - {name: b, type: synth}\nstages:\n  - {type: gain, db: 1, input: b}\n" \
        "sink: {type: \"null\"}\n"
    errs = errors_of(text)
    assert [at(e) for e in errs] == [(7, 5)] and "has no 'name'" in errs[0].message


def test_the_first_stage_of_several_sources_names_its_input():
    text = HEAD + "sources:\n  - {name: a, type: synth}\n  - {name: b, type: synth}\nstages:\n  - {type: gain, db: 1}\n" \
        "sink: {type: \"null\"}\n"
    [err] = errors_of(text)
    assert at(err) == (10, 5) and "names no input" in err.message and err.hint == "name what it reads: 'input: a'"


def test_duplicate_sink_names_and_sources():
    text = HEAD + SOURCE + "stages:\n  - {type: gain, db: 1}\nsinks:\n  - {type: \"null\", input: gain}\n" \
        "  - {type: \"null\", input: gain}\n"
    [err] = errors_of(text)
    assert at(err) == (11, 5) and err.message == "duplicate sink name 'gain'"


def test_several_problems_come_together():
    text = HEAD + SOURCE + "stages:\n  - {name: a, type: gain, db: 1, input: nope}\n  - {name: b, type: gian, input: a}\n" \
        "sink: {type: \"null\"}\n"
    errs = errors_of(text)
    assert "unknown stage type 'gian'" in errs[0].message  # the structure is checked once the parts read


def test_pipeline_from_yaml_reads_one_path_and_points_a_graph_to_graph(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text(HEAD + SOURCE + "stages:\n  - {type: power, input: gain}\n  - {type: gain, db: 1, input: source}\n"
                 "sinks:\n  - {name: out, type: \"null\", input: power}\n")
    p = Pipeline.from_yaml(f)  # one path, written as a graph (its stages out of order): that path
    assert [st.name for st in p.stages] == ["gain", "power"] and (p.source_name, p.sink_name) == ("source", "out")
    assert isinstance(Graph.from_yaml(f), Graph)
    [g] = load_streams(f)
    assert isinstance(g, Graph) and g.as_chain().to_config() == p.to_config()
    f.write_text(HEAD + SOURCE + "stages:\n  - {type: gain, db: 1}\nsinks:\n  - {type: \"null\", input: gain}\n"
                 "  - {type: \"null\", input: source}\n")
    with pytest.raises(ConfigError) as info:
        Pipeline.from_yaml(f)
    assert info.value.where == f"{f}:9:1" and "Graph.from_yaml" in info.value.hint


GRAPH = HEAD + SOURCE + """stages:
  - {name: ch, type: channelizer, channels: 2}
  - {name: pw, type: power, input: ch}
  - {name: sel, type: select, channels: [1, 0], input: ch}
  - {name: lo, type: gain, db: -6}
  - {name: mixd, type: add, inputs: [sel, lo]}
  - {name: both, type: combine, inputs: [pw, mixd]}
sinks:
  - {name: power, type: numpy, input: pw}
  - {type: "null", input: both}
"""


def test_to_yaml_round_trips(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text(GRAPH)
    g = Graph.from_yaml(f)
    again = tmp_path / "again.yaml"
    again.write_text(g.to_yaml())
    g2 = Graph.from_yaml(again)
    assert g2.to_config() == g.to_config()
    assert g2.stage_inputs == g.stage_inputs and g2.sink_inputs == g.sink_inputs and list(g2.sinks) == list(g.sinks)
    doc = g.to_config()
    assert doc["stages"][1] == {"type": "power", "name": "pw"}  # reads the entry above: no input written
    assert doc["stages"][2]["input"] == "ch" and doc["stages"][4]["inputs"] == ["sel", "lo"]
    assert doc["sinks"] == [{"name": "power", "type": "numpy", "input": "pw"}, {"type": "null", "input": "both"}]


def test_a_chain_as_a_graph_writes_the_chain_form(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(HEAD + SOURCE + "stages: [{type: gain, db: 1}, {type: power}]\nsink: {type: \"null\"}\n")
    p, g = Pipeline.from_yaml(f), Graph.from_yaml(f)
    assert g.to_config() == p.to_config()


def test_several_sources_round_trip(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(HEAD + "sources:\n  - {name: a, type: synth}\n  - {name: b, type: synth, signal: noise}\n"
                 "stages:\n  - {name: s, type: multiply, inputs: [a, b]}\nsink: {name: out, type: \"null\"}\n")
    g = Graph.from_yaml(f)
    doc = g.to_config()
    assert doc["sources"] == [{"name": "a", "type": "synth"}, {"name": "b", "type": "synth", "signal": "noise"}]
    assert doc["sinks"] == [{"name": "out", "type": "null", "input": "s"}]
    (tmp_path / "t.yaml").write_text(g.to_yaml())
    assert Graph.from_yaml(tmp_path / "t.yaml").to_config() == doc
