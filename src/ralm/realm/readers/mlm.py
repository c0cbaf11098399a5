"""REALM's knowledge-augmented encoder ("reader") for the MLM objective (REALM §3.2).

Each query x (already masked, see `ralm.realm.masking.mlm`) is paired with each of its K retrieved
documents z and fed to a masked LM as ``[CLS] x [SEP] z_title [SEP] z_body [SEP]``
(join_BERT(x, z_title, z_body)); token type 0 covers the query segment (incl. its [CLS]/[SEP]),
1 the document part. The null document ∅ has an empty title and body: ``[CLS] x [SEP] [SEP]``.
The reader then gives log p(y|z,x) = Σ_j log p(y_j|z,x) over the masked positions j.

The query is never truncated; a document that does not fit in `max_length` is cut from the end of
its body (then of its title). Since the query comes first, the query's labels keep their positions.

Left out: the extractive span reader of REALM's open-QA fine-tuning (§3.2, START/END heads).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from ralm.realm.masking.mlm import IGNORE_INDEX

__all__ = ["Reader", "build_reader_inputs"]

logger = logging.getLogger(__name__)

Doc = tuple[Sequence[int], Sequence[int]]  # (title_ids, body_ids), no special tokens


def _query_length(row: torch.Tensor, sep_id: int) -> int:
    """Length of ``[CLS] x [SEP]`` in a padded query row: up to and including its first [SEP]."""
    seps = (row[1:] == sep_id).nonzero()
    if len(seps) == 0:
        raise ValueError("query row has no [SEP] after [CLS]")
    return int(seps[0]) + 2


def build_reader_inputs(
    query_ids: torch.Tensor,
    query_labels: torch.Tensor,
    docs: Sequence[Sequence[Doc]],
    sep_id: int,
    pad_id: int,
    max_length: int,
) -> dict[str, torch.Tensor]:
    """Join every query with each of its K documents: ``[CLS] x [SEP] title [SEP] body [SEP]``.

    Args:
        query_ids: (B, Lq) ``[CLS] x [SEP]`` then `pad_id` (as `MaskingCollator` makes them).
        query_labels: (B, Lq) original ids at masked positions, -100 elsewhere.
        docs: per query, K documents as ``(title_ids, body_ids)`` token id lists without special
            tokens; the null document is ``([], [])``. Every query must have the same K.
        sep_id, pad_id: the tokenizer's [SEP] and padding ids.
        max_length: longest joined sequence; documents are truncated (body end first) to fit.

    Returns:
        dict of (B*K, L) long tensors ``input_ids``, ``attention_mask``, ``token_type_ids``,
        ``labels`` (query labels in every document row, -100 on the document part and padding),
        row ``b*K + k`` for query b and document k; L is the longest joined row (<= max_length).

    Example: query ``[CLS] a [SEP]``, doc ``([t], [b1, b2])``, max_length 7 ->
    ``[CLS] a [SEP] t [SEP] b1 [SEP]``.
    """
    if query_ids.shape != query_labels.shape or query_ids.dim() != 2:
        raise ValueError(
            f"query_ids and query_labels must both be (B, Lq), got {tuple(query_ids.shape)} "
            f"and {tuple(query_labels.shape)}"
        )
    B = query_ids.shape[0]
    if len(docs) != B:
        raise ValueError(f"docs has {len(docs)} entries for {B} queries")
    K = len(docs[0]) if B else 0
    if any(len(d) != K for d in docs):
        raise ValueError(f"every query needs the same number of documents, got {[len(d) for d in docs]}")

    rows: list[tuple[list[int], list[int], list[int]]] = []  # (ids, type ids, labels)
    for b in range(B):
        lq = _query_length(query_ids[b], sep_id)
        q_ids = query_ids[b, :lq].tolist()
        q_labels = query_labels[b, :lq].tolist()
        budget = max_length - lq - 2  # document tokens that fit next to the query and two [SEP]s
        if budget < 0:
            raise ValueError(
                f"query of {lq} tokens leaves no room for a document within max_length={max_length}"
            )
        for title, body in docs[b]:
            title = list(title)[:budget]
            body = list(body)[: budget - len(title)]
            d_ids = [*title, sep_id, *body, sep_id]
            rows.append((q_ids + d_ids, [0] * lq + [1] * len(d_ids), q_labels + [IGNORE_INDEX] * len(d_ids)))

    L = max((len(r[0]) for r in rows), default=0)
    n = len(rows)
    out = {
        "input_ids": torch.full((n, L), pad_id, dtype=torch.long),
        "attention_mask": torch.zeros((n, L), dtype=torch.long),
        "token_type_ids": torch.zeros((n, L), dtype=torch.long),
        "labels": torch.full((n, L), IGNORE_INDEX, dtype=torch.long),
    }
    for i, (ids, types, labels) in enumerate(rows):
        m = len(ids)
        out["input_ids"][i, :m] = torch.tensor(ids)
        out["attention_mask"][i, :m] = 1
        out["token_type_ids"][i, :m] = torch.tensor(types)
        out["labels"][i, :m] = torch.tensor(labels)
    return out


class Reader(nn.Module):
    """The knowledge-augmented encoder: a masked LM scoring log p(y|z,x) for each (x, z) pair."""

    def __init__(self, mlm: nn.Module):
        super().__init__()
        self.mlm = mlm

    @classmethod
    def from_pretrained(cls, model_dir, **kwargs) -> Reader:
        """Load any ``AutoModelForMaskedLM``. A BERT encoder saved without an MLM head (like the
        bundled MiniLM) gets a decoder tied to its word embeddings and a freshly initialised
        transform: expected, and logged here."""
        from ralm.models.encoder import load_masked_lm

        mlm, missing = load_masked_lm(model_dir, **kwargs)
        if missing:
            logger.info(
                "Reader %s: %d weights not in the checkpoint were freshly initialised (an encoder "
                "without an MLM head; expected before pre-training): %s",
                model_dir,
                len(missing),
                ", ".join(sorted(missing)[:8]) + (" ..." if len(missing) > 8 else ""),
            )
        return cls(mlm)

    def _split(self) -> tuple[nn.Module, nn.Module] | None:
        """(encoder, MLM head) when the model is one base encoder plus one head module (BERT,
        RoBERTa, XLM-R and their kin), else None."""
        if not hasattr(self, "_split_cache"):
            base = getattr(self.mlm, getattr(self.mlm, "base_model_prefix", ""), None)
            heads = [m for _, m in self.mlm.named_children() if m is not base]
            self._split_cache = (base, heads[0]) if base is not None and len(heads) == 1 else None
        return self._split_cache

    def masked_logits(
        self, inputs: Mapping[str, torch.Tensor], rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        """(M, V) vocabulary logits at positions (rows[i], cols[i]) only.

        The vocabulary projection costs about as much as the whole of a small encoder when it runs
        on every position (L x H x V); only ~15% of the query positions are masked, so the head
        runs on those alone when the model splits into encoder + head (the same numbers as
        ``mlm(**inputs).logits[rows, cols]``, tested), else on everything.
        """
        split = self._split()
        if split is None:
            return self.mlm(**inputs).logits[rows, cols]
        base, head = split
        hidden = base(**inputs).last_hidden_state  # (N, L, H)
        return head(hidden[rows, cols])

    def log_p_y_given_z(
        self, batch: Mapping[str, torch.Tensor], B: int, K: int, *, per_token: bool = False
    ) -> torch.Tensor:
        """log p(y|z,x) = Σ_j log p(y_j|z,x) over the masked positions, for each query and document.

        Args:
            batch: output of `build_reader_inputs` ((B*K, L) tensors incl. ``labels``).
            B, K: number of queries and of documents per query.
            per_token: give each masked position's log p(y_j|z,x) instead of the sum: (B, K, L), 0
                where nothing is masked (the query comes first, so position j is the same masked
                token in all K rows of a query: REALM's per-token marginal reads it so).

        Returns:
            (B, K) float tensor (0 for a row with no masked position), differentiable w.r.t. the reader.

        Example: ``reader.log_p_y_given_z(build_reader_inputs(q, lab, docs, 102, 0, 128), B, K)``.
        """
        labels = batch["labels"]
        if labels.shape[0] != B * K:
            raise ValueError(f"batch has {labels.shape[0]} rows, expected B*K = {B * K}")
        inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        rows, cols = (labels != IGNORE_INDEX).nonzero(as_tuple=True)
        picked = self.masked_logits(inputs, rows, cols)  # (M, V), never (B*K, L, V) log-probs
        token_lp = torch.log_softmax(picked.to(torch.promote_types(picked.dtype, torch.float32)), dim=-1)
        token_lp = token_lp.gather(1, labels[rows, cols].unsqueeze(1)).squeeze(1)
        if per_token:
            grid = torch.zeros(labels.shape, dtype=token_lp.dtype, device=token_lp.device)
            return grid.index_put((rows, cols), token_lp).view(B, K, -1)
        per_row = torch.zeros(B * K, dtype=token_lp.dtype, device=token_lp.device).index_add(
            0, rows, token_lp
        )
        return per_row.view(B, K)
