"""Retrieval for downstream fine-tuning: top-k chunks for each input and p(z|x) over them.

BRENT Table 1's "with retrieval" column and REALM's open-QA fine-tuning both pair an input x with
the top-k chunks z of a knowledge corpus and marginalise the task prediction over them:

    p(y|x) = Σ_z p(z|x) p(y|z, x),   p(z|x) = softmax_z f(x, z) over the top k (+ the null document)

`TaskRetriever` holds the parts that do this, as REALM fine-tunes them (§4.3): the document
vectors stay as they are in the index (fixed); the query tower is either frozen or tuned
(`tune=True`: the scores f(x, z) = q(x)·d(z) carry gradient to the query tower). The null
document (an empty chunk, `[CLS] x [SEP] [SEP] [SEP]` for the reader) gets the score q(x)·d(∅)
with d(∅) the doc tower's embedding of the empty document, computed once.

`join_docs` builds the reader rows ``x [title] [SEP] body [SEP]`` for every input and document
(x keeps its own special tokens and positions, so the task's labels keep theirs) and
`marginalize` is the sum over documents in log space.

Left out: re-indexing the corpus during fine-tuning (BRENT's "ri" rows; REALM keeps the index
fixed); BM25 retrieval here is frozen (p(z|x) a softmax of the BM25 scores, no gradient).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.realm.modeling.marginal import doc_log_probs
from ralm.retrieval.encoders import DualEncoder
from ralm.retrieval.index.dense import DenseIndex, stored_vectors

__all__ = ["Retrieved", "TaskRetriever", "doc_vectors", "join_docs", "marginalize", "pad_rows"]

IGNORE = -100


def marginalize(log_p_z: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
    """log Σ_z p(z|x) p(.|z,x): log_p_z (B, K) and log_p (B, K, ...) -> (B, ...).

    Example: log_p_z = log [[0.5, 0.5]], log_p = log [[[0.2, 0.8], [0.6, 0.4]]] -> log [[0.4, 0.6]].
    """
    if log_p.shape[:2] != log_p_z.shape:
        raise ValueError(f"log_p {tuple(log_p.shape)} does not start with log_p_z's {tuple(log_p_z.shape)}")
    lz = log_p_z.reshape(*log_p_z.shape, *([1] * (log_p.dim() - 2))).to(log_p.dtype)
    return torch.logsumexp(lz + log_p, dim=1)


def doc_vectors(index: DenseIndex, ids: np.ndarray) -> np.ndarray:
    """(N, d) float32 stored vectors of chunk `ids` (N,): `ralm.retrieval.index.dense.stored_vectors`."""
    return stored_vectors(index, ids)


@dataclass
class Retrieved:
    """One batch's retrieval: ids (B, kr) chunk ids, log_p_z (B, K) with the null document last
    when there is one (K = kr + 1), scores (B, kr) the raw retrieval scores (for display)."""

    ids: np.ndarray
    log_p_z: torch.Tensor
    scores: np.ndarray


class TaskRetriever(nn.Module):
    """Query tower + fixed index (or BM25) + DocStore: `forward(texts)` -> `Retrieved`.

    k counts documents including the null document (BRENT Table 6-7: k = 4, i.e. 3 retrieved + ∅);
    with `null_doc=False` all k are retrieved.
    """

    def __init__(
        self,
        store: DocStore,
        *,
        encoder: DualEncoder | None = None,
        index: DenseIndex | None = None,
        bm25=None,
        k: int = 4,
        null_doc: bool = True,
        tune: bool = False,
        max_query_length: int = 64,
    ) -> None:
        super().__init__()
        if (encoder is None or index is None) and bm25 is None:
            raise ValueError("a TaskRetriever needs an encoder and an index, or a BM25 retriever")
        self.store = store
        self.encoder = encoder
        self.index = index
        self.bm25 = bm25
        self.null_doc = bool(null_doc)
        self.k = int(k)
        self.tune = bool(tune) and encoder is not None
        self.max_query_length = int(max_query_length)
        if self.n_retrieved < 1:
            raise RalmError(f"k={k} leaves no retrieved document; use k >= 2 with a null document")
        if self.n_retrieved > len(store):
            raise RalmError(f"k={k} needs {self.n_retrieved} chunks but {store.root} has {len(store)}")
        self._docs = None  # ChunkDocs: token ids of title and chunk for the reader (dense retrieval)
        if encoder is not None:
            from ralm.realm.modeling.model import ChunkDocs

            for p in encoder.doc_tower.parameters():
                p.requires_grad_(False)
            for p in encoder.query_tower.parameters():
                p.requires_grad_(self.tune)
            self._docs = ChunkDocs(store, encoder)
            self._null = self._null_vector() if self.null_doc else None

    @property
    def n_retrieved(self) -> int:
        return self.k - int(self.null_doc)

    @torch.no_grad()
    def _null_vector(self) -> torch.Tensor:
        """(d,) the doc tower's embedding of the empty document ``[CLS] [SEP]``."""
        assert self.encoder is not None and self._docs is not None
        tower = self.encoder.doc_tower
        dev = next(tower.parameters()).device
        was = tower.training
        tower.eval()
        v = tower(**{k: t.to(dev) for k, t in self._docs.empty_batch().items()})[0].float().cpu()
        tower.train(was)
        return v

    def _scale(self, s: torch.Tensor) -> torch.Tensor:
        assert self.encoder is not None
        return self.encoder.scale_scores(s)

    def forward(self, queries: Sequence[str]) -> Retrieved:
        """Top `n_retrieved` chunks and log p(z|x) for each query text."""
        kr = self.n_retrieved
        if self.encoder is None:
            res = self.bm25.search_text(list(queries), kr)
            scores = torch.as_tensor(np.asarray(res.scores, dtype=np.float32))
            null = torch.zeros(len(queries)) if self.null_doc else None
            return Retrieved(np.asarray(res.ids), doc_log_probs(scores, null), np.asarray(res.scores))
        tower = self.encoder.query_tower
        dev = next(tower.parameters()).device
        tok = tower.tokenizer(
            list(queries),
            truncation=True,
            max_length=min(self.max_query_length, self.encoder.config.max_length),
            padding=True,
            return_tensors="pt",
        )
        keep = ["input_ids", "attention_mask"] + (["token_type_ids"] if tower.uses_token_types else [])
        with torch.set_grad_enabled(self.tune and torch.is_grad_enabled()):
            q = tower(**{k: tok[k].to(dev) for k in keep if k in tok})  # (B, d)
        assert self.index is not None
        res = self.index.search(q.detach().float().cpu().numpy(), kr)
        ids = np.asarray(res.ids, dtype=np.int64)
        d = torch.from_numpy(doc_vectors(self.index, ids)).view(len(ids), kr, -1).to(dev)  # (B, kr, d)
        with torch.autocast(dev.type, enabled=False):  # scores in float32 (log p(z|x) is a softmax of them)
            q = q.float()
            scores = self._scale(torch.einsum("bd,bkd->bk", q, d.float()))
            null = self._scale(q @ self._null.to(dev)) if self._null is not None else None
        return Retrieved(ids, doc_log_probs(scores, null), scores.detach().cpu().numpy())

    # -- chunk tokens for the reader
    def reader_docs(self, ids: np.ndarray) -> list[list[tuple[list[int], list[int]]]]:
        """Per query, (title ids, body ids) of its retrieved chunks, then ([], []) for ∅ when used.

        Token ids come from the DocStore (built with the reader's tokenizer, checked at load)."""
        out = []
        for row in np.asarray(ids):
            if self._docs is not None:
                docs = [self._docs.reader_doc(int(i)) for i in row]
            else:
                docs = [([], self.store.input_ids(int(i)).tolist()) for i in row]
            if self.null_doc:
                docs.append(([], []))
            out.append(docs)
        return out


