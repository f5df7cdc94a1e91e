"""Writing pipelines back as YAML: documents from configs, and readable YAML text."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

import numpy as np
import yaml

from ..errors import ConfigError
from .loader import _use_float_resolver

_SETTINGS = ("name", "sample_rate", "block_size", "channels", "dtype", "backend", "device", "nonfinite")


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _component(c: Any) -> Any:
    if c is None or isinstance(c, Mapping):
        return None if c is None else dict(c)
    to_config = getattr(c, "to_config", None)
    if to_config is None:
        raise ConfigError(f"cannot write a {type(c).__name__} as a pipeline component",
                          hint="components need a to_config() method or must be mappings")
    return to_config()


def _pipeline_body(cfg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in _SETTINGS:
        v = _get(cfg, key)
        if v is None:
            continue
        if key == "sample_rate" and isinstance(v, float) and v.is_integer():
            v = int(v)  # 48000, not 48000.0
        out[key] = v
    qos = _get(cfg, "qos")
    if qos is not None:
        qos_doc = qos.to_config() if hasattr(qos, "to_config") else dict(qos)
        if qos_doc:
            out["qos"] = qos_doc
    if _get(cfg, "sources") is not None:  # the graph form (docs/graphs.md)
        out.update(graph_body(cfg))
        return out
    for key in ("source", "stages", "sink"):
        v = _get(cfg, key)
        if v is None:
            continue
        out[key] = [_component(s) for s in v] if key == "stages" else _component(v)
    return out


def graph_body(cfg: Any) -> dict[str, Any]:
    """``source``/``sources``, ``stages`` (each with the ``input``/``inputs`` it reads, unless it reads
    the entry above) and ``sink``/``sinks`` of a graph (a PipelineConfig or a Graph: ``sources``,
    ``stages``, ``stage_inputs``, ``sinks``, ``sink_inputs``), in the form that reads back the same."""
    from ..graph_model import SOURCE_NAME

    sources = dict(_get(cfg, "sources") or {})
    stages = list(_get(cfg, "stages") or [])
    stage_inputs = dict(_get(cfg, "stage_inputs") or {})
    sinks = dict(_get(cfg, "sinks") or {})
    sink_inputs = dict(_get(cfg, "sink_inputs") or {})
    out: dict[str, Any] = {}
    for name, src in sources.items():
        if src is None and (name != SOURCE_NAME or len(sources) > 1):
            raise ConfigError(f"source '{name}' has no source component, so it cannot be written to YAML",
                              hint="give it one (a file, synth... source), or name the one input 'source'")
    written = {n: s for n, s in sources.items() if s is not None}
    if len(sources) == 1 and written:
        (name, src), = written.items()
        out["source"] = _component(src) if name == SOURCE_NAME else {"name": name, **_component(src)}
    elif written:
        out["sources"] = [{"name": n, **_component(s)} for n, s in written.items()]
    docs = []
    before = next(iter(sources)) if len(sources) == 1 else None
    for st in stages:
        doc = _component(st)
        reads = tuple(stage_inputs.get(st.name, ()))
        if st.takes_several():
            doc["inputs"] = list(reads)
        elif reads != (before,):
            doc["inputs" if len(reads) != 1 else "input"] = reads[0] if len(reads) == 1 else list(reads)
        docs.append(doc)
        before = st.name
    out["stages"] = docs
    last = stages[-1].name if stages else before
    if len(sinks) == 1 and all(ref == last and name == ref for name, ref in sink_inputs.items()):
        out["sink"] = _component(next(iter(sinks.values())))
    elif sinks:
        rows = []
        for name, snk in sinks.items():
            doc = _component(snk)
            head = {"name": name} if name != sink_inputs[name] else {}
            rows.append({**head, "type": doc.pop("type"), "input": sink_inputs[name], **doc})
        out["sinks"] = rows
    return out


def pipeline_document(cfg_like: Any) -> dict[str, Any]:
    """The YAML document (plain dicts and lists) for a pipeline or a list of pipelines.

    ``cfg_like`` is a :class:`PipelineConfig`, any object or mapping with the same
    field names (components may be objects with ``to_config()`` or mappings), or a list
    of those (written in the ``pipelines:`` form when it holds more than one).
    """
    if isinstance(cfg_like, (list, tuple)):
        if len(cfg_like) == 1:
            return pipeline_document(cfg_like[0])
        return {"version": 1, "pipelines": [_pipeline_body(c) for c in cfg_like]}
    return {"version": 1, **_pipeline_body(cfg_like)}


class _Dumper(yaml.SafeDumper):
    """Block style, indented lists; strings that would read back as another type get quoted."""

    def increase_indent(self, flow: bool = False, indentless: bool = False):
        return super().increase_indent(flow, False)


_use_float_resolver(_Dumper)  # quote strings like "1e3" that our loader reads as numbers


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str, np.generic))


def _represent_list(dumper: _Dumper, data: list | tuple) -> yaml.Node:
    flow = bool(data) and all(_is_scalar(x) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", list(data), flow_style=flow)


def _represent_numpy(dumper: _Dumper, data: Any) -> yaml.Node:
    if isinstance(data, np.ndarray):
        return dumper.represent_data(data.tolist())
    return dumper.represent_data(data.item())


def _represent_unknown(dumper: _Dumper, data: Any) -> yaml.Node:
    raise ConfigError(f"cannot write a value of type {type(data).__name__} to YAML ({data!r:.60})",
                      hint="pipeline files hold plain data: numbers, strings, lists and mappings")


_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(tuple, _represent_list)
_Dumper.add_multi_representer(np.generic, _represent_numpy)
_Dumper.add_multi_representer(np.ndarray, _represent_numpy)
_Dumper.add_multi_representer(PurePath, lambda d, p: d.represent_str(str(p)))
_Dumper.add_multi_representer(object, _represent_unknown)


def dump_yaml(doc: Mapping[str, Any]) -> str:
    """Readable YAML for a pipeline document: block style, short scalar lists in flow style.

    The text reads back through :func:`pygpukit_dsp.spec.load_text` to the same document.
    """
    return yaml.dump(dict(doc), Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=100)
