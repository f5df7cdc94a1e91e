"""The source and sink catalog: io/__init__.py's static table says what every io module registers,
and a module is imported when one of its types is first looked up or its class first used."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pygpukit_dsp.io as io_pkg
from pygpukit_dsp.io import CATALOG, SINKS, SOURCES


def test_the_catalog_is_what_the_modules_register():
    for info in pkgutil.iter_modules(io_pkg.__path__):
        importlib.import_module(f"pygpukit_dsp.io.{info.name}")  # every module, catalogued or not
    registered = {(kind, name): (cls.__module__, cls.__name__)
                  for kind, table in (("source", SOURCES), ("sink", SINKS)) for name, cls in table.items()
                  if cls.__module__.startswith("pygpukit_dsp.io.")}
    declared = {(kind, name): (f"pygpukit_dsp.io.{module}", cls) for kind, name, module, cls in CATALOG}
    assert registered == declared  # a new source or sink needs its line in CATALOG (io/__init__.py)


def _modules_after(code: str) -> list[str]:
    """The io modules that register types, imported by a fresh interpreter running ``code``."""
    names = sorted({f"pygpukit_dsp.io.{module}" for _, _, module, _ in CATALOG})
    probe = f"{code}\nimport sys\nprint([m for m in {names!r} if m in sys.modules])"
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return eval(r.stdout.strip().splitlines()[-1])


def test_looking_up_a_type_imports_its_module_alone():
    assert _modules_after("from pygpukit_dsp.io import source_class; source_class('synth')") == [
        "pygpukit_dsp.io.synth"]
    assert _modules_after("from pygpukit_dsp.io import SINKS; SINKS['spectrum']") == ["pygpukit_dsp.io.spectrum_view"]
    assert _modules_after("from pygpukit_dsp.io import NumpySink") == ["pygpukit_dsp.io.arrays"]


def test_listing_and_misspelling_types_import_no_io_module():
    code = ("from pygpukit_dsp.errors import ConfigError\nfrom pygpukit_dsp.io import SINKS, SOURCES, sink_class\n"
            "assert 'file' in SOURCES and 'file' in SINKS and 'spectrum' not in SOURCES\n"
            "try:\n    sink_class('nul')\nexcept ConfigError as e:\n    assert \"'null'\" in e.hint, e.hint\n"
            "else:\n    raise AssertionError('no error')")
    assert _modules_after(code) == []
