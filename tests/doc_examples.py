"""The code blocks of README.md and docs/*.md, and how tests/test_docs.py runs each one.

A block is run by its language:

* ``python``: executed statement by statement in a work folder holding copies of pipelines/ and
  benchmarks/. A statement whose line ends in ``# -> TEXT`` must print TEXT (a bare expression:
  its repr must read TEXT); ``...`` in TEXT matches anything.
* ``yaml``: a document with ``version:`` is loaded through ``pygpukit_dsp.spec`` and checked as
  ``gk-stream validate`` does (sources that need no device or network are opened, specs
  propagated); a fragment (a mapping of pipeline keys, or a list of stages) is embedded into a
  minimal pipeline document, at the same lines, and loaded the same way (a list of stages: each
  stage's type and parameters, not their chain, as such lists show alternatives).
* ``console``: each ``$ command`` line runs in bash in the work folder (``gk-stream`` is this
  interpreter's ``python -m pygpukit_dsp.cli``; no CUDA driver unless the block is marked gpu,
  so a GPU machine prints what a machine without one does) and its output (stdout and stderr)
  must match the lines shown: numbers that vary from run to run (decimals: latencies, wall
  times, rates; the counts in VARYING_COUNTS) are masked, runs of spaces match any run, ``...``
  on a line of its own matches any run of lines, and within a line any text.
* ``bash``/``sh`` (install, build and set-up recipes for some machine): not executed; checked
  with ``bash -n``, every repository path they name must exist, and every ``gk-stream`` command
  in them must parse with gk-stream's own argument parser.
* ``json``: must parse.

A block that cannot run on this machine carries an HTML comment on the line before its fence:
``<!-- doc-test: gpu -->`` (run by a gpu-marked test), ``multi_gpu`` (two GPUs), ``jack`` (run
against a JACK server with the dummy backend), ``file NAME`` (written to NAME in the work folder
of the blocks after it in the same page, which check it), ``gnuradio FILE.yaml`` (a GNU Radio
flowgraph: run by the system's python3, where GNU Radio's bindings are, while ``gk-stream run
FILE.yaml``, a file block before it, runs beside it; both must exit 0), or ``illustrative (reason)`` for a
block that is not code a user runs (a diagram, an excerpt, a figure). Every other language
needs the illustrative marker.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUNNABLE = ("python", "yaml", "console", "bash", "sh", "json")
MARKERS = ("gpu", "multi_gpu", "jack", "file", "gnuradio", "illustrative")

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<kind>[\w-]+)\s*(?P<arg>.*?)\s*-->\s*$")

# Long commands of the docs, run shorter where the output shown does not depend on the length
# (the counts it shows that do are masked: VARYING_COUNTS). Applied to console commands and
# Python blocks before they run. The live run's 10 s become 0.5 s once its stream is open (its
# stats are empty until then: opening loads what its stages need, SciPy for a filter design).
SHORTER = {
    "--duration 30": "--duration 1",
    "time.sleep(10)": "[time.sleep(0.05) for _ in range(1200) if not run.stats()]; time.sleep(0.5)",
    "session.run(duration=10)": "session.run(duration=2)",
}

# Integers in output that differ from run to run (the regex groups): scheduler and xrun counts
# depend on the host's load, block counts of live runs on their length.
VARYING_COUNTS = (
    r"misses (\d+)", r"drops (\d+)", r"chunks (\d+)", r"overflows (\d+)", r"underflows (\d+)",
    r"overruns (\d+) \((\d+) frames\)", r"underruns (\d+) \((\d+) frames\)", r"late blocks (\d+)",
    r"\((\d+) blocks\)", r"(\d+) frames captured", r"pid (\d+)",
)
_DECIMAL = re.compile(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?")
_NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"


@dataclass(frozen=True)
class Block:
    doc: str            # path from the repository root, e.g. "docs/yaml.md"
    line: int           # line of the opening fence (1-based)
    lang: str
    text: str
    marker: str | None  # one of MARKERS, or None
    arg: str            # the illustrative reason or the file name

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


class DocError(AssertionError):
    """A doc example that does not run as written, or whose output differs from the doc's."""


