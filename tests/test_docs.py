"""`make docs`: the site builds with `mkdocs build --strict` (a few seconds), its guide pages carry
the README's sections, the API reference every public name, and the tutorial its stored outputs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
import hooks  # noqa: E402  (docs/hooks.py, the mkdocs hook)


def test_hook_expands_readme_sections_and_links():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    body = hooks.readme_section("Scaling out", readme)
    assert not body.startswith("## ") and body.strip() in readme
    assert hooks.readme_section("intro", readme).startswith("Retrieval-augmented")
    out = hooks.expand("{{ readme: Explore in the browser }}")
    assert "](serve-fill.png)" in out and "](docs/" not in out
    with pytest.raises(ValueError, match="README.md has no section '## Nope'"):
        hooks.readme_section("Nope", readme)


def test_every_docs_directive_names_a_readme_section():
    for page in (ROOT / "docs").glob("*.md"):
        hooks.expand(page.read_text(encoding="utf-8"))  # ValueError for a renamed README section


def test_mkdocs_build_strict(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    site = tmp_path / "site"
    pages = ["corpus", "retrieval", "realm", "downstream", "surealm", "frozen", "luke", "lm", "serve"]
    for page in [*pages, "scaling", "benchmarks", "python-api", "tutorial", "reference"]:
        assert (site / page / "index.html").is_file(), page
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    import ralm

    for name in ralm.__all__:
        attr = ralm._EXPORTS[name][1]
        assert f'id="{ralm._EXPORTS[name][0]}.{attr}"' in reference, name
    assert "p(z|x) = " in (site / "tutorial" / "index.html").read_text(encoding="utf-8")
    assert "Hugging Face data" in (site / "downstream" / "index.html").read_text(encoding="utf-8")
