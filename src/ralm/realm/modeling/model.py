"""The REALM/BRENT model: retriever (query and document towers) + null document + reader.

One training step for a batch of masked queries x (REALM §3, BRENT §3.1-3.2):

1. the live query tower embeds x: q (B, d), with gradient;
2. the MIPS index (built from an earlier snapshot of the doc tower, see `ralm.realm.refresh.sync`)
   returns the top k_r chunks for q, never the query's own source chunk;
3. the live document tower re-embeds those chunks, with gradient: D (B, k_r, d);
4. scores f(x, z) = q . D (divided by sqrt(d) when the encoder config says so, BRENT) and the
   null document's score give log p(z|x) over k = k_r + 1 documents (null last);
5. the reader scores log p(y|z, x) for each ``[CLS] x [SEP] title [SEP] body [SEP]`` (a masked
   LM), or for each ``[bos] title body x_masked target`` (a causal LM generating the masked spans,
   `ralm.realm.readers.causal`);
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
* "logit": no vector at all: the null document scores the mean of the query's retrieved scores
  plus one learned offset (`ralm.realm.modeling.prior`), so it starts level with a typical chunk and can
  win where no chunk helps.
* "none": no null document (the ablation of BRENT Figure 3); k documents are all retrieved.

How p(z|x) is made and trained (issue 45's levers, each a `PretrainConfig` setting):

* `score_scale = "learned"`: a learned log-scale on the scores, so training can sharpen p(z|x)
  (`ralm.realm.modeling.prior`).
* `marginal = "span"`: one marginal per masked span (a causal reader) or per masked token (a
  masked LM, as REALM's code), summed, instead of one marginal for the whole target
  (`span_marginal_log_likelihood`).
* `reader_backprop_top = m`: every document is scored, but the reader's gradient comes only from
  the m documents with the largest posterior and the null document; the rest are scored without
  gradient. The loss, and the gradient that reaches the retriever, are the same as with every
  document (the values are the same); the reader's backward pass shrinks to m + 1 rows a query.
* `retriever_train = "query"`: the document tower (and with it the index) is frozen, only the
  query tower learns: no re-embedding, no stale index; "none" freezes both towers.
* `retriever_loss = "distill"`: the retriever learns from Atlas's perplexity distillation,
  KL(softmax(log p(y|z,x) / tau) || p(z|x)), instead of the marginal's gradient; the reader still
  learns from the marginal (with p(z|x) held fixed).
* `retriever_loss = "answer"`: the same KL, with a target that needs no reader: 5 nats times the
  share of the query's masked spans a retrieved chunk holds (case-folded text; the null document 0),
  `ralm.realm.training.answer_queries`'s distant supervision at every step on the step's own candidates.
  A query none of whose chunks holds its spans adds nothing. Causal reader only (its
  spans have text); the reader learns from the marginal with p(z|x) held fixed.
* `answer_queries = N` (the trainer's): N more masked queries a step that only the retriever reads
  (`answer_query_loss`): searched, given the answer target, and with `answer_negatives =
  "in_batch_zero"` (or "in_batch") each one's softmax also over the other queries' chunks.
  `answer_spans = "salient"` makes both answer targets count the salient spans alone.
* `reader_train = "freeze"`: the reader only scores the candidates, once, without gradient, and the
  retriever (with the score scale and null logit) learns from those scores: a warm start of the
  towers from what the reader can use, at the cost of a forward pass a step.

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
from ralm.realm.masking.mlm import IGNORE_INDEX
from ralm.realm.modeling.answer_target import answer_target
from ralm.realm.modeling.candidates import in_batch_rows
from ralm.realm.modeling.marginal import (
    distillation_loss,
    marginal_log_likelihood,
    posterior,
    span_marginal_log_likelihood,
)
from ralm.realm.modeling.prior import RetrievalPrior
from ralm.realm.options import (
    ANSWER_NEGATIVES,
    ANSWER_SPANS,
    MARGINALS,
    NULL_DOCS,
    QUERY_MASKS,
    READER_TRAIN,
    RETRIEVER_LOSSES,
    RETRIEVER_TRAIN,
)
from ralm.realm.readers.mlm import Reader, build_reader_inputs
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
    aux: (B,) an extra loss per query that the trainer adds to the NLL (the perplexity-distillation
    KL with `retriever_loss = "distill"`), or None.
    """

    log_p_y: torch.Tensor
    log_p_z: torch.Tensor | None
    log_p_y_given_z: torch.Tensor | None
    n_masked: torch.Tensor
    doc_ids: np.ndarray | None = None
    answers_found: np.ndarray | None = None
    aux: torch.Tensor | None = None

    def loss(self) -> torch.Tensor:
        """Mean negative log-likelihood per masked token: -Σ_b log p(y_b|x_b) / Σ_b n_b."""
        return -self.log_p_y.sum() / self.n_masked.sum().clamp(min=1)


