"""The stage catalog: stages/__init__.py's static table says what every stage module registers, and
a stage module is imported when its type is first looked up or its class first used."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pygpukit_dsp.stages as stages_pkg
from pygpukit_dsp.stages import CATALOG, STAGES
from pygpukit_dsp.stages.base import Stage


def test_the_catalog_is_what_the_modules_register():
    for info in pkgutil.iter_modules(stages_pkg.__path__):
        importlib.import_module(f"pygpukit_dsp.stages.{info.name}")  # every module, catalogued or not
    registered = {name: (cls.__module__, cls.__name__) for name, cls in STAGES.items()
                  if cls.__module__.startswith("pygpukit_dsp.stages.") and issubclass(cls, Stage)}
    declared = {name: (f"pygpukit_dsp.stages.{module}", cls) for name, module, cls in CATALOG}
    assert registered == declared  # a new stage module needs its line in CATALOG (stages/__init__.py)


def _modules_after(code: str) -> list[str]:
    """The stage modules (besides the helpers base, _common, _design_rules, params_doc) a fresh interpreter
    imported running ``code``."""
    probe = (f"{code}\nimport sys\n"
             "print(sorted(m for m in sys.modules if m.startswith('pygpukit_dsp.stages.')\n"
             "             and m.rpartition('.')[2] not in ('base', '_common', '_design_rules', 'params_doc')))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return eval(r.stdout.strip().splitlines()[-1])


def test_looking_up_a_type_imports_its_module_alone():
    assert _modules_after("from pygpukit_dsp.stages import stage_class; stage_class('gain')") == [
        "pygpukit_dsp.stages.gain"]
    assert _modules_after("from pygpukit_dsp.stages import Power") == ["pygpukit_dsp.stages.elementwise"]
    assert _modules_after("import pygpukit_dsp.stages as s; s.make_stage('rfft')") == ["pygpukit_dsp.stages.fft"]


def test_listing_and_misspelling_types_import_no_stage_module():
    code = ("from pygpukit_dsp.errors import ConfigError\nfrom pygpukit_dsp.stages import CATALOG, STAGES, stage_class\n"
            "assert 'fir' in STAGES and len(sorted(STAGES)) == len(CATALOG) == 25\n"
            "try:\n    stage_class('gian')\nexcept ConfigError as e:\n    assert \"'gain'\" in e.hint, e.hint\n"
            "else:\n    raise AssertionError('no error')")
    assert _modules_after(code) == []


def test_a_stage_module_is_an_attribute_of_the_package_as_before():
    assert _modules_after("import pygpukit_dsp.stages as s; s.fir.window_arg('hann')") == ["pygpukit_dsp.stages.fir"]
