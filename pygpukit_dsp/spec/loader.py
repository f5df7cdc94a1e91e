"""Safe YAML loading that remembers where every key and value was written.

PyYAML's SafeLoader composes the node tree (which keeps the marks); we build plain
Python values from it ourselves, so that

* only plain data is accepted: mappings, sequences, strings, numbers, booleans, null
  (any other tag, e.g. ``!!python/object``, is an error at that node);
* duplicate keys are errors (PyYAML would silently keep the last one);
* every value keeps its FILE:LINE:COL, so later validation errors can point at the
  exact key or value (:meth:`Marks.where`).

Floats may be written ``1e3`` or ``48e3`` as well as YAML 1.1's ``1.0e+3``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..errors import ConfigError, ConfigErrors

_FLOAT_RE = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X)


class GkSafeLoader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e3``-style floats (YAML 1.2), nothing else added."""


def _use_float_resolver(cls: type) -> None:
    resolvers = {k: [r for r in v if r[0] != "tag:yaml.org,2002:float"]
                 for k, v in cls.yaml_implicit_resolvers.items()}
    cls.yaml_implicit_resolvers = resolvers
    cls.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_RE, list("-+0123456789."))


_use_float_resolver(GkSafeLoader)

_T = "tag:yaml.org,2002:"
_CONSTRUCTOR = SafeConstructor()
_SCALARS = {
    _T + "null": _CONSTRUCTOR.construct_yaml_null,
    _T + "bool": _CONSTRUCTOR.construct_yaml_bool,
    _T + "int": _CONSTRUCTOR.construct_yaml_int,
    _T + "float": _CONSTRUCTOR.construct_yaml_float,
    _T + "str": _CONSTRUCTOR.construct_yaml_str,
    _T + "timestamp": lambda node: node.value,  # dates stay text: nothing here takes a date
}


@dataclass
class Marks:
    """Where a value was written, and (for containers) where each of its parts was.

    ``line``/``col`` are 1-based. For a mapping, ``keys[k]`` is the mark of key ``k`` and
    ``items[k]`` the Marks of its value; for a sequence ``items[i]``.
    """

    filename: str
    line: int
    col: int
    keys: dict[Any, tuple[int, int]] = field(default_factory=dict)
    items: dict[Any, "Marks"] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.filename}:{self.line}:{self.col}"

    def key_where(self, key: Any) -> str:
        """FILE:LINE:COL of key ``key`` of this mapping (the mapping itself if absent)."""
        if key in self.keys:
            line, col = self.keys[key]
            return f"{self.filename}:{line}:{col}"
        return self.where

    def value_where(self, key: Any) -> str:
        """FILE:LINE:COL of the value under ``key`` (or item ``key``); the container if absent."""
        sub = self.items.get(key)
        return sub.where if sub is not None else self.where

    def child(self, key: Any) -> "Marks | None":
        return self.items.get(key)

    def locate(self, path: tuple, *, as_key: bool = False) -> str:
        """FILE:LINE:COL of the value (or, with ``as_key``, the key) at ``path``.

        Walks as deep as the path exists: a missing key (e.g. a missing required
        parameter) points at the innermost mapping that exists. Path parts that match
        nothing (pydantic adds union member names such as ``'list[float]'``) are skipped.
        """
        node: Marks = self
        parts = list(path)
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part in node.items or part in node.keys:
                if last and as_key and part in node.keys:
                    return node.key_where(part)
                nxt = node.items.get(part)
                if nxt is None:
                    return node.key_where(part)
                node = nxt
            elif last:
                return node.where
            # otherwise skip this part and try the next one at the same level
        return node.where


def _mark(node: Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _yaml_error(exc: yaml.YAMLError, filename: str, text: str) -> ConfigError:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    if mark is not None:
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}"
    elif isinstance(exc, yaml.reader.ReaderError):
        before = text[:exc.position]
        line = before.count("\n") + 1
        where = f"{filename}:{line}:{exc.position - (before.rfind(chr(10)) + 1) + 1}"
        ch = exc.character
        code = ch if isinstance(ch, int) else ord(ch) if isinstance(ch, str) and len(ch) == 1 else None
        problem = f"invalid character {'U+%04X' % code if code is not None else repr(ch)}: {exc.reason}"
    else:
        where = f"{filename}:1:1"
    hint = "check the indentation, the quoting and the brackets around here"
    if isinstance(exc, yaml.reader.ReaderError):
        hint = "remove the control character (YAML files are plain text)"
    context_mark = getattr(exc, "context_mark", None)
    if "\t" in problem or "\\t" in problem:  # PyYAML shows the tab as its repr
        hint = "YAML does not allow tabs for indentation: use spaces"
    elif context and "single document" in context:
        problem = f"{context}, {problem}"
        hint = "a pipeline file holds one YAML document: remove the second '---' (use 'pipelines:' " \
               "for several pipelines)"
    elif context:
        at = f" that starts at line {context_mark.line + 1}, column {context_mark.column + 1}" \
            if context_mark is not None else ""
        hint = f"{context}{at}; {hint}"
    return ConfigError(f"YAML syntax error: {problem}", where=where, hint=hint)


