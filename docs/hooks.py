"""mkdocs hook: the docs pages take their text from the README and benchmarks/README.md.

A page line `{{ readme: Section title }}` becomes that `## Section title` section of README.md
(without its heading); `{{ readme: intro }}` the text before the first section;
`{{ file: benchmarks/README.md }}` a whole file (its first heading dropped); `{{ api_reference }}`
one mkdocstrings entry per public name of `ralm` (`ralm.__all__`). Links the README makes to
`docs/...` and `benchmarks/README.md`, the ones benchmarks/README.md makes to `../docs/...`, and the
ones the guide and results pages make to the benchmarks' README (`../benchmarks/README.md` from
`docs/`, `../../benchmarks/README.md` from `docs/results/`) are pointed at the site's own pages, so
each link works both on GitHub and on the site.

Deliberately left out: anything mkdocs or its plugins already do.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_DIRECTIVE = re.compile(r"^\{\{ *(readme|file): *(.+?) *\}\}$|^\{\{ *api_reference *\}\}$", re.M)
_LINKS = {
    "](benchmarks/README.md": "](benchmarks.md",
    "](docs/": "](",
    "](../docs/": "](",
    "](../benchmarks/README.md": "](benchmarks.md",
    "](../../benchmarks/README.md": "](../benchmarks.md",
}


def readme_section(title: str, text: str | None = None) -> str:
    """The body of README.md's `## title` section ("intro": the text before the first `## `)."""
    text = text if text is not None else (ROOT / "README.md").read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.M)
    if title == "intro":
        return parts[0].split("\n", 1)[1].strip() + "\n"
    for part in parts[1:]:
        head, _, body = part.partition("\n")
        if head.strip() == title:
            return body.strip() + "\n"
    raise ValueError(f"README.md has no section '## {title}'")


def whole_file(rel: str) -> str:
    text = (ROOT / rel).read_text(encoding="utf-8")
    return re.sub(r"\A# .*\n", "", text).strip() + "\n"


def api_reference() -> str:
    """One `::: module.attr` entry per public name, in the package docstring's order of parts."""
    import ralm

    return "\n".join(
        f"::: {module}.{attr}\n    options:\n      heading_level: 2\n"
        for module, attr in (ralm._EXPORTS[name] for name in ralm._EXPORTS)
    )


def expand(markdown: str) -> str:
    def one(m: re.Match) -> str:
        if m.group(1) == "readme":
            return readme_section(m.group(2))
        if m.group(1) == "file":
            return whole_file(m.group(2))
        return api_reference()

    out = _DIRECTIVE.sub(one, markdown)
    for old, new in _LINKS.items():
        out = out.replace(old, new)
    return out


def on_page_markdown(markdown: str, page, config, files) -> str:  # mkdocs hook
    return expand(markdown)
