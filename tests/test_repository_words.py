"""The repository speaks of the product, and its front pages stay short.

* No tracked file carries the words of a lab notebook (a numbered working session, a machine
  loan, a run named by a letter): a figure says what was measured, on which machine, on which
  date and commit. The check is the one the docs' readers can run themselves::

      git grep -niE 'session [0-9]|\\blease|\\brun [A-Z]\\b'

* README.md has at most 250 lines, no cell of its tables is over 300 characters, and its docs
  index links every page of docs/.
* docs/architecture.md has at most 150 lines.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAB_WORDS = r"session [0-9]|\blease|\brun [A-Z]\b"
README_MAX_LINES = 250
CELL_MAX_CHARS = 300
ARCHITECTURE_MAX_LINES = 150


def lab_word_hits() -> list[str]:
    """``FILE:LINE: text`` of every tracked line that matches LAB_WORDS (case-insensitive)."""
    r = subprocess.run(["git", "grep", "-n", "-i", "-I", "-E", LAB_WORDS], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    if r.returncode not in (0, 1):  # 1: no match
        raise AssertionError(f"git grep failed ({r.returncode}): {r.stderr.strip()}")
    return [line[:200] for line in r.stdout.splitlines()]


def table_cells(text: str) -> list[tuple[int, str]]:
    """(line, cell) of every cell of the Markdown tables in ``text``; an escaped ``\\|`` stays
    inside its cell, separator rows (``|---|``) are skipped."""
    cells = []
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s.startswith("|"):
            continue
        parts = re.split(r"(?<!\\)\|", s.strip("|"))
        if all(re.fullmatch(r"\s*:?-+:?\s*", p) for p in parts):
            continue
        cells += [(n, p.strip()) for p in parts]
    return cells


def long_cells(text: str, limit: int = CELL_MAX_CHARS) -> list[tuple[int, int]]:
    """(line, length) of each table cell longer than ``limit`` characters."""
    return [(n, len(c)) for n, c in table_cells(text) if len(c) > limit]


def _in_a_git_checkout() -> bool:
    return shutil.which("git") is not None and (ROOT / ".git").exists()


@pytest.mark.skipif(not _in_a_git_checkout(), reason="not a git checkout (an installed copy): nothing to grep")
def test_no_tracked_file_has_lab_notebook_words():
    hits = lab_word_hits()
    assert not hits, (f"{len(hits)} lines; say what was measured, on which machine, date and commit "
                      "instead:\n" + "\n".join(hits))


def test_readme_is_short_and_its_table_cells_are_short():
    text = (ROOT / "README.md").read_text()
    lines = len(text.splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines"
    assert long_cells(text) == []


def test_readme_indexes_every_doc_page():
    text = (ROOT / "README.md").read_text()
    index = text[text.index("## Documentation"):]
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)\)", index))
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert sorted(pages - linked) == []


def test_architecture_doc_is_short():
    lines = len((ROOT / "docs" / "architecture.md").read_text().splitlines())
    assert lines <= ARCHITECTURE_MAX_LINES, f"docs/architecture.md has {lines} lines"


# ------------------------------------------------------------------ checks of the checker
def test_cells_are_split_at_unescaped_pipes_and_separators_skipped():
    text = "| a | b |\n|---|:--:|\n| `x \\| y` | " + "z" * 301 + " |\nnot | a table\n"
    assert table_cells(text) == [(1, "a"), (1, "b"), (3, "`x \\| y`"), (3, "z" * 301)]
    assert long_cells(text) == [(3, 301)]


def test_the_pattern_finds_each_kind_of_word_and_spares_ordinary_ones():
    def hit(s: str) -> bool:
        return re.search(LAB_WORDS, s, flags=re.I) is not None

    # spelled in two parts, so that this file does not hold the words it looks for
    assert hit("in Session " + "20 we") and hit("a noisy le" + "ase") and hit("as in run" + " F:")
    assert not any(hit(s) for s in ("a Session of 4 streams", "release phases", "run 10 times",
                                    "gk-stream run demo.yaml", "session.run(duration=2)"))