class _Builder:
    def __init__(self, filename: str):
        self.filename = filename
        self.errors: list[ConfigError] = []
        self._memo: dict[int, tuple[Any, Marks]] = {}
        self._active: set[int] = set()

    def where(self, node: Node) -> str:
        line, col = _mark(node)
        return f"{self.filename}:{line}:{col}"

    def build(self, node: Node) -> tuple[Any, Marks]:
        key = id(node)
        if key in self._memo:  # an alias: reuse (keeps anchors cheap, no exponential blow-up)
            return self._memo[key]
        if key in self._active:
            self.errors.append(ConfigError("recursive YAML alias", where=self.where(node),
                                           hint="an anchor cannot contain an alias to itself"))
            return None, Marks(self.filename, *_mark(node))
        self._active.add(key)
        try:
            if isinstance(node, ScalarNode):
                result = self._scalar(node)
            elif isinstance(node, SequenceNode):
                result = self._sequence(node)
            else:
                result = self._mapping(node)
        finally:
            self._active.discard(key)
        self._memo[key] = result
        return result

    def _bad_tag(self, node: Node, kind: str) -> None:
        tag = "!!" + node.tag.removeprefix(_T) if node.tag.startswith(_T) else node.tag
        self.errors.append(ConfigError(
            f"YAML tag '{tag}' is not allowed here", where=self.where(node),
            hint=f"pipeline files hold plain data only (mappings, lists, strings, numbers, true/false, "
                 f"null); remove the tag from this {kind}"))

    def _scalar(self, node: ScalarNode) -> tuple[Any, Marks]:
        marks = Marks(self.filename, *_mark(node))
        construct = _SCALARS.get(node.tag)
        if construct is None:
            self._bad_tag(node, "value")
            return None, marks
        try:
            return construct(node), marks
        except (ValueError, TypeError, yaml.YAMLError) as exc:
            self.errors.append(ConfigError(f"cannot read {node.value!r} as {node.tag.removeprefix(_T)}: {exc}",
                                           where=self.where(node)))
            return None, marks

    def _sequence(self, node: SequenceNode) -> tuple[Any, Marks]:
        marks = Marks(self.filename, *_mark(node))
        if node.tag != _T + "seq":
            self._bad_tag(node, "list")
        out = []
        for i, item in enumerate(node.value):
            value, sub = self.build(item)
            out.append(value)
            marks.items[i] = sub
        return out, marks

    def _mapping(self, node: MappingNode) -> tuple[Any, Marks]:
        marks = Marks(self.filename, *_mark(node))
        if node.tag != _T + "map":
            self._bad_tag(node, "mapping")
        out: dict[Any, Any] = {}
        merged: dict[Any, tuple[Any, Marks, tuple[int, int]]] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _T + "merge":
                self._merge(value_node, merged)
                continue
            if not isinstance(key_node, ScalarNode):
                self.errors.append(ConfigError("mapping keys must be plain names", where=self.where(key_node),
                                               hint="write 'name: value'"))
                continue
            key, _ = self._scalar(key_node)
            value, sub = self.build(value_node)
            if key in marks.keys:
                line, col = marks.keys[key]
                self.errors.append(ConfigError(
                    f"duplicate key '{key}'", where=self.where(key_node),
                    hint=f"'{key}' is already set at line {line}, column {col}; keep only one"))
                continue
            out[key] = value
            marks.keys[key] = _mark(key_node)
            marks.items[key] = sub
        for key, (value, sub, kmark) in merged.items():  # explicit keys win over merged ones
            if key not in out:
                out[key] = value
                marks.keys[key] = kmark
                marks.items[key] = sub
        return out, marks

    def _merge(self, node: Node, merged: dict) -> None:
        sources = node.value if isinstance(node, SequenceNode) else [node]
        for src in sources:
            if not isinstance(src, MappingNode):
                self.errors.append(ConfigError("'<<' merges mappings only", where=self.where(src),
                                               hint="write '<<: *anchor' where the anchor is a mapping"))
                continue
            value, sub = self.build(src)
            if not isinstance(value, dict):
                continue
            for k, v in value.items():
                merged.setdefault(k, (v, sub.items[k], sub.keys[k]))


def load_marked(text: str, filename: str = "<string>") -> tuple[Any, Marks | None]:
    """Parse one YAML document into plain Python values and their :class:`Marks`.

    Returns ``(None, None)`` for a document with no content. Raises ConfigError/ConfigErrors.
    """
    try:
        node = yaml.compose(text, Loader=GkSafeLoader)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, filename, text) from None
    if node is None:
        return None, None
    builder = _Builder(filename)
    value, marks = builder.build(node)
    if builder.errors:
        raise builder.errors[0] if len(builder.errors) == 1 else ConfigErrors(builder.errors)
    return value, marks
