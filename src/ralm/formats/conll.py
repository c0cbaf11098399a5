"""Tagging files: CoNLL-U (with NorNE's NDT-format `.conll` files) and token/tag CoNLL columns.

    conllu  10 tab-separated columns; multiword-token and empty-node lines skipped. POS labels are
            UPOS (column 4), NER labels the MISC item `name=B-PER` (column 10, "O" without one).
            NDT files (column 4 holds NDT tags such as `subst`) are refused for POS; for NER their
            paragraph tokens `|` are dropped (counted as "pipes").
    conll   `token<TAB>tag` (WNUT-17) or whitespace-separated columns (CoNLL-2003): token first,
            tag last, one column count per file, `-DOCSTART-` lines skipped.
NER tags must be IOB2 (O, B-TYPE or I-TYPE). `first_token_columns` (10 means CoNLL-U) serves
`ralm.tasks.datasets.detect_format`.

Deliberately left out: XPOS/features/lemmas/trees and tag-sequence (IOB2 transition) checks.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from ralm.errors import RalmError
from ralm.formats.common import blocks
from ralm.formats.types import TaggingExample

# UD v2 UPOS tags, plus v1's CONJ and "_" (multiword tokens in some treebanks).
UPOS = frozenset(
    {"ADJ", "ADP", "ADV", "AUX", "CCONJ", "CONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN"}
    | {"PUNCT", "SCONJ", "SYM", "VERB", "X", "_"}
)
_IOB2 = re.compile(r"O|[BI]-\S+")


def first_token_columns(head: str) -> int:
    """Tab-separated columns of the first non-blank, non-comment line (0 when there is none)."""
    for line in head.split("\n"):
        if line.strip() and not line.startswith("#"):
            return len(line.rstrip("\r").split("\t"))
    return 0


# ----------------------------------------------------------------------------- conllu


def _misc_name(misc: str) -> str | None:
    """The NER tag in a MISC column: `_misc_name("SpaceAfter=No|name=B-PER") == "B-PER"`."""
    for item in misc.split("|"):
        if item.startswith("name="):
            return item[len("name=") :]
    return None


def check_iob2(tag: str, where: str) -> str:
    if not _IOB2.fullmatch(tag):
        raise RalmError(f"{where}: tag {tag!r} is not IOB2 (O, B-TYPE or I-TYPE); NER needs IOB2 tags")
    return tag


def _conllu_rows(path: Path, block: list[tuple[int, str]]) -> tuple[str, list[tuple[int, list[str]]]]:
    """(sent_id, [(lineno, 10 columns)]) of one sentence block, comment and multiword lines left out."""
    sent_id, rows = "", []
    for lineno, line in block:
        if line.startswith("#"):
            key, _, value = line[1:].partition("=")
            if key.strip() == "sent_id":
                sent_id = value.strip()
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise RalmError(
                f"{path}:{lineno}: expected 10 tab-separated columns (CoNLL-U), found {len(cols)}; "
                "fix the line or use the conll format (token<TAB>tag)"
            )
        if "-" in cols[0] or "." in cols[0]:
            continue
        rows.append((lineno, cols))
    return sent_id, rows


def _pos_labels(path: Path, rows: list[tuple[int, list[str]]]) -> list[str]:
    for lineno, cols in rows:
        if cols[3] not in UPOS:
            raise RalmError(
                f"{path}:{lineno}: column 4 holds {cols[3]!r}, not a UPOS tag (an NDT-format file carries "
                "NDT tags such as subst/verb there); POS needs a CoNLL-U file with UPOS in column 4"
            )
    return [cols[3] for _, cols in rows]


def read_conllu(path: Path, text: str, task: str, counts: Counter) -> list:
    sentences = [_conllu_rows(path, block) for block in blocks(text)]
    sentences = [(sid, rows) for sid, rows in sentences if rows]
    if task == "pos":
        return [
            TaggingExample(sid, [c[1] for _, c in rows], _pos_labels(path, rows)) for sid, rows in sentences
        ]
    ndt = any(cols[3] not in UPOS for _, rows in sentences for _, cols in rows)
    out, named = [], False
    for sid, rows in sentences:
        tokens, labels = [], []
        for lineno, cols in rows:
            tag = _misc_name(cols[9])
            named = named or tag is not None
            tag = check_iob2(tag or "O", f"{path}:{lineno}")
            if ndt and cols[1] == "|" and tag == "O":
                counts["pipes"] += 1
                continue
            tokens.append(cols[1])
            labels.append(tag)
        if tokens:
            out.append(TaggingExample(sid, tokens, labels))
    if not named:
        raise RalmError(
            f"{path}: no name=... entity tags in column 10 (MISC); NER on CoNLL-U needs NorNE-style "
            "tags such as name=B-PER, or use a token<TAB>tag file"
        )
    return out


# ----------------------------------------------------------------------------- conll


def read_conll(path: Path, text: str, task: str, counts: Counter) -> list:
    tabs = "\t" in text
    width, width_line = 0, 0
    out = []
    for block in blocks(text):
        tokens, labels = [], []
        for lineno, line in block:
            cols = line.split("\t") if tabs else line.split()
            if cols[0] == "-DOCSTART-":
                continue
            if not width:
                width, width_line = len(cols), lineno
                if width < 2:
                    raise RalmError(f"{path}:{lineno}: expected a token and a tag column, found one column")
            elif len(cols) != width:
                raise RalmError(
                    f"{path}:{lineno}: found {len(cols)} columns where line {width_line} has {width}; "
                    "every line needs the same columns (token first, tag last)"
                )
            tag = cols[-1].strip()
            tokens.append(cols[0])
            labels.append(check_iob2(tag, f"{path}:{lineno}") if task == "ner" else tag)
        if tokens:
            out.append(TaggingExample("", tokens, labels))
    return out