# ------------------------------------------------------------------ finding the blocks
def doc_paths() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def parse(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    doc = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent"))
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[0] * len(fence)):
            j += 1
        if j == len(lines):
            raise DocError(f"{doc}:{i + 1}: the code block is never closed")
        body = "\n".join(ln[min(indent, len(ln) - len(ln.lstrip(" "))):] for ln in lines[i + 1:j])
        marker, arg = None, ""
        mk = _MARKER.match(lines[i - 1]) if i else None
        if mk:
            marker, arg = mk.group("kind"), mk.group("arg")
            if marker not in MARKERS:
                raise DocError(f"{doc}:{i}: unknown doc-test marker '{marker}' (one of {', '.join(MARKERS)})")
            if marker == "illustrative":
                arg = arg.strip()
                if not (arg.startswith("(") and arg.endswith(")") and len(arg) > 2):
                    raise DocError(f"{doc}:{i}: 'illustrative' needs a reason in parentheses")
                arg = arg[1:-1]
            elif marker == "gnuradio" and not arg.endswith(".yaml"):
                raise DocError(f"{doc}:{i}: 'gnuradio' needs the pipeline file that runs beside the flowgraph")
            elif marker == "file" and not arg:
                raise DocError(f"{doc}:{i}: 'file' needs a file name")
        blocks.append(Block(doc, i + 1, m.group("lang").lower(), body + "\n", marker, arg))
        i = j + 1
    fences = {b.line for b in blocks}
    stray = [n for n, ln in enumerate(lines, 1) if _MARKER.match(ln) and n + 1 not in fences]
    if stray:
        raise DocError(f"{doc}:{stray[0]}: a doc-test marker must be on the line just before a code block's fence")
    return blocks


def all_blocks() -> list[Block]:
    return [b for path in doc_paths() for b in parse(path)]


# ------------------------------------------------------------------ the work folder
def make_workdir(path: Path, block: Block) -> Path:
    """``path`` with copies of pipelines/ and benchmarks/ (what the docs' commands name), and the
    ``file`` blocks of the same page that come before ``block``."""
    ignore = shutil.ignore_patterns("out", "__pycache__", "*.partial")
    for name in ("pipelines", "benchmarks"):
        shutil.copytree(ROOT / name, path / name, ignore=ignore, dirs_exist_ok=True)
    # gk-stream as this interpreter runs it (an installed console script may sit elsewhere, or
    # belong to another environment)
    shim = path / ".bin" / "gk-stream"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pygpukit_dsp.cli "$@"\n')
    shim.chmod(0o755)
    for other in parse(ROOT / block.doc):
        if other.line >= block.line:
            break
        if other.marker == "file":
            target = path / other.arg
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(other.text)
    return path


# Where unmarked blocks look for the CUDA driver: nowhere, so that a GPU machine prints what the
# docs show for a machine without one. The reason printed names this path; run_console reads it
# back as the library name such a machine prints.
NO_DRIVER = "/nonexistent/libcuda.so.1"


