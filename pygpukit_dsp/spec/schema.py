"""The pipeline document (format version 1): from marked YAML values to PipelineConfig objects.

Every problem becomes a ConfigError located at FILE:LINE:COL of the offending key or
value; as many as practical are collected in one pass and raised together
(:class:`ConfigErrors`). See docs/yaml.md for the format.
"""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError, ConfigErrors
from ..limits import MAX_BLOCK_SIZE, MAX_CHANNELS
from ..qos import QoS
from ..signal import DTYPES
from ..stages.base import _fields_at, did_you_mean, stage_class, validate_params
from .graph_form import STAGE_EXTRA, graph_marker, read_graph
from .loader import Marks, load_marked
from .words import _lookup, _show, _type_name  # noqa: F401  (schema._show: where they were defined before)

_DID_YOU_MEAN = re.compile(r"did you mean '([^']+)'\?")

SUPPORTED_VERSIONS = (1,)
DEFAULT_BLOCK_SIZE = 1024
BACKENDS = ("auto", "cuda", "cpu")

# keys of one pipeline (the single form's top level, or one entry of 'pipelines:')
PIPELINE_KEYS = ("name", "sample_rate", "block_size", "channels", "dtype", "backend", "device", "nonfinite",
                 "qos", "source", "sources", "stages", "sink", "sinks")
# top-level keys of the multi form that act as defaults for every pipeline
DEFAULT_KEYS = ("sample_rate", "block_size", "channels", "dtype", "backend", "device", "nonfinite")
TOP_SINGLE_KEYS = ("version",) + PIPELINE_KEYS
TOP_MULTI_KEYS = ("version", "pipelines") + DEFAULT_KEYS
# A bench file's own key (benchmarks/w3.yaml): `gk-stream bench` reads it (pygpukit_dsp/bench/
# bench_file.py strips it and hands the rest here); in a pipeline file it is refused by name.
BENCH_KEY = "bench"


@dataclass(eq=False)
class PipelineConfig:
    """One pipeline as written in YAML, with its components built and validated.

    ``sample_rate``, ``channels`` and ``dtype`` are None where the YAML leaves them to
    the source (a file knows its own). ``where`` is FILE:LINE:COL of the pipeline's mapping;
    the source, every stage and the sink carry their own ``.where``.
    """

    name: str
    sample_rate: float | None
    block_size: int
    channels: int | None
    dtype: str | None
    backend: str
    qos: QoS
    source: Any  # pygpukit_dsp.io.base.Source | None
    stages: list = field(default_factory=list)  # list[pygpukit_dsp.stages.base.Stage]
    sink: Any = None  # pygpukit_dsp.io.base.Sink | None
    where: str = "<python>"
    path: Path | None = None
    # the GPU of the cuda backend: None (not written: GPU 0), an index, or "auto" (docs/multi-gpu.md)
    device: int | str | None = None
    device_where: str | None = None  # FILE:LINE:COL of the device value (a DeviceError points there)
    # NaN/Inf input samples: error | zero | pass; None: the source's default (pygpukit_dsp/nonfinite.py)
    nonfinite: str | None = None
    # The graph form (docs/graphs.md; pygpukit_dsp/graph_model.py): None for one path. graph_where is
    # FILE:LINE:COL of the first key that makes it a graph; sources and sinks are by name, each
    # stage's and sink's input by name, refs_where locates each name read ((kind, name, i) -> where).
    graph_where: str | None = None
    sources: dict[str, Any] | None = None
    stage_inputs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    sinks: dict[str, Any] | None = None
    sink_inputs: dict[str, str] = field(default_factory=dict)
    refs_where: dict[tuple[str, str, int], str] = field(default_factory=dict)

    def to_document(self) -> dict[str, Any]:
        """The YAML document of this pipeline alone (see :func:`pygpukit_dsp.spec.pipeline_document`)."""
        from .dump import pipeline_document

        return pipeline_document(self)


