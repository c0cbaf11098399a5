"""The retrieval options every searching command shares, declared once: `--index`, `--corpus`,
`--retriever` and `--lang` (`add_retrieval_args`), opened by `ralm.Retriever.from_args`.

`ralm lm-eval` and `ralm rag retrieve|eval|train` declare them here, so a flag means the same in
each. Free of numpy and the DocStore: a command builds its parser without importing either.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["KINDS", "LANG_HELP", "add_retrieval_args"]

KINDS = ("bm25", "dense", "hybrid")  # what an index directory can be opened as (--retriever)

LANG_HELP = (
    "BM25 stopwords + Snowball stemmer (en, da, nb, ..., none); default: the index's own "
    "analysis, or the DocStore's language over --corpus"
)


def add_retrieval_args(parser: argparse.ArgumentParser, *, lang_help: str = LANG_HELP) -> None:
    """Add --index, --corpus, --retriever and --lang to `parser`, in that order.

    lang_help: the help of --lang, for a command that reads the language for more than BM25 (`ralm
    rag`: answer normalisation too). `Retriever.from_args(args)` opens what the options name.
    """
    parser.add_argument(
        "--index", type=Path, default=None, help="a retrieval index directory (ralm index build)"
    )
    parser.add_argument(
        "--corpus",
        type=Path,
        default=None,
        help="a DocStore: BM25 built in memory (with --index: its DocStore)",
    )
    parser.add_argument("--retriever", default="bm25", choices=list(KINDS), help="default bm25")
    parser.add_argument("--lang", default=None, help=lang_help)
