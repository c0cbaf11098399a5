"""benchmarks/downstream/brent_table1_nb.py: which cells its table shows, and when a training run may
write the committed table (only once the default grid is complete, and then the whole grid)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.downstream import brent_table1_nb as brent


def _finish(work: Path, column: str, row: str) -> None:
    d = brent.cell_dir(work, column, row)
    d.mkdir(parents=True)
    (d / "results.json").write_text("{}")


def test_finished_cells_lists_the_rows_and_tasks_asked_for_then_the_generation_columns(
    tmp_path: Path,
) -> None:
    _finish(tmp_path, "norne", "gemma-plain")
    _finish(tmp_path, "norne", "minilm")
    _finish(tmp_path, "norquad", "gemma-realm")
    _finish(tmp_path, "norquad-rag", "gemma-realm")
    (brent.cell_dir(tmp_path, "norec", "gemma-plain")).mkdir(parents=True)  # started, no results
    got = brent.finished_cells(tmp_path, ["norne", "norec", "norquad"], ["gemma-plain", "gemma-realm"])
    assert [(c, r) for c, r, _ in got] == [
        ("norne", "gemma-plain"),
        ("norquad", "gemma-realm"),
        ("norquad-rag", "gemma-realm"),
    ]
    assert got[0][2] == tmp_path / "cells" / "norne-gemma-plain"


def test_a_partial_run_that_completes_the_folder_reports_the_whole_grid(tmp_path: Path) -> None:
    cells = [(t, r) for t in brent.TASKS for r in brent.ROWS]
    assert len(cells) == 12
    last = ("norquad", "gemma-realm")  # what `--rows gemma-realm --tasks norquad` alone adds
    for t, r in cells:
        if (t, r) != last:
            _finish(tmp_path, t, r)
    assert not brent.grid_complete(tmp_path)
    _finish(tmp_path, *last)
    assert brent.grid_complete(tmp_path)
    _finish(tmp_path, "norquad-cb", "gemma-plain")
    got = brent.finished_cells(tmp_path, list(brent.TASKS), list(brent.ROWS))
    assert [(c, r) for c, r, _ in got] == [*cells, ("norquad-cb", "gemma-plain")]
