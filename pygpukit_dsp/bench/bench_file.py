"""A bench file: a pipeline file with a top-level ``bench:`` mapping that sets up a benchmark
(benchmarks/w3.yaml: W3, contention.py; benchmarks/w2_zmq.yaml: a stream over zmq, link.py).

The pipeline schema has no ``bench:`` key (``gk-stream run`` names such a file a bench file): this
loader takes the mapping out of the marked document and hands the rest to the pipeline loader
(:func:`pygpukit_dsp.spec.schema.load_document`), so the pipelines' errors keep their
FILE:LINE:COL. Also here: the mapping's settings validated with every error at its FILE:LINE:COL,
and the pipelines its keys name (or, unnamed, the only one that fits the role)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ConfigError, ConfigErrors
from ..stages.base import StageParams, did_you_mean, validate_params

if TYPE_CHECKING:
    from ..pipeline import Pipeline
    from ..spec.loader import Marks

BENCH_KEY = "bench"


@dataclass
class BenchFile:
    """A file as ``gk-stream bench`` reads it: its pipelines, and its ``bench:`` mapping (None in a
    plain pipeline file) with the mapping's marks (FILE:LINE:COL of its keys and values)."""

    path: str
    pipelines: list["Pipeline"] = field(default_factory=list)
    section: Any = None
    marks: "Marks | None" = None

    @property
    def kind(self) -> str | None:
        """The bench mapping's ``kind`` (contention, link), None without one."""
        return self.section.get("kind") if isinstance(self.section, dict) else None


def load_bench_text(text: str, filename: str = "<string>", base_dir: str | Path | None = None, *,
                    path: Path | None = None) -> BenchFile:
    """A bench file's text: its ``bench:`` mapping taken out, the rest loaded as a pipeline document
    (relative paths against ``base_dir``, default the cwd). ConfigError as the pipeline loader's."""
    from ..pipeline import Pipeline
    from ..spec.loader import load_marked
    from ..spec.schema import load_document

    value, marks = load_marked(text, filename)
    section, bench_marks = None, None
    if isinstance(value, dict) and BENCH_KEY in value and marks is not None:
        section, bench_marks = value[BENCH_KEY], marks.child(BENCH_KEY) or marks
        # the rest of the document, its marks as they are (they locate every other key)
        value = {k: v for k, v in value.items() if k != BENCH_KEY}
    configs = load_document(value, marks, filename, base_dir, path=path)
    return BenchFile(filename, [Pipeline.from_config(c) for c in configs], section, bench_marks)


def load_bench_file(path: str | Path) -> BenchFile:
    """A bench file (or a plain pipeline file: no ``bench:``), errors at ``path:LINE:COL``."""
    from ..spec.schema import read_file

    p = Path(path)
    return load_bench_text(read_file(p), filename=str(path), base_dir=p.resolve().parent, path=p)


def validate_bench(model: type[StageParams], section: Any, bm: "Marks") -> StageParams:
    """``section`` validated as ``model``; errors located at the mapping's marks ``bm``."""
    try:
        return validate_params(model, section, what="bench")
    except ConfigError as exc:
        group = exc.errors if isinstance(exc, ConfigErrors) else [exc]
        located = [e if e.where else ConfigError(e.message, hint=e.hint, path=e.path,
                                                 where=bm.locate(e.path, as_key="unknown parameter" in e.message))
                   for e in group]
        raise (located[0] if len(located) == 1 else ConfigErrors(located)) from None


def pick_pipeline(pipelines: list["Pipeline"], name: str | None, key: str, bm: "Marks", *,
                  fits: Callable[["Pipeline"], bool],
                  count_error: Callable[[int, list[str]], tuple[str, str]],
                  misfit: Callable[["Pipeline"], tuple[str, str]]) -> "Pipeline":
    """The pipeline the bench's ``key:`` names, or, with no name, the only one that ``fits``.
    ConfigError: ``count_error(n, names)`` (message, hint) when none or several fit unnamed,
    ``misfit(p)`` when the named one does not fit, or no pipeline of that name."""
    names = [p.name for p in pipelines]
    if name is None:
        found = [p for p in pipelines if fits(p)]
        if len(found) != 1:
            message, hint = count_error(len(found), names)
            raise ConfigError(message, where=bm.where, hint=hint)
        return found[0]
    for p in pipelines:
        if p.name == name:
            if not fits(p):
                message, hint = misfit(p)
                raise ConfigError(message, where=bm.value_where(key), hint=hint)
            return p
    raise ConfigError(f"bench: no pipeline named '{name}'", where=bm.value_where(key),
                      hint=did_you_mean(name, names) or f"pipelines: {', '.join(names)}")