def _registries() -> None:
    """Import the packages whose import fills STAGES, SOURCES and SINKS."""
    importlib.import_module("pygpukit_dsp.stages")
    importlib.import_module("pygpukit_dsp.io")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_finite_number(v: Any) -> bool:
    """A number that is not NaN/inf and fits a float (an int like 10**400 does not: float() raises)."""
    if _is_int(v):
        return abs(v) < 2**1023
    return _is_number(v) and math.isfinite(v)


class _DocBuilder:
    def __init__(self, filename: str, base_dir: Path, path: Path | None):
        self.filename, self.base_dir, self.path = filename, base_dir, path
        self.errors: list[ConfigError] = []
        self._name_where: dict[int, str] = {}  # id(config) -> where its name was written

    # -- error helpers ----------------------------------------------------
    def err(self, message: str, where: str, hint: str | None = None) -> None:
        self.errors.append(ConfigError(message, where=where, hint=hint))

    def _add(self, exc: ConfigError, marks: Marks, model: type | None) -> None:
        group = exc.errors if isinstance(exc, ConfigErrors) else [exc]
        # a misspelt key also makes its intended key "missing": report only the misspelling
        suggested = set()
        for e in group:
            m = _DID_YOU_MEAN.match(e.hint or "")
            if m and e.path and "unknown parameter" in e.message:
                suggested.add(tuple(e.path[:-1]) + (m.group(1),))
        group = [e for e in group if not ("missing required parameter" in e.message
                                          and tuple(e.path) in suggested)]
        for e in group:
            if e.where:
                self.errors.append(e)
                continue
            as_key = False
            if e.path and isinstance(e.path[-1], str):
                fields = _fields_at(model, e.path[:-1]) if model is not None else []
                as_key = (e.path[-1] not in fields) if fields else "unknown parameter" in e.message
            self.errors.append(ConfigError(e.message, where=marks.locate(e.path, as_key=as_key),
                                           hint=e.hint, path=e.path))

    def unknown_key(self, key: Any, marks: Marks, allowed: tuple[str, ...], context: str) -> None:
        if key == BENCH_KEY and context == "at the top level":
            self.err(f"{self.filename} is a bench file: its '{BENCH_KEY}:' mapping sets up a benchmark, which "
                     "`gk-stream bench` runs", marks.key_where(key), f"use gk-stream bench {self.filename}")
            return
        hint = did_you_mean(str(key), allowed) or f"allowed keys: {', '.join(allowed)}"
        self.err(f"unknown key '{key}' {context}", marks.key_where(key), hint)

    # -- document ---------------------------------------------------------
    def document(self, doc: Any, marks: Marks | None) -> list[PipelineConfig]:
        if marks is None:
            raise ConfigError("the pipeline file is empty", where=f"{self.filename}:1:1",
                              hint="start with 'version: 1' (see docs/yaml.md)")
        if not isinstance(doc, dict):
            raise ConfigError(f"the top level must be a mapping (version, name, source, stages, sink...), "
                              f"got {_type_name(doc)}", where=marks.where,
                              hint="write 'key: value' lines starting with 'version: 1'")
        self._version(doc, marks)
        if "pipelines" in doc:
            configs = self._multi(doc, marks)
        else:
            for key in doc:
                if key not in TOP_SINGLE_KEYS:
                    self.unknown_key(key, marks, TOP_SINGLE_KEYS, "at the top level")
            configs = [c for c in [self._pipeline(doc, marks, {}, default_name=self._stem())] if c]
        seen: dict[str, str] = {}
        for cfg in configs:
            if cfg.name in seen:
                self.err(f"duplicate pipeline name '{cfg.name}'", self._name_where[id(cfg)],
                         f"'{cfg.name}' is already used by the pipeline at {seen[cfg.name]}; "
                         "names must be unique in a file")
            else:
                seen[cfg.name] = cfg.where
        if self.errors:
            raise self.errors[0] if len(self.errors) == 1 else ConfigErrors(self.errors)
        return configs

    def _stem(self) -> str:
        return self.path.stem if self.path is not None else "pipeline"

    def _version(self, doc: dict, marks: Marks) -> None:
        if "version" not in doc:
            self.err("missing 'version'", marks.where, "add 'version: 1' at the top of the file")
            return
        v = doc["version"]
        if not _is_int(v):
            self.err(f"version must be an integer, got {_show(v)}", marks.value_where("version"),
                     "write 'version: 1'")
        elif v not in SUPPORTED_VERSIONS:
            # another version's keys mean other things: stop before reporting noise about them
            raise ConfigError(f"unsupported format version {v}", where=marks.value_where("version"),
                              hint=f"this pygpukit-dsp reads version {', '.join(map(str, SUPPORTED_VERSIONS))}")

    def _multi(self, doc: dict, marks: Marks) -> list[PipelineConfig]:
        for key in doc:
            if key in TOP_MULTI_KEYS:
                continue
            if key in PIPELINE_KEYS:
                self.err(f"'{key}' cannot be used next to 'pipelines:'", marks.key_where(key),
                         f"move it into each entry of the 'pipelines' list (at the top level only "
                         f"{', '.join(DEFAULT_KEYS)} may be given, as defaults)")
            else:
                self.unknown_key(key, marks, TOP_MULTI_KEYS, "at the top level")
        defaults = self._settings(doc, marks, DEFAULT_KEYS)
        entries, emarks = doc["pipelines"], marks.child("pipelines")
        if not isinstance(entries, list) or not entries:
            self.err(f"'pipelines' must be a non-empty list of pipelines, got {_type_name(entries)}",
                     emarks.where, "write each pipeline as a list item: '- name: ...'")
            return []
        configs = []
        for i, entry in enumerate(entries):
            m = emarks.items[i]
            if not isinstance(entry, dict):
                self.err(f"pipelines[{i}] must be a mapping (name, source, stages, sink...), got "
                         f"{_type_name(entry)}", m.where)
                continue
            for key in entry:
                if key == "version":
                    self.err("'version' belongs at the top of the file, not inside a pipeline",
                             m.key_where(key), "remove it here")
                elif key not in PIPELINE_KEYS:
                    self.unknown_key(key, m, PIPELINE_KEYS, f"in pipelines[{i}]")
            if "name" not in entry:
                self.err(f"pipelines[{i}] has no 'name'", m.where,
                         "each pipeline in 'pipelines:' needs a unique name")
            cfg = self._pipeline(entry, m, defaults, default_name=f"pipeline{i + 1}",
                                 device_where=marks.value_where("device") if "device" in doc else None)
            if cfg is not None:
                configs.append(cfg)
        return configs

    # -- settings -----------------------------------------------------------
    def _settings(self, d: dict, m: Marks, keys: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in keys:
            if key not in d:
                continue
            v, where = d[key], m.value_where(key)
            checked = getattr(self, f"_check_{key}")(v, where)
            if checked is not None:
                out[key] = checked
        return out

    def _check_name(self, v: Any, where: str) -> str | None:
        if not isinstance(v, str) or not v.strip():
            self.err(f"name must be a non-empty string, got {_show(v)}", where, "e.g. 'name: mic_eq'")
            return None
        return v

    def _check_sample_rate(self, v: Any, where: str) -> float | None:
        if not _is_finite_number(v) or v <= 0:
            self.err(f"sample_rate must be a positive number of samples per second, got {_show(v)}", where,
                     "e.g. 'sample_rate: 48000'")
            return None
        return float(v)

    def _positive_int(self, key: str, v: Any, where: str, example: str) -> int | None:
        if not _is_int(v) or v < 1:
            self.err(f"{key} must be an integer >= 1, got {_show(v)}", where, f"e.g. '{key}: {example}'")
            return None
        return v

    def _check_block_size(self, v: Any, where: str) -> int | None:
        limit = f"from 1 to {MAX_BLOCK_SIZE} samples (the limit)"
        if _is_int(v) and v > MAX_BLOCK_SIZE:
            self.err(f"block_size {v} is above the limit of {MAX_BLOCK_SIZE} samples", where,
                     "e.g. 'block_size: 1024'")
            return None
        if isinstance(v, float):  # YAML reads 1e12 and 1024.0 as floats
            shown = repr(v) if abs(v) < 1e7 else f"{v:g}" if math.isfinite(v) else _show(v)
            self.err(f"block_size must be a whole number (an integer) {limit}, got the float {shown}", where,
                     "write the integer's digits, without a decimal point or exponent: e.g. 'block_size: 1024'")
            return None
        if not _is_int(v) or v < 1:
            self.err(f"block_size must be a whole number (an integer) {limit}, got {_show(v)}", where,
                     "e.g. 'block_size: 1024'")
            return None
        return v

    def _check_channels(self, v: Any, where: str) -> int | None:
        if _is_int(v) and v > MAX_CHANNELS:
            self.err(f"channels {v} is above the limit of {MAX_CHANNELS} channels", where, "e.g. 'channels: 2'")
            return None
        return self._positive_int("channels", v, where, "2")

    def _check_dtype(self, v: Any, where: str) -> str | None:
        if v not in DTYPES:
            hint = f"allowed: {', '.join(DTYPES)}"
            close = did_you_mean(str(v), DTYPES) if isinstance(v, str) else None
            self.err(f"dtype {_show(v)} is not supported", where, f"{close} {hint}" if close else hint)
            return None
        return v

    def _check_backend(self, v: Any, where: str) -> str | None:
        if v not in BACKENDS:
            if isinstance(v, str) and v.lower() in ("gpu", "nvidia"):
                hint = "use 'cuda' for the GPU"
            else:
                hint = (did_you_mean(str(v), BACKENDS) or "") + f" allowed: {', '.join(BACKENDS)}"
            self.err(f"backend {_show(v)} is not one of {', '.join(BACKENDS)}", where, hint.strip())
            return None
        return v

    def _check_device(self, v: Any, where: str) -> int | str | None:
        from ..devices import check_device

        if v is None:
            self.err("device must be a GPU index >= 0 or 'auto', got null", where,
                     "e.g. 'device: 1' or 'device: auto'; remove the key for GPU 0")
            return None
        try:
            return check_device(v, where)
        except ConfigError as exc:
            self.errors.append(exc)
            return None

    def _check_nonfinite(self, v: Any, where: str) -> str | None:
        from ..nonfinite import check_policy

        try:
            return check_policy(v, where) if v is not None else self._null_policy(where)
        except ConfigError as exc:
            self.errors.append(exc)
            return None

    def _null_policy(self, where: str) -> None:
        self.err("nonfinite must be error, zero or pass, got null", where,
                 "remove the key for the source's default (error for files and arrays, zero for live audio)")

    # -- one pipeline -------------------------------------------------------
    def _pipeline(self, d: dict, m: Marks, defaults: dict, *, default_name: str,
                  device_where: str | None = None) -> PipelineConfig | None:
        n_errors = len(self.errors)
        settings = {**defaults, **self._settings(d, m, ("name",) + DEFAULT_KEYS)}
        qos = QoS()
        if "qos" in d:
            qm = m.child("qos")
            if not isinstance(d["qos"], dict):
                self.err(f"qos must be a mapping, got {_type_name(d['qos'])}", qm.where,
                         "e.g. 'qos: {class: realtime, deadline_ms: 5}'")
            else:
                try:
                    qos = validate_params(QoS, d["qos"], base_dir=self.base_dir, what="qos")
                    if "cpu" in d["qos"]:  # checked against this machine's CPUs when the stream starts
                        qos._where["cpu"] = qm.value_where("cpu")
                except ConfigError as exc:
                    self._add(exc, qm, QoS)
        graph_where = graph_marker(d, m)  # sources:, sinks:, input: ... (docs/graphs.md)
        source = None if graph_where else self._component("source", d, m)
        stages, names = self._stages(d, m)
        sink = None if graph_where else self._component("sink", d, m)
        graph = read_graph(self, d, m, stages, names) if graph_where else {}
        if len(self.errors) > n_errors:
            return None
        cfg = PipelineConfig(
            name=settings.get("name", default_name), sample_rate=settings.get("sample_rate"),
            block_size=settings.get("block_size", DEFAULT_BLOCK_SIZE), channels=settings.get("channels"),
            dtype=settings.get("dtype"), backend=settings.get("backend", "auto"), qos=qos,
            source=source, stages=stages, sink=sink, where=m.where, path=self.path,
            device=settings.get("device"),
            device_where=m.value_where("device") if "device" in d else device_where,
            nonfinite=settings.get("nonfinite"), graph_where=graph_where, **graph)
        self._name_where[id(cfg)] = m.value_where("name") if "name" in d else m.where
        return cfg

    def _component(self, kind: str, d: dict, m: Marks):
        if kind not in d:
            return None
        value, cm = d[kind], m.child(kind)
        lookup = _lookup(kind)
        if value is None:
            self.err(f"{kind} is empty", cm.where, f"write '{kind}: {{type: ...}}' or remove the key "
                     f"(for the null {kind}: '{kind}: {{type: \"null\"}}')")
            return None
        built = self._build(kind, value, cm, lookup, what=lambda t: f"{kind} '{t}'",
                            make=lambda cls, params: cls(params, base_dir=self.base_dir))
        return built

    def _build(self, kind: str, value: Any, cm: Marks, lookup: Callable, *, what: Callable[[str], str],
               make: Callable, extra_keys: tuple[str, ...] = ()):
        if not isinstance(value, dict):
            self.err(f"{kind} must be a mapping with a 'type', got {_type_name(value)}", cm.where,
                     f"e.g. {{type: {_example(kind)}}}")
            return None
        if "type" not in value:
            self.err(f"{kind} has no 'type'", cm.where, f"known types: {', '.join(_known(kind))}")
            return None
        type_name = value["type"]
        if not isinstance(type_name, str):
            hint = f"known types: {', '.join(_known(kind))}"
            if type_name is None:
                hint = "YAML reads a bare null as nothing: write type: \"null\" in quotes"
            self.err(f"{kind} type must be a name, got {_show(type_name)}", cm.value_where("type"), hint)
            return None
        try:
            cls = lookup(type_name, where=cm.value_where("type"))
        except ConfigError as exc:
            self.errors.append(exc)
            return None
        params = {k: v for k, v in value.items() if k != "type" and k not in extra_keys}
        label = what(type_name)
        try:
            validated = validate_params(cls.Params, params, base_dir=self.base_dir, what=label)
        except ConfigError as exc:
            self._add(exc, cm, cls.Params)
            return None
        try:
            obj = make(cls, validated)
        except ConfigError as exc:  # checks done by the component itself: say which one
            errors = exc.errors if isinstance(exc, ConfigErrors) else [exc]
            self._add(ConfigErrors([e if e.message.startswith(label) else
                                    ConfigError(f"{label}: {e.message}", where=e.where, hint=e.hint,
                                                path=e.path) for e in errors]), cm, cls.Params)
            return None
        obj.where = cm.where
        return obj

    def _stages(self, d: dict, m: Marks) -> tuple[list, list[str | None]]:
        """The stages built, and every item's name (None where it has none)."""
        if "stages" not in d or d["stages"] is None:
            return [], []
        items, sm = d["stages"], m.child("stages")
        if not isinstance(items, list):
            self.err(f"stages must be a list, got {_type_name(items)}", sm.where,
                     "write one stage per line: '  - {type: fir, ...}'")
            return [], []
        names = self._stage_names(items, sm)
        out = []
        for i, item in enumerate(items):
            name = names[i]
            built = self._build("stage", item, sm.items[i], stage_class,
                                what=lambda t, name=name: f"stage '{t}'" if name in (None, t)
                                else f"stage '{name}' ({t})",
                                make=lambda cls, params, name=name: cls(params, name=name,
                                                                        base_dir=self.base_dir),
                                extra_keys=STAGE_EXTRA)
            if built is not None:
                out.append(built)
        return out, names

    def _stage_names(self, items: list, sm: Marks) -> list[str | None]:
        """Explicit names must be unique; default names (the type) get _2, _3... when taken."""
        names: list[str | None] = [None] * len(items)
        taken: dict[str, str] = {}
        for i, item in enumerate(items):
            if isinstance(item, dict) and "name" in item:
                im = sm.items[i]
                name = self._check_name(item["name"], im.value_where("name"))
                if name is None:
                    continue
                if name in taken:
                    self.err(f"duplicate stage name '{name}'", im.value_where("name"),
                             f"'{name}' is already used by the stage at {taken[name]}; stage names must "
                             "be unique within a pipeline")
                    continue
                taken[name] = im.where
                names[i] = name
        for i, item in enumerate(items):
            if names[i] is None and isinstance(item, dict) and isinstance(item.get("type"), str) \
                    and "name" not in item:
                base = item["type"]
                name, k = base, 2
                while name in taken:
                    name, k = f"{base}_{k}", k + 1
                taken[name] = sm.items[i].where
                names[i] = name
        return names


def _known(kind: str) -> list[str]:
    from ..io.base import SINKS, SOURCES
    from ..stages.base import STAGES

    return sorted({"source": SOURCES, "sink": SINKS, "stage": STAGES}[kind])


def _example(kind: str) -> str:
    return {"source": "synth", "sink": "'null'", "stage": "fir"}[kind]


def load_document(value: Any, marks: Marks | None, filename: str = "<string>", base_dir: str | Path | None = None,
                  *, path: Path | None = None) -> list[PipelineConfig]:
    """Validate a pipeline document already parsed with :func:`~pygpukit_dsp.spec.loader.load_marked`
    (``value`` and its ``marks``, so errors keep their FILE:LINE:COL); relative paths resolve against
    ``base_dir`` (default: cwd). A bench file's loader (pygpukit_dsp/bench/bench_file.py) hands its
    document here without its ``bench:`` mapping."""
    _registries()
    builder = _DocBuilder(filename, Path(base_dir) if base_dir is not None else Path.cwd(), path)
    return builder.document(value, marks)


def load_text(text: str, filename: str = "<string>", base_dir: str | Path | None = None, *,
              path: Path | None = None) -> list[PipelineConfig]:
    """Parse and validate a pipeline document; relative paths resolve against ``base_dir`` (default: cwd)."""
    value, marks = load_marked(text, filename)
    return load_document(value, marks, filename, base_dir, path=path)


def read_file(path: str | Path) -> str:
    """A pipeline file's text; ConfigError (where the fault lies) when it is missing or not UTF-8."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8-sig")  # a BOM is not part of the text
    except FileNotFoundError:
        raise ConfigError(f"pipeline file {p} does not exist", hint="check the path") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                          where=f"{p}:1:1", hint="save the file as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"cannot read pipeline file {p}: {exc.strerror or exc}") from None


def load_file(path: str | Path) -> list[PipelineConfig]:
    """Load a pipeline file; errors point at ``path:LINE:COL`` as the path was given."""
    p = Path(path)
    return load_text(read_file(p), filename=str(path), base_dir=p.resolve().parent, path=p)
