"""WikiText-2 as ralm corpora for frozen_lm.py: articles from the raw split, the retrieval DocStore,
and the subject corpus (the test articles' own text held out)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "wikitext2" / "raw"
HEADING = re.compile(r"^ = ([^=].*?) = $")


def wikitext_articles(path: Path) -> list[tuple[str, str]]:
    """(title, text) of each article of a raw WikiText file (level-1 " = Title = " headings)."""
    arts: list[tuple[str, list[str]]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = HEADING.match(line)
        if m:
            arts.append((m.group(1).strip(), []))
        elif arts:
            arts[-1][1].append(line)
    return [(t, "\n".join(lines).strip()) for t, lines in arts]


def build_corpus(work: Path, log) -> Path:
    """WikiText-2 valid articles + the enwiki sample as one DocStore under `work` (reused if there)."""
    from ralm.corpus.build import BuildConfig, build_docstore
    from ralm.samples import sample_path

    store = work / "store"
    if (store / "manifest.json").is_file():
        log(f"reusing {store}")
        return store
    work.mkdir(parents=True, exist_ok=True)
    src = work / "wikitext2-valid.jsonl"  # a derived file under --work, outside the repository
    with open(src, "w", encoding="utf-8") as f:
        for t, x in wikitext_articles(DATA / "valid.txt"):
            f.write(json.dumps({"title": t, "text": x}) + "\n")
    cfg = BuildConfig(auto_annotate=False, dates=False)  # salient spans are not needed here
    build_docstore([src, sample_path("enwiki")], store, cfg, progress=False, log=log)
    return store


def build_subject_corpus(work: Path, base_sources: list[Path], rest: str, untitled: str, log) -> Path:
    """The corpus of build_corpus plus the test set after the evaluated prefix (see the docstring)."""
    from ralm.corpus.build import BuildConfig, build_docstore

    store = work / "store-subject"
    if (store / "manifest.json").is_file():
        log(f"reusing {store}")
        return store
    src = work / "wikitext2-test-rest.jsonl"  # derived, under --work, outside the repository
    with open(src, "w", encoding="utf-8") as f:
        for t, x in wikitext_articles_from_lines(rest.splitlines(), untitled):
            f.write(json.dumps({"title": t, "text": x}) + "\n")
    cfg = BuildConfig(auto_annotate=False, dates=False)
    build_docstore([*base_sources, src], store, cfg, progress=False, log=log)
    return store


def wikitext_articles_from_lines(lines: list[str], untitled: str = "(rest)") -> list[tuple[str, str]]:
    """wikitext_articles over lines; text before the first heading is an article titled `untitled`."""
    arts: list[tuple[str, list[str]]] = [(untitled, [])]
    for line in lines:
        m = HEADING.match(line)
        if m:
            arts.append((m.group(1).strip(), []))
        else:
            arts[-1][1].append(line)
    out = [(t, "\n".join(x).strip()) for t, x in arts]
    return [(t, x) for t, x in out if x]
