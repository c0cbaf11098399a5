"""The REALM/BRENT model: retriever (query and document towers) + null document + reader.

One training step for a batch of masked queries x (REALM §3, BRENT §3.1-3.2):

1. the live query tower embeds x: q (B, d), with gradient;
2. the MIPS index (built from an earlier snapshot of the doc tower, see `ralm.realm.refresh`)
   returns the top k_r chunks for q, never the query's own source chunk;
3. the live document tower re-embeds those chunks, with gradient: D (B, k_r, d);
4. scores f(x, z) = q . D (divided by sqrt(d) when the encoder config says so, BRENT) and the
   null document's score give log p(z|x) over k = k_r + 1 documents (null last);
5. the reader scores log p(y|z, x) for each ``[CLS] x [SEP] title [SEP] body [SEP]`` (a masked
   LM), or for each ``[bos] title body x_masked target`` (a causal LM generating the masked spans,
   `ralm.realm.causal_reader`);
6. log p(y|x) = logsumexp_z [log p(z|x) + log p(y|z,x)]; its gradient reaches the reader and,
   through log p(z|x), both towers (and the learned null vector).

Null document (`null_doc`):

* "empty" (the default): the document tower's embedding of the empty document ``[CLS] [SEP]``,
  recomputed with gradient each step (REALM; BRENT's released code). It lives in the same space
  as every other document, so its initial score is on the scale of the retrieved documents'
  scores, whatever the backbone; it costs one extra doc-tower row per step.
* "zeros": a learned vector initialised to zeros (BRENT §3.2): score q . v, which starts at 0
  regardless of the query; cheaper, but its starting share of p(z|x) depends on how large the
  retrieved documents' scores happen to be for the backbone.
* "none": no null document (the ablation of BRENT Figure 3); k documents are all retrieved.

The reader's view of the null document is always the empty document: ``[CLS] x [SEP] [SEP]``.

What the query tower sees (`query_masks`): "hide" (the default) leaves the [MASK] positions out
of its attention mask, so the query vector is made of the visible words only; "keep" feeds the
masked sequence as it is (REALM). Measured on the English sample with the MiniLM towers
(mean pooling, 64-token chunks, ~19% of tokens masked), "keep" makes every masked query look
alike: 8% of the top-3 chunks come from the query's own article and 1.9% of the masked spans
occur in them, against 62% and 15.6% with "hide" (benchmarks/README.md). A CLS-pooled,
ICT-warmed retriever suffers less; REALM relied on that warm start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ralm.corpus.docstore import DocStore
from ralm.errors import RalmError
from ralm.realm.marginal import doc_log_probs, marginal_log_likelihood
from ralm.realm.masking import IGNORE_INDEX
from ralm.realm.options import NULL_DOCS, QUERY_MASKS
from ralm.realm.reader import Reader, build_reader_inputs
from ralm.retrieval.embed import DocInputs
from ralm.retrieval.encoders import DualEncoder

__all__ = ["NULL_DOCS", "ChunkDocs", "RealmModel", "RealmOutput"]


class ChunkDocs:
    """Token ids of DocStore chunks as the doc tower and the reader see them.

    `tower_batch(ids)`: padded ``[CLS] title [SEP] chunk [SEP]`` (B, T) tensors for the doc tower
    (truncated to the encoder's max_length). `reader_doc(i)`: (title ids, chunk ids) for
    `build_reader_inputs`. Titles are tokenized once, per article.
    """

    def __init__(self, store: DocStore, encoder: DualEncoder, titles: bool = True) -> None:
        self.store = store
        self.inputs = DocInputs(encoder.doc_tower, store, encoder.config.max_length, titles=titles)

    def __len__(self) -> int:
        return len(self.store)

    def tower_batch(self, ids: np.ndarray) -> dict[str, torch.Tensor]:
        return self.inputs.batch(np.asarray(ids, dtype=np.int64))

    def empty_batch(self) -> dict[str, torch.Tensor]:
        """The doc tower's input for the empty document: ``[CLS] [SEP]`` (1, 2)."""
        tpl = self.inputs.template
        return tpl.collate(
            [tpl.build(None, np.zeros(0, dtype=np.int64), 4)], self.inputs.tower.uses_token_types
        )

    def title_ids(self, i: int) -> np.ndarray:
        a = int(self.inputs.article[i])
        if a < 0 or not len(self.inputs.title_ids):
            return np.zeros(0, dtype=np.int64)
        return self.inputs.title_ids[a]

    def reader_doc(self, i: int) -> tuple[list[int], list[int]]:
        return self.title_ids(int(i)).tolist(), self.store.input_ids(int(i)).tolist()


@dataclass
class RealmOutput:
    """What one forward pass gives, for B queries and K documents (null last when present).

    log_p_y: (B,) log p(y|x), the joint over each query's masked tokens.
    log_p_z: (B, K) log p(z|x). log_p_y_given_z: (B, K) log p(y|z,x).
    n_masked: (B,) masked tokens per query. doc_ids: (B, k_r) retrieved chunk ids (numpy).
    answers_found: (B,) numpy, masked tokens per query that occur in some retrieved chunk (title
    or body): how often retrieval can bring the answer at all (REALM's reader can only copy those).
    """

    log_p_y: torch.Tensor
    log_p_z: torch.Tensor | None
    log_p_y_given_z: torch.Tensor | None
    n_masked: torch.Tensor
    doc_ids: np.ndarray | None = None
    answers_found: np.ndarray | None = None

    def loss(self) -> torch.Tensor:
        """Mean negative log-likelihood per masked token: -Σ_b log p(y_b|x_b) / Σ_b n_b."""
        return -self.log_p_y.sum() / self.n_masked.sum().clamp(min=1)


class RealmModel(nn.Module):
    """Dual encoder + null document + reader; `encoder` None makes the MLM-only baseline.

    `forward(batch, search)`: `batch` from `MaskingCollator` (input_ids/attention_mask/labels
    (B, Lq), source_ids (B,)); `search(q_vectors (B, d) float32 numpy, source_ids (B,), k_r)` ->
    (B, k_r) chunk ids, never a query's own source id (see `ralm.realm.refresh`).
    """

    def __init__(
        self,
        reader: Reader,
        encoder: DualEncoder | None = None,
        docs: ChunkDocs | None = None,
        *,
        k: int = 8,
        null_doc: str = "empty",
        reader_max_length: int = 288,
        query_masks: str = "hide",
    ) -> None:
        super().__init__()
        if null_doc not in NULL_DOCS:
            raise RalmError(f"null_doc {null_doc!r}: choose one of {', '.join(NULL_DOCS)}")
        self.reader = reader
        self.encoder = encoder
        self.docs = docs
        self.null_doc = null_doc
        self.k = int(k)
        self.reader_max_length = int(reader_max_length)
        if encoder is not None:
            if docs is None:
                raise ValueError("a retrieval model needs `docs` (ChunkDocs of the knowledge corpus)")
            if self.n_retrieved < 1:
                raise RalmError(f"k={k} leaves no retrieved document; use k >= 2 with a null document")
            self.null_vector = nn.Parameter(torch.zeros(encoder.dim)) if null_doc == "zeros" else None
        if query_masks not in QUERY_MASKS:
            raise RalmError(f"query_masks {query_masks!r}: choose one of {', '.join(QUERY_MASKS)}")
        self.query_masks = query_masks
        self.sep_id = int(reader_tokenizer_id(docs, "sep_token_id")) if docs is not None else None
        self.mask_id = int(reader_tokenizer_id(docs, "mask_token_id")) if docs is not None else None

    @property
    def retrieval(self) -> bool:
        return self.encoder is not None

    @property
    def n_retrieved(self) -> int:
        """Documents taken from the index per query: k - 1 with a null document, else k."""
        return self.k - (0 if self.null_doc == "none" else 1)

    def _scale(self, s: torch.Tensor) -> torch.Tensor:
        assert self.encoder is not None
        return self.encoder.scale_scores(s)

    def embed_queries(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(B, d) query vectors of the masked queries ``[CLS] x [SEP]``, with gradient.

        With `query_masks="hide"` the [MASK] positions are left out of the query tower's
        attention mask (and so of its pooling): the tower sees the query's visible words only.
        """
        assert self.encoder is not None
        am = batch["attention_mask"]
        if self.query_masks == "hide":
            am = am * (batch["input_ids"] != self.mask_id).to(am.dtype)
        return self.encoder.query_tower(batch["input_ids"], am)

    def null_score(self, q: torch.Tensor) -> torch.Tensor | None:
        """(B,) score of the null document for query vectors q (B, d), or None without one."""
        if self.null_doc == "none":
            return None
        if self.null_doc == "zeros":
            v = self.null_vector
        else:
            assert self.docs is not None and self.encoder is not None
            dev = q.device
            v = self.encoder.doc_tower(**{k: t.to(dev) for k, t in self.docs.empty_batch().items()})[0]
        return self._scale(q @ v.to(q.dtype))

    @property
    def causal(self) -> bool:
        """Whether the reader is a causal LM (`ralm.realm.causal_reader`) rather than a masked LM."""
        return getattr(self.reader, "kind", "mlm") == "causal"

    def reader_only(self, batch: Mapping[str, torch.Tensor]) -> RealmOutput:
        """The reader alone on ``[CLS] x [SEP]`` (a causal reader: closed-book, no document): the
        MLM-only model, and BRENT's extracted reader."""
        if self.causal:
            return RealmOutput(self.reader.closed_book(batch), None, None, self.reader.n_target(batch))
        labels = batch["labels"]
        lp = self.reader.log_p_y_given_z(
            {k: batch[k] for k in ("input_ids", "attention_mask", "labels")}, labels.shape[0], 1
        )[:, 0]
        return RealmOutput(lp, None, None, (labels != IGNORE_INDEX).sum(1))

    def forward(self, batch: Mapping[str, torch.Tensor], search=None) -> RealmOutput:
        labels = batch["labels"]
        if self.encoder is None:  # MLM-only
            return self.reader_only(batch)
        if search is None:
            raise ValueError("a retrieval model needs `search` to find documents")
        assert self.docs is not None
        B, kr = labels.shape[0], self.n_retrieved
        q = self.embed_queries(batch)  # (B, d)
        qn, src = q.detach().float().cpu().numpy(), batch["source_ids"].cpu().numpy()
        if getattr(search, "wants_query_ids", False):  # hybrid candidates read the visible query words
            found = search(qn, src, kr, query_ids=batch["input_ids"].cpu().numpy())
        else:
            found = search(qn, src, kr)
        doc_ids = np.asarray(found, dtype=np.int64)
        dev = q.device
        d = self.encoder.doc_tower(
            **{k: t.to(dev) for k, t in self.docs.tower_batch(doc_ids.ravel()).items()}
        )
        scores = self._scale(torch.einsum("bd,bkd->bk", q, d.view(B, kr, -1)))
        log_p_z = doc_log_probs(scores, self.null_score(q))
        if self.causal:  # the chunks' text, read in the LM's own tokens; the null document is none at all
            rows = [[*row, -1] for row in doc_ids.tolist()] if self.null_doc != "none" else doc_ids.tolist()
            lpyz = self.reader.log_p_y_given_docs(batch, rows)
            return RealmOutput(
                marginal_log_likelihood(log_p_z, lpyz.to(log_p_z.dtype)),
                log_p_z,
                lpyz,
                self.reader.n_target(batch),
                doc_ids,
                self.reader.answers_found(batch, doc_ids),
            )
        n_masked = (labels != IGNORE_INDEX).sum(1)
        docs = [[self.docs.reader_doc(i) for i in row] for row in doc_ids]
        if self.null_doc != "none":
            docs = [row + [([], [])] for row in docs]
        K = len(docs[0])
        rin = build_reader_inputs(
            batch["input_ids"].cpu(), labels.cpu(), docs, self.sep_id, self.pad_id, self.reader_max_length
        )
        lpyz = self.reader.log_p_y_given_z({k: t.to(dev) for k, t in rin.items()}, B, K)
        return RealmOutput(
            marginal_log_likelihood(log_p_z, lpyz.to(log_p_z.dtype)),
            log_p_z,
            lpyz,
            n_masked,
            doc_ids,
            answers_found(labels.cpu(), docs),
        )

    @property
    def pad_id(self) -> int:
        return int(reader_tokenizer_id(self.docs, "pad_token_id"))


def answers_found(labels: torch.Tensor, docs: list[list[tuple[list[int], list[int]]]]) -> np.ndarray:
    """(B,) masked tokens of each query (labels (B, L), -100 elsewhere) found in its documents.

    Example: labels [[-100, 7, 9]], docs [[([7], [1, 2]), ([], [3])]] -> [1] (7 is in a title, 9 nowhere).
    """
    out = np.zeros(len(docs), dtype=np.int64)
    for b, row in enumerate(docs):
        seen: set[int] = set()
        for title, body in row:
            seen.update(title)
            seen.update(body)
        y = labels[b][labels[b] != IGNORE_INDEX].tolist()
        out[b] = sum(t in seen for t in y)
    return out


def reader_tokenizer_id(docs: ChunkDocs | None, attr: str) -> int:
    """A special token id of the doc tower's tokenizer (the reader shares the tokenizer)."""
    if docs is None:
        raise ValueError("no documents")
    v = getattr(docs.inputs.tower.tokenizer, attr, None)
    if v is None:
        raise RalmError(
            f"the tokenizer has no {attr.removesuffix('_id')}; REALM needs [CLS]/[SEP]/[PAD]/[MASK]"
        )
    return int(v)
