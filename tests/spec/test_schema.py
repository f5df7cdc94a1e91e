"""The pipeline document: every class of error with its exact FILE:LINE:COL, defaults, paths.

Stage types ``xgain`` and ``xfilter`` are stand-ins registered by conftest.py.
"""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pygpukit_dsp.errors import ConfigError, ConfigErrors
from pygpukit_dsp.io.audiofile import AudioFileSource
from pygpukit_dsp.io.null import NullSink
from pygpukit_dsp.io.synth import SynthSource
from pygpukit_dsp.qos import QoS
from pygpukit_dsp.spec import (DEFAULT_BLOCK_SIZE, PipelineConfig, dump_yaml, load_file, load_text,
                                pipeline_document)


def error(text: str, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        load_text(text, "p.yaml", **kw)
    return e.value


def errors(text: str) -> list[ConfigError]:
    e = error(text)
    return e.errors if isinstance(e, ConfigErrors) else [e]


def where_of(text: str) -> str:
    return error(text).where


# ---------------------------------------------------------------------------- valid documents

FULL = """\
version: 1
name: demo
sample_rate: 48000
block_size: 256
channels: 2
dtype: complex64
backend: cpu
qos: {class: realtime, deadline_ms: 5}
source: {type: synth, signal: sine, freq_hz: 1000, duration_s: 0.5, seed: 1}
stages:
  - {type: xfilter, name: lowpass, design: {numtaps: 129, cutoff_hz: 4000}}
  - type: xgain
    gain: 0.5
sink: {type: "null"}
"""


def test_single_pipeline_builds_every_component_with_its_location():
    [cfg] = load_text(FULL, "demo.yaml")
    assert isinstance(cfg, PipelineConfig)
    assert (cfg.name, cfg.sample_rate, cfg.block_size, cfg.channels, cfg.dtype, cfg.backend) == \
        ("demo", 48000.0, 256, 2, "complex64", "cpu")
    assert cfg.qos == QoS(**{"class": "realtime", "deadline_ms": 5})
    assert cfg.where == "demo.yaml:1:1" and cfg.path is None
    assert isinstance(cfg.source, SynthSource) and cfg.source.where == "demo.yaml:9:9"
    assert cfg.source.params.freq_hz == 1000 and cfg.source.params.duration_s == 0.5
    assert [s.name for s in cfg.stages] == ["lowpass", "xgain"]
    assert [s.where for s in cfg.stages] == ["demo.yaml:11:5", "demo.yaml:12:5"]
    assert cfg.stages[0].params.design.cutoff_hz == 4000 and cfg.stages[1].params.gain == 0.5
    assert isinstance(cfg.sink, NullSink) and cfg.sink.where == "demo.yaml:14:7"


def test_defaults_when_keys_are_left_out():
    [cfg] = load_text("version: 1\n")
    assert (cfg.name, cfg.sample_rate, cfg.block_size, cfg.channels, cfg.dtype, cfg.backend) == \
        ("pipeline", None, DEFAULT_BLOCK_SIZE, None, None, "auto")
    assert cfg.qos == QoS() and cfg.source is None and cfg.stages == [] and cfg.sink is None


def test_default_stage_names_are_the_type_with_suffixes_for_repeats():
    text = "version: 1\nstages:\n  - {type: xgain}\n  - {type: xgain}\n  - {type: xgain, name: xgain_2}\n"
    [cfg] = load_text(text)
    assert [s.name for s in cfg.stages] == ["xgain", "xgain_3", "xgain_2"]


def test_yaml_conveniences_anchors_merge_keys_and_1e3_floats():
    text = ("version: 1\nsample_rate: 48e3\nstages:\n  - &g {type: xgain, gain: 2}\n"
            "  - {<<: *g, name: louder, gain: 3}\n")
    [cfg] = load_text(text)
    assert cfg.sample_rate == 48000.0
    assert [(s.name, s.params.gain) for s in cfg.stages] == [("xgain", 2.0), ("louder", 3.0)]


MULTI = """\
version: 1
sample_rate: 16000
block_size: 512
backend: cpu
pipelines:
  - name: a
    source: {type: synth, freq_hz: 100}
    channels: 1
  - name: b
    block_size: 64
    dtype: complex64
    stages: [{type: xgain}]
"""


def test_multi_pipeline_top_level_values_are_defaults():
    a, b = load_text(MULTI, "m.yaml")
    assert (a.name, a.sample_rate, a.block_size, a.channels, a.dtype, a.backend) == \
        ("a", 16000.0, 512, 1, None, "cpu")
    assert (b.name, b.sample_rate, b.block_size, b.channels, b.dtype, b.backend) == \
        ("b", 16000.0, 64, None, "complex64", "cpu")
    assert a.where == "m.yaml:6:5" and b.where == "m.yaml:9:5"


def test_relative_paths_resolve_against_the_yaml_folder(tmp_path, monkeypatch):
    sub = tmp_path / "conf"
    (sub / "data").mkdir(parents=True)
    sf.write(str(sub / "data" / "in.wav"), np.zeros((8, 1), np.float32), 8000, subtype="FLOAT")
    (sub / "data" / "taps.txt").write_text("1 2 3\n")
    (sub / "p.yaml").write_text(
        "version: 1\nsource: {type: file, path: data/in.wav}\n"
        "stages:\n  - {type: xfilter, taps_file: data/taps.txt}\n"
        "sink: {type: file, path: out/o.wav}\n")
    monkeypatch.chdir(tmp_path)  # somewhere else than the YAML folder
    [cfg] = load_file("conf/p.yaml")
    assert cfg.path == Path("conf/p.yaml") and cfg.name == "p"
    assert isinstance(cfg.source, AudioFileSource)
    assert cfg.source.full_path == sub.resolve() / "data" / "in.wav"
    assert cfg.stages[0].base_dir == sub.resolve()
    assert cfg.stages[0].resolve_path("data/taps.txt").is_file()
    assert cfg.sink.full_path == sub.resolve() / "out" / "o.wav"
    assert cfg.source.where == "conf/p.yaml:2:9"


def test_load_text_resolves_against_base_dir(tmp_path):
    (tmp_path / "t.txt").write_text("1\n")
    [cfg] = load_text("version: 1\nstages: [{type: xfilter, taps_file: t.txt}]\n", base_dir=tmp_path)
    assert cfg.stages[0].base_dir == tmp_path
    err = error("version: 1\nstages: [{type: xfilter, taps_file: t.txt}]\n", base_dir=tmp_path / "x")
    assert err.where == "p.yaml:2:37"


# ---------------------------------------------------------------------------- errors, one per class


def test_message_format_is_file_line_col_message_hint():
    e = error("version: 1\nsourc: {type: synth}\n")
    assert str(e) == "p.yaml:2:1: unknown key 'sourc' at the top level (did you mean 'source'?)"


def test_yaml_syntax_error_uses_the_parser_mark():
    e = error("version: 1\nsource: {type: synth\nsink: {type: 'null'}\n")
    assert e.where == "p.yaml:3:5" and e.message.startswith("YAML syntax error: expected ',' or '}'")
    assert "flow mapping that starts at line 2, column 9" in e.hint


def test_yaml_bad_indentation_and_tabs():
    assert where_of("version: 1\nstages:\n  - type: xgain\n   gain: 2\n") == "p.yaml:4:4"
    e = error("version: 1\nstages:\n\t- type: xgain\n")
    assert e.where == "p.yaml:3:1" and "tabs" in e.hint


def test_two_yaml_documents_are_an_error():
    e = error("version: 1\n---\nversion: 1\n")
    assert e.where == "p.yaml:2:1" and "pipelines:" in e.hint


@pytest.mark.parametrize("text", ["", "\n\n", "# just a comment\n"])
def test_empty_file(text):
    e = error(text)
    assert e.where == "p.yaml:1:1" and e.message == "the pipeline file is empty"
    assert "version: 1" in e.hint


@pytest.mark.parametrize("text,kind", [("- a\n- b\n", "a list"), ("hello\n", "a string")])
def test_top_level_not_a_mapping(text, kind):
    e = error(text)
    assert e.where == "p.yaml:1:1" and e.message.endswith(f"got {kind}")


@pytest.mark.parametrize("text,where,tag", [
    ("version: 1\nsource: !!python/object:os.system {}\n", "p.yaml:2:9", "!!python/object:os.system"),
    ("version: 1\nname: !!python/name:os.system\n", "p.yaml:2:7", "!!python/name:os.system"),
    ("version: 1\nstages:\n  - !!python/object/apply:os.system [ls]\n", "p.yaml:3:5",
     "!!python/object/apply:os.system"),
    ("version: 1\nsource: !synth {}\n", "p.yaml:2:9", "!synth"),
    ("version: 1\nname: !!binary aGVsbG8=\n", "p.yaml:2:7", "!!binary"),
])
def test_unsafe_and_unknown_tags_are_rejected(text, where, tag):
    e = error(text)
    assert e.where == where and e.message == f"YAML tag '{tag}' is not allowed here"
    assert "plain data only" in e.hint


def test_duplicate_keys_top_level_and_nested():
    e = error("version: 1\nname: a\nblock_size: 8\nname: b\n")
    assert e.where == "p.yaml:4:1" and e.message == "duplicate key 'name'"
    assert "line 2, column 1" in e.hint
    e = error("version: 1\nstages:\n  - {type: xgain, gain: 1, gain: 2}\n")
    assert e.where == "p.yaml:3:28" and "line 3, column 19" in e.hint


def test_missing_version():
    e = error("name: x\nblock_size: 8\n")
    assert e.where == "p.yaml:1:1" and e.message == "missing 'version'" and "version: 1" in e.hint


def test_unsupported_and_mistyped_version():
    e = error("name: x\nversion: 2\n")
    assert e.where == "p.yaml:2:10" and e.message == "unsupported format version 2"
    assert "version 1" in e.hint
    e = error("version: '1'\n")
    assert e.where == "p.yaml:1:10" and e.message == "version must be an integer, got '1'"


def test_unknown_top_level_key_with_did_you_mean():
    e = error("version: 1\nblocksize: 512\n")
    assert e.where == "p.yaml:2:1" and e.hint == "did you mean 'block_size'?"
    e = error("version: 1\nzzz: 1\n")
    assert e.hint.startswith("allowed keys: version, name, sample_rate")


@pytest.mark.parametrize("line,where,message,hint", [
    ("block_size: abc", "p.yaml:2:13", "block_size must be a whole number (an integer) from 1 to 268435456 "
     "samples (the limit), got 'abc'", "block_size: 1024"),
    ("block_size: 10.5", "p.yaml:2:13", "block_size must be a whole number (an integer) from 1 to 268435456 "
     "samples (the limit), got the float 10.5", "without a decimal point or exponent"),
    ("block_size: 1e12", "p.yaml:2:13", "block_size must be a whole number (an integer) from 1 to 268435456 "
     "samples (the limit), got the float 1e+12", "block_size: 1024"),
    ("block_size: 4000000000", "p.yaml:2:13", "block_size 4000000000 is above the limit of 268435456 samples",
     "block_size: 1024"),
    ("channels: 0", "p.yaml:2:11", "channels must be an integer >= 1, got 0", None),
    ("channels: true", "p.yaml:2:11", "channels must be an integer >= 1, got true", None),
    ("dtype: float64", "p.yaml:2:8", "dtype 'float64' is not supported", "allowed: float32, complex64"),
    ("sample_rate: -5", "p.yaml:2:14", "sample_rate must be a positive number of samples per second, got -5",
     None),
    ("sample_rate: 48k", "p.yaml:2:14", "sample_rate must be a positive number of samples per second, "
     "got '48k'", None),
    ("backend: gpu", "p.yaml:2:10", "backend 'gpu' is not one of auto, cuda, cpu", "use 'cuda' for the GPU"),
    ("backend: cdua", "p.yaml:2:10", "backend 'cdua' is not one of auto, cuda, cpu", "did you mean 'cuda'?"),
    ("name: ''", "p.yaml:2:7", "name must be a non-empty string, got ''", None),
    ("qos: realtime", "p.yaml:2:6", "qos must be a mapping, got a string", "class: realtime"),
])
def test_wrong_types_of_pipeline_settings(line, where, message, hint):
    e = error(f"version: 1\n{line}\n")
    assert (e.where, e.message) == (where, message)
    if hint:
        assert hint in e.hint


def test_qos_errors_are_located_inside_the_qos_mapping():
    e = error("version: 1\nqos: {class: realtim}\n")
    assert e.where == "p.yaml:2:14" and "'realtime', 'throughput' or 'best_effort'" in e.message
    e = error("version: 1\nqos: {clas: realtime}\n")
    assert e.where == "p.yaml:2:7" and e.hint == "did you mean 'class'?"


@pytest.mark.parametrize("text,where,message,hint", [
    ("stages:\n  - {type: xfiltr}\n", "p.yaml:3:12", "unknown stage type 'xfiltr'", "did you mean 'xfilter'?"),
    ("source: {type: synht}\n", "p.yaml:2:16", "unknown source type 'synht'", "did you mean 'synth'?"),
    ("sink: {type: nul}\n", "p.yaml:2:14", "unknown sink type 'nul'", "did you mean 'null'?"),
    ("sink: {type: zzzzzz}\n", "p.yaml:2:14", "unknown sink type 'zzzzzz'", "known sinks: "),
])
def test_unknown_component_type_with_did_you_mean(text, where, message, hint):
    e = error("version: 1\n" + text)
    assert (e.where, e.message) == (where, message) and e.hint.startswith(hint)


def test_bare_null_type_gets_a_quoting_hint():
    e = error("version: 1\nsink: {type: null}\n")
    assert e.where == "p.yaml:2:14" and 'type: "null"' in e.hint


def test_unknown_parameter_points_at_the_key_with_did_you_mean():
    e = error("version: 1\nsource:\n  type: synth\n  freq: 440\n")
    assert e.where == "p.yaml:4:3"
    assert e.message == "source 'synth': unknown parameter 'freq'" and e.hint == "did you mean 'freq_hz'?"
    e = error("version: 1\nstages:\n  - type: xfilter\n    design: {numtaps: 3, cutoff_hz: 5, nmtaps: 1}\n")
    assert e.where == "p.yaml:4:40" and e.hint == "did you mean 'numtaps'?"


def test_invalid_parameter_value_points_at_the_value():
    e = error("version: 1\nsource: {type: synth, amplitude: -1}\n")
    assert e.where == "p.yaml:2:34" and e.message.startswith("source 'synth': amplitude:")
    e = error("version: 1\nstages:\n  - name: lp\n    type: xfilter\n    design: {numtaps: 0, cutoff_hz: 10}\n")
    assert e.where == "p.yaml:5:23" and e.message.startswith("stage 'lp' (xfilter): design.numtaps:")
    e = error("version: 1\nstages:\n  - {type: xfilter, taps: [1, x, 2]}\n")
    assert e.where == "p.yaml:3:31" and "taps.1" in e.message


def test_errors_raised_by_a_component_itself_are_located_and_labelled():
    e = error("version: 1\nstages:\n  - {type: xfilter, taps: [1], mode: fancy}\n")
    assert e.where == "p.yaml:3:38" and e.message == "stage 'xfilter': mode 'fancy' is not direct or fft"


def test_missing_required_parameter_points_at_the_component_mapping():
    e = error("version: 1\nsource:\n  type: file\n")
    assert e.where == "p.yaml:3:3" and e.message == "source 'file': missing required parameter 'path'"
    e = error("version: 1\nstages:\n  - type: xfilter\n    design:\n      numtaps: 3\n")
    assert e.where == "p.yaml:5:7" and "missing required parameter 'design.cutoff_hz'" in e.message
    e = error("version: 1\nstages:\n  - {type: xfilter}\n")  # a rule across parameters
    assert e.where == "p.yaml:3:5" and "give exactly one of design, taps, taps_file" in e.message


def test_missing_file_points_at_the_value(tmp_path):
    e = error("version: 1\nstages:\n  - {type: xfilter, taps_file: nope.txt}\n", base_dir=tmp_path)
    assert e.where == "p.yaml:3:32" and "nope.txt does not exist" in e.message
    e = error("version: 1\nsource:\n  type: file\n  path: missing.wav\n", base_dir=tmp_path)
    assert e.where == "p.yaml:4:9" and f"{tmp_path / 'missing.wav'} does not exist" in e.message


def test_duplicate_pipeline_names():
    e = error("version: 1\npipelines:\n  - name: a\n  - name: b\n  - name: a\n")
    assert e.where == "p.yaml:5:11" and e.message == "duplicate pipeline name 'a'"
    assert "p.yaml:3:5" in e.hint


def test_duplicate_explicit_stage_names():
    e = error("version: 1\nstages:\n  - {type: xgain, name: g}\n  - {type: xfilter, taps: [1], name: g}\n")
    assert e.where == "p.yaml:4:38" and e.message == "duplicate stage name 'g'"
    assert "p.yaml:3:5" in e.hint


def test_pipelines_next_to_single_pipeline_keys():
    errs = errors("version: 1\nsample_rate: 8000\nsource: {type: synth}\npipelines:\n  - name: a\n"
                  "stages: []\n")
    assert [(e.where, e.message) for e in errs] == [
        ("p.yaml:3:1", "'source' cannot be used next to 'pipelines:'"),
        ("p.yaml:6:1", "'stages' cannot be used next to 'pipelines:'"),
    ]
    assert "sample_rate" in errs[0].hint  # says which keys may stay at the top


def test_multi_form_entry_errors():
    errs = errors("version: 1\npipelines:\n  - block_size: 3\n    version: 1\n  - 5\n  - {name: c, sorce: {}}\n")
    assert [(e.where, e.message) for e in errs] == [
        ("p.yaml:4:5", "'version' belongs at the top of the file, not inside a pipeline"),
        ("p.yaml:3:5", "pipelines[0] has no 'name'"),
        ("p.yaml:5:5", "pipelines[1] must be a mapping (name, source, stages, sink...), got an integer"),
        ("p.yaml:6:15", "unknown key 'sorce' in pipelines[2]"),
    ]
    e = error("version: 1\npipelines: []\n")
    assert e.where == "p.yaml:2:12" and "non-empty list" in e.message


def test_stages_not_a_list():
    e = error("version: 1\nstages: {type: xgain}\n")
    assert e.where == "p.yaml:2:9" and e.message == "stages must be a list, got a mapping"


def test_stage_without_type_and_stage_not_a_mapping():
    errs = errors("version: 1\nstages:\n  - {gain: 2}\n  - xgain\n")
    assert (errs[0].where, errs[0].message) == ("p.yaml:3:5", "stage has no 'type'")
    assert "xgain" in errs[0].hint
    assert (errs[1].where, errs[1].message) == ("p.yaml:4:5",
                                               "stage must be a mapping with a 'type', got a string")


def test_component_given_as_null():
    e = error("version: 1\nsink:\n")
    assert e.where == "p.yaml:2:6" and e.message == "sink is empty" and 'type: "null"' in e.hint


def test_many_errors_are_collected_in_one_pass():
    text = ("version: 1\nblock_size: 0\ndtype: f32\nsource: {type: synth, frq: 1}\n"
            "stages:\n  - {type: xgain, gain: loud}\n  - {type: nope}\nsink: {type: numpy, paht: x}\n")
    e = error(text)
    assert isinstance(e, ConfigErrors)
    assert [x.where for x in e.errors] == ["p.yaml:2:13", "p.yaml:3:8", "p.yaml:4:23", "p.yaml:6:25",
                                          "p.yaml:7:12", "p.yaml:8:21"]
    assert str(e).count("\n") == 5  # one line per error


def test_load_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_file(tmp_path / "nope.yaml")
    (tmp_path / "bin.yaml").write_bytes(b"version: 1\nname: \xff\xfe\n")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_file(tmp_path / "bin.yaml")
    (tmp_path / "bad.yaml").write_text("version: 1\nblock_size: x\n")
    with pytest.raises(ConfigError) as e:
        load_file(tmp_path / "bad.yaml")
    assert e.value.where == f"{tmp_path / 'bad.yaml'}:2:13"


def test_a_misspelt_parameter_is_not_also_reported_missing():
    errs = errors("version: 1\nstages:\n  - type: xfilter\n    design: {numtaps: 3, cutof_hz: 10}\n")
    assert [(e.where, e.message) for e in errs] == [
        ("p.yaml:4:26", "stage 'xfilter': unknown parameter 'design.cutof_hz'")]


# ---------------------------------------------------------------------------- docs/yaml.md stays true

DOCS = Path(__file__).resolve().parents[2] / "docs" / "yaml.md"


def _blocks(lang: str) -> list[str]:
    text = DOCS.read_text()
    parts = text.split(f"```{lang}\n")[1:]
    return [p.split("```")[0] for p in parts]


def test_every_complete_yaml_example_in_the_docs_loads(tmp_path):
    examples = [b for b in _blocks("yaml") if b.startswith("version: 1") and "chanels" not in b]
    assert len(examples) >= 3
    for text in examples:
        configs = load_text(text, "doc.yaml", base_dir=tmp_path)
        assert configs and all(c.name for c in configs)
        doc = pipeline_document(configs)  # and they round-trip
        assert pipeline_document(load_text(dump_yaml(doc), base_dir=tmp_path)) == doc


def test_the_documented_error_message_is_the_real_one():
    [bad] = [b for b in _blocks("yaml") if "chanels" in b]
    [shown] = [b for b in _blocks("console") if "chanels" in b]
    e = error_in(bad, "mic_eq.yaml")
    assert "$ gk-stream validate mic_eq.yaml\ngk-stream: error: " + str(e) + "\n" == shown


def error_in(text: str, filename: str) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        load_text(text, filename)
    return e.value