def environment(*, gpu: bool, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This interpreter's folder first on PATH; without ``gpu`` no CUDA driver, so that the output
    is the same on every machine (the docs show a machine without a GPU)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("COLUMNS", "200")
    if not gpu:
        env["GK_LIBCUDA"] = NO_DRIVER
    env.update(extra or {})
    return env


def shorten(text: str) -> str:
    for long, short in SHORTER.items():
        text = text.replace(long, short)
    return text


# ------------------------------------------------------------------ matching output
def _line_pattern(line: str) -> str:
    """A regex for one expected output line: varying numbers masked, spaces flexible, ``...``
    any text."""
    masked: list[tuple[int, int]] = []
    for pattern in VARYING_COUNTS:
        for m in re.finditer(pattern, line):
            masked += [m.span(g) for g in range(1, (m.lastindex or 0) + 1)]
    masked += [m.span() for m in _DECIMAL.finditer(line)]
    masked.sort()
    out, pos = [], 0
    for a, b in masked:
        if a < pos:
            continue
        out.append(_literal(line[pos:a]))
        out.append(_NUMBER)
        pos = b
    out.append(_literal(line[pos:]))
    return "".join(out)


def _literal(text: str) -> str:
    parts = re.split(r"(\.\.\.| +)", text)
    return "".join(".*?" if p == "..." else " +" if p and p.isspace() else re.escape(p) for p in parts)


def match_output(expected: list[str], actual: str) -> bool:
    """True when ``actual`` (whole lines) matches the doc's ``expected`` lines."""
    pattern = "".join(r"(?:[^\n]*\n)*?" if ln.strip() == "..." else _line_pattern(ln.rstrip()) + r" *\n"
                      for ln in expected)
    text = "".join(ln.rstrip() + "\n" for ln in actual.splitlines())
    return re.fullmatch(pattern, text) is not None


def match_text(expected: str, actual: str) -> bool:
    """One printed value against a ``# -> TEXT`` comment: ``...`` matches anything, spaces flexible."""
    parts = re.split(r"(\.\.\.|\s+)", expected.strip())
    pattern = "".join(".*?" if p == "..." else r"\s+" if p.isspace() else re.escape(p) for p in parts if p)
    return re.fullmatch(pattern, actual.strip(), flags=re.S) is not None


# ------------------------------------------------------------------ python
def _arrow_comments(code: str) -> dict[int, str]:
    """Line -> TEXT of each ``# -> TEXT`` comment."""
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT and tok.string.startswith("# ->"):
            found[tok.start[0]] = tok.string[4:].strip()
    return found


def run_python(code: str, *, where: str, first_line: int) -> str:
    """Execute ``code`` statement by statement in the current folder; check ``# ->`` outputs.
    Returns everything it printed. Tracebacks point at the doc's lines (``where``)."""
    code = shorten(code)
    tree = ast.parse(code, where)
    arrows = _arrow_comments(code)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    printed = []
    last_on_line = {stmt.end_lineno: stmt for stmt in tree.body}  # `a(); b()  # -> x`: b shows x
    for stmt in tree.body:
        line = stmt.end_lineno + first_line - 1  # in the doc
        expect = arrows.get(stmt.end_lineno) if last_on_line[stmt.end_lineno] is stmt else None
        shown = ast.Module(body=[stmt], type_ignores=[])
        ast.increment_lineno(shown, first_line - 1)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            if expect is not None and isinstance(stmt, ast.Expr) and not _is_print(stmt):
                value = eval(compile(ast.Expression(shown.body[0].value), where, "eval"), namespace)
                print(repr(value))
            else:
                exec(compile(shown, where, "exec"), namespace)
        out = buf.getvalue()
        printed.append(out)
        sys.stdout.write(out)
        if expect is not None and not match_text(expect, out):
            raise DocError(f"{where}:{line}: printed {out.strip()!r}, "
                           f"the doc shows {expect!r}")
    return "".join(printed)


def _is_print(stmt: ast.Expr) -> bool:
    call = stmt.value
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print"


@contextlib.contextmanager
def _cwd(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def run_python_block(block: Block, workdir: Path) -> str:
    with _cwd(workdir):
        return run_python(block.text, where=block.doc, first_line=block.line + 1)


def run_python_subprocess(block: Block, workdir: Path, env: dict[str, str], timeout: float = 120) -> str:
    """The same in a fresh interpreter (blocks that open audio devices: PortAudio stays closed
    in the test process)."""
    script = (f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); import doc_examples, pathlib; "
              f"doc_examples.run_python(pathlib.Path('block.py').read_text(), where={block.doc!r}, "
              f"first_line={block.line + 1})")
    (workdir / "block.py").write_text(block.text)
    r = subprocess.run([sys.executable, "-c", script], cwd=workdir, env=env, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise DocError(f"{block.id}: the Python block failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def run_with_gnuradio(block: Block, workdir: Path, env: dict[str, str], python: str, timeout: float = 120) -> None:
    """A GNU Radio flowgraph (``python``: the interpreter with GNU Radio) and ``gk-stream run`` of the
    pipeline its marker names, started first, side by side; both must exit 0. Both are killed by their
    PIDs when they run over."""
    (workdir / "flowgraph.py").write_text(block.text)
    gk = subprocess.Popen([sys.executable, "-m", "pygpukit_dsp.cli", "run", block.arg, "--quiet"], cwd=workdir,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # a receiving pipeline opens its source, then its sink (a .partial file): then it is subscribed, and a
    # GNU Radio publisher's first samples reach it (a sending one has no such file: it waits for its peer)
    ready = time.monotonic() + 10
    while time.monotonic() < ready and gk.poll() is None and not list(workdir.glob("*.partial")):
        time.sleep(0.05)
    gr = subprocess.Popen([python, "flowgraph.py"], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    outs = {}
    try:
        for name, p in (("flowgraph", gr), ("gk-stream", gk)):
            outs[name] = p.communicate(timeout=timeout)[0]
    finally:
        for p in (gr, gk):
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=30)
    if gr.returncode != 0 or gk.returncode != 0:
        raise DocError(f"{block.id}: the flowgraph exited {gr.returncode}, gk-stream run {block.arg} exited "
                       f"{gk.returncode}:\n{outs.get('flowgraph')}\n{outs.get('gk-stream')}")


# ------------------------------------------------------------------ console
def console_steps(text: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for each ``$ command`` line."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:].split("  #")[0].strip(), []))
        elif not steps:
            raise DocError(f"console block output before any '$ command': {line!r}")
        else:
            steps[-1][1].append(line)
    return steps


def run_console(block: Block, workdir: Path, env: dict[str, str], timeout: float = 120) -> None:
    env = {**env, "PATH": os.pathsep.join([str(workdir / ".bin"), env["PATH"]])}
    for command, expected in console_steps(block.text):
        command = shorten(command)
        r = subprocess.run(["bash", "-c", command], cwd=workdir, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout)
        output = r.stdout.replace(NO_DRIVER, "libcuda.so.1") if env.get("GK_LIBCUDA") == NO_DRIVER else r.stdout
        if not match_output(expected, output):
            raise DocError(f"{block.id}: `{command}` (exit {r.returncode}) printed\n{output}\n"
                           f"which does not match what the doc shows:\n" + "\n".join(expected))


# ------------------------------------------------------------------ yaml
_BASE = {"version": 1, "name": "example", "sample_rate": 48000, "block_size": 1024, "channels": 2,
         "source": {"type": "synth"}, "stages": [], "sink": {"type": "null"}}
# sources `gk-stream validate` may open here: no device, network or other process behind them
_LOCAL_SOURCES = ("synth", "null", "file", "rawiq", "sigmf", "numpy")
_KNOWS_FORMAT = ("file", "rawiq", "sigmf", "numpy")  # sources that bring their rate and channels


def embed_yaml(block: Block, workdir: Path) -> str:
    """The block as a whole document, its lines where they are in the doc (so errors say
    DOC:LINE:COL): a fragment gets the keys of a minimal pipeline it does not set, after it."""
    pad = "\n" * block.line  # the block's first line is the doc's line block.line + 1
    data = yaml.safe_load(block.text)
    if isinstance(data, dict) and "version" in data:
        return pad + block.text
    if isinstance(data, list):  # stages
        return pad[:-1] + "stages:\n" + textwrap.indent(block.text, "  ") + _rest(_BASE, {"stages"})
    if not isinstance(data, dict):
        raise DocError(f"{block.id}: a yaml block must be a pipeline document, a mapping of its keys or a "
                       "list of stages")
    if "bench" in data:
        return pad + block.text + _bench_pipelines(data["bench"])
    if "pipelines" in data:
        return pad + block.text + _rest({"version": 1}, set(data))
    have = set(data)
    if isinstance(data.get("source"), dict) and data["source"].get("type") in _KNOWS_FORMAT:
        have |= {"sample_rate", "channels"}  # the source's own, not the minimal pipeline's
    return pad + block.text + _rest(_BASE, have)


def _rest(base: dict[str, Any], have: set[str]) -> str:
    rest = {k: v for k, v in base.items() if k not in have}
    return "\n" + yaml.safe_dump(rest, sort_keys=False) if rest else ""


def _bench_pipelines(bench: dict[str, Any]) -> str:
    """The pipelines of the benchmark file whose ``bench:`` a fragment shows (by its kind)."""
    files = {"contention": "w3.yaml", "link": "w2_zmq.yaml"}
    source = ROOT / "benchmarks" / files[bench.get("kind", "contention")]
    text = source.read_text()
    return "\nversion: 1\n" + text[text.index("\npipelines:"):]


def check_yaml(block: Block, workdir: Path) -> None:
    from pygpukit_dsp.io.base import StreamFormat
    from pygpukit_dsp.pipeline import Pipeline
    from pygpukit_dsp.spec import load_text

    data = yaml.safe_load(block.text)
    text = embed_yaml(block, workdir)
    bench = isinstance(data, dict) and "bench" in data
    # as if the example were a file beside the repository's examples (a bench: beside the benchmarks)
    base = workdir / ("benchmarks" if bench else "pipelines")
    if bench:  # a bench file: the bench's own loader takes its 'bench:' out (the schema has no such key)
        from pygpukit_dsp.bench.bench_file import load_bench_text

        pipelines = load_bench_text(text, filename=block.doc, base_dir=base).pipelines
        _check_bench(text, workdir)
    else:
        from pygpukit_dsp.graph import Graph

        pipelines = [Graph.from_config(cfg) if cfg.graph_where else Pipeline.from_config(cfg)
                     for cfg in load_text(text, filename=block.doc, base_dir=base)]
    if isinstance(data, list):
        return  # a list of stage examples (often alternatives), each checked on its own: no chain
    for p in pipelines:
        if not isinstance(p, Pipeline):  # a graph (docs/graphs.md): every source opened, every edge's spec
            _check_graph(p)
            continue
        fmt = StreamFormat()
        if p.source is not None and p.source.type in _LOCAL_SOURCES:
            fmt = p.source.open(StreamFormat(p.sample_rate, p.channels, p.dtype))
            p.source.close()
        elif p.sample_rate is None or p.channels is None:
            continue  # a device or network source tells the format when it opens
        p.specs(fmt)


def _check_graph(g: Any) -> None:
    from pygpukit_dsp.io.base import StreamFormat

    fmts = {}
    for name, src in g.topology().sources.items():
        if src is not None and src.type not in _LOCAL_SOURCES:
            return  # a device or network source tells its format when it opens
        fmts[name] = StreamFormat()
        if src is not None:
            fmts[name] = src.open(StreamFormat(g.sample_rate, g.channels, g.dtype))
            src.close()
    g.specs(fmts)


def _check_bench(text: str, workdir: Path) -> None:
    from pygpukit_dsp.bench.contention import load_contention

    path = workdir / "benchmarks" / "doc_bench.yaml"  # beside the data files the pipelines name
    path.write_text(text)
    load_contention(path)


# ------------------------------------------------------------------ bash / sh
_REPO_PATH = re.compile(r"^(?:\./)?(?:pipelines|benchmarks|scripts|tests|docs|rust|native|pygpukit_dsp)(?:/[^\s*?]*)?$")
_OPERATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;"}


def shell_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell block (words, environment assignments dropped)."""
    joined = re.sub(r"\\\n", " ", text)
    commands: list[list[str]] = []
    for line in joined.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for tok in lexer:
            if tok in _OPERATORS:
                if words:
                    commands.append(words)
                words = []
            elif not words and re.match(r"^[A-Za-z_]\w*=", tok):
                continue  # VAR=value before the command
            else:
                words.append(tok)
        if words:
            commands.append(words)
    return commands


def check_shell(block: Block) -> None:
    r = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise DocError(f"{block.id}: bash -n: {r.stderr.strip()}")
    from pygpukit_dsp.cli import build_parser

    for words in shell_commands(block.text):
        for word in words:
            if _REPO_PATH.match(word) and not (ROOT / word).exists():
                raise DocError(f"{block.id}: `{' '.join(words)}` names {word}, which does not exist")
        if words[0] == "gk-stream":
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    build_parser().parse_args(words[1:])
            except SystemExit as exc:
                if exc.code:
                    raise DocError(f"{block.id}: `{' '.join(words)}`: {err.getvalue().strip()}") from None


def check_json(block: Block) -> None:
    try:
        json.loads(block.text)
    except json.JSONDecodeError as exc:
        raise DocError(f"{block.id}: not JSON: {exc}") from None