class RealmModel(nn.Module):
    """Dual encoder + null document + reader; `encoder` None makes the MLM-only baseline.

    `forward(batch, search)`: `batch` from `MaskingCollator` (input_ids/attention_mask/labels
    (B, Lq), source_ids (B,)); `search(q_vectors (B, d) float32 numpy, source_ids (B,), k_r)` ->
    (B, k_r) chunk ids, never a query's own source id (see `ralm.realm.refresh.sync`).
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
        score_scale: str = "fixed",
        null_logit_init: float = 0.0,
        marginal: str = "joint",
        reader_backprop_top: int = 0,
        retriever_train: str = "both",
        retriever_loss: str = "marginal",
        distill_tau: float = 1.0,
        reader_train: str = "train",
        answer_spans: str = "all",
    ) -> None:
        super().__init__()
        for name, value, allowed in (
            ("null_doc", null_doc, NULL_DOCS),
            ("marginal", marginal, MARGINALS),
            ("retriever_train", retriever_train, RETRIEVER_TRAIN),
            ("retriever_loss", retriever_loss, RETRIEVER_LOSSES),
            ("reader_train", reader_train, READER_TRAIN),
            ("answer_spans", answer_spans, ANSWER_SPANS),
        ):
            if value not in allowed:
                raise RalmError(f"{name} {value!r}: choose one of {', '.join(allowed)}")
        if reader_backprop_top < 0:
            raise RalmError(f"reader_backprop_top={reader_backprop_top}: must be >= 0 (0 = every document)")
        self.reader = reader
        if retriever_loss == "answer" and encoder is not None and not self.causal:
            raise RalmError("retriever_loss = answer needs a causal reader (it reads the masked spans' text)")
        self.encoder = encoder
        self.docs = docs
        self.null_doc = null_doc
        self.k = int(k)
        self.reader_max_length = int(reader_max_length)
        self.marginal = marginal
        self.reader_backprop_top = int(reader_backprop_top)
        self.retriever_train = retriever_train
        self.retriever_loss = retriever_loss
        self.distill_tau = float(distill_tau)
        self.answer_spans = answer_spans
        self.reader_train = reader_train
        if reader_train == "freeze":
            if encoder is None:
                raise RalmError(
                    "reader_train = freeze needs retrieval (mode realm): nothing else would learn"
                )
            self._freeze_reader()
        if encoder is not None:
            if docs is None:
                raise ValueError("a retrieval model needs `docs` (ChunkDocs of the knowledge corpus)")
            if self.n_retrieved < 1:
                raise RalmError(f"k={k} leaves no retrieved document; use k >= 2 with a null document")
            self.null_vector = nn.Parameter(torch.zeros(encoder.dim)) if null_doc == "zeros" else None
            self.prior = RetrievalPrior(
                score_scale, null_logit=null_doc == "logit", null_logit_init=null_logit_init
            )
            self._freeze_towers()
        if query_masks not in QUERY_MASKS:
            raise RalmError(f"query_masks {query_masks!r}: choose one of {', '.join(QUERY_MASKS)}")
        self.query_masks = query_masks
        self.sep_id = int(reader_tokenizer_id(docs, "sep_token_id")) if docs is not None else None
        self.mask_id = int(reader_tokenizer_id(docs, "mask_token_id")) if docs is not None else None

    @property
    def retrieval(self) -> bool:
        return self.encoder is not None

    @property
    def doc_tower_frozen(self) -> bool:
        """Whether the document tower (and so the index) stays as it started."""
        return self.retriever_train != "both"

    def _freeze_towers(self) -> None:
        """`retriever_train`: "query" freezes the doc tower (its own copy when the towers share
        weights), "none" both towers; frozen towers stay in eval mode (no dropout)."""
        assert self.encoder is not None
        if self.retriever_train == "both":
            return
        enc = self.encoder
        if enc.doc_tower is enc.query_tower and self.retriever_train == "query":
            import copy

            enc.doc_tower = copy.deepcopy(enc.query_tower)
        frozen = [enc.doc_tower] if self.retriever_train == "query" else [enc.doc_tower, enc.query_tower]
        for tower in frozen:
            tower.requires_grad_(False)
            tower.eval()

    def _freeze_reader(self) -> None:
        """`reader_train = "freeze"`: no reader weight learns and the reader stays in eval mode."""
        self.reader.requires_grad_(False)
        self.reader.eval()

    def train(self, mode: bool = True) -> RealmModel:
        super().train(mode)
        if self.encoder is not None and self.retriever_train != "both":
            self._freeze_towers()  # frozen towers stay in eval mode
        if self.reader_train == "freeze":
            self._freeze_reader()
        return self

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
        """(B,) score of the null document for query vectors q (B, d) on the towers' scale (before the
        prior's learned scale), or None when it has no vector ("logit": the prior scores it; "none")."""
        if self.null_doc in ("none", "logit"):
            return None
        if self.null_doc == "zeros":
            v = self.null_vector
        else:
            assert self.docs is not None and self.encoder is not None
            v = self.doc_vectors(self.docs.empty_batch(), q.device)[0]
        return self._scale(q @ v.to(q.dtype))

    def doc_vectors(self, tower_batch: Mapping[str, torch.Tensor], dev: torch.device) -> torch.Tensor:
        """(N, d) document vectors of a doc-tower batch: with gradient, or without when the tower is
        frozen (the same numbers as the index's, which it built)."""
        assert self.encoder is not None
        inputs = {k: t.to(dev) for k, t in tower_batch.items()}
        if self.doc_tower_frozen:
            with torch.no_grad():
                return self.encoder.doc_tower(**inputs)
        return self.encoder.doc_tower(**inputs)

    def log_p_z(self, batch: Mapping[str, torch.Tensor], search) -> tuple[torch.Tensor, np.ndarray]:
        """(log p(z|x) (B, K) with the null document last, the retrieved chunk ids (B, k_r)) of a
        batch of masked queries: the query tower, the search, the doc tower and the prior."""
        assert self.encoder is not None and self.docs is not None
        kr = self.n_retrieved
        q = self.embed_queries(batch)  # (B, d)
        doc_ids = self._search(search, q, batch, kr)
        return self.prior_over(q, doc_ids), doc_ids

    @staticmethod
    def _search(search, q: torch.Tensor, batch: Mapping[str, torch.Tensor], kr: int) -> np.ndarray:
        """(B, kr) chunk ids `search` finds for query vectors q (B, d) of `batch`'s masked queries."""
        qn, src = q.detach().float().cpu().numpy(), batch["source_ids"].cpu().numpy()
        if getattr(search, "wants_query_ids", False):  # hybrid candidates read the visible query words
            found = search(qn, src, kr, query_ids=batch["input_ids"].cpu().numpy())
        else:
            found = search(qn, src, kr)
        return np.asarray(found, dtype=np.int64)

    def answer_query_loss(
        self, batch: Mapping[str, torch.Tensor], search, negatives: str = "in_batch_zero"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The answer loss of masked queries that the reader never reads (`answer_queries`).

        The query tower embeds `batch`'s B queries, `search` finds each one's k - 1 chunks, and the
        prior scores them with the null document (last) as a REALM step would; with `negatives =
        "in_batch"` or "in_batch_zero" each query's softmax also holds the other queries' chunks
        (`in_batch_rows`; the learned null's score is still the mean of its own k - 1 plus b). The
        target is `answer_target`'s (`ANSWER_NATS` times the share of the query's masked spans a chunk
        holds; the null 0) over its own k - 1 and the null; the other queries' chunks get target
        probability 0 (DPR's in-batch negatives; `cached_distill`'s `negatives = "in_batch"`) with
        "in_batch_zero", and with "in_batch" so do those of them that do not hold one of the query's
        spans (one that does is a positive, its nats as for an own chunk). The loss is
        Atlas's distillation KL at `distill_tau`, so the gradient reaches the query tower (and the
        doc tower, the scale and the null logit when they learn) and never the reader.

        Returns (B,) KL in nats and (B,) bool live: the row ranks something (some chunk holds a span
        and another does not). A query with no live row carries no signal; average over the live ones.
        """
        assert self.encoder is not None and self.docs is not None
        if not self.causal:
            raise RalmError("answer_queries needs a causal reader (the target reads the masked spans' text)")
        if negatives not in ANSWER_NEGATIVES:
            raise RalmError(f"answer_negatives {negatives!r}: choose one of {', '.join(ANSWER_NEGATIVES)}")
        kr = self.n_retrieved
        q = self.embed_queries(batch)
        own = self._search(search, q, batch, kr)  # (B, kr)
        if negatives == "own":
            rows, pad = own, np.zeros(own.shape, dtype=bool)
        else:
            rows, pad = in_batch_rows(own)
        uniq, inv = np.unique(rows, return_inverse=True)  # each chunk through the doc tower once
        vecs = self.doc_vectors(self.docs.tower_batch(uniq), q.device).to(q.dtype)  # (U, d)
        d = vecs[torch.from_numpy(inv.reshape(rows.shape)).to(q.device)]  # (B, R, d)
        log_p_z = self.prior_over(q, rows, d, pad=pad, own=kr)
        pad_t = torch.from_numpy(pad).to(q.device)
        has_null = self.null_doc != "none"
        if has_null:
            pad_t = torch.cat([pad_t, torch.zeros_like(pad_t[:, :1])], dim=1)
        target, _ = answer_target(
            self.reader, batch, [[*r, -1] if has_null else r for r in rows.tolist()], spans=self.answer_spans
        )
        target = target.to(log_p_z.device, log_p_z.dtype)
        # the other queries' chunks get target probability 0 (log -inf), not 0 nats: next to 5 nats
        # for a chunk that holds the span, 0 nats on 140 in-batch chunks would hand them half the
        # target's mass, spread evenly, and pull every query toward their mean (measured: after 37
        # steps 100 held-out queries had 4 distinct chunks in their top 3). With "in_batch" a chunk of
        # theirs that holds the span keeps its nats.
        others = target[:, kr : rows.shape[1]]
        if negatives == "in_batch_zero":
            others.fill_(-torch.inf)
        else:
            others.masked_fill_(others <= 0, -torch.inf)
        target = target.masked_fill(pad_t, -torch.inf)  # a left-out place gets no target mass
        kept = target > -torch.inf
        live = target.masked_fill(~kept, -torch.inf).amax(1) > target.masked_fill(~kept, torch.inf).amin(1)
        return distillation_loss(log_p_z, target, self.distill_tau), live

    def prior_over(
        self,
        q: torch.Tensor,
        doc_ids: np.ndarray,
        doc_vecs: torch.Tensor | None = None,
        pad: np.ndarray | None = None,
        own: int | None = None,
    ) -> torch.Tensor:
        """log p(z|x) (B, k_r [+1]) over chunks `doc_ids` (B, k_r) for query vectors q (B, d): the doc
        tower, the towers' score scale, the prior's learned scale and the null document (last).
        `doc_vecs` (B, k_r, d): those chunks' vectors computed before (a frozen doc tower's), so the
        doc tower is not run again. `pad` (B, k_r) bool: places left out of the softmax (-inf).
        `own`: the row's first `own` chunks are the query's own candidates, the rest in-batch ones;
        the learned null scores the mean of the own ones (default: of every chunk)."""
        assert self.encoder is not None and self.docs is not None
        B, kr = doc_ids.shape
        if doc_vecs is None:
            doc_vecs = self.doc_vectors(self.docs.tower_batch(np.asarray(doc_ids).ravel()), q.device)
        d = doc_vecs.to(q.device, q.dtype).reshape(B, kr, -1)
        scores = self.prior.scaled(self._scale(torch.einsum("bd,bkd->bk", q, d)))
        if pad is not None:
            scores = scores.masked_fill(torch.from_numpy(pad).to(q.device), -torch.inf)
        null = self.null_score(q)
        return self.prior.log_probs(
            scores,
            None if null is None else self.prior.scaled(null),
            null_from=None if own is None else scores[:, :own],
        )

    @property
    def causal(self) -> bool:
        """Whether the reader is a causal LM (`ralm.realm.readers.causal`) rather than a masked LM."""
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
        log_p_z, doc_ids = self.log_p_z(batch, search)
        if self.causal:  # the chunks' text, read in the LM's own tokens; the null document is none at all
            rows = [[*row, -1] for row in doc_ids.tolist()] if self.null_doc != "none" else doc_ids.tolist()
            lp = self._reader_scores(log_p_z, lambda docs: self._causal_scores(batch, docs), rows)
            mask = (batch["lm_span_kind"] >= 0).to(lp.device) if self.marginal == "span" else None
            answer = (
                answer_target(self.reader, batch, rows, spans=self.answer_spans)
                if self.retriever_loss == "answer"
                else None
            )
            return self._output(
                log_p_z,
                lp,
                mask,
                self.reader.n_target(batch),
                doc_ids,
                self.reader.answers_found(batch, doc_ids),
                answer,
            )
        n_masked = (labels != IGNORE_INDEX).sum(1)
        docs = [[self.docs.reader_doc(i) for i in row] for row in doc_ids]
        if self.null_doc != "none":
            docs = [row + [([], [])] for row in docs]
        lp = self._reader_scores(log_p_z, lambda d: self._mlm_scores(batch, d), docs)
        mask = None
        if self.marginal == "span":  # per masked token: the query's labels, the same in each of its rows
            mask = (labels != IGNORE_INDEX).to(lp.device)
            lp = lp[:, :, : mask.shape[1]]
        return self._output(log_p_z, lp, mask, n_masked, doc_ids, answers_found(labels.cpu(), docs))

    def _causal_scores(self, batch, docs: list[list[int]]) -> torch.Tensor:
        """The causal reader's (B, K) log p(y|x,z), or (B, K, S) per span with the per-span marginal."""
        return self.reader.log_p_y_given_docs(batch, docs, per_span=self.marginal == "span")

    def _mlm_scores(self, batch, docs: list[list[tuple[list[int], list[int]]]]) -> torch.Tensor:
        """The masked-LM reader's (B, K) log p(y|x,z), or (B, K, L) per masked token."""
        assert self.docs is not None
        dev = batch["labels"].device
        B, K = len(docs), len(docs[0])
        rin = build_reader_inputs(
            batch["input_ids"].cpu(),
            batch["labels"].cpu(),
            docs,
            self.sep_id,
            self.pad_id,
            self.reader_max_length,
        )
        inputs = {k: t.to(dev) for k, t in rin.items()}
        return self.reader.log_p_y_given_z(inputs, B, K, per_token=self.marginal == "span")

    def _reader_scores(self, log_p_z: torch.Tensor, score, rows: list[list]) -> torch.Tensor:
        """`score(rows)` for every document of every query; with `reader_backprop_top = m` (and a
        gradient to compute) all rows are scored without gradient first, then the m documents of
        largest posterior and the null document again with gradient, their values put in place.
        The values are those of one pass over every row, so the loss and the gradient that reaches
        p(z|x) are too; the reader's gradient comes from the m + 1 rows alone."""
        m = self.reader_backprop_top
        K = len(rows[0])
        has_null = self.null_doc != "none"
        if not m or not torch.is_grad_enabled() or m >= K - int(has_null) or self.reader_train == "freeze":
            return score(rows)  # a frozen reader builds no graph: one pass, the retriever's gradient kept
        with torch.no_grad():
            lp_all = score(rows)
            if lp_all.dim() == 3:  # per span / token: the expected number of spans each document explains
                w = torch.softmax(log_p_z.detach().unsqueeze(2) + lp_all, dim=1)
                weight = (w * (lp_all != 0).any(1, keepdim=True)).sum(2)
            else:
                weight = posterior(log_p_z.detach(), lp_all)
            kr = K - int(has_null)
            pick = weight[:, :kr].topk(m, dim=1).indices  # (B, m)
            if has_null:
                pick = torch.cat([pick, torch.full_like(pick[:, :1], K - 1)], dim=1)
        chosen = [[rows[b][j] for j in pick[b].tolist()] for b in range(len(rows))]
        lp_sel = score(chosen)  # (B, m [+1][, S]) with gradient
        idx = pick.to(lp_sel.device)
        if lp_sel.dim() == 3:
            idx = idx.unsqueeze(2).expand(-1, -1, lp_sel.shape[2])
        return lp_all.to(lp_sel.dtype).scatter(1, idx, lp_sel)

    def _output(self, log_p_z, lp, span_mask, n_masked, doc_ids, found, answer=None) -> RealmOutput:
        """The marginal (joint or per span) and the distillation term from the reader's scores, or
        from `answer` ((B, K) target, (B,) live rows: `answer_target`) with retriever_loss = answer."""
        joint = lp.sum(2) if lp.dim() == 3 else lp  # (B, K) log p(y|x,z)
        lpz = log_p_z.detach() if self.retriever_loss in ("distill", "answer") else log_p_z
        lpz = lpz.to(lp.dtype)
        if span_mask is not None:
            log_p_y = span_marginal_log_likelihood(lpz, lp, span_mask)
        else:
            log_p_y = marginal_log_likelihood(lpz, joint)
        aux = None
        if self.retriever_loss == "distill":
            aux = distillation_loss(log_p_z, joint, self.distill_tau)
        elif self.retriever_loss == "answer" and answer is not None:
            target, live = (t.to(log_p_z.device) for t in answer)
            aux = distillation_loss(log_p_z, target, self.distill_tau) * live.to(log_p_z.dtype)
        return RealmOutput(log_p_y, log_p_z, joint, n_masked, doc_ids, found, aux)

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
