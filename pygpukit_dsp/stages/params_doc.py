"""Parameter models in words: what `gk-stream stages`, ``help()``, ``inspect.signature`` and the
``.pyi`` stubs show of a stage, source or sink, all read from its pydantic ``Params`` model.

* :func:`type_words`: a YAML author's name for a field's type (``number``, ``list of integers``,
  ``'asap' | 'realtime'``, ``mapping``);
* :func:`default_words`: ``required``, ``not set`` or ``default 'auto'``;
* :func:`field_docs`: one :class:`FieldDoc` per field, nested models' fields as children;
* :func:`install_constructor_doc`: gives a class a keyword-only ``__signature__`` and a
  "Parameters" section in its docstring (Stage and the I/O base call it for every subclass);
* :func:`field_stub_type`: the Python type a field accepts, as stub text (scripts/gen_stubs.py).

Plain introspection of the models: nothing here imports NumPy's or SciPy's heavier parts.
"""

from __future__ import annotations

import inspect
import textwrap
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field as dc_field
from pathlib import Path
from typing import Any, Literal, Union

import numpy as np
from pydantic import BaseModel
from pydantic.fields import FieldInfo

# Keyword parameters of the constructors that are not model fields: what they mean.
EXTRA_PARAMS = {
    "name": "the stage's name in the pipeline (default: its type); errors and figures use it",
    "base_dir": "the folder that relative file parameters resolve against (default: the working directory)",
    "out": "a text stream to draw on instead of the one ``stream`` names",
}

_WORDS = {int: "integer", float: "number", str: "string", bool: "true/false", dict: "mapping",
          type(None): "null"}
_PLURAL = {"integer": "integers", "number": "numbers", "string": "strings", "true/false": "true/false values",
           "mapping": "mappings", "array": "arrays", "path": "paths", "null": "nulls"}


def _is_model(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _union_args(ann: Any) -> tuple | None:
    if typing.get_origin(ann) in (Union, types.UnionType):
        return typing.get_args(ann)
    return None


def _validator_names(metadata: tuple | list) -> set[str]:
    return {getattr(getattr(m, "func", None), "__name__", "") for m in metadata}


def _array_words(metadata: tuple | list) -> str:
    names = _validator_names(metadata)
    if "_to_real_array" in names:
        return "array of real numbers"
    if "_to_number_array" in names:
        return "array of numbers"  # complex values as strings such as '1-2j'
    return "array"


def type_words(ann: Any) -> str:
    """A field's type as a YAML author reads it; None (optional) is left to the default."""
    args = _union_args(ann)
    if args is not None:
        words = [type_words(a) for a in args if a is not type(None)]
        return " | ".join(dict.fromkeys(words)) or "null"
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        base, *metadata = typing.get_args(ann)
        if base is np.ndarray:
            return _array_words(metadata)
        if "_path_to_str" in _validator_names(metadata):
            return "path"
        return type_words(base)
    if origin is Literal:
        return " | ".join(repr(v) for v in typing.get_args(ann))
    if origin in (list, tuple, set, frozenset) or ann in (list, tuple):
        inner = [a for a in typing.get_args(ann) if a is not Ellipsis]
        if not inner:
            return "list"
        words = type_words(inner[0]).split(" | ")
        return "list of " + " and ".join(_PLURAL.get(w, w) for w in words)
    if origin is dict or _is_model(ann):
        return "mapping"
    if ann is np.ndarray:
        return "array"
    if origin is Callable or ann is Callable:
        return "function"
    return _WORDS.get(ann, getattr(ann, "__name__", str(ann)))


def _is_path(field: FieldInfo) -> bool:
    """A path parameter: a string the model turns into a path (``_path_to_str`` also takes a Path)."""
    return "_path_to_str" in _validator_names(field.metadata)


def field_type_words(field: FieldInfo) -> str:
    return "path" if _is_path(field) and field.annotation is str else type_words(field.annotation)


def field_stub_type(field: FieldInfo, names: set[str] | None = None) -> str:
    if _is_path(field) and field.annotation is str:
        return "str | PathLike[str]"
    return stub_type(field.annotation, names)


def field_default(field: FieldInfo) -> Any:
    """The field's default value (a factory's product), or inspect.Parameter.empty if required."""
    if field.is_required():
        return inspect.Parameter.empty
    return field.get_default(call_default_factory=True)


def _yaml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, BaseModel):
        return "{...}"
    return repr(v)


def default_words(field: FieldInfo) -> str:
    """``required``, ``not set`` (None: the parameter is optional) or ``default X`` (X as YAML writes it)."""
    d = field_default(field)
    if d is inspect.Parameter.empty:
        return "required"
    if d is None:
        return "not set"
    return f"default {_yaml_value(d)}"


@dataclass
class FieldDoc:
    """One parameter in words: its YAML name, type, default and meaning; a nested model's fields."""

    name: str
    type: str
    default: str
    description: str
    fields: list["FieldDoc"] = dc_field(default_factory=list)


