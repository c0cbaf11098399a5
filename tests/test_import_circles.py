"""No import circle among ralm's modules (issue 67): every `import` and `from ... import` in src,
the ones inside functions included, since a deferred import only hides a circle until the function
runs. Imports under `if TYPE_CHECKING:` are left out: they never run."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules(src: Path) -> dict[str, Path]:
    out = {}
    for f in sorted(src.rglob("*.py")):
        out[".".join(f.relative_to(src).with_suffix("").parts).removesuffix(".__init__")] = f
    return out


def _runtime_nodes(tree: ast.AST):
    """Every node of `tree` outside `if TYPE_CHECKING:` blocks."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                todo.extend(child.orelse)
                continue
            todo.append(child)


def import_graph(src: Path) -> dict[str, set[str]]:
    """module -> the modules of `src` it imports (`from P import x` counts P.x when that is one)."""
    mods = _modules(src)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        for node in _runtime_nodes(ast.parse(f.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for t in names:
                if t in mods and t != m and not m.startswith(t + "."):  # a package's own parents run first
                    graph[m].add(t)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that can reach themselves, grouped by the circle they share (each sorted)."""
    reach = {}
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            v = todo.pop()
            if v not in seen:
                seen.add(v)
                todo.extend(graph.get(v, ()))
        reach[start] = seen
    groups = {frozenset(w for w in reach[v] if v in reach[w]) | {v} for v in graph if v in reach[v]}
    return sorted(sorted(g) for g in groups)


def test_src_has_no_import_circle():
    assert circles(import_graph(SRC)) == []


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
    assert import_graph(src)["pkg.a"] == {"pkg.b"}
    assert import_graph(src)["pkg.d"] == set()
    assert circles(import_graph(src)) == [["pkg.a", "pkg.b", "pkg.c"]]