def join_docs(
    x_ids: Sequence[Sequence[int]],
    x_types: Sequence[Sequence[int]] | None,
    docs: Sequence[Sequence[tuple[Sequence[int], Sequence[int]]]],
    sep_id: int,
    pad_id: int,
    max_length: int,
) -> dict[str, torch.Tensor]:
    """Reader rows ``x title [SEP] body [SEP]`` for every input b and its K documents (row b*K + k).

    x_ids: per input its full token ids with special tokens (``[CLS] ... [SEP]``), unpadded.
    x_types: per input its token type ids (None: all 0). The document part has type 1.
    docs: per input K (title ids, body ids) without special tokens; ([], []) is the null document.
    max_length: longest row; a document is cut (body end first, then title) to fit; x never is.

    Returns (B*K, L) long tensors input_ids, attention_mask, token_type_ids; x sits at positions
    0..len(x)-1 of each of its rows, so per-position outputs of x line up across documents.

    Example: x [CLS] a [SEP], doc ([t], [b1, b2]), max_length 7 -> [CLS] a [SEP] t [SEP] b1 [SEP].
    """
    rows: list[tuple[list[int], list[int]]] = []
    for b, x in enumerate(x_ids):
        x = list(x)
        types = list(x_types[b]) if x_types is not None else [0] * len(x)
        budget = max_length - len(x) - 2
        if budget < 0:
            raise ValueError(f"input of {len(x)} tokens leaves no room for a document in {max_length}")
        for title, body in docs[b]:
            title = list(title)[:budget]
            body = list(body)[: budget - len(title)]
            d = [*title, sep_id, *body, sep_id]
            rows.append((x + d, types + [1] * len(d)))
    return pad_rows(rows, pad_id)


def pad_rows(rows: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """(ids, type ids) rows -> right-padded (N, L) input_ids, attention_mask, token_type_ids.

    Example: pad_rows([([1, 2], [0, 0]), ([3], [0])], 0)["input_ids"] -> [[1, 2], [3, 0]].
    """
    L = max(len(r[0]) for r in rows)
    n = len(rows)
    out = {
        "input_ids": torch.full((n, L), pad_id, dtype=torch.long),
        "attention_mask": torch.zeros((n, L), dtype=torch.long),
        "token_type_ids": torch.zeros((n, L), dtype=torch.long),
    }
    for i, (ids, types) in enumerate(rows):
        out["input_ids"][i, : len(ids)] = torch.tensor(list(ids))
        out["attention_mask"][i, : len(ids)] = 1
        out["token_type_ids"][i, : len(ids)] = torch.tensor(list(types))
    return out
