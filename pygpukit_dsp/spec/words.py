"""How the loader's messages show values and types, and where it finds a component's class."""

from __future__ import annotations

from typing import Any, Callable


def _show(v: Any) -> str:
    """A value as the YAML author wrote it: 'abc', null, true, 3."""
    if isinstance(v, str):
        return repr(v)
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _type_name(v: Any) -> str:
    if v is None:
        return "nothing (null)"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "true/false",
            int: "an integer", float: "a number"}.get(type(v), type(v).__name__)


def _lookup(kind: str) -> Callable:
    from ..io.base import sink_class, source_class

    return source_class if kind == "source" else sink_class
