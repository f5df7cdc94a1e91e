"""docs/api.md maps every registered YAML type to its class, and its example runs."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np

from pygpukit_dsp.io import SINKS, SOURCES
from pygpukit_dsp.stages import STAGES

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
ROW = re.compile(r"^\| `([a-z_]+)` \| `(\w+)` \| `from (pygpukit_dsp[.\w]*) import (\w+)` \|$")


def tables() -> dict[str, dict[str, tuple[str, str, str]]]:
    """{'Stages' | 'Sources' | 'Sinks': {yaml type: (class, module, imported name)}}"""
    out: dict[str, dict] = {}
    current = None
    for line in DOC.read_text().splitlines():
        head = re.match(r"^(Stages|Sources|Sinks): ", line)
        if head:
            current = out.setdefault(head.group(1), {})
        m = ROW.match(line)
        if m and current is not None:
            current[m.group(1)] = m.group(2, 3, 4)
    return out


def test_every_registered_type_has_its_class_and_import():
    t = tables()
    for title, registry in (("Stages", STAGES), ("Sources", SOURCES), ("Sinks", SINKS)):
        assert sorted(t[title]) == sorted(registry), title
        for type_name, (cls_name, module, imported) in t[title].items():
            assert cls_name == imported == registry[type_name].__name__
            assert getattr(importlib.import_module(module), imported) is registry[type_name]


def test_the_example_builds_and_runs(monkeypatch, tmp_path):
    block = DOC.read_text().split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(block.replace("print(p.to_yaml())", "text = p.to_yaml()"), names)
    assert names["levels"].shape == (2, 188, 513) and names["levels"].dtype == np.float32
    assert names["summary"].ended_by == "source end"
    assert "class: realtime" in names["text"] and "type: synth" in names["text"]
