"""Masked chunks as a causal reader reads them: text with sentinels, and the masked spans as targets.

Atlas's masked-span pretext task on a decoder. The masks are drawn exactly as for the masked-LM
reader (`ralm.realm.masking.mlm`: salient spans, random spans, on the DocStore's token ids, seeded per
example), so a causal run and its closed-book baseline mask the same chunks the same way, and
the query tower sees the same masked ids as before. The reader gets the chunk *text* instead:
each masked token span is mapped to characters (token offsets from re-tokenizing the chunk
with the DocStore's tokenizer; spans that touch are merged), replaced by a numbered sentinel,
and the spans become the target:

    masked text:  "Ibsen ble født i [1] i 1828 og døde i [2]."
    target:       "[1] Skien\n[2] Kristiania\n"

Only the span tokens are scored, each span with the line break that ends it (the sentinels are
given): log p(y | x, z) is the sum of the LM's log-probabilities of those tokens. The line break
is scored because a reader must learn where a span ends to generate one (`ralm fill`); without
it a trained reader runs on past the span. The sentinel format is `blank` ("[{i}]" by default;
{i} counts from 1).

`CausalMaskingCollator` adds to `MaskingCollator`'s batch (B queries; Lq / Lt the longest LM
query / target, padded with 0):
  lm_query_ids (B, Lq), lm_query_len (B,): LM ids of the masked text and a line break;
  lm_target_ids (B, Lt), lm_target_len (B,): LM ids of the target;
  lm_target_labels (B, Lt): 1 on the span tokens that are scored, else 0;
  lm_target_span (B, Lt): the span index (0-based) of each scored token, -1 elsewhere;
  lm_target_content (B, Lt): 1 on the scored tokens that hold the span's own characters, 0 on its
    closing line break (which the reader predicts almost for free: content-token perplexity, the
    fair measure, leaves it out) and elsewhere;
  lm_span_kind (B, S): each span's kind as an index into SPAN_KINDS (-1 = padding).

Where re-tokenizing a chunk's text does not give its stored ids (rare: the store was built from
the whole article), its salient spans still map through their stored character offsets and its
random spans are left out of the reader's view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ralm.corpus.docstore import SALIENT_SOURCES, DocStore
from ralm.errors import RalmError
from ralm.realm.masking.mlm import MaskedExample, MaskingCollator, MaskingConfig

SPAN_KINDS = (*SALIENT_SOURCES, "random")  # what lm_span_kind indexes
DEFAULT_BLANK = "[{i}]"

__all__ = [
    "DEFAULT_BLANK",
    "SPAN_KINDS",
    "CausalMaskingCollator",
    "SpanQuery",
    "merge_char_spans",
    "span_query",
]


@dataclass
class SpanQuery:
    """One masked chunk in characters: the text with sentinels, the span texts and their kinds."""

    masked_text: str
    spans: list[str]
    kinds: list[str]

    def target(self, blank: str = DEFAULT_BLANK) -> tuple[str, list[tuple[int, int]]]:
        """The target string and each span's (start, end) in it: "[1] Skien\\n[2] Kristiania\\n"."""
        parts, where, at = [], [], 0
        for i, s in enumerate(self.spans, start=1):
            head = blank.format(i=i) + " "
            parts.append(head + s + "\n")
            where.append((at + len(head), at + len(head) + len(s)))
            at += len(head) + len(s) + 1
        return "".join(parts), where


def merge_char_spans(spans: Sequence[tuple[int, int, str]], text: str) -> list[tuple[int, int, str]]:
    """Sorted character spans with the ones that touch or overlap (or are only whitespace apart)
    merged, the merged kind being the first non-random one; whitespace trimmed from both ends.

    Example: [(0, 5, "random"), (6, 11, "date")] over "Skien 1828 x" -> [(0, 10, "date")].
    """
    out: list[list[Any]] = []
    for s, e, kind in sorted(spans):
        s, e = max(0, s), min(e, len(text))
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e <= s:
            continue
        if out and not text[out[-1][1] : s].strip():
            out[-1][1] = max(out[-1][1], e)
            if out[-1][2] == "random":
                out[-1][2] = kind
            continue
        out.append([s, e, kind])
    return [(int(s), int(e), str(k)) for s, e, k in out]


def span_query(text: str, spans: Sequence[tuple[int, int, str]], blank: str = DEFAULT_BLANK) -> SpanQuery:
    """`text` with each (merged) span replaced by its sentinel.

    Example: span_query("Ibsen ble født i Skien.", [(17, 22, "link")]) ->
    SpanQuery("Ibsen ble født i [1].", ["Skien"], ["link"]).
    """
    merged = merge_char_spans(spans, text)
    pieces, at = [], 0
    for i, (s, e, _) in enumerate(merged, start=1):
        pieces += [text[at:s], blank.format(i=i)]
        at = e
    pieces.append(text[at:])
    return SpanQuery("".join(pieces), [text[s:e] for s, e, _ in merged], [k for _, _, k in merged])


