"""The shape of the source tree: no import cycle in pygpukit_dsp, imports pointing down its layers
(CLI, executor, description, core), no source file over 800 lines, and the bench reached only by the
CLI's bench command.

The import graph is read with ``ast`` (nothing is imported): every ``import`` and ``from ... import``
of a module, at module level or inside a function alike, except those under ``if TYPE_CHECKING:``
(typing only: they never run). ``from PKG import NAME`` depends on the submodule PKG.NAME when there
is one, else on PKG itself.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pygpukit_dsp"
MAX_LINES = 800
# source files the line limit applies to: (folder, suffixes)
SOURCES = ((PACKAGE, (".py",)), (ROOT / "native", (".cpp", ".h", ".cu")), (ROOT / "rust", (".rs",)))
SKIP_DIRS = {"target", "build", "_skbuild", "__pycache__", "_kernels"}  # build outputs, generated code
# the layers of pygpukit_dsp (docs/architecture.md), top to bottom; bench/ sits beside them
CLI = ("pygpukit_dsp.cli", "pygpukit_dsp.cli_validate", "pygpukit_dsp.cluster", "pygpukit_dsp.cli_format")
EXECUTOR = ("pygpukit_dsp.execute", "pygpukit_dsp.session", "pygpukit_dsp.runner", "pygpukit_dsp.graph_runner",
            "pygpukit_dsp.summary", "pygpukit_dsp.handle", "pygpukit_dsp.dispatch", "pygpukit_dsp.admission",
            "pygpukit_dsp.backends")
DESCRIPTION = ("pygpukit_dsp.pipeline", "pygpukit_dsp.graph", "pygpukit_dsp.graph_model", "pygpukit_dsp.graph_render",
               "pygpukit_dsp.spec", "pygpukit_dsp.stages", "pygpukit_dsp.io")
CORE = ("pygpukit_dsp.errors", "pygpukit_dsp.signal", "pygpukit_dsp.qos", "pygpukit_dsp.nonfinite",
        "pygpukit_dsp.limits", "pygpukit_dsp.devices", "pygpukit_dsp.capabilities", "pygpukit_dsp._libs",
        "pygpukit_dsp.affinity", "pygpukit_dsp.registry")
BENCH = "pygpukit_dsp.bench"
# where the core may reach the bench: the CLI's bench command (cli.py's cmd_bench and its _bench_* helpers)
BENCH_ENTRY = ("pygpukit_dsp.cli", ("cmd_bench", "_bench_"))


@dataclass(frozen=True)
class Import:
    target: str    # the module imported
    line: int
    function: str  # the function it is in ("" at module level)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> tuple[dict[str, Path], set[str]]:
    """The Python modules of the package (name -> file), and every importable module name: those,
    and the native extension modules known by their stubs (``_native``, its submodules)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py") if not SKIP_DIRS & set(p.parts)}
    names = set(modules) | {module_name(p) for p in PACKAGE.rglob("*.pyi")}
    return modules, names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """Every import of module ``name`` that lands in the package, TYPE_CHECKING blocks aside."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def add(target: str, node: ast.AST, function: str) -> None:
        if target in known and target != name:
            found.append(Import(target, node.lineno, function))

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:  # the else branch runs
                    visit_one(other, function)
                continue
            visit_one(child, function)

    def visit_one(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, function)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                add(sub if sub in known else source, node, function)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = function or node.name  # the outermost function names the place
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for other in node.orelse:
                visit_one(other, function)
            return
        visit(node, function)

    visit(ast.parse(path.read_text(), filename=str(path)), "")
    return found


def import_graph() -> dict[str, list[Import]]:
    modules, known = package_modules()
    return {name: imports_of(name, path, known) for name, path in sorted(modules.items())}


def find_cycles(graph: dict[str, list[Import]]) -> list[list[str]]:
    """One cycle (a list of modules, the first repeated at the end) per strongly connected component
    of more than one module (Tarjan), or a module that imports itself."""
    edges = {m: sorted({i.target for i in imps if i.target in graph}) for m, imps in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def strongconnect(v: str) -> None:  # recursive: the package has a few hundred modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges[v]:
                components.append(sorted(comp))

    for v in edges:
        if v not in index:
            strongconnect(v)

    cycles = []
    for comp in components:
        members, start = set(comp), comp[0]
        # the shortest way from start back to itself inside the component (breadth first)
        previous: dict[str, str] = {}
        frontier, seen, end = [start], {start}, None
        while frontier and end is None:
            nxt = []
            for v in frontier:
                for w in edges[v]:
                    if w == start:
                        end = v
                        break
                    if w in members and w not in seen:
                        seen.add(w)
                        previous[w] = v
                        nxt.append(w)
                if end is not None:
                    break
            frontier = nxt
        path = [start]
        v = end
        while v is not None and v != start:
            path.insert(1, v)
            v = previous.get(v)
        cycles.append(path + [start])
    return cycles


def describe_cycle(cycle: list[str], graph: dict[str, list[Import]]) -> str:
    steps = []
    for a, b in zip(cycle, cycle[1:]):
        where = next(i for i in graph[a] if i.target == b)
        inside = f" in {where.function}()" if where.function else ""
        steps.append(f"  {a} imports {b} (line {where.line}{inside})")
    return " -> ".join(cycle) + "\n" + "\n".join(steps)


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "pygpukit_dsp.pipeline" in graph and "pygpukit_dsp.session" in graph  # the graph was read
    cycles = find_cycles(graph)
    assert not cycles, "import cycles (TYPE_CHECKING imports aside):\n" + "\n".join(
        describe_cycle(c, graph) for c in cycles)


def test_no_source_file_is_over_800_lines():
    over = []
    for folder, suffixes in SOURCES:
        for path in sorted(folder.rglob("*")):
            if path.suffix in suffixes and path.is_file() and not SKIP_DIRS & set(path.relative_to(ROOT).parts):
                lines = len(path.read_text(errors="replace").splitlines())
                if lines > MAX_LINES:
                    over.append(f"  {path.relative_to(ROOT)}: {lines} lines")
    assert not over, f"source files over {MAX_LINES} lines:\n" + "\n".join(over)


def _in(module: str, layer: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in layer)


def test_imports_point_down_the_layers():
    """The description imports the executor only inside a function (Pipeline.process/run/start hand
    the pipeline to execute.py); the core imports neither the executor nor the CLI; only the CLI
    imports the CLI."""
    wrong = []
    for name, imports in import_graph().items():
        for i in imports:
            where = f"line {i.line}" + (f" in {i.function}()" if i.function else " at module level")
            if _in(name, DESCRIPTION) and _in(i.target, EXECUTOR) and not i.function:
                wrong.append(f"  the description's {name} imports the executor's {i.target} ({where})")
            if _in(name, CORE) and _in(i.target, EXECUTOR + CLI):
                wrong.append(f"  the core's {name} imports {i.target} ({where})")
            if not _in(name, CLI) and _in(i.target, CLI):
                wrong.append(f"  {name} imports the CLI's {i.target} ({where})")
    assert not wrong, "imports against the layers (docs/architecture.md):\n" + "\n".join(wrong)


def test_only_the_cli_bench_command_imports_the_bench():
    entry_module, entry_functions = BENCH_ENTRY
    wrong = []
    for name, imports in import_graph().items():
        if name == BENCH or name.startswith(BENCH + "."):
            continue
        for i in imports:
            if i.target == BENCH or i.target.startswith(BENCH + "."):
                if name == entry_module and i.function.startswith(entry_functions):
                    continue
                inside = f" in {i.function}()" if i.function else " at module level"
                wrong.append(f"  {name} imports {i.target} (line {i.line}{inside})")
    assert not wrong, "the core imports the bench (only gk-stream's bench command may):\n" + "\n".join(wrong)


# --------------------------------------------------------------------------- the reader itself


def _write(tmp: Path, files: dict[str, str]) -> dict[str, Path]:
    out = {}
    for rel, text in files.items():
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        out[rel] = p
    return out


def test_the_reader_sees_function_imports_and_skips_type_checking(tmp_path):
    files = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n"
                    "def f():\n    from . import c\n",
        "pkg/b.py": "from .a import f\nimport pkg.c\n",
        "pkg/c.py": "from . import b\nfrom .d import *\n",
        "pkg/d.py": "",
    })
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"}
    a = imports_of("pkg.a", files["pkg/a.py"], known)
    assert [(i.target, i.function) for i in a] == [("pkg.c", "f")]  # b only under TYPE_CHECKING
    assert {i.target for i in imports_of("pkg.b", files["pkg/b.py"], known)} == {"pkg.a", "pkg.c"}
    assert {i.target for i in imports_of("pkg.c", files["pkg/c.py"], known)} == {"pkg.b", "pkg.d"}
    graph = {m: imports_of(m, files[m.replace(".", "/") + ".py"], known) for m in ("pkg.a", "pkg.b", "pkg.c", "pkg.d")}
    cycles = find_cycles(graph)
    assert cycles == [["pkg.a", "pkg.c", "pkg.b", "pkg.a"]]
    assert "pkg.a imports pkg.c (line 5 in f())" in describe_cycle(cycles[0], graph)


def test_the_reader_finds_no_cycle_in_a_layered_package(tmp_path):
    files = _write(tmp_path, {
        "pkg/a.py": "from . import b\n",
        "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\nelse:\n    pass\n",
    })
    known = {"pkg", "pkg.a", "pkg.b"}
    graph = {m: imports_of(m, files[m.replace(".", "/") + ".py"], known) for m in ("pkg.a", "pkg.b")}
    assert find_cycles(graph) == []
