"""The YAML loader, fuzzed ("Bad input, fuzzed").

Whole pipeline documents are generated (every top-level key, with plausible and adversarial values:
NaN, inf, negative, huge, wrong types, unknown keys and stage types), and the example files in
pipelines/ are damaged as text (characters replaced, truncated, lines dropped or duplicated,
indentation and tabs broken, bytes that are not UTF-8). Loading one with ``Pipeline.load_all``
gives pipelines or a ConfigError located ``FILE:LINE:COL:``, nothing else; a loaded pipeline whose
source needs nothing outside (synth, null, numpy) is also opened, its specs propagated, checked
against the machine's memory and a few blocks streamed on the CPU, with the same rule.
GK_FUZZ_EXAMPLES sets the examples per test (docs/yaml.md, "Limits and bad input").
"""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, note
from hypothesis import strategies as st

import pygpukit_dsp
from pygpukit_dsp.errors import ConfigError, ConfigErrors, UnsupportedError
from pygpukit_dsp.io.base import SINKS, SOURCES, StreamFormat
from pygpukit_dsp.limits import block_memory, check_memory
from pygpukit_dsp.pipeline import Pipeline
from pygpukit_dsp.stages import STAGES

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "pipelines").glob("*.yaml"))
_spec = importlib.util.spec_from_file_location("_gk_fuzz_values", ROOT / "tests/stages/fuzz_values.py")
fv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fv)

EXAMPLES_PER_TEST = 400
OUTCOMES: Counter = Counter()  # (test, outcome) -> examples, reported by test_outcomes_were_counted
# callback imports a module named in the file, audio/duplex open a sound card: not fuzzed here
SOURCE_TYPES = sorted(set(SOURCES) - {"callback", "audio", "duplex"})
SINK_TYPES = sorted(set(SINKS) - {"callback", "audio", "duplex"})
OPENABLE = ("synth", "null", "numpy")  # sources that need nothing outside the file


def assert_located(exc: ConfigError, path: Path) -> None:
    """Every error of ``exc`` starts with ``path:LINE:COL: `` (1-based line and column)."""
    where = re.compile(re.escape(str(path)) + r":[1-9][0-9]*:[1-9][0-9]*: \S")
    errors = exc.errors if isinstance(exc, ConfigErrors) else [exc]
    for e in errors:
        assert where.match(str(e)), f"not located as {path}:LINE:COL: {e}"


# ---------------------------------------------------------------- generated documents

