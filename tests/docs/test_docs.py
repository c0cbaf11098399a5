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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs"))
import hooks  # noqa: E402  (docs/hooks.py, the mkdocs hook)


def test_hook_expands_readme_sections_and_links():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    body = hooks.readme_section("What ralm builds on", readme)
    assert not body.startswith("## ") and body.strip() in readme
    assert hooks.readme_section("intro", readme).startswith("Retrieval-augmented")
    out = hooks.expand("{{ readme: Read on }}")
    assert "](serve.md)" in out and "](docs/" not in out
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


def _doc_commands() -> list[tuple[str, list[str]]]:
    """(file, argv) of every `ralm ...` line in a fenced code block of README.md and docs/*.md (lines
    continued with a backslash joined; a trailing comment dropped)."""
    import re
    import shlex

    out = []
    for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = hooks.expand(f.read_text(encoding="utf-8"))
        for block in re.findall(r"^```(?:bash|sh|console)?\n(.*?)^```", text, flags=re.M | re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                if not line.startswith("ralm "):
                    continue
                try:
                    argv = shlex.split(line, comments=True)
                except ValueError:  # an unbalanced quote in a shortened example
                    continue
                out.append((f.name, argv[1:]))
    return out


def test_every_ralm_command_in_the_docs_names_a_real_verb_and_real_options():
    """Each documented `ralm ...` line walks the parser's subcommands, and every --option it gives is
    one that command's --help lists (the docs cannot drift from the CLI)."""
    from ralm.cli import build_parser

    cmds = _doc_commands()
    assert len(cmds) > 50
    bad = []
    for name, argv in cmds:
        parser = build_parser()
        i = 0
        while True:  # descend into subcommands
            subs = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
            if not subs or i >= len(argv) or argv[i] not in subs[0].choices:
                break
            parser = subs[0].choices[argv[i]]
            i += 1
        if i == 0:
            bad.append(f"{name}: ralm {' '.join(argv[:2])}: no such command")
            continue
        known = {o for a in parser._actions for o in a.option_strings}
        for tok in argv[i:]:
            opt = tok.split("=", 1)[0]
            if opt.startswith("--") and opt not in known:
                bad.append(f"{name}: ralm {' '.join(argv[:i])}: unknown option {opt}")
    assert not bad, "\n".join(bad)