def nested_model(ann: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (``FirDesign`` of ``FirDesign | None``), or None."""
    for cand in (ann, *(_union_args(ann) or ())):
        if _is_model(cand):
            return cand
    return None


def field_docs(model: type[BaseModel]) -> list[FieldDoc]:
    out = []
    for name, field in model.model_fields.items():
        sub = nested_model(field.annotation)
        out.append(FieldDoc(field.alias or name, field_type_words(field), default_words(field),
                            field.description or "", field_docs(sub) if sub is not None else []))
    return out


# ----------------------------------------------------------------------------- signatures and docstrings


class _Shown:
    """An annotation shown as its text in ``inspect.signature`` (the type the parameter accepts)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _extra_keywords(cls: type) -> list[inspect.Parameter]:
    """The keyword-only parameters of the constructors along the MRO (``name``, ``base_dir``, ...)."""
    seen: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            continue
        for p in params:
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in seen:
                ann = p.annotation
                seen[p.name] = p.replace(annotation=_Shown(ann) if isinstance(ann, str) else ann)
    return list(seen.values())


def model_signature(model: type[BaseModel]) -> inspect.Signature:
    """A model's fields as keyword-only parameters with the types they accept (QoS's constructor)."""
    return inspect.Signature([inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=field_default(f),
                                                annotation=_Shown(field_stub_type(f)))
                              for name, f in model.model_fields.items()])


def constructor_parameters(cls: type) -> list[inspect.Parameter]:
    """Keyword-only parameters: the Params model's fields, then the constructor's own (name, base_dir)."""
    fields = cls.Params.model_fields  # type: ignore[attr-defined]
    params = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=field_default(f),
                                annotation=_Shown(field_stub_type(f)))
              for name, f in fields.items()]
    return params + [p for p in _extra_keywords(cls) if p.name not in fields]


def _described(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, 96, initial_indent=indent, subsequent_indent=indent) if text else []


def _doc_rows(docs: list[FieldDoc], indent: str) -> list[str]:
    lines = []
    for d in docs:
        default = "optional" if d.default == "not set" else d.default
        lines.append(f"{indent}{d.name} : {d.type}, {default}")
        lines.extend(_described(d.description, indent + "    "))
        if d.fields:
            lines.extend(_doc_rows(d.fields, indent + "    "))
    return lines


def parameters_section(cls: type) -> str:
    """The "Parameters" section of a stage's, source's or sink's docstring."""
    kind = getattr(cls, "kind", "stage")
    intro = (f"Keyword-only; or one ready ``{cls.__name__}.Params(...)`` instance. YAML: the keys of a "
             f"{kind} of type '{cls.type}'." if getattr(cls, "type", "") else "Keyword-only.")  # type: ignore[attr-defined]
    lines = ["Parameters", "----------", *_described(intro, ""), ""]
    lines += _doc_rows(field_docs(cls.Params), "")  # type: ignore[attr-defined]
    fields = cls.Params.model_fields  # type: ignore[attr-defined]
    for p in _extra_keywords(cls):
        if p.name in fields:
            continue
        default = "optional" if p.default is None else f"default {p.default!r}"
        lines.append(f"{p.name} : {p.annotation!r}, {default}")
        lines.extend(_described(EXTRA_PARAMS.get(p.name, ""), "    "))
    return "\n".join(lines)


def install_constructor_doc(cls: type) -> None:
    """Give ``cls`` a keyword-only ``__signature__`` and a Parameters section in its docstring,
    both from its Params model (called from ``__init_subclass__``, so every subclass has them)."""
    cls.__signature__ = inspect.Signature(constructor_parameters(cls))  # type: ignore[attr-defined]
    own = cls.__dict__.get("__doc__")
    summary = getattr(cls, "summary", "")
    head = inspect.cleandoc(own) if own else summary
    cls.__doc__ = (head + "\n\n" if head else "") + parameters_section(cls)


# ----------------------------------------------------------------------------- stub text


def stub_type(ann: Any, names: set[str] | None = None) -> str:
    """The Python type a field accepts, as stub text; ``names`` collects the model classes it uses
    (a nested model also accepts a plain mapping)."""
    names = names if names is not None else set()
    args = _union_args(ann)
    if args is not None:
        parts = [stub_type(a, names) for a in args]
        return " | ".join(dict.fromkeys(p for part in parts for p in part.split(" | ")))
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        base, *metadata = typing.get_args(ann)
        if base is np.ndarray:
            return "ArrayLike"
        if "_path_to_str" in _validator_names(metadata):
            return "str | PathLike[str]"
        return stub_type(base, names)
    if origin is Literal:
        return f"Literal[{', '.join(repr(v) for v in typing.get_args(ann))}]"
    if origin in (list, tuple):
        inner = typing.get_args(ann)
        return f"Sequence[{stub_type(inner[0], names) if inner else 'Any'}]"
    if origin is dict:
        return "Mapping[str, Any]"
    if _is_model(ann):
        names.add(ann.__name__)
        return f"{ann.__name__} | Mapping[str, Any]"
    if ann is type(None):
        return "None"
    if ann is np.ndarray:
        return "ArrayLike"
    if origin is Callable:
        return "Callable[..., Any]"
    if ann in (int, float, str, bool):
        return ann.__name__
    if ann is Path:
        return "Path"
    return "Any"
