"""A registry of YAML type names whose classes load when first looked up.

Core layer: imports only the standard library. ``stages.STAGES``, ``io.SOURCES`` and ``io.SINKS``
are registries: their packages declare every built-in type name with the module that defines it
(a static table, so listing the names, checking one and suggesting a near one import nothing),
and a module registers its classes when it is imported, which happens the first time one of its
type names is looked up. ``gk-stream validate FILE`` thus imports the modules of the types FILE
names, and no other.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(MutableMapping[str, T], Generic[T]):
    """Type name -> class. A declared name is a key before its module is imported; looking it up
    imports that module, whose class registers itself (``registry[name] = cls``). Assigning a name
    registers a class directly (a custom stage, a test's stand-in)."""

    def __init__(self, kind: str):
        self.kind = kind                       # "stage" | "source" | "sink": for messages
        self._classes: dict[str, T] = {}       # registered (imported) classes
        self._modules: dict[str, str] = {}     # declared names -> the module that registers them

    def declare(self, name: str, module: str) -> None:
        """``name`` is registered by importing ``module`` (a dotted path)."""
        self._modules[name] = module

    def module_of(self, name: str) -> str | None:
        """The module that defines ``name`` (declared or registered), without importing it."""
        cls = self._classes.get(name)
        return getattr(cls, "__module__", None) if cls is not None else self._modules.get(name)

    def is_loaded(self, name: str) -> bool:
        return name in self._classes

    def register(self, name: str, cls: T) -> None:
        """Register ``cls`` as ``name``; TypeError when another class already holds the name."""
        have = self._classes.get(name)
        if have is not None and have is not cls:
            raise TypeError(f"{self.kind} type '{name}' registered twice ({have!r} and {cls!r})")
        self._classes[name] = cls

    def __getitem__(self, name: str) -> T:
        try:
            return self._classes[name]
        except KeyError:
            module = self._modules.get(name)
            if module is None:
                raise
        importlib.import_module(module)  # registers the module's classes
        try:
            return self._classes[name]
        except KeyError:
            raise LookupError(f"{self.kind} type '{name}' is declared in {module}, which did not register it") \
                from None

    def __setitem__(self, name: str, cls: T) -> None:
        self._classes[name] = cls

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._classes.pop(name, None)
        self._modules.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._classes or name in self._modules

    def __iter__(self) -> Iterator[str]:
        yield from self._modules
        yield from (n for n in self._classes if n not in self._modules)

    def __len__(self) -> int:
        return len(self._modules.keys() | self._classes.keys())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self)!r})"