def maybe_nasty(plausible: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(plausible, plausible, plausible, fv.nasty())


@st.composite
def component(draw, kinds: dict, types: list[str]) -> dict:
    type_name = draw(st.one_of(st.sampled_from(types), st.sampled_from(["bogus", "Synth", "fiel"]),
                               fv.nasty()))
    cls = kinds.get(type_name) if isinstance(type_name, str) else None
    params = draw(fv.params_dict(cls.Params)) if cls is not None else draw(fv.params_dict(
        STAGES["gain"].Params))
    return {"type": type_name, **params}


@st.composite
def stage_item(draw) -> dict:
    type_name = draw(st.one_of(st.sampled_from(sorted(STAGES)), st.sampled_from(["fri", "FFT", ""]),
                               fv.nasty()))
    if isinstance(type_name, str) and type_name in STAGES:
        item = {"type": type_name, **draw(fv.stage_params(type_name))}
    else:
        item = {"type": type_name, **draw(fv.params_dict(STAGES["fir"].Params))}
    if draw(st.integers(0, 5)) == 0:
        item["name"] = draw(maybe_nasty(st.sampled_from(["a", "b", "lowpass"])))
    return item


SOURCE_SEEDS = [
    {"type": "synth", "signal": "sine", "freq_hz": 1000, "duration_s": 0.01},
    {"type": "synth", "signal": "noise", "seed": 3, "noise_std": 0.1},
    {"type": "synth", "signal": "multitone", "freqs_hz": [100, 2000], "channel_delay_samples": [0, 1.5]},
    {"type": "synth", "signal": "chirp", "f0_hz": 10, "f1_hz": 1000, "sweep_s": 0.5},
    {"type": "null", "duration_s": 0.01},
    {"type": "numpy", "array": [[0.0, 1.0, -1.0, 0.5]]},
    # loaded only (never opened here: they need a peer or a recording)
    {"type": "zmq", "endpoint": "tcp://127.0.0.1:5555", "pattern": "sub", "timeout_s": 1, "gaps": "zeros"},
    {"type": "zmq", "endpoint": "ipc://gk.ipc", "bind": True, "mode": "raw", "hwm": 2},
]
SINK_SEEDS = [{"type": "null"}, {"type": "numpy"},
              {"type": "zmq", "endpoint": "tcp://*:5555", "pattern": "pub", "subscribers": 2},
              {"type": "sigmf", "path": "out/rec", "datatype": "ci16_le", "frequency_hz": 1.0e8}]


@st.composite
def plausible_pipeline(draw) -> dict:
    """A pipeline that loads (most of the time): seeds of sources and stages, simple fields."""
    doc = {
        "name": draw(st.sampled_from(["a", "b", "demo"])),
        "sample_rate": draw(st.sampled_from([48000, 44100.0, 8000, 2.4e6])),
        "block_size": draw(st.sampled_from([1, 2, 16, 64, 256])),
        "channels": draw(st.sampled_from([1, 2])),
        "dtype": draw(st.sampled_from(["float32", "complex64"])),
        "backend": "cpu",
        "qos": draw(st.sampled_from([{"class": "best_effort"}, {"class": "realtime", "deadline_ms": 5},
                                     {"class": "throughput", "min_rate": 1e6}])),
        "source": dict(draw(st.sampled_from(SOURCE_SEEDS))),
        "stages": [dict(type=t, **draw(fv.stage_params(t))) for t in
                   draw(st.lists(st.sampled_from(sorted(STAGES)), max_size=3))],
        "sink": dict(draw(st.sampled_from(SINK_SEEDS))),
    }
    for key in list(doc):
        if key != "source" and draw(st.integers(0, 5)) == 0:
            del doc[key]
    return doc


@st.composite
def generic_pipeline(draw) -> dict:
    """Any key, any value: mostly of the right kind, often not."""
    fields = {
        "name": maybe_nasty(st.sampled_from(["a", "b", "demo"])),
        "sample_rate": maybe_nasty(st.sampled_from([48000, 44100.0, 8000, 2.4e6, 1, 1e300])),
        "block_size": maybe_nasty(st.sampled_from([1, 2, 16, 64, 256, 1024, 2**40])),
        "channels": maybe_nasty(st.sampled_from([1, 2, 4, 65536, 65537])),
        "dtype": maybe_nasty(st.sampled_from(["float32", "complex64", "float64"])),
        "backend": maybe_nasty(st.sampled_from(["cpu", "auto", "cuda", "gpu"])),
        "qos": maybe_nasty(fv.params_dict(pygpukit_dsp.QoS)),
        "source": maybe_nasty(component(SOURCES, SOURCE_TYPES)),
        "stages": maybe_nasty(st.lists(stage_item(), max_size=4)),
        "sink": maybe_nasty(component(SINKS, SINK_TYPES)),
    }
    return {key: draw(strategy) for key, strategy in fields.items() if draw(st.integers(0, 3))}


def _mappings(value, depth: int = 0):
    """Every mapping in a document down to the parameters of its components."""
    if isinstance(value, dict):
        yield value
        children = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return
    if depth < 3:
        for child in children:
            yield from _mappings(child, depth + 1)


@st.composite
def mutated(draw, doc: dict) -> dict:
    """``doc`` with up to three places (a top-level key, or one inside the source, a stage or the
    sink) given an adversarial value, removed, or joined by an unknown key."""
    doc = copy.deepcopy(doc)  # seeds are shared: never change them in place
    for _ in range(draw(st.integers(0, 3))):
        targets = list(_mappings(doc))
        target = draw(st.sampled_from(targets))
        keys = sorted(map(str, target)) or ["type"]
        key = draw(st.one_of(st.sampled_from(keys), st.sampled_from(["bogus", "chanels", "Type"])))
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(fv.nasty())
    return doc


@st.composite
def documents(draw) -> dict:
    one = st.one_of(plausible_pipeline(), plausible_pipeline(), generic_pipeline())
    if draw(st.integers(0, 3)) == 0:
        doc = {"version": 1, "pipelines": draw(st.lists(one, min_size=1, max_size=3))}
        for key in ("sample_rate", "block_size", "channels", "dtype", "backend"):
            for entry in doc["pipelines"]:  # defaults at the top, overrides in the entries
                if key in entry and draw(st.integers(0, 3)) == 0:
                    doc[key] = entry.pop(key)
    else:
        doc = {"version": 1, **draw(one)}
    return draw(mutated(doc))


# ---------------------------------------------------------------- damaged example files

JUNK = [":", "-", " ", "  ", "\t", "{", "}", "[", "]", "'", '"', "#", "&", "*", "!", "!!python/object:os.system",
        "|", ">", "%", "@", "`", ",", "?", "\n", "\x00", "\x07", "\x85", "\ufeff", "é", "---\n", ".nan",
        "-.inf", "1e999", "0x", "<<: *x", "&a", "*a"]


@st.composite
def damaged_example(draw) -> bytes:
    text = draw(st.sampled_from(EXAMPLES)).read_text()
    for _ in range(draw(st.integers(1, 3))):
        lines = text.split("\n")
        op = draw(st.sampled_from(["replace", "insert", "truncate", "drop_line", "dup_line", "indent",
                                   "dedent", "tab"]))
        pos = draw(st.integers(0, max(len(text) - 1, 0)))
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if op == "replace":
            text = text[:pos] + draw(st.sampled_from(JUNK)) + text[pos + 1:]
        elif op == "insert":
            text = text[:pos] + draw(st.sampled_from(JUNK)) + text[pos:]
        elif op == "truncate":
            text = text[:pos]
        elif op == "drop_line":
            text = "\n".join(lines[:i] + lines[i + 1:])
        elif op == "dup_line":
            text = "\n".join(lines[:i + 1] + lines[i:])
        elif op == "indent":
            text = "\n".join(lines[:i] + [" " * draw(st.integers(1, 3)) + lines[i]] + lines[i + 1:])
        elif op == "dedent":
            text = "\n".join(lines[:i] + [lines[i].lstrip()] + lines[i + 1:])
        else:
            text = "\n".join(lines[:i] + ["\t" + lines[i]] + lines[i + 1:])
    data = text.encode()
    if draw(st.integers(0, 9)) == 0:  # a byte that is not UTF-8
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        data = data[:pos] + bytes([draw(st.sampled_from([0xFF, 0xC3, 0x80, 0xFE]))]) + data[pos + 1:]
    return data


# ---------------------------------------------------------------- the check

def load_and_open(path: Path, test: str) -> None:
    """Load ``path``; open what can be opened; only located ConfigErrors (or UnsupportedError) may come."""
    OUTCOMES[test, "documents"] += 1
    try:
        pipelines = Pipeline.load_all(path)
    except ConfigError as exc:
        note(f"rejected: {exc}")
        assert_located(exc, path)
        OUTCOMES[test, "ConfigError at load"] += 1
        return
    OUTCOMES[test, "loaded"] += 1
    OUTCOMES[test, "pipelines"] += len(pipelines)
    for p in pipelines:
        assert isinstance(p, Pipeline)
        if p.source is None or p.source.type not in OPENABLE:
            continue
        OUTCOMES[test, "pipelines opened"] += 1
        try:
            fmt = p.source.open(StreamFormat(p.sample_rate, p.channels, p.dtype))
            chain = p.specs(fmt)
            check_memory(p, chain, "cpu")
            if sum(n for n, _ in block_memory(p, chain)) > 64 << 20:
                OUTCOMES[test, "fits, but too big to stream here"] += 1
                continue  # fits the machine, but not a quick test
            x = p.source.read(min(2 * p.block_size + 1, 4096))
            y = p.process(x, backend="cpu")
        except (ConfigError, UnsupportedError) as exc:
            note(f"rejected when opened: {exc}")
            if isinstance(exc, ConfigError):
                assert_located(exc, path)
            OUTCOMES[test, "refused when opened"] += 1
            continue
        finally:
            p.source.close()
        assert y.dtype == chain.output.np_dtype and y.shape[0] == chain.output.channels
        OUTCOMES[test, "streamed"] += 1


@fv.fuzz_settings(EXAMPLES_PER_TEST)
@given(doc=documents())
def test_generated_documents(doc, tmp_path_factory):
    path = tmp_path_factory.mktemp("doc", numbered=True) / "fuzz.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    load_and_open(path, "generated")


@fv.fuzz_settings(EXAMPLES_PER_TEST)
@given(data=damaged_example())
def test_damaged_example_files(data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ex", numbered=True)
    (folder / "data").symlink_to(ROOT / "pipelines" / "data")  # relative paths keep resolving
    path = folder / "damaged.yaml"
    path.write_bytes(data)
    load_and_open(path, "damaged")


def test_outcomes_were_counted():
    """The counts, for the record (pytest -s shows them); both tests loaded and refused files."""
    if not OUTCOMES:
        pytest.skip("run together with the fuzz tests above")
    total = OUTCOMES["generated", "documents"] + OUTCOMES["damaged", "documents"]
    print(f"\nYAML fuzz: {total} documents")
    for (test, outcome), n in sorted(OUTCOMES.items()):
        print(f"  {test:<10} {outcome:<32} {n}")
    for test in ("generated", "damaged"):
        assert OUTCOMES[test, "loaded"] > 0 and OUTCOMES[test, "ConfigError at load"] > 0
    assert OUTCOMES["damaged", "streamed"] > 0


# ---------------------------------------------------------------- through the CLI

BAD_FILES = {
    "nan_rate.yaml": "version: 1\nsample_rate: .nan\nsource: {type: synth}\n",
    "huge_taps.yaml": "version: 1\nsample_rate: 48000\nchannels: 1\nsource: {type: synth}\n"
                      "stages:\n  - {type: fir, design: {numtaps: 1000000000000, cutoff_hz: 1000}}\n",
    "tab.yaml": "version: 1\nstages:\n\t- {type: gain, db: 1}\n",
    "truncated.yaml": "version: 1\nname: x\nsource: {type: synth, freq_hz: [1, 2\n",
    "not_utf8.yaml": b"version: 1\nname: \xff\xfe\n",
    "int_overflow.yaml": "version: 1\nsample_rate: " + "9" * 400 + "\nchannels: 2\n",
    "huge_nfft.yaml": "version: 1\nsample_rate: 48000\nchannels: 1\nsource: {type: synth}\n"
                      "stages: [{type: stft, nfft: 1099511627776}]\n",
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_cli_validate_reports_file_line_col(name, tmp_path):
    path = tmp_path / name
    content = BAD_FILES[name]
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    env = {**os.environ, "PYTHONPATH": str(Path(pygpukit_dsp.__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", "validate", str(path)], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert re.search(re.escape(str(path)) + r":[1-9][0-9]*:[1-9][0-9]*: ", r.stderr), r.stderr

