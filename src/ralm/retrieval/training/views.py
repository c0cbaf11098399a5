"""Pseudo query/document pairs from raw text, for training a retriever without labelled pairs.

Two recipes, each turning one chunk into a (query, document) pair whose document is that chunk:
- **crop** (Contriever, Izacard et al. 2022, independent cropping): two spans of the chunk's
  tokens drawn independently, each `crop_min`..`crop_max` of its length (Contriever: 0.1-0.5),
  each token then deleted with probability `delete_prob` (0.1); one span is the query, the other
  the document. Both views are the same text seen through different windows, so the encoder
  learns what makes a passage itself rather than surface overlap with one sentence.
- **ict** (Inverse Cloze Task, Lee et al. 2019; REALM's warm start): a random sentence is the
  query, the chunk without it (with it 10% of the time) the document (`ralm.retrieval.training.ict`).
`both` draws one of the two per pair. Documents carry the chunk's title, as the index does.

    views = PairViews(StorePassages(store), encoder, "crop", rng)
    q_rows, d_rows = views.rows([12, 40, 7])    # (ids, types) rows for the query and doc towers

Crops work on the DocStore's token ids (no decoding or re-tokenizing) when the query tower's
tokenizer is the store's; otherwise the query crop's text is decoded and tokenized again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ralm.errors import RalmError
from ralm.retrieval.encoders import DualEncoder
from ralm.retrieval.passages import StorePassages

RECIPES = ("crop", "ict", "both")


def crop(ids: np.ndarray, rng: np.random.Generator, lo: float, hi: float, delete_prob: float) -> np.ndarray:
    """A random span of `ids` of lo..hi of its length (>= 1 token), tokens deleted with `delete_prob`.

    Example: with lo = hi = 0.5 a 10-token chunk gives 5 consecutive tokens (fewer after deletion).
    """
    n = len(ids)
    length = max(1, int(round(n * rng.uniform(lo, hi))))
    start = int(rng.integers(0, n - length + 1))
    span = ids[start : start + length]
    if delete_prob > 0 and len(span) > 1:
        keep = rng.random(len(span)) >= delete_prob
        if keep.any():
            span = span[keep]
    return span


class PairViews:
    """(query rows, document rows) of pseudo pairs from chunks of a DocStore."""

    def __init__(
        self,
        passages: StorePassages,
        encoder: DualEncoder,
        recipe: str = "crop",
        *,
        crop_min: float = 0.1,
        crop_max: float = 0.5,
        delete_prob: float = 0.1,
        remove_prob: float = 0.9,
    ) -> None:
        if recipe not in RECIPES:
            raise RalmError(f"recipe {recipe!r}: choose one of {', '.join(RECIPES)}")
        if not 0 < crop_min <= crop_max <= 1:
            raise RalmError(f"crop ratios {crop_min}..{crop_max}: need 0 < min <= max <= 1")
        self.passages, self.encoder, self.recipe = passages, encoder, recipe
        self.crop_min, self.crop_max, self.delete_prob, self.remove_prob = (
            crop_min,
            crop_max,
            delete_prob,
            remove_prob,
        )
        self.q_tpl = encoder.query_tower.template
        self.d_tpl = encoder.doc_tower.template
        self.max_length = encoder.config.max_length
        from ralm.models.tokenizers import tokenizer_fingerprint

        self.same_tokenizer = tokenizer_fingerprint(encoder.query_tower.tokenizer) == tokenizer_fingerprint(
            encoder.doc_tower.tokenizer
        )
        passages.doc_rows(encoder, [0])  # checks the store's tokenizer against the doc tower's
        self._titles: dict[str, list[int] | None] = {}

    def _title(self, title: str) -> list[int] | None:
        if title not in self._titles:
            ids = (
                self.encoder.doc_tower.tokenizer(title, add_special_tokens=False)["input_ids"]
                if title
                else []
            )
            self._titles[title] = ids or None
        return self._titles[title]

    def _query_row(self, ids: np.ndarray) -> tuple[list, list]:
        if not self.same_tokenizer:
            text = self.encoder.doc_tower.tokenizer.decode(ids.tolist())
            ids = np.asarray(self.encoder.query_tower.tokenizer(text, add_special_tokens=False)["input_ids"])
        return self.q_tpl.build(None, ids.tolist(), self.max_length)

    def _crop_pair(self, cid: int, rng: np.random.Generator):
        ids = self.passages.token_ids(cid)
        q = crop(ids, rng, self.crop_min, self.crop_max, self.delete_prob)
        d = crop(ids, rng, self.crop_min, self.crop_max, self.delete_prob)
        title = self._title(self.passages.title(cid))
        return self._query_row(q), self.d_tpl.build(title, d.tolist(), self.max_length)

    def _ict_pair(self, cid: int, rng: np.random.Generator):
        from ralm.corpus.sentences import split_sentences
        from ralm.retrieval.training.ict import ict_pair

        text = self.passages.text(cid)
        spans = split_sentences(text)
        if len(spans) < 2:
            return None
        q, d = ict_pair(text, int(rng.integers(len(spans))), bool(rng.random() < self.remove_prob), spans)
        qt, dt = self.encoder.query_tower.tokenizer, self.encoder.doc_tower.tokenizer
        q_ids = qt(q, add_special_tokens=False)["input_ids"]
        d_ids = dt(d, add_special_tokens=False)["input_ids"]
        title = self._title(self.passages.title(cid))
        return self.q_tpl.build(None, q_ids, self.max_length), self.d_tpl.build(title, d_ids, self.max_length)

    def pair(self, cid: int, rng: np.random.Generator):
        """(query row, doc row) of chunk `cid`, or None when the recipe cannot use it (ICT: one sentence)."""
        recipe = self.recipe if self.recipe != "both" else ("crop", "ict")[int(rng.integers(2))]
        if recipe == "ict":
            out = self._ict_pair(cid, rng)
            if out is not None or self.recipe == "ict":
                return out
        return self._crop_pair(cid, rng)

    def rows(self, ids: Sequence[int], rng: np.random.Generator) -> tuple[list, list, list[int]]:
        """Query rows, doc rows and the chunk ids they came from (chunks the recipe cannot use left out)."""
        q_rows, d_rows, used = [], [], []
        for cid in ids:
            p = self.pair(int(cid), rng)
            if p is not None:
                q_rows.append(p[0])
                d_rows.append(p[1])
                used.append(int(cid))
        return q_rows, d_rows, used
