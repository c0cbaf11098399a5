"""The Markdown stays readable as plain text: no prose line over 400 characters in README.md,
docs/**/*.md and benchmarks/README.md (fenced code blocks and table rows excepted), and the README's
"What is here" table keeps each cell to 200 characters, linking out for the rest."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINE = 400
MAX_CELL = 200
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md"]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks and outside table rows."""
    out, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            marker = m.group(1) if m else ""
            closes = marker[:1] == fence[0] and len(marker) >= len(fence) and line.strip() == marker
            if closes:
                fence = None
            continue
        if line.lstrip().startswith("|"):
            continue
        out.append((number, line))
    return out


def table_cells(text: str, section: str) -> list[tuple[int, str]]:
    """(line number, cell) of every cell of the first table under `## section` (header included,
    the separator row left out)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == f"## {section}"), None)
    assert start is not None, f"README.md has no section '## {section}'"
    cells = []
    for i in range(start + 1, len(lines)):
        line = lines[i].strip()
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            if cells:
                break  # the end of the first table
            continue
        row = _CELL_SPLIT.split(line.strip("|"))
        if all(set(c.strip()) <= set("-: ") for c in row):
            continue  # the separator row
        cells += [(i + 1, c.strip()) for c in row]
    return cells


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_prose_line_over_400_characters(path):
    text = path.read_text(encoding="utf-8")
    rel = path.relative_to(ROOT)
    long = [
        f"{rel}:{number}: {len(line)} characters (at most {MAX_LINE} outside code blocks and tables)"
        for number, line in prose_lines(text)
        if len(line) > MAX_LINE
    ]
    assert not long, "\n".join(long)


def test_readme_what_is_here_cells_are_short():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    cells = table_cells(text, "What is here")
    assert len(cells) >= 20, "README.md's 'What is here' table has too few cells to be the table"
    long = [
        f"README.md:{number}: a 'What is here' cell of {len(cell)} characters (at most {MAX_CELL}; "
        f"link to a results page for the rest): {cell[:60]}..."
        for number, cell in cells
        if len(cell) > MAX_CELL
    ]
    assert not long, "\n".join(long)


def test_the_checks_see_what_they_should():
    text = "a\n```\n" + "x" * 500 + "\n```\n| " + "y" * 500 + " |\n  ~~~~\n" + "z" * 500 + "\n  ~~~~\nb\n"
    assert [n for n, _ in prose_lines(text)] == [1, 9]
    readme = "## What is here\n\n| Part | Status |\n| --- | --- |\n| a | b \\| c |\n\n## Next\n| x | y |\n"
    assert [c for _, c in table_cells(readme, "What is here")] == ["Part", "Status", "a", "b \\| c"]
