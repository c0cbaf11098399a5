"""Word spans for NER by span classification (LUKE): enumeration, IOB2 <-> spans, decoding, features.

LUKE/DaLUKE turn NER into classifying every word span of a sentence up to a maximum length as
one of the entity types or "O". This module holds everything but the model:

    enumerate_spans   every span (start, end) of n words with end - start <= max_length
    word_token_bounds each word's first and last sub-word token (None when the tokenizer or
                      truncation left the word without all of its tokens)
    token_spans       word spans -> (first token, last token); spans touching a cut word dropped
    iob2_spans        IOB2 tags -> typed spans; an I- tag that does not continue an entity of its
                      type (IOB1 style, or a stray I-) is refused with a one-line RalmError
    check_iob2        the same check over a dataset, naming the file and sentence
    spans_to_iob2     typed spans -> IOB2 tags (the inverse, for seqeval)
    decode_spans      keep non-overlapping predicted spans by descending score (greedy, as LUKE)
    link_spans        the entity id of each span whose words name a vocabulary entity ([MASK] for
                      the others): exact-match linking with `EntityVocabulary.name_ids()`
    encode_sentences  tagged sentences -> `SentenceSpans` (word tokens, kept spans, their token
                      bounds, gold class ids and, when linking, entity ids); `chunk_rows` splits a
                      sentence's spans into rows of at most `max_entities`; `collate` turns rows into
                      the model's tensors

Spans are half-open word ranges: (0, 2) is words 0 and 1. IOB1 input is rejected, not converted:
ralm's readers promise IOB2 (`ralm.formats.conll`), an I- tag at an entity start is as likely
a broken file as deliberate IOB1, and the word-only row must be scored on the same gold tags;
convert IOB1 files to IOB2 first (the shared NorNE and WNUT-17 files are consistent IOB2).

Left out: the model, training and scoring (`ralm.luke.ner`), nested entities (decoding keeps a
flat tagging).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ralm.corpus.entities import fold_case
from ralm.errors import RalmError
from ralm.luke.config import ENTITY_MASK_ID

__all__ = [
    "SentenceSpans",
    "check_iob2",
    "chunk_rows",
    "collate",
    "decode_spans",
    "encode_sentences",
    "enumerate_spans",
    "iob2_spans",
    "link_spans",
    "span_count",
    "spans_to_iob2",
    "token_spans",
    "word_token_bounds",
]

IGNORE = -100  # labels of padding entities (cross-entropy's ignore index)
Span = tuple[int, int]  # half-open word range [start, end)
TypedSpan = tuple[int, int, str]  # (start, end, entity type)


def span_count(n_words: int, max_length: int) -> int:
    """How many spans `enumerate_spans` gives: sum over k = 1..min(n, m) of (n - k + 1).

    Example: span_count(3, 2) == 5 (three single words, two pairs).
    """
    m = min(n_words, max_length)
    return max(0, m * (n_words + 1) - m * (m + 1) // 2)


def enumerate_spans(n_words: int, max_length: int) -> list[Span]:
    """Every word span of at most `max_length` words, by start then length.

    Example: enumerate_spans(3, 2) -> [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)].
    """
    if max_length < 1:
        raise RalmError(f"max span length {max_length}: give at least 1 word")
    return [(s, e) for s in range(n_words) for e in range(s + 1, min(n_words, s + max_length) + 1)]


def word_token_bounds(
    word_ids: Sequence[int | None], n_words: int, complete: Sequence[bool] | None = None
) -> tuple[list[int | None], list[int | None]]:
    """(first token, last token) of each word, None for a word without (all of) its tokens.

    word_ids: the tokenizer's word index per token (None for special tokens), as
    `BatchEncoding.word_ids(i)` gives it. complete: per word, whether all its sub-words survived
    truncation (default: all did); an incomplete word gets None, so no span starts or ends in it.
    Example: word_token_bounds([None, 0, 0, 1, None], 3) -> ([1, 3, None], [2, 3, None]).
    """
    first: list[int | None] = [None] * n_words
    last: list[int | None] = [None] * n_words
    for t, w in enumerate(word_ids):
        if w is None:
            continue
        if first[w] is None:
            first[w] = t
        last[w] = t
    if complete is not None:
        for w, ok in enumerate(complete):
            if not ok:
                first[w] = last[w] = None
    return first, last


def token_spans(
    spans: Sequence[Span], first: Sequence[int | None], last: Sequence[int | None]
) -> tuple[list[int], list[tuple[int, int]]]:
    """(indices of the spans kept, their (first token, last token)), inclusive token positions.

    A span is dropped when its first or last word has no token (cut by truncation).
    Example: token_spans([(0, 1), (0, 2), (1, 3)], [1, 3, None], [2, 3, None]) -> ([0, 1], [(1, 2), (1, 3)]).
    """
    keep, out = [], []
    for i, (s, e) in enumerate(spans):
        a, b = first[s], last[e - 1]
        if a is None or b is None:
            continue
        keep.append(i)
        out.append((a, b))
    return keep, out


def iob2_spans(tags: Sequence[str], where: str = "") -> list[TypedSpan]:
    """The typed entity spans of an IOB2 tag sequence; RalmError at the first inconsistent tag.

    Example: iob2_spans(["B-PER", "I-PER", "O", "B-LOC"]) -> [(0, 2, "PER"), (3, 4, "LOC")].
    An I-X must follow B-X or I-X; anything else (IOB1's I- at an entity start, a type change
    inside an entity) is refused. where: names the sentence in the message ("file: sentence 3").
    """
    out: list[TypedSpan] = []
    start, kind = -1, ""
    for k, tag in enumerate(tags):
        if tag.startswith("I-") and start >= 0 and tag[2:] == kind:
            continue
        if start >= 0:
            out.append((start, k, kind))
            start, kind = -1, ""
        if tag.startswith("B-"):
            start, kind = k, tag[2:]
        elif tag != "O":
            prev = tags[k - 1] if k else "the sentence start"
            fix = "an entity starts with B- (convert IOB1 files to IOB2)" if tag.startswith("I-") else ""
            raise RalmError(
                f"{where + ': ' if where else ''}word {k + 1} is tagged {tag!r} after {prev!r}; "
                f"span classification needs IOB2 tags: {fix or 'O, B-TYPE or I-TYPE'}"
            )
    if start >= 0:
        out.append((start, len(tags), kind))
    return out


def check_iob2(data, fmt: str | None = None) -> None:
    """RalmError naming the file and sentence (1-based) of a dataset's first inconsistent IOB2 tag.

    data: a `ralm.formats.types.TaskData` (NER); fmt: the reader format it was read with. The split's
    files are read again only on error, to find the sentence's own file and number.
    """
    from ralm.formats.read import read_file

    for split, examples in data.splits.items():
        for ex in examples:
            try:
                iob2_spans(ex.labels)
            except RalmError:
                pass
            else:
                continue
            for f in data.sources.get(split, []):
                for k, x in enumerate(read_file(f, "ner", fmt)[0]):
                    if x.tokens == ex.tokens and x.labels == ex.labels:
                        iob2_spans(ex.labels, f"{f}: sentence {k + 1}")
            iob2_spans(ex.labels, f"{split} split: sentence {ex.id}")


def spans_to_iob2(spans: Sequence[TypedSpan], n_words: int) -> list[str]:
    """IOB2 tags of non-overlapping typed spans.

    Example: spans_to_iob2([(0, 2, "PER"), (3, 4, "LOC")], 5) -> ["B-PER", "I-PER", "O", "B-LOC", "O"].
    """
    tags = ["O"] * n_words
    for s, e, kind in spans:
        tags[s] = f"B-{kind}"
        for k in range(s + 1, e):
            tags[k] = f"I-{kind}"
    return tags


def decode_spans(spans: Sequence[Span], labels: Sequence[str], scores: Sequence[float]) -> list[TypedSpan]:
    """Non-overlapping entity spans, greedily by descending score (LUKE's NER decoding).

    spans/labels/scores: one predicted label (its class, "O" for none) and score per span; spans
    labelled "O" are ignored. Ties in score go to the earlier span (in the given order). Returns
    the kept spans sorted by start.
    Example: decode_spans([(0, 2), (1, 2)], ["PER", "LOC"], [0.9, 0.95]) -> [(1, 2, "LOC")].
    """
    order = sorted((i for i, lab in enumerate(labels) if lab != "O"), key=lambda i: (-scores[i], i))
    taken: set[int] = set()
    kept: list[TypedSpan] = []
    for i in order:
        s, e = spans[i]
        if any(k in taken for k in range(s, e)):
            continue
        taken.update(range(s, e))
        kept.append((s, e, labels[i]))
    return sorted(kept)


# ----------------------------------------------------------------------------- sentence features


def link_spans(words: Sequence[str], spans: Sequence[Span], names: Mapping[str, int]) -> np.ndarray:
    """(S,) int64 entity id of each span: the id of the entity whose name its words, joined by one
    space and case-folded, are exactly (`names`: `EntityVocabulary.name_ids()`), else [MASK] (2).

    This is DaLUKE's auto-annotation done on NER input: a span that names a known entity enters the
    model as that entity, every other span as LUKE's [MASK] entity.
    Example: link_spans(["Ola", "met", "Kari", "Nord"], [(0, 1), (1, 2), (2, 4)], {"ola": 3, "kari nord": 7})
    -> [3, 2, 7].
    """
    ids = [names.get(fold_case(" ".join(words[s:e])), ENTITY_MASK_ID) for s, e in spans]
    return np.asarray(ids, dtype=np.int64).reshape(-1)


@dataclass
class SentenceSpans:
    """One sentence as the span classifier sees it.

    input_ids: word tokens, special tokens included (T,). spans: the candidate word spans kept
    (S, half-open); bounds: (S, 2) their first and last token positions; labels: (S,) class ids
    (0 = "O"); n_words: words of the sentence (tags are predicted for all of them); entity_ids: (S,)
    each span's entity id (`link_spans`), None for LUKE's [MASK] on every span.
    """

    input_ids: list[int]
    spans: list[tuple[int, int]]
    bounds: np.ndarray
    labels: np.ndarray
    n_words: int
    entity_ids: np.ndarray | None = None


def context_words(examples: list, n: int) -> list[tuple[list[str], list[str]]]:
    """For each example, up to `n` words of the examples before it and after it in the list (LUKE reads
    a sentence with its document around it; the list order stands for the document's).

    Example: sentences "a b", "c", "d e" with n = 2 -> ([], [c, d]), ([a, b], [d, e]), ([b, c], []).
    """
    toks = [list(ex.tokens) for ex in examples]
    out = []
    for i in range(len(toks)):
        left: list[str] = []
        for j in range(i - 1, -1, -1):
            if len(left) >= n:
                break
            left = toks[j][-(n - len(left)) :] + left
        right: list[str] = []
        for j in range(i + 1, len(toks)):
            if len(right) >= n:
                break
            right = right + toks[j][: n - len(right)]
        out.append((left, right))
    return out


def encode_sentences(
    tokenizer,
    examples: list,
    classes: list[str],
    *,
    max_length: int,
    max_span_length: int,
    context: list[tuple[list[str], list[str]]] | None = None,
    names: Mapping[str, int] | None = None,
) -> tuple[list[SentenceSpans], dict[str, int]]:
    """Features of TaggingExamples and counts of gold entities no span can reach.

    classes: "O" first, then the entity types; a gold entity of an unknown type is labelled "O".
    context: per example, words to read before and after it (`context_words`); spans stay inside the
    sentence. Context that would push the row past `max_length` is dropped from its outer ends.
    names: folded entity name -> id (`EntityVocabulary.name_ids()`); given, each feature carries the
    entity id of every span (`link_spans`: the named entity's id, else [MASK]).
    Returns (features, {"entities", "too_long", "cut"}): gold entities in all, those longer
    than `max_span_length`, those touching words that truncation cut.
    """
    if context is not None:
        return _encode_with_context(tokenizer, examples, classes, context, max_length, max_span_length, names)
    return _encode(tokenizer, examples, classes, max_length, max_span_length, names=names)


def _encode_with_context(tokenizer, examples, classes, context, max_length, max_span_length, names=None):
    """`encode_sentences` with context words: each example encoded with its left and right words,
    its spans shifted past the left context (context trimmed until the row fits)."""
    from types import SimpleNamespace

    feats, counts = [], {"entities": 0, "too_long": 0, "cut": 0}
    for ex, (left, right) in zip(examples, context, strict=True):
        left, right = list(left), list(right)
        while True:
            words = left + list(ex.tokens) + right
            n_tok = len(tokenizer(words, is_split_into_words=True)["input_ids"])
            if n_tok <= max_length or not (left or right):
                break
            if len(left) >= len(right):
                left = left[1:]
            else:
                right = right[:-1]
        padded = SimpleNamespace(
            id=ex.id, tokens=words, labels=["O"] * len(left) + list(ex.labels) + ["O"] * len(right)
        )
        (f,), c = _encode(
            tokenizer,
            [padded],
            classes,
            max_length,
            max_span_length,
            keep=(len(left), len(ex.tokens)),
            names=names,
        )
        feats.append(f)
        for k in counts:
            counts[k] += c[k]
    return feats, counts


def _encode(tokenizer, examples, classes, max_length, max_span_length, keep=None, names=None):
    """The features of `encode_sentences`; `keep` = (first word, words): only spans inside those words
    of the row are candidates, and the feature describes those words (their spans shifted to 0);
    `names`: link the spans (`link_spans`)."""
    from ralm.models.quiet import quiet_transformers

    counts = {"entities": 0, "too_long": 0, "cut": 0}
    if not examples:
        return [], counts
    cid = {c: i for i, c in enumerate(classes)}
    words = [list(ex.tokens) for ex in examples]
    with quiet_transformers():  # no "longer than the model" warning: long sentences are re-encoded below
        full = tokenizer(words, is_split_into_words=True)
    long = [i for i in range(len(words)) if len(full["input_ids"][i]) > max_length]
    cut = {}
    if long:
        enc = tokenizer(
            [words[i] for i in long], is_split_into_words=True, truncation=True, max_length=max_length
        )
        cut = {i: (enc["input_ids"][k], enc.word_ids(k)) for k, i in enumerate(long)}
    out = []
    for i, ex in enumerate(examples):
        n = len(ex.tokens)
        ids, wids, complete = full["input_ids"][i], full.word_ids(i), None
        if i in cut:  # a word is complete when truncation left all of its sub-words
            ids, cut_wids = cut[i]
            complete = [cut_wids.count(w) == wids.count(w) for w in range(n)]
            wids = cut_wids
        first, last = word_token_bounds(wids, n, complete)
        lo, n_own = (0, n) if keep is None else keep
        cand = [(s + lo, e + lo) for s, e in enumerate_spans(n_own, max_span_length)]
        kept_idx, bounds = token_spans(cand, first, last)
        spans = [(cand[k][0] - lo, cand[k][1] - lo) for k in kept_idx]
        gold = {(s - lo, e - lo): cid.get(t, 0) for s, e, t in iob2_spans(ex.labels, f"sentence {ex.id}")}
        kept = set(spans)
        counts["entities"] += len(gold)
        counts["too_long"] += sum(e - s > max_span_length for s, e in gold)
        counts["cut"] += sum(e - s <= max_span_length and (s, e) not in kept for s, e in gold)
        labels = np.array([gold.get(sp, 0) for sp in spans], dtype=np.int64)
        linked = None if names is None else link_spans(ex.tokens, [cand[k] for k in kept_idx], names)
        bounds_arr = np.array(bounds, dtype=np.int64).reshape(-1, 2)
        out.append(SentenceSpans(list(ids), spans, bounds_arr, labels, n_own, linked))
    return out, counts


def chunk_rows(
    features: Sequence[SentenceSpans], which: Iterable[int], max_entities: int
) -> list[tuple[int, int, int]]:
    """(sentence, first span, end span) rows: each sentence's spans in chunks of `max_entities`.

    Example: a sentence 0 with 300 spans and max_entities 128 -> [(0, 0, 128), (0, 128, 256), (0, 256, 300)].
    """
    return [
        (f, lo, min(lo + max_entities, len(features[f].spans)))
        for f in which
        for lo in range(0, len(features[f].spans), max_entities)
    ]


def collate(
    rows: list[tuple[int, int, int]], features: list[SentenceSpans], pad_id: int, mention_length: int
) -> dict[str, torch.Tensor]:
    """Model inputs of chunk rows: words (R, T), entities (R, E), entity positions (R, E, M).

    Span entities are [MASK] (id 2), or their linked ids when the features carry `entity_ids`;
    padding entities have id 0, mask 0, positions -1, start/end 0 and label -100.
    """
    R = len(rows)
    T = max(len(features[f].input_ids) for f, _, _ in rows)
    E = max(hi - lo for _, lo, hi in rows)
    ids = np.full((R, T), pad_id, dtype=np.int64)
    mask = np.zeros((R, T), dtype=np.int64)
    ent_mask = np.zeros((R, E), dtype=np.int64)
    ent_ids = np.zeros((R, E), dtype=np.int64)
    bounds = np.zeros((R, E, 2), dtype=np.int64)
    labels = np.full((R, E), IGNORE, dtype=np.int64)
    for r, (f, lo, hi) in enumerate(rows):
        x = features[f]
        ids[r, : len(x.input_ids)] = x.input_ids
        mask[r, : len(x.input_ids)] = 1
        ent_mask[r, : hi - lo] = 1
        ent_ids[r, : hi - lo] = ENTITY_MASK_ID if x.entity_ids is None else x.entity_ids[lo:hi]
        bounds[r, : hi - lo] = x.bounds[lo:hi]
        labels[r, : hi - lo] = x.labels[lo:hi]
    offsets = np.arange(mention_length)
    pos = bounds[..., :1] + offsets  # (R, E, M): start, start+1, ...
    pos = np.where((offsets <= bounds[..., 1:] - bounds[..., :1]) & (ent_mask[..., None] == 1), pos, -1)
    t = torch.from_numpy
    return {
        "input_ids": t(ids),
        "attention_mask": t(mask),
        "entity_ids": t(ent_ids),
        "entity_attention_mask": t(ent_mask),
        "entity_position_ids": t(pos),
        "entity_start_positions": t(bounds[..., 0].copy()),
        "entity_end_positions": t(bounds[..., 1].copy()),
        "labels": t(labels),
    }
