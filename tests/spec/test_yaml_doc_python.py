"""docs/yaml.md's Python example prints what its comments say (run from the repository root, as the
paths in it are written)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_python_example_prints_what_its_comments_say(monkeypatch):
    block = (ROOT / "docs" / "yaml.md").read_text().split("```python\n")[1].split("```")[0]
    claims = re.findall(r'^print\((.+?)\)\s+# "(.+)"$', block, re.M)
    assert claims, "the example shows no printed value"
    setup = "\n".join(line for line in block.splitlines() if not line.startswith("print("))
    monkeypatch.chdir(ROOT)
    names: dict = {}
    exec(setup, names)
    for expr, shown in claims:
        assert str(eval(expr, names)) == shown, expr
