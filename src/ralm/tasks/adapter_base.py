"""The shared part of every task adapter (`ralm.tasks.adapters`, `ralm.tasks.openqa`): `Item` (one
model input) and `Adapter` (batching x rows with or without retrieved documents, the forward, and
the marginal over documents). The pipeline is described in `ralm.tasks.adapters`."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

from ralm.tasks.retrieval import TaskRetriever, join_docs, marginalize, pad_rows

__all__ = ["Adapter", "Item"]


@dataclass
class Item:
    """One model input: x ids/types (unpadded, special tokens included), the retrieval query text,
    the training target (task-specific) and where it came from (example index)."""

    ids: list[int]
    types: list[int]
    query: str
    target: Any
    example: int
    extra: dict = field(default_factory=dict)


class Adapter:
    """Shared machinery: batching x rows with or without retrieved documents, marginalising."""

    task = ""

    def __init__(self, tokenizer, model, labels: list[str] | None, *, max_length: int, doc_length: int = 128):
        self.tokenizer = tokenizer
        self.model = model
        self.labels = labels
        self.label2id = {lab: i for i, lab in enumerate(labels or [])}
        self.max_length = int(max_length)
        self.doc_length = int(doc_length)
        self.with_types = "token_type_ids" in inspect.signature(model.forward).parameters and (
            getattr(model.config, "type_vocab_size", 2) >= 2
        )

    # -- the shared forward
    def run(self, items: list[Item], retriever: TaskRetriever | None):
        """(model output over B*K rows, log p(z|x) (B, K), K, retrieved ids or None)."""
        B = len(items)
        tok = self.tokenizer
        dev = next(self.model.parameters()).device
        if retriever is None:
            batch = pad_rows([(it.ids, it.types) for it in items], tok.pad_token_id)
            log_p_z, K, ids = torch.zeros(B, 1, device=dev), 1, None
        else:
            r = retriever([it.query for it in items])
            docs = retriever.reader_docs(r.ids)
            limit = max(len(it.ids) for it in items) + self.doc_length
            batch = join_docs(
                [it.ids for it in items],
                [it.types for it in items],
                docs,
                tok.sep_token_id,
                tok.pad_token_id,
                min(limit, self.model_max_positions()),
            )
            log_p_z, K, ids = r.log_p_z.to(dev), r.log_p_z.shape[1], r.ids
        if not self.with_types:
            batch.pop("token_type_ids")
        out = self.model(**{k: v.to(dev) for k, v in batch.items()})
        return out, log_p_z, K, ids

    def model_max_positions(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 512) or 512)

    def x_length(self, items: list[Item]) -> int:
        return max(len(it.ids) for it in items)

    # -- what each task defines
    def encode(self, examples: list) -> list[Item]:
        raise NotImplementedError

    def log_probs(self, out, items: list[Item], K: int) -> torch.Tensor:
        """(B, K, ...) log p(y|z, x) for every input and document."""
        raise NotImplementedError

    def loss(self, items: list[Item], retriever: TaskRetriever | None) -> torch.Tensor:
        out, lpz, K, _ = self.run(items, retriever)
        return self.nll(lpz, self.log_probs(out, items, K), items)

    def nll(self, lpz: torch.Tensor, lp: torch.Tensor, items: list[Item]) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def marginal(self, items: list[Item], retriever: TaskRetriever | None) -> tuple[torch.Tensor, Any]:
        out, lpz, K, ids = self.run(items, retriever)
        return marginalize(lpz, self.log_probs(out, items, K)), ids

    def predict(self, examples: list, items: list[Item], retriever, batch_size: int) -> dict[str, Any]:
        raise NotImplementedError

    def score(self, examples: list, predictions: dict[str, Any]) -> dict[str, float]:
        raise NotImplementedError
