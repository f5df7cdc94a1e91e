"""The committed .pyi stubs are what scripts/gen_stubs.py makes of the Params models now, they type
every registered stage, source and sink with the keywords of its signature, and Python never reads
them."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from pygpukit_dsp.io import SINKS, SOURCES
from pygpukit_dsp.stages import STAGES

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gen_stubs.py"
STUBS = {"stages": ROOT / "pygpukit_dsp" / "stages" / "__init__.pyi", "io": ROOT / "pygpukit_dsp" / "io" / "__init__.pyi"}


def test_the_stubs_are_up_to_date():
    r = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr  # the message names the fix: python scripts/gen_stubs.py


def test_a_stale_stub_fails_the_check_and_names_the_command(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("gen_stubs", SCRIPT)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    rendered = gen.render()
    copies = {tmp_path / p.parent.name / p.name: text for p, text in rendered.items()}
    for path, text in copies.items():
        path.parent.mkdir()
        path.write_text(text.replace("taps_per_channel: int = 8", "taps_per_channel: int = 9"))
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "render", lambda: copies)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0  # written back: up to date again


def test_the_check_prints_the_fix_command(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("gen_stubs", SCRIPT)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "render", lambda: {tmp_path / "pygpukit_dsp" / "stages" / "__init__.pyi": "x\n"})
    assert gen.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "pygpukit_dsp/stages/__init__.pyi" in err and "python scripts/gen_stubs.py" in err


def _overloads(tree: ast.Module) -> dict[str, list[ast.FunctionDef]]:
    out: dict[str, list[ast.FunctionDef]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
    return out


@pytest.mark.parametrize("package, classes", [("stages", STAGES.values()),
                                              ("io", [*SOURCES.values(), *SINKS.values()])])
def test_every_registered_class_is_typed_with_its_signature(package, classes):
    tree = ast.parse(STUBS[package].read_text())
    inits = _overloads(tree)
    for cls in classes:
        by_params, by_keywords = inits[cls.__name__]
        assert [a.arg for a in by_params.args.args] == ["self", "params"]
        assert [a.arg for a in by_keywords.args.kwonlyargs] == list(inspect.signature(cls).parameters)
        for arg in by_keywords.args.kwonlyargs:
            assert ast.unparse(arg.annotation) == repr(inspect.signature(cls).parameters[arg.arg].annotation)


def test_the_stubs_export_what_the_packages_export():
    import pygpukit_dsp.io
    import pygpukit_dsp.stages

    for package, module in (("stages", pygpukit_dsp.stages), ("io", pygpukit_dsp.io)):
        tree = ast.parse(STUBS[package].read_text())
        [exported] = [n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "__all__"]
        assert ast.literal_eval(exported) == module.__all__
        defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        defined |= {a.asname for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names
                    if a.asname == a.name}
        assert set(module.__all__) <= defined


def test_python_imports_the_modules_not_the_stubs():
    code = ("import pygpukit_dsp.stages as s, pygpukit_dsp.io as io; "
            "print(s.__file__.endswith('__init__.py'), io.__file__.endswith('__init__.py'), "
            "s.Fir is s.fir.Fir, io.SynthSource is io.synth.SynthSource)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"] * 4