class CausalMaskingCollator(MaskingCollator):
    """`MaskingCollator` plus the causal reader's LM tensors (see the module docstring).

    tokenizer: the DocStore's (and towers') tokenizer, which the masks are drawn on.
    lm_tokenizer: the causal reader's tokenizer.
    """

    def __init__(
        self,
        store: DocStore,
        tokenizer: Any,
        lm_tokenizer: Any,
        cfg: MaskingConfig | None = None,
        *,
        blank: str = DEFAULT_BLANK,
        **kwargs: Any,
    ) -> None:
        super().__init__(store, tokenizer, cfg, **kwargs)
        if "{i}" not in blank:
            raise RalmError(f"causal_blank {blank!r}: must contain {{i}} (the span's number), e.g. [{{i}}]")
        self.tokenizer = tokenizer
        self.lm_tokenizer = lm_tokenizer
        self.blank = blank

    def _offsets(self, cid: int, text: str) -> np.ndarray | None:
        """(T, 2) character offsets of the chunk's stored tokens, or None when re-tokenizing differs."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if enc["input_ids"] != self.store.input_ids(cid).tolist():
            return None
        return np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)

    def span_query(self, cid: int, ex: MaskedExample) -> SpanQuery:
        """The reader's view of chunk `cid` masked as `ex`."""
        row = self.store.get(int(cid))
        text = row["text"] or ""
        salient = {(s["token_start"], s["token_end"]): s for s in row["salient"] or []}
        offsets = None
        spans: list[tuple[int, int, str]] = []
        for s, e, kind in ex.masked_spans:
            if kind == "salient" and (s, e) in salient:
                sal = salient[(s, e)]
                spans.append((int(sal["start"]), int(sal["end"]), str(sal["source"])))
                continue
            if offsets is None:
                offsets = self._offsets(int(cid), text)
                if offsets is None:
                    offsets = np.zeros((0, 2), dtype=np.int64)
            if e <= len(offsets):
                spans.append((int(offsets[s, 0]), int(offsets[e - 1, 1]), "random"))
        q = span_query(text, spans, self.blank)
        if not q.spans:
            raise RalmError(
                f"{self.store.root}: chunk {cid} has a masked span with no text; rebuild the DocStore"
            )
        return q

    def collate(self, ids: Sequence[int], examples: Sequence[MaskedExample]) -> dict[str, Any]:
        batch = super().collate(ids, examples)
        queries = [self.span_query(int(c), ex) for c, ex in zip(ids, examples, strict=True)]
        out = lm_tensors(queries, self.lm_tokenizer, self.blank)
        if self.return_tensors == "pt":
            import torch

            out = {k: torch.from_numpy(v) for k, v in out.items()}
        batch.update(out)
        return batch


def lm_rows(q: SpanQuery, lm_tokenizer: Any, blank: str = DEFAULT_BLANK):
    """(query ids, target ids, scored flags, span index per target token, content flags) of one
    SpanQuery: the masked text and a line break, and the target, each tokenized as one piece; a
    target token is scored when it overlaps a span's characters or the line break that ends the
    span, and is content when it overlaps the span's characters."""
    qids = lm_tokenizer(q.masked_text + "\n", add_special_tokens=False)["input_ids"]
    target, where = q.target(blank)
    enc = lm_tokenizer(target, add_special_tokens=False, return_offsets_mapping=True)
    span_of, content = [], []
    for a, b in enc["offset_mapping"]:
        hit = [j for j, (s, e) in enumerate(where) if a < e + 1 and b > s]
        span_of.append(hit[0] if hit else -1)
        content.append(int(any(a < e and b > s for s, e in where)))
    return list(qids), list(enc["input_ids"]), [int(j >= 0) for j in span_of], span_of, content


def lm_tensors(
    queries: Sequence[SpanQuery], lm_tokenizer: Any, blank: str = DEFAULT_BLANK
) -> dict[str, np.ndarray]:
    """The lm_* arrays of a batch of SpanQuery (see the module docstring), numpy int64."""
    rows = [lm_rows(q, lm_tokenizer, blank) for q in queries]
    B = len(rows)
    Lq = max((len(r[0]) for r in rows), default=0)
    Lt = max((len(r[1]) for r in rows), default=0)
    S = max((len(q.spans) for q in queries), default=0)
    out = {
        "lm_query_ids": np.zeros((B, Lq), dtype=np.int64),
        "lm_query_len": np.array([len(r[0]) for r in rows], dtype=np.int64),
        "lm_target_ids": np.zeros((B, Lt), dtype=np.int64),
        "lm_target_len": np.array([len(r[1]) for r in rows], dtype=np.int64),
        "lm_target_labels": np.zeros((B, Lt), dtype=np.int64),
        "lm_target_span": np.full((B, Lt), -1, dtype=np.int64),
        "lm_target_content": np.zeros((B, Lt), dtype=np.int64),
        "lm_span_kind": np.full((B, S), -1, dtype=np.int64),
    }
    for b, ((qi, ti, lab, span, content), q) in enumerate(zip(rows, queries, strict=True)):
        out["lm_query_ids"][b, : len(qi)] = qi
        out["lm_target_ids"][b, : len(ti)] = ti
        out["lm_target_labels"][b, : len(lab)] = lab
        out["lm_target_span"][b, : len(span)] = span
        out["lm_target_content"][b, : len(content)] = content
        out["lm_span_kind"][b, : len(q.kinds)] = [
            SPAN_KINDS.index(k) if k in SPAN_KINDS else -1 for k in q.kinds
        ]
    return out
