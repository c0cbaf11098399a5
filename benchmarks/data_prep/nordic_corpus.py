"""Danish / Norwegian Bokmål retrieval corpus from Debian packages.

Builds a JSONL corpus (ralm's `iter_jsonl` format: one `{"id", "title", "text"}` object a line)
from two Debian packages per language:

  da: manpages-da  + debian-edu-doc-da      (Danish)
  nb: manpages-nb  + debian-edu-doc-nb-no   (Norwegian Bokmål)

Articles are one per man page (title "ls(1): vis mappeindhold", text = the page as plain text,
rendered by a small troff stripper here, no groff needed) and one per section (h2/h3/h4) of the
Debian Edu Bookworm manual (title = the heading without its number, text = the section's
paragraphs up to the next heading, separated by blank lines).

The .deb files are fetched with `apt-get download` into a cache directory (skipped when already
there) and read in Python (ar + tar), falling back to `dpkg-deb --fsys-tarfile` for compressions
tarfile cannot open. The question sets benchmarks/data/retrieval_{da,nb}.jsonl are written
against this corpus.

    python -m benchmarks.data_prep.nordic_corpus da --out /tmp/da.jsonl [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from benchmarks.data_prep.nordic_corpus_errors import NordicCorpusError
from benchmarks.data_prep.nordic_debs import _decode, deb_files, fetch_deb
from benchmarks.data_prep.nordic_manual import MIN_WORDS, manual_articles  # noqa: F401 - MIN_WORDS: the manual's threshold, for callers
from benchmarks.data_prep.nordic_troff import man_articles, troff_to_text  # noqa: F401 - troff_to_text: the renderer, for callers
from ralm.atomic import atomic_path

PACKAGES = {
    "da": ("manpages-da", "debian-edu-doc-da"),
    "nb": ("manpages-nb", "debian-edu-doc-nb-no"),
}
MANUAL = "debian-edu-bookworm-manual.html"

# ---------------------------------------------------------------------------------------------


def iter_articles(lang: str, cache: Path) -> Iterator[dict]:
    """All articles of the `lang` corpus: man pages first, then manual sections."""
    if lang not in PACKAGES:
        raise NordicCorpusError(f"unknown language {lang!r}; expected one of {sorted(PACKAGES)}")
    man_pkg, doc_pkg = PACKAGES[lang]
    man_deb, doc_deb = fetch_deb(man_pkg, cache), fetch_deb(doc_pkg, cache)
    yield from man_articles(deb_files(man_deb), lang)
    doc_files = deb_files(doc_deb)
    path = f"usr/share/doc/{doc_pkg}/{MANUAL}"
    if path not in doc_files:
        raise NordicCorpusError(f"{doc_deb}: has no {path}")
    yield from manual_articles(_decode(doc_files[path]), lang)


def build_jsonl(lang: str, out: Path, cache: Path) -> Path:
    """Write the `lang` ("da" or "nb") corpus to `out` as JSONL and return `out`."""
    out, cache = Path(out), Path(cache)
    articles = list(iter_articles(lang, cache))
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for a in articles:
            f.write(json.dumps(a, ensure_ascii=False) + "\n")
    return out


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ralm" / "nordic-debs"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lang", choices=sorted(PACKAGES))
    ap.add_argument("--out", type=Path, help="JSONL to write (default: CACHE/nordic_LANG.jsonl)")
    ap.add_argument(
        "--cache", type=Path, default=default_cache(), help="where the .deb files go (default: %(default)s)"
    )
    args = ap.parse_args(argv)
    out = args.out or args.cache / f"nordic_{args.lang}.jsonl"
    try:
        build_jsonl(args.lang, out, args.cache)
    except NordicCorpusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    n_art = n_words = n_man = 0
    with open(out, encoding="utf-8") as f:
        for line in f:
            a = json.loads(line)
            n_art += 1
            n_man += a["id"].startswith("man-")
            n_words += len(a["text"].split())
    print(f"{out}: {n_art} articles ({n_man} man pages, {n_art - n_man} manual sections), {n_words} words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
