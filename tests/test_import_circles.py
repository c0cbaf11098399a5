"""No import circle among ralm's modules (issue 67): every `import` and `from ... import` in src,
the ones inside functions included, since a deferred import only hides a circle until the function
runs. Imports under `if TYPE_CHECKING:` are left out: they never run. The graph and the circle
search are `benchmarks/house/code_layout.py`'s, which reports the same count."""

from __future__ import annotations

from pathlib import Path

from benchmarks.house.code_layout import import_edges, modules, strongly_connected

SRC = Path(__file__).resolve().parents[1] / "src"


def test_src_has_no_import_circle():
    assert strongly_connected(import_edges(modules(SRC))) == []


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        f = root / "pkg" / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text, encoding="utf-8")
    return root


def test_a_deferred_import_closes_a_circle_and_a_type_only_one_does_not(tmp_path):
    src = _package(
        tmp_path / "a",
        {
            "__init__.py": "",
            "a.py": "from pkg import b\n",
            "b.py": "def f():\n    from pkg.c import g\n",
            "c.py": "import pkg.a\n",
            "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.e import x\n",
            "e.py": "from pkg.d import y\n",
        },
    )
    graph = import_edges(modules(src, "pkg"))
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.d"] == set()
    assert strongly_connected(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
