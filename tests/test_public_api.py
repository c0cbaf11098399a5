"""`import ralm`: the public names resolve lazily (no torch until a model is used), each has its own
docstring, its docstring examples pass, and docs/python-api.md's blocks run as written."""

from __future__ import annotations

import dataclasses
import doctest
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ralm

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def run_python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_import_is_light_and_light_names_stay_light():
    code = (
        "import sys, ralm\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'import ralm'\n"
        "ralm.DocStore, ralm.Retriever, ralm.NGramLM, ralm.load_task_data, ralm.RalmError, ralm.BuildConfig\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('ralm'))\n"
        "ralm.fill\n"
        "assert 'torch' in sys.modules\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr


def test_all_names_resolve_to_documented_objects():
    assert ralm.__all__ == sorted(ralm.__all__) and len(ralm.__all__) == len(set(ralm.__all__))
    assert set(ralm.__all__) <= set(dir(ralm))
    for name in ralm.__all__:
        obj = getattr(ralm, name)
        doc = obj.__doc__ or ""
        if dataclasses.is_dataclass(obj) and doc.startswith(f"{obj.__name__}("):
            doc = ""  # the signature dataclasses write when a class has no docstring
        assert len(doc.strip()) > 20, f"ralm.{name} has no docstring"
    with pytest.raises(AttributeError, match="module 'ralm' has no attribute 'Nope'"):
        ralm.Nope  # noqa: B018


def test_package_and_public_docstring_examples_pass(tmp_path, monkeypatch):
    """The package docstring (corpus, index, search) and every example on a public object."""
    monkeypatch.chdir(tmp_path)
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = finder.find(ralm, "ralm", globs={})
    for name in ralm.__all__:
        obj = getattr(ralm, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            module = inspect.getmodule(obj)
            tests += finder.find(obj, f"ralm.{name}", module=module, globs={**vars(module), "ralm": ralm})
    examples = [t for t in tests if t.examples]
    assert len(examples) >= 2
    for test in examples:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def api_doc_blocks() -> list[str]:
    text = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_readme_python_api_blocks_run(tmp_path, monkeypatch, capsys):
    blocks = api_doc_blocks()
    assert len(blocks) == 4
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme"}
    for block in blocks:
        exec(compile(block, "docs/python-api.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "bm25 [('Helsinki'" in out and "p(z|x)" in out and "hf {'train':" in out


def test_old_module_paths_are_gone():
    """ralm 0.1.0 keeps no old import paths (issue 48): the moved modules exist at their new paths only."""
    import importlib

    for old in (
        "ralm.tasks.types",
        "ralm.retrieval.index_io",
        "ralm.retrieval.train_data",
        "ralm.retrieval.evaluate",
    ):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    assert importlib.import_module("ralm.formats.types").TaggingExample
