"""docs/tutorial.ipynb runs end to end (nbclient, a real Jupyter kernel): from the bundled Wikipedia
dump to a REALM `fill` with provenance. 2 min 16 s measured on 2 shared (busy) cores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_tutorial_notebook_executes(tmp_path, monkeypatch):
    # the kernel is a fresh process: it imports this checkout's ralm, offline
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    # the notebook's tempfile.mkdtemp work folder (~0.9 GB) under pytest's tmp_path, which pytest
    # prunes, instead of the system temp folder, where every run left one behind
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    nb = nbformat.read(ROOT / "docs" / "tutorial.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []  # the stored outputs (shown by the docs) must be produced again
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    text = "\n".join(
        out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
    )
    assert "4 articles" in text and "Abraham Lincoln" in text
    assert "x: Abraham Lincoln was born in [MASK] in 1809." in text and "p(z|x) = " in text
    assert "marginal: " in text and "retrieved: [" in text
    assert [p.name for p in tmp_path.glob("ralm-tutorial-*")]  # the work folder was made under tmp_path
