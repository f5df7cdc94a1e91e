"""Documents from configs and readable YAML that loads back to the same pipelines."""

import numpy as np
import pytest

from pygpukit_dsp.errors import ConfigError
from pygpukit_dsp.io.synth import SynthSource
from pygpukit_dsp.spec import dump_yaml, load_text, pipeline_document

SINGLE = """\
version: 1
name: demo
sample_rate: 48000
block_size: 256
channels: 2
backend: cpu
qos: {class: realtime, deadline_ms: 5}
source: {type: synth, signal: multitone, freqs_hz: [440, 1000.5], seed: 1, channel_delay_samples: [0, 0.5]}
stages:
  - {type: xfilter, name: lowpass, design: {numtaps: 129, cutoff_hz: 4000}}
  - {type: xfilter, taps: [0.25, 0.5, 0.25], mode: fft}
  - {type: xgain, gain: 1e-3}
sink: {type: "null"}
"""

MULTI = """\
version: 1
sample_rate: 16000
pipelines:
  - {name: a, channels: 1, source: {type: synth}, sink: {type: numpy, path: out/a.npy}}
  - {name: b, block_size: 64, dtype: complex64, stages: [{type: xgain, gain: 2}]}
"""


def test_single_pipeline_round_trips():
    first = load_text(SINGLE)
    doc = pipeline_document(first)
    assert doc["version"] == 1 and doc["name"] == "demo" and doc["sample_rate"] == 48000
    text = dump_yaml(doc)
    again = load_text(text)
    assert pipeline_document(again) == doc
    assert [s.name for s in again[0].stages] == ["lowpass", "xfilter", "xgain"]
    assert again[0].stages[2].params.gain == 1e-3
    assert again[0].qos == first[0].qos


def test_multi_pipeline_round_trips_in_the_pipelines_form():
    configs = load_text(MULTI)
    doc = pipeline_document(configs)
    assert list(doc) == ["version", "pipelines"]
    assert [p["name"] for p in doc["pipelines"]] == ["a", "b"]
    assert doc["pipelines"][1]["sample_rate"] == 16000  # defaults are written into each pipeline
    again = load_text(dump_yaml(doc))
    assert pipeline_document(again) == doc


def test_config_to_document_is_pipeline_document():
    [cfg] = load_text(SINGLE)
    assert cfg.to_document() == pipeline_document(cfg)


def test_dump_is_readable_block_yaml_with_flow_scalar_lists():
    doc = {"version": 1, "name": "x", "source": {"type": "synth", "freqs_hz": [1.0, 2.5]},
           "stages": [{"type": "mix", "matrix": [[1, 0], [0, 1]]}], "sink": {"type": "null"}}
    assert dump_yaml(doc) == (
        "version: 1\n"
        "name: x\n"
        "source:\n"
        "  type: synth\n"
        "  freqs_hz: [1.0, 2.5]\n"
        "stages:\n"
        "  - type: mix\n"
        "    matrix:\n"
        "      - [1, 0]\n"
        "      - [0, 1]\n"
        "sink:\n"
        "  type: 'null'\n")


def test_strings_that_look_like_other_types_are_quoted():
    values = ["null", "true", "yes", "1e3", "48000", "0x10", ".inf", "2024-01-01", "a: b", ""]
    text = dump_yaml({"version": 1, "stages": [{"type": "xgain", "name": v} for v in values]})
    from pygpukit_dsp.spec import load_marked

    doc, _ = load_marked(text)
    assert [s["name"] for s in doc["stages"]] == values


def test_numpy_values_tuples_and_special_floats_dump_as_plain_yaml():
    from pygpukit_dsp.spec import load_marked

    text = dump_yaml({"a": np.float32(0.5), "b": np.arange(3), "c": (1, 2), "d": float("inf"),
                      "e": 1e-7, "f": np.int64(7)})
    doc, _ = load_marked(text)
    assert doc == {"a": 0.5, "b": [0, 1, 2], "c": [1, 2], "d": float("inf"), "e": 1e-7, "f": 7}


def test_values_yaml_cannot_hold_are_config_errors():
    with pytest.raises(ConfigError, match="cannot write a value of type builtin_function_or_method"):
        dump_yaml({"version": 1, "x": print})


def test_pipeline_document_from_a_mapping_with_objects():
    doc = pipeline_document({"name": "m", "sample_rate": 8000.0, "block_size": 16,
                             "source": SynthSource(freq_hz=50), "stages": [{"type": "xgain"}]})
    assert doc == {"version": 1, "name": "m", "sample_rate": 8000, "block_size": 16,
                   "source": {"type": "synth", "freq_hz": 50.0}, "stages": [{"type": "xgain"}]}
    assert pipeline_document(load_text(dump_yaml(doc))) == {**doc, "backend": "auto"}
