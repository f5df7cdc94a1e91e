"""gk-stream stages: every stage, source and sink type, each parameter's row holding its type, its
default ('required', 'not set' or 'default X') and its meaning; nested models' keys indented below.
Run as a user runs it: a subprocess."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pygpukit_dsp
from pygpukit_dsp.io import SINKS, SOURCES
from pygpukit_dsp.stages import STAGES

PACKAGE_PARENT = Path(pygpukit_dsp.__file__).resolve().parents[1]


def gk(*args, python_flags=(), timeout=120):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_PARENT),
                                                                     os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, *python_flags, "-m", "pygpukit_dsp.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def catalog(text: str) -> dict[str, dict[str, dict[str, list[str]]]]:
    """{section: {type: {parameter: [type, default, meaning]}}}; nested keys as 'design.numtaps'."""
    out: dict = {}
    section = entry = None
    parents: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        head = re.match(r"^(stages|sources|sinks) \(YAML: ", line)
        if head:
            section = out.setdefault(head.group(1), {})
            continue
        top = re.match(r"^([a-z_]+): (.*) \(Python: (\S+)\)$", line)
        if top:
            entry = section.setdefault(top.group(1), {"(class)": [top.group(3)]})
            continue
        row = re.match(r"^    ((?:    )*)(\S.*)$", line)
        assert row and entry is not None, f"not a catalog line: {line!r}"
        if row.group(2) == "(no parameters)":
            continue
        depth = len(row.group(1)) // 4
        name, *cols = re.split(r"\s{2,}", row.group(2))
        parents[depth:] = [name]
        entry[".".join(parents)] = cols
    return out


@pytest.fixture(scope="module")
def listing():
    r = gk("stages")
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_every_stage_source_and_sink_is_listed_with_every_parameter(listing):
    cat = catalog(listing)
    for section, table in (("stages", STAGES), ("sources", SOURCES), ("sinks", SINKS)):
        assert sorted(cat[section]) == sorted(table)
        for type_name, cls in table.items():
            rows = cat[section][type_name]
            assert rows["(class)"] == [f"{'stages' if section == 'stages' else 'io'}.{cls.__name__}"]
            for pname, field in cls.Params.model_fields.items():
                kind, default, meaning = rows[pname]
                assert (default == "required") == field.is_required(), (type_name, pname, default)
                assert meaning == field.description
                assert not re.search(r"typing|Annotated|Optional|ndarray|NoneType|<class", kind), kind
    assert "PydanticUndefined" not in listing


@pytest.mark.parametrize("section, type_name, param, kind, default", [
    ("stages", "fir", "method", "'auto' | 'direct' | 'matmul' | 'overlap_save'", "default 'auto'"),
    ("stages", "fir", "taps", "array of numbers", "not set"),
    ("stages", "fir", "design", "mapping", "not set"),
    ("stages", "fir", "design.numtaps", "integer", "required"),
    ("stages", "fir", "design.cutoff_hz", "number | list of numbers", "required"),
    ("stages", "fir", "design.window", "string | list of strings and numbers", "default 'hamming'"),
    ("stages", "sos", "design.order", "integer", "required"),
    ("stages", "sos", "design.kind", "'butter' | 'cheby1' | 'cheby2' | 'ellip' | 'bessel'", "default 'butter'"),
    ("stages", "kernel", "output.dtype", "'float32' | 'complex64'", "not set"),
    ("stages", "kernel", "params", "list of numbers", "default []"),
    ("stages", "average", "frames", "integer", "required"),
    ("stages", "delay", "samples", "integer | list of integers", "required"),
    ("stages", "db", "floor_db", "number", "default -200.0"),
    ("stages", "channelizer", "taps", "array of real numbers", "not set"),
    ("sources", "synth", "freqs_hz", "list of numbers", "not set"),
    ("sources", "synth", "rate", "'asap' | 'realtime'", "default 'asap'"),
    ("sources", "file", "path", "path", "required"),
    ("sources", "sigmf", "verify_checksum", "true/false", "default false"),
    ("sources", "callback", "fn", "function", "not set"),
    ("sinks", "zmq", "bind", "true/false", "default true"),
    ("sinks", "spectrum", "fps", "number", "default 15.0"),
])
def test_rows_say_type_and_default_in_words(listing, section, type_name, param, kind, default):
    assert catalog(listing)[section][type_name][param][:2] == [kind, default]


def test_one_name_shows_that_type_and_both_kinds_of_a_shared_name():
    r = gk("stages", "fir")
    assert r.returncode == 0, r.stderr
    cat = catalog(r.stdout)
    assert list(cat) == ["stages"] and list(cat["stages"]) == ["fir"]
    assert "design.pass_zero" in cat["stages"]["fir"]
    r = gk("stages", "file")
    assert r.returncode == 0, r.stderr
    cat = catalog(r.stdout)
    assert cat["sources"]["file"]["(class)"] == ["io.AudioFileSource"]
    assert cat["sinks"]["file"]["(class)"] == ["io.AudioFileSink"]
    assert "stages" not in cat


def test_an_unknown_name_is_a_config_error_with_did_you_mean():
    r = gk("stages", "stf")
    assert r.returncode == 2 and "did you mean 'stft'" in r.stderr and "Traceback" not in r.stderr
    r = gk("stages", "synht")
    assert r.returncode == 2 and "did you mean 'synth'" in r.stderr


def test_the_catalog_loads_no_native_module():
    r = gk("stages", "fir", python_flags=("-X", "importtime"))
    assert r.returncode == 0, r.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time")}
    assert "pygpukit_dsp.stages.params_doc" in imported
    assert not {m for m in imported if m.startswith(("pygpukit_dsp._native", "pygpukit_dsp_core"))}
